// runs_loop.go — the agent loop: one run from its first model call to its stop reason.
//
// Entry point: activeRun.run (started by runService.start in its own goroutine).
// Rules (docs/API.md run state table, DESIGN §6): the system prompt is the persona with {{var}} filled from
// vars (unknown placeholders left as they are), then knowledge under `## Reference` as `### <title>`
// blocks, then the `refuse` items as an out-of-scope section; examples become few-shot turns, then memory,
// then `history`, then `input`. One model call per step (fallbackModels honoured by the router). Before
// every model call the ceilings are checked in the order steps, time, cost, tokens. Tool calls of one turn
// run at most 4 at once and their results keep the model's order. A call repeated with identical
// arguments 3 times gets a nudge, 5 times ends the run with `loop`. The wall-clock timeout aborts a step
// in flight; partial results are kept. Every event is persisted and streamed as it happens. A run whose
// computer cannot be created or started ends `error` with that reason (the cancel cause computerFailure).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

const (
	maxParallelTools = 4
	nudgeAfter       = 3
	loopAfter        = 5
	stepOutputTokens = 8192 // below this many tokens left, the output allowance is capped explicitly
	previewChars     = 200
)

// activeRun is one run in flight.
type activeRun struct {
	rs        *runService
	id        string
	agent     string
	spec      *AgentSpec
	p         *runParams
	lim       Limits
	red       *redactor       // nil when redactSecrets is off
	tools     []string        // the tools this run offers, in a stable order
	warned    map[string]bool // model warnings already emitted (under mu)
	defs      []ToolDef
	startedAt time.Time

	ctx       context.Context
	cancel    context.CancelCauseFunc
	stopTimer context.CancelFunc
	done      chan struct{}
	result    *RunResult // set before done is closed

	emitMu    sync.Mutex
	seq       int
	sink      func(runEvent, []byte)
	followers map[chan storedEvent]struct{} // GET /v1/runs/{id}/events streams; closed at run_end
	ended     bool                          // run_end was emitted

	mu       sync.Mutex // the summary's moving parts
	model    string
	steps    int
	usage    Usage
	lastText string
	recorded bool // the end is in the store
	deleted  bool // DELETE arrived before the end was recorded: remove the record once written

	compMu      sync.Mutex
	computerID  string
	computerErr *apiError // the computer could not be had: the run's end reason

	extra   map[string]toolImpl // the run's MCP tools (mcp_client.go), set before the loop starts
	trusted map[string]bool     // MCP tools of a trusted server: no approval
}

func newActiveRun(rs *runService, spec *AgentSpec, p *runParams, sink func(runEvent, []byte)) *activeRun {
	now := rs.now()
	ar := &activeRun{
		rs: rs, id: newRunID(now), agent: spec.Name, spec: spec, p: p, lim: effectiveLimits(spec.Limits),
		startedAt: now, done: make(chan struct{}), sink: sink, warned: map[string]bool{},
	}
	specModel := spec.Model
	if (specModel == "" || specModel == "auto") && rs.defaultModel != nil {
		specModel = rs.defaultModel() // config.yaml's model; a run body's explicit model still wins
	}
	ar.model = firstNonEmpty(p.Model, specModel, "auto")
	if spec.Guardrails.RedactSecrets {
		ar.red = newRedactor(rs.getenv)
	}
	ar.tools = resolveTools(spec, rs.getenv)
	for _, name := range ar.tools {
		ar.defs = append(ar.defs, rs.tools[name].def)
	}
	ctx, cancel := context.WithCancelCause(rs.ctx)
	ar.ctx, ar.stopTimer = context.WithTimeoutCause(ctx, runTimeout(ar.lim), errRunTimeout)
	ar.cancel = cancel
	return ar
}

// runTimeout is the run's wall clock. The spec only bounds timeoutSec below; a huge value would overflow
// time.Duration into a negative one and time the run out at once, so it is held to 100 years.
func runTimeout(l Limits) time.Duration {
	const most = 100 * 365 * 24 * 3600
	return time.Duration(min(max(l.TimeoutSec, 1), most)) * time.Second
}

// emit persists an event and hands it to the stream, in one order for both.
func (ar *activeRun) emit(ev runEvent) { ar.emitThen(ev, nil) }

