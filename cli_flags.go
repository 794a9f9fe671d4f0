// cli_flags.go — the flag values the client commands share beyond the standard ones: repeatable
// K=V pairs and words, sizes in megabytes, timeouts in seconds.
//
// Entry points: kvFlag (--var, --env), listFlag (--allow, --package), parseSizeMB (--memory, --disk),
// parseSeconds (--timeout). Rules: a malformed value is a usage mistake (exit 2) naming the flag and
// the form it takes; no value is checked against the server's limits here (the server says so).
package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// kvFlag collects repeated K=V values; a later K replaces an earlier one.
type kvFlag map[string]string

func (f kvFlag) String() string { return "" }

func (f kvFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || strings.TrimSpace(k) == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", s)
	}
	f[k] = v
	return nil
}

// listFlag collects repeated values in order.
type listFlag []string

func (f *listFlag) String() string { return "" }

func (f *listFlag) Set(s string) error {
	if strings.TrimSpace(s) == "" {
		return fmt.Errorf("empty value")
	}
	*f = append(*f, s)
	return nil
}

// parseSizeMB reads a size as megabytes: a plain number is megabytes; k, m, g, t suffixes (with an
// optional b, ib) scale it, as docker's --memory does ("512m", "2g", "1.5GiB").
func parseSizeMB(s string) (int, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "b"), "i")
	scale := 1.0
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k':
			scale, t = 1.0/1024, t[:n-1]
		case 'm':
			t = t[:n-1]
		case 'g':
			scale, t = 1024, t[:n-1]
		case 't':
			scale, t = 1024*1024, t[:n-1]
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v <= 0 || v*scale > 1<<30 {
		return 0, fmt.Errorf("want a size such as 512m, 2g or 2048 (megabytes), got %q", s)
	}
	return max(int(v*scale+0.5), 1), nil
}

// parseSeconds reads a timeout: seconds ("30") or a Go duration ("90s", "2m").
func parseSeconds(s string) (int, error) {
	if n, err := strconv.Atoi(s); err == nil && n > 0 {
		return n, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < time.Second {
		return 0, fmt.Errorf("want seconds or a duration such as 30, 90s or 2m, got %q", s)
	}
	return int(d.Round(time.Second) / time.Second), nil
}
