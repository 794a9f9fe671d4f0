package main

import (
	"errors"
	"runtime"
	"strings"
	"testing"
)

func TestDoctor(t *testing.T) {
	ts := newTestServer(t)
	res := ts.do("GET", "/v1/doctor?force=true", nil)
	if res.status != 200 {
		t.Fatalf("%d %s", res.status, res.body)
	}
	m := res.json(t)
	if m["version"] != version || m["node"] != runtime.Version() || m["platform"] != runtime.GOOS+"/"+runtime.GOARCH ||
		m["agentHome"] != ts.s.cfg.Home || m["firstRun"] != true {
		t.Fatalf("report %s", res.body)
	}
	for _, k := range []string{"providers", "models", "warnings"} {
		if _, ok := m[k].([]any); !ok {
			t.Fatalf("%s is not a list: %s", k, res.body)
		}
	}
	sel, ok := m["selection"].(map[string]any)
	if !ok {
		t.Fatalf("selection: %s", res.body)
	}
	for _, k := range []string{"provider", "providerReason", "isolated", "model", "modelReason"} {
		if _, ok := sel[k]; !ok {
			t.Fatalf("selection lacks %s: %s", k, res.body)
		}
	}
	if !strings.Contains(string(res.body), "no AGENT_TOKEN is set") {
		t.Fatalf("no token-less warning: %s", res.body)
	}

	withToken := newTestServer(t, func(c *config) { c.Token = "t" })
	res = withToken.do("GET", "/v1/doctor", nil, "Authorization", "Bearer t")
	if res.status != 200 || strings.Contains(string(res.body), "AGENT_TOKEN") {
		t.Fatalf("token warning with a token set: %s", res.body)
	}
}

func TestDoctorDiskWarning(t *testing.T) {
	cases := []struct {
		name         string
		avail, total uint64
		err          error
		want         string
	}{
		{"plenty", 50 << 30, 100 << 30, nil, ""},
		{"few bytes left", 100 << 20, 100 << 30, nil, "full disk: 100 MB free"},
		{"small percentage", 1 << 30, 1000 << 30, nil, "full disk"},
		{"unknown platform", 0, 0, nil, ""},
		{"unreadable", 0, 0, errors.New("boom"), "cannot read the free space"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := diskWarning("/data", func(string) (uint64, uint64, error) { return tc.avail, tc.total, tc.err })
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("warning %q, want %q", got, tc.want)
			}
		})
	}
	ts := newTestServer(t)
	ts.s.diskFree = func(string) (uint64, uint64, error) { return 1 << 20, 1 << 40, nil }
	if res := ts.do("GET", "/v1/doctor", nil); !strings.Contains(string(res.body), "full disk") {
		t.Fatalf("doctor did not warn: %s", res.body)
	}
	// The real disk answers.
	if _, _, err := diskFree(t.TempDir()); err != nil {
		t.Fatal(err)
	}
}

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
	tok := newTestServer(t, func(c *config) { c.Token = "t" })
	res := tok.do("GET", "/", nil, "Authorization", "Bearer t")
	if !strings.Contains(string(res.body), "requires a token") {
		t.Fatalf("token note missing")
	}
}
