// models_ollama.go — Ollama's native API: POST {base}/api/chat (NDJSON stream, or one object with
// stream:false), GET /api/tags (the probe), POST /api/show (context window and capabilities).
//
// Entry points: ollamaChat, ollamaModels, ollamaShow.
// Rules: keyless; options carry temperature, top_p, num_predict and stop; images ride on the message as
// base64; tool calls come whole with object arguments and no ids (agentd makes them); tool results are
// role "tool" messages with tool_name; thinking is `think` and streams in message.thinking; JSON mode is
// `format` ("json" or a schema). The stream is complete at the line with done:true, which carries
// done_reason and the token counts (prompt_eval_count, eval_count). An {"error"} line is an upstream error.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

type olMessage struct {
	Role      string       `json:"role"`
	Content   string       `json:"content"`
	Thinking  string       `json:"thinking,omitempty"`
	Images    []string     `json:"images,omitempty"`
	ToolCalls []olToolCall `json:"tool_calls,omitempty"`
	ToolName  string       `json:"tool_name,omitempty"`
}

type olToolCall struct {
	ID       string `json:"id,omitempty"`
	Function struct {
		Name      string         `json:"name"`
		Arguments map[string]any `json:"arguments"`
	} `json:"function"`
}

type olChunk struct {
	Message         olMessage `json:"message"`
	Done            bool      `json:"done"`
	DoneReason      string    `json:"done_reason"`
	PromptEvalCount int       `json:"prompt_eval_count"`
	EvalCount       int       `json:"eval_count"`
	Error           string    `json:"error"`
}

// ollamaBody builds the /api/chat request.
func ollamaBody(c candidate, req ChatRequest, stream bool) map[string]any {
	var msgs []olMessage
	if req.System != "" {
		msgs = append(msgs, olMessage{Role: "system", Content: req.System})
	}
	names := map[string]string{}
	for _, msg := range req.Messages {
		om := olMessage{Role: msg.Role}
		var text strings.Builder
		for _, p := range msg.Content {
			switch p.Type {
			case "text":
				text.WriteString(p.Text)
			case "image":
				om.Images = append(om.Images, p.Data)
			case "tool_call":
				names[p.ID] = p.Name
				var tc olToolCall
				tc.Function.Name, tc.Function.Arguments = p.Name, argsOrEmpty(p.Args)
				om.ToolCalls = append(om.ToolCalls, tc)
			case "tool_result":
				msgs = append(msgs, olMessage{Role: "tool", Content: toolResultText(p), ToolName: names[p.ToolCallID]})
			}
		}
		om.Content = text.String()
		if msg.Role == "tool" {
			if om.Content == "" {
				continue
			}
			om.Role = "user"
		}
		if om.Content == "" && len(om.Images) == 0 && len(om.ToolCalls) == 0 && hasResults(msg) {
			continue
		}
		msgs = append(msgs, om)
	}
	body := map[string]any{"model": c.info.Name, "messages": msgs, "stream": stream}
	if len(req.Tools) > 0 {
		body["tools"] = functionTools(req.Tools)
	}
	if opts := sampling(req, "temperature", "top_p", "num_predict", "stop"); len(opts) > 0 {
		body["options"] = opts
	}
	if req.Thinking != nil {
		on, _, _ := thinkingOf(req.Thinking)
		body["think"] = on
	}
	switch kind, schema, _ := responseFormatOf(req.ResponseFormat); kind {
	case "json":
		body["format"] = "json"
	case "json_schema":
		body["format"] = schema
	}
	return body
}

