package main

// Serving the embedded dashboard (web.go): the single-page-app fallback, content types, ETag and 304,
// gzip, HEAD, the page public with a token while /v1 is not, and the vendored xterm.js with its licence.
// The page in a real browser is web_browser_test.go.

import (
	"bytes"
	"compress/gzip"
	"io"
	"io/fs"
	"net/http"
	"strings"
	"testing"
)

func TestDashboard(t *testing.T) {
	ts := newTestServer(t)
	index := ts.do("GET", "/", nil)
	if index.status != 200 || !strings.HasPrefix(index.header.Get("Content-Type"), "text/html") || !bytes.Contains(index.body, []byte(`src="/js/app.js"`)) {
		t.Fatalf("GET /: %d %s", index.status, index.header.Get("Content-Type"))
	}
	cases := []struct {
		path   string
		status int
		ctype  string
	}{
		{"/index.html", 200, "text/html"},
		{"/runs/run_123", 200, "text/html"},  // deep link
		{"/agents/a/edit", 200, "text/html"}, // deep link
		{"/computers", 200, "text/html"},
		{"/app.css", 200, "text/css"},
		{"/js/app.js", 200, "text/javascript"},
		{"/vendor/xterm/xterm.mjs", 200, "text/javascript"},
		{"/vendor/xterm/xterm.css", 200, "text/css"},
		{"/vendor/xterm/LICENSE", 200, "text/plain"},
		{"/assets/app.js", 404, "application/json"},
		{"/favicon.ico", 404, "application/json"}, // the page declares a data: icon
		{"/js/nope.js", 404, "application/json"},
		{"/../../etc/passwd", 200, "text/html"}, // cleaned to a deep link, never a file outside
		{"/v1/nope", 404, "application/json"},
	}
	for _, tc := range cases {
		res := ts.do("GET", tc.path, nil)
		if res.status != tc.status || !strings.HasPrefix(res.header.Get("Content-Type"), tc.ctype) {
			t.Fatalf("%s: %d %s", tc.path, res.status, res.header.Get("Content-Type"))
		}
		if tc.status == 404 && res.errCode(t) != codeRouteNotFound {
			t.Fatalf("%s: %s", tc.path, res.body)
		}
		if tc.ctype == "text/html" && !bytes.Equal(res.body, index.body) {
			t.Fatalf("%s: the fallback is not the same bytes as /", tc.path)
		}
		if tc.status == 200 && (res.header.Get("ETag") == "" || res.header.Get("X-Content-Type-Options") != "nosniff") {
			t.Fatalf("%s: headers %v", tc.path, res.header)
		}
	}
	// /v1 is always the JSON envelope, even when a browser asks for HTML.
	if res := ts.do("GET", "/v1/nope", nil, "Accept", "text/html"); res.status != 404 || res.errCode(t) != codeRouteNotFound {
		t.Fatalf("/v1 with Accept: text/html: %d %s", res.status, res.body)
	}
	// HEAD works like GET without a body; other methods are route errors.
	if res := ts.do("HEAD", "/", nil); res.status != 200 || len(res.body) != 0 {
		t.Fatalf("HEAD: %d", res.status)
	}
	if res := ts.do("POST", "/some/page", nil); res.status != 404 || res.errCode(t) != codeRouteNotFound {
		t.Fatalf("POST deep link: %d", res.status)
	}
	// With a token the page and its assets are public (they hold no data); /v1 is not.
	tok := newTestServer(t, func(c *testSetup) { c.Token = "dashboard-token-0123456789" })
	for _, p := range []string{"/", "/runs/run_1", "/js/app.js"} {
		if res := tok.do("GET", p, nil); res.status != 200 {
			t.Fatalf("%s with a token configured, none sent: %d", p, res.status)
		}
	}
	if res := tok.do("GET", "/v1/agents", nil); res.status != 401 {
		t.Fatalf("/v1 without the token: %d", res.status)
	}
}

func TestDashboardCaching(t *testing.T) {
	ts := newTestServer(t)
	for _, p := range []string{"/", "/runs/x", "/js/app.js", "/app.css", "/vendor/xterm/xterm.mjs"} {
		res := ts.do("GET", p, nil)
		etag := res.header.Get("ETag")
		if !strings.HasPrefix(etag, `"`) {
			t.Fatalf("%s: ETag %q", p, etag)
		}
		for _, inm := range []string{etag, "W/" + etag, `"other", ` + etag, "*"} {
			if r := ts.do("GET", p, nil, "If-None-Match", inm); r.status != 304 || len(r.body) != 0 || r.header.Get("ETag") != etag {
				t.Fatalf("%s If-None-Match %s: %d", p, inm, r.status)
			}
		}
		if r := ts.do("GET", p, nil, "If-None-Match", `"stale"`); r.status != 200 {
			t.Fatalf("%s stale etag: %d", p, r.status)
		}
	}
}

func TestDashboardGzip(t *testing.T) {
	ts := newTestServer(t)
	web, _ := fs.Sub(webFiles, "web")
	for _, p := range []string{"js/app.js", "app.css", "vendor/xterm/xterm.mjs", "index.html"} {
		want, err := fs.ReadFile(web, p)
		if err != nil {
			t.Fatal(err)
		}
		// The test client's transport would decompress silently; ask by hand.
		req, _ := http.NewRequest("GET", ts.url+"/"+p, nil)
		req.Header.Set("Accept-Encoding", "gzip, br")
		res, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.Header.Get("Content-Encoding") != "gzip" || res.Header.Get("Vary") != "Accept-Encoding" || len(body) >= len(want) {
			t.Fatalf("%s: encoding %q vary %q, %d bytes for %d", p, res.Header.Get("Content-Encoding"), res.Header.Get("Vary"), len(body), len(want))
		}
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(zr)
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: gunzipped bytes differ", p)
		}
		// No gzip for a client that does not ask, or refuses it.
		for _, ae := range []string{"", "identity", "gzip;q=0"} {
			req.Header.Set("Accept-Encoding", ae)
			res, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			plain, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.Header.Get("Content-Encoding") != "" || !bytes.Equal(plain, want) {
				t.Fatalf("%s with Accept-Encoding %q: %q", p, ae, res.Header.Get("Content-Encoding"))
			}
		}
	}
}

// TestDashboardNoThirdPartyHosts: the page must work air-gapped — no http(s) URL to another host in any
// file the page loads (the vendored xterm.js is checked for script or style loads, not for comments).
func TestDashboardNoThirdPartyHosts(t *testing.T) {
	web, _ := fs.Sub(webFiles, "web")
	fs.WalkDir(web, ".", func(p string, d fs.DirEntry, err error) error {
		if d.IsDir() || strings.HasPrefix(p, "vendor/") {
			return nil
		}
		b, _ := fs.ReadFile(web, p)
		for _, bad := range []string{"http://", "https://", "//cdn", "@import url("} {
			if bytes.Contains(b, []byte(bad)) {
				t.Errorf("%s mentions %q: the dashboard must not load anything from another host", p, bad)
			}
		}
		return nil
	})
	for _, f := range []string{"vendor/xterm/LICENSE", "vendor/xterm/xterm.mjs", "vendor/xterm/xterm.css"} {
		if _, err := fs.Stat(web, f); err != nil {
			t.Errorf("vendored %s missing", f)
		}
	}
}
