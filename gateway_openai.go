// gateway_openai.go — every agent as an OpenAI-compatible model: GET /openai/v1/models and
// POST /openai/v1/chat/completions, streamed (`chat.completion.chunk`s, then `data: [DONE]`) or not.
//
// Entry points: the routes in api.go (through s.openai, the adapter that answers errors in OpenAI's
// shape), (*server).refuse (the middleware's refusals, in that shape under /openai/).
// Rules (issue 18): model <agent> runs the agent — the last user message is the input, the messages
// before it the history (messages after it are ignored); the run is started, recorded and capped exactly
// like POST /v1/agents/{name}/run, and the client's disconnect aborts it. The answer's content is all the
// assistant text of the run, steps separated by a blank line, the same streamed or not; sampling options
// (temperature, max_tokens…) are the agent spec's business and ignored. model <provider>/<model> (no agent
// of that name) goes straight to the model router under the direct-chat ceiling (maxCostUsd), with
// temperature, top_p, max_tokens, stop and function tools passed through. Unknown request fields are
// ignored, never refused; otherwise the body is decoded by /v1's rule (decodeJSON: a key twice is 400, not
// the last one winning; the 32 MB body cap holds). Errors are
// {error:{message,type,param,code}}: 400 bad request, 401 bad token, 404 unknown model, 429 ceiling.
// A run that needs a human approval: the completion ends at once (finish_reason "stop") with a note
// naming the run and the approval; the run waits in the background (POST /v1/approvals/{id} answers it)
// and is recorded as usual. Every answer carries X-Agent-Run-Id when a run was started.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// ---- errors in OpenAI's shape ----

type openaiError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// openaiErrorOf maps the contract's error to OpenAI's status, type and code.
func openaiErrorOf(ae *apiError) (int, openaiError) {
	str := func(s string) *string { return &s }
	msg := ae.Message
	if ae.Hint != "" {
		msg += " (" + ae.Hint + ")"
	}
	e := openaiError{Message: msg, Type: "invalid_request_error", Code: str(ae.Code)}
	status := statusOf[ae.Code]
	if status == 0 {
		status = http.StatusInternalServerError
	}
	switch ae.Code {
	case codeNoCredentials:
		e.Code = str("invalid_api_key")
	case codeAgentNotFound, codeModelUnavailable:
		status, e.Param, e.Code = http.StatusNotFound, str("model"), str("model_not_found")
	case codeRouteNotFound:
		e.Code = str("unknown_url")
	case codeSpecInvalid:
		status = http.StatusBadRequest
		if ae.status != 0 { // a stalled body: 408
			status = ae.status
		}
		if p, ok := ae.Details["param"].(string); ok {
			e.Param = str(p)
		}
	case codeBudgetExceeded, codeQuota:
		e.Type = "insufficient_quota"
	case codeExecDenied:
		e.Type = "permission_error"
	}
	if status >= 500 {
		e.Type = "server_error"
	}
	return status, e
}

// writeOpenAIError answers err (already public) in OpenAI's envelope.
func writeOpenAIError(w http.ResponseWriter, err error) {
	ae := asAPIError(err)
	status, e := openaiErrorOf(ae)
	if ae.status != 0 {
		w.Header().Set("Connection", "close")
	}
	writeJSON(w, status, map[string]any{"error": e})
}

// refuse is the middleware's refusal: OpenAI's envelope under /openai/, the contract's elsewhere.
func (s *server) refuse(w http.ResponseWriter, r *http.Request, err error) {
	if strings.HasPrefix(r.URL.Path, "/openai/") {
		writeOpenAIError(w, err)
		return
	}
	writeError(w, err)
}

// openai adapts a handler of the gateway: a returned error is answered in OpenAI's envelope.
func (s *server) openai(f apiFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		noteRoute(r)
		if err := f(w, r); err != nil {
			writeOpenAIError(w, s.publicError(r.Context(), err))
		}
	}
}

