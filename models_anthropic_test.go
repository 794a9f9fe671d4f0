package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

func anthropicEnv(f *fakeUpstream) map[string]string {
	return map[string]string{"ANTHROPIC_API_KEY": "sk-ant-test-key-1234567890", "ANTHROPIC_BASE_URL": f.URL}
}

func TestAnthropicStreamToolsExactRequest(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, n int, r recorded) { replay(t, w, 200, "anthropic", "stream_tools.sse") })
	m, _ := newTestModels(t, anthropicEnv(f), nil)
	temp := 0.3
	req := ChatRequest{
		Model:  "sonnet",
		System: "You are terse.",
		Messages: []ModelMessage{
			{Role: "system", Content: []ContentPart{{Type: "text", Text: "Also be kind."}}},
			{Role: "user", Content: []ContentPart{{Type: "text", Text: "Weather in SF? Here is a map."}, {Type: "image", MimeType: "image/png", Data: "iVBORw0KGgo="}}},
			{Role: "assistant", Content: []ContentPart{{Type: "thinking", Text: "Need the tool.", Signature: "sig-abc"}, {Type: "thinking", Text: "unsigned, dropped"}, {Type: "tool_call", ID: "toolu_1", Name: "get_weather", Args: map[string]any{"location": "San Francisco"}}}},
			{Role: "tool", Content: []ContentPart{{Type: "tool_result", ToolCallID: "toolu_1", Content: "no data", IsError: true}}},
			userMsg("Try again"),
		},
		Tools:       []ToolDef{{Name: "get_weather", Description: "Weather for a place", Parameters: map[string]any{"type": "object", "properties": map[string]any{"location": map[string]any{"type": "string"}}}}},
		ToolChoice:  "auto",
		Temperature: &temp, // dropped: the API refuses temperature with thinking
		Stop:        []string{"END"},
		Thinking:    map[string]any{"budgetTokens": float64(2048)},
	}
	var col collector
	resp, err := m.Stream(context.Background(), req, chatOptions{MaxCostUSD: -1}, col.emit)
	if err != nil {
		t.Fatal(err)
	}
	r := f.chatRequests()[0]
	if r.Path != "/v1/messages" || r.Header.Get("x-api-key") != "sk-ant-test-key-1234567890" ||
		r.Header.Get("anthropic-version") != "2023-06-01" || r.Header.Get("Authorization") != "" {
		t.Fatalf("request: %s %v", r.Path, r.Header)
	}
	assertJSONEqual(t, r.Body, readTestdata(t, "anthropic", "request_stream_tools.json"))
	if resp.Model != "anthropic/claude-sonnet-4-5" || resp.FinishReason != "tool_calls" ||
		resp.Text != "Okay, let's check the weather for San Francisco, CA:" || resp.Thinking != "I need the weather tool." {
		t.Fatalf("resp: %+v", resp)
	}
	if len(resp.ToolCalls) != 1 || resp.ToolCalls[0].ID != "toolu_01T1x1fJ34qAmk2tNTrN7Up6" ||
		resp.ToolCalls[0].Args["location"] != "San Francisco, CA" || resp.ToolCalls[0].Args["unit"] != "fahrenheit" {
		t.Fatalf("tool calls: %+v", resp.ToolCalls)
	}
	if u := resp.Usage; u.InputTokens != 872 || u.CacheReadTokens != 400 || u.OutputTokens != 89 {
		t.Fatalf("usage: %+v", u)
	}
	if got := strings.Join(col.types(), ","); got != "start,thinking_delta,text_delta,tool_call,usage,done" {
		t.Fatalf("events: %s", got)
	}
	// The assistant turn to append keeps the signed thinking block, then text, then the call.
	msg := resp.Message
	if msg.Role != "assistant" || len(msg.Content) != 3 || msg.Content[0].Type != "thinking" ||
		msg.Content[0].Signature != "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds" || msg.Content[0].Text != "I need the weather tool." ||
		msg.Content[1].Type != "text" || msg.Content[2].Type != "tool_call" || msg.Content[2].ID != "toolu_01T1x1fJ34qAmk2tNTrN7Up6" {
		t.Fatalf("message: %+v", msg)
	}
	// Sent back, it round-trips into the exact blocks Anthropic requires.
	body := anthropicBody(candidate{prov: providerByID("anthropic"), info: infoFor(providerByID("anthropic"), "claude-sonnet-4-5", false)},
		ChatRequest{Messages: []ModelMessage{userMsg("q"), msg}}, false)
	blocks := body["messages"].([]anMessage)[1].Content
	if len(blocks) != 3 || blocks[0].Type != "thinking" || blocks[0].Signature == "" || blocks[2].Type != "tool_use" {
		t.Fatalf("history blocks: %+v", blocks)
	}
}

