package main

// End-to-end run tests against the real stack: the real server (newServer), the real model router
// talking to a scripted loopback server that speaks the OpenAI Chat Completions wire format (streamed
// chunks, tool calls, usage), the local computer provider (docker when AGENT_TEST_DOCKER=1), SQLite.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// ---- the scripted OpenAI-compatible server ----

type scriptMsg struct {
	Role       string `json:"role"`
	Content    any    `json:"content"`
	ToolCallID string `json:"tool_call_id"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

type scriptReq struct {
	Model    string      `json:"model"`
	Messages []scriptMsg `json:"messages"`
	Stream   bool        `json:"stream"`
	Tools    []any       `json:"tools"`
}

// text returns a message's text whether content is a string or parts.
func (m scriptMsg) text() string {
	switch c := m.Content.(type) {
	case string:
		return c
	case []any:
		var b strings.Builder
		for _, p := range c {
			if pm, ok := p.(map[string]any); ok {
				if s, ok := pm["text"].(string); ok {
					b.WriteString(s)
				}
			}
		}
		return b.String()
	}
	return ""
}

// toolResults counts the tool messages after the last user message (the steps done in this turn).
func (r scriptReq) toolResults() []scriptMsg {
	var out []scriptMsg
	for i := len(r.Messages) - 1; i >= 0; i-- {
		m := r.Messages[i]
		if m.Role == "user" {
			break
		}
		if m.Role == "tool" {
			out = append([]scriptMsg{m}, out...)
		}
	}
	return out
}

func (r scriptReq) lastUser() string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "user" {
			return r.Messages[i].text()
		}
	}
	return ""
}

func (r scriptReq) all() string {
	b, _ := json.Marshal(r.Messages)
	return string(b)
}

// scriptReply is one scripted answer: text, tool calls, or hang (block until the client goes away).
type scriptReply struct {
	text  string
	calls []ToolCall
	hang  bool
}

type scriptedOpenAI struct {
	*httptest.Server
	mu     sync.Mutex
	reqs   []scriptReq
	script func(r scriptReq) scriptReply
}

func newScriptedOpenAI(t testing.TB, script func(r scriptReq) scriptReply) *scriptedOpenAI {
	so := &scriptedOpenAI{script: script}
	so.Server = httptest.NewServer(http.HandlerFunc(so.serve))
	t.Cleanup(so.Close)
	return so
}

func (so *scriptedOpenAI) requests() []scriptReq {
	so.mu.Lock()
	defer so.mu.Unlock()
	return append([]scriptReq(nil), so.reqs...)
}

func (so *scriptedOpenAI) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method == "GET" && strings.HasSuffix(r.URL.Path, "/models") {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"list","data":[{"id":"gpt-4o-mini","object":"model"},{"id":"gpt-4o","object":"model"}]}`)
		return
	}
	if !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		http.NotFound(w, r)
		return
	}
	var req scriptReq
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	so.mu.Lock()
	so.reqs = append(so.reqs, req)
	so.mu.Unlock()
	rep := so.script(req)
	if rep.hang {
		<-r.Context().Done()
		return
	}
	usage := map[string]any{"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}
	finish := "stop"
	if len(rep.calls) > 0 {
		finish = "tool_calls"
	}
	if !req.Stream {
		msg := map[string]any{"role": "assistant", "content": rep.text}
		if len(rep.calls) > 0 {
			msg["tool_calls"] = scriptToolCalls(rep.calls, false)
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"id": "chatcmpl-x", "object": "chat.completion", "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}}, "usage": usage})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	chunk := func(delta map[string]any, fin any, u any) {
		b, _ := json.Marshal(map[string]any{"id": "chatcmpl-x", "object": "chat.completion.chunk", "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": fin}}, "usage": u})
		if delta == nil {
			b, _ = json.Marshal(map[string]any{"id": "chatcmpl-x", "object": "chat.completion.chunk", "model": req.Model, "choices": []any{}, "usage": u})
		}
		fmt.Fprintf(w, "data: %s\n\n", b)
		w.(http.Flusher).Flush()
	}
	chunk(map[string]any{"role": "assistant", "content": ""}, nil, nil)
	if rep.text != "" {
		half := len(rep.text) / 2
		chunk(map[string]any{"content": rep.text[:half]}, nil, nil)
		chunk(map[string]any{"content": rep.text[half:]}, nil, nil)
	}
	if len(rep.calls) > 0 {
		chunk(map[string]any{"tool_calls": scriptToolCalls(rep.calls, true)}, nil, nil)
	}
	chunk(map[string]any{}, finish, nil)
	chunk(nil, nil, usage)
	io.WriteString(w, "data: [DONE]\n\n")
}

