// runs.go — the run service: run records, the recorder that persists runs and their events as they
// happen, cancel, and the run endpoints (run, run/stream, list, get, delete, cancel).
//
// Entry points: newRunService (server start: marks runs left in flight by a previous process `aborted`),
// runService.prepare + runService.start (any caller that starts a run: the endpoints, triggers),
// activeRun.wait, runService.cancel, runService.Close (aborts runs in flight and waits for them).
// Rules (docs/API.md Running an agent / Runs, DESIGN §6): the control plane assigns the run id and uses the same
// id in run_start, run_end, the store and cancel; the body may lower maxSteps and maxCostUsd, never raise
// them; maxTokens and timeoutSec come only from the spec; a streaming run is aborted by a client
// disconnect or a consumer stalled for 60 s; cancel is idempotent; the computer is never touched by an
// abort. The loop itself lives in runs_loop.go, the tools in runs_tools.go.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// runModels is what the loop needs from the model router (modelService satisfies it).
type runModels interface {
	Stream(ctx context.Context, req ChatRequest, opts chatOptions, emit func(StreamEvent)) (*ChatResponse, error)
	EstimateCost(req ChatRequest) (model string, usd float64, err error)
}

// runComputers is what the tools need from the computer service (computerService satisfies it).
type runComputers interface {
	EnsureForAgent(ctx context.Context, agent string, spec ComputerSpec, pol commandPolicy) (*ComputerInfo, error)
	Get(ctx context.Context, idOrName string) (*ComputerInfo, error)
	Exec(ctx context.Context, id string, req ExecRequest, onOutput func(stream, data string)) (*ExecResult, error)
	ReadFile(ctx context.Context, id, path string) ([]byte, error)
	WriteFile(ctx context.Context, id, path string, data []byte) error
	ListDir(ctx context.Context, id, path string) ([]DirEntry, error)
	DeletePath(ctx context.Context, id, path string, recursive bool) error
	Resolve(ctx context.Context, id, path string, keepLast bool) (string, error)
	ExposePort(ctx context.Context, id string, port int) (*PortBinding, error)
}

// RunSummary is a run's record in listings and on the events socket.
type RunSummary struct {
	RunID        string    `json:"runId"`
	Agent        string    `json:"agent"`
	Model        string    `json:"model"`
	Status       string    `json:"status"` // running, complete, step_limit, budget, timeout, aborted, loop, error
	StartedAt    string    `json:"startedAt"`
	FinishedAt   string    `json:"finishedAt,omitempty"`
	DurationMS   *int64    `json:"durationMs,omitempty"`
	Steps        int       `json:"steps"`
	CostUSD      float64   `json:"costUsd"`
	InputTokens  int       `json:"inputTokens"`
	OutputTokens int       `json:"outputTokens"`
	Preview      string    `json:"preview,omitempty"`
	Error        *apiError `json:"error,omitempty"`
	Trigger      string    `json:"trigger,omitempty"`
}

// RunResult is a finished run.
type RunResult struct {
	RunID      string         `json:"runId"`
	Agent      string         `json:"agent"`
	Model      string         `json:"model"`
	Text       string         `json:"text"`
	Messages   []ModelMessage `json:"messages"`
	Steps      int            `json:"steps"`
	Usage      Usage          `json:"usage"`
	DurationMS int64          `json:"durationMs"`
	StopReason string         `json:"stopReason"`
	Error      *apiError      `json:"error,omitempty"`
}

