// models.go — the model service: wire types shared by every adapter and by the run loop, the router
// (names, aliases, strategies, fallbacks, retries, cost), and the /v1/models endpoints.
//
// Entry points used elsewhere: modelService.Chat and modelService.Stream (one request through the router),
// modelService.EstimateCost (the ceiling check before a call).
package main

import (
	"context"
	"net/http"
)

// ModelMessage is one turn of a conversation. Content is a string or []ContentPart on the wire;
// in Go it is always parts (a plain string becomes one text part) — see the JSON methods.
type ModelMessage struct {
	Role    string        `json:"role"` // system | user | assistant | tool
	Content []ContentPart `json:"content"`
}

// ContentPart is one piece of a message: text, image, tool_call, tool_result or thinking.
type ContentPart struct {
	Type       string         `json:"type"`
	Text       string         `json:"text,omitempty"`
	MimeType   string         `json:"mimeType,omitempty"`   // image
	Data       string         `json:"data,omitempty"`       // image, base64
	ID         string         `json:"id,omitempty"`         // tool_call
	Name       string         `json:"name,omitempty"`       // tool_call
	Args       map[string]any `json:"args,omitempty"`       // tool_call
	ToolCallID string         `json:"toolCallId,omitempty"` // tool_result
	Content    string         `json:"content,omitempty"`    // tool_result
	IsError    bool           `json:"isError,omitempty"`    // tool_result
	Signature  string         `json:"signature,omitempty"`  // thinking
}

// ToolCall is a model's request to run a tool. Type is always "tool_call".
type ToolCall struct {
	Type string         `json:"type"`
	ID   string         `json:"id"`
	Name string         `json:"name"`
	Args map[string]any `json:"args"`
}

// ToolDef is a tool offered to the model, with a JSON schema for its arguments.
type ToolDef struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	Parameters  map[string]any `json:"parameters"`
}

// ChatRequest is the body of POST /v1/models/chat and what the run loop sends each step.
type ChatRequest struct {
	Model          string         `json:"model,omitempty"`
	Messages       []ModelMessage `json:"messages"`
	System         string         `json:"system,omitempty"`
	Tools          []ToolDef      `json:"tools,omitempty"`
	ToolChoice     any            `json:"toolChoice,omitempty"`
	Temperature    *float64       `json:"temperature,omitempty"`
	TopP           *float64       `json:"topP,omitempty"`
	MaxTokens      int            `json:"maxTokens,omitempty"`
	Stop           []string       `json:"stop,omitempty"`
	Thinking       any            `json:"thinking,omitempty"`
	ResponseFormat any            `json:"responseFormat,omitempty"`
	Metadata       map[string]any `json:"metadata,omitempty"`
}

// Usage counts tokens and their cost for one call (or a run's cumulative total).
type Usage struct {
	InputTokens      int     `json:"inputTokens"`
	OutputTokens     int     `json:"outputTokens"`
	CacheReadTokens  int     `json:"cacheReadTokens,omitempty"`
	CacheWriteTokens int     `json:"cacheWriteTokens,omitempty"`
	CostUSD          float64 `json:"costUsd"`
}

// ChatResponse is one complete answer. FinishReason ∈ stop, length, tool_calls, content_filter, error, aborted.
type ChatResponse struct {
	Model        string     `json:"model"`
	Text         string     `json:"text"`
	Thinking     string     `json:"thinking,omitempty"`
	ToolCalls    []ToolCall `json:"toolCalls"`
	FinishReason string     `json:"finishReason"`
	Usage        Usage      `json:"usage"`
	LatencyMS    int64      `json:"latencyMs"`
	Warnings     []string   `json:"warnings,omitempty"`
}

// StreamEvent is one frame of a streamed answer: start, text_delta, thinking_delta, tool_call, usage,
// warning, done, error.
type StreamEvent struct {
	Type     string        `json:"type"`
	Model    string        `json:"model,omitempty"`    // start
	Text     string        `json:"text,omitempty"`     // text_delta, thinking_delta
	Call     *ToolCall     `json:"call,omitempty"`     // tool_call
	Usage    *Usage        `json:"usage,omitempty"`    // usage
	Message  string        `json:"message,omitempty"`  // warning
	Code     string        `json:"code,omitempty"`     // warning
	Detail   any           `json:"detail,omitempty"`   // warning
	Response *ChatResponse `json:"response,omitempty"` // done
	Error    *apiError     `json:"error,omitempty"`    // error
}

// modelService owns the provider adapters, the probe cache and the router.
type modelService struct{ s *server }

func newModelService(s *server) (*modelService, error) { return &modelService{s: s}, nil }

// Close stops background probes.
func (m *modelService) Close() {}

// chatOptions carries what a caller adds to a request: the fallback chain and the cost ceiling.
type chatOptions struct {
	Fallbacks  []string
	MaxCostUSD float64 // ceiling for this call; checked before any upstream call
}

// Chat sends one request through the router and returns the whole answer.
func (m *modelService) Chat(ctx context.Context, req ChatRequest, opts chatOptions) (*ChatResponse, error) {
	return m.Stream(ctx, req, opts, nil)
}

// Stream sends one request through the router, calling emit for every StreamEvent (emit may be nil),
// and returns the assembled answer.
func (m *modelService) Stream(ctx context.Context, req ChatRequest, opts chatOptions, emit func(StreamEvent)) (*ChatResponse, error) {
	return nil, errorf(codeNotImplemented, "model providers have not landed yet")
}

// EstimateCost resolves req.Model and estimates the cost of the call before it is made.
func (m *modelService) EstimateCost(req ChatRequest) (model string, usd float64, err error) {
	return "", 0, errorf(codeNotImplemented, "model providers have not landed yet")
}

func (s *server) handleListModels(w http.ResponseWriter, r *http.Request) { notImplemented(w) }
func (s *server) handleChat(w http.ResponseWriter, r *http.Request)       { notImplemented(w) }
func (s *server) handleChatStream(w http.ResponseWriter, r *http.Request) { notImplemented(w) }

// doctor reports the model providers (probed four at a time), the model `auto` would select with its
// reason, and warnings (no model provider reachable).
func (m *modelService) doctor(ctx context.Context) (providers []doctorModelProvider, model, reason string, warnings []string) {
	return []doctorModelProvider{}, "", "", nil
}
