package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The CLI tests run the built binary against a real server on a loopback port, as a user would.

var (
	cliBinOnce sync.Once
	cliBinPath string
	cliBinErr  error
)

func cliBinary(t testing.TB) string {
	t.Helper()
	cliBinOnce.Do(func() {
		if p := os.Getenv("AGENT_TEST_AGENTD"); p != "" { // a build CI made (the README's way, or CGO_ENABLED=0)
			cliBinPath, cliBinErr = filepath.Abs(p)
			return
		}
		dir, err := os.MkdirTemp("", "agentd-cli-*")
		if err != nil {
			cliBinErr = err
			return
		}
		cliBinPath = filepath.Join(dir, "agentd")
		// The README's build, as is: `go build` with this environment, so cgo wherever a C compiler is
		// installed. It is the binary the CLI tests run and the helper the machines get (findHelperBinary
		// takes the server's own executable), as a user's would be: no static build swapped in.
		out, err := exec.Command("go", "build", "-o", cliBinPath, ".").CombinedOutput()
		if err != nil {
			cliBinErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if cliBinErr != nil {
		t.Fatal(cliBinErr)
	}
	return cliBinPath
}

type cliResult struct {
	code           int
	stdout, stderr string
}

func (r cliResult) String() string {
	return fmt.Sprintf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
}

// agentd runs the binary with AGENT_URL pointing at the test server (env adds or overrides variables).
func (te *testServer) agentd(stdin string, env []string, args ...string) cliResult {
	te.t.Helper()
	return runAgentd(te.t, append([]string{"AGENT_URL=" + te.url + "/", "HOME=" + te.s.cfg.Home, "PATH=" + os.Getenv("PATH"), "AGENT_HOME=" + te.s.cfg.Home}, env...), stdin, args...)
}

// runAgentd runs the agentd binary with exactly env and stdin, and returns its exit code and output.
func runAgentd(t testing.TB, env []string, stdin string, args ...string) cliResult {
	t.Helper()
	cmd := exec.Command(cliBinary(t), args...)
	cmd.Env = env
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return cliResult{code, out.String(), errb.String()}
}

func (te *testServer) agentdOK(args ...string) cliResult {
	te.t.Helper()
	r := te.agentd("", nil, args...)
	if r.code != 0 {
		te.t.Fatalf("agentd %v: %s", args, r)
	}
	return r
}

func mustJSON(t testing.TB, s string, into any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), into); err != nil {
		t.Fatalf("not JSON (%v): %s", err, s)
	}
}

// cliModel: "loop" always calls a tool, "hang" never answers, anything else is echoed.
func cliModel(t testing.TB) *scriptedOpenAI {
	return newScriptedOpenAI(t, func(r scriptReq) scriptReply {
		switch u := r.lastUser(); {
		case strings.Contains(u, "loop"):
			return scriptReply{calls: []ToolCall{tc(fmt.Sprintf("c%d", len(r.Messages)), "no_such_tool", map[string]any{"n": len(r.Messages)})}}
		case strings.Contains(u, "hang"):
			return scriptReply{hang: true}
		case strings.Contains(u, "twice please") && len(r.toolResults()) < 2:
			n := len(r.toolResults())
			return scriptReply{calls: []ToolCall{tc(fmt.Sprint("t", n), "shell", map[string]any{"command": fmt.Sprint("echo call-", n)})}}
		case strings.Contains(u, "stream please") && len(r.toolResults()) == 0:
			return scriptReply{calls: []ToolCall{tc("s2", "shell", map[string]any{"command": "echo first; sleep 3; echo second >&2; echo third"})}}
		case strings.Contains(u, "shell please") && len(r.toolResults()) == 0:
			return scriptReply{text: "running it", calls: []ToolCall{tc("s1", "shell", map[string]any{"command": "echo from-the-tool"})}}
		}
		return scriptReply{text: "echo: " + r.lastUser()}
	})
}

func TestCLIAgentsAndRuns(t *testing.T) {
	te := newE2E(t, cliModel(t), "")
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("name: alpha\nmodel: openai/gpt-4o-mini\ncomputer:\n  enabled: false\ntools: []\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "b.json"), []byte(`{"name":"beta","model":"openai/gpt-4o-mini","computer":{"enabled":false},"tools":[],"limits":{"maxSteps":2}}`), 0o644)
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not a spec"), 0o644)

	if r := te.agentdOK("apply", dir); r.stdout != "created alpha\ncreated beta\n" {
		t.Fatalf("apply dir: %s", r)
	}
	if r := te.agentdOK("apply", filepath.Join(dir, "a.yaml")); r.stdout != "updated alpha\n" {
		t.Fatalf("apply again: %s", r)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("name: Bad Name\nlimits:\n  maxSteps: 900\n"), 0o644)
	if r := te.agentd("", nil, "apply", bad); r.code != 1 || !strings.Contains(r.stderr, bad+": name: name must be lowercase") ||
		!strings.Contains(r.stderr, bad+": limits.maxSteps: Number must be less than or equal to 500") {
		t.Fatalf("apply invalid: %s", r)
	}
	r := te.agentdOK("agents")
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") || !strings.HasPrefix(lines[1], "alpha ") {
		t.Fatalf("agents table: %s", r)
	}
	var agents struct{ Agents []AgentSummary }
	mustJSON(t, te.agentdOK("agents", "--json").stdout, &agents)
	if len(agents.Agents) != 2 || agents.Agents[1].Name != "beta" {
		t.Fatalf("agents --json: %+v", agents)
	}

	// run: text streams; the argument or stdin is the input; exit 0 only on complete.
	if r := te.agentdOK("run", "alpha", "hello", "there"); !strings.Contains(r.stdout, "echo: hello there") {
		t.Fatalf("run: %s", r)
	}
	if r := te.agentd("from stdin\n", nil, "run", "alpha"); r.code != 0 || !strings.Contains(r.stdout, "echo: from stdin") {
		t.Fatalf("run stdin: %s", r)
	}
	r = te.agentdOK("run", "--json", "alpha", "json please")
	var types []string
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var ev map[string]any
		mustJSON(t, line, &ev)
		types = append(types, ev["type"].(string))
	}
	if types[0] != "run_start" || types[len(types)-1] != "run_end" {
		t.Fatalf("run --json: %v", types)
	}
	// Non-complete endings: step_limit, budget, timeout, error.
	te.agentdOK("apply", writeSpec(t, "name: capped\nmodel: openai/gpt-4o-mini\ncomputer: {enabled: false}\ntools: []\nlimits:\n  maxSteps: 1\n"))
	te.agentdOK("apply", writeSpec(t, "name: broke\nmodel: openai/gpt-4o-mini\ncomputer: {enabled: false}\ntools: []\nlimits:\n  maxCostUsd: 0\n"))
	te.agentdOK("apply", writeSpec(t, "name: slow\nmodel: openai/gpt-4o-mini\ncomputer: {enabled: false}\ntools: []\nlimits:\n  timeoutSec: 1\n"))
	te.agentdOK("apply", writeSpec(t, "name: wrong\nmodel: nosuchprovider/model\ncomputer: {enabled: false}\ntools: []\n"))
	for agent, want := range map[string]string{"capped": "step_limit", "broke": "budget", "slow": "timeout", "wrong": "error"} {
		input := "loop"
		if agent == "slow" {
			input = "hang"
		}
		if r := te.agentd("", nil, "run", agent, input); r.code != 1 || !strings.Contains(r.stderr, "ended: "+want) {
			t.Errorf("run %s: want exit 1 naming %s, got %s", agent, want, r)
		}
	}
	// --detach prints the id; logs prints a finished run; logs -f follows one to its end.
	id := strings.TrimSpace(te.agentdOK("run", "--detach", "alpha", "detached").stdout)
	if !strings.HasPrefix(id, "run_") {
		t.Fatalf("detach: %q", id)
	}
	if r := te.agentdOK("logs", "-f", id); !strings.Contains(r.stdout, "echo: detached") {
		t.Fatalf("logs -f: %s", r)
	}
	if r := te.agentdOK("logs", id); !strings.Contains(r.stdout, "echo: detached") {
		t.Fatalf("logs: %s", r)
	}
	r = te.agentdOK("logs", "--json", id)
	if n := strings.Count(strings.TrimSpace(r.stdout), "\n") + 1; n < 3 {
		t.Fatalf("logs --json: %s", r)
	}
	// runs: table, --json in the API's shape, -q, --status.
	var runs struct{ Runs []RunSummary }
	mustJSON(t, te.agentdOK("runs", "--json").stdout, &runs)
	if len(runs.Runs) < 8 || runs.Runs[0].RunID != id {
		t.Fatalf("runs --json: %+v", runs)
	}
	if r := te.agentdOK("runs", "-q", "--agent", "capped"); strings.Count(r.stdout, "run_") != 1 {
		t.Fatalf("runs -q: %s", r)
	}
	if r := te.agentdOK("runs", "--status", "budget"); !strings.Contains(r.stdout, "broke") || strings.Contains(r.stdout, "alpha") || !strings.Contains(r.stdout, "$0.0000") {
		t.Fatalf("runs --status: %s", r)
	}
	// cancel: a finished run is 202 with complete.
	if r := te.agentdOK("cancel", id); !strings.Contains(r.stdout, "complete") {
		t.Fatalf("cancel: %s", r)
	}
	if r := te.agentdOK("rm-agent", "beta"); r.stdout != "beta\n" {
		t.Fatalf("rm-agent: %s", r)
	}
	// Unknown agent: one clear line and exit 1.
	if r := te.agentd("", nil, "run", "ghost", "x"); r.code != 1 || !strings.Contains(r.stderr, `agentd: E_AGENT_NOT_FOUND: agent "ghost" not found`) {
		t.Fatalf("unknown agent: %s", r)
	}
}