func scriptToolCalls(calls []ToolCall, indexed bool) []any {
	var out []any
	for i, c := range calls {
		args, _ := json.Marshal(c.Args)
		if c.Args == nil {
			args = []byte("{}") // what OpenAI sends for a call without arguments
		}
		tc := map[string]any{"id": c.ID, "type": "function", "function": map[string]any{"name": c.Name, "arguments": string(args)}}
		if indexed {
			tc["index"] = i
		}
		out = append(out, tc)
	}
	return out
}

// ---- the real server ----

const e2eKey = "sk-e2e-test-key-0123456789abcdef"

func e2eProvider() string {
	if os.Getenv("AGENT_TEST_DOCKER") == "1" {
		return "docker"
	}
	return "local"
}

// newE2E starts the real server on a fresh home (or the given one) with the scripted model server.
func newE2E(t testing.TB, so *scriptedOpenAI, home string, opts ...testOption) *testServer {
	t.Helper()
	if home == "" {
		home = t.TempDir()
	}
	te := newTestServer(t, append([]testOption{withHome(home), withEnv(map[string]string{"OPENAI_API_KEY": e2eKey, "OPENAI_BASE_URL": so.URL, "HOME": home}),
		func(c *testSetup) { c.ComputerProvider = e2eProvider() }}, opts...)...)
	// The router has landed: a router that cannot price the scripted model is a failure, not a skip.
	if _, _, err := te.s.models.EstimateCost(ChatRequest{Model: "openai/gpt-4o-mini", Messages: []ModelMessage{textMessage("user", "x")}}); err != nil {
		t.Fatalf("the model router cannot price the scripted model: %v", err)
	}
	return te
}

// createAgent posts a spec through the real agents API.
func (te *testServer) createAgent(spec map[string]any) {
	te.t.Helper()
	if _, ok := spec["model"]; !ok {
		spec["model"] = "openai/gpt-4o-mini"
	}
	te.call("POST", "/v1/agents", map[string]any{"spec": spec}, 201, nil)
}

func tc(id, name string, args map[string]any) ToolCall {
	return ToolCall{Type: "tool_call", ID: id, Name: name, Args: args}
}

// stepwise answers from a list by the number of assistant turns since the last user message, then "done".
func stepwise(replies ...scriptReply) func(r scriptReq) scriptReply {
	return func(r scriptReq) scriptReply {
		n := 0
		for i := len(r.Messages) - 1; i >= 0 && r.Messages[i].Role != "user"; i-- {
			if r.Messages[i].Role == "assistant" {
				n++
			}
		}
		if n < len(replies) {
			return replies[n]
		}
		return scriptReply{text: "done"}
	}
}

