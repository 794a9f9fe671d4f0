package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestSystemPromptAndMessageOrder(t *testing.T) {
	m := &fakeModel{script: scriptOf(textResp("hi"))}
	te := newTestServer(t, withFakeModel(m))
	te.putAgent(testSpec("shaped", func(sp *AgentSpec) {
		sp.Persona = "You help {{ user }} with {{topic}}. Keep {{unknown}} as is."
		sp.Knowledge = []Knowledge{{Title: "Prices", Content: "Tea costs 2."}, {Title: "Hours", Content: "Open 9-5."}}
		sp.Guardrails.Refuse = []string{"medical advice", "legal advice"}
		sp.Examples = []Example{{User: "ex question", Assistant: "ex answer"}}
	}))
	te.run("shaped", map[string]any{
		"input":   []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "the input"}}}},
		"history": []any{map[string]any{"role": "user", "content": "old q"}, map[string]any{"role": "assistant", "content": "old a"}},
		"vars":    map[string]any{"user": "Ana", "topic": "tea", "n": 3},
	})
	req := m.requests()[0]
	want := "You help Ana with tea. Keep {{unknown}} as is.\n\n## Reference\n\n### Prices\nTea costs 2.\n\n### Hours\nOpen 9-5.\n\n## Out of scope\n"
	if !strings.HasPrefix(req.System, want) || !strings.Contains(req.System, "\n- medical advice\n- legal advice") {
		t.Fatalf("system prompt:\n%s", req.System)
	}
	var got []string
	for _, msg := range req.Messages {
		got = append(got, msg.Role+":"+msg.Content[0].Text)
	}
	if strings.Join(got, "|") != "user:ex question|assistant:ex answer|user:old q|assistant:old a|user:the input" {
		t.Fatalf("messages: %v", got)
	}
	if len(req.Tools) == 0 || req.Model != "fake/model" {
		t.Fatalf("request: tools %d model %q", len(req.Tools), req.Model)
	}
}

func TestResolveTools(t *testing.T) {
	noKey := func(string) string { return "" }
	withKey := func(k string) string {
		if k == "BRAVE_API_KEY" {
			return "k"
		}
		return ""
	}
	sp := testSpec("t", func(sp *AgentSpec) { sp.Tools = []string{"computer", "web", "nonsense", "read_file", "shell"} })
	if got := strings.Join(resolveTools(sp, noKey), ","); got != "shell,expose_port,computer_info,fetch_url,read_file" {
		t.Fatalf("got %s", got)
	}
	if got := strings.Join(resolveTools(sp, withKey), ","); !strings.Contains(got, "web_search") {
		t.Fatalf("web_search missing with a key: %s", got)
	}
	off := false
	sp.Computer.Enabled = &off
	sp.Tools = []string{"computer", "files", "web", "http"}
	if got := strings.Join(resolveTools(sp, noKey), ","); got != "fetch_url,http_request" {
		t.Fatalf("computer disabled: %s", got)
	}
	sp.Tools = nil
	sp.Computer.Enabled = nil
	if got := strings.Join(resolveTools(sp, noKey), ","); got != "shell,expose_port,computer_info" {
		t.Fatalf("default: %s", got)
	}
	for name, tool := range toolCatalog() {
		if tool.def.Name != name || tool.def.Parameters["type"] != "object" || tool.def.Description == "" {
			t.Fatalf("tool %s has a bad definition", name)
		}
	}
}

func TestStopReasonLoopAndNudge(t *testing.T) {
	m := &fakeModel{script: func(ctx context.Context, n int, req ChatRequest) (*ChatResponse, error) {
		return toolResp(call(fmt.Sprint("c", n), "computer_info", map[string]any{"same": true})), nil
	}}
	te := newTestServer(t, withFakeModel(m))
	te.putAgent(testSpec("looper", nil))
	res := te.run("looper", map[string]any{"input": "x"})
	if res["stopReason"] != "loop" || res["steps"].(float64) != 5 {
		t.Fatalf("result %v", res)
	}
	if te.comp.ensures == 0 {
		t.Fatal("tools never ran")
	}
	reqs := m.requests()
	if len(reqs) != 5 {
		t.Fatalf("%d model calls", len(reqs))
	}
	// The third identical call's result carries a nudge; the second's does not.
	third := reqs[3].Messages[len(reqs[3].Messages)-1].Content[0].Content
	second := reqs[2].Messages[len(reqs[2].Messages)-1].Content[0].Content
	if !strings.Contains(third, "3 times") || strings.Contains(second, "times") {
		t.Fatalf("nudge: second %q third %q", second, third)
	}
}