// runEvent is one frame of a run stream (docs/API.md run events, DESIGN §6 extras). Only the fields of its
// type are set; tool_end's output/isError/durationMs are pointers so they are present even when zero.
type runEvent struct {
	Type       string           `json:"type"`
	RunID      string           `json:"runId,omitempty"`
	Agent      string           `json:"agent,omitempty"`
	Model      string           `json:"model,omitempty"`
	Step       int              `json:"step,omitempty"`
	Call       *ToolCall        `json:"call,omitempty"`
	CallID     string           `json:"callId,omitempty"`
	Stream     string           `json:"stream,omitempty"`
	Text       string           `json:"text,omitempty"`
	Output     *string          `json:"output,omitempty"`
	IsError    *bool            `json:"isError,omitempty"`
	DurationMS *int64           `json:"durationMs,omitempty"`
	Usage      *Usage           `json:"usage,omitempty"`
	Cumulative *Usage           `json:"cumulative,omitempty"`
	ApprovalID string           `json:"approvalId,omitempty"`
	Request    *approvalRequest `json:"request,omitempty"`
	Result     *RunResult       `json:"result,omitempty"`
	Message    any              `json:"message,omitempty"` // message: ModelMessage; warning: string
	Reason     string           `json:"reason,omitempty"`
	ComputerID string           `json:"computerId,omitempty"`
	Provider   string           `json:"provider,omitempty"`
	Code       string           `json:"code,omitempty"`
	Error      *apiError        `json:"error,omitempty"`
}

// runParams is a validated run request.
type runParams struct {
	Input        []ModelMessage
	History      []ModelMessage
	Model        string
	Vars         map[string]string
	MaxSteps     int
	MaxCostUSD   float64
	ApprovalMode string
	ComputerID   string
	Trigger      string
	Warnings     []string // told to the client in the stream (clamps, ignored loosening)
	// Models answers this run's model calls instead of the router: an agent test's recorder or replay
	// (runs_replay.go). Never set from a request body.
	Models runModels
}

// runBody is the strict run body.
type runBody struct {
	Input        json.RawMessage `json:"input"`
	History      json.RawMessage `json:"history"`
	Model        string          `json:"model"`
	Vars         map[string]any  `json:"vars"`
	MaxSteps     *int            `json:"maxSteps"`
	MaxCostUSD   *float64        `json:"maxCostUsd"`
	ApprovalMode string          `json:"approvalMode"`
	ComputerID   string          `json:"computerId"`
}

type runService struct {
	runDeps
	approvals *approvalBook
	memory    *memoryService
	rec       *runRecorder
	tools     map[string]toolImpl

	streamStall time.Duration // 0: the contract's 60 s; tests shorten it
	cancelWait  time.Duration // 0: 10 s, how long cancel and DELETE wait for a run to record its end

	ctx    context.Context // cancelled by Close: every run derives from it
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	closed bool
	active map[string]*activeRun
}

// runDeps are the parts a run service is built from; tests pass fakes for models and computers.
type runDeps struct {
	store     *store
	hub       *hub
	models    runModels
	computers runComputers
	mcp       *mcpClients // config.yaml's mcpServers (mcp_client.go); nil: none
	now       func() time.Time
	log       *slog.Logger
	getenv    func(string) string
	home      string
	metrics   *metrics // runs, their durations and trigger firings (metrics.go); nil counts nothing
	// defaultModel is config.yaml's model: what a spec's `auto` runs on (nil or "": the router's auto).
	defaultModel func() string
}