func TestAnthropicPlainAndStreamText(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, n int, r recorded) {
		if strings.Contains(string(r.Body), `"stream":true`) {
			replay(t, w, 200, "anthropic", "stream_text.sse")
			return
		}
		replay(t, w, 200, "anthropic", "message_plain.json")
	})
	m, _ := newTestModels(t, anthropicEnv(f), nil)
	req := ChatRequest{Model: "anthropic/claude-sonnet-4-5", Messages: []ModelMessage{userMsg("Hello")}, ResponseFormat: map[string]any{"type": "json"}}
	resp, err := m.Chat(context.Background(), req, chatOptions{MaxCostUSD: -1})
	if err != nil {
		t.Fatal(err)
	}
	assertJSONEqual(t, f.chatRequests()[0].Body, []byte(`{"model":"claude-sonnet-4-5","max_tokens":4096,
		"system":[{"type":"text","text":"Respond with one valid JSON value and nothing else: no prose, no code fences.","cache_control":{"type":"ephemeral"}}],
		"messages":[{"role":"user","content":[{"type":"text","text":"Hello","cache_control":{"type":"ephemeral"}}]}]}`))
	if resp.Text != "Hi! My name is Claude." || resp.FinishReason != "stop" {
		t.Fatalf("resp: %+v", resp)
	}
	// input counts every prompt token; cache reads and writes priced at their own rates.
	if u := resp.Usage; u.InputTokens != 3995 || u.CacheReadTokens != 1800 || u.CacheWriteTokens != 100 || u.OutputTokens != 503 {
		t.Fatalf("usage: %+v", u)
	}
	want := (2095*3 + 1800*0.30 + 100*3.75 + 503*15) / 1e6
	if d := resp.Usage.CostUSD - want; d > 1e-12 || d < -1e-12 {
		t.Fatalf("cost %v want %v", resp.Usage.CostUSD, want)
	}
	var col collector
	resp, err = m.Stream(context.Background(), ChatRequest{Model: "anthropic/claude-sonnet-4-5", Messages: []ModelMessage{userMsg("Hello")}}, chatOptions{MaxCostUSD: -1}, col.emit)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text != "Hello!" || resp.Usage.InputTokens != 25 || resp.Usage.OutputTokens != 15 {
		t.Fatalf("stream resp: %+v", resp)
	}
}

func TestAnthropicPlainToolUse(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, n int, r recorded) { replay(t, w, 200, "anthropic", "message_tools.json") })
	m, _ := newTestModels(t, anthropicEnv(f), nil)
	resp, err := m.Chat(context.Background(), ChatRequest{Model: "anthropic/claude-sonnet-4-5", Messages: []ModelMessage{userMsg("weather")}}, chatOptions{MaxCostUSD: -1})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ToolCalls) != 1 || resp.ToolCalls[0].Args["unit"] != "celsius" || resp.FinishReason != "tool_calls" || resp.Thinking == "" {
		t.Fatalf("resp: %+v", resp)
	}
}

func TestAnthropicErrorEventAfterOutput(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, n int, r recorded) {
		replay(t, w, 200, "anthropic", "stream_overloaded_after_text.sse")
	})
	m, rec := newTestModels(t, anthropicEnv(f), nil)
	var col collector
	_, err := m.Stream(context.Background(), ChatRequest{Model: "anthropic/claude-sonnet-4-5", Messages: []ModelMessage{userMsg("x")}},
		chatOptions{MaxCostUSD: -1, Fallbacks: []string{"anthropic/claude-haiku-4-5"}}, col.emit)
	if apiCode(err) != codeModelError || len(f.chatRequests()) != 1 || len(rec.get()) != 0 {
		t.Fatalf("err %v, %d calls, sleeps %v", err, len(f.chatRequests()), rec.get())
	}
	if got := strings.Join(col.types(), ","); got != "start,text_delta,error" {
		t.Fatalf("events: %s", got)
	}
}