func TestE2EMultiStepShellAndFiles(t *testing.T) {
	so := newScriptedOpenAI(t, stepwise(
		scriptReply{text: "Writing the file.", calls: []ToolCall{tc("c1", "write_file", map[string]any{"path": "hello.txt", "content": "one\ntwo\nthree\n"})}},
		scriptReply{calls: []ToolCall{tc("c2", "shell", map[string]any{"command": "wc -l < hello.txt && echo from-shell"})}},
		scriptReply{calls: []ToolCall{tc("c3", "edit_file", map[string]any{"path": "hello.txt", "old_string": "two", "new_string": "TWO"})}},
		scriptReply{calls: []ToolCall{tc("c4", "read_file", map[string]any{"path": "hello.txt", "start_line": 2, "end_line": 2})}},
		scriptReply{calls: []ToolCall{ // calls of one turn run concurrently: these two are independent
			tc("c5", "search_files", map[string]any{"pattern": "T[W]O"}),
			tc("c9", "computer_info", nil),
		}},
		scriptReply{calls: []ToolCall{tc("c6", "move", map[string]any{"from": "hello.txt", "to": "sub/dir/hello2.txt"})}},
		scriptReply{calls: []ToolCall{tc("c7", "list_dir", map[string]any{"recursive": true})}},
		scriptReply{calls: []ToolCall{tc("c8", "move", map[string]any{"from": "sub", "to": "moved"})}},
		scriptReply{calls: []ToolCall{tc("c10", "delete", map[string]any{"path": "moved", "recursive": true})}},
		scriptReply{calls: []ToolCall{tc("c11", "list_dir", map[string]any{})}},
		scriptReply{text: "The file has three lines."},
	))
	te := newE2E(t, so, "")
	te.createAgent(map[string]any{"name": "e2e-files", "tools": []string{"computer", "files"}})
	s := te.stream("e2e-files", map[string]any{"input": "count the lines"})
	evs := s.all()
	start, end := evs[0], evs[len(evs)-1]
	res := end["result"].(map[string]any)
	if start["type"] != "run_start" || res["stopReason"] != "complete" || res["text"] != "The file has three lines." || res["steps"].(float64) != 11 {
		t.Fatalf("run: %v", res)
	}
	var computerID string
	outputs := map[string]string{}
	for _, e := range evs {
		switch e["type"] {
		case "computer_ready":
			computerID = e["computerId"].(string)
		case "tool_end":
			outputs[e["call"].(map[string]any)["id"].(string)] = e["output"].(string)
			if e["isError"] == true {
				t.Fatalf("tool failed: %v", e)
			}
		}
	}
	if !strings.Contains(outputs["c2"], "3\nfrom-shell") || !strings.Contains(outputs["c4"], "TWO") ||
		!strings.Contains(outputs["c5"], "/work/hello.txt:2:TWO") || !strings.Contains(outputs["c7"], "/work/sub/dir/hello2.txt") ||
		!strings.Contains(outputs["c9"], "e2e-files") || !strings.Contains(outputs["c11"], "is empty") {
		t.Fatalf("outputs %v", outputs)
	}
	// The tool results reached the model in its own wire format.
	reqs := so.requests()
	last := reqs[len(reqs)-1]
	if len(last.toolResults()) != 11 || last.toolResults()[1].ToolCallID != "c2" || !strings.Contains(last.toolResults()[1].text(), "from-shell") {
		t.Fatalf("last request %s", last.all())
	}
	// The computer is named after the agent and left running.
	if info := te.call("GET", "/v1/computers/"+computerID, nil, 200, nil).json(t); info["name"] != "e2e-files" || info["state"] != "running" {
		t.Fatalf("computer %v", info)
	}
	if got := te.call("GET", "/v1/runs/"+start["runId"].(string), nil, 200, nil).json(t); len(got["events"].([]any)) != len(evs) {
		t.Fatalf("stored run: %d events vs %d streamed", len(got["events"].([]any)), len(evs))
	}
	if agent := te.call("GET", "/v1/agents", nil, 200, nil).json(t); !strings.Contains(fmt.Sprint(agent), "runCount:1") {
		t.Fatalf("runCount: %v", agent)
	}
}