func newRunService(d runDeps) *runService {
	if d.now == nil {
		d.now = time.Now
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	if d.getenv == nil {
		d.getenv = func(string) string { return "" }
	}
	rs := &runService{
		runDeps: d, approvals: newApprovalBook(d.now, d.hub), memory: newMemoryService(d.store, d.home),
		active: map[string]*activeRun{},
	}
	rs.tools = toolCatalog()
	rs.ctx, rs.cancel = context.WithCancel(context.Background())
	rs.markInterrupted()
	rs.rec = newRunRecorder(d.store, d.log)
	return rs
}

// markInterrupted records runs that were in flight when a previous process stopped as aborted.
func (rs *runService) markInterrupted() {
	ctx := context.Background()
	running, err := rs.store.RunningRuns(ctx)
	if err != nil {
		rs.log.Warn("cannot read runs left in flight", "err", err)
		return
	}
	for id, raw := range running {
		var sum RunSummary
		if json.Unmarshal(raw, &sum) != nil {
			sum = RunSummary{RunID: id}
		}
		e := errorf(codeAborted, "the server stopped while the run was in flight").
			withHint("start the run again")
		sum.Status, sum.Error, sum.FinishedAt = "aborted", e, timestamp(rs.now())
		res := RunResult{RunID: id, Agent: sum.Agent, Model: sum.Model, Messages: []ModelMessage{}, Steps: sum.Steps,
			Usage:      Usage{InputTokens: sum.InputTokens, OutputTokens: sum.OutputTokens, CostUSD: sum.CostUSD},
			StopReason: "aborted", Error: e}
		sb, _ := json.Marshal(sum)
		rb, _ := json.Marshal(res)
		w := []runWrite{{RunID: id, Agent: sum.Agent, Status: "aborted", Summary: sb, Result: rb, Started: sum.StartedAt}}
		if seq, err := rs.store.NextRunEventSeq(ctx, id); err == nil {
			eb, _ := json.Marshal(runEvent{Type: "run_end", Result: &res})
			w = append(w, runWrite{RunID: id, Seq: seq, Event: eb})
		}
		if err := rs.store.WriteRunBatch(ctx, w); err != nil {
			rs.log.Warn("cannot mark an interrupted run aborted", "run", id, "err", err)
		}
	}
}

// Close aborts runs in flight, waits for them to record their end, then stops the recorder.
func (rs *runService) Close() {
	rs.mu.Lock()
	if rs.closed {
		rs.mu.Unlock()
		return
	}
	rs.closed = true
	for _, ar := range rs.active {
		ar.cancel(errServerShutdown)
	}
	rs.mu.Unlock()
	rs.cancel()
	rs.wg.Wait()
	rs.rec.Close()
}

var (
	errCancelled      = errors.New("the run was cancelled")
	errClientGone     = errors.New("the client disconnected from the run stream")
	errStreamStalled2 = errors.New("the run stream consumer stalled for 60 s")
	errServerShutdown = errors.New("the server is shutting down")
	errRunTimeout     = errors.New("the run reached its timeoutSec")
)

// ---- the recorder ----

// runRecorder persists run rows and events in order, batching what arrives together into one
// transaction, so many concurrent runs do not each pay a commit per event.
type runRecorder struct {
	st   *store
	log  *slog.Logger
	ch   chan recOp
	done chan struct{}
}

type recOp struct {
	w   runWrite
	ack chan struct{}
}

func newRunRecorder(st *store, log *slog.Logger) *runRecorder {
	r := &runRecorder{st: st, log: log, ch: make(chan recOp, 4096), done: make(chan struct{})}
	go r.loop()
	return r
}

func (r *runRecorder) loop() {
	defer close(r.done)
	batch := make([]recOp, 0, 512)
	for op := range r.ch {
		batch = append(batch[:0], op)
	drain:
		for len(batch) < cap(batch) {
			select {
			case op, ok := <-r.ch:
				if !ok {
					break drain
				}
				batch = append(batch, op)
			default:
				break drain
			}
		}
		ws := make([]runWrite, len(batch))
		for i, op := range batch {
			ws[i] = op.w
		}
		if err := r.st.WriteRunBatch(context.Background(), ws); err != nil {
			r.log.Error("recording runs failed", "err", err, "writes", len(ws))
		}
		for _, op := range batch {
			if op.ack != nil {
				close(op.ack)
			}
		}
	}
}

func (r *runRecorder) write(w runWrite) { r.ch <- recOp{w: w} }

// sync writes and waits until the write (and everything queued before it) is committed.
func (r *runRecorder) sync(w runWrite) {
	ack := make(chan struct{})
	r.ch <- recOp{w: w, ack: ack}
	<-ack
}

// flush waits until everything queued so far is committed.
func (r *runRecorder) flush() { r.sync(runWrite{}) }

func (r *runRecorder) Close() {
	close(r.ch)
	<-r.done
}

// ---- starting and stopping runs ----

// prepare validates a run body against the agent's spec and turns it into runParams.
func prepareRun(spec *AgentSpec, b runBody) (*runParams, error) {
	p := &runParams{Model: strings.TrimSpace(b.Model), ComputerID: b.ComputerID}
	in, err := parseInput(b.Input)
	if err != nil {
		return nil, err
	}
	p.Input = in
	if len(bytes.TrimSpace(b.History)) > 0 && string(bytes.TrimSpace(b.History)) != "null" {
		h, err := parseMessages(b.History, "history")
		if err != nil {
			return nil, err
		}
		p.History = h
	}
	if len(b.Vars) > 0 {
		p.Vars = make(map[string]string, len(b.Vars))
		for k, v := range b.Vars {
			if s, ok := v.(string); ok {
				p.Vars[k] = s
				continue
			}
			j, _ := json.Marshal(v)
			p.Vars[k] = string(j)
		}
	}
	lim := effectiveLimits(spec.Limits)
	p.MaxSteps, p.MaxCostUSD = lim.MaxSteps, lim.MaxCostUSD
	if b.MaxSteps != nil {
		n := *b.MaxSteps
		switch {
		case n < 1:
			p.Warnings = append(p.Warnings, fmt.Sprintf("maxSteps %d clamped to 1", n))
			n = 1
		case n > lim.MaxSteps:
			p.Warnings = append(p.Warnings, fmt.Sprintf("maxSteps %d clamped to the spec's %d", n, lim.MaxSteps))
			n = lim.MaxSteps
		}
		p.MaxSteps = n
	}
	if b.MaxCostUSD != nil {
		c := *b.MaxCostUSD
		if c < 0 {
			return nil, errorf(codeSpecInvalid, "maxCostUsd: Number must be greater than or equal to 0").
				withHint("send a ceiling in USD at or below the spec's limits.maxCostUsd")
		}
		if c > lim.MaxCostUSD {
			p.Warnings = append(p.Warnings, fmt.Sprintf("maxCostUsd %g clamped to the spec's %g", c, lim.MaxCostUSD))
			c = lim.MaxCostUSD
		}
		p.MaxCostUSD = c
	}
	switch b.ApprovalMode {
	case "", "auto", "ask", "readonly":
	default:
		return nil, errorf(codeSpecInvalid, "approvalMode: Invalid enum value. Expected 'auto' | 'ask' | 'readonly', received '%s'", b.ApprovalMode).
			withHint("use auto, ask or readonly")
	}
	mode, loosened := effectiveApprovalMode(spec.Guardrails.ApprovalMode, b.ApprovalMode)
	if loosened {
		p.Warnings = append(p.Warnings, fmt.Sprintf("approvalMode %q ignored: the body may tighten the spec's %q, not loosen it", b.ApprovalMode, mode))
	}
	p.ApprovalMode = mode
	return p, nil
}

// effectiveLimits fills zero values with the contract's defaults (defaultSpec's; stored specs already
// carry them).
func effectiveLimits(l Limits) Limits {
	d := defaultSpec().Limits
	for _, f := range [][2]*int{{&l.MaxSteps, &d.MaxSteps}, {&l.MaxTokens, &d.MaxTokens}, {&l.TimeoutSec, &d.TimeoutSec},
		{&l.ExecTimeoutSec, &d.ExecTimeoutSec}, {&l.MaxOutputBytes, &d.MaxOutputBytes}} {
		if *f[0] <= 0 {
			*f[0] = *f[1]
		}
	}
	l.MaxCostUSD = max(l.MaxCostUSD, 0)
	return l
}

func errEmptyInput() *apiError {
	return errorf(codeSpecInvalid, "the run requires a non-empty input").
		withHint(`send {"input": "your prompt"} or a non-empty array of messages`)
}

// parseInput accepts a non-empty string or a non-empty array of messages.
func parseInput(raw json.RawMessage) ([]ModelMessage, error) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || string(t) == "null" {
		return nil, errEmptyInput()
	}
	if t[0] == '"' {
		var s string
		if err := json.Unmarshal(t, &s); err != nil {
			return nil, jsonError(err)
		}
		if strings.TrimSpace(s) == "" {
			return nil, errEmptyInput()
		}
		return []ModelMessage{textMessage("user", s)}, nil
	}
	if t[0] != '[' {
		return nil, errorf(codeSpecInvalid, "input: expected a string or an array of messages").
			withHint(`send {"input": "your prompt"}`)
	}
	msgs, err := parseMessages(t, "input")
	if err != nil {
		return nil, err
	}
	if !hasContent(msgs) {
		return nil, errEmptyInput() // only blank text: nothing to run on, and providers refuse it with a 400
	}
	return msgs, nil
}

