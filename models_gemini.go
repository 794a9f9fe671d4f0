// models_gemini.go — the Google Gemini API: POST {base}/models/{model}:generateContent, or
// :streamGenerateContent?alt=sse for a stream, authenticated with the x-goog-api-key header.
//
// Entry points: geminiChat (one call), geminiModels (GET /models, the probe).
// Rules: roles are user/model; the system prompt is systemInstruction; tool calls are functionCall parts
// (arguments arrive whole, several calls may come in separate chunks; Gemini gives no ids, so agentd
// makes them) and results functionResponse parts named after the call they answer; a part's
// thoughtSignature travels back with its call; thinking is thinkingConfig with includeThoughts, thought
// parts carry `thought: true`; JSON mode is responseMimeType (+ responseJsonSchema); tool schemas go as parametersJsonSchema. Output usage counts
// candidates plus thoughts tokens (both are billed as output). A stream has no terminator: it is complete
// when a chunk carried a finishReason.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

type gmPart struct {
	Text             string        `json:"text,omitempty"`
	Thought          bool          `json:"thought,omitempty"`
	ThoughtSignature string        `json:"thoughtSignature,omitempty"`
	InlineData       *gmBlob       `json:"inlineData,omitempty"`
	FunctionCall     *gmCall       `json:"functionCall,omitempty"`
	FunctionResponse *gmCallResult `json:"functionResponse,omitempty"`
}

type gmBlob struct {
	MimeType string `json:"mimeType"`
	Data     string `json:"data"`
}

type gmCall struct {
	ID   string         `json:"id,omitempty"`
	Name string         `json:"name"`
	Args map[string]any `json:"args"`
}

type gmCallResult struct {
	Name     string         `json:"name"`
	Response map[string]any `json:"response"`
}

type gmContent struct {
	Role  string   `json:"role,omitempty"`
	Parts []gmPart `json:"parts"`
}

type gmResponse struct {
	Candidates []struct {
		Content      gmContent `json:"content"`
		FinishReason string    `json:"finishReason"`
	} `json:"candidates"`
	PromptFeedback *struct {
		BlockReason string `json:"blockReason"`
	} `json:"promptFeedback"`
	UsageMetadata *struct {
		PromptTokenCount        int `json:"promptTokenCount"`
		CandidatesTokenCount    int `json:"candidatesTokenCount"`
		CachedContentTokenCount int `json:"cachedContentTokenCount"`
		ThoughtsTokenCount      int `json:"thoughtsTokenCount"`
	} `json:"usageMetadata"`
	Error json.RawMessage `json:"error"`
}