// emitThen is emit that also writes row after the event and waits for both to be committed before the
// stream gets the event.
func (ar *activeRun) emitThen(ev runEvent, row *runWrite) {
	ar.emitMu.Lock()
	defer ar.emitMu.Unlock()
	ar.seq++
	b, err := json.Marshal(ev)
	if err != nil {
		b, _ = json.Marshal(runEvent{Type: "warning", Message: "an event could not be encoded: " + err.Error()})
	}
	ar.rs.rec.write(runWrite{RunID: ar.id, Seq: ar.seq, Event: b})
	if row != nil {
		ar.rs.rec.sync(*row)
	}
	if ar.sink != nil {
		ar.sink(ev, b)
	}
	// Followers never slow the run: one that cannot take the event is dropped (its channel closed), and
	// catches up from the store.
	for ch := range ar.followers {
		select {
		case ch <- storedEvent{Seq: ar.seq, Event: b}:
		default:
			delete(ar.followers, ch)
			close(ch)
		}
	}
	if ev.Type == "run_end" {
		ar.ended = true
		for ch := range ar.followers {
			close(ch)
		}
		ar.followers = nil
	}
}

// hasEnded reports whether run_end has been emitted.
func (ar *activeRun) hasEnded() bool {
	ar.emitMu.Lock()
	defer ar.emitMu.Unlock()
	return ar.ended
}

// follow registers a follower: it gets every event after seq on the channel, which is closed at run_end
// or when the follower falls behind. stop unregisters it.
func (ar *activeRun) follow() (events <-chan storedEvent, seq int, stop func()) {
	ar.emitMu.Lock()
	defer ar.emitMu.Unlock()
	ch := make(chan storedEvent, 256)
	if ar.ended {
		close(ch)
		return ch, ar.seq, func() {}
	}
	if ar.followers == nil {
		ar.followers = map[chan storedEvent]struct{}{}
	}
	ar.followers[ch] = struct{}{}
	return ch, ar.seq, func() {
		ar.emitMu.Lock()
		defer ar.emitMu.Unlock()
		if _, ok := ar.followers[ch]; ok {
			delete(ar.followers, ch)
			close(ch)
		}
	}
}

func (ar *activeRun) warn(code, msg string) {
	ar.emit(runEvent{Type: "warning", Message: ar.red.redact(msg), Code: code})
}

func (ar *activeRun) summary() RunSummary {
	ar.mu.Lock()
	defer ar.mu.Unlock()
	return RunSummary{RunID: ar.id, Agent: ar.agent, Model: ar.model, Status: "running",
		StartedAt: timestamp(ar.startedAt), Steps: ar.steps, CostUSD: ar.usage.CostUSD,
		InputTokens: ar.usage.InputTokens, OutputTokens: ar.usage.OutputTokens, Trigger: ar.p.Trigger}
}

// summaryRow is the run's in-flight row: steps, tokens and cost so far, so listings show live progress.
func (ar *activeRun) summaryRow() runWrite {
	sum := ar.summary()
	b, _ := json.Marshal(sum)
	return runWrite{RunID: ar.id, Agent: ar.agent, Status: sum.Status, Summary: b, Started: sum.StartedAt}
}

// safeLoop turns a bug in the loop into a recorded `error` run instead of a crashed server.
func (ar *activeRun) safeLoop(st *loopState) (stop string, e *apiError) {
	defer func() {
		if v := recover(); v != nil {
			ar.rs.log.Error("run loop panicked", "run", ar.id, "panic", fmt.Sprint(v))
			stop, e = "error", errorf(codeInternal, "the run failed unexpectedly: %v", v).withHint("this is a bug in agentd")
		}
	}()
	return ar.loop(st)
}

