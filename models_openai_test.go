package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func openaiEnv(f *fakeUpstream) map[string]string {
	return map[string]string{"OPENAI_API_KEY": "sk-test-key-1234567890", "OPENAI_BASE_URL": f.URL}
}

func TestOpenAIStreamToolCallsExactRequest(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, n int, r recorded) {
		replay(t, w, 200, "openai", "chat_stream_tools.sse")
	})
	m, _ := newTestModels(t, openaiEnv(f), nil)
	temp := 0.2
	req := ChatRequest{
		Model:  "openai/gpt-4o",
		System: "You are terse.",
		Messages: []ModelMessage{
			{Role: "user", Content: []ContentPart{{Type: "text", Text: "What is in this image, and what is the weather in Paris?"}, {Type: "image", MimeType: "image/png", Data: "iVBORw0KGgo="}}},
			{Role: "assistant", Content: []ContentPart{{Type: "thinking", Text: "hmm"}, {Type: "text", Text: "Let me check."}, {Type: "tool_call", ID: "call_1", Name: "get_weather", Args: map[string]any{"location": "Paris"}}}},
			{Role: "tool", Content: []ContentPart{{Type: "tool_result", ToolCallID: "call_1", Content: "18C, sunny"}}},
			userMsg("And the time?"),
		},
		Tools: []ToolDef{
			{Name: "get_weather", Description: "Weather for a place", Parameters: map[string]any{"type": "object", "properties": map[string]any{"location": map[string]any{"type": "string"}}, "required": []any{"location"}}},
			{Name: "get_time", Description: "Time in a zone", Parameters: map[string]any{"type": "object", "properties": map[string]any{"tz": map[string]any{"type": "string"}}}},
		},
		ToolChoice: "auto", Temperature: &temp, MaxTokens: 500, Stop: []string{"END"}, ResponseFormat: "json",
	}
	var col collector
	resp, err := m.Stream(context.Background(), req, chatOptions{MaxCostUSD: -1}, col.emit)
	if err != nil {
		t.Fatal(err)
	}
	reqs := f.chatRequests()
	if len(reqs) != 1 {
		t.Fatalf("%d chat requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer sk-test-key-1234567890" ||
		r.Header.Get("Content-Type") != "application/json" || r.Header.Get("Accept") != "text/event-stream" {
		t.Fatalf("request line/headers: %s %v", r.Path, r.Header)
	}
	assertJSONEqual(t, r.Body, readTestdata(t, "openai", "request_stream_tools.json"))

	if len(resp.ToolCalls) != 2 || resp.ToolCalls[0].ID != "call_DdmO9pD3xa9XTPNJ32zg2hcA" ||
		resp.ToolCalls[0].Name != "get_weather" || resp.ToolCalls[0].Args["location"] != "Paris, France" ||
		resp.ToolCalls[1].Name != "get_time" || resp.ToolCalls[1].Args["tz"] != "Europe/Paris" {
		t.Fatalf("tool calls: %+v", resp.ToolCalls)
	}
	if resp.FinishReason != "tool_calls" || resp.Model != "openai/gpt-4o" {
		t.Fatalf("finish/model: %q %q", resp.FinishReason, resp.Model)
	}
	if resp.Usage.InputTokens != 82 || resp.Usage.OutputTokens != 41 || resp.Usage.CacheReadTokens != 64 {
		t.Fatalf("usage: %+v", resp.Usage)
	}
	// gpt-4o: $2.50 in, $1.25 cached, $10 out per million.
	want := (18*2.5 + 64*1.25 + 41*10) / 1e6
	if d := resp.Usage.CostUSD - want; d > 1e-12 || d < -1e-12 {
		t.Fatalf("cost %v, want %v", resp.Usage.CostUSD, want)
	}
	got := strings.Join(col.types(), ",")
	if got != "start,tool_call,tool_call,usage,done" {
		t.Fatalf("events: %s", got)
	}
	if col.ofType("start")[0].Model != "openai/gpt-4o" || col.ofType("done")[0].Response != resp {
		t.Fatal("start/done events carry the wrong model or response")
	}
}

func TestOpenAIStreamText(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, n int, r recorded) { replay(t, w, 200, "openai", "chat_stream.sse") })
	m, _ := newTestModels(t, openaiEnv(f), nil)
	var col collector
	resp, err := m.Stream(context.Background(), ChatRequest{Model: "openai/gpt-4o-mini", Messages: []ModelMessage{userMsg("hi")}}, chatOptions{MaxCostUSD: -1}, col.emit)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text != "Hello there!" || resp.FinishReason != "stop" || resp.Usage.InputTokens != 19 || resp.Usage.OutputTokens != 3 {
		t.Fatalf("resp: %+v", resp)
	}
	if got := strings.Join(col.types(), ","); got != "start,text_delta,text_delta,usage,done" {
		t.Fatalf("events: %s", got)
	}
	if resp.Usage.CostUSD <= 0 {
		t.Fatal("costUsd not filled")
	}
}