func (m *modelService) ollamaChat(ctx context.Context, c candidate, req ChatRequest, stream bool, emit func(StreamEvent)) (*ChatResponse, error) {
	name := c.prov.DisplayName
	resp, err := m.send(ctx, c, http.MethodPost, c.base+"/api/chat", ollamaBody(c, req, stream), nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := &ChatResponse{ToolCalls: []ToolCall{}}
	var text, thinking strings.Builder
	var body io.Reader = resp.Body
	if !stream { // one (possibly pretty-printed) object: fold it onto one line for the scanner
		emit = func(StreamEvent) {}
		b, err := readAnswer(ctx, name, resp.Body)
		if err != nil {
			return nil, err
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, b); err != nil {
			return nil, streamBroken(name, "unparseable answer: "+err.Error())
		}
		body = &buf
	}
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), maxStreamLine)
	done := false
	for !done && sc.Scan() {
		line := sc.Bytes()
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		var ch olChunk
		if err := json.Unmarshal(line, &ch); err != nil {
			return nil, streamBroken(name, "unparseable stream: "+shorten(err.Error(), 120))
		}
		if ch.Error != "" {
			return nil, &upstreamError{status: ollamaErrorStatus(ch.Error), msg: m.scrub(name + ": " + ch.Error)}
		}
		if t := ch.Message.Thinking; t != "" {
			thinking.WriteString(t)
			emit(StreamEvent{Type: "thinking_delta", Text: t})
		}
		if t := ch.Message.Content; t != "" {
			text.WriteString(t)
			emit(StreamEvent{Type: "text_delta", Text: t})
		}
		for _, tc := range ch.Message.ToolCalls {
			call := ToolCall{Type: "tool_call", ID: firstNonEmpty(tc.ID, newID("call")), Name: tc.Function.Name, Args: argsOrEmpty(tc.Function.Arguments)}
			out.ToolCalls = append(out.ToolCalls, call)
			emit(StreamEvent{Type: "tool_call", Call: &call})
		}
		if ch.Done {
			done = true
			out.Usage = Usage{InputTokens: ch.PromptEvalCount, OutputTokens: ch.EvalCount}
			out.FinishReason = ollamaFinish(ch.DoneReason, len(out.ToolCalls) > 0)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, readErr(ctx, name, err)
	}
	if !done {
		return nil, streamBroken(name, "stream ended before done")
	}
	out.Text, out.Thinking = text.String(), thinking.String()
	return out, nil
}

// ollamaErrorStatus guesses the status of an in-stream error line.
func ollamaErrorStatus(msg string) int {
	if strings.Contains(msg, "not found") {
		return 404
	}
	return 500
}

func ollamaFinish(r string, calls bool) string {
	return finishReason(r, calls, map[string]string{"length": "length"})
}

// ollamaModels lists the pulled models (GET /api/tags).
func (m *modelService) ollamaModels(ctx context.Context, c candidate) ([]string, map[string]ModelInfo, error) {
	var r struct {
		Models []struct {
			Name  string `json:"name"`
			Model string `json:"model"`
		} `json:"models"`
	}
	if err := m.getJSON(ctx, c, c.base+"/api/tags", nil, nil, &r); err != nil {
		return nil, nil, err
	}
	names := make([]string, 0, len(r.Models))
	for _, md := range r.Models {
		names = append(names, firstNonEmpty(md.Name, md.Model))
	}
	infos := map[string]ModelInfo{}
	for i, n := range names {
		if i >= 12 || ctx.Err() != nil {
			break
		}
		if mi, err := m.ollamaShow(ctx, c, n); err == nil {
			infos[n] = mi
		}
	}
	return names, infos, nil
}

// ollamaShow reads a model's context window and capabilities (POST /api/show).
func (m *modelService) ollamaShow(ctx context.Context, c candidate, name string) (ModelInfo, error) {
	var r struct {
		Capabilities []string       `json:"capabilities"`
		ModelInfo    map[string]any `json:"model_info"`
	}
	if err := m.getJSON(ctx, c, c.base+"/api/show", map[string]any{"model": name}, nil, &r); err != nil {
		return ModelInfo{}, err
	}
	mi := infoFor(c.prov, name, true)
	for k, v := range r.ModelInfo {
		if strings.HasSuffix(k, ".context_length") {
			if f, ok := v.(float64); ok && f > 0 {
				mi.ContextWindow = int(f)
			}
		}
	}
	if r.Capabilities != nil {
		mi.SupportsTools = slices.Contains(r.Capabilities, "tools")
		mi.SupportsVision = slices.Contains(r.Capabilities, "vision")
	}
	mi.MaxOutputTokens = min(mi.MaxOutputTokens, mi.ContextWindow)
	mi.DisplayName = name + " (Ollama, " + strconv.Itoa(mi.ContextWindow/1024) + "k)"
	return mi, nil
}
