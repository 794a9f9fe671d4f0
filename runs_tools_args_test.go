package main

// Tests of the tool arguments issue 30 added (shell stdin; write_file append and mode; search_files glob
// and ignoreCase; maxBytes on read_file, fetch_url and http_request; read_file's camelCase line range),
// run against a real machine: the local provider always, docker with AGENT_TEST_DOCKER=1.

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// machineToolHarness runs tools on a real machine of provider prov, as an agent whose computer it is.
func machineToolHarness(t *testing.T, prov string, mut func(*AgentSpec), machine ...map[string]any) *toolEnv {
	t.Helper()
	requireProvider(t, prov)
	e := newTestServer(t, withHostEnv)
	spec := map[string]any{"provider": prov, "image": testImage}
	for _, m := range machine {
		for k, v := range m {
			spec[k] = v
		}
	}
	m := e.create(spec)
	sp := testSpec("tooly", mut)
	ar := newActiveRun(e.s.runs, sp, &runParams{Input: []ModelMessage{textMessage("user", "x")}, MaxSteps: 1, ComputerID: m.ID}, nil)
	t.Cleanup(func() { ar.cancel(nil); ar.stopTimer() })
	return &toolEnv{ar: ar, delta: func(string, string) {}}
}

func TestToolArgumentsOnAMachine(t *testing.T) {
	for _, prov := range []string{"local", "docker"} {
		t.Run(prov, func(t *testing.T) {
			env := machineToolHarness(t, prov, func(sp *AgentSpec) { sp.Guardrails.DenyCommands = []string{"rm -rf *"} })
			must := func(out string, err error) string {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
				return out
			}
			// shell stdin reaches the command; the policy still applies with stdin.
			if out := must(runTool(t, env, "shell", map[string]any{"command": "tr a-z A-Z", "stdin": "hello stdin\n"})); !strings.Contains(out, "HELLO STDIN") {
				t.Fatalf("stdin: %q", out)
			}
			if _, err := runTool(t, env, "shell", map[string]any{"command": "rm -rf x", "stdin": "y"}); err == nil || asAPIError(err).Code != codeExecDenied {
				t.Fatalf("policy with stdin: %v", err)
			}

			// write_file append: onto an existing file, and creating an absent one.
			must(runTool(t, env, "write_file", map[string]any{"path": "log.txt", "content": "one\n"}))
			must(runTool(t, env, "write_file", map[string]any{"path": "log.txt", "content": "two\n", "append": true}))
			must(runTool(t, env, "write_file", map[string]any{"path": "sub/new.txt", "content": "fresh\n", "append": true}))
			if out := must(runTool(t, env, "shell", map[string]any{"command": "cat log.txt sub/new.txt"})); !strings.Contains(out, "one\ntwo\nfresh\n") {
				t.Fatalf("append: %q", out)
			}
			// write_file mode: a script made executable runs; the number form works; special bits and junk are refused.
			must(runTool(t, env, "write_file", map[string]any{"path": "run.sh", "content": "#!/bin/sh\necho ran\n", "mode": "0755"}))
			if out := must(runTool(t, env, "shell", map[string]any{"command": "./run.sh; stat -c %a run.sh"})); !strings.Contains(out, "ran\n755") {
				t.Fatalf("mode: %q", out)
			}
			must(runTool(t, env, "write_file", map[string]any{"path": "ro.txt", "content": "x", "mode": 640}))
			if out := must(runTool(t, env, "shell", map[string]any{"command": "stat -c %a ro.txt"})); !strings.Contains(out, "640") {
				t.Fatalf("numeric mode: %q", out)
			}
			for _, bad := range []any{"4755", "rwx", "0999", 1e9} {
				if _, err := runTool(t, env, "write_file", map[string]any{"path": "bad.txt", "content": "x", "mode": bad}); err == nil || asAPIError(err).Code != codeToolError {
					t.Fatalf("mode %v: %v", bad, err)
				}
			}

			// search_files glob and ignoreCase (ripgrep when the machine has it, else the walk).
			must(runTool(t, env, "write_file", map[string]any{"path": "s/a.go", "content": "// NEEDLE in go\n"}))
			must(runTool(t, env, "write_file", map[string]any{"path": "s/b.txt", "content": "needle in text\n"}))
			if out := must(runTool(t, env, "search_files", map[string]any{"pattern": "needle", "path": "s", "glob": "*.go", "ignoreCase": true})); !strings.Contains(out, "/work/s/a.go:1:// NEEDLE") || strings.Contains(out, "b.txt") {
				t.Fatalf("glob+ignoreCase: %q", out)
			}
			if out := must(runTool(t, env, "search_files", map[string]any{"pattern": "needle", "path": "s", "glob": "*.go"})); out != "no matches" {
				t.Fatalf("case-sensitive glob: %q", out)
			}

			// read_file camelCase range and maxBytes.
			var lines strings.Builder
			for i := 1; i <= 200; i++ {
				lines.WriteString("line of text number " + strings.Repeat("x", i%7) + "\n")
			}
			must(runTool(t, env, "write_file", map[string]any{"path": "big.txt", "content": lines.String()}))
			if out := must(runTool(t, env, "read_file", map[string]any{"path": "big.txt", "startLine": 3, "endLine": 4})); !strings.Contains(out, "[lines 3-4 of 200]") || strings.Count(out, "\n") != 3 {
				t.Fatalf("camelCase range: %q", out)
			}
			out := must(runTool(t, env, "read_file", map[string]any{"path": "big.txt", "maxBytes": 300}))
			if len(out) > 400 || !strings.Contains(out, "maxBytes") || !strings.Contains(out, "startLine") {
				t.Fatalf("maxBytes read (%d bytes): %q", len(out), out)
			}
		})
	}
}

