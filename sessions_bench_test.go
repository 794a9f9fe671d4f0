package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestSessionsAtScale measures what BENCHMARKS.md reports: import throughput of a 100 MB ChatGPT export
// and a 50 MB Claude Code session with the peak RSS, and discovery over 2,000 sessions. It asserts only
// correctness (the figures are printed): set AGENT_BENCH_SESSIONS=1 to run it.
func TestSessionsAtScale(t *testing.T) {
	mode := os.Getenv("AGENT_BENCH_SESSIONS")
	if mode == "" {
		t.Skip("set AGENT_BENCH_SESSIONS=1 to measure imports and discovery at scale (=discover for discovery only)")
	}
	if mode != "discover" {
		measureImports(t)
	}
	discoverAtScale(t)
}

func measureImports(t *testing.T) {
	dir := t.TempDir()
	export := filepath.Join(dir, "conversations.json")
	writeChatGPTExport(t, export, 100<<20)
	claude := filepath.Join(dir, "big-session.jsonl")
	writeClaudeSession(t, claude, 50<<20)
	ts := newTestServer(t)
	for _, f := range []string{export, claude} {
		fi, _ := os.Stat(f)
		runtime.GC()
		start := time.Now()
		res := ts.do("POST", "/v1/sessions/import", map[string]any{"path": f})
		took := time.Since(start)
		if res.status != 200 {
			t.Fatalf("%s: %d %.300s", f, res.status, res.body)
		}
		t.Logf("%s: %.1f MB in %s = %.1f MB/s, peak RSS so far %d MB", filepath.Base(f), float64(fi.Size())/(1<<20), took.Round(time.Millisecond),
			float64(fi.Size())/(1<<20)/took.Seconds(), peakRSS()>>20)
	}
}

func discoverAtScale(t *testing.T) {
	// 2,000 Claude Code sessions of ~60 KB under a home.
	home := t.TempDir()
	small, _ := os.ReadFile("testdata/sessions/claude-code.jsonl")
	body := strings.Repeat(string(small), 20)
	for i := 0; i < 2000; i++ {
		p := filepath.Join(home, ".claude", "projects", fmt.Sprintf("p%02d", i%40), fmt.Sprintf("s-%04d.jsonl", i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(body), 0o644)
	}
	ss := newSessionService(sessionDeps{getenv: func(k string) string { return map[string]string{"HOME": home}[k] }, dataDir: t.TempDir()})
	for _, pass := range []string{"cold", "cached"} {
		start := time.Now()
		rows, err := ss.discover(t.Context(), "", "")
		if err != nil || len(rows) != 2000 {
			t.Fatalf("discover: %d rows, %v", len(rows), err)
		}
		t.Logf("discover over 2,000 sessions (%s): %s", pass, time.Since(start).Round(time.Millisecond))
	}
}

func peakRSS() int64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return kb << 10
		}
	}
	return 0
}

func writeChatGPTExport(t *testing.T, path string, size int64) {
	f, _ := os.Create(path)
	defer f.Close()
	w := bufio.NewWriter(f)
	w.WriteString("[")
	text := strings.Repeat("lorem ipsum dolor sit amet ", 40)
	var n int64
	for i := 0; n < size; i++ {
		if i > 0 {
			w.WriteString(",")
		}
		var b strings.Builder
		fmt.Fprintf(&b, `{"title":"conversation %d","create_time":1795000000,"current_node":"m19","id":"c%d","mapping":{`, i, i)
		for j := 0; j < 20; j++ {
			role, parent := "user", fmt.Sprintf(`"m%d"`, j-1)
			if j%2 == 1 {
				role = "assistant"
			}
			if j == 0 {
				parent = "null"
			}
			if j > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `"m%d":{"id":"m%d","message":{"author":{"role":%q},"content":{"content_type":"text","parts":[%q]}},"parent":%s,"children":[]}`, j, j, role, text, parent)
		}
		b.WriteString("}}")
		w.WriteString(b.String())
		n += int64(b.Len())
	}
	w.WriteString("]")
	w.Flush()
}

func writeClaudeSession(t *testing.T, path string, size int64) {
	f, _ := os.Create(path)
	defer f.Close()
	w := bufio.NewWriter(f)
	text := strings.Repeat("a long tool output line ", 200)
	parent := "null"
	var n int64
	for i := 0; n < size; i++ {
		uuid := fmt.Sprintf("u%d", i)
		var line string
		if i%2 == 0 {
			line = fmt.Sprintf(`{"parentUuid":%s,"isSidechain":false,"sessionId":"big","type":"user","message":{"role":"user","content":%q},"uuid":%q,"timestamp":"2026-11-20T10:00:00.000Z"}`, parent, text, uuid)
		} else {
			line = fmt.Sprintf(`{"parentUuid":%s,"isSidechain":false,"sessionId":"big","type":"assistant","message":{"id":"m%d","role":"assistant","content":[{"type":"text","text":%q}]},"uuid":%q,"timestamp":"2026-11-20T10:00:01.000Z"}`, parent, i, text, uuid)
		}
		w.WriteString(line + "\n")
		n += int64(len(line) + 1)
		parent = fmt.Sprintf("%q", uuid)
	}
	w.Flush()
}
