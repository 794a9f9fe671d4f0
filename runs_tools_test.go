package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// toolHarness runs tools directly against the temp-dir computer.
func toolHarness(t *testing.T, mut func(*AgentSpec)) (*toolEnv, *fakeComputer) {
	t.Helper()
	te := newTestServer(t, withFakeModel(&fakeModel{script: scriptOf()}))
	sp := testSpec("tooly", mut)
	ar := newActiveRun(te.s.runs, sp, &runParams{Input: []ModelMessage{textMessage("user", "x")}, MaxSteps: 1}, nil)
	t.Cleanup(func() { ar.cancel(nil); ar.stopTimer() })
	return &toolEnv{ar: ar, delta: func(string, string) {}}, te.comp
}

func runTool(t *testing.T, env *toolEnv, name string, args map[string]any) (string, error) {
	t.Helper()
	return toolCatalog()[name].run(context.Background(), env, args)
}

func TestFileTools(t *testing.T) {
	env, comp := toolHarness(t, nil)
	must := func(out string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	must(runTool(t, env, "write_file", map[string]any{"path": "src/a.txt", "content": "one\ntwo\nthree\nfour\n"}))
	if out := must(runTool(t, env, "read_file", map[string]any{"path": "/work/src/a.txt", "start_line": 2, "end_line": 3})); !strings.Contains(out, "[lines 2-3 of 4]") || !strings.Contains(out, "2\ttwo") || strings.Contains(out, "one") || strings.Contains(out, "four") {
		t.Fatalf("range read: %q", out)
	}
	if _, err := runTool(t, env, "read_file", map[string]any{"path": "src/a.txt", "start_line": 9}); err == nil {
		t.Fatal("read past the end")
	}
	// edit_file: no match, ambiguous, unique, replace_all.
	must(runTool(t, env, "write_file", map[string]any{"path": "e.txt", "content": "x = 1\ny = 1\n"}))
	if _, err := runTool(t, env, "edit_file", map[string]any{"path": "e.txt", "old_string": "z = 1", "new_string": "z"}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("no match: %v", err)
	}
	if _, err := runTool(t, env, "edit_file", map[string]any{"path": "e.txt", "old_string": " = 1", "new_string": " = 2"}); err == nil || !strings.Contains(err.Error(), "matches 2 places") {
		t.Fatalf("ambiguous: %v", err)
	}
	must(runTool(t, env, "edit_file", map[string]any{"path": "e.txt", "old_string": "x = 1", "new_string": "x = 9"}))
	must(runTool(t, env, "edit_file", map[string]any{"path": "e.txt", "old_string": "1", "new_string": "7", "replace_all": true}))
	if b, _ := os.ReadFile(filepath.Join(comp.dir, "work", "e.txt")); string(b) != "x = 9\ny = 7\n" {
		t.Fatalf("edited %q", b)
	}
	// list_dir recursive and bounded.
	for i := 0; i < 5; i++ {
		must(runTool(t, env, "write_file", map[string]any{"path": "src/deep/f" + string(rune('0'+i)), "content": "needle here"}))
	}
	out := must(runTool(t, env, "list_dir", map[string]any{"path": "/work", "recursive": true}))
	if !strings.Contains(out, "/work/src/deep/f4") || !strings.Contains(out, "/work/src/") {
		t.Fatalf("recursive list: %s", out)
	}
	if out := must(runTool(t, env, "list_dir", map[string]any{"recursive": true, "max_entries": 3})); !strings.Contains(out, "stopped at 3") {
		t.Fatalf("bounded list: %s", out)
	}
	// search_files finds matches (rg when present, else the walk).
	if out := must(runTool(t, env, "search_files", map[string]any{"pattern": "need+le", "path": "src"})); strings.Count(out, "needle here") != 5 || !strings.Contains(out, "/work/src/deep/f0") {
		t.Fatalf("search: %s", out)
	}
	re := mustRegexp(t, "nee")
	if out := must(walkSearch(context.Background(), env, "cmp", "/work", re, searchOpts{max: 2})); strings.Count(out, "\n") != 2 {
		t.Fatalf("bounded walk: %q", out)
	}
	// move a file and a directory; delete.
	must(runTool(t, env, "move", map[string]any{"from": "e.txt", "to": "moved/e.txt"}))
	if _, err := os.Stat(filepath.Join(comp.dir, "work", "moved", "e.txt")); err != nil {
		t.Fatal(err)
	}
	must(runTool(t, env, "move", map[string]any{"from": "src/deep", "to": "deep2"}))
	if _, err := os.Stat(filepath.Join(comp.dir, "work", "deep2", "f3")); err != nil {
		t.Fatal(err)
	}
	if _, err := runTool(t, env, "move", map[string]any{"from": "/work", "to": "/tmp/w"}); err == nil {
		t.Fatal("moved the workspace root")
	}
	must(runTool(t, env, "delete", map[string]any{"path": "deep2", "recursive": true}))
	if _, err := os.Stat(filepath.Join(comp.dir, "work", "deep2")); !os.IsNotExist(err) {
		t.Fatal("not deleted")
	}
	if _, err := runTool(t, env, "write_file", map[string]any{"path": "/etc/x", "content": "no"}); err == nil || asAPIError(err).Code != codeFSDenied {
		t.Fatalf("jail: %v", err)
	}
	if _, err := runTool(t, env, "write_file", map[string]any{"path": "../../etc/x", "content": "no"}); err == nil {
		t.Fatal("relative escape allowed")
	}
}

func TestShellToolOutputAndExpose(t *testing.T) {
	env, _ := toolHarness(t, nil)
	var deltas strings.Builder
	var mu sync.Mutex
	env.delta = func(stream, text string) { mu.Lock(); deltas.WriteString(stream + ":" + text); mu.Unlock() }
	out, err := runTool(t, env, "shell", map[string]any{"command": "echo out; echo err >&2; exit 3"})
	if err != nil || !strings.Contains(out, "out\n") || !strings.Contains(out, "[stderr]\nerr") || !strings.Contains(out, "[exit code 3]") {
		t.Fatalf("shell: %q %v", out, err)
	}
	if !strings.Contains(deltas.String(), "stdout:out") {
		t.Fatalf("deltas %q", deltas.String())
	}
	if out, err := runTool(t, env, "expose_port", map[string]any{"port": 8080}); err != nil || !strings.Contains(out, "8080") {
		t.Fatalf("expose: %q %v", out, err)
	}
	if _, err := runTool(t, env, "expose_port", map[string]any{"port": 0}); err == nil {
		t.Fatal("port 0 accepted")
	}
	if out, err := runTool(t, env, "computer_info", nil); err != nil || !strings.Contains(out, "cmp_tooly") {
		t.Fatalf("info: %q %v", out, err)
	} else if !strings.Contains(out, `"isolated":false`) || !strings.Contains(out, "use relative paths in commands") {
		t.Fatalf("a non-isolated computer must tell the model how paths behave in commands: %q", out)
	}
}

func TestFetchURLNetworkPolicy(t *testing.T) {
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/redirect":
			http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
		default:
			w.Header().Set("Content-Type", "text/html")
			w.Write([]byte(`<html><head><title>t</title><style>p{}</style></head><body><h1>Hello</h1><script>evil()</script><p>World <b>bold</b></p><ul><li>one</li></ul></body></html>`))
		}
	}))
	defer page.Close()
	u, _ := url.Parse(page.URL)

	// Loopback is refused by default.
	env, _ := toolHarness(t, nil)
	if _, err := runTool(t, env, "fetch_url", map[string]any{"url": page.URL}); err == nil || asAPIError(err).Code != codeExecDenied {
		t.Fatalf("loopback fetched: %v", err)
	}
	if _, err := runTool(t, env, "fetch_url", map[string]any{"url": "file:///etc/passwd"}); err == nil || asAPIError(err).Code != codeExecDenied {
		t.Fatalf("file scheme: %v", err)
	}
	if _, err := runTool(t, env, "fetch_url", map[string]any{"url": "http://169.254.169.254/latest/meta-data"}); err == nil || asAPIError(err).Code != codeExecDenied {
		t.Fatalf("link-local: %v", err)
	}
	// Named in computer.network.allow: allowed, HTML turned into text.
	env, _ = toolHarness(t, func(sp *AgentSpec) { sp.Computer.Network.Allow = []string{u.Hostname()} })
	out, err := runTool(t, env, "fetch_url", map[string]any{"url": page.URL})
	if err != nil || !strings.Contains(out, "Hello\nWorld bold\n- one") || strings.Contains(out, "evil") || strings.Contains(out, "p{}") {
		t.Fatalf("fetch: %q %v", out, err)
	}
	// A redirect is re-checked: allowed host → loopback name not in the allow list.
	env, _ = toolHarness(t, func(sp *AgentSpec) { sp.Computer.Network.Allow = []string{u.Hostname()} })
	target := "http://localhost:" + u.Port() + "/"
	if _, err := runTool(t, env, "fetch_url", map[string]any{"url": page.URL + "/redirect?to=" + url.QueryEscape(target)}); err == nil || asAPIError(err).Code != codeExecDenied {
		t.Fatalf("redirect to a refused host: %v", err)
	}
	// deny beats everything; mode none refuses.
	env, _ = toolHarness(t, func(sp *AgentSpec) {
		sp.Computer.Network = NetworkSpec{Mode: "full", Allow: []string{u.Hostname()}, Deny: []string{u.Hostname()}}
	})
	if _, err := runTool(t, env, "fetch_url", map[string]any{"url": page.URL}); err == nil || !strings.Contains(err.Error(), "deny") {
		t.Fatalf("deny: %v", err)
	}
	env, _ = toolHarness(t, func(sp *AgentSpec) { sp.Computer.Network = NetworkSpec{Mode: "none", Allow: []string{u.Hostname()}} })
	if _, err := runTool(t, env, "fetch_url", map[string]any{"url": page.URL}); err == nil || !strings.Contains(err.Error(), "none") {
		t.Fatalf("mode none: %v", err)
	}
	// http_request under the same policy.
	env, _ = toolHarness(t, func(sp *AgentSpec) { sp.Computer.Network.Allow = []string{"*.example.test", u.Hostname()} })
	out, err = runTool(t, env, "http_request", map[string]any{"method": "POST", "url": page.URL, "body": "x", "headers": map[string]any{"X-A": "b"}})
	if err != nil || !strings.HasPrefix(out, "HTTP 200 OK") {
		t.Fatalf("http_request: %q %v", out, err)
	}
}

