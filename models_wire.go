// models_wire.go — what every wire adapter shares: sending a request (auth headers, errors with status,
// Retry-After and a scrubbed message), reading NDJSON streams (SSE: events_sse.go's sseReader), and normalising the loosely
// typed ChatRequest knobs (toolChoice, thinking, responseFormat).
//
// Rules: no SDKs, plain net/http; an upstream error body is reduced to its message and scrubbed of keys;
// a stream line longer than 16 MB or not parseable is an unparseable stream (E_MODEL_ERROR, retryable).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

const maxStreamLine = 16 << 20

// send performs one upstream request with a JSON body (nil for none). A status ≥ 400 becomes an
// upstreamError carrying the provider's message; the caller owns the body of a success.
func (m *modelService) send(ctx context.Context, c candidate, method, url string, body any, headers map[string]string) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, errorf(codeInternal, "encode request: %v", err)
		}
		rd = bytes.NewReader(b)
	}
	rctx, cancel := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(rctx, method, url, rd)
	if err != nil {
		cancel()
		return nil, errorf(codeConfig, "bad base URL for %s: %v", c.prov.DisplayName, err).withHint("check " + c.prov.BaseEnv)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("User-Agent", "agentd/"+version)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := m.client.Do(req)
	if err != nil {
		cancel()
		return nil, netError(ctx, c.prov.DisplayName, err)
	}
	resp.Body = newIdleBody(resp.Body, m.streamIdle, cancel)
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		st := resp.StatusCode
		if st == http.StatusBadRequest && bytes.Contains(b, []byte("API_KEY_INVALID")) {
			st = http.StatusUnauthorized // Google answers a bad key with 400 INVALID_ARGUMENT
		}
		return nil, &upstreamError{status: st, retryAfter: parseRetryAfter(resp.Header, time.Now()),
			msg: m.scrub(upstreamMessage(b, resp.Status))}
	}
	return resp, nil
}

// idleBody ends a response whose body goes quiet for longer than idle: a stalled upstream stream fails
// (retryable, or an error event after output) instead of hanging the run or the client. Close releases
// the request's context.
type idleBody struct {
	rc      io.ReadCloser
	idle    time.Duration
	timer   *time.Timer
	cancel  context.CancelFunc
	expired atomic.Bool
}

var errUpstreamIdle = errors.New("the provider sent nothing")

func newIdleBody(rc io.ReadCloser, idle time.Duration, cancel context.CancelFunc) *idleBody {
	b := &idleBody{rc: rc, idle: idle, cancel: cancel}
	b.timer = time.AfterFunc(idle, func() { b.expired.Store(true); cancel() })
	return b
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil && b.expired.Load() {
		return n, fmt.Errorf("%w for %s", errUpstreamIdle, b.idle)
	}
	if n > 0 {
		b.timer.Reset(b.idle)
	}
	return n, err
}

func (b *idleBody) Close() error {
	b.timer.Stop()
	err := b.rc.Close()
	b.cancel()
	return err
}