func writeSpec(t testing.TB, yaml string) string {
	p := filepath.Join(t.TempDir(), "spec.yaml")
	os.WriteFile(p, []byte(yaml), 0o644)
	return p
}

func TestCLIApprovals(t *testing.T) {
	te := newE2E(t, cliModel(t), "")
	te.agentdOK("apply", writeSpec(t, "name: careful\nmodel: openai/gpt-4o-mini\nguardrails:\n  approvalMode: ask\n"))
	// --yes answers every approval; --no denies.
	if r := te.agentd("", nil, "run", "--yes", "careful", "shell please"); r.code != 0 || !strings.Contains(r.stdout, "from-the-tool") {
		t.Fatalf("run --yes: %s", r)
	}
	if r := te.agentd("", nil, "run", "--no", "careful", "shell please"); r.code != 0 || strings.Contains(r.stdout, "from-the-tool\n") {
		t.Fatalf("run --no: %s", r)
	}
	// Without a terminal or a flag the run says how to answer, and another command answers it.
	done := make(chan cliResult, 1)
	go func() { done <- te.agentd("", nil, "run", "careful", "shell please") }()
	var apr string
	eventually(t, "a pending approval", func() bool {
		var out struct{ Approvals []PendingApproval }
		json.Unmarshal([]byte(te.agentdOK("approvals", "--json").stdout), &out)
		if len(out.Approvals) > 0 {
			apr = out.Approvals[0].ApprovalID
		}
		return apr != ""
	})
	if r := te.agentdOK("approvals"); !strings.Contains(r.stdout, apr) || !strings.Contains(r.stdout, "shell") {
		t.Fatalf("approvals: %s", r)
	}
	if r := te.agentdOK("approve", apr); r.stdout != "approved "+apr+"\n" {
		t.Fatalf("approve: %s", r)
	}
	if r := <-done; r.code != 0 || !strings.Contains(r.stderr, "agentd approve "+apr) || !strings.Contains(r.stdout, "from-the-tool") {
		t.Fatalf("run answered elsewhere: %s", r)
	}
	if r := te.agentd("", nil, "deny", "apr_nope"); r.code != 1 || !strings.Contains(r.stderr, "E_APPROVAL_NOT_FOUND") {
		t.Fatalf("deny unknown: %s", r)
	}
}

func TestCLIComputers(t *testing.T) {
	te := newE2E(t, cliModel(t), "")
	id := strings.TrimSpace(te.agentdOK("up", "--name", "box").stdout)
	if !strings.HasPrefix(id, "cmp_") {
		t.Fatalf("up: %q", id)
	}
	// exec: streams to the right descriptors and exits with the remote code; -i passes stdin.
	r := te.agentd("", nil, "exec", "box", "--", "sh", "-c", "echo out; echo err >&2; exit 7")
	if r.code != 7 || r.stdout != "out\n" || r.stderr != "err\n" {
		t.Fatalf("exec: %s", r)
	}
	if r := te.agentd("piped\n", nil, "exec", "-i", id, "--", "cat"); r.code != 0 || r.stdout != "piped\n" {
		t.Fatalf("exec -i: %s", r)
	}
	// cp round-trips a directory.
	src := filepath.Join(t.TempDir(), "proj")
	os.MkdirAll(filepath.Join(src, "sub"), 0o755)
	os.WriteFile(filepath.Join(src, "sub", "f.txt"), []byte("deep\n"), 0o644)
	os.WriteFile(filepath.Join(src, "top.txt"), []byte("top\n"), 0o644)
	te.agentdOK("cp", src, "box:proj")
	if r := te.agentdOK("exec", "box", "--", "cat", "proj/sub/f.txt"); r.stdout != "deep\n" {
		t.Fatalf("uploaded: %s", r)
	}
	back := filepath.Join(t.TempDir(), "back")
	te.agentdOK("cp", "box:/work/proj", back)
	if b, _ := os.ReadFile(filepath.Join(back, "sub", "f.txt")); string(b) != "deep\n" {
		t.Fatalf("downloaded: %q", b)
	}
	into := t.TempDir() // an existing directory: the copy lands inside it under its own name
	te.agentdOK("cp", "box:proj", into)
	if b, _ := os.ReadFile(filepath.Join(into, "proj", "top.txt")); string(b) != "top\n" {
		t.Fatalf("downloaded into a directory: %q", b)
	}
	if r := te.agentd("", nil, "cp", "box:missing.txt", back); r.code != 1 {
		t.Fatalf("cp of a missing file: %s", r)
	}
	// ps: table, --json, -q; stop / start / port / rm.
	var ps struct{ Computers []ComputerInfo }
	mustJSON(t, te.agentdOK("ps", "--json").stdout, &ps)
	if len(ps.Computers) != 1 || ps.Computers[0].ID != id {
		t.Fatalf("ps --json: %+v", ps)
	}
	te.agentdOK("stop", "box")
	if r := te.agentdOK("ps", "-q"); r.stdout != "" {
		t.Fatalf("ps after stop: %s", r)
	}
	if r := te.agentdOK("ps", "-a"); !strings.Contains(r.stdout, "stopped") {
		t.Fatalf("ps -a: %s", r)
	}
	te.agentdOK("start", id)
	if r := te.agentdOK("port", "box", "8080"); !strings.HasPrefix(r.stdout, "http://127.0.0.1:") {
		t.Fatalf("port: %s", r)
	}
	if r := te.agentd("", nil, "port", "box", "http"); r.code != 2 {
		t.Fatalf("port with a word: %s", r)
	}
	if r := te.agentd("echo through-a-pipe\nexit\n", nil, "shell", "box"); r.code != 0 || !strings.Contains(r.stdout, "through-a-pipe") {
		t.Fatalf("shell from a pipe: %s", r)
	}
	te.agentdOK("rm", "box")
	if r := te.agentd("", nil, "exec", "box", "--", "true"); r.code != 1 || !strings.Contains(r.stderr, "E_COMPUTER_NOT_FOUND") {
		t.Fatalf("exec on a removed machine: %s", r)
	}
}

