package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `agentd run FILE.yaml` runs a spec with no server (AGENT_URL points at a closed port): the agentd binary
// starts its own on a temporary data directory, with the model providers from the environment, runs the
// agent with its tools on a real machine, prints and exits like `run NAME`, and leaves nothing behind.
func TestCLIRunSpecFile(t *testing.T) {
	so := cliModel(t)
	home, tmp := t.TempDir(), t.TempDir()
	dir := t.TempDir()
	spec := filepath.Join(dir, "helper.yaml")
	os.WriteFile(spec, []byte("name: helper\nmodel: openai/gpt-4o-mini\ntools: [computer]\ncomputer:\n  provider: local\nlimits:\n  maxSteps: 4\n"), 0o644)
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "TMPDIR=" + tmp, "AGENT_URL=http://127.0.0.1:1",
		"OPENAI_API_KEY=" + e2eKey, "OPENAI_BASE_URL=" + so.URL, "OLLAMA_BASE_URL=http://127.0.0.1:1", "LMSTUDIO_BASE_URL=http://127.0.0.1:1"}
	run := func(stdin string, args ...string) cliResult { t.Helper(); return runAgentd(t, env, stdin, args...) }
	// A tool call on a real (local) machine, streamed; exit 0 on complete.
	r := run("", "run", spec, "shell please")
	if r.code != 0 || !strings.Contains(r.stdout, "from-the-tool") || !strings.Contains(r.stdout, "echo: shell please") {
		t.Fatalf("run FILE: %s", r)
	}
	// Input from stdin, --json events, the flags of run NAME.
	r = run("from stdin\n", "run", "--json", "--max-steps", "1", spec)
	if r.code != 0 || !strings.Contains(r.stdout, `"type":"run_start"`) || !strings.Contains(r.stdout, "echo: from stdin") {
		t.Fatalf("run FILE --json: %s", r)
	}
	if r := run("", "run", "--max-steps", "1", spec, "loop"); r.code != 1 || !strings.Contains(r.stderr, "ended: step_limit") {
		t.Fatalf("run FILE step limit: %s", r)
	}
	// An invalid spec: its issues, exit 1; --detach is refused (nothing would outlive the command).
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("name: Bad Name\nlimits:\n  maxSteps: 900\n"), 0o644)
	if r := run("", "run", bad, "x"); r.code != 1 || !strings.Contains(r.stderr, bad+": name: name must be lowercase") {
		t.Fatalf("run invalid FILE: %s", r)
	}
	if r := run("", "run", "--detach", spec, "x"); r.code != 2 {
		t.Fatalf("run --detach FILE: %s", r)
	}
	// Nothing left: the temporary data directories (and the local machines inside them) are gone.
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		var names []string
		for _, e := range left {
			names = append(names, e.Name())
		}
		t.Fatalf("left behind in TMPDIR: %v", names)
	}
}
