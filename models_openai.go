// models_openai.go — the OpenAI Chat Completions wire format, also spoken (with their documented differences,
// openaiQuirks) by groq, deepseek, cerebras, mistral, together, openrouter and lmstudio.
//
// Entry points: openaiChat (one call, plain or streamed), openaiModels (GET /models, the probe).
// Rules: POST {base}/chat/completions with Authorization: Bearer <key> (none for lmstudio); streamed
// answers are SSE `data:` chunks ending with `data: [DONE]`; tool call arguments arrive in pieces keyed
// by index and are emitted whole at the end; usage comes in the last chunk (stream_options.include_usage
// where the provider accepts it, always for mistral/together, x_groq.usage on older groq answers).
package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
)

// openaiQuirks are the documented differences between OpenAI-compatible providers.
type openaiQuirks struct {
	maxTokensField     string // max_completion_tokens (OpenAI, groq, cerebras) or max_tokens
	streamUsage        bool   // accepts stream_options.include_usage
	usageAlways        bool   // sends usage in the last chunk unasked (mistral, together)
	usageInXGroq       bool   // groq: usage may come as x_groq.usage
	reasoningEffort    bool   // accepts reasoning_effort for reasoning models
	reasoningContent   bool   // streams reasoning as reasoning_content / reasoning (deepseek, openrouter)
	reasoningFormat    bool   // groq: reasoning_format "parsed" puts reasoning in message.reasoning
	cacheHitTokens     bool   // deepseek: prompt_cache_hit_tokens
	toolChoiceAny      bool   // mistral: "any" instead of "required"
	jsonSchema         bool   // accepts response_format json_schema
	appHeaders         bool   // openrouter: X-Title / HTTP-Referer attribution
	shortToolIDs       bool   // mistral: tool call ids must be exactly 9 characters [a-zA-Z0-9]
	toolChoiceAutoOnly bool   // cerebras: tool_choice only "auto" or "none"
	schemaOnlyJSON     bool   // lmstudio: response_format type must be json_schema or text (no json_object)
}

type oaMessage struct {
	Role       string       `json:"role"`
	Content    any          `json:"content"`
	ToolCalls  []oaToolCall `json:"tool_calls,omitempty"`
	ToolCallID string       `json:"tool_call_id,omitempty"`
}

// oaToolCall and oaUsage are the chat-completions wire shapes both ways: this adapter sends and reads
// them, and the gateway (gateway_openai.go) reads and answers them.
type oaToolCall struct {
	Index    *int   `json:"index,omitempty"` // stream deltas only
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type oaUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details,omitempty"`
	PromptCacheHitTokens int `json:"prompt_cache_hit_tokens,omitempty"`
}

func (u *oaUsage) usage() Usage {
	if u == nil {
		return Usage{}
	}
	out := Usage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens}
	if u.PromptTokensDetails != nil {
		out.CacheReadTokens = u.PromptTokensDetails.CachedTokens
	}
	if u.PromptCacheHitTokens > 0 {
		out.CacheReadTokens = u.PromptCacheHitTokens
	}
	return out
}

type oaDelta struct {
	Content          *string      `json:"content"`
	ReasoningContent string       `json:"reasoning_content"`
	Reasoning        string       `json:"reasoning"`
	ToolCalls        []oaToolCall `json:"tool_calls"`
}

type oaChunk struct {
	Choices []struct {
		Index        int     `json:"index"`
		Delta        oaDelta `json:"delta"`
		Message      oaDelta `json:"message"`
		FinishReason string  `json:"finish_reason"`
	} `json:"choices"`
	Usage *oaUsage `json:"usage"`
	XGroq *struct {
		Usage *oaUsage `json:"usage"`
	} `json:"x_groq"`
	Error json.RawMessage `json:"error"`
}