func TestE2EStopReasons(t *testing.T) {
	counter := 0
	var mu sync.Mutex
	so := newScriptedOpenAI(t, func(r scriptReq) scriptReply {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case strings.HasPrefix(r.lastUser(), "steps"):
			counter++
			return scriptReply{calls: []ToolCall{tc(fmt.Sprint("s", counter), "shell", map[string]any{"command": fmt.Sprintf("echo %d", counter)})}}
		case strings.HasPrefix(r.lastUser(), "loop"):
			return scriptReply{calls: []ToolCall{tc(fmt.Sprint("l", len(r.toolResults())), "shell", map[string]any{"command": "echo same"})}}
		case strings.HasPrefix(r.lastUser(), "hang"):
			return scriptReply{hang: true}
		}
		return scriptReply{text: "ok"}
	})
	te := newE2E(t, so, "")
	te.createAgent(map[string]any{"name": "e2e-stops", "limits": map[string]any{"maxSteps": 3}})
	te.createAgent(map[string]any{"name": "e2e-slow", "limits": map[string]any{"timeoutSec": 1}})
	te.createAgent(map[string]any{"name": "e2e-poor", "model": "openai/gpt-4o", "limits": map[string]any{"maxCostUsd": 0.0000001}})

	if r := te.run("e2e-stops", map[string]any{"input": "hello"}); r["stopReason"] != "complete" {
		t.Fatalf("complete: %v", r)
	}
	if r := te.run("e2e-stops", map[string]any{"input": "steps please"}); r["stopReason"] != "step_limit" || r["steps"].(float64) != 3 || r["error"] != nil {
		t.Fatalf("step_limit: %v", r)
	}
	if r := te.run("e2e-poor", map[string]any{"input": "hello"}); r["stopReason"] != "budget" || r["error"].(map[string]any)["code"] != "E_BUDGET_EXCEEDED" {
		t.Fatalf("budget: %v", r)
	}
	if r := te.run("e2e-slow", map[string]any{"input": "hang on"}); r["stopReason"] != "timeout" || r["error"].(map[string]any)["code"] != "E_ABORTED" {
		t.Fatalf("timeout: %v", r)
	}
	if r := te.run("e2e-stops", map[string]any{"input": "loop forever", "maxSteps": 10}); r["stopReason"] != "step_limit" {
		// maxSteps is clamped to the spec's 3: the loop guard needs 5 identical calls.
		t.Fatalf("clamped loop run: %v", r)
	}
	te.createAgent(map[string]any{"name": "e2e-loop"})
	if r := te.run("e2e-loop", map[string]any{"input": "loop forever"}); r["stopReason"] != "loop" || r["steps"].(float64) != 5 {
		t.Fatalf("loop: %v", r)
	}
	// aborted by cancel.
	s := te.stream("e2e-stops", map[string]any{"input": "hang here"})
	id := s.until(t, "run_start")["runId"].(string)
	s.until(t, "step_start")
	if c := te.call("POST", "/v1/runs/"+id+"/cancel", nil, 202, nil).json(t); c["cancelled"] != true || c["status"] != "aborted" {
		t.Fatalf("cancel: %v", c)
	}
	if r := s.until(t, "run_end")["result"].(map[string]any); r["stopReason"] != "aborted" || r["runId"] != id {
		t.Fatalf("cancelled: %v", r)
	}
	// aborted by client disconnect.
	s = te.stream("e2e-stops", map[string]any{"input": "hang there"})
	id = s.until(t, "run_start")["runId"].(string)
	s.until(t, "step_start")
	s.cancel()
	eventually(t, "the disconnected run to be aborted", func() bool {
		got := te.do("GET", "/v1/runs/"+id, nil).json(t)
		return got["result"].(map[string]any)["stopReason"] == "aborted"
	})
}

// e2eManualTimer makes the approval wait fire on demand.
func injectTimer(te *testServer) *manualTimer {
	mt := &manualTimer{}
	te.s.runs.approvals.timer = mt.start
	return mt
}