func TestOpenAIChatPlain(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, n int, r recorded) { replay(t, w, 200, "openai", "chat_plain.json") })
	m, _ := newTestModels(t, openaiEnv(f), nil)
	resp, err := m.Chat(context.Background(), ChatRequest{Model: "openai/gpt-4o", Messages: []ModelMessage{userMsg("capital of France?")}}, chatOptions{MaxCostUSD: -1})
	if err != nil {
		t.Fatal(err)
	}
	assertJSONEqual(t, f.chatRequests()[0].Body, []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"capital of France?"}]}`))
	if resp.Text != "The capital of France is Paris." || resp.Usage.CacheReadTokens != 1024 || resp.Usage.InputTokens != 1117 {
		t.Fatalf("resp: %+v", resp)
	}
}

func TestOpenAIChatToolCallsPlain(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, n int, r recorded) { replay(t, w, 200, "openai", "chat_tools.json") })
	m, _ := newTestModels(t, openaiEnv(f), nil)
	resp, err := m.Chat(context.Background(), ChatRequest{Model: "openai/gpt-4o-mini", Messages: []ModelMessage{userMsg("weather?")}}, chatOptions{MaxCostUSD: -1})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ToolCalls) != 1 || resp.ToolCalls[0].Args["location"] != "Boston, MA" || resp.FinishReason != "tool_calls" || resp.Text != "" {
		t.Fatalf("resp: %+v", resp)
	}
}

func TestEstimateCostAndBudgetRefusalMakesNoCall(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, n int, r recorded) { replay(t, w, 200, "openai", "chat_plain.json") })
	m, _ := newTestModels(t, openaiEnv(f), nil)
	req := ChatRequest{Model: "openai/gpt-4o", Messages: []ModelMessage{userMsg(strings.Repeat("x", 3600))}, MaxTokens: 1000}
	model, usd, err := m.EstimateCost(req)
	if err != nil {
		t.Fatal(err)
	}
	// 3600 chars ≈ 1000 tokens (+ framing) at $2.50/M in, 1000 out at $10/M.
	if model != "openai/gpt-4o" || usd < 0.0124 || usd > 0.0127 {
		t.Fatalf("estimate %s %v", model, usd)
	}
	_, err = m.Chat(context.Background(), req, chatOptions{MaxCostUSD: 0.01})
	if apiCode(err) != codeBudgetExceeded || statusOf[apiCode(err)] != 429 {
		t.Fatalf("want E_BUDGET_EXCEEDED, got %v", err)
	}
	_, err = m.Chat(context.Background(), req, chatOptions{MaxCostUSD: 0})
	if apiCode(err) != codeBudgetExceeded {
		t.Fatalf("ceiling 0 must refuse a paid model, got %v", err)
	}
	if n := len(f.requests()); n != 0 {
		t.Fatalf("budget refusal made %d upstream calls", n)
	}
	if _, err := m.Chat(context.Background(), req, chatOptions{MaxCostUSD: 0.02}); err != nil {
		t.Fatalf("under the ceiling: %v", err)
	}
}

// TestOpenAICompatibleDifferences checks each OpenAI-compatible provider's documented differences in
// the request it receives and the answer it sends.
func TestOpenAICompatibleDifferences(t *testing.T) {
	temp := 0.4
	toolReq := func(model string) ChatRequest {
		return ChatRequest{Model: model, MaxTokens: 64, Temperature: &temp, ToolChoice: "required",
			Messages: []ModelMessage{userMsg("hi"),
				{Role: "assistant", Content: []ContentPart{{Type: "tool_call", ID: "call_abc123def456", Name: "get_weather", Args: map[string]any{"location": "Paris"}}}},
				{Role: "tool", Content: []ContentPart{{Type: "tool_result", ToolCallID: "call_abc123def456", Content: "18C"}}}},
			Tools: []ToolDef{{Name: "get_weather", Parameters: map[string]any{"type": "object"}}}}
	}
	type check func(t *testing.T, body map[string]any, h http.Header, resp *ChatResponse)
	cases := []struct {
		provider, model, file string
		thinking              any
		check                 check
	}{
		{"groq", "llama-3.3-70b-versatile", "groq/stream_xgroq.sse", nil, func(t *testing.T, b map[string]any, h http.Header, r *ChatResponse) {
			if b["max_completion_tokens"] != float64(64) || b["stream_options"] == nil || b["tool_choice"] != "required" {
				t.Errorf("groq body: %v", b)
			}
			if r.Usage.InputTokens != 40 || r.Usage.OutputTokens != 2 || r.Text != "Fast." {
				t.Errorf("groq usage from x_groq: %+v", r.Usage)
			}
		}},
		{"deepseek", "deepseek-reasoner", "deepseek/stream_reasoning.sse", true, func(t *testing.T, b map[string]any, h http.Header, r *ChatResponse) {
			if b["max_tokens"] != float64(64) || b["max_completion_tokens"] != nil || b["reasoning_effort"] != nil {
				t.Errorf("deepseek body: %v", b)
			}
			if r.Thinking != "9.11 vs 9.8: compare tenths." || r.Text != "9.8 is larger." || r.Usage.CacheReadTokens != 16 {
				t.Errorf("deepseek answer: %+v", r)
			}
		}},
		{"cerebras", "gpt-oss-120b", "openai/chat_stream.sse", nil, func(t *testing.T, b map[string]any, h http.Header, r *ChatResponse) {
			if b["tool_choice"] != "auto" || b["max_completion_tokens"] != float64(64) {
				t.Errorf("cerebras only takes tool_choice auto/none: %v", b)
			}
		}},
		{"mistral", "mistral-large-latest", "mistral/stream_tools.sse", nil, func(t *testing.T, b map[string]any, h http.Header, r *ChatResponse) {
			msgs := b["messages"].([]any)
			call := msgs[1].(map[string]any)["tool_calls"].([]any)[0].(map[string]any)
			res := msgs[2].(map[string]any)
			if b["stream_options"] != nil || b["max_tokens"] != float64(64) || b["tool_choice"] != "any" ||
				len(call["id"].(string)) != 9 || call["id"] != res["tool_call_id"] {
				t.Errorf("mistral body: %v", b)
			}
			if len(r.ToolCalls) != 1 || r.ToolCalls[0].ID != "D681PevKs" || r.Usage.InputTokens != 90 {
				t.Errorf("mistral answer: %+v", r)
			}
		}},
		{"together", "meta-llama/Llama-3.3-70B-Instruct-Turbo", "openai/chat_stream.sse", nil, func(t *testing.T, b map[string]any, h http.Header, r *ChatResponse) {
			if b["stream_options"] != nil || b["max_tokens"] != float64(64) || b["model"] != "meta-llama/Llama-3.3-70B-Instruct-Turbo" {
				t.Errorf("together body: %v", b)
			}
		}},
		{"openrouter", "anthropic/claude-sonnet-4.5", "openai/chat_stream.sse", "high", func(t *testing.T, b map[string]any, h http.Header, r *ChatResponse) {
			if h.Get("X-Title") != "agentd" || h.Get("HTTP-Referer") == "" || b["model"] != "anthropic/claude-sonnet-4.5" ||
				b["reasoning"].(map[string]any)["effort"] != "high" || b["stream_options"] != nil {
				t.Errorf("openrouter: %v %v", b, h)
			}
		}},
		{"lmstudio", "qwen2.5-7b-instruct", "openai/chat_stream.sse", nil, func(t *testing.T, b map[string]any, h http.Header, r *ChatResponse) {
			if h.Get("Authorization") != "" || b["max_tokens"] != float64(64) || r.Usage.CostUSD != 0 {
				t.Errorf("lmstudio: %v %v %+v", b, h, r.Usage)
			}
		}},
		{"openai", "gpt-5", "openai/chat_stream.sse", "low", func(t *testing.T, b map[string]any, h http.Header, r *ChatResponse) {
			if b["temperature"] != nil || b["reasoning_effort"] != "low" || b["max_completion_tokens"] != float64(64) {
				t.Errorf("openai reasoning model: %v", b)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.provider, func(t *testing.T) {
			f := newFake(t, func(w http.ResponseWriter, n int, r recorded) { replay(t, w, 200, strings.Split(c.file, "/")...) })
			p := providerByID(c.provider)
			env := map[string]string{p.BaseEnv: f.URL}
			if p.keyed() {
				env[p.EnvKeys[0]] = "key-" + c.provider + "-1234567890"
			}
			m, _ := newTestModels(t, env, nil)
			req := toolReq(c.provider + "/" + c.model)
			req.Thinking = c.thinking
			resp, err := m.Stream(context.Background(), req, chatOptions{MaxCostUSD: -1}, func(StreamEvent) {})
			if err != nil {
				t.Fatal(err)
			}
			r := f.chatRequests()[0]
			if r.Path != "/v1/chat/completions" { // a base URL without a path gets the API's /v1
				t.Fatalf("path %s", r.Path)
			}
			if p.keyed() && r.Header.Get("Authorization") != "Bearer key-"+c.provider+"-1234567890" {
				t.Fatalf("auth %q", r.Header.Get("Authorization"))
			}
			var body map[string]any
			json.Unmarshal(r.Body, &body)
			c.check(t, body, r.Header, resp)
		})
	}
}

func TestOpenRouterErrorInsideStream(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, n int, r recorded) {
		replay(t, w, 200, "openrouter", "stream_error.sse")
	})
	m, rec := newTestModels(t, map[string]string{"OPENROUTER_API_KEY": "sk-or-v1-abcdef1234567890", "OPENROUTER_BASE_URL": f.URL}, nil)
	_, err := m.Stream(context.Background(), ChatRequest{Model: "openrouter/meta-llama/llama-3.3-70b-instruct:free", Messages: []ModelMessage{userMsg("x")}}, chatOptions{MaxCostUSD: 0}, func(StreamEvent) {})
	if apiCode(err) != codeModelError || !strings.Contains(err.Error(), "Provider returned error") || asAPIError(err).Details["status"] != 502 {
		t.Fatalf("err %v", err)
	}
	if len(rec.get()) == 0 {
		t.Fatal("a 502 inside the stream is retryable")
	}
}

func TestMissingUsageIsEstimated(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, n int, r recorded) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + strings.Repeat("word ", 72) + "\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"))
	})
	m, _ := newTestModels(t, map[string]string{"TOGETHER_API_KEY": "tg-1234567890abcdef", "TOGETHER_BASE_URL": f.URL}, nil)
	resp, err := m.Stream(context.Background(), ChatRequest{Model: "together/deepseek-ai/DeepSeek-V3", Messages: []ModelMessage{userMsg(strings.Repeat("x", 360))}},
		chatOptions{MaxCostUSD: -1}, func(StreamEvent) {})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Usage.InputTokens < 100 || resp.Usage.OutputTokens < 100 || resp.Usage.CostUSD <= 0 || len(resp.Warnings) != 1 {
		t.Fatalf("usage %+v warnings %v", resp.Usage, resp.Warnings)
	}
}

// A tool call delta whose index is negative or absurd is a broken stream, not a panic or a huge allocation.
func TestOpenAIStreamToolCallIndexOutOfRange(t *testing.T) {
	m := &modelService{}
	for _, idx := range []string{"-1", "2000000000"} {
		body := `data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":` + idx + `,"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}}]}` + "\n\n" +
			`data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}` + "\n\ndata: [DONE]\n\n"
		_, err := m.openaiReadStream(context.Background(), "OpenAI", strings.NewReader(body), func(StreamEvent) {})
		ue, ok := err.(*upstreamError)
		if !ok || ue.status != 0 || !strings.Contains(ue.msg, "out of range") {
			t.Fatalf("index %s: %v", idx, err)
		}
	}
}

// {type:"json_schema"} without a schema is JSON mode, not a null schema every provider rejects with 400.
func TestOpenAIJSONSchemaWithoutSchemaIsJSONMode(t *testing.T) {
	c := candidate{prov: providerByID("openai"), info: infoFor(providerByID("openai"), "gpt-4o", false)}
	body := openaiBody(c, ChatRequest{Messages: []ModelMessage{userMsg("x")}, ResponseFormat: map[string]any{"type": "json_schema"}}, false)
	b, _ := json.Marshal(body["response_format"])
	if string(b) != `{"type":"json_object"}` {
		t.Fatalf("response_format %s", b)
	}
	ob := ollamaBody(candidate{prov: providerByID("ollama"), info: infoFor(providerByID("ollama"), "llama3.2", true)},
		ChatRequest{Messages: []ModelMessage{userMsg("x")}, ResponseFormat: map[string]any{"type": "json_schema"}}, false)
	if ob["format"] != "json" {
		t.Fatalf("ollama format %#v", ob["format"])
	}
}

// OpenAI's reasoning models (gpt-5*, o3, o4-mini) refuse `stop` with a 400, like temperature and top_p.
func TestOpenAIReasoningModelGetsNoStop(t *testing.T) {
	temp := 0.5
	req := ChatRequest{Messages: []ModelMessage{userMsg("x")}, Stop: []string{"END"}, Temperature: &temp}
	for _, name := range []string{"gpt-5", "o3", "o4-mini"} {
		body := openaiBody(candidate{prov: providerByID("openai"), info: infoFor(providerByID("openai"), name, false)}, req, false)
		if _, ok := body["stop"]; ok {
			t.Fatalf("%s: stop sent", name)
		}
		if _, ok := body["temperature"]; ok {
			t.Fatalf("%s: temperature sent", name)
		}
	}
	body := openaiBody(candidate{prov: providerByID("openai"), info: infoFor(providerByID("openai"), "gpt-4o", false)}, req, false)
	if _, ok := body["stop"]; !ok {
		t.Fatal("gpt-4o: stop dropped")
	}
}

// Parallel calls that all arrive at index 0 (as some OpenAI-compatible servers send them) stay separate
// calls, told apart by their ids; fragments without an id continue the call at their index.
func TestOpenAIStreamParallelCallsAtSameIndex(t *testing.T) {
	m := &modelService{}
	chunk := func(delta string) string { return `data: {"choices":[{"index":0,"delta":` + delta + `}]}` + "\n\n" }
	body := chunk(`{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":"{\"city\":"}}]}`) +
		chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]}`) +
		chunk(`{"tool_calls":[{"index":0,"id":"call_b","type":"function","function":{"name":"get_time","arguments":"{\"tz\":\"UTC\"}"}}]}`) +
		`data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}` + "\n\ndata: [DONE]\n\n"
	resp, err := m.openaiReadStream(context.Background(), "LM Studio", strings.NewReader(body), func(StreamEvent) {})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ToolCalls) != 2 || resp.ToolCalls[0].ID != "call_a" || resp.ToolCalls[0].Args["city"] != "Paris" ||
		resp.ToolCalls[1].ID != "call_b" || resp.ToolCalls[1].Name != "get_time" || resp.ToolCalls[1].Args["tz"] != "UTC" {
		t.Fatalf("tool calls: %+v", resp.ToolCalls)
	}
}

