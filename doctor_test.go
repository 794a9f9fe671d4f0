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

	withToken := newTestServer(t, func(c *testSetup) { c.Token = "a-long-enough-token" })
	res = withToken.do("GET", "/v1/doctor", nil, "Authorization", "Bearer a-long-enough-token")
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
