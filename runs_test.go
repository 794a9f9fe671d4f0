package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// ---- fakes: a scripted model router and a computer backed by a temp directory ----

type fakeModel struct {
	mu     sync.Mutex
	calls  int
	reqs   []ChatRequest
	cost   float64 // estimate and actual cost of every call
	script func(ctx context.Context, n int, req ChatRequest) (*ChatResponse, error)
}

func (f *fakeModel) EstimateCost(req ChatRequest) (string, float64, error) {
	return firstNonEmpty(req.Model, "fake/model"), f.cost, nil
}

func (f *fakeModel) Stream(ctx context.Context, req ChatRequest, opts chatOptions, emit func(StreamEvent)) (*ChatResponse, error) {
	f.mu.Lock()
	n := f.calls
	f.calls++
	f.reqs = append(f.reqs, req)
	f.mu.Unlock()
	if opts.MaxCostUSD >= 0 && f.cost > opts.MaxCostUSD+1e-12 {
		return nil, errorf(codeBudgetExceeded, "estimate over ceiling")
	}
	resp, err := f.script(ctx, n, req)
	if err != nil {
		return nil, err
	}
	if emit != nil && resp.Text != "" {
		emit(StreamEvent{Type: "text_delta", Text: resp.Text})
	}
	if resp.Model == "" {
		resp.Model = "fake/model"
	}
	resp.Usage = Usage{InputTokens: 100, OutputTokens: 10, CostUSD: f.cost}
	return resp, nil
}

func (f *fakeModel) requests() []ChatRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]ChatRequest(nil), f.reqs...)
}

func textResp(s string) *ChatResponse { return &ChatResponse{Text: s, FinishReason: "stop"} }

func toolResp(calls ...ToolCall) *ChatResponse {
	return &ChatResponse{ToolCalls: calls, FinishReason: "tool_calls"}
}

func call(id, name string, args map[string]any) ToolCall {
	return ToolCall{Type: "tool_call", ID: id, Name: name, Args: args}
}

// scriptOf plays the responses in order, then answers "done".
func scriptOf(rs ...*ChatResponse) func(context.Context, int, ChatRequest) (*ChatResponse, error) {
	return func(_ context.Context, n int, _ ChatRequest) (*ChatResponse, error) {
		if n < len(rs) {
			r := *rs[n]
			return &r, nil
		}
		return textResp("done"), nil
	}
}

type fakeComputer struct {
	dir     string
	mu      sync.Mutex
	ensures int
	id      string
	execs   atomic.Int64
	onExec  func(ctx context.Context, cmd string) // optional hook (blocking tests)
}

func newFakeComputer(t testing.TB) *fakeComputer {
	d := t.TempDir()
	os.MkdirAll(filepath.Join(d, "work"), 0o755)
	os.MkdirAll(filepath.Join(d, "tmp"), 0o755)
	return &fakeComputer{dir: d}
}

func (f *fakeComputer) host(p string) (string, error) {
	mp, err := lexicalJail(p)
	if err != nil {
		return "", err
	}
	return filepath.Join(f.dir, mp), nil
}

func (f *fakeComputer) Resolve(ctx context.Context, id, p string, keepLast bool) (string, error) {
	return lexicalJail(p)
}

func (f *fakeComputer) EnsureForAgent(ctx context.Context, agent string, spec ComputerSpec, pol commandPolicy) (*ComputerInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ensures++
	if f.id == "" {
		f.id = "cmp_" + agent
	}
	return &ComputerInfo{ID: f.id, Name: agent, Provider: "fake", State: "running", Workdir: "/work"}, nil
}

func (f *fakeComputer) Get(ctx context.Context, id string) (*ComputerInfo, error) {
	if id == "cmp_other" || (id != "" && id == f.id) {
		return &ComputerInfo{ID: id, Name: id, Provider: "fake", State: "running", Workdir: "/work"}, nil
	}
	return nil, errorf(codeComputerNotFound, "computer %q not found", id)
}

func (f *fakeComputer) Exec(ctx context.Context, id string, req ExecRequest, onOutput func(stream, data string)) (*ExecResult, error) {
	f.execs.Add(1)
	cmdline := req.Cmd.Shell
	if cmdline == "" {
		cmdline = strings.Join(req.Cmd.Argv, " ")
	}
	if ae := req.Policy.check(cmdline); ae != nil {
		return nil, ae
	}
	if f.onExec != nil {
		f.onExec(ctx, cmdline)
	}
	var c *exec.Cmd
	if req.Cmd.Shell != "" {
		c = exec.CommandContext(ctx, "/bin/sh", "-c", req.Cmd.Shell)
	} else {
		c = exec.CommandContext(ctx, req.Cmd.Argv[0], req.Cmd.Argv[1:]...)
	}
	cwd, err := f.host(firstNonEmpty(req.Cwd, "/work"))
	if err != nil {
		return nil, err
	}
	c.Dir = cwd
	var out, errb bytes.Buffer
	c.Stdout = writerFunc(func(p []byte) { out.Write(p); onOut(onOutput, "stdout", p) })
	c.Stderr = writerFunc(func(p []byte) { errb.Write(p); onOut(onOutput, "stderr", p) })
	err = c.Run()
	res := &ExecResult{Stdout: out.String(), Stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		res.ExitCode = ee.ExitCode()
	} else if err != nil {
		return nil, errorf(codeExecFailed, "%v", err)
	}
	return res, nil
}

