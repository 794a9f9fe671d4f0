package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// manualTimer replaces the 120 s approval timer: the test fires it.
type manualTimer struct {
	mu    sync.Mutex
	chans []chan time.Time
	durs  []time.Duration
}

func (m *manualTimer) start(d time.Duration) (<-chan time.Time, func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := make(chan time.Time, 1)
	m.chans = append(m.chans, c)
	m.durs = append(m.durs, d)
	return c, func() {}
}

func (m *manualTimer) fireAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range m.chans {
		select {
		case c <- time.Now():
		default:
		}
	}
}

func askSpec(name string) *AgentSpec {
	return testSpec(name, func(sp *AgentSpec) { sp.Guardrails.ApprovalMode = "ask" })
}

func shellThenDone(cmd string) func(context.Context, int, ChatRequest) (*ChatResponse, error) {
	return scriptOf(toolResp(call("s1", "shell", map[string]any{"command": cmd})))
}

func lastToolResult(m *fakeModel) ContentPart {
	reqs := m.requests()
	msgs := reqs[len(reqs)-1].Messages
	return msgs[len(msgs)-1].Content[0]
}

func TestApprovalApprove(t *testing.T) {
	m := &fakeModel{script: shellThenDone("echo approved-ran")}
	te := newTestServer(t, withFakeModel(m))
	te.putAgent(askSpec("asker"))
	sub, _ := te.s.hub.subscribe()
	defer te.s.hub.unsubscribe(sub)

	s := te.stream("asker", map[string]any{"input": "x"})
	ev := s.until(t, "approval_required")
	id := ev["approvalId"].(string)
	req := ev["request"].(map[string]any)
	if !strings.HasPrefix(id, "apr_") || req["tool"] != "shell" || req["callId"] != "s1" || req["dangerous"] != true ||
		req["args"].(map[string]any)["command"] != "echo approved-ran" || req["runId"] == "" {
		t.Fatalf("approval_required %v", ev)
	}
	// The events socket got it too, as a PendingApproval.
	eventually(t, "approval_required on the runs topic", func() bool {
		for {
			select {
			case e := <-sub.ch:
				if e.Type == "approval_required" && e.Payload.(PendingApproval).ApprovalID == id {
					return true
				}
			default:
				return false
			}
		}
	})
	list := te.call("GET", "/v1/approvals", nil, 200, nil).json(t)
	aps := list["approvals"].([]any)
	if len(aps) != 1 || aps[0].(map[string]any)["approvalId"] != id || aps[0].(map[string]any)["expiresAt"] == "" {
		t.Fatalf("list %v", list)
	}
	if ans := te.call("POST", "/v1/approvals/"+id, map[string]any{"approve": true}, 200, nil).json(t); ans["approved"] != true || ans["remembered"] != false || ans["approvalId"] != id {
		t.Fatalf("answer %v", ans)
	}
	end := s.until(t, "run_end")["result"].(map[string]any)
	if end["stopReason"] != "complete" {
		t.Fatalf("end %v", end)
	}
	if tr := lastToolResult(m); tr.IsError || !strings.Contains(tr.Content, "approved-ran") {
		t.Fatalf("tool result %+v", tr)
	}
	// Answered twice: the approval is gone.
	te.wantError("POST", "/v1/approvals/"+id, map[string]any{"approve": true}, 404, "E_APPROVAL_NOT_FOUND") // a second answer
	if list := te.do("GET", "/v1/approvals", nil).json(t); len(list["approvals"].([]any)) != 0 {
		t.Fatalf("still listed %v", list)
	}
}

func TestApprovalDeny(t *testing.T) {
	m := &fakeModel{script: shellThenDone("touch /work/should-not-exist")}
	te := newTestServer(t, withFakeModel(m))
	te.putAgent(askSpec("asker"))
	s := te.stream("asker", map[string]any{"input": "x"})
	id := s.until(t, "approval_required")["approvalId"].(string)
	if ans := te.call("POST", "/v1/approvals/"+id, map[string]any{"approve": false, "remember": true}, 200, nil).json(t); ans["approved"] != false || ans["remembered"] != false {
		t.Fatalf("deny %v", ans)
	}
	denied := s.until(t, "tool_denied")
	if denied["call"].(map[string]any)["name"] != "shell" {
		t.Fatalf("tool_denied %v", denied)
	}
	if end := s.until(t, "run_end")["result"].(map[string]any); end["stopReason"] != "complete" {
		t.Fatalf("end %v", end)
	}
	if tr := lastToolResult(m); !tr.IsError || !strings.Contains(tr.Content, "denied") {
		t.Fatalf("tool result %+v", tr)
	}
	if te.comp.execs.Load() != 0 {
		t.Fatal("a denied command ran")
	}
}

