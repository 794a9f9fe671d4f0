package main

// The OpenAI-compatible gateway against the real stack (scripted loopback model, real router, local
// computers): the models list, completions streamed and not, history, a tool-using agent, errors in
// OpenAI's shape, provider/model passthrough under the ceiling, approvals; then the real openai npm SDK
// (interop/openai) against a real server.

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

const gwToken = "gateway-token-0123456789"

// gwModel answers "tool" prompts with a shell call and then the tool's output, every other prompt with
// "Hello, <last user message>" — a text reply in two steps for "steps" prompts.
func gwModel(t testing.TB) *scriptedOpenAI {
	return newScriptedOpenAI(t, func(r scriptReq) scriptReply {
		last := r.lastUser()
		switch {
		case strings.Contains(last, "tool") && len(r.toolResults()) == 0:
			return scriptReply{text: "Let me check.", calls: []ToolCall{tc("g1", "shell", map[string]any{"command": "echo forty-two"})}}
		case len(r.toolResults()) > 0:
			return scriptReply{text: "The tool said " + strings.TrimSpace(r.toolResults()[0].text())}
		}
		return scriptReply{text: "Hello, " + last}
	})
}

// newGateway is a server with a token and two agents: gw-plain (no tools) and gw-tools (shell).
func newGateway(t testing.TB, opts ...testOption) (*testServer, *scriptedOpenAI) {
	so := gwModel(t)
	te := newE2E(t, so, "", append([]testOption{func(c *testSetup) { c.Token = gwToken }}, opts...)...)
	for _, spec := range []map[string]any{
		{"name": "gw-plain", "model": "openai/gpt-4o-mini"},
		{"name": "gw-tools", "model": "openai/gpt-4o-mini", "tools": []string{"computer"}},
		{"name": "gw-ask", "model": "openai/gpt-4o-mini", "tools": []string{"computer"}, "guardrails": map[string]any{"approvalMode": "ask"}},
	} {
		if r := te.do("POST", "/v1/agents", map[string]any{"spec": spec}, "Authorization", "Bearer "+gwToken); r.status != 201 {
			t.Fatalf("create agent: %d %s", r.status, r.body)
		}
	}
	return te, so
}

func (te *testServer) gw(method, path string, body any) response {
	te.t.Helper()
	return te.do(method, path, body, "Authorization", "Bearer "+gwToken)
}

// oaiErr checks an OpenAI error envelope: status, and error.{message,type,param,code} all present.
func oaiErr(t *testing.T, r response, status int) map[string]any {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	e, ok := r.json(t)["error"].(map[string]any)
	if !ok {
		t.Fatalf("not an OpenAI error: %s", r.body)
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := e[k]; !ok {
			t.Fatalf("error lacks %s: %s", k, r.body)
		}
	}
	if _, ok := e["message"].(string); !ok || e["type"] == "" {
		t.Fatalf("error message/type: %s", r.body)
	}
	return e
}

func TestGatewayModels(t *testing.T) {
	te, _ := newGateway(t)
	var out struct {
		Object string `json:"object"`
		Data   []struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Created int64  `json:"created"`
			OwnedBy string `json:"owned_by"`
		} `json:"data"`
	}
	r := te.gw("GET", "/openai/v1/models", nil)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	r.decode(t, &out)
	if out.Object != "list" || len(out.Data) != 3 {
		t.Fatalf("models %s", r.body)
	}
	for _, m := range out.Data {
		if m.Object != "model" || m.OwnedBy != "agentd" || m.Created < time.Now().Add(-time.Hour).Unix() || !strings.HasPrefix(m.ID, "gw-") {
			t.Fatalf("model %+v", m)
		}
	}
	// The token is needed, and its refusal is in OpenAI's shape.
	e := oaiErr(t, te.do("GET", "/openai/v1/models", nil), 401)
	if e["code"] != "invalid_api_key" {
		t.Fatalf("401 %v", e)
	}
	oaiErr(t, te.do("GET", "/openai/v1/models", nil, "Authorization", "Bearer nope"), 401)
	oaiErr(t, te.gw("GET", "/openai/v1/nothing", nil), 404)
}