func openaiBody(c candidate, req ChatRequest, stream bool) map[string]any {
	q := c.prov.Quirks
	msgs := openaiMessages(req)
	if q.shortToolIDs {
		for i := range msgs {
			msgs[i].ToolCallID = shortToolID(msgs[i].ToolCallID)
			for j := range msgs[i].ToolCalls {
				msgs[i].ToolCalls[j].ID = shortToolID(msgs[i].ToolCalls[j].ID)
			}
		}
	}
	body := map[string]any{"model": c.info.Name, "messages": msgs}
	if stream {
		body["stream"] = true
		if q.streamUsage {
			body["stream_options"] = map[string]any{"include_usage": true}
		}
	}
	if len(req.Tools) > 0 {
		body["tools"] = functionTools(req.Tools)
	}
	mode, name := toolChoiceOf(req.ToolChoice)
	if len(req.Tools) == 0 { // "'tool_choice' is only allowed when 'tools' are specified" (400)
		mode = ""
	}
	if q.toolChoiceAutoOnly && (mode == "required" || mode == "tool") {
		mode = "auto" // cerebras rejects anything else; the model still sees the tools
	}
	switch mode {
	case "auto", "none":
		body["tool_choice"] = mode
	case "required":
		body["tool_choice"] = "required"
		if q.toolChoiceAny {
			body["tool_choice"] = "any"
		}
	case "tool":
		body["tool_choice"] = map[string]any{"type": "function", "function": map[string]any{"name": name}}
	}
	reasoning := c.info.reasoning
	knobs := req
	if reasoning { // reasoning models answer 400 to these ("Unsupported parameter: 'stop'")
		knobs.Temperature, knobs.TopP, knobs.Stop = nil, nil, nil
	}
	maps.Copy(body, sampling(knobs, "temperature", "top_p", q.maxTokensField, "stop"))
	if on, _, effort := thinkingOf(req.Thinking); on {
		switch {
		case q.reasoningEffort && reasoning:
			body["reasoning_effort"] = effort
		case q.reasoningFormat && groqParsesReasoning(c.info.Name):
			body["reasoning_format"] = "parsed"
		case c.prov.ID == "openrouter":
			body["reasoning"] = map[string]any{"effort": effort}
		}
	}
	switch kind, schema, name := responseFormatOf(req.ResponseFormat); {
	case kind == "json_schema" && q.jsonSchema:
		body["response_format"] = map[string]any{"type": "json_schema",
			"json_schema": map[string]any{"name": name, "schema": schema}}
	case kind != "" && q.schemaOnlyJSON: // JSON mode as the loosest schema the server accepts
		body["response_format"] = map[string]any{"type": "json_schema",
			"json_schema": map[string]any{"name": "response", "schema": map[string]any{"type": "object"}}}
	case kind != "":
		body["response_format"] = map[string]any{"type": "json_object"}
	}
	return body
}

// openaiMessages maps the conversation: system first, tool results as role "tool" messages, images as
// data URLs, tool calls with JSON-string arguments. Thinking parts are not sent back (DeepSeek rejects
// reasoning_content in the input).
func openaiMessages(req ChatRequest) []oaMessage {
	var out []oaMessage
	if req.System != "" {
		out = append(out, oaMessage{Role: "system", Content: req.System})
	}
	for _, msg := range req.Messages {
		var parts []map[string]any
		var calls []oaToolCall
		textOnly := true
		for _, p := range msg.Content {
			switch p.Type {
			case "text":
				parts = append(parts, map[string]any{"type": "text", "text": p.Text})
			case "image":
				textOnly = false
				parts = append(parts, map[string]any{"type": "image_url",
					"image_url": map[string]any{"url": "data:" + p.MimeType + ";base64," + p.Data}})
			case "tool_call":
				tc := oaToolCall{ID: p.ID, Type: "function"}
				tc.Function.Name, tc.Function.Arguments = p.Name, argsJSON(p.Args)
				calls = append(calls, tc)
			case "tool_result":
				out = append(out, oaMessage{Role: "tool", ToolCallID: p.ToolCallID, Content: toolResultText(p)})
			}
		}
		if msg.Role == "tool" && len(parts) == 0 {
			continue
		}
		role := msg.Role
		if role == "tool" { // stray text in a tool message: keep it as user text
			role = "user"
		}
		if len(parts) == 0 && len(calls) == 0 {
			if msg.Role == "assistant" || msg.Role == "user" || msg.Role == "system" {
				if hasResults(msg) {
					continue
				}
				out = append(out, oaMessage{Role: role, Content: ""})
			}
			continue
		}
		om := oaMessage{Role: role, ToolCalls: calls}
		switch {
		case len(parts) == 0:
			om.Content = nil
		case textOnly || role != "user":
			var b strings.Builder
			for _, p := range parts {
				if t, ok := p["text"].(string); ok {
					b.WriteString(t)
				}
			}
			om.Content = b.String()
		default:
			om.Content = parts
		}
		out = append(out, om)
	}
	return pairToolResults(out)
}