// hasContent reports whether any message carries something other than blank text.
func hasContent(msgs []ModelMessage) bool {
	for _, m := range msgs {
		for _, p := range m.Content {
			if p.Type != "text" || strings.TrimSpace(p.Text) != "" {
				return true
			}
		}
	}
	return false
}

// wireMessage is a message as clients send it: content is a string or an array of parts.
type wireMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

var messageRoles = map[string]bool{"system": true, "user": true, "assistant": true, "tool": true}

func parseMessages(raw json.RawMessage, field string) ([]ModelMessage, error) {
	var wms []json.RawMessage
	if err := json.Unmarshal(raw, &wms); err != nil {
		return nil, errorf(codeSpecInvalid, "%s: expected an array of messages", field).
			withHint(`each message is {"role": "user", "content": "..."}`)
	}
	out := make([]ModelMessage, 0, len(wms))
	for i, w := range wms {
		m, err := parseMessage(w)
		if err != nil {
			return nil, errorf(codeSpecInvalid, "%s.%d: %s", field, i, err.Error()).
				withHint(`each message is {"role": "user|assistant|system|tool", "content": "text or parts"}`)
		}
		out = append(out, m)
	}
	return out, nil
}

// parseMessage reads one message whose content is a string or an array of parts.
func parseMessage(raw []byte) (ModelMessage, error) {
	var w wireMessage
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return ModelMessage{}, fmt.Errorf("not a message: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if !messageRoles[w.Role] {
		return ModelMessage{}, fmt.Errorf("role: Invalid enum value. Expected 'system' | 'user' | 'assistant' | 'tool', received '%s'", w.Role)
	}
	m := ModelMessage{Role: w.Role}
	c := bytes.TrimSpace(w.Content)
	switch {
	case len(c) == 0 || string(c) == "null":
		return ModelMessage{}, errors.New("content: Required")
	case c[0] == '"':
		var s string
		if err := json.Unmarshal(c, &s); err != nil {
			return ModelMessage{}, err
		}
		m.Content = []ContentPart{{Type: "text", Text: s}}
	default:
		if err := json.Unmarshal(c, &m.Content); err != nil {
			return ModelMessage{}, errors.New("content: expected a string or an array of parts")
		}
		for j, p := range m.Content {
			if !slices.Contains([]string{"text", "image", "tool_call", "tool_result", "thinking"}, p.Type) {
				return ModelMessage{}, fmt.Errorf("content.%d.type: Invalid enum value. Expected 'text' | 'image' | 'tool_call' | 'tool_result' | 'thinking', received '%s'", j, p.Type)
			}
		}
	}
	return m, nil
}