func onOut(f func(string, string), stream string, p []byte) {
	if f != nil {
		f(stream, string(p))
	}
}

type writerFunc func(p []byte)

func (w writerFunc) Write(p []byte) (int, error) { w(p); return len(p), nil }

func (f *fakeComputer) ReadFile(ctx context.Context, id, p string) ([]byte, error) {
	h, err := f.host(p)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(h)
	if err != nil {
		return nil, errorf(codeFSDenied, "cannot read %s: %v", p, err)
	}
	return b, nil
}

func (f *fakeComputer) WriteFile(ctx context.Context, id, p string, data []byte) error {
	h, err := f.host(p)
	if err != nil {
		return err
	}
	os.MkdirAll(filepath.Dir(h), 0o755)
	return os.WriteFile(h, data, 0o644)
}

func (f *fakeComputer) ListDir(ctx context.Context, id, p string) ([]DirEntry, error) {
	h, err := f.host(p)
	if err != nil {
		return nil, err
	}
	es, err := os.ReadDir(h)
	if err != nil {
		return nil, errorf(codeFSDenied, "cannot list %s: %v", p, err)
	}
	mp, _ := lexicalJail(p)
	var dirs, files []DirEntry
	for _, e := range es {
		info, _ := e.Info()
		d := DirEntry{Name: e.Name(), Path: mp + "/" + e.Name(), Type: "file", Size: info.Size()}
		if e.IsDir() {
			d.Type = "dir"
			dirs = append(dirs, d)
			continue
		}
		files = append(files, d)
	}
	return append(dirs, files...), nil
}

func (f *fakeComputer) DeletePath(ctx context.Context, id, p string, recursive bool) error {
	h, err := f.host(p)
	if err != nil {
		return err
	}
	if recursive {
		return os.RemoveAll(h)
	}
	return os.Remove(h)
}

func (f *fakeComputer) ExposePort(ctx context.Context, id string, port int) (*PortBinding, error) {
	return &PortBinding{HostPort: port, URL: fmt.Sprintf("http://127.0.0.1:%d", port), Reachable: true}, nil
}

// ---- the test server: newTestServer(t, withFakeModel(m)) ----

// testSpec is a spec with the defaults the foundation applies, then changed by mut.
func testSpec(name string, mut func(*AgentSpec)) *AgentSpec {
	sp := &AgentSpec{APIVersion: "agent/v1", Name: name, Version: "0.1.0", Model: "fake/model",
		Tools: []string{"computer", "files"},
		Limits: Limits{MaxSteps: 24, MaxCostUSD: 0.5, MaxTokens: 200000, TimeoutSec: 300, ExecTimeoutSec: 120,
			MaxOutputBytes: 262144},
		Guardrails: Guardrails{ApprovalMode: "auto", RedactSecrets: true},
		Memory:     MemorySpec{Backend: "sqlite", WindowTurns: 20, Summarise: true},
	}
	if mut != nil {
		mut(sp)
	}
	return sp
}

func (te *testServer) putAgent(sp *AgentSpec) {
	te.t.Helper()
	b, _ := json.Marshal(sp)
	now := timestamp(time.Now())
	if _, err := te.s.store.CreateAgent(context.Background(), agentRow{Name: sp.Name, YAML: "", SpecJSON: string(b), CreatedAt: now, UpdatedAt: now}); err != nil {
		te.t.Fatal(err)
	}
}

// run runs agent to its end and returns the result.
func (te *testServer) run(agent string, body any) map[string]any {
	te.t.Helper()
	return te.call("POST", "/v1/agents/"+agent+"/run", body, 200, nil).json(te.t)
}

// stream starts a streamed run.
func (te *testServer) stream(agent string, body any) *sseStream {
	te.t.Helper()
	return te.sse("POST", "/v1/agents/"+agent+"/run/stream", body, "Accept", "text/event-stream")
}

func types(evs []any) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.(map[string]any)["type"].(string))
	}
	return out
}

// ---- endpoint tests ----