func TestHTMLToText(t *testing.T) {
	got := htmlToText([]byte("<div>a<br>b</div><pre>c</pre><noscript>x</noscript>d &amp; e"))
	if got != "a\nb\nc\nd & e" {
		t.Fatalf("%q", got)
	}
}

func TestBoundOutput(t *testing.T) {
	s := strings.Repeat("é", 1000)
	out := boundOutput(s, 300)
	if len(out) > 400 || !strings.Contains(out, "elided") || !strings.HasPrefix(out, "é") || !strings.HasSuffix(out, "é") {
		t.Fatalf("%q", out)
	}
	if boundOutput("short", 300) != "short" {
		t.Fatal("short output changed")
	}
}

// A tool result over limits.maxOutputBytes is cut by the exec output's rule: what the run loop hands the
// model is exactly what an exec stream keeps of the same bytes, with the same marker.
func TestToolResultUsesTheExecTruncator(t *testing.T) {
	const max = 301 // odd, so the halves differ; the cuts fall inside two-byte characters
	env, _ := toolHarness(t, func(sp *AgentSpec) { sp.Limits.MaxOutputBytes = max })
	res := env.ar.runTool(call("c1", "shell", map[string]any{"command": "i=0; while [ $i -lt 400 ]; do printf 'é! '; i=$((i+1)); done"}))
	full := strings.Repeat("é! ", 400) + "\n[exit code 0]"
	sink := newOutputSink("stdout", max, nil, false, "", nil)
	sink.Write([]byte(full))
	sink.flush()
	want, truncated := sink.result()
	if !truncated || res.isError || res.output != want {
		t.Fatalf("tool result and exec output differ:\n tool %q\n exec %q", res.output, want)
	}
	head, rest, _ := strings.Cut(res.output, "\n…[")
	n, tail, _ := strings.Cut(rest, " bytes elided]…\n")
	if n != strconv.Itoa(len(full)-len(head)-len(tail)) || !strings.HasPrefix(full, head) || !strings.HasSuffix(full, tail) ||
		len(head) < max/2-1 || len(tail) < max/2-1 || !utf8.ValidString(res.output) {
		t.Fatalf("head %d, tail %d, elided %s of %d: %q", len(head), len(tail), n, len(full), res.output)
	}
}