// start registers a run, records it and starts its loop. sink (may be nil) receives every event, in
// order, already encoded; it is called from the run's goroutines and may block (back-pressure).
func (rs *runService) start(spec *AgentSpec, p *runParams, sink func(runEvent, []byte)) (*activeRun, error) {
	ar := newActiveRun(rs, spec, p, sink)
	rs.mu.Lock()
	if rs.closed {
		rs.mu.Unlock()
		return nil, errorf(codeAborted, "the server is shutting down").withHint("retry when the server is back")
	}
	rs.active[ar.id] = ar
	rs.wg.Add(1)
	rs.mu.Unlock()

	ar.rs.rec.sync(ar.summaryRow()) // waited for: the run id is readable (GET, cancel) once anyone has seen it
	rs.metrics.runStarted(p.Trigger)
	rs.log.Info("run started", "run", ar.id, "agent", ar.agent, "model", ar.model, "trigger", p.Trigger)
	if rs.hub != nil {
		rs.hub.publish("runs", "run_started", ar.summary())
	}
	go func() {
		defer rs.wg.Done()
		ar.run()
	}()
	return ar, nil
}

// cancelRun aborts a run in flight. It reports false when the run is not in flight here.
func (rs *runService) cancelRun(id string, cause error) (*activeRun, bool) {
	rs.mu.Lock()
	ar, ok := rs.active[id]
	rs.mu.Unlock()
	if !ok {
		return nil, false
	}
	ar.cancel(cause)
	return ar, true
}

