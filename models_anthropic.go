// models_anthropic.go — the Anthropic Messages API: POST {base}/v1/messages with x-api-key and
// anthropic-version, plain or streamed as named SSE events.
//
// Entry points: anthropicChat (one call), anthropicModels (GET /v1/models, the probe).
// Rules: max_tokens is required (defaults to the model's allowance, above the thinking budget); system
// messages are lifted into `system`; tool results travel as tool_result blocks in a user turn;
// consecutive turns of one role are merged; thinking blocks go back only with their signature, and
// redacted_thinking blocks (a thinking part carrying `data`) go back unmodified, as the API requires;
// temperature/top_p are dropped with thinking (the API refuses them), and thinking is dropped with a
// forced tool choice (refused too); there is no JSON mode, so a
// responseFormat becomes a system instruction; cache breakpoints go after the system prompt and on the
// last block. Stream: message_start (input usage), content_block_*
// (text_delta, input_json_delta pieces, thinking_delta, signature_delta), message_delta (stop reason,
// output usage), message_stop; an `error` event maps to the status its type implies.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
)

const anthropicVersion = "2023-06-01"

type anBlock struct {
	Type      string         `json:"type"`
	Text      string         `json:"text,omitempty"`
	Source    map[string]any `json:"source,omitempty"`
	ID        string         `json:"id,omitempty"`
	Name      string         `json:"name,omitempty"`
	Input     any            `json:"input,omitempty"`
	ToolUseID string         `json:"tool_use_id,omitempty"`
	Content   any            `json:"content,omitempty"`
	IsError   bool           `json:"is_error,omitempty"`
	Thinking  string         `json:"thinking,omitempty"`
	Signature string         `json:"signature,omitempty"`
	Data      string         `json:"data,omitempty"`

	CacheControl map[string]string `json:"cache_control,omitempty"`
}

type anMessage struct {
	Role    string    `json:"role"`
	Content []anBlock `json:"content"`
}

type anUsage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
}

// usage counts every prompt token in InputTokens (Anthropic reports cached ones separately).
func (u anUsage) usage() Usage {
	return Usage{InputTokens: u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens,
		OutputTokens: u.OutputTokens, CacheReadTokens: u.CacheReadInputTokens, CacheWriteTokens: u.CacheCreationInputTokens}
}

func anthropicHeaders(c candidate) map[string]string {
	return map[string]string{"x-api-key": c.key, "anthropic-version": anthropicVersion}
}