func TestE2EApprovals(t *testing.T) {
	so := newScriptedOpenAI(t, func(r scriptReq) scriptReply {
		if len(r.toolResults()) > 0 {
			return scriptReply{text: "finished: " + r.toolResults()[0].text()}
		}
		return scriptReply{calls: []ToolCall{tc("a1", "shell", map[string]any{"command": "echo " + strings.Fields(r.lastUser())[0] + " > marker.txt; cat marker.txt"})}}
	})
	te := newE2E(t, so, "")
	mt := injectTimer(te)
	te.createAgent(map[string]any{"name": "e2e-ask", "guardrails": map[string]any{"approvalMode": "ask"}})

	ws := te.dial("/v1/events", "")
	if hello := frame(t, ws); hello["type"] != "hello" || hello["payload"].(map[string]any)["activeRuns"] == nil {
		t.Fatalf("hello %v", hello)
	}
	sendFrame(t, ws, map[string]any{"type": "subscribe", "topics": []string{"runs"}})
	if sub := frame(t, ws); sub["type"] != "subscribed" {
		t.Fatalf("subscribed %v", sub)
	}

	// approve
	s := te.stream("e2e-ask", map[string]any{"input": "approved run"})
	ap := s.until(t, "approval_required")
	// The events socket carries the same approval on the runs topic (after run_started).
	for seen := []string{}; ; {
		f := frame(t, ws)
		seen = append(seen, fmt.Sprint(f["type"]))
		if f["type"] == "approval_required" {
			p := f["payload"].(map[string]any)
			if f["topic"] != "runs" || p["approvalId"] != ap["approvalId"] || p["call"].(map[string]any)["name"] != "shell" || strings.Join(seen, ",") != "run_started,approval_required" {
				t.Fatalf("socket approval %v after %v", f, seen)
			}
			break
		}
	}
	if ans := te.call("POST", "/v1/approvals/"+ap["approvalId"].(string), map[string]any{"approve": true}, 200, nil).json(t); ans["approved"] != true {
		t.Fatalf("approve %v", ans)
	}
	if r := s.until(t, "run_end")["result"].(map[string]any); !strings.Contains(r["text"].(string), "approved") {
		t.Fatalf("approved run: %v", r)
	}
	// deny
	s = te.stream("e2e-ask", map[string]any{"input": "denied run"})
	ap = s.until(t, "approval_required")
	te.do("POST", "/v1/approvals/"+ap["approvalId"].(string), map[string]any{"approve": false})
	s.until(t, "tool_denied")
	if r := s.until(t, "run_end")["result"].(map[string]any); !strings.Contains(r["text"].(string), "denied") || strings.Contains(r["text"].(string), "denied run") {
		t.Fatalf("denied run: %v", r)
	}
	// timeout with the injected timer
	s = te.stream("e2e-ask", map[string]any{"input": "expired run"})
	ap = s.until(t, "approval_required")
	mt.fireAll()
	s.until(t, "tool_denied")
	s.until(t, "run_end")
	te.wantError("POST", "/v1/approvals/"+ap["approvalId"].(string), map[string]any{"approve": true}, 404, codeApprovalNotFound) // expired
	// remember
	s = te.stream("e2e-ask", map[string]any{"input": "remembered run"})
	ap = s.until(t, "approval_required")
	te.do("POST", "/v1/approvals/"+ap["approvalId"].(string), map[string]any{"approve": true, "remember": true})
	s.until(t, "run_end")
	for _, ev := range te.stream("e2e-ask", map[string]any{"input": "again run"}).all() {
		if ev["type"] == "approval_required" {
			t.Fatal("remembered approval asked again")
		}
	}
}

func TestE2EReadonlyAllowDenyAndRedaction(t *testing.T) {
	planted := "sk-ant-api03-PLANTEDplantedPLANTEDplanted0123"
	so := newScriptedOpenAI(t, func(r scriptReq) scriptReply {
		switch n := len(r.toolResults()); {
		case strings.HasPrefix(r.lastUser(), "readonly") && n == 0:
			return scriptReply{calls: []ToolCall{tc("w", "write_file", map[string]any{"path": "x.txt", "content": "x"}), tc("l", "list_dir", map[string]any{})}}
		case strings.HasPrefix(r.lastUser(), "policy") && n == 0:
			return scriptReply{calls: []ToolCall{
				tc("p1", "shell", map[string]any{"command": "rm -f scratch.txt"}),
				tc("p2", "shell", map[string]any{"command": "rm -f other.txt"}),
				tc("p3", "shell", map[string]any{"command": "sudo true"}),
				// an allow pattern vouches for one simple command, never for a chain around it
				tc("p4", "shell", map[string]any{"command": "touch scratch.txt && rm -f scratch.txt && echo removed"}),
			}}
		case strings.HasPrefix(r.lastUser(), "secret") && n == 0:
			return scriptReply{calls: []ToolCall{tc("k", "shell", map[string]any{"command": "echo key=" + planted})}}
		}
		return scriptReply{text: "ok"}
	})
	te := newE2E(t, so, "")
	te.createAgent(map[string]any{"name": "e2e-ro", "tools": []string{"computer", "files"}, "guardrails": map[string]any{"approvalMode": "readonly"}})
	te.createAgent(map[string]any{"name": "e2e-policy", "guardrails": map[string]any{
		"denyCommands": []string{"rm "}, "allowCommands": []string{"rm -f scratch\\.txt", "^sudo true$"}}})
	te.createAgent(map[string]any{"name": "e2e-secret"})

	evs := te.stream("e2e-ro", map[string]any{"input": "readonly please"}).all()
	outs := toolOutputs(evs)
	if !strings.Contains(outs["w"], "readonly") || strings.Contains(outs["l"], "E_") || !strings.Contains(fmtEvents(evs), "tool_denied") {
		t.Fatalf("readonly: %v", outs)
	}

	outs = toolOutputs(te.stream("e2e-policy", map[string]any{"input": "policy check"}).all())
	if strings.Contains(outs["p1"], "E_EXEC_DENIED") || !strings.Contains(outs["p2"], "E_EXEC_DENIED") || strings.Contains(outs["p3"], "E_EXEC_DENIED") ||
		!strings.Contains(outs["p4"], "E_EXEC_DENIED") {
		t.Fatalf("allow beats deny: %v", outs)
	}

	evs = te.stream("e2e-secret", map[string]any{"input": "secret please"}).all()
	if outs := toolOutputs(evs); !strings.Contains(outs["k"], "key=[REDACTED]") {
		t.Fatalf("redaction: %v", outs)
	}
	got := te.do("GET", "/v1/runs/"+evs[0]["runId"].(string), nil).json(t)
	if b, _ := json.Marshal(got); strings.Contains(string(b), planted) {
		t.Fatal("stored events hold the planted key")
	}
	for _, r := range so.requests() {
		for _, m := range r.toolResults() {
			if strings.Contains(m.text(), planted) {
				t.Fatal("the model was sent the planted key in a tool result")
			}
		}
	}
	for _, r := range so.requests() {
		if strings.Contains(r.all(), e2eKey) {
			t.Fatal("the provider key leaked into a request body")
		}
	}
}