// run drives the loop and records the end. It always closes done.
func (ar *activeRun) run() {
	defer close(ar.done)
	ar.emit(runEvent{Type: "run_start", RunID: ar.id, Agent: ar.agent, Model: ar.model})
	for _, w := range ar.p.Warnings {
		ar.warn("clamped", w)
	}
	ar.addMCPTools() // `mcp:` entries of tools: their servers start on first use

	st := &loopState{}
	stop, apiErr := ar.safeLoop(st)
	ar.cancel(nil) // run end: pending approvals are denied, in-flight work released
	ar.stopTimer()

	ar.mu.Lock()
	res := &RunResult{RunID: ar.id, Agent: ar.agent, Model: ar.model, Text: ar.lastText, Messages: st.own(),
		Steps: ar.steps, Usage: ar.usage, DurationMS: ar.rs.now().Sub(ar.startedAt).Milliseconds(),
		StopReason: stop, Error: apiErr}
	ar.mu.Unlock()
	for i, m := range res.Messages {
		res.Messages[i] = ar.shownMessage(m) // tool arguments as events show them
	}
	if res.Text == "" && st.partial != "" {
		res.Text = st.partial
	}
	if res.Error != nil {
		res.Error = ar.redactErr(res.Error)
	}
	if err := ar.rs.memory.append(context.Background(), ar.agent, ar.spec.Memory, st.remember()); err != nil {
		ar.warn("memory", "memory could not be saved: "+err.Error())
	}
	ar.result = res

	sum := ar.summary()
	sum.Status, sum.Error, sum.FinishedAt = stop, res.Error, timestamp(ar.rs.now())
	sum.DurationMS, sum.Preview = &res.DurationMS, preview(res.Text)
	sb, _ := json.Marshal(sum)
	rb, _ := json.Marshal(res)
	if stop == "error" && res.Error != nil {
		// DESIGN §6's error event: a run that failed (not one stopped by a ceiling or a cancel, whose
		// error object rides on run_end alone) says so as an event of its own before run_end.
		ar.emit(runEvent{Type: "error", Error: res.Error})
	}
	// The end is committed before run_end reaches the stream: a client that reads run_end and then
	// GETs the run finds it finished, with its run_end stored.
	ar.emitThen(runEvent{Type: "run_end", Result: res},
		&runWrite{RunID: ar.id, Agent: ar.agent, Status: stop, Summary: sb, Result: rb, Started: sum.StartedAt})
	ar.mu.Lock()
	ar.recorded = true
	deleted := ar.deleted
	ar.mu.Unlock()
	if deleted {
		if err := ar.rs.store.DeleteRun(context.Background(), ar.id); err != nil && !errors.Is(err, errNotFound) {
			ar.rs.log.Warn("cannot delete a run deleted while in flight", "run", ar.id, "err", err)
		}
	}
	ar.rs.finished(ar)
	ar.rs.metrics.runFinished(stop, time.Duration(res.DurationMS)*time.Millisecond)
	attrs := []any{"run", ar.id, "agent", ar.agent, "stop", stop, "steps", sum.Steps, "costUsd", sum.CostUSD, "ms", res.DurationMS}
	if stop == "error" && res.Error != nil {
		ar.rs.log.Error("run finished", append(attrs, "code", res.Error.Code, "err", res.Error.Message)...)
	} else {
		ar.rs.log.Info("run finished", attrs...)
	}
	if ar.rs.hub != nil {
		ar.rs.hub.publish("runs", "run_finished", sum)
	}
}

func preview(s string) string {
	s = strings.TrimSpace(s)
	if r := []rune(s); len(r) > previewChars {
		return string(r[:previewChars]) + "…"
	}
	return s
}

// loopState is the conversation of one run.
type loopState struct {
	prefix   []ModelMessage // examples (few-shot), never windowed or remembered
	convo    []ModelMessage // memory + history + input + this run's messages
	ownFrom  int            // convo index where this run's input starts
	memFrom  int            // convo index where the body's history starts (memory is before it)
	partial  string         // text streamed by a call that was cut short
	repeats  map[string]int
	summary  string // memory window summary, for summaryAt
	sumAt    int
	sumTried bool
}

// own is the run's messages: its input and what it produced.
func (st *loopState) own() []ModelMessage { return append([]ModelMessage{}, st.convo[st.ownFrom:]...) }

// remember is what memory keeps of this run: the body's history is the caller's, not the agent's
// memory, so only the input and what the run produced are stored.
func (st *loopState) remember() []ModelMessage { return st.convo[st.ownFrom:] }

var placeholder = regexp.MustCompile(`\{\{\s*([A-Za-z0-9_.\-]+)\s*\}\}`)

// fillVars replaces {{name}} from vars; unknown placeholders are left as they are.
func fillVars(s string, vars map[string]string) string {
	if len(vars) == 0 || !strings.Contains(s, "{{") {
		return s
	}
	return placeholder.ReplaceAllStringFunc(s, func(m string) string {
		name := placeholder.FindStringSubmatch(m)[1]
		if v, ok := vars[name]; ok {
			return v
		}
		return m
	})
}