func (rs *runService) get(id string) *activeRun {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.active[id]
}

func (rs *runService) finished(ar *activeRun) {
	rs.mu.Lock()
	delete(rs.active, ar.id)
	rs.mu.Unlock()
}

// activeRuns lists runs in flight for the events hello frame: [{runId, agent, startedAt}].
func (s *server) activeRuns() []map[string]any {
	if s.runs == nil {
		return []map[string]any{}
	}
	return s.runs.activeList()
}

func (rs *runService) activeList() []map[string]any {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	out := make([]map[string]any, 0, len(rs.active))
	for _, ar := range rs.active {
		out = append(out, map[string]any{"runId": ar.id, "agent": ar.agent, "startedAt": timestamp(ar.startedAt)})
	}
	return out
}

// newRunID returns run_ + 10 base32 digits of the millisecond clock + 10 random ones: ids sort by time.
func newRunID(now time.Time) string {
	ms := uint64(now.UnixMilli())
	out := []byte("run_")
	for i := 9; i >= 0; i-- {
		out = append(out, idAlphabet[(ms>>(uint(i)*5))&31])
	}
	return string(out) + randomChars(10)
}

// ---- endpoints ----

func (s *server) readRunRequest(r *http.Request) (*AgentSpec, *runParams, error) {
	var b runBody
	raw, err := readBody(r)
	if err != nil {
		return nil, nil, err
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil, errEmptyInput()
	}
	if err := decodeBytes(raw, &b); err != nil {
		if ae := asAPIError(err); strings.HasPrefix(ae.Message, "Unrecognized key") {
			hint := "the run body accepts input, history, model, vars, maxSteps, maxCostUsd, approvalMode and computerId"
			if strings.Contains(ae.Message, "maxTokens") || strings.Contains(ae.Message, "timeoutSec") {
				hint = "maxTokens and timeoutSec come only from the agent spec's limits; change the spec to change them"
			}
			return nil, nil, errorf(ae.Code, "%s", ae.Message).withHint(hint)
		}
		return nil, nil, err
	}
	spec, err := s.loadAgent(r.Context(), r.PathValue("name"))
	if err != nil {
		return nil, nil, err
	}
	p, err := prepareRun(spec, b)
	if err != nil {
		return nil, nil, err
	}
	if p.ComputerID != "" {
		if _, err := s.runs.computers.Get(r.Context(), p.ComputerID); err != nil {
			return nil, nil, err
		}
	}
	return spec, p, nil
}

func (s *server) handleRun(w http.ResponseWriter, r *http.Request) error {
	spec, p, err := s.readRunRequest(r)
	if err != nil {
		return err
	}
	ar, err := s.runs.start(spec, p, nil)
	if err != nil {
		return err
	}
	if r.URL.Query().Get("detach") == "true" { // DESIGN §6: the run goes on with no client
		w.Header().Set("Location", "/v1/runs/"+ar.id)
		writeJSON(w, http.StatusAccepted, map[string]string{"runId": ar.id})
		return nil
	}
	s.waitRun(r, ar)
	writeJSON(w, http.StatusOK, ar.result)
	return nil
}