func TestRunMultiStepWithToolsAndRecord(t *testing.T) {
	m := &fakeModel{cost: 0.001}
	m.script = scriptOf(
		toolResp(call("c1", "write_file", map[string]any{"path": "notes.txt", "content": "alpha\nbeta\n"})),
		toolResp(call("c2", "shell", map[string]any{"command": "cat notes.txt; echo made >&2"})),
		textResp("all done"),
	)
	te := newTestServer(t, withFakeModel(m))
	te.putAgent(testSpec("writer", nil))

	res := te.run("writer", map[string]any{"input": "write notes"})
	if res["stopReason"] != "complete" || res["text"] != "all done" || res["steps"].(float64) != 3 {
		t.Fatalf("result: %v", res)
	}
	if _, ok := res["error"]; ok {
		t.Fatalf("complete run has an error: %v", res["error"])
	}
	b, _ := os.ReadFile(filepath.Join(te.comp.dir, "work", "notes.txt"))
	if string(b) != "alpha\nbeta\n" {
		t.Fatalf("file: %q", b)
	}
	// The shell output went back to the model as a tool result.
	reqs := m.requests()
	last := reqs[2].Messages
	tr := last[len(last)-1].Content[0]
	if tr.Type != "tool_result" || tr.ToolCallID != "c2" || !strings.Contains(tr.Content, "alpha") || !strings.Contains(tr.Content, "[exit code 0]") {
		t.Fatalf("tool result: %+v", tr)
	}
	id := res["runId"].(string)
	if !strings.HasPrefix(id, "run_") {
		t.Fatalf("run id %q", id)
	}
	got := te.call("GET", "/v1/runs/"+id, nil, 200, nil).json(t)
	r := got["result"].(map[string]any)
	if r["runId"] != id || r["stopReason"] != "complete" {
		t.Fatalf("stored result: %v", r)
	}
	evs := got["events"].([]any)
	ts := types(evs)
	if ts[0] != "run_start" || ts[len(ts)-1] != "run_end" {
		t.Fatalf("event order: %v", ts)
	}
	if evs[0].(map[string]any)["runId"] != id || evs[len(evs)-1].(map[string]any)["result"].(map[string]any)["runId"] != id {
		t.Fatal("run id differs between run_start, run_end and the record")
	}
	for _, want := range []string{"step_start", "tool_start", "tool_delta", "tool_end", "usage", "computer_ready", "text_delta", "message"} {
		if !strings.Contains(strings.Join(ts, ","), want) {
			t.Fatalf("missing %s in %v", want, ts)
		}
	}
	list := te.call("GET", "/v1/runs?agent=writer", nil, 200, nil).json(t)
	runs := list["runs"].([]any)
	if len(runs) != 1 || runs[0].(map[string]any)["status"] != "complete" || runs[0].(map[string]any)["runId"] != id {
		t.Fatalf("list: %v", list)
	}
	counts, _ := te.s.store.RunCounts(context.Background())
	if counts["writer"] != 1 {
		t.Fatalf("runCount %v", counts)
	}
	// cancel of a finished run: 202, cancelled false, its status.
	if c := te.call("POST", "/v1/runs/"+id+"/cancel", nil, 202, nil).json(t); c["cancelled"] != false || c["status"] != "complete" || c["runId"] != id {
		t.Fatalf("cancel finished: %v", c)
	}
	te.call("DELETE", "/v1/runs/"+id, nil, 204, nil)
	te.wantError("GET", "/v1/runs/"+id, nil, 404, "E_RUN_NOT_FOUND")
}

func TestRunStreamEventsAndSameID(t *testing.T) {
	m := &fakeModel{script: scriptOf(toolResp(call("c1", "shell", map[string]any{"command": "echo streamed"})), textResp("ok"))}
	te := newTestServer(t, withFakeModel(m))
	te.putAgent(testSpec("streamer", nil))
	s := te.stream("streamer", map[string]any{"input": "go"})
	if ct := s.resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	evs := s.all()
	if evs[0]["type"] != "run_start" || evs[0]["agent"] != "streamer" || evs[0]["model"] == "" {
		t.Fatalf("first event %v", evs[0])
	}
	id := evs[0]["runId"].(string)
	end := evs[len(evs)-1]
	if end["type"] != "run_end" || end["result"].(map[string]any)["runId"] != id {
		t.Fatalf("last event %v", end)
	}
	var sawDelta bool
	for _, e := range evs {
		if e["type"] == "tool_delta" && strings.Contains(e["text"].(string), "streamed") && e["callId"] == "c1" && e["stream"] == "stdout" {
			sawDelta = true
		}
		if e["type"] == "tool_end" {
			if _, ok := e["isError"]; !ok {
				t.Fatalf("tool_end without isError: %v", e)
			}
			if _, ok := e["durationMs"]; !ok {
				t.Fatalf("tool_end without durationMs: %v", e)
			}
		}
	}
	if !sawDelta {
		t.Fatal("no tool_delta with the shell output")
	}
	if got := te.call("GET", "/v1/runs/"+id, nil, 200, nil).json(t); len(got["events"].([]any)) != len(evs) {
		t.Fatalf("stored %d events, streamed %d", len(got["events"].([]any)), len(evs))
	}
}

