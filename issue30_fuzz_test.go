package main

import (
	"strings"
	"testing"
)

// The small parsers issue 30 added, fuzzed: none panics, and what each accepts is in its range.

func FuzzParseInfoProbe(f *testing.F) {
	f.Add("system=Linux\nos=Debian\ncpus=4\ncpuMax=150000 100000\nmemTotalKb=2048\nmemMax=max\ndiskFreeKb=1\ntool=git\n")
	f.Add("cpuMaxV1=-1 100000 \nmemMax=9223372036854771712\n=\n==\ntool=\n")
	f.Fuzz(func(t *testing.T, s string) {
		m := parseInfoProbe(s)
		tools := m["tools"].(map[string]any)
		if len(tools["missing"].([]string)) > len(probeTools) {
			t.Fatalf("missing %v", tools)
		}
		if l, ok := m["cpuLimit"].(float64); ok && l <= 0 {
			t.Fatalf("cpuLimit %v from %q", l, s)
		}
	})
}

func FuzzFileModeArg(f *testing.F) {
	for _, s := range []string{"0755", "755", "0o644", "4755", "rwx", "", "0999", "-1", "07777"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, v := range []any{s, float64(len(s) * 111)} {
			mode, given, err := fileModeArg(v)
			if err == nil && (!given || mode > 0o777) {
				t.Fatalf("%v: mode %o given %v", v, mode, given)
			}
		}
	})
}

func FuzzCLISizesAndTimeouts(f *testing.F) {
	for _, s := range []string{"512m", "2g", "1.5GiB", "2048", "0", "-1", "1e309", "lots", "90s", "2m", "30", "0.5s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if mb, err := parseSizeMB(s); err == nil && (mb < 1 || mb > 1<<30) {
			t.Fatalf("size %q -> %d", s, mb)
		}
		if sec, err := parseSeconds(s); err == nil && sec < 1 {
			t.Fatalf("timeout %q -> %d", s, sec)
		}
		if f, id := splitCursorPath(s); !strings.HasPrefix(s, f) || (id != "" && !strings.HasSuffix(s, "#"+id)) {
			t.Fatalf("cursor path %q -> %q %q", s, f, id)
		}
	})
}