// testPTY opens a pseudo-terminal pair for a test (openPTY, cli_term_linux.go), closed at cleanup.
func testPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, s, err := openPTY()
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, s
}

func TestCLIModelsTriggersEventsDoctor(t *testing.T) {
	te := newE2E(t, cliModel(t), "")
	if r := te.agentdOK("models"); !strings.Contains(r.stdout, "openai") || !strings.Contains(r.stdout, "MODEL") {
		t.Fatalf("models: %s", r)
	}
	var models map[string]any
	mustJSON(t, te.agentdOK("models", "--json").stdout, &models)
	if models["models"] == nil || models["providers"] == nil {
		t.Fatalf("models --json: %v", models)
	}
	if r := te.agentdOK("chat", "-m", "openai/gpt-4o-mini", "say hi"); !strings.Contains(r.stdout, "echo: say hi") {
		t.Fatalf("chat: %s", r)
	}
	r := te.agentdOK("chat", "--json", "-m", "openai/gpt-4o-mini", "x")
	if first := strings.SplitN(r.stdout, "\n", 2)[0]; !strings.Contains(first, `"type":"start"`) {
		t.Fatalf("chat --json: %s", r)
	}
	te.agentdOK("apply", writeSpec(t, "name: hooks\nmodel: openai/gpt-4o-mini\ncomputer: {enabled: false}\ntools: []\ntriggers:\n  - type: webhook\n    path: /gh\n    secret: s\n  - type: cron\n    schedule: '0 9 * * *'\n    prompt: report\n"))
	if r := te.agentdOK("triggers"); !strings.Contains(r.stdout, "/v1/w/hooks/gh") || !strings.Contains(r.stdout, "0 9 * * *") {
		t.Fatalf("triggers: %s", r)
	}
	var trig struct {
		Triggers []MountedTrigger
		Cron     []cronEntry
	}
	mustJSON(t, te.agentdOK("triggers", "--json").stdout, &trig)
	if len(trig.Triggers) != 1 || len(trig.Cron) != 1 {
		t.Fatalf("triggers --json: %+v", trig)
	}
	// events: one JSON line per frame, filtered by topic.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, cliBinary(t), "events", "triggers")
	cmd.Env = []string{"AGENT_URL=" + te.url}
	out, _ := cmd.StdoutPipe()
	cmd.Start()
	lines := make(chan string, 100)
	go func() {
		b := make([]byte, 1<<16)
		var acc string
		for {
			n, err := out.Read(b)
			acc += string(b[:n])
			for strings.Contains(acc, "\n") {
				line, rest, _ := strings.Cut(acc, "\n")
				lines <- line
				acc = rest
			}
			if err != nil {
				close(lines)
				return
			}
		}
	}()
	waitLine := func(want string) {
		t.Helper()
		for line := range lines {
			var f map[string]any
			mustJSON(t, line, &f)
			if f["type"] == want {
				return
			}
		}
		t.Fatalf("no %s frame", want)
	}
	waitLine("subscribed")
	te.agentdOK("rm-agent", "hooks")
	waitLine("agent_deleted")
	cancel()
	cmd.Wait()

	var rep DoctorReport
	mustJSON(t, te.agentdOK("doctor", "--json").stdout, &rep)
	if rep.Version != version || len(rep.Providers) == 0 {
		t.Fatalf("doctor --json: %+v", rep)
	}
	if text := te.agentdOK("doctor").stdout; len(rep.Images) > 0 && (!strings.Contains(text, "FLAVOR") || !strings.Contains(text, rep.Images[0].Image)) {
		t.Fatalf("doctor text shows no images table: %s", text)
	}
	if r := te.agentdOK("completion", "bash"); !strings.Contains(r.stdout, "complete -F _agentd agentd") || !strings.Contains(r.stdout, "rm-agent") {
		t.Fatalf("completion: %s", r)
	}
	te.agentdOK("up", "--name", "compbox")
	if r := te.agentdOK("__complete", "computers"); !strings.Contains(r.stdout, "compbox") {
		t.Fatalf("__complete: %s", r)
	}
}

// Usage mistakes exit 2 with the usage; a server that is down, a wrong token, exit 1 with one clear line.
func TestCLIBadInput(t *testing.T) {
	te := newE2E(t, cliModel(t), "")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"agents", "--frob"}, 2, "agents: unknown flag --frob"},
		{[]string{"run"}, 2, "run: missing arguments"},
		{[]string{"exec", "box"}, 2, "usage: agentd exec"},
		{[]string{"rm"}, 2, "usage: agentd rm ID..."},
		{[]string{"cp", "a", "b"}, 2, "one side must be ID:PATH"},
		{[]string{"completion", "fish"}, 2, "unknown shell"},
		{[]string{"runs", "--status", "completed"}, 2, `runs: --status "completed": one of running, complete,`},
		{[]string{"logs", "run_nope"}, 1, "E_RUN_NOT_FOUND"},
		{[]string{"rm", "ghost"}, 1, "E_COMPUTER_NOT_FOUND"},
	} {
		r := te.agentd("", nil, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: want exit %d with %q, got %s", tc.args, tc.code, tc.want, r)
		}
	}
	if r := te.agentdOK("help", "exec"); !strings.Contains(r.stdout, "example: agentd exec") {
		t.Fatalf("help exec: %s", r)
	}
	if r := te.agentdOK("exec", "--help"); !strings.Contains(r.stdout, "usage: agentd exec") {
		t.Fatalf("exec --help: %s", r)
	}
	if r := te.agentdOK("help"); !strings.Contains(r.stdout, "distill") || !strings.Contains(r.stdout, "serve") {
		t.Fatalf("help: %s", r)
	}
	// Server down: one line naming AGENT_URL (and a hint), exit 1.
	r := te.agentd("", []string{"AGENT_URL=http://127.0.0.1:1"}, "agents")
	if r.code != 1 || !strings.Contains(r.stderr, "no agentd server answers at http://127.0.0.1:1 (AGENT_URL)") {
		t.Fatalf("server down: %s", r)
	}
	// doctor still answers without a server.
	r = te.agentd("", []string{"AGENT_URL=http://127.0.0.1:1", "AGENT_HOME=" + t.TempDir()}, "doctor", "--json")
	var rep DoctorReport
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rep) != nil || rep.Version != version {
		t.Fatalf("doctor without a server: %s", r)
	}
	// A wrong token: the envelope and a hint naming AGENT_TOKEN; the token is never printed.
	tok := newE2EWithToken(t, "correct-horse-battery-staple")
	r = tok.agentd("", []string{"AGENT_TOKEN=wrong-token-value"}, "agents")
	if r.code != 1 || !strings.Contains(r.stderr, "E_NO_CREDENTIALS") || !strings.Contains(r.stderr, "AGENT_TOKEN") ||
		strings.Contains(r.stderr+r.stdout, "wrong-token-value") {
		t.Fatalf("wrong token: %s", r)
	}
	if r := tok.agentd("", []string{"AGENT_TOKEN=correct-horse-battery-staple"}, "agents"); r.code != 0 {
		t.Fatalf("right token: %s", r)
	}
}

