package main

import (
	"context"
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
	if r.Path != "/chat/completions" || r.Header.Get("Authorization") != "Bearer sk-test-key-1234567890" ||
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
	if apiCode(err) != codeBudgetExceeded || statusOf(apiCode(err)) != 429 {
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
