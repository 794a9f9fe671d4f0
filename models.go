// models.go — the model service: wire types shared by every adapter and by the run loop, the service
// itself (HTTP client, probe cache, lifecycle), and the /v1/models endpoints.
//
// Entry points used elsewhere: modelService.Chat and modelService.Stream (one request through the router,
// models_router.go), modelService.EstimateCost (the ceiling check before a call), modelService.doctor.
// Rules: provider keys and base URLs are read only through cfg.getenv; no key ever reaches a message, a
// log line, an event or an error (scrub); the chat bodies are strict (unknown keys → 422).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
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
	Signature  string         `json:"signature,omitempty"`  // thinking; tool_call (Gemini thoughtSignature)
}

// ToolCall is a model's request to run a tool. Type is always "tool_call". Signature is an opaque
// provider token (Gemini's thoughtSignature) that must travel back with the call in the history: copy it
// into the tool_call ContentPart's signature.
type ToolCall struct {
	Type      string         `json:"type"`
	ID        string         `json:"id"`
	Name      string         `json:"name"`
	Args      map[string]any `json:"args"`
	Signature string         `json:"signature,omitempty"`
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
	// Message is the assistant turn to append to the history for the next call: thinking (with the
	// signatures Anthropic requires back), text, and tool calls (with Gemini's thought signatures).
	Message ModelMessage `json:"message"`

	thinkingParts []ContentPart // signed thinking blocks, when the provider returns them
}

// assistantMessage builds resp.Message from the answer.
func (r *ChatResponse) assistantMessage() ModelMessage {
	msg := ModelMessage{Role: "assistant"}
	switch {
	case len(r.thinkingParts) > 0:
		msg.Content = append(msg.Content, r.thinkingParts...)
	case r.Thinking != "":
		msg.Content = append(msg.Content, ContentPart{Type: "thinking", Text: r.Thinking})
	}
	if r.Text != "" {
		msg.Content = append(msg.Content, ContentPart{Type: "text", Text: r.Text})
	}
	for _, tc := range r.ToolCalls {
		msg.Content = append(msg.Content, ContentPart{Type: "tool_call", ID: tc.ID, Name: tc.Name, Args: tc.Args, Signature: tc.Signature})
	}
	return msg
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

// MarshalJSON writes content as a plain string when it is exactly one text part (or empty), else as
// the array of parts — the shape clients most often send, so a round trip is stable.
func (m ModelMessage) MarshalJSON() ([]byte, error) {
	type wire struct {
		Role    string `json:"role"`
		Content any    `json:"content"`
	}
	w := wire{Role: m.Role, Content: m.Content}
	switch {
	case len(m.Content) == 0:
		w.Content = ""
	case len(m.Content) == 1 && m.Content[0].Type == "text":
		w.Content = m.Content[0].Text
	}
	return json.Marshal(w)
}

// UnmarshalJSON accepts content as a string or an array of parts, strictly (unknown keys are errors).
func (m *ModelMessage) UnmarshalJSON(b []byte) error {
	var w struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return err
	}
	m.Role, m.Content = w.Role, nil
	c := bytes.TrimSpace(w.Content)
	switch {
	case len(c) == 0 || string(c) == "null":
	case c[0] == '"':
		var t string
		if err := json.Unmarshal(c, &t); err != nil {
			return err
		}
		m.Content = []ContentPart{{Type: "text", Text: t}}
	case c[0] == '[':
		dec := json.NewDecoder(bytes.NewReader(c))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&m.Content); err != nil {
			return err
		}
	default:
		return errorf(codeSpecInvalid, "messages.content: expected a string or an array of parts").
			withHint(`send "content": "text" or "content": [{"type":"text","text":"..."}]`)
	}
	return nil
}