// geminiBody builds the generateContent request.
func geminiBody(model string, req ChatRequest) map[string]any {
	var system []string
	if req.System != "" {
		system = append(system, req.System)
	}
	names := map[string]string{} // tool call id → function name, for functionResponse
	var contents []gmContent
	add := func(role string, parts []gmPart) {
		if len(parts) == 0 {
			return
		}
		if n := len(contents); n > 0 && contents[n-1].Role == role {
			contents[n-1].Parts = append(contents[n-1].Parts, parts...)
			return
		}
		contents = append(contents, gmContent{Role: role, Parts: parts})
	}
	for _, msg := range req.Messages {
		if msg.Role == "system" {
			if t := msg.text(); t != "" {
				system = append(system, t)
			}
			continue
		}
		role := "user"
		if msg.Role == "assistant" {
			role = "model"
		}
		var parts []gmPart
		for _, p := range msg.Content {
			switch p.Type {
			case "text":
				if p.Text != "" {
					parts = append(parts, gmPart{Text: p.Text})
				}
			case "image":
				parts = append(parts, gmPart{InlineData: &gmBlob{MimeType: p.MimeType, Data: p.Data}})
			case "tool_call":
				names[p.ID] = p.Name
				parts = append(parts, gmPart{FunctionCall: &gmCall{Name: p.Name, Args: argsOrEmpty(p.Args)}, ThoughtSignature: p.Signature})
			case "tool_result":
				name := names[p.ToolCallID]
				if name == "" {
					name = p.ToolCallID
				}
				resp := map[string]any{"result": p.Content}
				if p.IsError {
					resp = map[string]any{"error": p.Content}
				}
				add("user", []gmPart{{FunctionResponse: &gmCallResult{Name: name, Response: resp}}})
			}
		}
		add(role, parts)
	}
	body := map[string]any{"contents": contents}
	if len(system) > 0 {
		body["systemInstruction"] = gmContent{Parts: []gmPart{{Text: strings.Join(system, "\n\n")}}}
	}
	if len(req.Tools) > 0 {
		decls := make([]map[string]any, len(req.Tools))
		for i, t := range req.Tools {
			d := map[string]any{"name": t.Name, "description": t.Description}
			if t.Parameters != nil {
				// parametersJsonSchema takes plain JSON Schema; `parameters` takes only Google's OpenAPI
				// subset and rejects common keys such as additionalProperties or $schema.
				d["parametersJsonSchema"] = t.Parameters
			}
			decls[i] = d
		}
		body["tools"] = []map[string]any{{"functionDeclarations": decls}}
	}
	mode, name := toolChoiceOf(req.ToolChoice)
	if len(req.Tools) == 0 { // no functions to configure
		mode = ""
	}
	switch mode {
	case "auto":
		body["toolConfig"] = map[string]any{"functionCallingConfig": map[string]any{"mode": "AUTO"}}
	case "none":
		body["toolConfig"] = map[string]any{"functionCallingConfig": map[string]any{"mode": "NONE"}}
	case "required":
		body["toolConfig"] = map[string]any{"functionCallingConfig": map[string]any{"mode": "ANY"}}
	case "tool":
		body["toolConfig"] = map[string]any{"functionCallingConfig": map[string]any{"mode": "ANY", "allowedFunctionNames": []string{name}}}
	}
	gc := sampling(req, "temperature", "topP", "maxOutputTokens", "stopSequences")
	if kind, schema, _ := responseFormatOf(req.ResponseFormat); kind != "" {
		gc["responseMimeType"] = "application/json"
		if schema != nil {
			gc["responseJsonSchema"] = schema
		}
	}
	if req.Thinking != nil {
		if on, budget, _ := thinkingOf(req.Thinking); on {
			gc["thinkingConfig"] = map[string]any{"thinkingBudget": budget, "includeThoughts": true}
		} else if !strings.Contains(model, "pro") { // Pro models cannot turn thinking off
			gc["thinkingConfig"] = map[string]any{"thinkingBudget": 0}
		}
	}
	if len(gc) > 0 {
		body["generationConfig"] = gc
	}
	return body
}

func (m *modelService) geminiChat(ctx context.Context, c candidate, req ChatRequest, stream bool, emit func(StreamEvent)) (*ChatResponse, error) {
	name := c.prov.DisplayName
	h := map[string]string{"x-goog-api-key": c.key}
	u := c.base + "/models/" + url.PathEscape(c.info.Name) + ":generateContent"
	if stream {
		u = c.base + "/models/" + url.PathEscape(c.info.Name) + ":streamGenerateContent?alt=sse"
		h["Accept"] = "text/event-stream"
	}
	resp, err := m.send(ctx, c, http.MethodPost, u, geminiBody(c.info.Name, req), h)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	acc := &gmAccumulator{out: &ChatResponse{ToolCalls: []ToolCall{}}, emit: emit}
	if !stream {
		b, err := readAnswer(ctx, name, resp.Body)
		if err != nil {
			return nil, err
		}
		var r gmResponse
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, streamBroken(name, "unparseable answer: "+err.Error())
		}
		acc.emit = func(StreamEvent) {}
		if err := acc.add(m, name, r); err != nil {
			return nil, err
		}
		if !acc.finished {
			return nil, streamBroken(name, "answer has no candidates")
		}
		return acc.result(), nil
	}
	rd := newSSEReader(resp.Body, maxStreamLine)
	for {
		_, data, err := rd.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, readErr(ctx, name, err)
		}
		var r gmResponse
		if err := json.Unmarshal(data, &r); err != nil {
			return nil, streamBroken(name, "unparseable stream: "+shorten(err.Error(), 120))
		}
		if err := acc.add(m, name, r); err != nil {
			return nil, err
		}
	}
	if !acc.finished {
		return nil, streamBroken(name, "stream ended before a finishReason")
	}
	return acc.result(), nil
}