// A user note sent between a tool call and its result merges into one user turn; the API requires the
// tool_result blocks first in that turn, text after.
func TestAnthropicToolResultsFirstInMergedUserTurn(t *testing.T) {
	body := anthropicBody(candidate{prov: providerByID("anthropic"), info: infoFor(providerByID("anthropic"), "claude-sonnet-4-5", false)},
		ChatRequest{Messages: []ModelMessage{
			userMsg("weather?"),
			{Role: "assistant", Content: []ContentPart{{Type: "tool_call", ID: "toolu_1", Name: "get_weather", Args: map[string]any{}}}},
			userMsg("in celsius please"),
			{Role: "tool", Content: []ContentPart{{Type: "tool_result", ToolCallID: "toolu_1", Content: "18C"}}},
		}}, false)
	msgs := body["messages"].([]anMessage)
	if len(msgs) != 3 || msgs[2].Role != "user" {
		t.Fatalf("messages: %+v", msgs)
	}
	last := msgs[2].Content
	if len(last) != 2 || last[0].Type != "tool_result" || last[0].ToolUseID != "toolu_1" || last[1].Type != "text" || last[1].Text != "in celsius please" {
		t.Fatalf("last user turn: %+v", last)
	}
}

// The Messages API refuses thinking together with a forced tool choice (any, or a named tool): the
// forced call wins and thinking is left out, so the request is one the API accepts.
func TestAnthropicForcedToolChoiceDropsThinking(t *testing.T) {
	c := candidate{prov: providerByID("anthropic"), info: infoFor(providerByID("anthropic"), "claude-sonnet-4-5", false)}
	tools := []ToolDef{{Name: "get_weather", Description: "w"}}
	for _, choice := range []any{"required", "get_weather"} {
		body := anthropicBody(c, ChatRequest{Messages: []ModelMessage{userMsg("x")}, Tools: tools, ToolChoice: choice,
			Thinking: true, MaxTokens: 1000}, false)
		if _, ok := body["thinking"]; ok {
			t.Fatalf("%v: thinking sent with a forced tool choice: %v", choice, body["tool_choice"])
		}
		if body["max_tokens"] != 1000 || body["tool_choice"] == nil {
			t.Fatalf("%v: %v %v", choice, body["max_tokens"], body["tool_choice"])
		}
	}
	body := anthropicBody(c, ChatRequest{Messages: []ModelMessage{userMsg("x")}, Tools: tools, ToolChoice: "auto", Thinking: true}, false)
	if _, ok := body["thinking"]; !ok {
		t.Fatal("thinking dropped with tool_choice auto")
	}
}

// A redacted_thinking block must travel back unmodified with the tool_use turn it preceded: it is kept in
// resp.Message as a thinking part carrying its encrypted data, and sent back as redacted_thinking.
func TestAnthropicRedactedThinkingRoundTrips(t *testing.T) {
	m := &modelService{}
	sse := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"redacted_thinking\",\"data\":\"EmwKAhgBEgy3va3pzix\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"ls\",\"input\":{}}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":9}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	resp, err := m.anthropicReadStream(context.Background(), "Anthropic", strings.NewReader(sse), func(StreamEvent) {})
	if err != nil {
		t.Fatal(err)
	}
	msg := resp.assistantMessage()
	body := anthropicBody(candidate{prov: providerByID("anthropic"), info: infoFor(providerByID("anthropic"), "claude-sonnet-4-5", false)},
		ChatRequest{Messages: []ModelMessage{userMsg("q"), msg}, Thinking: true}, false)
	blocks := body["messages"].([]anMessage)[1].Content
	if len(blocks) != 2 || blocks[0].Type != "redacted_thinking" || blocks[0].Data != "EmwKAhgBEgy3va3pzix" || blocks[1].Type != "tool_use" {
		t.Fatalf("history blocks: %+v", blocks)
	}
}

// Claude 4.5 models answer 400 when both temperature and top_p are given: only temperature goes.
func TestAnthropicTemperatureAndTopPNotBoth(t *testing.T) {
	c := candidate{prov: providerByID("anthropic"), info: infoFor(providerByID("anthropic"), "claude-sonnet-4-5", false)}
	temp, topP := 0.3, 0.9
	body := anthropicBody(c, ChatRequest{Messages: []ModelMessage{userMsg("x")}, Temperature: &temp, TopP: &topP}, false)
	if body["temperature"] != 0.3 || body["top_p"] != nil {
		t.Fatalf("temperature %v top_p %v", body["temperature"], body["top_p"])
	}
	body = anthropicBody(c, ChatRequest{Messages: []ModelMessage{userMsg("x")}, TopP: &topP}, false)
	if body["top_p"] != 0.9 || body["temperature"] != nil {
		t.Fatalf("top_p alone: %v %v", body["temperature"], body["top_p"])
	}
}