func (m ModelMessage) text() string {
	if len(m.Content) == 1 && m.Content[0].Type == "text" {
		return m.Content[0].Text
	}
	var b strings.Builder
	for _, p := range m.Content {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// modelDeps are the parts a model service is built from (newServer fills them from the config).
type modelDeps struct {
	hub     *hub
	log     *slog.Logger
	getenv  func(string) string // provider keys and base URLs; never logged
	aliases map[string]string   // config modelAliases: name → target
	metrics *metrics            // counts requests, tokens and cost (metrics.go); nil counts nothing
}

// modelService owns the HTTP client to providers, the probe cache and the router.
type modelService struct {
	modelDeps
	liveAliases atomic.Pointer[map[string]string] // modelAliases after a reload (aliasMap)
	client      *http.Client

	// Injected for tests: sleep waits between retries (returns early with ctx), jitter draws the
	// full-jitter delay in [0, max), now stamps probes.
	sleep  func(ctx context.Context, d time.Duration) error
	jitter func(max time.Duration) time.Duration
	now    func() time.Time

	probeTimeout time.Duration // one probe's ceiling (DESIGN §5: 2 s)
	streamIdle   time.Duration // an upstream body silent this long is abandoned
	probeTTL     time.Duration // how long a probe result is trusted

	ctx    context.Context // cancelled by Close: background probes end
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	probes   map[string]providerStatus // last complete probe round, per provider id
	partial  map[string]providerStatus // the running round's finished probes
	probedAt time.Time
	inflight chan struct{} // closed when the running probe round ends
}

func newModelService(d modelDeps) (*modelService, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 16
	tr.ResponseHeaderTimeout = 10 * time.Minute // a plain (non-streamed) answer arrives whole
	m := &modelService{
		modelDeps:    d,
		client:       &http.Client{Transport: tr},
		sleep:        sleepCtx,
		jitter:       func(max time.Duration) time.Duration { return time.Duration(rand.Int64N(int64(max) + 1)) },
		now:          time.Now,
		probeTimeout: 2 * time.Second,
		streamIdle:   2 * time.Minute,
		probeTTL:     30 * time.Second,
		probes:       map[string]providerStatus{},
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	if err := checkAliases(d.aliases); err != nil {
		return nil, err
	}
	return m, nil
}

// checkAliases refuses a modelAliases map with a loop or a chain too long.
func checkAliases(aliases map[string]string) error {
	probe := &modelService{modelDeps: modelDeps{aliases: aliases}}
	for alias := range aliases {
		if _, err := probe.resolveAlias(alias); err != nil {
			return err
		}
	}
	return nil
}

// aliasMap is config's modelAliases now: the start's until a reload (setAliases).
func (m *modelService) aliasMap() map[string]string {
	if p := m.liveAliases.Load(); p != nil {
		return *p
	}
	return m.aliases
}

// setAliases applies reloaded modelAliases, already checked (checkAliases).
func (m *modelService) setAliases(a map[string]string) { m.liveAliases.Store(&a) }

// Close stops background probes and drops idle upstream connections.
func (m *modelService) Close() {
	m.cancel()
	m.wg.Wait()
	m.client.CloseIdleConnections()
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// chatOptions carries what a caller adds to a request: the fallback chain and the cost ceiling.
type chatOptions struct {
	Fallbacks []string
	// MaxCostUSD is the ceiling for this call: negative means no ceiling; otherwise the call is refused
	// with 429 E_BUDGET_EXCEEDED before any upstream call when its estimated cost exceeds it (so 0 admits
	// only free models). Checked per candidate: a fallback that would cost more is skipped.
	MaxCostUSD float64
}

// Chat sends one request through the router and returns the whole answer.
func (m *modelService) Chat(ctx context.Context, req ChatRequest, opts chatOptions) (*ChatResponse, error) {
	return m.Stream(ctx, req, opts, nil)
}

// ---- handlers ----

// chatBody is the strict body of POST /v1/models/chat(/stream): a ChatRequest plus fallbackModels.
type chatBody struct {
	ChatRequest
	FallbackModels []string `json:"fallbackModels,omitempty"`
}

// validateChat checks the ranges the providers would otherwise reject after a round trip.
func validateChat(req *ChatRequest) error {
	bad := func(format string, args ...any) error {
		return errorf(codeSpecInvalid, format, args...).withHint("see docs/API.md Models for the ChatRequest keys")
	}
	if len(req.Messages) == 0 {
		return bad("messages: must be a non-empty array")
	}
	for i, msg := range req.Messages {
		if !messageRoles[msg.Role] {
			return bad("messages.%d.role: Invalid enum value. Expected 'system' | 'user' | 'assistant' | 'tool', received '%s'", i, msg.Role)
		}
		for j, p := range msg.Content {
			switch p.Type {
			case "text", "thinking":
			case "image":
				if p.Data == "" || p.MimeType == "" {
					return bad("messages.%d.content.%d: an image needs mimeType and base64 data", i, j)
				}
			case "tool_call":
				if p.ID == "" || p.Name == "" {
					return bad("messages.%d.content.%d: a tool_call needs id and name", i, j)
				}
			case "tool_result":
				if p.ToolCallID == "" {
					return bad("messages.%d.content.%d.toolCallId: Required", i, j)
				}
			default:
				return bad("messages.%d.content.%d.type: Invalid enum value. Expected 'text' | 'image' | 'tool_call' | 'tool_result' | 'thinking', received '%s'", i, j, p.Type)
			}
		}
	}
	if t := req.Temperature; t != nil && (*t < 0 || *t > 2) {
		return bad("temperature: Number must be between 0 and 2")
	}
	if t := req.TopP; t != nil && (*t < 0 || *t > 1) {
		return bad("topP: Number must be between 0 and 1")
	}
	if req.MaxTokens < 0 || req.MaxTokens > 1_000_000 {
		return bad("maxTokens: Number must be between 1 and 1000000")
	}
	if len(req.Stop) > 16 {
		return bad("stop: Array must contain at most 16 element(s)")
	}
	for i, s := range req.Stop { // providers answer 400 to a blank stop sequence
		if strings.TrimSpace(s) == "" {
			return bad("stop.%d: a stop sequence must contain a non-whitespace character", i)
		}
	}
	names := map[string]bool{}
	for i, t := range req.Tools {
		if t.Name == "" {
			return bad("tools.%d.name: Required", i)
		}
		if names[t.Name] { // providers answer 400 to duplicate tool names
			return bad("tools.%d.name: duplicate tool name '%s'", i, t.Name)
		}
		names[t.Name] = true
	}
	return nil
}

// decodeChat reads and validates a chat body and checks the configured ceiling before any upstream call.
func (s *server) decodeChat(r *http.Request) (ChatRequest, chatOptions, error) {
	var body chatBody
	if err := decode(r, &body); err != nil {
		return ChatRequest{}, chatOptions{}, err
	}
	if err := validateChat(&body.ChatRequest); err != nil {
		return ChatRequest{}, chatOptions{}, err
	}
	return body.ChatRequest, chatOptions{Fallbacks: body.FallbackModels, MaxCostUSD: s.conf().MaxCostUSD}, nil
}

func (s *server) handleChat(w http.ResponseWriter, r *http.Request) error {
	req, opts, err := s.decodeChat(r)
	if err != nil {
		return err
	}
	resp, err := s.models.Chat(r.Context(), req, opts)
	return reply(w, http.StatusOK, resp, err)
}

// handleChatStream resolves and prices the request first, so a refusal is a plain JSON error with its
// status; only then does it open the SSE stream. A client disconnect (or a stalled consumer) cancels
// the upstream request.
func (s *server) handleChatStream(w http.ResponseWriter, r *http.Request) error {
	req, opts, err := s.decodeChat(r)
	if err != nil {
		return err
	}
	plan, err := s.models.plan(r.Context(), req, opts)
	if err != nil {
		return err
	}
	if err := plan.refusal(); err != nil { // no candidate can be called (missing key, capability)
		return err
	}
	sse := newSSE(w, ssePingEvery)
	defer sse.close()
	ctx, cancel := sse.bind(r.Context()) // a consumer gone or stalled aborts the work
	defer cancel()
	s.models.run(ctx, plan, req, func(ev StreamEvent) {
		if ev.Type == "error" {
			sse.fail(s.publicError(r.Context(), ev.Error))
			return
		}
		sse.send(ev)
	})
	return nil
}

// handleListModels answers {models, providers}: the catalog entries (and live local models) of every
// available provider, and every provider's status. Probes run four at a time, each bounded.
func (s *server) handleListModels(w http.ResponseWriter, r *http.Request) error {
	st := s.models.statuses(r.Context())
	models := []ModelInfo{}
	providers := make([]providerView, 0, len(providerTable))
	for _, p := range providerTable {
		ps := st[p.ID]
		providers = append(providers, providerView{ID: p.ID, DisplayName: p.DisplayName, Priority: p.Priority,
			Available: ps.Available, Reason: ps.Reason, Hint: ps.Hint})
		if ps.Available {
			models = append(models, modelsOf(p, ps, p.ownServer(s.models.getenv))...)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"models": models, "providers": providers})
	return nil
}

// providerView is one providers[] entry of GET /v1/models.
type providerView struct {
	ID          string `json:"id"`
	DisplayName string `json:"displayName"`
	Priority    int    `json:"priority"`
	Available   bool   `json:"available"`
	Reason      string `json:"reason,omitempty"`
	Hint        string `json:"hint,omitempty"`
}

// doctor reports the model providers (probed four at a time), the model `auto` would select with its
// reason, and warnings (no model provider reachable).
func (m *modelService) doctor(ctx context.Context) (providers []doctorModelProvider, model, reason string, warnings []string) {
	st := m.statuses(ctx)
	providers = []doctorModelProvider{}
	var reachable []string
	for _, p := range providerTable {
		ps := st[p.ID]
		if ps.Available {
			reachable = append(reachable, p.ID)
		}
		d := doctorModelProvider{ID: p.ID, DisplayName: p.DisplayName, Priority: p.Priority,
			Available: ps.Available, EnvKey: p.envKey(), Models: []string{}, Reason: ps.Reason, Hint: ps.Hint}
		if ps.Answered {
			ids := ps.Models
			if len(ids) == 0 {
				ids = catalogNames(p.ID)
			}
			if len(ids) > 12 {
				ids = ids[:12]
			}
			d.Models = append(d.Models, ids...)
		}
		providers = append(providers, d)
	}
	cands, err := m.autoCandidates(st, "auto")
	if err != nil || len(cands) == 0 {
		if len(reachable) > 0 { // never "available" and "nothing reachable" in one report
			why := strings.Join(reachable, ", ") + " answered but lists no chat model agentd can use"
			return providers, "", why, append(warnings, why+": check which models the server serves")
		}
		warnings = append(warnings, "no model provider is reachable: set ANTHROPIC_API_KEY or OPENAI_API_KEY, set OPENAI_BASE_URL to a self-hosted OpenAI-compatible server (no key needed), or start ollama (OLLAMA_HOST)")
		return providers, "", "no model provider is reachable", warnings
	}
	return providers, cands[0], fmt.Sprintf("strategy auto: the best model by quality, then price, among reachable providers (%s)",
		strings.Join(reachable, ", ")), warnings
}

// ---- upstream errors and secrets ----

// upstreamError is a provider's failure as the router sees it: the HTTP status (0 for a network
// failure or an unparseable stream), the Retry-After it asked for, and a scrubbed message.
type upstreamError struct {
	status     int
	retryAfter time.Duration
	msg        string
}

func (e *upstreamError) Error() string { return e.msg }

// netError wraps a transport failure; ctx cancellation passes through untouched.
func netError(ctx context.Context, provider string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var ne net.Error
	what := "network failure"
	if errors.As(err, &ne) && ne.Timeout() {
		what = "timeout"
	}
	return &upstreamError{msg: provider + ": " + what + ": " + err.Error()}
}