func badRequest(param, format string, args ...any) *apiError {
	return errorf(codeSpecInvalid, format, args...).withDetail("param", param)
}

// ---- GET /openai/v1/models ----

func (s *server) handleOpenAIModels(w http.ResponseWriter, r *http.Request) error {
	rows, err := s.store.ListAgentSummaries(r.Context())
	if err != nil {
		return err
	}
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	data := make([]model, 0, len(rows))
	for _, row := range rows {
		var created int64
		if t, err := time.Parse(time.RFC3339Nano, firstNonEmpty(row.CreatedAt, row.UpdatedAt)); err == nil { // the listing keeps the last change
			created = t.Unix()
		}
		data = append(data, model{ID: row.Name, Object: "model", Created: created, OwnedBy: "agentd"})
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
	return nil
}

// handleOpenAINotFound answers an unknown path under /openai/ in OpenAI's envelope.
func (s *server) handleOpenAINotFound(w http.ResponseWriter, r *http.Request) error {
	return errRouteNotFound(r)
}

// ---- POST /openai/v1/chat/completions ----

// oaiRequest is the part of a chat-completions body agentd reads; every other field is ignored.
type oaiRequest struct {
	Model         string       `json:"model"`
	Messages      []oaiMessage `json:"messages"`
	Stream        bool         `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Stop                json.RawMessage `json:"stop"`
	Tools               []struct {
		Type     string `json:"type"`
		Function struct {
			Name        string         `json:"name"`
			Description string         `json:"description"`
			Parameters  map[string]any `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
}

type oaiMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"tool_call_id"`
	ToolCalls  []oaToolCall    `json:"tool_calls"`
}

func (q *oaiRequest) includeUsage() bool {
	return q.StreamOptions != nil && q.StreamOptions.IncludeUsage
}

// readOpenAIRequest decodes by the server's one JSON rule (decodeJSON: no key twice, one value, UTF-8),
// except that unknown fields are ignored.
func readOpenAIRequest(r *http.Request) (*oaiRequest, []ModelMessage, error) {
	b, err := readBody(r)
	if err != nil {
		return nil, nil, err
	}
	var q oaiRequest
	if err := decodeJSON(b, &q, false); err != nil { // the server's one JSON rule, unknown keys aside
		return nil, nil, err
	}
	if strings.TrimSpace(q.Model) == "" {
		return nil, nil, badRequest("model", "model: Required (an agent's name, or provider/model)")
	}
	if len(q.Messages) == 0 {
		return nil, nil, badRequest("messages", "messages: must be a non-empty array")
	}
	msgs := make([]ModelMessage, 0, len(q.Messages))
	for i, m := range q.Messages {
		mm, err := m.toModel()
		if err != nil {
			return nil, nil, badRequest(fmt.Sprintf("messages[%d]", i), "messages[%d]: %v", i, err)
		}
		msgs = append(msgs, mm)
	}
	return &q, msgs, nil
}

// toModel turns one OpenAI message into agentd's: text and data-URL images, assistant tool calls and
// tool results. Content parts of other types (audio, files) are left out.
func (m oaiMessage) toModel() (ModelMessage, error) {
	role := m.Role
	switch role {
	case "developer":
		role = "system"
	case "system", "user", "assistant", "tool":
	default:
		return ModelMessage{}, fmt.Errorf("role %q is not system, developer, user, assistant or tool", m.Role)
	}
	out := ModelMessage{Role: role}
	var parts []ContentPart
	c := strings.TrimSpace(string(m.Content))
	switch {
	case c == "" || c == "null":
	case c[0] == '"':
		var s string
		if err := json.Unmarshal(m.Content, &s); err != nil {
			return ModelMessage{}, err
		}
		parts = append(parts, ContentPart{Type: "text", Text: s})
	case c[0] == '[':
		var raw []struct {
			Type     string `json:"type"`
			Text     string `json:"text"`
			Refusal  string `json:"refusal"`
			ImageURL struct {
				URL string `json:"url"`
			} `json:"image_url"`
		}
		if err := json.Unmarshal(m.Content, &raw); err != nil {
			return ModelMessage{}, errors.New("content: expected a string or an array of content parts")
		}
		for j, p := range raw {
			switch p.Type {
			case "text":
				parts = append(parts, ContentPart{Type: "text", Text: p.Text})
			case "refusal":
				parts = append(parts, ContentPart{Type: "text", Text: p.Refusal})
			case "image_url":
				mime, data, ok := parseDataURL(p.ImageURL.URL)
				if !ok {
					return ModelMessage{}, fmt.Errorf("content[%d].image_url: only data: URLs (base64) are accepted", j)
				}
				parts = append(parts, ContentPart{Type: "image", MimeType: mime, Data: data})
			}
		}
	default:
		return ModelMessage{}, errors.New("content: expected a string or an array of content parts")
	}
	if role == "tool" {
		if m.ToolCallID == "" {
			return ModelMessage{}, errors.New("tool_call_id: Required for a tool message")
		}
		var text strings.Builder
		for _, p := range parts {
			text.WriteString(p.Text)
		}
		out.Content = []ContentPart{{Type: "tool_result", ToolCallID: m.ToolCallID, Content: text.String()}}
		return out, nil
	}
	out.Content = parts
	for _, tc := range m.ToolCalls {
		var args map[string]any
		if a := strings.TrimSpace(tc.Function.Arguments); a != "" {
			if err := json.Unmarshal([]byte(a), &args); err != nil {
				return ModelMessage{}, fmt.Errorf("tool_calls: the arguments of %q are not a JSON object", tc.Function.Name)
			}
		}
		out.Content = append(out.Content, ContentPart{Type: "tool_call", ID: tc.ID, Name: tc.Function.Name, Args: args})
	}
	if len(out.Content) == 0 {
		out.Content = []ContentPart{{Type: "text", Text: ""}}
	}
	return out, nil
}

// parseDataURL splits data:<mime>;base64,<data>.
func parseDataURL(u string) (mime, data string, ok bool) {
	rest, ok := strings.CutPrefix(u, "data:")
	if !ok {
		return "", "", false
	}
	meta, data, ok := strings.Cut(rest, ",")
	mime, enc, _ := strings.Cut(meta, ";")
	if !ok || enc != "base64" || mime == "" || data == "" {
		return "", "", false
	}
	return mime, data, true
}

func (s *server) handleOpenAIChat(w http.ResponseWriter, r *http.Request) error {
	q, msgs, err := readOpenAIRequest(r)
	if err != nil {
		return err
	}
	spec, err := s.loadAgent(r.Context(), q.Model)
	if err == nil {
		return s.gatewayRun(w, r, q, spec, msgs)
	}
	if ae := asAPIError(err); ae.Code != codeAgentNotFound {
		return err
	}
	if strings.Contains(q.Model, "/") {
		return s.gatewayDirect(w, r, q, msgs)
	}
	return errorf(codeAgentNotFound, "the model %q does not exist: it is neither an agent nor provider/model", q.Model).
		withHint("GET /openai/v1/models lists the agents")
}

// ---- the answer's shapes ----

func usageOf(u Usage) *oaUsage {
	return &oaUsage{PromptTokens: u.InputTokens, CompletionTokens: u.OutputTokens, TotalTokens: u.InputTokens + u.OutputTokens}
}

// oaiExtra is agentd's addition to an answer (clients ignore unknown fields): the run behind it.
type oaiExtra struct {
	RunID      string  `json:"runId,omitempty"`
	StopReason string  `json:"stopReason,omitempty"`
	ApprovalID string  `json:"approvalId,omitempty"`
	CostUSD    float64 `json:"costUsd"`
}

// completionWriter writes one answer, streamed or whole, under one id.
type completionWriter struct {
	id, model    string
	created      int64
	includeUsage bool
	sse          *sseWriter // nil: not streamed
}

func newCompletionWriter(id, model string, q *oaiRequest) *completionWriter {
	return &completionWriter{id: id, model: model, created: time.Now().Unix(), includeUsage: q.Stream && q.includeUsage()}
}

// chunk writes one chat.completion.chunk with one choice; usage null when include_usage is on.
func (c *completionWriter) chunk(delta map[string]any, finish string, extra *oaiExtra) error {
	var fin any
	if finish != "" {
		fin = finish
	}
	ch := map[string]any{"id": c.id, "object": "chat.completion.chunk", "created": c.created, "model": c.model,
		"choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": fin}}}
	if c.includeUsage {
		ch["usage"] = nil
	}
	if extra != nil {
		ch["agentd"] = extra
	}
	return c.data(ch)
}

func (c *completionWriter) data(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.sse.write(fmt.Appendf(nil, "data: %s\n\n", b))
}

// finish ends a stream: the chunk with finish_reason, the usage chunk when asked, then [DONE].
func (c *completionWriter) finish(reason string, u Usage, extra *oaiExtra) {
	c.chunk(map[string]any{}, reason, extra)
	if c.includeUsage {
		c.data(map[string]any{"id": c.id, "object": "chat.completion.chunk", "created": c.created, "model": c.model,
			"choices": []any{}, "usage": usageOf(u)})
	}
	c.sse.write([]byte("data: [DONE]\n\n"))
}

// fail ends a stream with an error frame, as OpenAI does mid-stream.
func (c *completionWriter) fail(err error) {
	_, e := openaiErrorOf(asAPIError(err))
	c.data(map[string]any{"error": e})
	c.sse.write([]byte("data: [DONE]\n\n"))
}

// whole writes the chat.completion object.
func (c *completionWriter) whole(w http.ResponseWriter, text string, calls []oaToolCall, reason string, u Usage, extra *oaiExtra) {
	var content any = text
	if text == "" && len(calls) > 0 {
		content = nil
	}
	msg := map[string]any{"role": "assistant", "content": content, "refusal": nil}
	if len(calls) > 0 {
		msg["tool_calls"] = calls
	}
	out := map[string]any{"id": c.id, "object": "chat.completion", "created": c.created, "model": c.model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "logprobs": nil, "finish_reason": reason}},
		"usage":   usageOf(u)}
	if extra != nil {
		out["agentd"] = extra
	}
	writeJSON(w, http.StatusOK, out)
}

// startStream opens the SSE response. The stream ends with [DONE], not agentd's `event: done`, and
// pings stop with end().
func (c *completionWriter) startStream(w http.ResponseWriter) { c.sse = newSSE(w, ssePingEvery) }

func (c *completionWriter) end() {
	if c.sse != nil {
		c.sse.closeOnce.Do(func() { close(c.sse.stop); c.sse.wg.Wait() })
	}
}

// oaiFinishReason maps a run's stop reason (or a model's finish reason) to OpenAI's.
func oaiFinishReason(stop string) string {
	switch stop {
	case "step_limit", "budget", "timeout", "loop", "length":
		return "length"
	case "tool_calls", "content_filter":
		return stop
	}
	return "stop"
}

// ---- an agent's run ----

// gatewayRun runs the agent like POST /v1/agents/{name}/run and answers as a completion.
func (s *server) gatewayRun(w http.ResponseWriter, r *http.Request, q *oaiRequest, spec *AgentSpec, msgs []ModelMessage) error {
	last := -1
	for i, m := range msgs {
		if m.Role == "user" {
			last = i
		}
	}
	if last < 0 {
		return badRequest("messages", "messages: a user message is required (the last one is the agent's input)")
	}
	in, _ := json.Marshal(msgs[last : last+1])
	body := runBody{Input: in}
	if last > 0 {
		body.History, _ = json.Marshal(msgs[:last])
	}
	p, err := prepareRun(spec, body)
	if err != nil {
		return err
	}
	p.Trigger = "openai" // the run's summary says where it came from, as MCP's say "mcp"
	cw := newCompletionWriter("", q.Model, q)
	g := &gatewayRunState{cw: cw, approval: make(chan runEvent, 1)}
	if q.Stream {
		cw.startStream(w)
		defer cw.end()
	}
	ar, err := s.runs.start(spec, p, g.sink)
	if err != nil {
		if q.Stream {
			cw.fail(s.publicError(r.Context(), err))
			return nil
		}
		return err
	}
	var sseDone <-chan struct{}
	if cw.sse != nil {
		sseDone = cw.sse.Done()
	}
	select {
	case <-ar.done:
	case ev := <-g.approval:
		return s.gatewayApproval(w, g, ar, ev)
	case <-sseDone:
		ar.cancel(errStreamStalled2)
		<-ar.done
		return nil
	case <-r.Context().Done():
		ar.cancel(s.goneCause(errClientGone))
		<-ar.done
		return nil
	}
	g.mu.Lock()
	g.detached = true
	text := g.text.String()
	g.mu.Unlock()
	res := ar.result
	if text == "" {
		text = res.Text
	}
	if !q.Stream { // a streamed answer names the run in its first and last chunks' agentd field
		w.Header().Set("X-Agent-Run-Id", res.RunID)
	}
	extra := &oaiExtra{RunID: res.RunID, StopReason: res.StopReason, CostUSD: res.Usage.CostUSD}
	if res.Error != nil && text == "" && (res.StopReason == "error" || res.StopReason == "aborted") {
		if q.Stream {
			cw.fail(res.Error)
			return nil
		}
		return res.Error
	}
	if q.Stream {
		cw.finish(oaiFinishReason(res.StopReason), res.Usage, extra)
		return nil
	}
	cw.whole(w, text, nil, oaiFinishReason(res.StopReason), res.Usage, extra)
	return nil
}

// gatewayRunState turns run events into the completion: text deltas (a blank line between steps),
// and the first approval request, which ends the answer.
type gatewayRunState struct {
	cw       *completionWriter
	approval chan runEvent

	mu       sync.Mutex
	detached bool // the answer is written: later events are not the client's
	text     strings.Builder
	newStep  bool
}

func (g *gatewayRunState) sink(ev runEvent, _ []byte) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.detached {
		return
	}
	switch ev.Type {
	case "run_start": // always the first event
		g.cw.id = "chatcmpl-" + ev.RunID
		if g.cw.sse != nil {
			g.cw.chunk(map[string]any{"role": "assistant", "content": ""}, "", &oaiExtra{RunID: ev.RunID})
		}
	case "step_start":
		g.newStep = true
	case "text_delta":
		t := ev.Text
		if g.newStep && g.text.Len() > 0 {
			t = "\n\n" + t
		}
		g.newStep = false
		g.text.WriteString(t)
		if g.cw.sse != nil {
			g.cw.chunk(map[string]any{"content": t}, "", nil)
		}
	case "approval_required":
		select {
		case g.approval <- ev:
		default:
		}
	}
}

// gatewayApproval ends the answer of a run that waits for a human: the text so far, a note naming the
// run and the approval, finish_reason "stop". The run goes on, detached from this request.
func (s *server) gatewayApproval(w http.ResponseWriter, g *gatewayRunState, ar *activeRun, ev runEvent) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.detached = true
	tool := ""
	if ev.Request != nil {
		tool = ev.Request.Tool
	}
	note := fmt.Sprintf("[agentd] Run %s is waiting for a human to approve the %s call (approval %s). "+
		`Answer it with POST /v1/approvals/%s {"approve": true|false} within 120 s; the run goes on in the background `+
		"and its result is at GET /v1/runs/%s.", ar.id, tool, ev.ApprovalID, ev.ApprovalID, ar.id)
	if g.text.Len() > 0 {
		note = "\n\n" + note
	}
	sum := ar.summary()
	u := Usage{InputTokens: sum.InputTokens, OutputTokens: sum.OutputTokens, CostUSD: sum.CostUSD}
	extra := &oaiExtra{RunID: ar.id, StopReason: "approval_required", ApprovalID: ev.ApprovalID, CostUSD: sum.CostUSD}
	if g.cw.sse != nil {
		g.cw.chunk(map[string]any{"content": note}, "", nil)
		g.cw.finish("stop", u, extra)
		return nil
	}
	w.Header().Set("X-Agent-Run-Id", ar.id)
	g.cw.whole(w, g.text.String()+note, nil, "stop", u, extra)
	return nil
}

// ---- provider/model straight to the router ----

// gatewayDirect is a chat call with no agent, like POST /v1/models/chat, under the direct-chat ceiling.
func (s *server) gatewayDirect(w http.ResponseWriter, r *http.Request, q *oaiRequest, msgs []ModelMessage) error {
	req := ChatRequest{Model: q.Model, Messages: msgs, Temperature: q.Temperature, TopP: q.TopP}
	if q.MaxCompletionTokens != nil {
		req.MaxTokens = *q.MaxCompletionTokens
	} else if q.MaxTokens != nil {
		req.MaxTokens = *q.MaxTokens
	}
	if st := strings.TrimSpace(string(q.Stop)); st != "" && st != "null" {
		var one string
		if json.Unmarshal(q.Stop, &one) == nil {
			req.Stop = []string{one}
		} else if json.Unmarshal(q.Stop, &req.Stop) != nil {
			return badRequest("stop", "stop: expected a string or an array of strings")
		}
	}
	for _, t := range q.Tools {
		if t.Type == "function" {
			req.Tools = append(req.Tools, ToolDef{Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters})
		}
	}
	if err := validateChat(&req); err != nil {
		ae := asAPIError(err)
		return badRequest("", "%s", ae.Message)
	}
	opts := chatOptions{MaxCostUSD: s.conf().MaxCostUSD}
	cw := newCompletionWriter("chatcmpl-"+randomChars(24), q.Model, q)
	if !q.Stream {
		resp, err := s.models.Chat(r.Context(), req, opts)
		if err != nil {
			return err
		}
		cw.model = firstNonEmpty(resp.Model, q.Model)
		cw.whole(w, resp.Text, wireToolCalls(resp.ToolCalls), oaiFinishReason(resp.FinishReason), resp.Usage, nil)
		return nil
	}
	plan, err := s.models.plan(r.Context(), req, opts) // refusals before the stream opens: a plain error
	if err != nil {
		return err
	}
	if err := plan.refusal(); err != nil {
		return err
	}
	cw.startStream(w)
	defer cw.end()
	ctx, cancel := cw.sse.bind(r.Context())
	defer cancel()
	cw.chunk(map[string]any{"role": "assistant", "content": ""}, "", nil)
	calls := 0
	var failed bool
	resp, _ := s.models.run(ctx, plan, req, func(ev StreamEvent) {
		switch ev.Type {
		case "text_delta":
			cw.chunk(map[string]any{"content": ev.Text}, "", nil)
		case "tool_call":
			if ev.Call != nil {
				tc := wireToolCalls([]ToolCall{*ev.Call})[0]
				i := calls
				tc.Index = &i
				calls++
				cw.chunk(map[string]any{"tool_calls": []oaToolCall{tc}}, "", nil)
			}
		case "error":
			failed = true
			cw.fail(s.publicError(r.Context(), ev.Error))
		}
	})
	if failed || resp == nil {
		if !failed {
			cw.fail(errorf(codeModelError, "the model router returned no answer"))
		}
		return nil
	}
	cw.finish(oaiFinishReason(resp.FinishReason), resp.Usage, nil)
	return nil
}

// wireToolCalls writes a model's tool calls in OpenAI's shape (arguments as a JSON string).
func wireToolCalls(calls []ToolCall) []oaToolCall {
	out := make([]oaToolCall, 0, len(calls))
	for _, c := range calls {
		tc := oaToolCall{ID: c.ID, Type: "function"}
		tc.Function.Name, tc.Function.Arguments = c.Name, argsJSON(c.Args)
		out = append(out, tc)
	}
	return out
}
