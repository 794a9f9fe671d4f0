package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

func geminiEnv(f *fakeUpstream) map[string]string {
	return map[string]string{"GOOGLE_API_KEY": "AIzaTestKey1234567890abcdefghijklmnop", "GEMINI_BASE_URL": f.URL}
}

func TestGeminiStreamToolsExactRequest(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, n int, r recorded) { replay(t, w, 200, "gemini", "stream_tools.sse") })
	m, _ := newTestModels(t, geminiEnv(f), nil)
	temp := 0.5
	req := ChatRequest{
		Model:  "google/gemini-2.5-pro",
		System: "You are terse.",
		Messages: []ModelMessage{
			{Role: "user", Content: []ContentPart{{Type: "text", Text: "Weather in Paris?"}, {Type: "image", MimeType: "image/jpeg", Data: "/9j/4AAQ"}}},
			{Role: "assistant", Content: []ContentPart{{Type: "tool_call", ID: "call_9", Name: "get_weather", Args: map[string]any{"location": "Paris"}, Signature: "CiQB0e2Kb3u5Fbk"}}},
			{Role: "tool", Content: []ContentPart{{Type: "tool_result", ToolCallID: "call_9", Content: "18C"}}},
			userMsg("And the time?"),
		},
		Tools:          []ToolDef{{Name: "get_weather", Description: "Weather for a place", Parameters: map[string]any{"type": "object", "properties": map[string]any{"location": map[string]any{"type": "string"}}}}},
		ToolChoice:     map[string]any{"name": "get_weather"},
		Temperature:    &temp,
		MaxTokens:      800,
		Stop:           []string{"END"},
		ResponseFormat: map[string]any{"type": "json_schema", "schema": map[string]any{"type": "object"}},
		Thinking:       float64(1024),
	}
	var col collector
	resp, err := m.Stream(context.Background(), req, chatOptions{MaxCostUSD: -1}, col.emit)
	if err != nil {
		t.Fatal(err)
	}
	r := f.chatRequests()[0]
	if r.Path != "/v1beta/models/gemini-2.5-pro:streamGenerateContent" || r.RawQuery != "alt=sse" ||
		r.Header.Get("x-goog-api-key") != "AIzaTestKey1234567890abcdefghijklmnop" || strings.Contains(r.RawQuery, "key=") {
		t.Fatalf("request: %s?%s %v", r.Path, r.RawQuery, r.Header)
	}
	assertJSONEqual(t, r.Body, readTestdata(t, "gemini", "request_stream_tools.json"))
	if len(resp.ToolCalls) != 2 || resp.ToolCalls[0].Name != "get_weather" || resp.ToolCalls[0].Signature != "CiQB0e2Kb3u5Fbk" ||
		resp.ToolCalls[1].Args["tz"] != "Europe/Paris" || resp.ToolCalls[0].ID == "" || resp.ToolCalls[0].ID == resp.ToolCalls[1].ID {
		t.Fatalf("tool calls: %+v", resp.ToolCalls)
	}
	if resp.FinishReason != "tool_calls" || resp.Thinking != "Checking the weather and time." || resp.Usage.OutputTokens != 70 || resp.Usage.InputTokens != 120 {
		t.Fatalf("resp: %+v", resp)
	}
	if got := strings.Join(col.types(), ","); got != "start,thinking_delta,tool_call,tool_call,usage,done" {
		t.Fatalf("events: %s", got)
	}
}

func TestGeminiPlainAndStreamText(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, n int, r recorded) {
		if strings.HasSuffix(r.Path, ":streamGenerateContent") {
			replay(t, w, 200, "gemini", "stream_text.sse")
			return
		}
		replay(t, w, 200, "gemini", "generate_plain.json")
	})
	m, _ := newTestModels(t, geminiEnv(f), nil)
	resp, err := m.Chat(context.Background(), ChatRequest{Model: "flash", Messages: []ModelMessage{userMsg("Explain AI")}}, chatOptions{MaxCostUSD: -1})
	if err != nil {
		t.Fatal(err)
	}
	r := f.chatRequests()[0]
	if r.Path != "/v1beta/models/gemini-2.5-flash:generateContent" {
		t.Fatalf("path %s", r.Path)
	}
	assertJSONEqual(t, r.Body, []byte(`{"contents":[{"role":"user","parts":[{"text":"Explain AI"}]}]}`))
	if resp.Text != "AI learns patterns from data to make predictions." || resp.Usage.OutputTokens != 412 || resp.Usage.CacheReadTokens != 4 {
		t.Fatalf("resp: %+v", resp)
	}
	var col collector
	resp, err = m.Stream(context.Background(), ChatRequest{Model: "flash", Messages: []ModelMessage{userMsg("sky?")}}, chatOptions{MaxCostUSD: -1}, col.emit)
	if err != nil || resp.Text != "The sky is blue." || resp.FinishReason != "stop" || resp.Usage.OutputTokens != 5 {
		t.Fatalf("stream: %+v %v", resp, err)
	}
	if got := strings.Join(col.types(), ","); got != "start,text_delta,text_delta,usage,done" {
		t.Fatalf("events: %s", got)
	}
}

// Tool schemas are plain JSON Schema (additionalProperties, $schema...): they must travel in
// parametersJsonSchema, since the `parameters` field accepts only Google's OpenAPI subset and answers 400.
func TestGeminiToolSchemaIsJSONSchema(t *testing.T) {
	schema := map[string]any{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
		"properties": map[string]any{"path": map[string]any{"type": "string"}}, "additionalProperties": false}
	body := geminiBody("gemini-2.5-flash", ChatRequest{Messages: []ModelMessage{userMsg("x")},
		Tools: []ToolDef{{Name: "read_file", Description: "read", Parameters: schema}}})
	decl := body["tools"].([]map[string]any)[0]["functionDeclarations"].([]map[string]any)[0]
	if _, ok := decl["parameters"]; ok {
		t.Fatalf("JSON Schema sent in the OpenAPI-subset field: %+v", decl)
	}
	if got, ok := decl["parametersJsonSchema"].(map[string]any); !ok || got["additionalProperties"] != false {
		t.Fatalf("declaration: %+v", decl)
	}
}