// systemPrompt builds persona, reference knowledge and the out-of-scope list.
func systemPrompt(spec *AgentSpec, vars map[string]string) string {
	var b strings.Builder
	b.WriteString(fillVars(spec.Persona, vars))
	if len(spec.Knowledge) > 0 {
		if b.Len() > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString("## Reference")
		for _, k := range spec.Knowledge {
			fmt.Fprintf(&b, "\n\n### %s\n%s", k.Title, k.Content)
		}
	}
	if len(spec.Guardrails.Refuse) > 0 {
		if b.Len() > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString("## Out of scope\nPolitely refuse requests about the following, and say they are out of scope:")
		for _, r := range spec.Guardrails.Refuse {
			fmt.Fprintf(&b, "\n- %s", r)
		}
	}
	return b.String()
}

func (ar *activeRun) setup(st *loopState) {
	for _, ex := range ar.spec.Examples {
		st.prefix = append(st.prefix, textMessage("user", ex.User), textMessage("assistant", ex.Assistant))
	}
	mem, err := ar.rs.memory.load(ar.ctx, ar.agent, ar.spec.Memory)
	if err != nil {
		ar.warn("memory", "memory could not be loaded: "+err.Error())
	}
	st.convo = append(st.convo, mem...)
	st.memFrom = len(st.convo)
	st.convo = append(st.convo, ar.p.History...)
	st.ownFrom = len(st.convo)
	st.convo = append(st.convo, ar.p.Input...)
	st.repeats = map[string]int{}
}

// computerFailure is the run's cancel cause when its computer cannot be created or started.
type computerFailure struct{ err *apiError }

func (c computerFailure) Error() string { return c.err.Error() }

// stopCause maps the run context's cause to a stop reason and its error.
func (ar *activeRun) stopCause() (string, *apiError) {
	cause := context.Cause(ar.ctx)
	if errors.Is(cause, errRunTimeout) || errors.Is(cause, context.DeadlineExceeded) {
		return "timeout", errorf(codeAborted, "the run reached its timeoutSec of %d s", ar.lim.TimeoutSec).
			withHint("raise limits.timeoutSec in the agent spec")
	}
	var cf computerFailure
	if errors.As(cause, &cf) {
		return "error", cf.err
	}
	msg := "the run was aborted"
	if cause != nil {
		msg = cause.Error()
	}
	return "aborted", errorf(codeAborted, "%s", msg).withHint("partial results are kept in the run record")
}