func anthropicBody(c candidate, req ChatRequest, stream bool) map[string]any {
	system := []string{}
	if req.System != "" {
		system = append(system, req.System)
	}
	var msgs []anMessage
	add := func(role string, blocks []anBlock) {
		if len(blocks) == 0 {
			return
		}
		if n := len(msgs); n > 0 && msgs[n-1].Role == role {
			msgs[n-1].Content = append(msgs[n-1].Content, blocks...)
			return
		}
		msgs = append(msgs, anMessage{Role: role, Content: blocks})
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
			role = "assistant"
		}
		var blocks []anBlock
		for _, p := range msg.Content {
			switch p.Type {
			case "text":
				if p.Text != "" {
					blocks = append(blocks, anBlock{Type: "text", Text: p.Text})
				}
			case "image":
				blocks = append(blocks, anBlock{Type: "image", Source: map[string]any{"type": "base64", "media_type": p.MimeType, "data": p.Data}})
			case "tool_call":
				blocks = append(blocks, anBlock{Type: "tool_use", ID: p.ID, Name: p.Name, Input: argsOrEmpty(p.Args)})
			case "tool_result":
				add("user", []anBlock{{Type: "tool_result", ToolUseID: p.ToolCallID, Content: p.Content, IsError: p.IsError}})
			case "thinking":
				switch {
				case role != "assistant":
				case p.Signature != "":
					blocks = append(blocks, anBlock{Type: "thinking", Thinking: p.Text, Signature: p.Signature})
				case p.Data != "": // a redacted block goes back as it came: its encrypted data
					blocks = append(blocks, anBlock{Type: "redacted_thinking", Data: p.Data})
				}
			}
		}
		add(role, blocks)
	}
	// Merging turns can put a user's text ahead of the results that answer the previous tool_use
	// (a user note sent between a call and its result); the API wants every tool_result first.
	for i := range msgs {
		if msgs[i].Role == "user" {
			slices.SortStableFunc(msgs[i].Content, func(a, b anBlock) int {
				return cmp.Compare(toolResultRank(a), toolResultRank(b))
			})
		}
	}
	if kind, schema, _ := responseFormatOf(req.ResponseFormat); kind != "" {
		instr := "Respond with one valid JSON value and nothing else: no prose, no code fences."
		if schema != nil {
			b, _ := json.Marshal(schema)
			instr += " It must conform to this JSON schema: " + string(b)
		}
		system = append(system, instr)
	}

	maxTokens := req.MaxTokens
	if maxTokens <= 0 {
		maxTokens = min(defaultOutputTokens, max(c.info.MaxOutputTokens, 1024))
	}
	body := map[string]any{"model": c.info.Name, "messages": msgs}
	on, budget, _ := thinkingOf(req.Thinking)
	mode, toolName := toolChoiceOf(req.ToolChoice)
	if len(req.Tools) == 0 { // a tool choice without tools is refused, and means nothing
		mode = ""
	}
	if mode == "required" || mode == "tool" {
		// The API refuses thinking with a forced tool choice ("Thinking may not be enabled when
		// tool_choice forces tool use"): the forced call is what the caller depends on, so thinking goes.
		on = false
	}
	if on {
		budget = max(budget, 1024)                     // the API's minimum
		if req.MaxTokens <= 0 || maxTokens <= budget { // the budget counts inside max_tokens
			maxTokens = budget + defaultOutputTokens
		}
		body["thinking"] = map[string]any{"type": "enabled", "budget_tokens": budget}
	}
	body["max_tokens"] = maxTokens
	// Prompt caching: a breakpoint after the system prompt caches tools + system, one on the last block
	// of the conversation caches the history, so each step of an agent loop re-reads its prefix at the
	// cache rate. Prefixes under the model's minimum are simply not cached.
	ephemeral := map[string]string{"type": "ephemeral"}
	if len(system) > 0 {
		body["system"] = []anBlock{{Type: "text", Text: strings.Join(system, "\n\n"), CacheControl: ephemeral}}
	}
	if n := len(msgs); n > 0 {
		last := msgs[n-1].Content
		if i := len(last) - 1; i >= 0 && last[i].Type != "thinking" && last[i].Type != "redacted_thinking" {
			last[i].CacheControl = ephemeral
		}
	}
	if stream {
		body["stream"] = true
	}
	if len(req.Tools) > 0 {
		tools := make([]map[string]any, len(req.Tools))
		for i, t := range req.Tools {
			tools[i] = map[string]any{"name": t.Name, "description": t.Description, "input_schema": toolParams(t)}
		}
		body["tools"] = tools
	}
	switch mode {
	case "auto", "none":
		body["tool_choice"] = map[string]any{"type": mode}
	case "required":
		body["tool_choice"] = map[string]any{"type": "any"}
	case "tool":
		body["tool_choice"] = map[string]any{"type": "tool", "name": toolName}
	}
	if !on {
		if req.Temperature != nil {
			body["temperature"] = min(*req.Temperature, 1) // Anthropic's range is 0-1
		}
		// Current models refuse both ("`temperature` and `top_p` cannot both be specified for this
		// model"): temperature wins.
		if req.TopP != nil && req.Temperature == nil {
			body["top_p"] = *req.TopP
		}
	}
	if len(req.Stop) > 0 {
		body["stop_sequences"] = req.Stop
	}
	return body
}

func toolResultRank(b anBlock) int {
	if b.Type == "tool_result" {
		return 0
	}
	return 1
}