func mustRegexp(t *testing.T, p string) *regexp.Regexp {
	t.Helper()
	re, err := regexp.Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	return re
}

func TestWebSearch(t *testing.T) {
	var gotKey, gotQ string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotKey, gotQ = r.Header.Get("X-Subscription-Token"), r.URL.Query().Get("q")
		w.Write([]byte(`{"web":{"results":[{"title":"Go","url":"https://go.dev","description":"The <strong>Go</strong> language"}]}}`))
	}))
	defer api.Close()
	te := newTestServer(t, withFakeModel(&fakeModel{script: scriptOf()}), withEnv(map[string]string{"BRAVE_API_KEY": "brave-key", "BRAVE_BASE_URL": api.URL}))
	sp := testSpec("searcher", func(sp *AgentSpec) { sp.Tools = []string{"web"} })
	ar := newActiveRun(te.s.runs, sp, &runParams{Input: []ModelMessage{textMessage("user", "x")}, MaxSteps: 1}, nil)
	defer ar.stopTimer()
	if !slices.Contains(ar.tools, "web_search") {
		t.Fatalf("tools %v", ar.tools)
	}
	out, err := runTool(t, &toolEnv{ar: ar}, "web_search", map[string]any{"query": "golang"})
	if err != nil || gotKey != "brave-key" || gotQ != "golang" || !strings.Contains(out, "1. Go\n   https://go.dev\n   The Go language") {
		t.Fatalf("search: %q %v (key %q q %q)", out, err, gotKey, gotQ)
	}
}