func (ar *activeRun) loop(st *loopState) (string, *apiError) {
	ar.setup(st)
	system := systemPrompt(ar.spec, ar.p.Vars)
	for step := 0; ; step++ {
		if ar.ctx.Err() != nil {
			return ar.stopCause()
		}
		// Ceilings, in the contract's order: steps, time, cost, tokens.
		if step >= ar.p.MaxSteps {
			return "step_limit", nil
		}
		if ar.rs.now().Sub(ar.startedAt) >= runTimeout(ar.lim) {
			ar.cancel(errRunTimeout)
			return ar.stopCause()
		}
		req := ChatRequest{Model: ar.model, System: system, Tools: ar.defs, Temperature: ar.spec.Temperature}
		// The window may summarise with a model call of its own: its cost and tokens count before the
		// ceilings below are checked, so usage is read after it.
		req.Messages = append(append([]ModelMessage{}, st.prefix...), ar.window(st)...)
		if ar.ctx.Err() != nil {
			return ar.stopCause()
		}
		ar.mu.Lock()
		used, spent := ar.usage.InputTokens+ar.usage.OutputTokens, ar.usage.CostUSD
		ar.mu.Unlock()
		if left := ar.lim.MaxTokens - used; left < stepOutputTokens {
			// Near the token ceiling, ask for no more than is left (and no more than any model gives);
			// otherwise the router picks the model's own output allowance.
			req.MaxTokens = min(max(left, 1), 4096)
		}
		est, err := ar.estimate(req, ar.p.MaxCostUSD-spent)
		if err != nil {
			if ae := asAPIError(err); ae.Code == codeBudgetExceeded {
				return "budget", ae
			}
			return "error", ar.redactErr(err)
		}
		if spent+est > ar.p.MaxCostUSD+1e-12 {
			return "budget", errorf(codeBudgetExceeded, "the next model call (estimated $%.6f) would take the run's cost from $%.6f past its ceiling of $%.6f", est, spent, ar.p.MaxCostUSD).
				withHint("raise limits.maxCostUsd in the agent spec, or use a cheaper model").
				withDetail("estimateUsd", est).withDetail("spentUsd", spent).withDetail("ceilingUsd", ar.p.MaxCostUSD)
		}
		if used >= ar.lim.MaxTokens {
			return "budget", errorf(codeBudgetExceeded, "the run used %d tokens, its ceiling is %d", used, ar.lim.MaxTokens).
				withHint("raise limits.maxTokens in the agent spec").
				withDetail("tokens", used).withDetail("maxTokens", ar.lim.MaxTokens)
		}

		ar.emit(runEvent{Type: "step_start", Step: step + 1})
		resp, err := ar.call(st, req, ar.p.MaxCostUSD-spent)
		if err != nil {
			if ar.ctx.Err() != nil {
				return ar.stopCause()
			}
			ae := asAPIError(err)
			if ae.Code == codeBudgetExceeded {
				return "budget", ae
			}
			return "error", ar.redactErr(ae)
		}
		st.partial = ""
		ar.mu.Lock()
		ar.steps = step + 1
		if resp.Model != "" {
			ar.model = resp.Model
		}
		addUsage(&ar.usage, resp.Usage)
		cum := ar.usage
		if resp.Text != "" || len(resp.ToolCalls) == 0 {
			ar.lastText = resp.Text
		}
		ar.mu.Unlock()
		u := resp.Usage
		ar.emit(runEvent{Type: "usage", Usage: &u, Cumulative: &cum})
		ar.rs.rec.write(ar.summaryRow())

		calls := resp.ToolCalls
		for i := range calls {
			calls[i].Type = "tool_call"
			if calls[i].ID == "" {
				calls[i].ID = fmt.Sprintf("call_%d_%d", step+1, i+1)
			}
			calls[i].Args = argsOrEmpty(calls[i].Args)
		}
		msg := assistantTurn(resp, calls)
		if len(msg.Content) == 0 {
			msg.Content = []ContentPart{{Type: "text", Text: ""}}
		}
		st.convo = append(st.convo, msg)
		ar.emit(runEvent{Type: "message", Message: ar.shownMessage(msg)})
		if len(calls) == 0 {
			switch resp.FinishReason {
			case "length":
				ar.warn("length", "the model stopped at its output limit; the answer may be cut short")
			case "content_filter":
				ar.warn("content_filter", "the provider's content filter stopped the answer")
			}
			return "complete", nil
		}

		// Repetition guard: counted before running, so the fifth identical call never runs.
		nudges := make([]bool, len(calls))
		looped := false
		for i, c := range calls {
			k := callKey(c)
			st.repeats[k]++
			switch n := st.repeats[k]; {
			case n >= loopAfter:
				looped = true
			case n >= nudgeAfter:
				nudges[i] = true
			}
		}
		if looped {
			for _, c := range calls {
				st.convo = append(st.convo, toolResultMessage(c.ID, "not run: the same call was repeated too many times", true))
			}
			ar.warn("loop", "a tool call was repeated with identical arguments 5 times; the run stops")
			return "loop", nil
		}

		if ar.ctx.Err() != nil {
			// Cancelled (or timed out) while the model answered: no tool runs after that — some (a file
			// write) would not notice the cancelled context. Each call still gets its result, so the
			// kept history stays well formed.
			for _, c := range calls {
				st.convo = append(st.convo, toolResultMessage(c.ID, "not run: the run was stopped", true))
			}
			return ar.stopCause()
		}
		results := ar.runTools(calls)
		for i, r := range results {
			if nudges[i] {
				r.output += fmt.Sprintf("\n\n[note: you have called %s with these exact arguments %d times; the result will not change — try a different approach or finish]", calls[i].Name, st.repeats[callKey(calls[i])])
			}
			m := toolResultMessage(calls[i].ID, r.output, r.isError)
			st.convo = append(st.convo, m)
		}
		if ar.ctx.Err() != nil {
			return ar.stopCause()
		}
	}
}

// assistantTurn is the assistant message to keep in the history: the router's own (it carries the
// signed thinking and the provider signatures some providers require back), with the tool calls as the
// loop ran them (ids filled in where the provider gave none).
func assistantTurn(resp *ChatResponse, calls []ToolCall) ModelMessage {
	msg := ModelMessage{Role: "assistant"}
	src := resp.Message.Content
	if len(src) == 0 {
		if resp.Thinking != "" {
			src = append(src, ContentPart{Type: "thinking", Text: resp.Thinking})
		}
		if resp.Text != "" {
			src = append(src, ContentPart{Type: "text", Text: resp.Text})
		}
	}
	for _, p := range src {
		if p.Type != "tool_call" {
			msg.Content = append(msg.Content, p)
		}
	}
	for _, c := range calls {
		msg.Content = append(msg.Content, ContentPart{Type: "tool_call", ID: c.ID, Name: c.Name, Args: c.Args, Signature: c.Signature})
	}
	return msg
}

