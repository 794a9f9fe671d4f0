// runs_replay.go — recorded model answers for agent tests: a recorder that wraps the model router and
// keeps every exchange of a run (scrubbed of secrets), and a replay that answers a run from such a
// recording with no provider at all.
//
// Entry points: newRecordingModels(inner, red) and newReplayModels(exchanges, red), both runModels
// (runs.go) set as runParams.Models by the agent-test runner (runs_tests.go); requestDiff.
// Rules: a replay answers the n-th model call of a run with the n-th recorded exchange, and only when the
// request still matches the recorded one (model, system prompt, messages, tool names, temperature; not
// maxTokens, which follows the budget left): otherwise the call fails E_MODEL_UNAVAILABLE with a message
// naming the first difference, so a changed persona or tool set says what changed. Requests are compared
// after the same scrubbing the recording had. Recordings never hold a provider key: requests carry none,
// and every string of an exchange goes through the run's redactor.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
)

// modelExchange is one model call of a run: what was asked and what came back.
type modelExchange struct {
	Request  ChatRequest  `json:"request"`
	Response ChatResponse `json:"response"`
}

// caseRecording is the model exchanges of one test case, in call order.
type caseRecording struct {
	Case      string          `json:"case"`
	Exchanges []modelExchange `json:"exchanges"`
}

// scrubExchange returns the exchange with every string value passed through the redactor.
func scrubExchange(ex modelExchange, red *redactor) modelExchange {
	if red == nil {
		return ex
	}
	raw, err := json.Marshal(ex)
	if err != nil {
		return ex
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return ex
	}
	raw, _ = json.Marshal(red.redactValue(v))
	var out modelExchange
	if json.Unmarshal(raw, &out) != nil {
		return ex
	}
	return out
}

// ---- recording ----

type recordingModels struct {
	inner runModels
	red   *redactor
	mu    sync.Mutex
	ex    []modelExchange
}

func newRecordingModels(inner runModels, red *redactor) *recordingModels {
	return &recordingModels{inner: inner, red: red}
}

func (m *recordingModels) EstimateCost(req ChatRequest) (string, float64, error) {
	return m.inner.EstimateCost(req)
}

func (m *recordingModels) Stream(ctx context.Context, req ChatRequest, opts chatOptions, emit func(StreamEvent)) (*ChatResponse, error) {
	resp, err := m.inner.Stream(ctx, req, opts, emit)
	if err != nil || resp == nil {
		return resp, err
	}
	kept := *resp
	kept.LatencyMS = 0 // not an answer's content: a re-recording diffs only where the answers changed
	ex := scrubExchange(modelExchange{Request: req, Response: kept}, m.red)
	m.mu.Lock()
	m.ex = append(m.ex, ex)
	m.mu.Unlock()
	return resp, nil
}

// exchanges returns what was recorded so far.
func (m *recordingModels) exchanges() []modelExchange {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.ex)
}

// ---- replay ----

type replayModels struct {
	red  *redactor
	mu   sync.Mutex
	ex   []modelExchange
	next int
}

func newReplayModels(ex []modelExchange, red *redactor) *replayModels {
	return &replayModels{ex: ex, red: red}
}

// EstimateCost prices the next call at what the recorded one cost, under the recorded model.
func (m *replayModels) EstimateCost(req ChatRequest) (string, float64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.next < len(m.ex) {
		r := m.ex[m.next].Response
		return firstNonEmpty(r.Model, req.Model), r.Usage.CostUSD, nil
	}
	return req.Model, 0, nil
}