// pairToolResults moves each tool message up to directly after the assistant message whose call it
// answers, past any user text sent in between: the API answers 400 ("An assistant message with
// 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'") otherwise.
func pairToolResults(msgs []oaMessage) []oaMessage {
	out := make([]oaMessage, 0, len(msgs))
	moved := make([]bool, len(msgs))
	for i, m := range msgs {
		if moved[i] {
			continue
		}
		out = append(out, m)
		if m.Role != "assistant" || len(m.ToolCalls) == 0 {
			continue
		}
		ids := map[string]bool{}
		for _, tc := range m.ToolCalls {
			ids[tc.ID] = true
		}
		for j := i + 1; j < len(msgs) && msgs[j].Role != "assistant"; j++ {
			if msgs[j].Role == "tool" && ids[msgs[j].ToolCallID] {
				out = append(out, msgs[j])
				moved[j] = true
			}
		}
	}
	return out
}

// groqParsesReasoning: Groq answers 400 "`reasoning_format` is not supported with this model" to its
// non-reasoning models (llama...), and its gpt-oss models put reasoning in message.reasoning unasked;
// only the qwen3 and deepseek-r1 families take reasoning_format.
func groqParsesReasoning(model string) bool {
	m := strings.ToLower(model)
	return strings.Contains(m, "qwen") || strings.Contains(m, "deepseek-r1")
}

func hasResults(msg ModelMessage) bool {
	return slices.ContainsFunc(msg.Content, func(p ContentPart) bool { return p.Type == "tool_result" })
}

func (m *modelService) openaiHeaders(c candidate) map[string]string {
	h := map[string]string{}
	if c.key != "" {
		h["Authorization"] = "Bearer " + c.key
	}
	if c.prov.Quirks.appHeaders {
		h["X-Title"] = "agentd"
		h["HTTP-Referer"] = "https://github.com/seed-3d112177/agentd"
	}
	return h
}

// openaiChat makes one call; with stream it emits text/thinking deltas as they come and tool calls whole.
func (m *modelService) openaiChat(ctx context.Context, c candidate, req ChatRequest, stream bool, emit func(StreamEvent)) (*ChatResponse, error) {
	name := c.prov.DisplayName
	h := m.openaiHeaders(c)
	if stream {
		h["Accept"] = "text/event-stream"
	}
	resp, err := m.send(ctx, c, http.MethodPost, c.base+"/chat/completions", openaiBody(c, req, stream), h)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if stream {
		return m.openaiReadStream(ctx, name, resp.Body, emit)
	}
	b, err := readAnswer(ctx, name, resp.Body)
	if err != nil {
		return nil, err
	}
	var r oaChunk
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, streamBroken(name, "unparseable answer: "+err.Error())
	}
	if len(r.Error) > 0 && string(r.Error) != "null" { // OpenRouter can answer 200 with an error object
		return nil, m.streamError(name, r.Error)
	}
	if len(r.Choices) == 0 {
		return nil, streamBroken(name, "answer has no choices")
	}
	ch := r.Choices[0]
	out := &ChatResponse{ToolCalls: []ToolCall{}, Usage: r.Usage.usage()}
	if ch.Message.Content != nil {
		out.Text = *ch.Message.Content
	}
	out.Thinking = firstNonEmpty(ch.Message.ReasoningContent, ch.Message.Reasoning)
	for _, tc := range ch.Message.ToolCalls {
		// Some compatible servers send calls without ids; the history needs one to pair the result.
		out.ToolCalls = append(out.ToolCalls, ToolCall{Type: "tool_call", ID: firstNonEmpty(tc.ID, newID("call")), Name: tc.Function.Name, Args: parseArgs(tc.Function.Arguments)})
	}
	out.FinishReason = openaiFinish(ch.FinishReason, len(out.ToolCalls) > 0)
	return out, nil
}

// maxStreamToolCalls bounds the tool call index a stream may use (OpenAI allows 128 tools a request).
const maxStreamToolCalls = 1024