// models answers the run's model calls: the router, or an agent test's recorder or replay (p.Models).
func (ar *activeRun) models() runModels {
	if ar.p.Models != nil {
		return ar.p.Models
	}
	return ar.rs.models
}

// estimate prices the next call the way the router will make it: the first of the model and the spec's
// fallbackModels that resolves and fits in what is left of the budget. When none fits, the cheapest
// estimate is returned (the caller stops with `budget`); when none resolves, the model's own error.
func (ar *activeRun) estimate(req ChatRequest, remaining float64) (float64, error) {
	var firstErr error
	cheapest, priced := 0.0, false
	for _, name := range append([]string{req.Model}, ar.spec.FallbackModels...) {
		r := req
		r.Model = name
		_, est, err := ar.models().EstimateCost(r)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if est <= remaining+1e-12 {
			return est, nil
		}
		if !priced || est < cheapest {
			cheapest, priced = est, true
		}
	}
	if priced {
		return cheapest, nil
	}
	return 0, firstErr
}

func (ar *activeRun) redactErr(err error) *apiError {
	ae := asAPIError(err)
	return &apiError{Code: ae.Code, Message: ar.red.redact(ae.Message), Hint: ae.Hint, Details: ae.Details}
}

// call makes one model call, streaming text and thinking as run events.
func (ar *activeRun) call(st *loopState, req ChatRequest, remaining float64) (*ChatResponse, error) {
	var partial strings.Builder
	emit := func(ev StreamEvent) {
		switch ev.Type {
		case "text_delta":
			partial.WriteString(ev.Text)
			ar.emit(runEvent{Type: "text_delta", Text: ev.Text})
		case "thinking_delta":
			ar.emit(runEvent{Type: "thinking_delta", Text: ev.Text})
		case "warning":
			// A model call's warning (unpriced, estimated usage) repeats on every step: once per run.
			ar.mu.Lock()
			seen := ar.warned[ev.Code+"\x00"+ev.Message]
			ar.warned[ev.Code+"\x00"+ev.Message] = true
			ar.mu.Unlock()
			if !seen {
				ar.emit(runEvent{Type: "warning", Message: ar.red.redact(ev.Message), Code: ev.Code})
			}
		}
	}
	resp, err := ar.models().Stream(ar.ctx, req, chatOptions{Fallbacks: ar.spec.FallbackModels, MaxCostUSD: max(remaining, 0)}, emit)
	if err != nil {
		st.partial = partial.String()
		return nil, err
	}
	if resp == nil {
		return nil, errorf(codeModelError, "the model router returned no answer")
	}
	return resp, nil
}

// window trims the conversation when memory is on (DESIGN §6), summarising the middle when asked to.
func (ar *activeRun) window(st *loopState) []ModelMessage {
	mem := ar.spec.Memory
	if !mem.Enabled {
		return st.convo
	}
	turns := mem.WindowTurns
	if turns <= 0 {
		turns = 20
	}
	firstEnd, keepFrom, ok := windowCut(st.convo, turns)
	if !ok {
		return st.convo
	}
	if mem.Summarise && (st.sumAt != keepFrom || !st.sumTried) {
		st.sumTried, st.sumAt, st.summary = true, keepFrom, ar.summarise(st.convo[firstEnd:keepFrom])
	}
	summary := ""
	if mem.Summarise && st.sumAt == keepFrom {
		summary = st.summary
	}
	return windowMessages(st.convo, turns, summary)
}

// summarise asks the model for a short summary of the dropped middle; "" (a marker) on any failure.
func (ar *activeRun) summarise(middle []ModelMessage) string {
	req := ChatRequest{Model: ar.model, MaxTokens: 1024,
		System:   "Summarise the conversation below in a few short paragraphs. Keep facts, decisions, names, file paths and open tasks. Write only the summary.",
		Messages: []ModelMessage{textMessage("user", transcriptText(middle, 200<<10))}}
	ar.mu.Lock()
	spent := ar.usage.CostUSD
	ar.mu.Unlock()
	if _, est, err := ar.models().EstimateCost(req); err != nil || spent+est > ar.p.MaxCostUSD {
		return ""
	}
	resp, err := ar.models().Stream(ar.ctx, req, chatOptions{Fallbacks: ar.spec.FallbackModels, MaxCostUSD: max(ar.p.MaxCostUSD-spent, 0)}, nil)
	if err != nil || resp == nil {
		return ""
	}
	ar.mu.Lock()
	addUsage(&ar.usage, resp.Usage)
	ar.mu.Unlock()
	return strings.TrimSpace(resp.Text)
}