func TestGatewayChatNotStreamed(t *testing.T) {
	te, so := newGateway(t)
	body := map[string]any{
		"model": "gw-plain",
		"messages": []any{
			map[string]any{"role": "developer", "content": "be brief"},
			map[string]any{"role": "user", "content": "first question"},
			map[string]any{"role": "assistant", "content": "first answer"},
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "second question"}}},
		},
		// Fields the gateway does not use are ignored, never refused.
		"temperature": 0.2, "n": 1, "logprobs": false, "user": "u1", "seed": 7, "frequency_penalty": 0,
		"response_format": map[string]any{"type": "text"}, "metadata": map[string]any{"k": "v"}, "some_future_field": []int{1},
	}
	r := te.gw("POST", "/openai/v1/chat/completions", body)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var c struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		Model   string `json:"model"`
		Choices []struct {
			Index   int `json:"index"`
			Message struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
			TotalTokens      int `json:"total_tokens"`
		} `json:"usage"`
	}
	r.decode(t, &c)
	if c.Object != "chat.completion" || !strings.HasPrefix(c.ID, "chatcmpl-run_") || c.Model != "gw-plain" || c.Created == 0 ||
		len(c.Choices) != 1 || c.Choices[0].Message.Role != "assistant" || c.Choices[0].Message.Content != "Hello, second question" ||
		c.Choices[0].FinishReason != "stop" || c.Usage.PromptTokens != 50 || c.Usage.CompletionTokens != 10 || c.Usage.TotalTokens != 60 {
		t.Fatalf("completion %s", r.body)
	}
	// The history reached the model before the input; the developer message became a system one.
	reqs := so.requests()
	all := reqs[len(reqs)-1].all()
	if !strings.Contains(all, "be brief") || !strings.Contains(all, "first question") || !strings.Contains(all, "first answer") ||
		strings.Index(all, "first answer") > strings.Index(all, "second question") {
		t.Fatalf("model saw %s", all)
	}
	// The run is recorded like any other.
	runID := r.header.Get("X-Agent-Run-Id")
	if runID == "" || "chatcmpl-"+runID != c.ID {
		t.Fatalf("run id header %q vs %q", runID, c.ID)
	}
	got := te.gw("GET", "/v1/runs/"+runID, nil).json(t)
	if res := got["result"].(map[string]any); res["stopReason"] != "complete" || res["agent"] != "gw-plain" {
		t.Fatalf("stored run %v", got["result"])
	}
	// Its summary names where it came from, as an MCP run's says "mcp" (issue 26 item 9).
	var list struct{ Runs []RunSummary }
	te.gw("GET", "/v1/runs?agent=gw-plain", nil).decode(t, &list)
	if len(list.Runs) == 0 || list.Runs[0].RunID != runID || list.Runs[0].Trigger != "openai" {
		t.Fatalf("run summary %+v", list.Runs)
	}
}

// gwStream posts a streamed completion and returns its data payloads (the last is "[DONE]").
func (te *testServer) gwStream(body map[string]any) []string {
	te.t.Helper()
	s := te.sse("POST", "/openai/v1/chat/completions", body, "Authorization", "Bearer "+gwToken)
	defer s.close()
	var out []string
	for f, ok := s.frame(); ok; f, ok = s.frame() {
		if f.event != "" {
			te.t.Fatalf("a named event in an OpenAI stream: %+v", f)
		}
		out = append(out, f.data)
	}
	return out
}