func newE2EWithToken(t *testing.T, token string) *testServer {
	return newE2E(t, cliModel(t), "", func(c *testSetup) { c.Token = token })
}

// import prints the transcript; distill prints only the spec's YAML, so `distill X > a.yaml && apply
// a.yaml` works; progress and notes go to stderr.
func TestCLIImportAndDistill(t *testing.T) {
	te := newE2E(t, cliModel(t), "")
	abs, _ := filepath.Abs("testdata/sessions/claude-code.jsonl")
	r := te.agentdOK("import", abs)
	if !strings.Contains(r.stdout, "trn_") || !strings.Contains(r.stdout, "claude-code") || !strings.Contains(r.stdout, "9 messages") {
		t.Fatalf("import: %s", r)
	}
	var out struct{ Transcript Transcript }
	mustJSON(t, te.agentdOK("import", "--json", abs).stdout, &out)
	if out.Transcript.Source != "claude-code" || len(out.Transcript.Messages) != 9 {
		t.Fatalf("import --json: %+v", out.Transcript)
	}
	md, _ := os.ReadFile("testdata/sessions/transcript.md")
	if r := te.agentd(string(md), nil, "import", "-"); r.code != 0 || !strings.Contains(r.stdout, "markdown") {
		t.Fatalf("import from stdin: %s", r)
	}
	r = te.agentdOK("distill", abs)
	if !strings.HasPrefix(r.stdout, "apiVersion: agent/v1\nname: fix-the-failing-date-test\n") || !strings.Contains(r.stderr, "distilling: merging") ||
		!strings.Contains(r.stderr, "note:") || strings.Contains(r.stdout, "/home/ana") {
		t.Fatalf("distill: %s", r)
	}
	spec := filepath.Join(t.TempDir(), "a.yaml")
	os.WriteFile(spec, []byte(r.stdout), 0o644)
	if r := te.agentdOK("apply", spec); r.stdout != "created fix-the-failing-date-test\n" {
		t.Fatalf("apply the distilled spec: %s", r)
	}
	if r := te.agentd("", nil, "distill", "trn_nope"); r.code != 1 || !strings.Contains(r.stderr, "E_TRANSCRIPT_NOT_FOUND") {
		t.Fatalf("distill unknown: %s", r)
	}
}

// syncBuffer is an output a test reads while a background command still writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// cliProc is the binary running in the background (a follower, a run to interrupt).
type cliProc struct {
	cmd            *exec.Cmd
	stdout, stderr syncBuffer
	done           chan cliResult
}

func (te *testServer) agentdStart(env []string, args ...string) *cliProc {
	te.t.Helper()
	p := &cliProc{cmd: exec.Command(cliBinary(te.t), args...), done: make(chan cliResult, 1)}
	p.cmd.Env = append([]string{"AGENT_URL=" + te.url, "HOME=" + te.s.cfg.Home, "PATH=" + os.Getenv("PATH"), "AGENT_HOME=" + te.s.cfg.Home}, env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		te.t.Fatal(err)
	}
	go func() {
		p.cmd.Wait()
		p.done <- cliResult{p.cmd.ProcessState.ExitCode(), p.stdout.String(), p.stderr.String()}
	}()
	te.t.Cleanup(func() { p.cmd.Process.Kill() })
	return p
}

func (p *cliProc) wait(t testing.TB) cliResult {
	t.Helper()
	select {
	case r := <-p.done:
		return r
	case <-time.After(60 * time.Second):
		p.cmd.Process.Kill()
		t.Fatalf("%v did not exit\nstdout: %s\nstderr: %s", p.cmd.Args, p.stdout.String(), p.stderr.String())
	}
	return cliResult{}
}

// jsonObject decodes one JSON object and checks it carries every key the API's shape names.
func jsonObject(t testing.TB, s string, keys ...string) map[string]any {
	t.Helper()
	var m map[string]any
	mustJSON(t, s, &m)
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Fatalf("no %q in %s", k, s)
		}
	}
	return m
}

// pendingApproval waits for the run's approval and returns its id.
func (te *testServer) pendingApproval(runID string) string {
	te.t.Helper()
	var apr string
	eventually(te.t, "a pending approval of "+runID, func() bool {
		var out struct{ Approvals []PendingApproval }
		te.call("GET", "/v1/approvals", nil, 200, &out)
		for _, a := range out.Approvals {
			if a.RunID == runID {
				apr = a.ApprovalID
			}
		}
		return apr != ""
	})
	return apr
}

func (te *testServer) approvalPending(apr string) bool {
	var out struct{ Approvals []PendingApproval }
	te.call("GET", "/v1/approvals", nil, 200, &out)
	return slices.ContainsFunc(out.Approvals, func(a PendingApproval) bool { return a.ApprovalID == apr })
}