func TestRunBadInput(t *testing.T) {
	m := &fakeModel{script: scriptOf()}
	te := newTestServer(t, withFakeModel(m))
	te.putAgent(testSpec("bad", func(sp *AgentSpec) { sp.Limits.MaxSteps = 5; sp.Limits.MaxCostUSD = 0.2 }))
	cases := []struct {
		name, path string
		body       any
		code       int
		errCode    string
		msg        string
	}{
		{"missing input", "/v1/agents/bad/run", map[string]any{}, 422, "E_SPEC_INVALID", "non-empty input"},
		{"empty input", "/v1/agents/bad/run", map[string]any{"input": ""}, 422, "E_SPEC_INVALID", "non-empty input"},
		{"blank input", "/v1/agents/bad/run", map[string]any{"input": "   "}, 422, "E_SPEC_INVALID", "non-empty input"},
		{"empty messages", "/v1/agents/bad/run", map[string]any{"input": []any{}}, 422, "E_SPEC_INVALID", "non-empty input"},
		{"null input", "/v1/agents/bad/run", `{"input": null}`, 422, "E_SPEC_INVALID", "non-empty input"},
		{"blank messages", "/v1/agents/bad/run", map[string]any{"input": []any{map[string]any{"role": "user", "content": " "},
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": ""}}}}}, 422, "E_SPEC_INVALID", "non-empty input"},
		{"no body", "/v1/agents/bad/run", "", 422, "E_SPEC_INVALID", "non-empty input"},
		{"number input", "/v1/agents/bad/run", map[string]any{"input": 5}, 422, "E_SPEC_INVALID", "input"},
		{"bad role", "/v1/agents/bad/run", map[string]any{"input": []any{map[string]any{"role": "boss", "content": "x"}}}, 422, "E_SPEC_INVALID", "role"},
		{"unknown key", "/v1/agents/bad/run", map[string]any{"input": "x", "maxTokens": 5}, 422, "E_SPEC_INVALID", "maxTokens"},
		{"timeoutSec not settable", "/v1/agents/bad/run", map[string]any{"input": "x", "timeoutSec": 5}, 422, "E_SPEC_INVALID", "timeoutSec"},
		{"float maxSteps", "/v1/agents/bad/run", map[string]any{"input": "x", "maxSteps": 2.5}, 422, "E_SPEC_INVALID", "maxSteps"},
		{"negative cost", "/v1/agents/bad/run", map[string]any{"input": "x", "maxCostUsd": -1}, 422, "E_SPEC_INVALID", "maxCostUsd"},
		{"bad approval mode", "/v1/agents/bad/run", map[string]any{"input": "x", "approvalMode": "yolo"}, 422, "E_SPEC_INVALID", "approvalMode"},
		{"malformed json", "/v1/agents/bad/run", `{"input": `, 422, "E_SPEC_INVALID", "JSON"},
		{"unknown agent", "/v1/agents/nobody/run", map[string]any{"input": "x"}, 404, "E_AGENT_NOT_FOUND", "nobody"},
		{"unknown agent stream", "/v1/agents/nobody/run/stream", map[string]any{"input": "x"}, 404, "E_AGENT_NOT_FOUND", "nobody"},
		{"unknown computer", "/v1/agents/bad/run", map[string]any{"input": "x", "computerId": "cmp_nope"}, 404, "E_COMPUTER_NOT_FOUND", "cmp_nope"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := te.with(t).wantError("POST", c.path, c.body, c.code, c.errCode)
			if !strings.Contains(e["message"].(string), c.msg) {
				t.Fatalf("got %v", e)
			}
			if _, ok := e["hint"]; !ok {
				t.Fatal("no hint")
			}
		})
	}
	// An unknown key names what the body accepts; maxTokens and timeoutSec say where they are set.
	if out := te.do("POST", "/v1/agents/bad/run", map[string]any{"input": "x", "timeoutSec": 5}).json(t); !strings.Contains(out["error"].(map[string]any)["hint"].(string), "spec") {
		t.Fatalf("timeoutSec hint: %v", out)
	}
	if out := te.do("POST", "/v1/agents/bad/run", map[string]any{"input": "x", "prompt": "y"}).json(t); !strings.Contains(out["error"].(map[string]any)["hint"].(string), "computerId") {
		t.Fatalf("unknown key hint: %v", out)
	}
	// Nothing was recorded by the refused requests.
	if list := te.do("GET", "/v1/runs", nil).json(t); len(list["runs"].([]any)) != 0 {
		t.Fatalf("refused runs were recorded: %v", list)
	}
	for _, c := range []struct{ method, path, code string }{
		{"GET", "/v1/runs/run_nope", "E_RUN_NOT_FOUND"},
		{"DELETE", "/v1/runs/run_nope", "E_RUN_NOT_FOUND"},
		{"POST", "/v1/runs/run_nope/cancel", "E_RUN_NOT_FOUND"},
	} {
		if e := te.wantError(c.method, c.path, nil, 404, c.code); !strings.Contains(e["message"].(string), "run_nope") {
			t.Fatalf("%s %s: %v", c.method, c.path, e)
		}
	}
	if r := te.do("GET", "/v1/runs?limit=abc", nil); r.status != 422 {
		t.Fatalf("limit=abc: %d %s", r.status, r.body)
	}
	if r := te.do("GET", "/v1/runs?cursor=!!", nil); r.status != 422 {
		t.Fatalf("bad cursor: %d %s", r.status, r.body)
	}
}

func TestRunBodyClampsCeilings(t *testing.T) {
	m := &fakeModel{cost: 0.01, script: func(ctx context.Context, n int, req ChatRequest) (*ChatResponse, error) {
		return toolResp(call(fmt.Sprint("c", n), "computer_info", map[string]any{"n": n})), nil
	}}
	te := newTestServer(t, withFakeModel(m))
	te.putAgent(testSpec("clamp", func(sp *AgentSpec) { sp.Limits.MaxSteps = 3; sp.Limits.MaxCostUSD = 1 }))

	// maxSteps 10,000 is clamped to the spec's 3.
	res := te.run("clamp", map[string]any{"input": "x", "maxSteps": 10000})
	if res["stopReason"] != "step_limit" || res["steps"].(float64) != 3 {
		t.Fatalf("maxSteps 10000: %v", res)
	}
	if _, ok := res["error"]; ok {
		t.Fatal("step_limit carries no error")
	}
	// maxSteps 0 is clamped to 1.
	res = te.run("clamp", map[string]any{"input": "x", "maxSteps": 0})
	if res["stopReason"] != "step_limit" || res["steps"].(float64) != 1 {
		t.Fatalf("maxSteps 0: %v", res)
	}
	// maxCostUsd above the spec is clamped to it: 1 USD allows... but a lower body value is honoured.
	res = te.run("clamp", map[string]any{"input": "x", "maxCostUsd": 0.015})
	if res["stopReason"] != "budget" || res["steps"].(float64) != 1 || res["error"].(map[string]any)["code"] != "E_BUDGET_EXCEEDED" {
		t.Fatalf("maxCostUsd lowered: %v", res)
	}
	te.putAgent(testSpec("cheap", func(sp *AgentSpec) { sp.Limits.MaxSteps = 10; sp.Limits.MaxCostUSD = 0.025 }))
	s := te.stream("cheap", map[string]any{"input": "x", "maxCostUsd": 100})
	evs := s.all()
	var warned bool
	for _, e := range evs {
		if e["type"] == "warning" && strings.Contains(e["message"].(string), "clamped") {
			warned = true
		}
	}
	end := evs[len(evs)-1]["result"].(map[string]any)
	if !warned || end["stopReason"] != "budget" || end["steps"].(float64) != 2 {
		t.Fatalf("maxCostUsd 100 over a 0.025 spec: warned=%v %v", warned, end)
	}
}

func TestRunListPagination(t *testing.T) {
	m := &fakeModel{script: scriptOf()}
	te := newTestServer(t, withFakeModel(m))
	te.putAgent(testSpec("a1", nil))
	te.putAgent(testSpec("a2", nil))
	var ids []string
	for i := 0; i < 5; i++ {
		ids = append(ids, te.run("a1", map[string]any{"input": "x"})["runId"].(string))
	}
	te.run("a2", map[string]any{"input": "x"})
	var seen []string
	cursor := ""
	for page := 0; page < 10; page++ {
		out := te.do("GET", "/v1/runs?agent=a1&limit=2"+cursor, nil).json(t)
		for _, r := range out["runs"].([]any) {
			seen = append(seen, r.(map[string]any)["runId"].(string))
		}
		nc, ok := out["nextCursor"].(string)
		if !ok {
			break
		}
		cursor = "&cursor=" + nc
	}
	if len(seen) != 5 {
		t.Fatalf("paged %v", seen)
	}
	for i := range seen {
		if seen[i] != ids[len(ids)-1-i] {
			t.Fatalf("order: got %v want newest first of %v", seen, ids)
		}
	}
	if out := te.do("GET", "/v1/runs?limit=0", nil).json(t); len(out["runs"].([]any)) != 1 {
		t.Fatalf("limit=0 clamps to 1: %v", out)
	}
	if out := te.do("GET", "/v1/runs?limit=100000", nil).json(t); len(out["runs"].([]any)) != 6 {
		t.Fatalf("limit clamps to 500: %v", out)
	}
	if out := te.do("GET", "/v1/runs", nil).json(t); len(out["runs"].([]any)) != 6 || out["nextCursor"] != nil {
		t.Fatalf("default page: %v", out)
	}
}

func TestCancelInFlightAndIdempotent(t *testing.T) {
	entered := make(chan struct{}, 1)
	m := &fakeModel{script: func(ctx context.Context, n int, req ChatRequest) (*ChatResponse, error) {
		entered <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	te := newTestServer(t, withFakeModel(m))
	te.putAgent(testSpec("slow", nil))
	s := te.stream("slow", map[string]any{"input": "x"})
	id := s.until(t, "run_start")["runId"].(string)
	<-entered
	// In flight: GET answers the summary.
	if got := te.call("GET", "/v1/runs/"+id, nil, 200, nil).json(t); got["result"].(map[string]any)["status"] != "running" {
		t.Fatalf("in flight get: %v", got)
	}
	if act := te.s.activeRuns(); len(act) != 1 || act[0]["runId"] != id || act[0]["agent"] != "slow" {
		t.Fatalf("hello activeRuns: %v", act)
	}
	if c := te.call("POST", "/v1/runs/"+id+"/cancel", nil, 202, nil).json(t); c["cancelled"] != true || c["status"] != "aborted" || c["runId"] != id {
		t.Fatalf("cancel: %v", c)
	}
	if act := te.s.activeRuns(); len(act) != 0 {
		t.Fatalf("activeRuns after cancel: %v", act)
	}
	end := s.until(t, "run_end")["result"].(map[string]any)
	if end["stopReason"] != "aborted" || end["error"].(map[string]any)["code"] != "E_ABORTED" || end["runId"] != id {
		t.Fatalf("end: %v", end)
	}
	if c := te.call("POST", "/v1/runs/"+id+"/cancel", nil, 202, nil).json(t); c["cancelled"] != false || c["status"] != "aborted" {
		t.Fatalf("second cancel: %v", c)
	}
	if got := te.do("GET", "/v1/runs/"+id, nil).json(t); got["result"].(map[string]any)["stopReason"] != "aborted" {
		t.Fatalf("stored: %v", got)
	}
	if te.comp.ensures != 0 {
		t.Fatal("abort touched the computer")
	}
}

func TestDeleteInFlightCancelsFirst(t *testing.T) {
	entered := make(chan struct{}, 1)
	m := &fakeModel{script: func(ctx context.Context, n int, req ChatRequest) (*ChatResponse, error) {
		entered <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	te := newTestServer(t, withFakeModel(m))
	te.putAgent(testSpec("slow", nil))
	s := te.stream("slow", map[string]any{"input": "x"})
	id := s.until(t, "run_start")["runId"].(string)
	<-entered
	te.call("DELETE", "/v1/runs/"+id, nil, 204, nil)
	if res := s.until(t, "run_end")["result"].(map[string]any); res["stopReason"] != "aborted" {
		t.Fatalf("end %v", res)
	}
	te.wantError("GET", "/v1/runs/"+id, nil, 404, codeRunNotFound) // deleted
}

func TestStreamDisconnectAborts(t *testing.T) {
	entered := make(chan struct{}, 1)
	m := &fakeModel{script: func(ctx context.Context, n int, req ChatRequest) (*ChatResponse, error) {
		entered <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	te := newTestServer(t, withFakeModel(m))
	te.putAgent(testSpec("gone", nil))
	s := te.stream("gone", map[string]any{"input": "x"})
	id := s.until(t, "run_start")["runId"].(string)
	<-entered
	s.cancel()
	s.resp.Body.Close()
	eventually(t, "the run to be recorded aborted", func() bool {
		st, _, _, _ := te.s.store.GetRun(context.Background(), id)
		return st == "aborted"
	})
	got := te.do("GET", "/v1/runs/"+id, nil).json(t)
	if !strings.Contains(got["result"].(map[string]any)["error"].(map[string]any)["message"].(string), "disconnect") {
		t.Fatalf("abort reason: %v", got["result"])
	}
}

func TestRestartMarksInFlightAborted(t *testing.T) {
	home := t.TempDir()
	st, err := openStore(filepath.Join(home, "agentd.db"), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	m := &fakeModel{script: func(ctx context.Context, n int, req ChatRequest) (*ChatResponse, error) {
		entered <- struct{}{}
		<-release
		return textResp("late"), nil
	}}
	rs := newRunService(runDeps{store: st, models: m, computers: newFakeComputer(t), home: home})
	ar, err := rs.start(testSpec("crashy", nil), &runParams{Input: []ModelMessage{textMessage("user", "x")}, MaxSteps: 3, MaxCostUSD: 1, ApprovalMode: "auto"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	eventually(t, "the run row", func() bool { s, _, _, _ := st.GetRun(context.Background(), ar.id); return s == "running" })
	// The run is blocked in its model call; wait until what it emitted before (step_start) is stored, as a
	// crashed process writes nothing more — otherwise the old recorder's late flush could follow run_end.
	eventually(t, "step_start stored", func() bool {
		evs, _ := st.RunEvents(context.Background(), ar.id)
		return len(evs) > 0 && strings.Contains(string(evs[len(evs)-1]), "step_start")
	})
	// A crash: the process is gone without Close. A new service on the same database marks it aborted.
	rs2 := newRunService(runDeps{store: st, models: m, computers: newFakeComputer(t), home: home})
	status, _, res, err := st.GetRun(context.Background(), ar.id)
	if err != nil || status != "aborted" {
		t.Fatalf("after restart: %q %v", status, err)
	}
	var rr RunResult
	json.Unmarshal(res, &rr)
	if rr.StopReason != "aborted" || rr.Error == nil || rr.Error.Code != codeAborted || rr.RunID != ar.id {
		t.Fatalf("result %+v", rr)
	}
	evs, _ := st.RunEvents(context.Background(), ar.id)
	if !strings.Contains(string(evs[len(evs)-1]), "run_end") {
		t.Fatalf("no run_end recorded: %s", evs[len(evs)-1])
	}
	rs2.Close()
	close(release)
	rs.Close()
	st.Close()
}

func TestCloseAbortsRunsInFlight(t *testing.T) {
	m := &fakeModel{script: func(ctx context.Context, n int, req ChatRequest) (*ChatResponse, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	te := newTestServer(t, withFakeModel(m))
	sp := testSpec("x", nil)
	ar, err := te.s.runs.start(sp, &runParams{Input: []ModelMessage{textMessage("user", "x")}, MaxSteps: 3, MaxCostUSD: 1, ApprovalMode: "auto"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	te.s.runs.Close()
	if r := ar.wait(); r.StopReason != "aborted" || !strings.Contains(r.Error.Message, "shutting down") {
		t.Fatalf("after Close: %+v", r)
	}
	status, _, _, _ := te.s.store.GetRun(context.Background(), ar.id)
	if status != "aborted" {
		t.Fatalf("recorded %q", status)
	}
	if _, err := te.s.runs.start(sp, &runParams{Input: []ModelMessage{textMessage("user", "x")}, MaxSteps: 1}, nil); err == nil {
		t.Fatal("a closed service started a run")
	}
}

func TestEventsSocketRunsTopic(t *testing.T) {
	m := &fakeModel{script: scriptOf()}
	te := newTestServer(t, withFakeModel(m))
	te.putAgent(testSpec("pub", nil))
	sub, _ := te.s.hub.subscribe()
	defer te.s.hub.unsubscribe(sub)
	res := te.run("pub", map[string]any{"input": "x"})
	var started, finished bool
	for !finished {
		select {
		case ev := <-sub.ch:
			if ev.Topic != "runs" {
				continue
			}
			sum := ev.Payload.(RunSummary)
			if sum.RunID != res["runId"] {
				t.Fatalf("payload %+v", sum)
			}
			switch ev.Type {
			case "run_started":
				started = sum.Status == "running"
			case "run_finished":
				finished = sum.Status == "complete" && sum.FinishedAt != ""
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no run_finished event")
		}
	}
	if !started {
		t.Fatal("no run_started")
	}
}

func TestRunIDsSortByTime(t *testing.T) {
	a := newRunID(time.UnixMilli(1_700_000_000_000))
	b := newRunID(time.UnixMilli(1_700_000_000_001))
	c := newRunID(time.UnixMilli(1_800_000_000_000))
	if !(a < b && b < c) {
		t.Fatalf("%s %s %s do not sort", a, b, c)
	}
}

func testLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// FuzzRunBody: any body either becomes valid run params or a 422 E_SPEC_INVALID; never a panic.
func FuzzRunBody(f *testing.F) {
	for _, s := range []string{
		`{"input":"hi"}`, `{"input":[{"role":"user","content":"x"}]}`, `{"input":""}`, `{"input":null}`,
		`{"input":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"tool_result","toolCallId":"c","content":"r"}]}]}`,
		`{"input":"x","history":[{"role":"assistant","content":"y"}],"vars":{"a":1,"b":"c"},"maxSteps":0,"maxCostUsd":9}`,
		`{"input":[{"role":"boss"}]}`, `{"input":"x","approvalMode":"ask","computerId":"cmp_1"}`, `[]`, `{"input":5}`,
	} {
		f.Add([]byte(s))
	}
	spec := testSpec("fuzz", nil)
	f.Fuzz(func(t *testing.T, b []byte) {
		var body runBody
		if err := decodeBytes(b, &body); err != nil {
			if asAPIError(err).Code != codeSpecInvalid {
				t.Fatalf("decode error %v", err)
			}
			return
		}
		p, err := prepareRun(spec, body)
		if err != nil {
			if asAPIError(err).Code != codeSpecInvalid {
				t.Fatalf("prepare error %v", err)
			}
			return
		}
		if len(p.Input) == 0 || p.MaxSteps < 1 || p.MaxSteps > spec.Limits.MaxSteps || p.MaxCostUSD > spec.Limits.MaxCostUSD || p.MaxCostUSD < 0 {
			t.Fatalf("params out of bounds: %+v", p)
		}
	})
}

// floodModel streams large text deltas until the run is cancelled.
type floodModel struct{}

func (floodModel) EstimateCost(ChatRequest) (string, float64, error) { return "fake/flood", 0, nil }
func (floodModel) Stream(ctx context.Context, req ChatRequest, opts chatOptions, emit func(StreamEvent)) (*ChatResponse, error) {
	chunk := strings.Repeat("x", 32<<10)
	for ctx.Err() == nil {
		emit(StreamEvent{Type: "text_delta", Text: chunk})
	}
	return nil, ctx.Err()
}

func TestStalledConsumerAbortsRun(t *testing.T) {
	te := newTestServer(t, withFakeModel(&fakeModel{}))
	te.s.runs.models = floodModel{}
	te.s.runs.streamStall = 200 * time.Millisecond
	te.putAgent(testSpec("flood", nil))
	te.stream("flood", map[string]any{"input": "go"}) // never read: the consumer stalls
	var id string
	eventually(t, "the stalled run to be aborted", func() bool {
		list := te.do("GET", "/v1/runs?agent=flood", nil).json(t)
		runs := list["runs"].([]any)
		if len(runs) == 0 {
			return false
		}
		sum := runs[0].(map[string]any)
		id = sum["runId"].(string)
		return sum["status"] == "aborted"
	})
	got := te.do("GET", "/v1/runs/"+id, nil).json(t)
	if msg := got["result"].(map[string]any)["error"].(map[string]any)["message"].(string); !strings.Contains(msg, "stalled") {
		t.Fatalf("abort reason %q", msg)
	}
}

// DELETE of a run whose tool ignores cancellation answers 204 after its bounded wait; the run's late
// end record must not bring the deleted run back.
func TestDeleteOfSlowWindingRunStaysDeleted(t *testing.T) {
	release := make(chan struct{})
	m := &fakeModel{script: scriptOf(toolResp(call("s1", "shell", map[string]any{"command": "echo stuck"})))}
	te := newTestServer(t, withFakeModel(m))
	entered := make(chan struct{}, 1)
	te.comp.onExec = func(ctx context.Context, cmd string) {
		entered <- struct{}{}
		<-release // ignores ctx, as a wedged tool would
	}
	te.s.runs.cancelWait = time.Millisecond
	te.putAgent(testSpec("wedged", nil))
	s := te.stream("wedged", map[string]any{"input": "x"})
	id := s.until(t, "run_start")["runId"].(string)
	<-entered
	ar := te.s.runs.get(id)
	te.call("DELETE", "/v1/runs/"+id, nil, 204, nil)
	close(release)
	ar.wait()
	te.wantError("GET", "/v1/runs/"+id, nil, 404, codeRunNotFound) // the late end record did not bring it back
}

// At shutdown the server cancels every request's context; the runs those requests drive are recorded
// as stopped by the shutdown, not as if their clients had left.
func TestShutdownCancelledRequestRecordsShutdown(t *testing.T) {
	entered := make(chan struct{}, 2)
	m := &fakeModel{script: func(ctx context.Context, n int, req ChatRequest) (*ChatResponse, error) {
		entered <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	te := newTestServer(t, withFakeModel(m))
	te.putAgent(testSpec("down", nil))
	s := te.stream("down", map[string]any{"input": "x"})
	id := s.until(t, "run_start")["runId"].(string)
	<-entered
	te.s.cancelStream() // what the server does first on shutdown; it also ends every request context
	s.cancel()
	s.resp.Body.Close()
	eventually(t, "the run to be recorded aborted", func() bool {
		st, _, _, _ := te.s.store.GetRun(context.Background(), id)
		return st == "aborted"
	})
	_, _, res, _ := te.s.store.GetRun(context.Background(), id)
	if !strings.Contains(string(res), "shutting down") {
		t.Fatalf("abort reason: %s", res)
	}
}

// By the time run_end reaches the stream the run is recorded finished, with its run_end stored: a
// client that GETs the run on seeing run_end never finds it still running.
func TestRunEndIsStoredBeforeItIsStreamed(t *testing.T) {
	m := &fakeModel{script: scriptOf()}
	te := newTestServer(t, withFakeModel(m))
	checked := make(chan string, 1)
	ar, err := te.s.runs.start(testSpec("ordered", nil), &runParams{Input: []ModelMessage{textMessage("user", "x")}, MaxSteps: 2, MaxCostUSD: 1, ApprovalMode: "auto"},
		func(ev runEvent, _ []byte) {
			if ev.Type != "run_end" {
				return
			}
			status, _, res, err := te.s.store.GetRun(context.Background(), ev.Result.RunID)
			evs, _ := te.s.store.RunEvents(context.Background(), ev.Result.RunID)
			last := ""
			if len(evs) > 0 {
				last = string(evs[len(evs)-1])
			}
			checked <- fmt.Sprintf("status=%s result=%v err=%v lastEventIsEnd=%v", status, len(res) > 0, err, strings.Contains(last, `"run_end"`))
		})
	if err != nil {
		t.Fatal(err)
	}
	ar.wait()
	if got := <-checked; got != "status=complete result=true err=<nil> lastEventIsEnd=true" {
		t.Fatalf("when run_end was streamed: %s", got)
	}
}

// wait blocks until the run has ended and returns its result.
func (ar *activeRun) wait() *RunResult {
	<-ar.done
	return ar.result
}