func TestStopReasonStepLimitAndTokens(t *testing.T) {
	m := &fakeModel{script: func(ctx context.Context, n int, req ChatRequest) (*ChatResponse, error) {
		return toolResp(call(fmt.Sprint("c", n), "computer_info", map[string]any{"n": n})), nil
	}}
	te := newTestServer(t, withFakeModel(m))
	te.putAgent(testSpec("steps", func(sp *AgentSpec) { sp.Limits.MaxSteps = 2 }))
	res := te.run("steps", map[string]any{"input": "x"})
	if res["stopReason"] != "step_limit" || res["steps"].(float64) != 2 || res["error"] != nil {
		t.Fatalf("step_limit: %v", res)
	}
	// Each fake call uses 110 tokens; a 250 token ceiling stops before the fourth call.
	te.putAgent(testSpec("tokens", func(sp *AgentSpec) { sp.Limits.MaxTokens = 250 }))
	res = te.run("tokens", map[string]any{"input": "x"})
	if res["stopReason"] != "budget" || res["steps"].(float64) != 3 || !strings.Contains(res["error"].(map[string]any)["message"].(string), "tokens") {
		t.Fatalf("tokens: %v", res)
	}
	// The ceiling order: steps first, even when cost would also stop the run.
	m.cost = 1
	te.putAgent(testSpec("order", func(sp *AgentSpec) { sp.Limits.MaxSteps = 1; sp.Limits.MaxCostUSD = 1.5 }))
	res = te.run("order", map[string]any{"input": "x"})
	if res["stopReason"] != "step_limit" {
		t.Fatalf("order: %v", res)
	}
}

func TestStopReasonBudgetBeforeCall(t *testing.T) {
	m := &fakeModel{cost: 0.6, script: scriptOf()}
	te := newTestServer(t, withFakeModel(m))
	te.putAgent(testSpec("pricey", nil)) // ceiling 0.5
	res := te.run("pricey", map[string]any{"input": "x"})
	if res["stopReason"] != "budget" || res["steps"].(float64) != 0 || res["error"].(map[string]any)["code"] != "E_BUDGET_EXCEEDED" {
		t.Fatalf("result %v", res)
	}
	if len(m.requests()) != 0 {
		t.Fatal("a model call was made past the ceiling")
	}
}