// parseRetryAfter reads Retry-After (seconds or an HTTP date) and the millisecond variant some
// providers send.
// Values are clamped to an hour before conversion: a huge (or infinite) value would overflow
// time.Duration into a negative wait and be ignored, when it means "wait as long as you may".
func parseRetryAfter(h http.Header, now time.Time) time.Duration {
	const most = float64(time.Hour)
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); (err == nil || errors.Is(err, strconv.ErrRange)) && ms > 0 {
			return time.Duration(min(ms*float64(time.Millisecond), most))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); (err == nil || errors.Is(err, strconv.ErrRange)) && s > 0 {
		return time.Duration(min(s*float64(time.Second), most))
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// upstreamMessage extracts the human message from the error bodies providers send:
// {error:{message}} (OpenAI, Anthropic, Gemini, Groq...), {error:"..."} (Ollama), {message} (Mistral),
// {detail} (FastAPI-style), else the raw text, shortened.
func upstreamMessage(b []byte, status string) string {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(b, &v) == nil {
		var inner struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Status  string `json:"status"`
		}
		var s string
		switch {
		case len(v.Error) > 0 && json.Unmarshal(v.Error, &inner) == nil && inner.Message != "":
			if t := firstNonEmpty(inner.Type, inner.Status); t != "" {
				return t + ": " + inner.Message
			}
			return inner.Message
		case len(v.Error) > 0 && json.Unmarshal(v.Error, &s) == nil && s != "":
			return s
		case v.Message != "":
			return v.Message
		case len(v.Detail) > 0:
			if json.Unmarshal(v.Detail, &s) == nil {
				return s
			}
			return shorten(string(v.Detail), 300)
		}
	}
	if t := strings.TrimSpace(string(b)); t != "" {
		return shorten(t, 300)
	}
	return status
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// streamBroken is the error of a stream that ended before its terminator or could not be parsed.
func streamBroken(provider, what string) error {
	return &upstreamError{msg: provider + ": " + what}
}

// maxAnswerBytes caps a non-streamed answer: far above any real completion (images included), low enough
// that a broken or hostile upstream cannot exhaust the server's memory.
const maxAnswerBytes = 64 << 20

// readAnswer reads a whole non-streamed answer under maxAnswerBytes.
func readAnswer(ctx context.Context, provider string, body io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(body, maxAnswerBytes+1))
	if err != nil {
		return nil, readErr(ctx, provider, err)
	}
	if len(b) > maxAnswerBytes {
		return nil, streamBroken(provider, fmt.Sprintf("answer larger than %d MB", maxAnswerBytes>>20))
	}
	return b, nil
}

// readErr maps an error while reading a streamed body.
func readErr(ctx context.Context, provider string, err error) error {
	if err == bufio.ErrTooLong {
		return streamBroken(provider, "unparseable stream: a line exceeds 16 MB")
	}
	if errors.Is(err, errUpstreamIdle) && ctx.Err() == nil {
		return streamBroken(provider, "stream stalled: "+err.Error())
	}
	return netError(ctx, provider, fmt.Errorf("stream interrupted: %w", err))
}

// finishReason maps a provider's stop reason to the contract's through the provider's table; any other
// reason is tool_calls when the answer has calls, else stop.
func finishReason(r string, calls bool, table map[string]string) string {
	if f, ok := table[r]; ok {
		return f
	}
	if calls {
		return "tool_calls"
	}
	return "stop"
}

// ---- request knobs ----

// sampling is the request's sampling knobs under a wire's names for temperature, top p, the output
// allowance and the stop sequences; a knob not set is left out.
func sampling(req ChatRequest, temperature, topP, maxTokens, stop string) map[string]any {
	m := map[string]any{}
	if req.Temperature != nil {
		m[temperature] = *req.Temperature
	}
	if req.TopP != nil {
		m[topP] = *req.TopP
	}
	if req.MaxTokens > 0 {
		m[maxTokens] = req.MaxTokens
	}
	if len(req.Stop) > 0 {
		m[stop] = req.Stop
	}
	return m
}

// toolParams is a tool's JSON schema; a tool without one takes an empty object.
func toolParams(t ToolDef) map[string]any {
	if t.Parameters == nil {
		return map[string]any{"type": "object", "properties": map[string]any{}}
	}
	return t.Parameters
}

// functionTools is the tools list of the OpenAI and Ollama wires.
func functionTools(defs []ToolDef) []map[string]any {
	tools := make([]map[string]any, len(defs))
	for i, t := range defs {
		tools[i] = map[string]any{"type": "function", "function": map[string]any{
			"name": t.Name, "description": t.Description, "parameters": toolParams(t)}}
	}
	return tools
}