// checkChunks checks a chat.completion.chunk stream: one id, the role first, one finish_reason on the
// last choice chunk, the usage chunk (choices: []) when asked, [DONE] last. It returns the content and
// the usage.
func checkChunks(t *testing.T, data []string, wantUsage bool) (content, finish string, usage map[string]any) {
	t.Helper()
	if len(data) < 3 || data[len(data)-1] != "[DONE]" {
		t.Fatalf("stream %q", data)
	}
	id := ""
	var b strings.Builder
	for i, d := range data[:len(data)-1] {
		var ch map[string]any
		if err := json.Unmarshal([]byte(d), &ch); err != nil {
			t.Fatalf("chunk %d: %v: %s", i, err, d)
		}
		if ch["object"] != "chat.completion.chunk" || ch["created"] == nil || ch["model"] == nil {
			t.Fatalf("chunk %d: %s", i, d)
		}
		if id == "" {
			id = ch["id"].(string)
		} else if ch["id"] != id {
			t.Fatalf("chunk %d: id %v != %s", i, ch["id"], id)
		}
		u, hasUsage := ch["usage"]
		if wantUsage != hasUsage {
			t.Fatalf("chunk %d: usage key present=%v, include_usage=%v: %s", i, hasUsage, wantUsage, d)
		}
		choices := ch["choices"].([]any)
		if len(choices) == 0 { // the usage chunk: last before [DONE]
			if !wantUsage || i != len(data)-2 || u == nil {
				t.Fatalf("chunk %d: a choices-less chunk out of place: %s", i, d)
			}
			usage = u.(map[string]any)
			continue
		}
		if u != nil {
			t.Fatalf("chunk %d: usage on a choice chunk: %s", i, d)
		}
		c := choices[0].(map[string]any)
		delta := c["delta"].(map[string]any)
		if (i == 0) != (delta["role"] == "assistant") {
			t.Fatalf("chunk %d: role belongs to the first delta only: %s", i, d)
		}
		if s, ok := delta["content"].(string); ok {
			b.WriteString(s)
		}
		if fr, ok := c["finish_reason"].(string); ok {
			if finish != "" {
				t.Fatalf("two finish_reasons")
			}
			finish = fr
		} else if finish != "" {
			t.Fatalf("chunk %d after the finish_reason chunk: %s", i, d)
		}
	}
	if finish == "" || (wantUsage && usage == nil) {
		t.Fatalf("no finish_reason or usage: %q", data)
	}
	return b.String(), finish, usage
}

func TestGatewayChatStreamedWithUsageAndTools(t *testing.T) {
	te, _ := newGateway(t)
	msgs := []any{map[string]any{"role": "user", "content": "use the tool please"}}
	content, finish, usage := checkChunks(t, te.gwStream(map[string]any{"model": "gw-tools", "messages": msgs, "stream": true,
		"stream_options": map[string]any{"include_usage": true}}), true)
	if !strings.HasPrefix(content, "Let me check.\n\nThe tool said forty-two") || finish != "stop" {
		t.Fatalf("content %q finish %q", content, finish)
	}
	if usage["prompt_tokens"] != 100.0 || usage["completion_tokens"] != 20.0 || usage["total_tokens"] != 120.0 {
		t.Fatalf("usage %v", usage)
	}
	// Without include_usage: no usage key at all. Streamed and whole answers carry the same content.
	content2, _, _ := checkChunks(t, te.gwStream(map[string]any{"model": "gw-tools", "messages": msgs, "stream": true}), false)
	whole := te.gw("POST", "/openai/v1/chat/completions", map[string]any{"model": "gw-tools", "messages": msgs}).json(t)
	if text := whole["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"]; content2 != content || text != content {
		t.Fatalf("streamed %q, again %q, whole %q", content, content2, text)
	}
	runs := te.gw("GET", "/v1/runs?agent=gw-tools", nil).json(t)["runs"].([]any)
	if len(runs) != 3 {
		t.Fatalf("runs recorded: %d", len(runs))
	}
}