func toolOutputs(evs []map[string]any) map[string]string {
	out := map[string]string{}
	for _, e := range evs {
		if e["type"] == "tool_end" {
			out[e["call"].(map[string]any)["id"].(string)] = e["output"].(string)
		}
	}
	return out
}

func TestE2EMemoryAcrossTwoRuns(t *testing.T) {
	so := newScriptedOpenAI(t, func(r scriptReq) scriptReply {
		if strings.Contains(r.all(), "my name is Ada") && strings.Contains(r.lastUser(), "name?") {
			return scriptReply{text: "Your name is Ada."}
		}
		return scriptReply{text: "Noted."}
	})
	te := newE2E(t, so, "")
	te.createAgent(map[string]any{"name": "e2e-mem", "memory": map[string]any{"enabled": true}})
	te.run("e2e-mem", map[string]any{"input": "my name is Ada"})
	if r := te.run("e2e-mem", map[string]any{"input": "what is my name?"}); r["text"] != "Your name is Ada." {
		t.Fatalf("memory: %v", r)
	}
}

func TestE2EThreeConcurrentRunsShareTheComputer(t *testing.T) {
	so := newScriptedOpenAI(t, func(r scriptReq) scriptReply {
		if len(r.toolResults()) > 0 {
			return scriptReply{text: "done"}
		}
		return scriptReply{calls: []ToolCall{tc("c", "shell", map[string]any{"command": "echo " + r.lastUser() + " >> shared.log"})}}
	})
	te := newE2E(t, so, "")
	te.createAgent(map[string]any{"name": "e2e-trio"})
	var wg sync.WaitGroup
	comps := make([]string, 3)
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := te.run("e2e-trio", map[string]any{"input": fmt.Sprint("run", i)})
			if res["stopReason"] != "complete" {
				t.Errorf("run %d: %v", i, res)
			}
			got := te.do("GET", "/v1/runs/"+res["runId"].(string), nil).json(t)
			for _, e := range got["events"].([]any) {
				if em := e.(map[string]any); em["type"] == "computer_ready" {
					comps[i] = em["computerId"].(string)
				}
			}
		}()
	}
	wg.Wait()
	if comps[0] == "" || comps[0] != comps[1] || comps[1] != comps[2] {
		t.Fatalf("computers: %v", comps)
	}
	list := te.do("GET", "/v1/computers", nil).json(t)
	n := 0
	for _, c := range list["computers"].([]any) {
		if c.(map[string]any)["name"] == "e2e-trio" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d computers named e2e-trio", n)
	}
	if out := te.call("POST", "/v1/computers/"+comps[0]+"/exec", map[string]any{"cmd": "sort shared.log"}, 200, nil).json(t); out["stdout"] != "run0\nrun1\nrun2\n" {
		t.Fatalf("shared log: %v", out)
	}
}