// LM Studio answers 400 "'response_format.type' must be 'json_schema' or 'text'" to json_object: JSON
// mode goes to it as the loosest json_schema; a real schema passes unchanged.
func TestOpenAICompatLMStudioJSONModeIsJSONSchema(t *testing.T) {
	c := candidate{prov: providerByID("lmstudio"), info: infoFor(providerByID("lmstudio"), "qwen2.5-7b-instruct", true)}
	body := openaiBody(c, ChatRequest{Messages: []ModelMessage{userMsg("x")}, ResponseFormat: "json"}, false)
	b, _ := json.Marshal(body["response_format"])
	if string(b) != `{"json_schema":{"name":"response","schema":{"type":"object"}},"type":"json_schema"}` {
		t.Fatalf("response_format %s", b)
	}
	body = openaiBody(c, ChatRequest{Messages: []ModelMessage{userMsg("x")},
		ResponseFormat: map[string]any{"type": "json_schema", "name": "pt", "schema": map[string]any{"type": "array"}}}, false)
	b, _ = json.Marshal(body["response_format"])
	if string(b) != `{"json_schema":{"name":"pt","schema":{"type":"array"}},"type":"json_schema"}` {
		t.Fatalf("response_format %s", b)
	}
}

// Groq refuses reasoning_format on models that do not reason (400 "`reasoning_format` is not supported
// with this model"): thinking asks for parsed reasoning only from its reasoning families.
func TestOpenAICompatGroqReasoningFormatOnlyForReasoningModels(t *testing.T) {
	req := ChatRequest{Messages: []ModelMessage{userMsg("x")}, Thinking: true}
	groq := providerByID("groq")
	if b := openaiBody(candidate{prov: groq, info: infoFor(groq, "llama-3.3-70b-versatile", false)}, req, false); b["reasoning_format"] != nil {
		t.Fatalf("llama: %v", b["reasoning_format"])
	}
	if b := openaiBody(candidate{prov: groq, info: infoFor(groq, "qwen/qwen3-32b", false)}, req, false); b["reasoning_format"] != "parsed" {
		t.Fatalf("qwen3: %v", b["reasoning_format"])
	}
}