// waitRun waits for the end of a run a request started; the client's disconnect aborts it.
func (s *server) waitRun(r *http.Request, ar *activeRun) {
	select {
	case <-ar.done:
	case <-r.Context().Done():
		ar.cancel(s.goneCause(errClientGone))
		<-ar.done
	}
}

// goneCause names why a request's context ended: at shutdown every request context is cancelled (the
// server's base context), and the run should be recorded as stopped by the shutdown, not by its client.
func (s *server) goneCause(def error) error {
	if s.streamCtx != nil && s.streamCtx.Err() != nil {
		return errServerShutdown
	}
	return def
}

func (s *server) handleRunStream(w http.ResponseWriter, r *http.Request) error {
	spec, p, err := s.readRunRequest(r)
	if err != nil {
		return err
	}
	s.streamRun(w, r, spec, p)
	return nil
}

// streamRun runs and answers with the SSE run stream; a client disconnect or a consumer stalled for
// 60 s aborts the run. Used by run/stream and by triggers answering with a stream.
func (s *server) streamRun(w http.ResponseWriter, r *http.Request, spec *AgentSpec, p *runParams) {
	sse := newSSE(w, ssePingEvery)
	if d := s.runs.streamStall; d > 0 { // tests shorten the 60 s stall
		sse.mu.Lock()
		sse.stall = d
		sse.mu.Unlock()
	}
	defer sse.close()
	ar, err := s.runs.start(spec, p, func(_ runEvent, b []byte) { sse.send(json.RawMessage(b)) })
	if err != nil {
		sse.fail(s.publicError(r.Context(), err))
		return
	}
	select {
	case <-ar.done:
		return
	case <-sse.Done():
	case <-r.Context().Done():
	}
	cause := s.goneCause(errClientGone)
	if err := sse.Err(); errors.Is(err, errStreamStalled) {
		cause = errStreamStalled2
	}
	ar.cancel(cause)
	<-ar.done
}

// handleFollowRun streams a run's events (DESIGN §6): the stored ones after Last-Event-ID (or ?after=N),
// then live ones until run_end, then `event: done`. Ids are the run's own event sequence numbers. The
// follower's disconnect never touches the run.
func (s *server) handleFollowRun(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	after := 0
	if v := firstNonEmpty(r.Header.Get("Last-Event-ID"), r.URL.Query().Get("after")); v != "" {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 {
			return errorf(codeSpecInvalid, "after: expected an event id (a whole number), received %q", v).
				withHint("send the id: of the last event you saw as Last-Event-ID or ?after=")
		}
		after = n
	}
	ar := s.runs.get(id)
	if ar == nil {
		if _, _, _, err := s.store.GetRun(r.Context(), id); errors.Is(err, errNotFound) {
			return errRunNotFound(id)
		} else if err != nil {
			return err
		}
	}
	sse := newSSE(w, ssePingEvery)
	defer sse.close()
	last := after
	send := func(e storedEvent) bool {
		if e.Seq <= last {
			return true
		}
		last = e.Seq
		return sse.sendID(e.Seq, e.Event) == nil
	}
	for {
		var live <-chan storedEvent
		upTo, stop := -1, func() {}
		if ar != nil {
			live, upTo, stop = ar.follow()
		}
		s.runs.rec.flush() // what was emitted before follow() is now readable
		stored, err := s.store.RunEventsAfter(r.Context(), id, last)
		if err != nil {
			stop()
			sse.fail(s.publicError(r.Context(), err))
			return nil
		}
		for _, e := range stored {
			if (upTo >= 0 && e.Seq > upTo) || !send(e) {
				break
			}
		}
		if ar == nil {
			return nil
		}
	live:
		for {
			select {
			case e, ok := <-live:
				if !ok {
					break live
				}
				if !send(e) {
					stop()
					return nil
				}
			case <-sse.Done():
				stop()
				return nil
			case <-r.Context().Done():
				stop()
				return nil
			}
		}
		stop()
		if ar.hasEnded() { // one last look at the store, then done
			ar = nil
		} // else it fell behind and was dropped: catch up from the store and follow again
	}
}