func TestApprovalTimeoutWithInjectedTimer(t *testing.T) {
	m := &fakeModel{script: shellThenDone("echo never")}
	te := newTestServer(t, withFakeModel(m))
	timer := &manualTimer{}
	te.s.runs.approvals.timer = timer.start
	te.putAgent(askSpec("asker"))
	s := te.stream("asker", map[string]any{"input": "x"})
	id := s.until(t, "approval_required")["approvalId"].(string)
	timer.mu.Lock()
	wait := timer.durs[0]
	timer.mu.Unlock()
	if wait != 120*time.Second {
		t.Fatalf("approval wait %v", wait)
	}
	timer.fireAll()
	if d := s.until(t, "tool_denied"); !strings.Contains(d["reason"].(string), "120 s") {
		t.Fatalf("reason %v", d)
	}
	s.until(t, "run_end")
	te.wantError("POST", "/v1/approvals/"+id, map[string]any{"approve": true}, 404, "E_APPROVAL_NOT_FOUND") // expired
	if te.comp.execs.Load() != 0 {
		t.Fatal("an expired approval ran the command")
	}
}

func TestApprovalRemember(t *testing.T) {
	m := &fakeModel{}
	m.script = func(ctx context.Context, n int, req ChatRequest) (*ChatResponse, error) {
		if req.Messages[len(req.Messages)-1].Role == "tool" {
			return textResp("done"), nil
		}
		return toolResp(call("s1", "shell", map[string]any{"command": "echo hi"})), nil
	}
	te := newTestServer(t, withFakeModel(m))
	te.putAgent(askSpec("asker"))
	te.putAgent(askSpec("other"))
	s := te.stream("asker", map[string]any{"input": "x"})
	id := s.until(t, "approval_required")["approvalId"].(string)
	if ans := te.do("POST", "/v1/approvals/"+id, map[string]any{"approve": true, "remember": true}).json(t); ans["remembered"] != true {
		t.Fatalf("answer %v", ans)
	}
	s.until(t, "run_end")
	// Second run of the same agent: no approval needed for shell.
	for _, ev := range te.stream("asker", map[string]any{"input": "again"}).all() {
		if ev["type"] == "approval_required" {
			t.Fatal("remembered tool asked again")
		}
	}
	if te.comp.execs.Load() != 2 {
		t.Fatalf("execs %d", te.comp.execs.Load())
	}
	// Another agent still asks.
	s3 := te.stream("other", map[string]any{"input": "x"})
	id3 := s3.until(t, "approval_required")["approvalId"].(string)
	te.do("POST", "/v1/approvals/"+id3, map[string]any{"approve": false})
	s3.until(t, "run_end")
}

func TestCancelDeniesPendingApproval(t *testing.T) {
	m := &fakeModel{script: shellThenDone("echo x")}
	te := newTestServer(t, withFakeModel(m))
	te.putAgent(askSpec("asker"))
	s := te.stream("asker", map[string]any{"input": "x"})
	start := s.until(t, "run_start")
	id := s.until(t, "approval_required")["approvalId"].(string)
	if c := te.call("POST", "/v1/runs/"+start["runId"].(string)+"/cancel", nil, 202, nil).json(t); c["cancelled"] != true {
		t.Fatalf("cancel %v", c)
	}
	if end := s.until(t, "run_end")["result"].(map[string]any); end["stopReason"] != "aborted" {
		t.Fatalf("end %v", end)
	}
	te.wantError("POST", "/v1/approvals/"+id, map[string]any{"approve": true}, 404, codeApprovalNotFound) // a cancelled run's approval is gone
	if te.comp.execs.Load() != 0 {
		t.Fatal("command ran after cancel")
	}
}