func (m *replayModels) Stream(ctx context.Context, req ChatRequest, opts chatOptions, emit func(StreamEvent)) (*ChatResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	n := m.next
	if n >= len(m.ex) {
		m.mu.Unlock()
		return nil, errorf(codeModelUnavailable, "replay: the run made model call %d, but the recording has only %d", n+1, len(m.ex)).
			withHint("the agent now makes more model calls than when it was recorded; record again (agentd test --record DIR) if the change is intended")
	}
	m.next++
	ex := m.ex[n]
	m.mu.Unlock()
	now := scrubExchange(modelExchange{Request: req}, m.red).Request
	if d := requestDiff(ex.Request, now); d != "" {
		return nil, errorf(codeModelUnavailable, "replay: model call %d no longer matches the recording: %s", n+1, d).
			withHint("the agent's requests changed since the recording; record again (agentd test --record DIR) if the change is intended")
	}
	resp := ex.Response
	if emit != nil && resp.Text != "" {
		emit(StreamEvent{Type: "text_delta", Text: resp.Text})
	}
	if len(resp.Message.Content) == 0 {
		resp.Message = resp.assistantMessage()
	}
	return &resp, nil
}

// requestDiff names the first difference between a recorded request and a new one, or "".
func requestDiff(was, now ChatRequest) string {
	if was.Model != now.Model {
		return fmt.Sprintf("the model was %q, now %q", was.Model, now.Model)
	}
	if d := textDiff(was.System, now.System); d != "" {
		return "the system prompt differs: " + d
	}
	if tw, tn := toolNames(was.Tools), toolNames(now.Tools); !slices.Equal(tw, tn) {
		return fmt.Sprintf("the tools were [%s], now [%s]", strings.Join(tw, " "), strings.Join(tn, " "))
	}
	if !equalFloatPtr(was.Temperature, now.Temperature) {
		return "the temperature differs"
	}
	for i := 0; i < max(len(was.Messages), len(now.Messages)); i++ {
		if i >= len(was.Messages) {
			return fmt.Sprintf("message %d (%s) is new: %s", i+1, now.Messages[i].Role, fmt.Sprintf("%q", clip(messageText(now.Messages[i]), 120)))
		}
		if i >= len(now.Messages) {
			return fmt.Sprintf("message %d (%s) of the recording is missing", i+1, was.Messages[i].Role)
		}
		w, n := was.Messages[i], now.Messages[i]
		if w.Role != n.Role {
			return fmt.Sprintf("message %d was from %s, now from %s", i+1, w.Role, n.Role)
		}
		if d := textDiff(messageText(w), messageText(n)); d != "" {
			return fmt.Sprintf("message %d (%s) differs: %s", i+1, w.Role, d)
		}
	}
	return ""
}

func toolNames(defs []ToolDef) []string {
	out := make([]string, len(defs))
	for i, d := range defs {
		out[i] = d.Name
	}
	slices.Sort(out)
	return out
}

func equalFloatPtr(a, b *float64) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

// messageText is a message as comparable text: each part's type and content, tool calls with their
// arguments as JSON.
func messageText(m ModelMessage) string {
	var b strings.Builder
	for i, p := range m.Content {
		if i > 0 {
			b.WriteString("\n")
		}
		switch p.Type {
		case "text", "thinking":
			b.WriteString(p.Text)
		case "tool_call":
			args, _ := json.Marshal(p.Args)
			fmt.Fprintf(&b, "[tool_call %s %s]", p.Name, args)
		case "tool_result":
			fmt.Fprintf(&b, "[tool_result] %s", p.Content)
		default:
			fmt.Fprintf(&b, "[%s]", p.Type)
		}
	}
	return b.String()
}

// textDiff shows where two texts part: a window around the first differing byte of each, or "".
func textDiff(was, now string) string {
	if was == now {
		return ""
	}
	i := 0
	for i < len(was) && i < len(now) && was[i] == now[i] {
		i++
	}
	from := max(i-40, 0)
	for from > 0 && from < len(was) && !utf8.RuneStart(was[from]) {
		from--
	}
	window := func(s string) string {
		if from >= len(s) {
			return `""` + " (ends here)"
		}
		end := min(i+60, len(s))
		for end < len(s) && !utf8.RuneStart(s[end]) {
			end++
		}
		out := fmt.Sprintf("%q", s[from:end])
		if from > 0 {
			out = "…" + out
		}
		if end < len(s) {
			out += "…"
		}
		return out
	}
	return fmt.Sprintf("at character %d, recorded %s, now %s", i+1, window(was), window(now))
}