func (s *server) handleListRuns(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	limit := 50
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return errorf(codeSpecInvalid, "limit: expected an integer, received %q", v).withHint("send limit between 1 and 500")
		}
		limit = min(max(n, 1), 500)
	}
	var before int64
	if v := q.Get("cursor"); v != "" {
		n, err := strconv.ParseInt(v, 36, 64)
		if err != nil || n <= 0 {
			return errorf(codeSpecInvalid, "cursor: not a cursor from this server").withHint("pass the nextCursor of the previous page, or omit it")
		}
		before = n
	}
	sums, next, err := s.store.ListRuns(r.Context(), q.Get("agent"), limit, before)
	if err != nil {
		return err
	}
	if sums == nil {
		sums = []json.RawMessage{}
	}
	out := map[string]any{"runs": sums}
	if next > 0 {
		out["nextCursor"] = strconv.FormatInt(next, 36)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func errRunNotFound(id string) *apiError {
	return errorf(codeRunNotFound, "run %q not found", id).withHint("list runs with GET /v1/runs")
}

func (s *server) handleGetRun(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	_, sum, res, err := s.store.GetRun(r.Context(), id)
	if errors.Is(err, errNotFound) {
		return errRunNotFound(id)
	}
	if err != nil {
		return err
	}
	events, err := s.store.RunEvents(r.Context(), id)
	if err != nil {
		return err
	}
	var result any = json.RawMessage(sum)
	if len(res) > 0 {
		result = json.RawMessage(res)
	} else if ar := s.runs.get(id); ar != nil {
		result = ar.summary() // the live summary of a run in flight
	}
	writeJSON(w, http.StatusOK, map[string]any{"result": result, "events": events})
	return nil
}

// cancelAndWait aborts a run in flight and waits (bounded) for it to record its end. It returns the
// run's stop reason when the run ended by this cancel, and false when no run was in flight here (or it
// finished on its own first).
func (s *server) cancelAndWait(id string) bool {
	ar, ok := s.runs.cancelRun(id, errCancelled)
	if !ok {
		return false
	}
	wait := s.runs.cancelWait
	if wait <= 0 {
		wait = 10 * time.Second
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ar.done:
		return ar.result.StopReason == "aborted"
	case <-t.C:
		return true // still winding down (a tool ignoring cancellation); it will record aborted
	}
}

func (s *server) handleCancelRun(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if s.cancelAndWait(id) {
		writeJSON(w, http.StatusAccepted, map[string]any{"runId": id, "cancelled": true, "status": "aborted"})
		return nil
	}
	status, _, _, err := s.store.GetRun(r.Context(), id)
	if errors.Is(err, errNotFound) {
		return errRunNotFound(id)
	}
	return reply(w, http.StatusAccepted, map[string]any{"runId": id, "cancelled": false, "status": status}, err)
}

func (s *server) handleDeleteRun(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	ar := s.runs.get(id)
	s.cancelAndWait(id)
	if err := s.store.DeleteRun(r.Context(), id); err != nil {
		if errors.Is(err, errNotFound) {
			err = errRunNotFound(id)
		}
		return err
	}
	// A run still winding down (a tool ignoring cancellation) records its end later; that record must
	// not bring the deleted run back: the run deletes itself once recorded, or it already has been.
	if ar != nil && ar.markDeleted() {
		if err := s.store.DeleteRun(context.Background(), id); err != nil && !errors.Is(err, errNotFound) {
			return err
		}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// markDeleted asks the run to delete its record once it is written; true when it already was written
// (the caller deletes it again).
func (ar *activeRun) markDeleted() (recorded bool) {
	ar.mu.Lock()
	defer ar.mu.Unlock()
	ar.deleted = true
	return ar.recorded
}