// Watching a run (logs, logs -f, --json or not) shows its approvals and never answers them; approve
// --remember and deny answer them, and the follower sees the live run to its end.
func TestCLILogsNeverAnswersApprovals(t *testing.T) {
	te := newE2E(t, cliModel(t), "")
	te.agentdOK("apply", writeSpec(t, "name: careful\nmodel: openai/gpt-4o-mini\nguardrails:\n  approvalMode: ask\n"))
	te.agentdOK("apply", writeSpec(t, "name: wary\nmodel: openai/gpt-4o-mini\nguardrails:\n  approvalMode: ask\n"))

	// logs -f --json: the approval is printed (a JSON line, the hint on stderr) and left pending.
	id := strings.TrimSpace(te.agentdOK("run", "--detach", "careful", "shell please").stdout)
	apr := te.pendingApproval(id)
	f := te.agentdStart(nil, "logs", "-f", "--json", id)
	eventually(t, "the follower's approval line", func() bool {
		return strings.Contains(f.stdout.String(), `"approval_required"`) && strings.Contains(f.stderr.String(), "agentd approve "+apr)
	})
	if !te.approvalPending(apr) {
		t.Fatalf("logs -f --json answered the approval: %s", f.stderr.String())
	}
	// logs of the run so far: the same, and still not answered.
	if r := te.agentdOK("logs", id); !strings.Contains(r.stderr, "approval "+apr) || !te.approvalPending(apr) {
		t.Fatalf("logs answered the approval: %s", r)
	}
	r := te.agentdOK("approve", "--remember", "--json", apr)
	if m := jsonObject(t, r.stdout, "approvalId", "approved", "remembered"); m["approvalId"] != apr || m["approved"] != true || m["remembered"] != true {
		t.Fatalf("approve --remember --json: %s", r)
	}
	res := f.wait(t)
	if res.code != 0 || !strings.Contains(res.stdout, "from-the-tool") {
		t.Fatalf("logs -f --json: %s", res)
	}
	var last map[string]any
	for _, line := range strings.Split(strings.TrimSpace(res.stdout), "\n") {
		last = jsonObject(t, line, "type")
	}
	if last["type"] != "run_end" {
		t.Fatalf("logs -f --json ends with %v", last)
	}
	// Remembered: the next run of careful asks nothing.
	if r := te.agentd("", nil, "run", "careful", "shell please"); r.code != 0 || !strings.Contains(r.stdout, "from-the-tool") || strings.Contains(r.stderr, "approval") {
		t.Fatalf("run after --remember: %s", r)
	}

	// logs -f in text: a live run that waits, is denied, and finishes.
	id = strings.TrimSpace(te.agentdOK("run", "--detach", "wary", "shell please").stdout)
	apr = te.pendingApproval(id)
	f = te.agentdStart(nil, "logs", "-f", id)
	eventually(t, "the follower's hint", func() bool { return strings.Contains(f.stderr.String(), "agentd approve "+apr) })
	if !te.approvalPending(apr) {
		t.Fatalf("logs -f answered the approval: %s", f.stderr.String())
	}
	r = te.agentdOK("deny", "--json", apr)
	if m := jsonObject(t, r.stdout, "approvalId", "approved", "remembered"); m["approvalId"] != apr || m["approved"] != false {
		t.Fatalf("deny --json: %s", r)
	}
	res = f.wait(t)
	if res.code != 0 || !strings.Contains(res.stdout, "running it") || !strings.Contains(res.stdout, "echo: shell please") ||
		!strings.Contains(res.stderr, "denied: shell") || strings.Contains(res.stdout, "\n  from-the-tool") {
		t.Fatalf("logs -f of a denied run: %s", res)
	}
	if r := te.agentd("", nil, "deny", apr); r.code != 1 || !strings.Contains(r.stderr, "E_APPROVAL_NOT_FOUND") {
		t.Fatalf("deny twice: %s", r)
	}
}

// cliTarGz builds a download as the server would send it, from hand-made headers (a body per regular file).
func cliTarGz(t testing.TB, entries ...tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, h := range entries {
		body := ""
		if h.Typeflag == tar.TypeReg {
			body = "pwned " + h.Name + "\n"
			h.Size = int64(len(body))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, body)
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

// A downloaded archive is unpacked only inside the destination: chained links, absolute links, hard links
// out, and entries written through a link already there are refused, and nothing lands outside.
func TestCLIUntarStaysInside(t *testing.T) {
	dirH := func(name string) tar.Header { return tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o755} }
	file := func(name string) tar.Header { return tar.Header{Name: name, Typeflag: tar.TypeReg} }
	sym := func(name, to string) tar.Header {
		return tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: to}
	}
	hard := func(name, to string) tar.Header { return tar.Header{Name: name, Typeflag: tar.TypeLink, Linkname: to} }
	for _, tc := range []struct {
		name    string
		entries []tar.Header
		planted string // a link already in the destination, to outer/outside
	}{
		{"chained links", []tar.Header{dirH("top/"), sym("top/l1", "."), sym("top/l2", "l1/.."), sym("top/l3", "l2/.."), file("top/l3/escaped.txt")}, ""},
		{"chained links, deeper", []tar.Header{dirH("top/"), sym("top/l1", "."), sym("top/l2", "l1/.."), sym("top/l3", "l2/../dest/.."), file("top/l3/escaped.txt")}, ""},
		{"an absolute link", []tar.Header{dirH("top/"), sym("top/abs", "/tmp"), file("top/abs/escaped.txt")}, ""},
		{"a link climbing out", []tar.Header{dirH("top/"), sym("top/up", "../.."), file("top/up/escaped.txt")}, ""},
		{"a hard link out", []tar.Header{dirH("top/"), hard("top/h", "../outside/secret")}, ""},
		{"a name climbing out", []tar.Header{file("top/../../escaped.txt")}, ""},
		{"through a planted link", []tar.Header{file("out/escaped.txt")}, "out"},
		{"a link through a planted link", []tar.Header{sym("top-l", "out/.."), file("top-l/escaped.txt")}, "out"},
		{"a hard link to a planted link", []tar.Header{hard("h", "out")}, "out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			outer := t.TempDir()
			dest := filepath.Join(outer, "a", "dest")
			os.MkdirAll(dest, 0o755)
			os.MkdirAll(filepath.Join(outer, "outside"), 0o755)
			os.WriteFile(filepath.Join(outer, "outside", "secret"), []byte("secret\n"), 0o600)
			if tc.planted != "" {
				os.Symlink(filepath.Join(outer, "outside"), filepath.Join(dest, tc.planted))
			}
			_, err := untarLocal(bytes.NewReader(cliTarGz(t, tc.entries...)), dest, "top", "")
			if err == nil {
				t.Errorf("unpacked without an error")
			}
			// Nothing outside dest changed: outer holds a/, a/dest and outside/secret only.
			filepath.WalkDir(outer, func(p string, d os.DirEntry, err error) error {
				rel, _ := filepath.Rel(outer, p)
				switch {
				case rel == "." || rel == "a" || rel == "outside" || rel == "outside/secret":
				case rel == "a/dest" || strings.HasPrefix(rel, "a/dest/"):
					if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && !strings.HasPrefix(rel, "a/dest/top/") {
						t.Errorf("written through a link: %s", rel)
					}
				default:
					t.Errorf("written outside the destination: %s", rel)
				}
				return nil
			})
			if b, _ := os.ReadFile(filepath.Join(outer, "outside", "secret")); string(b) != "secret\n" {
				t.Errorf("outside/secret changed: %q", b)
			}
			// No link made in dest leads out of it.
			filepath.WalkDir(dest, func(p string, d os.DirEntry, err error) error {
				if d != nil && d.Type()&os.ModeSymlink != 0 && filepath.Base(p) != tc.planted {
					if real, err := filepath.EvalSymlinks(p); err == nil && !strings.HasPrefix(real+"/", dest+"/") {
						t.Errorf("link %s leads to %s", p, real)
					}
				}
				return nil
			})
		})
	}
	// A well-formed archive with inner links and a hard link unpacks, renamed.
	dest := t.TempDir()
	n, err := untarLocal(bytes.NewReader(cliTarGz(t, dirH("top/"), dirH("top/sub/"), file("top/sub/f.txt"),
		sym("top/ln", "sub/f.txt"), sym("top/sub/up", "../sub"), hard("top/hl", "top/sub/f.txt"))), dest, "top", "copy")
	if err != nil || n != 6 {
		t.Fatalf("a good archive: %d entries, %v", n, err)
	}
	for _, p := range []string{"copy/sub/f.txt", "copy/ln", "copy/sub/up/f.txt", "copy/hl"} {
		if b, err := os.ReadFile(filepath.Join(dest, p)); err != nil || string(b) != "pwned top/sub/f.txt\n" {
			t.Errorf("%s: %q %v", p, b, err)
		}
	}
}