func addUsage(to *Usage, u Usage) {
	to.InputTokens += u.InputTokens
	to.OutputTokens += u.OutputTokens
	to.CacheReadTokens += u.CacheReadTokens
	to.CacheWriteTokens += u.CacheWriteTokens
	to.CostUSD += u.CostUSD
}

// callKey identifies a call by name and canonical arguments (encoding/json sorts map keys).
func callKey(c ToolCall) string {
	b, _ := json.Marshal(c.Args)
	return c.Name + "\x00" + string(b)
}

func toolResultMessage(callID, content string, isError bool) ModelMessage {
	return ModelMessage{Role: "tool", Content: []ContentPart{{Type: "tool_result", ToolCallID: callID, Content: content, IsError: isError}}}
}

// shownMessage is a message as events show it: tool arguments redacted, the model's text untouched.
func (ar *activeRun) shownMessage(m ModelMessage) ModelMessage {
	if ar.red == nil {
		return m
	}
	out := ModelMessage{Role: m.Role, Content: make([]ContentPart, len(m.Content))}
	for i, p := range m.Content {
		if p.Type == "tool_call" {
			p.Args = ar.red.redactArgs(p.Args)
		}
		out.Content[i] = p
	}
	return out
}

type toolOutcome struct {
	output  string
	isError bool
}

// runTools runs one turn's calls, at most maxParallelTools at once; results keep the model's order.
func (ar *activeRun) runTools(calls []ToolCall) []toolOutcome {
	out := make([]toolOutcome, len(calls))
	if len(calls) == 1 {
		out[0] = ar.runTool(calls[0])
		return out
	}
	sem := make(chan struct{}, maxParallelTools)
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out[i] = ar.runTool(c)
		}()
	}
	wg.Wait()
	return out
}

// runTool runs one call through the guardrails: unknown tool, readonly, approval, then the tool itself.
// The output is bounded by maxOutputBytes and then redacted, both for the model and for the events.
func (ar *activeRun) runTool(c ToolCall) (res toolOutcome) {
	shown := ToolCall{Type: "tool_call", ID: c.ID, Name: c.Name, Args: ar.red.redactArgs(c.Args)}
	ar.emit(runEvent{Type: "tool_start", Call: &shown})
	t0 := time.Now()
	defer func() {
		if v := recover(); v != nil {
			res = toolOutcome{output: fmt.Sprintf("E_INTERNAL: tool %s failed unexpectedly: %v", c.Name, v), isError: true}
		}
		res.output = ar.red.redact(boundOutput(res.output, ar.lim.MaxOutputBytes))
		d := time.Since(t0).Milliseconds()
		ar.emit(runEvent{Type: "tool_end", Call: &shown, Output: &res.output, IsError: &res.isError, DurationMS: &d})
	}()

	impl, ok := ar.rs.tools[c.Name]
	if !ok {
		impl, ok = ar.extra[c.Name]
	}
	if !ok || !slices.Contains(ar.tools, c.Name) {
		return toolOutcome{output: fmt.Sprintf("E_TOOL_ERROR: there is no tool named %q; available tools: %s", c.Name, strings.Join(ar.tools, ", ")), isError: true}
	}
	seen := false // a human approved this very call (not remember): the policy's opaque rules are waived
	if isDangerous(c.Name) && !ar.trusted[c.Name] {
		switch ar.p.ApprovalMode {
		case "readonly":
			reason := "readonly mode refuses " + c.Name
			ar.emit(runEvent{Type: "tool_denied", Call: &shown, Reason: reason})
			return toolOutcome{output: "E_EXEC_DENIED: refused: " + reason + "; this run may only read", isError: true}
		case "ask":
			ok, reason := ar.rs.approvals.request(ar.ctx, ar.id, ar.agent, c, shown.Args, func(p PendingApproval) {
				req := p.Request
				ar.emit(runEvent{Type: "approval_required", ApprovalID: p.ApprovalID, Request: &req})
			})
			if !ok {
				ar.emit(runEvent{Type: "tool_denied", Call: &shown, Reason: reason})
				return toolOutcome{output: "E_EXEC_DENIED: refused: " + reason, isError: true}
			}
			seen = reason == "approved"
		}
	}
	if ar.ctx.Err() != nil {
		// The run stopped while this call waited for a slot (or for its approval): it must not start.
		return toolOutcome{output: "E_ABORTED: not run: the run was stopped", isError: true}
	}
	// Output may arrive on stdout and stderr concurrently: one line-buffered redactor per stream.
	var deltaMu sync.Mutex
	deltas := map[string]*streamRedactor{}
	delta := func(stream, text string) {
		deltaMu.Lock()
		defer deltaMu.Unlock()
		sr, ok := deltas[stream]
		if !ok {
			sr = newStreamRedactor(ar.red)
			deltas[stream] = sr
		}
		if text = sr.write(text); text != "" {
			ar.emit(runEvent{Type: "tool_delta", CallID: c.ID, Stream: stream, Text: text})
		}
	}
	out, err := impl.run(ar.ctx, &toolEnv{ar: ar, call: c, delta: delta, seen: seen}, c.Args)
	deltaMu.Lock()
	for _, stream := range []string{"stdout", "stderr"} {
		if sr, ok := deltas[stream]; ok {
			if rest := sr.flush(); rest != "" {
				ar.emit(runEvent{Type: "tool_delta", CallID: c.ID, Stream: stream, Text: rest})
			}
		}
	}
	deltas = map[string]*streamRedactor{} // late output after the tool returned starts fresh
	deltaMu.Unlock()
	if err != nil {
		ae := asAPIError(err)
		if platformFailure(ae.Code) {
			ar.rs.log.Warn("a tool failed because of the platform, not the command", "run", ar.id, "agent", ar.agent,
				"tool", c.Name, "code", ae.Code, "err", ar.red.redact(ae.Message))
		}
		if ae.Code == codeInternal {
			ae = errorf(codeToolError, "%s", ae.Message)
		}
		msg := ae.Code + ": " + ae.Message
		if ae.Hint != "" {
			msg += " (hint: " + ae.Hint + ")"
		}
		if out != "" {
			msg = out + "\n" + msg
		}
		return toolOutcome{output: msg, isError: true}
	}
	return toolOutcome{output: out}
}