func TestE2ERestartWithRunInFlight(t *testing.T) {
	so := newScriptedOpenAI(t, func(r scriptReq) scriptReply {
		if strings.HasPrefix(r.lastUser(), "hang") {
			return scriptReply{hang: true}
		}
		return scriptReply{text: "fresh"}
	})
	home := t.TempDir()
	a := newE2E(t, so, home)
	a.createAgent(map[string]any{"name": "e2e-restart"})
	s := a.stream("e2e-restart", map[string]any{"input": "hang please"})
	id := s.until(t, "run_start")["runId"].(string)
	s.until(t, "step_start")
	// A second process opens the same home while the first still holds the run: as after a crash, the
	// run left in flight is marked aborted at start.
	b := newE2E(t, so, home)
	got := b.do("GET", "/v1/runs/"+id, nil).json(t)
	res := got["result"].(map[string]any)
	if res["stopReason"] != "aborted" || res["error"].(map[string]any)["code"] != "E_ABORTED" {
		t.Fatalf("after restart: %v", res)
	}
	if r := b.run("e2e-restart", map[string]any{"input": "new run"}); r["stopReason"] != "complete" || r["text"] != "fresh" {
		t.Fatalf("run after restart: %v", r)
	}
}

// The wall clock aborts a long shell tool in flight on the real local provider: the run ends with
// `timeout` without waiting for the command.
func TestE2ETimeoutAbortsLongShell(t *testing.T) {
	so := newScriptedOpenAI(t, func(r scriptReq) scriptReply {
		if len(r.toolResults()) == 0 {
			return scriptReply{calls: []ToolCall{tc("sl", "shell", map[string]any{"command": "sleep 600"})}}
		}
		return scriptReply{text: "done"}
	})
	te := newE2E(t, so, "")
	te.createAgent(map[string]any{"name": "e2e-sleepy", "limits": map[string]any{"timeoutSec": 1, "execTimeoutSec": 900}})
	done := make(chan response, 1)
	go func() { // te.do, not te.run: no t.Fatal off the test goroutine
		done <- te.do("POST", "/v1/agents/e2e-sleepy/run", map[string]any{"input": "sleep"})
	}()
	select {
	case r := <-done:
		body := r.json(t)
		if e, _ := body["error"].(map[string]any); r.status != 200 || body["stopReason"] != "timeout" || e["code"] != "E_ABORTED" {
			t.Fatalf("%d %s", r.status, r.body)
		}
	case <-time.After(120 * time.Second): // far below the command's 600 s: the tool was not aborted
		t.Fatal("the run waited for the shell command past its wall clock")
	}
}