// runs --status follows the pages until enough runs match; help shows an example per command; completion
// offers run ids after logs and cancel, command names after help.
func TestCLIRunsStatusHelpAndCompletion(t *testing.T) {
	te := newE2E(t, cliModel(t), "")
	te.agentdOK("apply", writeSpec(t, "name: alpha\nmodel: openai/gpt-4o-mini\ncomputer: {enabled: false}\ntools: []\n"))
	te.agentdOK("apply", writeSpec(t, "name: broke\nmodel: openai/gpt-4o-mini\ncomputer: {enabled: false}\ntools: []\nlimits:\n  maxCostUsd: 0\n"))
	te.agentd("", nil, "run", "broke", "loop")
	for i := range 3 {
		te.agentdOK("run", "alpha", fmt.Sprint("run ", i))
	}
	var broke struct{ Runs []RunSummary }
	te.call("GET", "/v1/runs?agent=broke", nil, 200, &broke)
	if len(broke.Runs) != 1 {
		t.Fatalf("runs of broke: %+v", broke)
	}
	// The budget run is older than the first page of 2: the filter must look further.
	if r := te.agentdOK("runs", "--status", "budget", "--limit", "2", "-q"); r.stdout != broke.Runs[0].RunID+"\n" {
		t.Fatalf("runs --status budget --limit 2: %s", r)
	}
	r := te.agentdOK("runs", "--status", "complete", "--limit", "2", "--json")
	runs, _ := jsonObject(t, r.stdout, "runs")["runs"].([]any)
	if len(runs) != 2 {
		t.Fatalf("runs --status complete --limit 2 --json: %s", r)
	}
	for _, x := range runs {
		if m, _ := x.(map[string]any); m["status"] != "complete" || m["runId"] == nil || m["agent"] != "alpha" {
			t.Fatalf("runs --json row: %v", x)
		}
	}
	if r := te.agentdOK("runs", "--status", "timeout"); strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("runs --status with no match: %s", r)
	}

	help := te.agentdOK("help").stdout
	for _, cmd := range cliCommands() {
		if !strings.Contains(help, "  "+cmd.name+" ") || !strings.Contains(help, "$ "+cmd.example+"\n") {
			t.Errorf("help lacks %s or its example %q", cmd.name, cmd.example)
		}
	}

	script := filepath.Join(t.TempDir(), "agentd.bash")
	os.WriteFile(script, []byte(te.agentdOK("completion", "bash").stdout), 0o644)
	complete := func(words ...string) []string {
		t.Helper()
		cmd := exec.Command("bash", "-c", `source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($#-1)); _agentd; printf '%s\n' "${COMPREPLY[@]}"`, "bash", script)
		cmd.Args = append(cmd.Args, words...)
		cmd.Env = []string{"AGENT_URL=" + te.url, "PATH=" + filepath.Dir(cliBinary(t)) + ":" + os.Getenv("PATH")}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("bash completion of %v: %v\n%s", words, err, out)
		}
		return strings.Fields(string(out))
	}
	for _, c := range []string{"logs", "cancel"} {
		if got := complete("agentd", c, "run_"); len(got) != 4 || !slices.Contains(got, broke.Runs[0].RunID) {
			t.Errorf("completion after %s: %v", c, got)
		}
	}
	if got := complete("agentd", "help", "d"); !slices.Equal(got, []string{"deny", "distill", "doctor"}) {
		t.Errorf("completion after help: %v", got)
	}
	if got := complete("agentd", "run", ""); !slices.Equal(got, []string{"alpha", "broke"}) {
		t.Errorf("completion after run: %v", got)
	}
}

// latestRun is the newest run of an agent, as the server lists it.
func (te *testServer) latestRun(agent string) RunSummary {
	var out struct{ Runs []RunSummary }
	te.call("GET", "/v1/runs?agent="+agent, nil, 200, &out)
	if len(out.Runs) == 0 {
		return RunSummary{}
	}
	return out.Runs[0]
}

// Ctrl-C on run exits 130 and aborts the run on the server; cancel stops a run in flight.
func TestCLIInterruptAndCancel(t *testing.T) {
	te := newE2E(t, cliModel(t), "")
	r := te.agentdOK("apply", "--json", writeSpec(t, "name: sleepy\nmodel: openai/gpt-4o-mini\ncomputer: {enabled: false}\ntools: []\n"))
	if m := jsonObject(t, r.stdout, "name", "model", "tools", "updatedAt", "runCount"); m["name"] != "sleepy" {
		t.Fatalf("apply --json: %s", r)
	}

	p := te.agentdStart(nil, "run", "sleepy", "hang")
	var run RunSummary
	eventually(t, "the run underway", func() bool { run = te.latestRun("sleepy"); return run.Status == "running" })
	p.cmd.Process.Signal(os.Interrupt)
	if r := p.wait(t); r.code != 130 {
		t.Fatalf("run after Ctrl-C: %s", r)
	}
	eventually(t, "the run aborted on the server", func() bool {
		got := te.latestRun("sleepy")
		return got.RunID == run.RunID && got.Status == "aborted"
	})

	// cancel --json of a run in flight: the API's body.
	id := strings.TrimSpace(te.agentdOK("run", "--detach", "sleepy", "hang").stdout)
	eventually(t, "the detached run underway", func() bool { run = te.latestRun("sleepy"); return run.RunID == id && run.Status == "running" })
	r = te.agentdOK("cancel", "--json", id)
	if m := jsonObject(t, r.stdout, "runId", "cancelled", "status"); m["runId"] != id || m["cancelled"] != true || m["status"] != "aborted" {
		t.Fatalf("cancel --json: %s", r)
	}
	if run = te.latestRun("sleepy"); run.Status != "aborted" {
		t.Fatalf("after cancel: %+v", run)
	}
	r = te.agentdOK("logs", "--json", id)
	var types []string
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		types = append(types, jsonObject(t, line, "type")["type"].(string))
	}
	if types[0] != "run_start" || types[len(types)-1] != "run_end" {
		t.Fatalf("logs --json of a cancelled run: %v", types)
	}
	// cancel in text; again: nothing left to cancel.
	id = strings.TrimSpace(te.agentdOK("run", "--detach", "sleepy", "hang").stdout)
	eventually(t, "the detached run underway", func() bool { run = te.latestRun("sleepy"); return run.RunID == id && run.Status == "running" })
	if r := te.agentdOK("cancel", id); r.stdout != id+" aborted\n" {
		t.Fatalf("cancel: %s", r)
	}
	r = te.agentdOK("cancel", "--json", id)
	if m := jsonObject(t, r.stdout, "runId", "cancelled", "status"); m["cancelled"] != false || m["status"] != "aborted" {
		t.Fatalf("cancel --json of a finished run: %s", r)
	}
}