// platformFailure reports whether a tool error code is the platform's (the computer, its engine, agentd)
// rather than the command's or the model's: those are logged with the run, the tool and the code.
func platformFailure(code string) bool {
	switch code {
	case codeProviderUnavailable, codeComputerFailed, codeComputerNotFound, codeExecFailed, codeNotImplemented,
		codeQuota, codeInternal:
		return true
	}
	return false
}

// ---- the agent's computer ----

// computer returns the run's computer id, getting it on first use: the body's computerId, or the
// computer named after the agent (created if needed, shared by the agent's concurrent runs).
func (ar *activeRun) computer(ctx context.Context) (string, error) {
	ar.compMu.Lock()
	defer ar.compMu.Unlock()
	if ar.computerID != "" {
		return ar.computerID, nil
	}
	if ar.computerErr != nil {
		return "", ar.computerErr
	}
	if !ar.spec.Computer.IsEnabled() {
		return "", errorf(codeToolError, "this agent has no computer (computer.enabled is false)")
	}
	rs := ar.rs
	var info *ComputerInfo
	var err error
	if ar.p.ComputerID != "" {
		info, err = rs.computers.Get(ctx, ar.p.ComputerID)
	} else {
		info, err = rs.computers.EnsureForAgent(ctx, ar.agent, ar.spec.Computer, ar.spec.Guardrails.policy()) // it serialises per agent
	}
	if err == nil && info == nil {
		err = errorf(codeComputerFailed, "the computer service returned no computer")
	}
	if err != nil {
		if ar.ctx.Err() != nil {
			return "", err // the run stopped while its computer was coming up: that stop is the reason
		}
		// Without its computer the run cannot do its work: it ends `error` with this reason (stopCause)
		// rather than letting the model answer over tools that all fail.
		ae := asAPIError(err)
		ar.computerErr = errorf(ae.Code, "the agent's computer could not be created or started: %s", ae.Message).withHint(ae.Hint)
		ar.cancel(computerFailure{ar.computerErr})
		return "", err
	}
	ar.computerID = info.ID
	ar.emit(runEvent{Type: "computer_ready", ComputerID: info.ID, Provider: info.Provider})
	return info.ID, nil
}