func TestStopReasonTimeoutCeilingWithClock(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	m := &fakeModel{script: func(ctx context.Context, n int, req ChatRequest) (*ChatResponse, error) {
		clock.Add(int64(40 * time.Second)) // each step takes 40 s of the injected clock
		return toolResp(call(fmt.Sprint("c", n), "computer_info", map[string]any{"n": n})), nil
	}}
	te := newTestServer(t, withFakeModel(m))
	te.s.runs.now = now
	sp := testSpec("clocked", func(sp *AgentSpec) { sp.Limits.TimeoutSec = 100 })
	ar, err := te.s.runs.start(sp, &runParams{Input: []ModelMessage{textMessage("user", "x")}, MaxSteps: 10, MaxCostUSD: 1, ApprovalMode: "auto"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := ar.wait()
	if r.StopReason != "timeout" || r.Steps != 3 || r.Error.Code != codeAborted {
		t.Fatalf("result %+v", r)
	}
}

func TestStopReasonTimeoutAbortsStepInFlight(t *testing.T) {
	m := &fakeModel{script: func(ctx context.Context, n int, req ChatRequest) (*ChatResponse, error) {
		if n == 0 {
			return toolResp(call("c0", "shell", map[string]any{"command": "echo kept"})), nil
		}
		<-ctx.Done() // hangs until the run's wall clock runs out
		return nil, ctx.Err()
	}}
	te := newTestServer(t, withFakeModel(m))
	te.putAgent(testSpec("hang", func(sp *AgentSpec) { sp.Limits.TimeoutSec = 1 }))
	res := te.run("hang", map[string]any{"input": "x"})
	if res["stopReason"] != "timeout" || res["error"].(map[string]any)["code"] != "E_ABORTED" {
		t.Fatalf("result %v", res)
	}
	// Partial results are kept: the first step's tool result is in the messages.
	msgs := fmt.Sprint(res["messages"])
	if !strings.Contains(msgs, "kept") {
		t.Fatalf("partial results lost: %s", msgs)
	}
}

func TestModelErrorEndsRunWithError(t *testing.T) {
	m := &fakeModel{script: func(ctx context.Context, n int, req ChatRequest) (*ChatResponse, error) {
		return nil, errorf(codeModelError, "upstream said 500 with key sk-ant-abcdefghijklmnopqrstuvwxyz012345")
	}}
	te := newTestServer(t, withFakeModel(m))
	te.putAgent(testSpec("broken", nil))
	res := te.run("broken", map[string]any{"input": "x"})
	e := res["error"].(map[string]any)
	if res["stopReason"] != "error" || e["code"] != "E_MODEL_ERROR" || strings.Contains(e["message"].(string), "sk-ant-") {
		t.Fatalf("result %v", res)
	}
	// On the stream the failure is an `error` event (redacted) right before run_end.
	evs := te.stream("broken", map[string]any{"input": "x"}).all()
	if len(evs) < 2 || evs[len(evs)-2]["type"] != "error" || evs[len(evs)-1]["type"] != "run_end" {
		t.Fatalf("stream of a failed run: %v", evs)
	}
	if ee := evs[len(evs)-2]["error"].(map[string]any); ee["code"] != "E_MODEL_ERROR" || strings.Contains(ee["message"].(string), "sk-ant-") {
		t.Fatalf("error event %v", ee)
	}
}

func TestParallelToolsBoundedAndOrdered(t *testing.T) {
	var running, peak atomic.Int64
	var mu sync.Mutex
	gate := make(chan struct{})
	m := &fakeModel{}
	var calls []ToolCall
	for i := 0; i < 7; i++ {
		calls = append(calls, call(fmt.Sprint("p", i), "shell", map[string]any{"command": fmt.Sprintf("echo out-%d", i)}))
	}
	m.script = scriptOf(toolResp(calls...), textResp("ok"))
	te := newTestServer(t, withFakeModel(m))
	te.comp.onExec = func(ctx context.Context, cmd string) {
		n := running.Add(1)
		mu.Lock()
		if n > peak.Load() {
			peak.Store(n)
		}
		mu.Unlock()
		if n == maxParallelTools {
			select {
			case <-gate:
			default:
				close(gate)
			}
		}
		select { // hold until four run together (or they never will: then the check below fails)
		case <-gate:
		case <-time.After(20 * time.Second):
		}
		running.Add(-1)
	}
	te.putAgent(testSpec("par", nil))
	te.run("par", map[string]any{"input": "x"})
	if peak.Load() != maxParallelTools {
		t.Fatalf("peak concurrency %d, want %d", peak.Load(), maxParallelTools)
	}
	msgs := m.requests()[1].Messages
	results := msgs[len(msgs)-7:]
	for i, r := range results {
		p := r.Content[0]
		if p.ToolCallID != fmt.Sprint("p", i) || !strings.Contains(p.Content, fmt.Sprintf("out-%d", i)) {
			t.Fatalf("result %d out of order: %+v", i, p)
		}
	}
}

func TestUnknownToolAndBadArgsAreToolErrors(t *testing.T) {
	m := &fakeModel{script: scriptOf(toolResp(
		call("u1", "launch_rockets", nil),
		call("u2", "read_file", map[string]any{"path": 5}),
		call("u3", "read_file", map[string]any{"path": "/etc/passwd"}),
		call("u4", "edit_file", map[string]any{"path": "f.txt", "old_string": "zzz", "new_string": "y"}),
	))}
	te := newTestServer(t, withFakeModel(m))
	te.comp.WriteFile(context.Background(), "", "/work/f.txt", []byte("a a"))
	te.putAgent(testSpec("errs", nil))
	res := te.run("errs", map[string]any{"input": "x"})
	if res["stopReason"] != "complete" {
		t.Fatalf("tool errors ended the run: %v", res)
	}
	msgs := m.requests()[1].Messages
	want := []string{"no tool named", "must be a string", "outside the machine's writable area", "not found in /work/f.txt"}
	for i, w := range want {
		p := msgs[len(msgs)-4+i].Content[0]
		if !p.IsError || !strings.Contains(p.Content, w) {
			t.Fatalf("result %d: %+v (want %q)", i, p, w)
		}
	}
}

func TestThreeConcurrentRunsShareTheComputer(t *testing.T) {
	var started sync.WaitGroup
	started.Add(3)
	m := &fakeModel{script: func(ctx context.Context, n int, req ChatRequest) (*ChatResponse, error) {
		last := req.Messages[len(req.Messages)-1]
		if last.Role == "tool" {
			return textResp("done"), nil
		}
		return toolResp(call("c", "shell", map[string]any{"command": "echo shared >> log.txt"})), nil
	}}
	te := newTestServer(t, withFakeModel(m))
	te.putAgent(testSpec("trio", nil))
	var wg sync.WaitGroup
	ids := make([]string, 3)
	comps := make([]string, 3)
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := te.stream("trio", map[string]any{"input": "go"})
			for _, ev := range s.all() {
				switch ev["type"] {
				case "run_start":
					ids[i] = ev["runId"].(string)
				case "computer_ready":
					comps[i] = ev["computerId"].(string)
				}
			}
		}()
	}
	wg.Wait()
	if comps[0] == "" || comps[0] != comps[1] || comps[1] != comps[2] {
		t.Fatalf("computers %v", comps)
	}
	if ids[0] == ids[1] || ids[1] == ids[2] {
		t.Fatalf("ids %v", ids)
	}
}