// --json on the commands that make things prints the API's body; distill --json is {distilled, spec, yaml}.
func TestCLIJSONShapes(t *testing.T) {
	te := newE2E(t, cliModel(t), "")
	r := te.agentdOK("up", "--json", "--name", "jbox")
	up := jsonObject(t, r.stdout, "id", "name", "provider", "state", "isolated", "isolationKind", "image", "workdir", "createdAt", "spec", "ports")
	if up["name"] != "jbox" || up["state"] != "running" || !strings.Contains(r.stderr, "creating a computer") {
		t.Fatalf("up --json: %s", r)
	}
	r = te.agentdOK("port", "--json", "jbox", "8080")
	if m := jsonObject(t, r.stdout, "hostPort", "url", "reachable"); !strings.HasPrefix(fmt.Sprint(m["url"]), "http://127.0.0.1:") {
		t.Fatalf("port --json: %s", r)
	}
	r = te.agentdOK("stop", "--json", "jbox")
	if m := jsonObject(t, r.stdout, "id", "name", "state", "provider"); m["id"] != up["id"] || m["state"] != "stopped" {
		t.Fatalf("stop --json: %s", r)
	}
	r = te.agentdOK("start", "--json", "jbox")
	if m := jsonObject(t, r.stdout, "id", "name", "state", "provider"); m["id"] != up["id"] || m["state"] != "running" {
		t.Fatalf("start --json: %s", r)
	}
	if r := te.agentd("", nil, "rm", "--json", "jbox"); r.code != 2 {
		t.Fatalf("rm --json (the API answers nothing): %s", r)
	}
	abs, _ := filepath.Abs("testdata/sessions/claude-code.jsonl")
	r = te.agentdOK("distill", "--json", abs)
	m := jsonObject(t, r.stdout, "distilled", "spec", "yaml")
	if len(m) != 3 || !strings.HasPrefix(fmt.Sprint(m["yaml"]), "apiVersion: agent/v1\n") || !strings.Contains(r.stderr, "distilling:") {
		t.Fatalf("distill --json: %s", r)
	}
	if spec, _ := m["spec"].(map[string]any); spec["name"] != "fix-the-failing-date-test" {
		t.Fatalf("distill --json spec: %v", m["spec"])
	}
}

// Colour only on a terminal, never with NO_COLOR.
func TestCLINoColor(t *testing.T) {
	te := newE2E(t, cliModel(t), "")
	te.agentdOK("apply", writeSpec(t, "name: alpha\nmodel: openai/gpt-4o-mini\ncomputer: {enabled: false}\ntools: []\n"))
	onTerminal := func(env ...string) string {
		t.Helper()
		master, slave := testPTY(t)
		cmd := exec.Command(cliBinary(t), "agents")
		cmd.Env = append([]string{"AGENT_URL=" + te.url, "PATH=" + os.Getenv("PATH")}, env...)
		cmd.Stdout, cmd.Stderr = slave, slave
		var screen syncBuffer
		go io.Copy(&screen, master)
		if err := cmd.Run(); err != nil {
			t.Fatalf("agents on a terminal: %v\n%s", err, screen.String())
		}
		eventually(t, "the table on the terminal", func() bool { return strings.Contains(screen.String(), "alpha ") })
		return screen.String()
	}
	if out := onTerminal(); !strings.Contains(out, "\x1b[1mNAME") {
		t.Fatalf("no colour on a terminal: %q", out)
	}
	if out := onTerminal("NO_COLOR=1"); strings.Contains(out, "\x1b[") || !strings.Contains(out, "NAME") {
		t.Fatalf("colour with NO_COLOR: %q", out)
	}
	if r := te.agentdOK("agents"); strings.Contains(r.stdout, "\x1b[") {
		t.Fatalf("colour in a pipe: %q", r.stdout)
	}
}

// serve with a bad flag: one line naming it and serve's usage, without Go's flag dump.
func TestCLIServeBadFlag(t *testing.T) {
	cmd := exec.Command(cliBinary(t), "serve", "--frob")
	cmd.Env = []string{"AGENT_HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	ee, _ := err.(*exec.ExitError)
	want := "agentd: flag provided but not defined: -frob\n\nusage: agentd serve "
	if ee == nil || ee.ExitCode() != 2 || !strings.HasPrefix(errb.String(), want) || strings.Count(errb.String(), "\n") != 3 || out.Len() != 0 {
		t.Fatalf("serve --frob: %v\nstdout: %s\nstderr: %s", err, out.String(), errb.String())
	}
	// CMD --help is the usage on stdout, exit 0 (DESIGN §8), for serve and validate too.
	for _, args := range [][]string{{"serve", "--help"}, {"serve", "-h"}, {"validate", "--help"}} {
		cmd := exec.Command(cliBinary(t), args...)
		cmd.Env = []string{"AGENT_HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil || !strings.HasPrefix(out.String(), "usage: agentd "+args[0]+" ") ||
			!strings.Contains(out.String(), "example: agentd "+args[0]) || errb.Len() != 0 {
			t.Errorf("%v: %v\nstdout: %s\nstderr: %s", args, err, out.String(), errb.String())
		}
	}
}

// blipProxy forwards TCP to the server and can cut every open connection (a network blip).
type blipProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	n     int // connections accepted
}

func newBlipProxy(t *testing.T, target string) *blipProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &blipProxy{ln: ln}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns, p.n = append(p.conns, c, s), p.n+1
			p.mu.Unlock()
			go func() { io.Copy(s, c); s.Close() }()
			go func() { io.Copy(c, s); c.Close() }()
		}
	}()
	return p
}

func (p *blipProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *blipProxy) accepted() int { p.mu.Lock(); defer p.mu.Unlock(); return p.n }

// logs -f reconnects after a network blip and resumes after the last event it saw: nothing twice,
// nothing missed.
func TestCLILogsFollowResumesAfterABlip(t *testing.T) {
	te := newE2E(t, cliModel(t), "")
	te.agentdOK("apply", writeSpec(t, "name: careful\nmodel: openai/gpt-4o-mini\nguardrails:\n  approvalMode: ask\n"))
	id := strings.TrimSpace(te.agentdOK("run", "--detach", "careful", "shell please").stdout)
	apr := te.pendingApproval(id)
	proxy := newBlipProxy(t, strings.TrimPrefix(te.url, "http://"))
	f := te.agentdStart([]string{"AGENT_URL=http://" + proxy.ln.Addr().String()}, "logs", "-f", "--json", id)
	eventually(t, "the follower's approval line", func() bool { return strings.Contains(f.stdout.String(), `"approval_required"`) })
	proxy.cut()
	eventually(t, "the follower reconnected", func() bool { return proxy.accepted() >= 2 })
	te.agentdOK("approve", apr)
	res := f.wait(t)
	if res.code != 0 {
		t.Fatalf("logs -f across a blip: %s", res)
	}
	counts := map[string]int{}
	seqs := map[any]bool{}
	for _, line := range strings.Split(strings.TrimSpace(res.stdout), "\n") {
		ev := jsonObject(t, line, "type")
		counts[ev["type"].(string)]++
		if seq, ok := ev["seq"]; ok {
			if seqs[seq] {
				t.Errorf("event %v twice", seq)
			}
			seqs[seq] = true
		}
	}
	if counts["run_start"] != 1 || counts["approval_required"] != 1 || counts["run_end"] != 1 || counts["tool_end"] != 1 {
		t.Fatalf("events across the blip: %v\n%s", counts, res)
	}
}