// fetch_url and http_request build a client per call; its kept-alive connection must not outlive the
// call (it would hold two goroutines and a socket with no owner for the idle timeout).
func TestFetchURLLeavesNoIdleConnection(t *testing.T) {
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	page := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok"))
	}))
	page.Config.ConnState = func(c net.Conn, s http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		switch s {
		case http.StateNew:
			open[c] = true
		case http.StateClosed, http.StateHijacked:
			delete(open, c)
		}
	}
	page.Start()
	defer page.Close()
	u, _ := url.Parse(page.URL)
	env, _ := toolHarness(t, func(sp *AgentSpec) { sp.Computer.Network.Allow = []string{u.Hostname()} })
	for _, tool := range []string{"fetch_url", "http_request"} {
		if _, err := runTool(t, env, tool, map[string]any{"url": page.URL}); err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		deadline := time.Now().Add(10 * time.Second) // far below the transport's 30 s idle timeout
		for {
			mu.Lock()
			n := len(open)
			mu.Unlock()
			if n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s left %d connection(s) open after it returned", tool, n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// The dial-time check sees through the address spellings that reach a private host.
func TestFetchURLNetworkPolicyAddressForms(t *testing.T) {
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("secret")) }))
	defer page.Close()
	u, _ := url.Parse(page.URL)
	env, _ := toolHarness(t, nil)
	for _, host := range []string{"[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "2130706433", "0x7f.1", "127.1", "localhost"} {
		out, err := runTool(t, env, "fetch_url", map[string]any{"url": "http://" + host + ":" + u.Port() + "/"})
		if err == nil || strings.Contains(out, "secret") {
			t.Errorf("%s fetched: %q", host, out)
		}
	}
}

// toolArgs: defaults stay when absent, loose types that models send are read, anything else names the argument.
func TestToolArgs(t *testing.T) {
	a := struct {
		Path string `arg:"path,required"`
		N    int    `arg:"n"`
		B    bool   `arg:"b"`
	}{N: 7}
	if err := toolArgs(map[string]any{"path": "x"}, &a); err != nil || a.Path != "x" || a.N != 7 || a.B {
		t.Fatalf("defaults: %+v %v", a, err)
	}
	if err := toolArgs(map[string]any{"path": "x", "n": "12", "b": "true"}, &a); err != nil || a.N != 12 || !a.B {
		t.Fatalf("loose types: %+v %v", a, err)
	}
	for args, want := range map[*map[string]any]string{
		{"n": 1.0}:                 `missing required argument "path"`,
		{"path": 3.0}:              `argument "path" must be a string`,
		{"path": "x", "n": 1.5}:    `argument "n" must be an integer`,
		{"path": "x", "b": 1.0}:    `argument "b" must be a boolean`,
		{"path": "x", "n": "many"}: `argument "n" must be an integer`,
	} {
		err := toolArgs(*args, &a)
		if err == nil || asAPIError(err).Code != codeToolError || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: %v, want %q", *args, err, want)
		}
	}
}