func (m *modelService) openaiReadStream(ctx context.Context, name string, body io.Reader, emit func(StreamEvent)) (*ChatResponse, error) {
	rd := newSSEReader(body, maxStreamLine)
	out := &ChatResponse{ToolCalls: []ToolCall{}}
	var text, thinking strings.Builder
	type partial struct {
		id, name string
		args     strings.Builder
	}
	var calls []*partial          // in order of appearance
	byIndex := map[int]*partial{} // the call a delta index currently continues
	finish := ""
	sawDone := false
	for {
		_, data, err := rd.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, readErr(ctx, name, err)
		}
		if string(data) == "[DONE]" {
			sawDone = true
			break
		}
		var ch oaChunk
		if err := json.Unmarshal(data, &ch); err != nil {
			return nil, streamBroken(name, "unparseable stream: "+shorten(err.Error(), 120))
		}
		if len(ch.Error) > 0 && string(ch.Error) != "null" {
			return nil, m.streamError(name, ch.Error)
		}
		if ch.Usage != nil {
			out.Usage = ch.Usage.usage()
		} else if ch.XGroq != nil && ch.XGroq.Usage != nil {
			out.Usage = ch.XGroq.Usage.usage()
		}
		for _, choice := range ch.Choices {
			if choice.Index != 0 {
				continue
			}
			d := choice.Delta
			if d.Content != nil && *d.Content != "" {
				text.WriteString(*d.Content)
				emit(StreamEvent{Type: "text_delta", Text: *d.Content})
			}
			if r := firstNonEmpty(d.ReasoningContent, d.Reasoning); r != "" {
				thinking.WriteString(r)
				emit(StreamEvent{Type: "thinking_delta", Text: r})
			}
			for i, tc := range d.ToolCalls {
				idx := i
				if tc.Index != nil {
					idx = *tc.Index
				}
				if idx < 0 || idx >= maxStreamToolCalls { // a hostile index must not panic or allocate without bound
					return nil, streamBroken(name, fmt.Sprintf("unparseable stream: tool call index %d out of range", idx))
				}
				p := byIndex[idx]
				// Some OpenAI-compatible servers send every parallel call at index 0: a new id at an
				// index that already has one starts a new call instead of merging the arguments.
				if p == nil || (tc.ID != "" && p.id != "" && tc.ID != p.id) {
					p = &partial{}
					byIndex[idx] = p
					calls = append(calls, p)
				}
				p.id, p.name = cmp.Or(tc.ID, p.id), cmp.Or(tc.Function.Name, p.name)
				p.args.WriteString(tc.Function.Arguments)
			}
			if choice.FinishReason != "" {
				finish = choice.FinishReason
			}
		}
	}
	if !sawDone && finish == "" {
		return nil, streamBroken(name, "stream ended before the answer was complete")
	}
	for _, p := range calls {
		if p.name == "" {
			continue
		}
		tc := ToolCall{Type: "tool_call", ID: firstNonEmpty(p.id, newID("call")), Name: p.name, Args: parseArgs(p.args.String())}
		out.ToolCalls = append(out.ToolCalls, tc)
		emit(StreamEvent{Type: "tool_call", Call: &tc})
	}
	out.Text, out.Thinking = text.String(), thinking.String()
	out.FinishReason = openaiFinish(finish, len(out.ToolCalls) > 0)
	return out, nil
}

// streamError maps an error object sent inside a stream (OpenRouter does this mid-stream).
func (m *modelService) streamError(name string, raw json.RawMessage) error {
	var e struct {
		Code    any    `json:"code"`
		Message string `json:"message"`
	}
	json.Unmarshal(raw, &e)
	st := 0
	if f, ok := e.Code.(float64); ok && f >= 400 && f < 600 {
		st = int(f)
	}
	msg := e.Message
	if msg == "" {
		msg = upstreamMessage([]byte(`{"error":`+string(raw)+`}`), "error in stream")
	}
	return &upstreamError{status: st, msg: m.scrub(name + ": " + msg)}
}

// shortToolID maps a tool call id onto Mistral's 9-character alphabet, deterministically so a call and
// its result still match; ids already in that shape (Mistral's own) pass unchanged.
func shortToolID(id string) string {
	if id == "" {
		return ""
	}
	const alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	if len(id) == 9 && strings.Trim(id, alnum) == "" {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	out := make([]byte, 9)
	for i := range out {
		out[i] = alnum[int(sum[i])%len(alnum)]
	}
	return string(out)
}

func openaiFinish(r string, calls bool) string {
	return finishReason(r, calls, map[string]string{"length": "length", "model_length": "length",
		"content_filter": "content_filter", "tool_calls": "tool_calls", "function_call": "tool_calls"})
}

// openaiModels lists the models of an OpenAI-compatible provider (GET {base}/models).
func (m *modelService) openaiModels(ctx context.Context, c candidate) ([]string, map[string]ModelInfo, error) {
	return m.listDataIDs(ctx, c, c.base+"/models", m.openaiHeaders(c))
}

// listDataIDs reads the model list that OpenAI and Anthropic share: {"data": [{"id": ...}]}.
func (m *modelService) listDataIDs(ctx context.Context, c candidate, url string, headers map[string]string) ([]string, map[string]ModelInfo, error) {
	var r struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := m.getJSON(ctx, c, url, nil, headers, &r); err != nil {
		return nil, nil, err
	}
	names := make([]string, 0, len(r.Data))
	for _, d := range r.Data {
		names = append(names, d.ID)
	}
	return names, nil, nil
}