func (m *modelService) anthropicChat(ctx context.Context, c candidate, req ChatRequest, stream bool, emit func(StreamEvent)) (*ChatResponse, error) {
	name := c.prov.DisplayName
	h := anthropicHeaders(c)
	if stream {
		h["Accept"] = "text/event-stream"
	}
	resp, err := m.send(ctx, c, http.MethodPost, c.base+"/v1/messages", anthropicBody(c, req, stream), h)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if stream {
		return m.anthropicReadStream(ctx, name, resp.Body, emit)
	}
	b, err := readAnswer(ctx, name, resp.Body)
	if err != nil {
		return nil, err
	}
	var r struct {
		Content    []anBlock `json:"content"`
		StopReason string    `json:"stop_reason"`
		Usage      anUsage   `json:"usage"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, streamBroken(name, "unparseable answer: "+err.Error())
	}
	out := &ChatResponse{ToolCalls: []ToolCall{}, Usage: r.Usage.usage()}
	var text, thinking strings.Builder
	for _, bl := range r.Content {
		switch bl.Type {
		case "text":
			text.WriteString(bl.Text)
		case "thinking":
			thinking.WriteString(bl.Thinking)
			out.thinkingParts = append(out.thinkingParts, ContentPart{Type: "thinking", Text: bl.Thinking, Signature: bl.Signature})
		case "redacted_thinking":
			out.thinkingParts = append(out.thinkingParts, ContentPart{Type: "thinking", Data: bl.Data})
		case "tool_use":
			args, _ := bl.Input.(map[string]any)
			out.ToolCalls = append(out.ToolCalls, ToolCall{Type: "tool_call", ID: bl.ID, Name: bl.Name, Args: argsOrEmpty(args)})
		}
	}
	out.Text, out.Thinking = text.String(), thinking.String()
	out.FinishReason = anthropicFinish(r.StopReason, len(out.ToolCalls) > 0)
	return out, nil
}

// anthropicReadStream assembles a streamed answer from the named events.
func (m *modelService) anthropicReadStream(ctx context.Context, name string, body io.Reader, emit func(StreamEvent)) (*ChatResponse, error) {
	rd := newSSEReader(body, maxStreamLine)
	out := &ChatResponse{ToolCalls: []ToolCall{}}
	var text, thinking strings.Builder
	type block struct {
		typ, id, name string
		json          strings.Builder // tool input pieces, or the thinking text
		signature     string
		data          string // redacted_thinking: the encrypted block
	}
	blocks := map[int]*block{}
	var usage anUsage
	stop := ""
	stopped := false
	for !stopped {
		event, data, err := rd.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, readErr(ctx, name, err)
		}
		var ev struct {
			Type    string `json:"type"`
			Index   int    `json:"index"`
			Message *struct {
				Usage anUsage `json:"usage"`
			} `json:"message"`
			ContentBlock *anBlock `json:"content_block"`
			Delta        *struct {
				Type        string `json:"type"`
				Text        string `json:"text"`
				PartialJSON string `json:"partial_json"`
				Thinking    string `json:"thinking"`
				Signature   string `json:"signature"`
				StopReason  string `json:"stop_reason"`
			} `json:"delta"`
			Usage *anUsage `json:"usage"`
			Error *struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(data, &ev); err != nil {
			return nil, streamBroken(name, "unparseable stream: "+shorten(err.Error(), 120))
		}
		if ev.Type == "" {
			ev.Type = event
		}
		switch ev.Type {
		case "message_start":
			if ev.Message != nil {
				usage = ev.Message.Usage
			}
		case "content_block_start":
			if ev.ContentBlock != nil {
				b := &block{typ: ev.ContentBlock.Type, id: ev.ContentBlock.ID, name: ev.ContentBlock.Name, data: ev.ContentBlock.Data}
				blocks[ev.Index] = b
				if b.typ == "text" && ev.ContentBlock.Text != "" {
					text.WriteString(ev.ContentBlock.Text)
					emit(StreamEvent{Type: "text_delta", Text: ev.ContentBlock.Text})
				}
			}
		case "content_block_delta":
			if ev.Delta == nil {
				continue
			}
			b := blocks[ev.Index]
			if b == nil {
				b = &block{} // a delta of a block that never started is dropped
			}
			switch ev.Delta.Type {
			case "text_delta":
				text.WriteString(ev.Delta.Text)
				emit(StreamEvent{Type: "text_delta", Text: ev.Delta.Text})
			case "thinking_delta":
				thinking.WriteString(ev.Delta.Thinking)
				b.json.WriteString(ev.Delta.Thinking)
				emit(StreamEvent{Type: "thinking_delta", Text: ev.Delta.Thinking})
			case "signature_delta":
				b.signature += ev.Delta.Signature
			case "input_json_delta":
				b.json.WriteString(ev.Delta.PartialJSON)
			}
		case "content_block_stop":
			switch b := blocks[ev.Index]; {
			case b == nil:
			case b.typ == "thinking":
				out.thinkingParts = append(out.thinkingParts, ContentPart{Type: "thinking", Text: b.json.String(), Signature: b.signature})
			case b.typ == "redacted_thinking" && b.data != "":
				out.thinkingParts = append(out.thinkingParts, ContentPart{Type: "thinking", Data: b.data})
			case b.typ == "tool_use":
				tc := ToolCall{Type: "tool_call", ID: b.id, Name: b.name, Args: parseArgs(b.json.String())}
				out.ToolCalls = append(out.ToolCalls, tc)
				emit(StreamEvent{Type: "tool_call", Call: &tc})
			}
		case "message_delta":
			if ev.Delta != nil && ev.Delta.StopReason != "" {
				stop = ev.Delta.StopReason
			}
			if u := ev.Usage; u != nil { // the final counts; a zero means "as message_start said"
				usage.OutputTokens = u.OutputTokens
				usage.InputTokens = cmp.Or(u.InputTokens, usage.InputTokens)
				usage.CacheReadInputTokens = cmp.Or(u.CacheReadInputTokens, usage.CacheReadInputTokens)
				usage.CacheCreationInputTokens = cmp.Or(u.CacheCreationInputTokens, usage.CacheCreationInputTokens)
			}
		case "message_stop":
			stopped = true
		case "error":
			msg, typ := "error in stream", ""
			if ev.Error != nil {
				msg, typ = ev.Error.Message, ev.Error.Type
			}
			return nil, &upstreamError{status: anthropicErrorStatus(typ), msg: m.scrub(name + ": " + typ + ": " + msg)}
		}
	}
	if !stopped {
		return nil, streamBroken(name, "stream ended before message_stop")
	}
	out.Text, out.Thinking = text.String(), thinking.String()
	out.Usage = usage.usage()
	out.FinishReason = anthropicFinish(stop, len(out.ToolCalls) > 0)
	return out, nil
}

// anthropicErrorStatus maps the error types of an in-stream error event to the HTTP status they stand for.
func anthropicErrorStatus(typ string) int {
	switch typ {
	case "invalid_request_error":
		return 400
	case "authentication_error":
		return 401
	case "permission_error":
		return 403
	case "not_found_error":
		return 404
	case "request_too_large":
		return 413
	case "rate_limit_error":
		return 429
	case "overloaded_error":
		return 529
	}
	return 500
}

func anthropicFinish(r string, calls bool) string {
	return finishReason(r, calls, map[string]string{"max_tokens": "length", "model_context_window_exceeded": "length",
		"tool_use": "tool_calls", "refusal": "content_filter"})
}

// anthropicModels lists the models (GET /v1/models).
func (m *modelService) anthropicModels(ctx context.Context, c candidate) ([]string, map[string]ModelInfo, error) {
	return m.listDataIDs(ctx, c, c.base+"/v1/models?limit=1000", anthropicHeaders(c))
}