func TestLoopPanicIsARecordedError(t *testing.T) {
	m := &fakeModel{script: func(ctx context.Context, n int, req ChatRequest) (*ChatResponse, error) {
		panic("boom")
	}}
	te := newTestServer(t, withFakeModel(m))
	te.putAgent(testSpec("buggy", nil))
	res := te.run("buggy", map[string]any{"input": "x"})
	if res["stopReason"] != "error" || res["error"].(map[string]any)["code"] != "E_INTERNAL" {
		t.Fatalf("result %v", res)
	}
	if r := te.run("buggy", map[string]any{"input": "again"}); r["stopReason"] != "error" {
		t.Fatal("the service did not survive")
	}
}

// perModelCost prices models by name; an unknown name does not resolve (the primary is down).
type perModelCost struct {
	*fakeModel
	cost map[string]float64
}

func (p perModelCost) EstimateCost(req ChatRequest) (string, float64, error) {
	c, ok := p.cost[req.Model]
	if !ok {
		return "", 0, errorf(codeModelUnavailable, "model %q is not available", req.Model)
	}
	return req.Model, c, nil
}

// The ceiling check before a call prices it as the router will make it: fallbackModels count, so an
// unavailable or over-budget primary does not end a run that a fallback can carry.
func TestCeilingCheckHonoursFallbackModels(t *testing.T) {
	m := &fakeModel{script: scriptOf(textResp("from the fallback"))}
	te := newTestServer(t, withFakeModel(m))
	te.s.runs.models = perModelCost{fakeModel: m, cost: map[string]float64{"pricey/model": 5, "fake/model": 0}}
	te.putAgent(testSpec("fallsback", func(sp *AgentSpec) {
		sp.Model = "down/model"
		sp.FallbackModels = []string{"pricey/model", "fake/model"}
	}))
	res := te.run("fallsback", map[string]any{"input": "hi"})
	if res["stopReason"] != "complete" || res["text"] != "from the fallback" {
		t.Fatalf("result %v", res)
	}
	// Nothing fits: budget, priced at the cheapest candidate that resolves.
	te.putAgent(testSpec("toodear", func(sp *AgentSpec) {
		sp.Model = "down/model"
		sp.FallbackModels = []string{"pricey/model"}
	}))
	res = te.run("toodear", map[string]any{"input": "hi"})
	if e, _ := res["error"].(map[string]any); res["stopReason"] != "budget" || e["code"] != codeBudgetExceeded {
		t.Fatalf("result %v", res)
	}
}