func TestApprovalBadBodies(t *testing.T) {
	te := newTestServer(t, withFakeModel(&fakeModel{script: scriptOf()}))
	for _, c := range []struct {
		body any
		code int
	}{
		{map[string]any{}, 422},
		{map[string]any{"approve": "yes"}, 422},
		{map[string]any{"approve": true, "extra": 1}, 422},
		{map[string]any{"approve": true}, 404},
	} {
		if r := te.do("POST", "/v1/approvals/apr_nope", c.body); r.status != c.code {
			t.Fatalf("%v: %d %s", c.body, r.status, r.body)
		}
	}
}

func TestReadonlyRefusesDangerousTools(t *testing.T) {
	m := &fakeModel{script: scriptOf(toolResp(
		call("w", "write_file", map[string]any{"path": "x.txt", "content": "no"}),
		call("l", "list_dir", map[string]any{}),
	))}
	te := newTestServer(t, withFakeModel(m))
	te.putAgent(testSpec("reader", func(sp *AgentSpec) { sp.Guardrails.ApprovalMode = "readonly" }))
	evs := te.stream("reader", map[string]any{"input": "x"}).all()
	var denied bool
	for _, e := range evs {
		if e["type"] == "tool_denied" && e["call"].(map[string]any)["name"] == "write_file" {
			denied = true
		}
		if e["type"] == "approval_required" {
			t.Fatal("readonly asked for approval")
		}
	}
	end := evs[len(evs)-1]["result"].(map[string]any)
	if !denied || end["stopReason"] != "complete" {
		t.Fatalf("denied=%v end=%v", denied, end)
	}
	msgs := m.requests()[1].Messages
	if w := msgs[len(msgs)-2].Content[0]; !w.IsError || !strings.Contains(w.Content, "readonly") {
		t.Fatalf("write result %+v", w)
	}
	if l := msgs[len(msgs)-1].Content[0]; l.IsError {
		t.Fatalf("list_dir refused in readonly: %+v", l)
	}
	// A body may tighten auto to readonly, but not loosen readonly to auto.
	te.putAgent(testSpec("loose", nil))
	m.mu.Lock()
	m.calls = 0
	m.mu.Unlock()
	evs = te.stream("loose", map[string]any{"input": "x", "approvalMode": "readonly"}).all()
	if !strings.Contains(fmtEvents(evs), "tool_denied") {
		t.Fatal("body readonly not applied")
	}
	m.mu.Lock()
	m.calls = 0
	m.mu.Unlock()
	evs = te.stream("reader", map[string]any{"input": "x", "approvalMode": "auto"}).all()
	if !strings.Contains(fmtEvents(evs), "tool_denied") || !strings.Contains(fmtEvents(evs), "ignored") {
		t.Fatal("body loosened readonly")
	}
}

func fmtEvents(evs []map[string]any) string {
	var b strings.Builder
	for _, e := range evs {
		b.WriteString(e["type"].(string))
		if msg, ok := e["message"].(string); ok {
			b.WriteString(":" + msg)
		}
		b.WriteString(" ")
	}
	return b.String()
}

// An approval asked for by a run that already ended is refused without being raised, and an approve
// that races the run's end never lets the call run (fail closed).
func TestApprovalAfterRunEndFailsClosed(t *testing.T) {
	b := newApprovalBook(time.Now, nil)
	b.timer = (&manualTimer{}).start
	c := ToolCall{ID: "c1", Name: "shell", Args: map[string]any{"command": "rm -rf /work"}}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	raised := false
	if ok, _ := b.request(ctx, "run_x", "a", c, c.Args, func(PendingApproval) { raised = true }); ok || raised {
		t.Fatalf("approval after cancel: approved=%v raised=%v", ok, raised)
	}
	if n := len(b.list()); n != 0 {
		t.Fatalf("%d approvals pending for a cancelled run", n)
	}

	for i := 0; i < 50; i++ { // the select would pick the approve half of the time
		ctx, cancel := context.WithCancel(context.Background())
		ok, reason := b.request(ctx, "run_x", "a", c, c.Args, func(p PendingApproval) {
			cancel()
			if _, err := b.answer(p.ApprovalID, true, false); err != nil {
				t.Errorf("answer: %v", err)
			}
		})
		if ok {
			t.Fatalf("attempt %d: a call was approved after its run ended (%s)", i, reason)
		}
	}
}