// fakeEngine puts a `docker` on PATH that answers `info` as the real one does (or, daemonDown, as one
// whose daemon is stopped) and fails every other command the way docker does for an image that is not
// on the machine and cannot be pulled (an offline host).
func fakeEngine(t *testing.T, daemonDown bool) {
	dir := t.TempDir()
	info := "echo 27.0.1"
	if daemonDown {
		info = "echo 'Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?' >&2; exit 1"
	}
	script := "#!/bin/sh\ncase \"$1\" in\ninfo) " + info + ";;\n*) echo \"Unable to find image 'agentd-test:bookworm' locally\" >&2\n" +
		"echo 'docker: Error response from daemon: pull access denied for agentd-test, repository does not exist' >&2; exit 125;;\nesac\n"
	if err := os.WriteFile(filepath.Join(dir, "docker"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// A run whose computer cannot be created or started (image missing offline, the engine's daemon
// stopped) ends `error` with that reason — one error event, the run's error field, exit 1 from
// `agentd run` — instead of letting the model say "Done" over failed tools and end `complete`; and
// the server log names the run, the tool and the code (issue 26 item 1).
func TestE2EBrokenComputerEndsTheRunWithError(t *testing.T) {
	for _, tc := range []struct {
		name       string
		daemonDown bool
		code       string
		real       bool // the real docker, with the base flavour pointed at an image no registry serves
	}{
		{"image missing offline", false, codeProviderUnavailable, false},
		{"daemon stopped", true, codeProviderUnavailable, false},
		{"real docker, image missing", false, codeProviderUnavailable, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			images := func(c *testSetup) {}
			if !tc.real {
				fakeEngine(t, tc.daemonDown)
			} else if os.Getenv("AGENT_TEST_DOCKER") != "1" {
				t.Skip("AGENT_TEST_DOCKER is not 1")
			} else {
				images = func(c *testSetup) { c.Images = map[string]string{"base": "127.0.0.1:1/agentd-missing:none"} }
			}
			so := newScriptedOpenAI(t, func(r scriptReq) scriptReply {
				if len(r.toolResults()) > 0 {
					return scriptReply{text: "Done"}
				}
				return scriptReply{calls: []ToolCall{{ID: "c1", Name: "shell", Args: map[string]any{"command": "echo hi"}}}}
			})
			var log syncBuffer
			te := newE2E(t, so, "", func(c *testSetup) { c.ComputerProvider = "docker" }, images, withLog(&log))
			te.createAgent(map[string]any{"name": "e2e-broken"})

			evs := te.stream("e2e-broken", map[string]any{"input": "say hi"}).all()
			var errs []map[string]any
			for _, e := range evs {
				if e["type"] == "error" {
					errs = append(errs, e)
				}
			}
			res := evs[len(evs)-1]["result"].(map[string]any)
			if res["stopReason"] != "error" || res["error"] == nil || res["error"].(map[string]any)["code"] != tc.code {
				t.Fatalf("run result: %v", res)
			}
			if len(errs) != 1 || errs[0]["error"].(map[string]any)["code"] != tc.code {
				t.Fatalf("error events: %v", errs)
			}
			if n := len(so.requests()); n != 1 {
				t.Fatalf("the model was asked %d times; the run should end when its computer cannot come up", n)
			}
			runID := evs[0]["runId"].(string)
			sum := te.latestRun("e2e-broken")
			if sum.RunID != runID || sum.Status != "error" || sum.Error == nil || sum.Error.Code != tc.code {
				t.Fatalf("summary: %+v", sum)
			}
			for _, want := range []string{"run=" + runID, "tool=shell", "code=" + tc.code} {
				if !strings.Contains(log.String(), want) {
					t.Fatalf("server log lacks %q:\n%s", want, log.String())
				}
			}
			if r := te.agentd("", nil, "run", "e2e-broken", "say hi"); r.code != 1 || !strings.Contains(r.stderr, "ended: error") ||
				!strings.Contains(r.stderr, tc.code) {
				t.Fatalf("agentd run: %s", r)
			}
		})
	}
}

// TestE2EComputerFailureIsRedacted: a run whose computer's setup fails ends `error` with the setup's
// last lines, and a secret in them is redacted there, in the run's events and in the server's log, as
// in a tool's output. (Before: the run's error, its summary and the log line carried it as printed.)
func TestE2EComputerFailureIsRedacted(t *testing.T) {
	secret := "ghp_" + strings.Repeat("Ab3", 12)
	so := newScriptedOpenAI(t, func(r scriptReq) scriptReply {
		return scriptReply{calls: []ToolCall{{ID: "c1", Name: "shell", Args: map[string]any{"command": "echo hi"}}}}
	})
	var log syncBuffer
	te := newE2E(t, so, "", func(c *testSetup) { c.ComputerProvider = "local" }, withLog(&log))
	te.createAgent(map[string]any{"name": "e2e-setup-leak", "computer": map[string]any{"setup": "echo token " + secret + "; exit 3"}})
	evs := te.stream("e2e-setup-leak", map[string]any{"input": "say hi"}).all()
	res := evs[len(evs)-1]["result"].(map[string]any)
	if res["stopReason"] != "error" || res["error"] == nil {
		t.Fatalf("run result: %v", res)
	}
	b, _ := json.Marshal(evs)
	sum, _ := json.Marshal(te.latestRun("e2e-setup-leak"))
	for what, s := range map[string]string{"events": string(b), "summary": string(sum), "log": log.String()} {
		if strings.Contains(s, secret) {
			t.Errorf("the secret printed by the failed setup is in the run's %s", what)
		}
	}
	if !strings.Contains(string(b), "setup failed") {
		t.Fatalf("the run's error does not say the setup failed: %s", res["error"])
	}
}