// askingRun starts `agentd run careful INPUT` on a pseudo-terminal and returns once it asks on an
// approval: the process, the terminal's master side, what it has printed, and its end.
func askingRun(t *testing.T, te *testServer, input string, env ...string) (*exec.Cmd, *os.File, *syncBuffer, chan error) {
	t.Helper()
	master, slave := testPTY(t)
	cmd := exec.Command(cliBinary(t), "run", "careful", input)
	cmd.Env = append([]string{"AGENT_URL=" + te.url, "PATH=" + os.Getenv("PATH")}, env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	screen := &syncBuffer{}
	go io.Copy(screen, master)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	eventually(t, "the question", func() bool { return strings.Contains(screen.String(), "approve? [y/N] ") })
	return cmd, master, screen, waited
}

// run on a terminal asks on an approval and sends the answer typed.
func TestCLIRunAsksOnATerminal(t *testing.T) {
	te := newE2E(t, cliModel(t), "")
	te.agentdOK("apply", writeSpec(t, "name: careful\nmodel: openai/gpt-4o-mini\nguardrails:\n  approvalMode: ask\n"))
	for _, tc := range []struct{ answer, want, not string }{
		{"y", "\n  from-the-tool", "denied: shell"},
		{"n", "denied: shell", "\n  from-the-tool"},
	} {
		cmd, master, screen, waited := askingRun(t, te, "shell please", "NO_COLOR=1")
		// The question is for a person: the tool and one line per argument, not raw JSON (issue 26).
		if q := "approval needed: shell (agent careful)\r\n  command: echo from-the-tool\r\napprove? [y/N] "; !strings.Contains(screen.String(), q) {
			t.Fatalf("the question:\n%q\nwant %q", screen.String(), q)
		}
		master.Write([]byte(tc.answer + "\r"))
		select {
		case err := <-waited:
			if err != nil {
				t.Fatalf("run answered %q: %v\n%s", tc.answer, err, screen.String())
			}
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("run answered %q did not end:\n%s", tc.answer, screen.String())
		}
		eventually(t, "the run's end on the terminal", func() bool { return strings.Contains(screen.String(), "echo: shell please") })
		if out := strings.ReplaceAll(screen.String(), "\r\n", "\n"); !strings.Contains(out, tc.want) || strings.Contains(out, tc.not) {
			t.Fatalf("run answered %q:\n%s", tc.answer, out)
		}
	}
}

func TestApprovalText(t *testing.T) {
	req := map[string]any{"runId": "run_1", "agent": "ops", "tool": "write_file", "callId": "c1", "dangerous": true,
		"args": map[string]any{"path": "/work/a.sh", "content": "#!/bin/sh\necho hi\n", "mode": 493, "flags": []any{"x", true}}}
	want := "write_file (agent ops)\n  content:\n    #!/bin/sh\n    echo hi\n  flags: [\"x\",true]\n  mode: 493\n  path: /work/a.sh"
	if got := approvalText(req); got != want {
		t.Fatalf("approvalText:\n%s\nwant:\n%s", got, want)
	}
	if got := approvalText(map[string]any{"something": "else"}); got != `{"something":"else"}` {
		t.Fatalf("another shape: %s", got)
	}
}

// Ctrl-C while run asks on an approval: exit 130 at once (not after a line is typed), the run aborted.
func TestCLIInterruptAtTheQuestion(t *testing.T) {
	te := newE2E(t, cliModel(t), "")
	te.agentdOK("apply", writeSpec(t, "name: careful\nmodel: openai/gpt-4o-mini\nguardrails:\n  approvalMode: ask\n"))
	cmd, _, screen, waited := askingRun(t, te, "shell please")
	run := te.latestRun("careful")
	cmd.Process.Signal(os.Interrupt)
	select {
	case <-waited:
		if code := cmd.ProcessState.ExitCode(); code != 130 {
			t.Fatalf("run after Ctrl-C at the question: exit %d\n%s", code, screen.String())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("run hangs after Ctrl-C at the question:\n%s", screen.String())
	}
	eventually(t, "the run aborted on the server", func() bool {
		got := te.latestRun("careful")
		return got.RunID == run.RunID && got.Status == "aborted"
	})
}

// A question open on the terminal while the approval is answered elsewhere: the run goes on to its end
// and exits without waiting for a typed line.
func TestCLIQuestionAnsweredElsewhere(t *testing.T) {
	te := newE2E(t, cliModel(t), "")
	te.agentdOK("apply", writeSpec(t, "name: careful\nmodel: openai/gpt-4o-mini\nguardrails:\n  approvalMode: ask\n"))
	cmd, _, screen, waited := askingRun(t, te, "shell please")
	te.agentdOK("approve", te.pendingApproval(te.latestRun("careful").RunID))
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("run answered elsewhere: %v\n%s", err, screen.String())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("run waits for a typed line after its end:\n%s", screen.String())
	}
	eventually(t, "the tool's output", func() bool { return strings.Contains(screen.String(), "from-the-tool\r\n") })
}

// run prints a tool's output as it comes (indented under the call), not only when the tool ends, and
// does not print it twice.
func TestCLIRunStreamsToolOutput(t *testing.T) {
	te := newE2E(t, cliModel(t), "")
	te.agentdOK("apply", writeSpec(t, "name: eager\nmodel: openai/gpt-4o-mini\n"))
	p := te.agentdStart(nil, "run", "eager", "stream please")
	eventually(t, "the first line of the tool's output", func() bool { return strings.Contains(p.stdout.String(), "\n  first\n") })
	if out := p.stdout.String(); strings.Contains(out, "  third") {
		t.Fatalf("the output came only at the tool's end:\n%s", out)
	}
	r := p.wait(t)
	if r.code != 0 || !strings.Contains(r.stdout, "\n  first\n") || !strings.Contains(r.stdout, "\n  second\n") ||
		!strings.Contains(r.stdout, "\n  third\n") || !strings.Contains(r.stdout, "\n  [exit code 0]\necho: stream please") ||
		strings.Count(r.stdout, "  first") != 1 || !strings.Contains(r.stdout, `"echo first; sleep 3; echo second >&2; echo third"`) {
		t.Fatalf("run with a streamed tool: %s", r)
	}
}

// A question left open (its approval answered elsewhere) does not stall the run at its next approval:
// that one is announced with how to answer it.
func TestCLISecondApprovalWhileAQuestionIsOpen(t *testing.T) {
	te := newE2E(t, cliModel(t), "")
	te.agentdOK("apply", writeSpec(t, "name: careful\nmodel: openai/gpt-4o-mini\nguardrails:\n  approvalMode: ask\n"))
	cmd, _, screen, waited := askingRun(t, te, "twice please")
	run := te.latestRun("careful").RunID
	first := te.pendingApproval(run)
	te.agentdOK("approve", first)
	var second string
	eventually(t, "the second approval", func() bool { second = te.pendingApproval(run); return second != first })
	eventually(t, "the second approval announced", func() bool {
		return strings.Contains(screen.String(), "approval "+second+" is waiting: answer with `agentd approve "+second+"`")
	})
	te.agentdOK("approve", second)
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("run: %v\n%s", err, screen.String())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("run did not end:\n%s", screen.String())
	}
	eventually(t, "both tools' output", func() bool {
		return strings.Contains(screen.String(), "  call-0\r\n") && strings.Contains(screen.String(), "  call-1\r\n")
	})
}