// The run's wall clock ends a step blocked on an approval: the run stops with `timeout` and the
// approval is denied and gone.
func TestRunTimeoutDeniesBlockedApproval(t *testing.T) {
	m := &fakeModel{script: shellThenDone("echo never")}
	te := newTestServer(t, withFakeModel(m))
	te.s.runs.approvals.timer = (&manualTimer{}).start // the 120 s timer never fires here
	te.putAgent(testSpec("clockask", func(sp *AgentSpec) {
		sp.Guardrails.ApprovalMode = "ask"
		sp.Limits.TimeoutSec = 1
	}))
	s := te.stream("clockask", map[string]any{"input": "x"})
	id := s.until(t, "approval_required")["approvalId"].(string)
	denied := s.until(t, "tool_denied")
	if r, _ := denied["reason"].(string); !strings.Contains(r, "run ended") {
		t.Fatalf("tool_denied %v", denied)
	}
	res := s.until(t, "run_end")["result"].(map[string]any)
	if res["stopReason"] != "timeout" || te.comp.execs.Load() != 0 {
		t.Fatalf("end %v, execs %d", res, te.comp.execs.Load())
	}
	te.wantError("POST", "/v1/approvals/"+id, map[string]any{"approve": true}, 404, codeApprovalNotFound) // a timed-out run's approval is gone
}

// What the command policy cannot see (issue 25) is refused in auto mode, and put to the human in ask
// mode: a human who approves this very call lets it run; `remember` does not cover it, and what the
// policy sees on its lists stays refused whoever approves.
func TestApprovalOpaqueCommand(t *testing.T) {
	m := &fakeModel{}
	m.script = func(ctx context.Context, n int, req ChatRequest) (*ChatResponse, error) {
		last := req.Messages[len(req.Messages)-1]
		if last.Role == "tool" {
			return textResp("done"), nil
		}
		cmd := `"$(echo echo)" ran-opaque`
		if strings.Contains(last.Content[0].Text, "visible") {
			cmd = `"$(echo echo)" x; sudo id`
		}
		return toolResp(call("s1", "shell", map[string]any{"command": cmd})), nil
	}
	te := newTestServer(t, withFakeModel(m))
	te.putAgent(testSpec("auto", func(*AgentSpec) {}))
	te.putAgent(askSpec("asker"))

	te.stream("auto", map[string]any{"input": "x"}).until(t, "run_end")
	if tr := lastToolResult(m); !tr.IsError || !strings.Contains(tr.Content, "E_EXEC_DENIED") || !strings.Contains(tr.Content, "computed") {
		t.Fatalf("auto mode ran an opaque command: %+v", tr)
	}

	s := te.stream("asker", map[string]any{"input": "x"})
	id := s.until(t, "approval_required")["approvalId"].(string)
	te.call("POST", "/v1/approvals/"+id, map[string]any{"approve": true, "remember": true}, 200, nil)
	s.until(t, "run_end")
	if tr := lastToolResult(m); tr.IsError || !strings.Contains(tr.Content, "ran-opaque") {
		t.Fatalf("approved by a human: %+v", tr)
	}

	// Remembered: nobody saw this call, so the policy refuses what it cannot see.
	for _, ev := range te.stream("asker", map[string]any{"input": "again"}).all() {
		if ev["type"] == "approval_required" {
			t.Fatal("remembered tool asked again")
		}
	}
	if tr := lastToolResult(m); !tr.IsError || !strings.Contains(tr.Content, "computed") {
		t.Fatalf("remembered approval ran an opaque command: %+v", tr)
	}

	// A human's approval waives nothing the policy sees.
	te.putAgent(askSpec("asker2"))
	s = te.stream("asker2", map[string]any{"input": "visible"})
	id = s.until(t, "approval_required")["approvalId"].(string)
	te.call("POST", "/v1/approvals/"+id, map[string]any{"approve": true}, 200, nil)
	s.until(t, "run_end")
	if tr := lastToolResult(m); !tr.IsError || !strings.Contains(tr.Content, "refused: sudo") {
		t.Fatalf("approved sudo ran: %+v", tr)
	}
}