// A huge timeoutSec (the spec bounds it only below) is a long wall clock, not an overflow that times
// the run out before its first step.
func TestHugeTimeoutSecDoesNotOverflow(t *testing.T) {
	m := &fakeModel{script: scriptOf(textResp("fine"))}
	te := newTestServer(t, withFakeModel(m))
	te.putAgent(testSpec("patient", func(sp *AgentSpec) { sp.Limits.TimeoutSec = 10_000_000_000 }))
	if res := te.run("patient", map[string]any{"input": "x"}); res["stopReason"] != "complete" {
		t.Fatalf("result %v", res)
	}
}

// A cancel that lands while the model is answering stops the run before the tools of that answer run:
// a file write does not look at the cancelled context, so it must not be started at all.
func TestCancelDuringModelCallRunsNoTool(t *testing.T) {
	var te *testServer
	var runID atomic.Value
	m := &fakeModel{script: func(ctx context.Context, n int, req ChatRequest) (*ChatResponse, error) {
		te.s.runs.cancelRun(runID.Load().(string), errCancelled)
		return toolResp(call("w", "write_file", map[string]any{"path": "after-cancel.txt", "content": "x"})), nil
	}}
	te = newTestServer(t, withFakeModel(m))
	sp := testSpec("late", nil)
	ar, err := te.s.runs.start(sp, &runParams{Input: []ModelMessage{textMessage("user", "x")}, MaxSteps: 3, MaxCostUSD: 1, ApprovalMode: "auto"},
		func(ev runEvent, _ []byte) {
			if ev.Type == "run_start" {
				runID.Store(ev.RunID)
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	r := ar.wait()
	if r.StopReason != "aborted" {
		t.Fatalf("result %+v", r)
	}
	if _, err := os.Stat(filepath.Join(te.comp.dir, "work", "after-cancel.txt")); err == nil {
		t.Fatal("a tool ran after the run was cancelled")
	}
	last := r.Messages[len(r.Messages)-1]
	if last.Role != "tool" || last.Content[0].ToolCallID != "w" {
		t.Fatalf("the call has no result: %+v", r.Messages)
	}
}

// Calls of one turn waiting for a parallel slot do not start once the run is cancelled.
func TestCancelStopsQueuedToolCalls(t *testing.T) {
	var calls []ToolCall
	for i := 0; i < maxParallelTools; i++ {
		calls = append(calls, call(fmt.Sprint("s", i), "shell", map[string]any{"command": fmt.Sprint("echo ", i)}))
	}
	calls = append(calls, call("w", "write_file", map[string]any{"path": "queued.txt", "content": "x"}))
	m := &fakeModel{script: scriptOf(toolResp(calls...))}
	te := newTestServer(t, withFakeModel(m))
	var runID atomic.Value
	var once sync.Once
	te.comp.onExec = func(ctx context.Context, cmd string) {
		once.Do(func() { te.s.runs.cancelRun(runID.Load().(string), errCancelled) })
		<-ctx.Done()
	}
	ar, err := te.s.runs.start(testSpec("queued", nil), &runParams{Input: []ModelMessage{textMessage("user", "x")}, MaxSteps: 3, MaxCostUSD: 1, ApprovalMode: "auto"},
		func(ev runEvent, _ []byte) {
			if ev.Type == "run_start" {
				runID.Store(ev.RunID)
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	if r := ar.wait(); r.StopReason != "aborted" {
		t.Fatalf("result %+v", r)
	}
	if _, err := os.Stat(filepath.Join(te.comp.dir, "work", "queued.txt")); err == nil {
		t.Fatal("a queued call started after the run was cancelled")
	}
}