// gmAccumulator folds response chunks (or the one plain answer) into a ChatResponse.
type gmAccumulator struct {
	out            *ChatResponse
	emit           func(StreamEvent)
	text, thinking strings.Builder
	finish         string
	finished       bool
}

func (a *gmAccumulator) add(m *modelService, name string, r gmResponse) error {
	if len(r.Error) > 0 && string(r.Error) != "null" {
		return m.streamError(name, r.Error)
	}
	if u := r.UsageMetadata; u != nil {
		a.out.Usage = Usage{InputTokens: u.PromptTokenCount, OutputTokens: u.CandidatesTokenCount + u.ThoughtsTokenCount,
			CacheReadTokens: u.CachedContentTokenCount}
	}
	if r.PromptFeedback != nil && r.PromptFeedback.BlockReason != "" && len(r.Candidates) == 0 {
		a.finish, a.finished = "content_filter", true
		return nil
	}
	for i, cand := range r.Candidates {
		if i > 0 {
			break
		}
		for _, p := range cand.Content.Parts {
			switch {
			case p.FunctionCall != nil:
				args, id := argsOrEmpty(p.FunctionCall.Args), cmp.Or(p.FunctionCall.ID, newID("call"))
				tc := ToolCall{Type: "tool_call", ID: id, Name: p.FunctionCall.Name, Args: args, Signature: p.ThoughtSignature}
				a.out.ToolCalls = append(a.out.ToolCalls, tc)
				a.emit(StreamEvent{Type: "tool_call", Call: &tc})
			case p.Thought && p.Text != "":
				a.thinking.WriteString(p.Text)
				a.emit(StreamEvent{Type: "thinking_delta", Text: p.Text})
			case p.Text != "":
				a.text.WriteString(p.Text)
				a.emit(StreamEvent{Type: "text_delta", Text: p.Text})
			}
		}
		if cand.FinishReason != "" {
			a.finish, a.finished = cand.FinishReason, true
		}
	}
	return nil
}

func (a *gmAccumulator) result() *ChatResponse {
	a.out.Text, a.out.Thinking = a.text.String(), a.thinking.String()
	a.out.FinishReason = geminiFinish(a.finish, len(a.out.ToolCalls) > 0)
	return a.out
}

func geminiFinish(r string, calls bool) string {
	return finishReason(r, calls, map[string]string{"MAX_TOKENS": "length", "SAFETY": "content_filter",
		"RECITATION": "content_filter", "BLOCKLIST": "content_filter", "PROHIBITED_CONTENT": "content_filter",
		"SPII": "content_filter", "IMAGE_SAFETY": "content_filter", "content_filter": "content_filter",
		"MALFORMED_FUNCTION_CALL": "error", "UNEXPECTED_TOOL_CALL": "error"})
}

// geminiModels lists the models that can generateContent (GET /models).
func (m *modelService) geminiModels(ctx context.Context, c candidate) ([]string, map[string]ModelInfo, error) {
	var r struct {
		Models []struct {
			Name    string   `json:"name"`
			Methods []string `json:"supportedGenerationMethods"`
		} `json:"models"`
	}
	if err := m.getJSON(ctx, c, c.base+"/models?pageSize=1000", nil, map[string]string{"x-goog-api-key": c.key}, &r); err != nil {
		return nil, nil, err
	}
	var names []string
	for _, md := range r.Models {
		if len(md.Methods) > 0 && !slices.Contains(md.Methods, "generateContent") {
			continue
		}
		names = append(names, strings.TrimPrefix(md.Name, "models/"))
	}
	return names, nil, nil
}
