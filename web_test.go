package main

import (
	"strings"
	"testing"
)

func TestDashboard(t *testing.T) {
	ts := newTestServer(t)
	cases := []struct {
		path   string
		status int
		ctype  string
	}{
		{"/", 200, "text/html"},
		{"/index.html", 200, "text/html"},
		{"/runs/run_123", 200, "text/html"},  // deep link
		{"/agents/a/edit", 200, "text/html"}, // deep link
		{"/assets/app.js", 404, "application/json"},
		{"/favicon.ico", 404, "application/json"},
		{"/../../etc/passwd", 200, "text/html"}, // cleaned to a deep link, never a file outside
	}
	for _, tc := range cases {
		res := ts.do("GET", tc.path, nil)
		if res.status != tc.status || !strings.HasPrefix(res.header.Get("Content-Type"), tc.ctype) {
			t.Fatalf("%s: %d %s", tc.path, res.status, res.header.Get("Content-Type"))
		}
		if tc.status == 404 && res.errCode(t) != codeRouteNotFound {
			t.Fatalf("%s: %s", tc.path, res.body)
		}
		if tc.status == 200 {
			body := string(res.body)
			for _, want := range []string{"/v1/doctor", "/v1/agents", "/v1/events", "no token", version} {
				if !strings.Contains(body, want) {
					t.Fatalf("%s: placeholder lacks %q", tc.path, want)
				}
			}
			if strings.Contains(body, "{{") {
				t.Fatalf("unfilled marker in the page")
			}
		}
	}
	// HEAD works like GET without a body; other methods are route errors.
	if res := ts.do("HEAD", "/", nil); res.status != 200 || len(res.body) != 0 {
		t.Fatalf("HEAD: %d", res.status)
	}
	if res := ts.do("POST", "/some/page", nil); res.status != 404 || res.errCode(t) != codeRouteNotFound {
		t.Fatalf("POST deep link: %d", res.status)
	}
	tok := newTestServer(t, func(c *testSetup) { c.Token = "t" })
	res := tok.do("GET", "/", nil, "Authorization", "Bearer t")
	if !strings.Contains(string(res.body), "requires a token") {
		t.Fatalf("token note missing")
	}
}