// toolChoiceOf normalises toolChoice: "auto" | "none" | "required" (also "any") | a tool name given as
// {name} / {type:"tool",name} / {type:"function",function:{name}}.
func toolChoiceOf(v any) (mode, name string) {
	switch t := v.(type) {
	case nil:
		return "", ""
	case string:
		switch t {
		case "auto", "none":
			return t, ""
		case "required", "any":
			return "required", ""
		case "":
			return "", ""
		}
		return "tool", t
	case map[string]any:
		if n, ok := t["name"].(string); ok && n != "" {
			return "tool", n
		}
		if f, ok := t["function"].(map[string]any); ok {
			if n, ok := f["name"].(string); ok {
				return "tool", n
			}
		}
		if ty, ok := t["type"].(string); ok {
			return toolChoiceOf(ty)
		}
	}
	return "", ""
}

// thinkingOf normalises thinking: true/false, a budget in tokens, an effort ("low"|"medium"|"high"),
// or {enabled|type, budgetTokens|budget_tokens, effort}.
func thinkingOf(v any) (on bool, budget int, effort string) {
	switch t := v.(type) {
	case bool:
		on = t
	case float64:
		on, budget = t > 0, int(t)
	case string:
		if t != "" && t != "none" && t != "off" {
			on, effort = true, t
		}
	case map[string]any:
		on = true
		if e, ok := t["enabled"].(bool); ok {
			on = e
		}
		if ty, ok := t["type"].(string); ok && ty == "disabled" {
			on = false
		}
		for _, k := range []string{"budgetTokens", "budget_tokens", "budget"} {
			if b, ok := t[k].(float64); ok {
				budget = int(b)
			}
		}
		if e, ok := t["effort"].(string); ok {
			effort = e
		}
	}
	if on && budget == 0 {
		switch effort {
		case "low":
			budget = 1024
		case "high":
			budget = 16384
		default:
			budget = 4096
		}
	}
	if on && effort == "" {
		switch {
		case budget <= 2048:
			effort = "low"
		case budget >= 12000:
			effort = "high"
		default:
			effort = "medium"
		}
	}
	return on, budget, effort
}

// responseFormatOf normalises responseFormat: "json" | "text" | {type:"json"|"json_object"} |
// {type:"json_schema", schema, name} (or OpenAI's {type:"json_schema", json_schema:{name, schema}}).
func responseFormatOf(v any) (kind string, schema map[string]any, name string) {
	switch t := v.(type) {
	case string:
		if t == "json" || t == "json_object" {
			return "json", nil, ""
		}
	case map[string]any:
		ty, _ := t["type"].(string)
		switch ty {
		case "json", "json_object":
			if s, ok := t["schema"].(map[string]any); ok {
				n, _ := t["name"].(string)
				return "json_schema", s, firstNonEmpty(n, "response")
			}
			return "json", nil, ""
		case "json_schema":
			js := t
			if inner, ok := t["json_schema"].(map[string]any); ok {
				js = inner
			}
			s, _ := js["schema"].(map[string]any)
			if s == nil { // no schema to enforce: plain JSON mode (providers answer 400 to a null schema)
				return "json", nil, ""
			}
			n, _ := js["name"].(string)
			return "json_schema", s, firstNonEmpty(n, "response")
		}
	}
	return "", nil, ""
}

// parseArgs decodes streamed tool arguments; an empty string is {}; invalid JSON is kept under _raw so
// the run loop can hand the model an error instead of losing the call.
func parseArgs(s string) map[string]any {
	s = strings.TrimSpace(s)
	if s == "" {
		return map[string]any{}
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(s), &v); err != nil || v == nil {
		return map[string]any{"_raw": s}
	}
	return v
}

// argsOrEmpty is a call's arguments, {} when it has none (providers refuse a null).
func argsOrEmpty(a map[string]any) map[string]any {
	if a == nil {
		return map[string]any{}
	}
	return a
}

// argsJSON encodes tool arguments for providers that want a JSON string.
func argsJSON(a map[string]any) string {
	if a == nil {
		return "{}"
	}
	b, _ := json.Marshal(a)
	return string(b)
}

// toolResultText renders a tool result for providers without an error flag.
func toolResultText(p ContentPart) string {
	if p.IsError {
		return "ERROR: " + p.Content
	}
	return p.Content
}