// The walk that stands in for ripgrep honours glob and ignoreCase the same way.
func TestWalkSearchGlobAndCase(t *testing.T) {
	env, _ := toolHarness(t, nil)
	for p, c := range map[string]string{"w/a.go": "Needle\n", "w/b.txt": "needle\n", "w/d/c.go": "NEEDLE\n"} {
		if _, err := runTool(t, env, "write_file", map[string]any{"path": p, "content": c}); err != nil {
			t.Fatal(err)
		}
	}
	out, err := walkSearch(context.Background(), env, "cmp", "/work/w", regexp.MustCompile("(?i)needle"), searchOpts{max: 10, glob: "*.go"})
	if err != nil || !strings.Contains(out, "/work/w/a.go:1:Needle") || !strings.Contains(out, "/work/w/d/c.go:1:NEEDLE") || strings.Contains(out, "b.txt") {
		t.Fatalf("walk: %q %v", out, err)
	}
	if _, err := runTool(t, env, "search_files", map[string]any{"pattern": "x", "glob": "[bad"}); err == nil || asAPIError(err).Code != codeToolError {
		t.Fatalf("bad glob: %v", err)
	}
}

// maxBytes bounds what fetch_url and http_request return, and says so.
func TestNetworkToolsMaxBytes(t *testing.T) {
	body := strings.Repeat("abcdefghij", 1000)
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte(body))
	}))
	defer page.Close()
	u, _ := url.Parse(page.URL)
	env, _ := toolHarness(t, func(sp *AgentSpec) { sp.Computer.Network.Allow = []string{u.Hostname()} })
	for _, tool := range []string{"fetch_url", "http_request"} {
		out, err := runTool(t, env, tool, map[string]any{"url": page.URL, "maxBytes": 100})
		if err != nil || strings.Count(out, "abcdefghij") != 10 || !strings.Contains(out, "truncated at 100 of") {
			t.Fatalf("%s maxBytes: %q %v", tool, out[:min(len(out), 300)], err)
		}
		out, err = runTool(t, env, tool, map[string]any{"url": page.URL})
		if err != nil || strings.Count(out, "abcdefghij") != 1000 || strings.Contains(out, "truncated") {
			t.Fatalf("%s whole: %d bytes %v", tool, len(out), err)
		}
	}
}
