package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func TestOllamaStreamToolsExactRequest(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, n int, r recorded) {
		replay(t, w, 200, "ollama", "chat_stream_tools.ndjson")
	})
	m, _ := newTestModels(t, map[string]string{"OLLAMA_BASE_URL": f.URL}, nil)
	temp := 0.1
	req := ChatRequest{
		Model:  "ollama/qwen3:8b",
		System: "You are terse.",
		Messages: []ModelMessage{
			{Role: "user", Content: []ContentPart{{Type: "text", Text: "What is in this picture? Weather in Toronto?"}, {Type: "image", MimeType: "image/png", Data: "iVBORw0KGgo="}}},
			{Role: "assistant", Content: []ContentPart{{Type: "tool_call", ID: "c1", Name: "get_current_weather", Args: map[string]any{"location": "Toronto"}}}},
			{Role: "tool", Content: []ContentPart{{Type: "tool_result", ToolCallID: "c1", Content: "11C"}}},
			userMsg("Thanks"),
		},
		Tools:          []ToolDef{{Name: "get_current_weather", Description: "Weather", Parameters: map[string]any{"type": "object", "properties": map[string]any{"location": map[string]any{"type": "string"}}}}},
		Temperature:    &temp,
		MaxTokens:      300,
		Stop:           []string{"END"},
		Thinking:       true,
		ResponseFormat: "json",
	}
	var col collector
	resp, err := m.Stream(context.Background(), req, chatOptions{MaxCostUSD: 0}, col.emit) // local: free, so a 0 ceiling admits it
	if err != nil {
		t.Fatal(err)
	}
	r := f.chatRequests()[0]
	if r.Path != "/api/chat" || r.Header.Get("Authorization") != "" {
		t.Fatalf("request: %s %v", r.Path, r.Header)
	}
	assertJSONEqual(t, r.Body, readTestdata(t, "ollama", "request_stream_tools.json"))
	if len(resp.ToolCalls) != 2 || resp.ToolCalls[0].Args["location"] != "Toronto" || resp.ToolCalls[0].ID == "" ||
		resp.FinishReason != "tool_calls" || resp.Thinking != "The user wants weather." {
		t.Fatalf("resp: %+v", resp)
	}
	if resp.Usage.InputTokens != 180 || resp.Usage.OutputTokens != 42 || resp.Usage.CostUSD != 0 {
		t.Fatalf("usage: %+v", resp.Usage)
	}
	if got := strings.Join(col.types(), ","); got != "start,thinking_delta,tool_call,tool_call,usage,done" {
		t.Fatalf("events: %s", got)
	}
}

func TestOllamaPlainStreamAndModels(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, n int, r recorded) {
		switch r.Path {
		case "/api/tags":
			replay(t, w, 200, "ollama", "tags.json")
		case "/api/show":
			var b struct{ Model string }
			json.Unmarshal(r.Body, &b)
			if b.Model == "llama3.2:latest" {
				replay(t, w, 200, "ollama", "show_llama3.2.json")
				return
			}
			replay(t, w, 404, "ollama", "error_404.json")
		case "/api/chat":
			if strings.Contains(string(r.Body), `"stream":true`) {
				replay(t, w, 200, "ollama", "chat_stream.ndjson")
				return
			}
			replay(t, w, 200, "ollama", "chat_plain.json")
		default:
			w.WriteHeader(404)
		}
	})
	m, _ := newTestModels(t, map[string]string{"OLLAMA_HOST": strings.TrimPrefix(f.URL, "http://")}, func(c *config) {})
	m.getenv = func(k string) string {
		if k == "OLLAMA_HOST" {
			return strings.TrimPrefix(f.URL, "http://") // bare host:port, as ollama documents it
		}
		return ""
	}
	resp, err := m.Chat(context.Background(), ChatRequest{Model: "ollama/llama3.2", Messages: []ModelMessage{userMsg("hi")}}, chatOptions{MaxCostUSD: 0})
	if err != nil || resp.Text != "Hello! How are you today?" || resp.Usage.OutputTokens != 298 {
		t.Fatalf("plain: %+v %v", resp, err)
	}
	var col collector
	resp, err = m.Stream(context.Background(), ChatRequest{Model: "local", Messages: []ModelMessage{userMsg("sky?")}}, chatOptions{MaxCostUSD: 0}, col.emit)
	if err != nil || resp.Text != "The sky is blue." || resp.Model != "ollama/llama3.2:latest" {
		t.Fatalf("stream via local: %+v %v", resp, err)
	}
	st := m.statuses(context.Background())["ollama"]
	if !st.Available || len(st.Models) != 2 || st.Infos["llama3.2:latest"].ContextWindow != 131072 || !st.Infos["llama3.2:latest"].SupportsTools {
		t.Fatalf("status: %+v", st)
	}
}

func TestOllamaCapabilitiesFromShow(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, n int, r recorded) {
		switch r.Path {
		case "/api/tags":
			w.Write([]byte(`{"models":[{"name":"tiny:latest","model":"tiny:latest"}]}`))
		case "/api/show":
			w.Write([]byte(`{"model_info":{"tiny.context_length":2048},"capabilities":["completion"]}`))
		default:
			replay(t, w, 200, "ollama", "chat_plain.json")
		}
	})
	m, _ := newTestModels(t, map[string]string{"OLLAMA_BASE_URL": f.URL}, nil)
	if st := m.statuses(context.Background())["ollama"]; st.Infos["tiny:latest"].ContextWindow != 2048 || st.Infos["tiny:latest"].SupportsTools {
		t.Fatalf("show: %+v", st.Infos)
	}
	_, err := m.Chat(context.Background(), ChatRequest{Model: "ollama/tiny:latest", Messages: []ModelMessage{userMsg("x")},
		Tools: []ToolDef{{Name: "ls"}}}, chatOptions{MaxCostUSD: 0})
	if apiCode(err) != codeProviderUnavailable || len(f.chatRequests()) != 1 { // the one POST is /api/show
		t.Fatalf("a model without the tools capability must not be sent tools: %v, %d posts", err, len(f.chatRequests()))
	}
}