func TestGatewayErrors(t *testing.T) {
	te, _ := newGateway(t)
	e := oaiErr(t, te.gw("POST", "/openai/v1/chat/completions", map[string]any{"model": "no-such-agent", "messages": []any{map[string]any{"role": "user", "content": "x"}}}), 404)
	if e["code"] != "model_not_found" || e["param"] != "model" || e["type"] != "invalid_request_error" {
		t.Fatalf("404 %v", e)
	}
	oaiErr(t, te.gw("POST", "/openai/v1/chat/completions", "{not json"), 400)
	if e := oaiErr(t, te.gw("POST", "/openai/v1/chat/completions", map[string]any{"model": "gw-plain"}), 400); e["param"] != "messages" {
		t.Fatalf("missing messages %v", e)
	}
	oaiErr(t, te.gw("POST", "/openai/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "x"}}}), 400)
	oaiErr(t, te.gw("POST", "/openai/v1/chat/completions", map[string]any{"model": "gw-plain", "messages": []any{map[string]any{"role": "wizard", "content": "x"}}}), 400)
	oaiErr(t, te.gw("POST", "/openai/v1/chat/completions", map[string]any{"model": "gw-plain", "messages": []any{map[string]any{"role": "system", "content": "only a system message"}}}), 400)
	oaiErr(t, te.gw("POST", "/openai/v1/chat/completions", map[string]any{"model": "gw-plain", "messages": "hello"}), 400)
	oaiErr(t, te.do("POST", "/openai/v1/chat/completions", map[string]any{"model": "gw-plain", "messages": []any{}}), 401)
	// A streamed request that fails before the run starts is a plain error, not a stream.
	oaiErr(t, te.gw("POST", "/openai/v1/chat/completions", map[string]any{"model": "nope", "stream": true, "messages": []any{map[string]any{"role": "user", "content": "x"}}}), 404)
	// The body cap holds on this lenient route too.
	big := `{"model":"gw-plain","messages":[{"role":"user","content":"` + strings.Repeat("a", maxBodyBytes) + `"}]}`
	oaiErr(t, te.gw("POST", "/openai/v1/chat/completions", big), 400)
}

// TestGatewayDuplicateKeys (issue 25 item 6): /openai/v1 decodes by /v1's rule: a key twice in any
// object is a 400 naming it, never the last one winning; unknown keys are still ignored.
func TestGatewayDuplicateKeys(t *testing.T) {
	te, _ := newGateway(t)
	for _, tc := range []struct{ body, path string }{
		{`{"model":"no-such-agent","model":"gw-plain","messages":[{"role":"user","content":"x"}]}`, "model"},
		{`{"model":"gw-plain","messages":[{"role":"user","content":"x","content":"injected"}]}`, "messages.0.content"},
		{`{"model":"gw-plain","messages":[{"role":"user","content":"x"}],"stream":false,"stream":true}`, "stream"},
	} {
		e := oaiErr(t, te.gw("POST", "/openai/v1/chat/completions", tc.body), 400)
		if msg, _ := e["message"].(string); !strings.Contains(msg, tc.path+": duplicate key") || e["code"] != codeSpecInvalid {
			t.Errorf("%s: %v, want %q named", tc.body, e, tc.path)
		}
		// /v1 refuses the same document the same way.
		if r := te.gw("POST", "/v1/agents/gw-plain/run", `{"input":"x","input":"y"}`); r.status != 422 || !strings.Contains(r.errMessage(t), "input: duplicate key") {
			t.Fatalf("/v1: %d %s", r.status, r.body)
		}
	}
	if r := te.gw("POST", "/openai/v1/chat/completions", `{"model":"gw-plain","messages":[{"role":"user","content":"x"}],"user":"u","seed":1}`); r.status != 200 {
		t.Fatalf("unknown keys are ignored: %d %s", r.status, r.body)
	}
}

func TestGatewayDirectModel(t *testing.T) {
	te, so := newGateway(t)
	msgs := []any{map[string]any{"role": "system", "content": "sys"}, map[string]any{"role": "user", "content": "direct"}}
	r := te.gw("POST", "/openai/v1/chat/completions", map[string]any{"model": "openai/gpt-4o-mini", "messages": msgs, "max_tokens": 64, "stop": "END"})
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	c := r.json(t)
	if c["object"] != "chat.completion" || c["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"] != "Hello, direct" || r.header.Get("X-Agent-Run-Id") != "" {
		t.Fatalf("direct %s", r.body)
	}
	if n := len(so.requests()); so.requests()[n-1].Model != "gpt-4o-mini" {
		t.Fatalf("upstream model %q", so.requests()[n-1].Model)
	}
	content, finish, _ := checkChunks(t, te.gwStream(map[string]any{"model": "openai/gpt-4o-mini", "messages": msgs, "stream": true,
		"stream_options": map[string]any{"include_usage": true}}), true)
	if content != "Hello, direct" || finish != "stop" {
		t.Fatalf("streamed direct %q %q", content, finish)
	}
	// No run is recorded for a direct call.
	if runs := te.gw("GET", "/v1/runs", nil).json(t)["runs"].([]any); len(runs) != 0 {
		t.Fatalf("direct calls recorded runs: %v", runs)
	}
	// The direct-chat ceiling applies: maxCostUsd 0 admits only free models.
	te0, _ := newGateway(t, func(c *testSetup) { c.MaxCostUSD = 0 })
	e := oaiErr(t, te0.gw("POST", "/openai/v1/chat/completions", map[string]any{"model": "openai/gpt-4o-mini", "messages": msgs}), 429)
	if e["code"] != codeBudgetExceeded {
		t.Fatalf("ceiling %v", e)
	}
	oaiErr(t, te0.gw("POST", "/openai/v1/chat/completions", map[string]any{"model": "openai/gpt-4o-mini", "messages": msgs, "stream": true}), 429)
}

func TestGatewayApprovalEndsTheAnswer(t *testing.T) {
	te, _ := newGateway(t)
	r := te.gw("POST", "/openai/v1/chat/completions", map[string]any{"model": "gw-ask", "messages": []any{map[string]any{"role": "user", "content": "use the tool"}}})
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	c := r.json(t)
	ext := c["agentd"].(map[string]any)
	choice := c["choices"].([]any)[0].(map[string]any)
	text := choice["message"].(map[string]any)["content"].(string)
	apID, _ := ext["approvalId"].(string)
	runID := r.header.Get("X-Agent-Run-Id")
	if choice["finish_reason"] != "stop" || ext["stopReason"] != "approval_required" || apID == "" || runID == "" ||
		!strings.Contains(text, "Let me check.") || !strings.Contains(text, "/v1/approvals/"+apID) || !strings.Contains(text, runID) {
		t.Fatalf("approval answer %s", r.body)
	}
	// The run waits in the background; approving it lets it finish, recorded as usual.
	if a := te.gw("POST", "/v1/approvals/"+apID, map[string]any{"approve": true}); a.status != 200 {
		t.Fatalf("approve: %d %s", a.status, a.body)
	}
	eventually(t, "the approved run finishes", func() bool {
		res, _ := te.gw("GET", "/v1/runs/"+runID, nil).json(t)["result"].(map[string]any)
		return res["stopReason"] == "complete" && strings.Contains(res["text"].(string), "forty-two")
	})
	// Streamed: the note is the last content, then finish_reason and [DONE].
	content, finish, _ := checkChunks(t, te.gwStream(map[string]any{"model": "gw-ask", "stream": true, "messages": []any{map[string]any{"role": "user", "content": "use the tool"}}}), false)
	if finish != "stop" || !strings.Contains(content, "waiting for a human") {
		t.Fatalf("streamed approval %q", content)
	}
}

// ---- interop: the real openai npm SDK ----

// TestInteropOpenAISDK runs interop/openai/check.mjs (the official openai SDK, on the npm Node 22) against
// a real server. It skips when interop/openai/node_modules is missing, unless AGENT_TEST_INTEROP=1.
func TestInteropOpenAISDK(t *testing.T) {
	dir, node := interopNode(t, "openai")
	te, _ := newGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "check.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "AGENTD_URL="+te.url, "AGENTD_TOKEN="+gwToken)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("check.mjs: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "openai interop: ok") {
		t.Fatalf("check.mjs did not finish:\n%s", out)
	}
	t.Logf("%s", out)
}

// BenchmarkGatewayOverhead: the same one-step run of a zero-latency fake model, through
// POST /v1/agents/{name}/run and through POST /openai/v1/chat/completions (whole and streamed with
// include_usage), interleaved in every iteration (order rotating) on one server so load drift hits all three alike: the
// differences are what the gateway adds. Reported per request: direct-ns, gateway-ns, stream-ns.
func BenchmarkGatewayOverhead(b *testing.B) {
	m := &fakeModel{script: func(ctx context.Context, n int, req ChatRequest) (*ChatResponse, error) {
		return textResp("the answer"), nil
	}}
	te := newTestServer(b, withFakeModel(m))
	te.putAgent(testSpec("bench-gw", nil))
	client := &http.Client{}
	post := func(path, body, want string) time.Duration {
		t0 := time.Now()
		req, _ := http.NewRequest("POST", te.url+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		res, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		out, _ := io.ReadAll(res.Body)
		res.Body.Close()
		d := time.Since(t0)
		if res.StatusCode != 200 || !strings.Contains(string(out), want) {
			b.Fatalf("%s: %d %s", path, res.StatusCode, out)
		}
		return d
	}
	var direct, gw, stream time.Duration
	n := 0
	ways := []func(){
		func() { direct += post("/v1/agents/bench-gw/run", `{"input":"hi"}`, `"text":"the answer"`) },
		func() {
			gw += post("/openai/v1/chat/completions", `{"model":"bench-gw","messages":[{"role":"user","content":"hi"}]}`, `"content":"the answer"`)
		},
		func() {
			stream += post("/openai/v1/chat/completions", `{"model":"bench-gw","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`, "data: [DONE]")
		},
	}
	for b.Loop() { // the order rotates, so no way always follows another's background work
		for i := range ways {
			ways[(n+i)%len(ways)]()
		}
		n++
	}
	b.ReportMetric(float64(direct.Nanoseconds())/float64(n), "direct-ns")
	b.ReportMetric(float64(gw.Nanoseconds())/float64(n), "gateway-ns")
	b.ReportMetric(float64(stream.Nanoseconds())/float64(n), "stream-ns")
}

// Function tools pass through a direct call both ways: the model's tool_calls out (whole and streamed),
// the client's tool results back in.
func TestGatewayDirectModelFunctionTools(t *testing.T) {
	te, _ := newGateway(t)
	tools := []any{map[string]any{"type": "function", "function": map[string]any{"name": "shell", "description": "run a command",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"command": map[string]any{"type": "string"}}}}}}
	ask := map[string]any{"role": "user", "content": "use the tool"}
	r := te.gw("POST", "/openai/v1/chat/completions", map[string]any{"model": "openai/gpt-4o-mini", "messages": []any{ask}, "tools": tools, "tool_choice": "auto"})
	var c struct {
		Choices []struct {
			Message struct {
				Content   *string      `json:"content"`
				ToolCalls []oaToolCall `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	r.decode(t, &c)
	if r.status != 200 || len(c.Choices) != 1 || c.Choices[0].FinishReason != "tool_calls" || len(c.Choices[0].Message.ToolCalls) != 1 {
		t.Fatalf("tool call answer %d %s", r.status, r.body)
	}
	call := c.Choices[0].Message.ToolCalls[0]
	if call.ID != "g1" || call.Type != "function" || call.Function.Name != "shell" || call.Function.Arguments != `{"command":"echo forty-two"}` {
		t.Fatalf("tool call %+v", call)
	}
	// Streamed: the call arrives as a tool_calls delta with its index.
	var sawCall bool
	for _, d := range te.gwStream(map[string]any{"model": "openai/gpt-4o-mini", "messages": []any{ask}, "tools": tools, "stream": true}) {
		if strings.Contains(d, `"tool_calls":[{"index":0,"id":"g1","type":"function","function":{"name":"shell"`) {
			sawCall = true
		}
	}
	if !sawCall {
		t.Fatal("no tool_calls delta in the stream")
	}
	// The client runs the tool and sends the result back.
	back := []any{ask,
		map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": "g1", "type": "function",
			"function": map[string]any{"name": "shell", "arguments": `{"command":"echo forty-two"}`}}}},
		map[string]any{"role": "tool", "tool_call_id": "g1", "content": "forty-two"},
	}
	r = te.gw("POST", "/openai/v1/chat/completions", map[string]any{"model": "openai/gpt-4o-mini", "messages": back, "tools": tools})
	if r.status != 200 || !strings.Contains(string(r.body), `"content":"The tool said forty-two"`) {
		t.Fatalf("tool result round trip: %d %s", r.status, r.body)
	}
}