// A run step with no tools may still carry toolChoice "auto": the providers refuse a tool choice without
// tools (OpenAI: "'tool_choice' is only allowed when 'tools' are specified"), so none is sent.
func TestOpenAIToolChoiceWithoutToolsIsNotSent(t *testing.T) {
	req := ChatRequest{Messages: []ModelMessage{userMsg("x")}, ToolChoice: "auto"}
	oa := providerByID("openai")
	if b := openaiBody(candidate{prov: oa, info: infoFor(oa, "gpt-4o", false)}, req, false); b["tool_choice"] != nil {
		t.Fatalf("openai: %v", b["tool_choice"])
	}
	an := providerByID("anthropic")
	if b := anthropicBody(candidate{prov: an, info: infoFor(an, "claude-sonnet-4-5", false)}, req, false); b["tool_choice"] != nil {
		t.Fatalf("anthropic: %v", b["tool_choice"])
	}
	if b := geminiBody("gemini-2.5-flash", req); b["toolConfig"] != nil {
		t.Fatalf("gemini: %v", b["toolConfig"])
	}
}

// A compatible server that sends tool calls without ids still yields calls with ids, so the tool result
// can be paired with its call in the next request.
func TestOpenAIToolCallsWithoutIDsGetOne(t *testing.T) {
	m := &modelService{}
	sse := `data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"ls","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}` + "\n\ndata: [DONE]\n\n"
	resp, err := m.openaiReadStream(context.Background(), "LM Studio", strings.NewReader(sse), func(StreamEvent) {})
	if err != nil || len(resp.ToolCalls) != 1 || resp.ToolCalls[0].ID == "" {
		t.Fatalf("stream: %+v %v", resp, err)
	}
	f := newFake(t, func(w http.ResponseWriter, n int, r recorded) {
		w.Write([]byte(`{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[{"type":"function","function":{"name":"ls","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":5,"completion_tokens":3}}`))
	})
	ms, _ := newTestModels(t, openaiEnv(f), nil)
	resp, err = ms.Chat(context.Background(), ChatRequest{Model: "openai/gpt-4o", Messages: []ModelMessage{userMsg("x")}}, chatOptions{MaxCostUSD: -1})
	if err != nil || len(resp.ToolCalls) != 1 || resp.ToolCalls[0].ID == "" {
		t.Fatalf("plain: %+v %v", resp, err)
	}
}

// A user note sent between a tool call and its result: the tool message must directly follow the
// assistant message with the call, so it moves up past the note.
func TestOpenAIToolResultsFollowTheirCall(t *testing.T) {
	msgs := openaiMessages(ChatRequest{Messages: []ModelMessage{
		userMsg("weather?"),
		{Role: "assistant", Content: []ContentPart{{Type: "tool_call", ID: "call_1", Name: "get_weather", Args: map[string]any{}}}},
		userMsg("in celsius please"),
		{Role: "tool", Content: []ContentPart{{Type: "tool_result", ToolCallID: "call_1", Content: "18C"}}},
	}})
	var roles []string
	for _, m := range msgs {
		roles = append(roles, m.Role)
	}
	if strings.Join(roles, ",") != "user,assistant,tool,user" || msgs[2].ToolCallID != "call_1" || msgs[3].Content != "in celsius please" {
		t.Fatalf("order: %v %+v", roles, msgs)
	}
}
