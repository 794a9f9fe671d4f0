// mcp.go — the MCP server core (Model Context Protocol, revision 2025-11-25; 2025-06-18 and 2025-03-26
// accepted from older clients): hand-rolled JSON-RPC 2.0, the lifecycle (initialize, ping,
// logging/setLevel), and the tools — the machine tools and the browser tools (a Chromium in it;
// screenshots as inline image content) on a machine of the session's own, and the control-plane tools
// (agents, runs, computers). The transports are in mcp_http.go (streamable HTTP at
// /mcp) and mcp_stdio.go (`agentd mcp`).
//
// Entry points: (*mcpSessions).open makes a session; (*mcpSession).handle answers one JSON-RPC message;
// (*mcpSession).Close ends it (cancels its calls, destroys its machine unless kept).
// Rules: machine tools reuse runs_tools.go's implementations through a run-shaped toolEnv, so the command
// policy, the path jail, output bounds and redaction are the ones /v1 and runs apply; read-only control
// tools go through the server's own /v1 handlers in-process (same JSON, same errors). A failed tool is a
// result with isError and readable text, never a JSON-RPC error. A non-isolated provider is refused for
// machine tools when the transport is not stdio; the first machine result says which provider runs them
// and what it isolates.
package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

const mcpLatestVersion = "2025-11-25"

// mcpSupportedVersion reports whether agentd speaks a protocol revision.
func mcpSupportedVersion(v string) bool {
	switch v {
	case "2025-11-25", "2025-06-18", "2025-03-26":
		return true
	}
	return false
}

// JSON-RPC 2.0 error codes.
const (
	rpcParseError     = -32700
	rpcInvalidRequest = -32600
	rpcMethodNotFound = -32601
	rpcInvalidParams  = -32602
	rpcInternalError  = -32603
)

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

// rpcMessage is any JSON-RPC message as read: a request (id and method), a notification (method only)
// or a response (id with result or error).
type rpcMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

// rpcResponse is what the server answers to a request.
type rpcResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

// rpcNotification is a message the server sends unasked (progress, log messages).
type rpcNotification struct {
	JSONRPC string `json:"jsonrpc"`
	Method  string `json:"method"`
	Params  any    `json:"params,omitempty"`
}

func rpcFail(id json.RawMessage, code int, format string, a ...any) *rpcResponse {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	return &rpcResponse{JSONRPC: "2.0", ID: id, Error: &rpcError{Code: code, Message: fmt.Sprintf(format, a...)}}
}

// parseRPC reads one message. A response carries the error to answer with when the message is not one.
func parseRPC(raw []byte) (*rpcMessage, *rpcResponse) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '[' {
		if !json.Valid(raw) {
			return nil, rpcFail(nil, rpcParseError, "parse error: the body is not valid JSON")
		}
		return nil, rpcFail(nil, rpcInvalidRequest, "invalid request: JSON-RPC batches are not supported; send one message at a time")
	}
	var m rpcMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		if !json.Valid(raw) {
			return nil, rpcFail(nil, rpcParseError, "parse error: the body is not valid JSON")
		}
		return nil, rpcFail(nil, rpcInvalidRequest, "invalid request: not a JSON-RPC message object")
	}
	if len(m.ID) > 0 && m.ID[0] != '"' && (m.ID[0] < '0' || m.ID[0] > '9') && m.ID[0] != '-' {
		return nil, rpcFail(nil, rpcInvalidRequest, "invalid request: id must be a string or a number")
	}
	if m.JSONRPC != "2.0" {
		return nil, rpcFail(m.ID, rpcInvalidRequest, `invalid request: jsonrpc must be "2.0"`)
	}
	if m.Method == "" && len(m.ID) == 0 {
		return nil, rpcFail(nil, rpcInvalidRequest, "invalid request: a message needs a method or an id")
	}
	return &m, nil
}

// ---- sessions ----

// mcpSessions owns every MCP session of a server: HTTP sessions by id, and the stdio one. Close ends them all.
type mcpSessions struct {
	s       *server
	idleTTL time.Duration // an HTTP session unused this long is ended at the next request

	mu      sync.Mutex
	byID    map[string]*mcpSession
	closed  bool
	closing sync.WaitGroup // idle sessions being ended in the background
}

func newMCPSessions(s *server) *mcpSessions {
	return &mcpSessions{s: s, idleTTL: time.Hour, byID: map[string]*mcpSession{}}
}

// mcpSession is one client connection's state: negotiated version, log level, its machine.
type mcpSession struct {
	reg       *mcpSessions
	id        string
	transport string // "http" or "stdio"
	keep      bool   // leave the machine running when the session ends

	ctx    context.Context // cancelled at Close: calls in flight end
	cancel context.CancelFunc
	calls  sync.WaitGroup

	mu        sync.Mutex
	protocol  string
	logLevel  string
	lastUsed  time.Time
	closed    bool
	inflight  map[string]context.CancelFunc // request id → cancel (notifications/cancelled)
	dropped   map[string]bool               // requests the client cancelled: answered with nothing
	machMu    sync.Mutex                    // serialises machine creation
	machineID string
	told      bool // the provider note was given
}

// open makes a session; an HTTP session is registered under its id.
func (m *mcpSessions) open(transport string, keep bool) (*mcpSession, error) {
	ctx, cancel := context.WithCancel(context.Background())
	ss := &mcpSession{reg: m, id: newID("mcp"), transport: transport, keep: keep, ctx: ctx, cancel: cancel,
		logLevel: "info", lastUsed: m.s.runs.now(), inflight: map[string]context.CancelFunc{}, dropped: map[string]bool{}}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		cancel()
		return nil, errorf(codeAborted, "the server is shutting down")
	}
	m.byID[ss.id] = ss
	return ss, nil
}

// get finds a live HTTP session; sessions idle past the TTL are ended on the way.
func (m *mcpSessions) get(id string) *mcpSession {
	now := m.s.runs.now()
	var stale []*mcpSession
	m.mu.Lock()
	for k, ss := range m.byID {
		ss.mu.Lock()
		idle := k != id && ss.transport == "http" && now.Sub(ss.lastUsed) > m.idleTTL && len(ss.inflight) == 0
		ss.mu.Unlock()
		if idle {
			delete(m.byID, k)
			stale = append(stale, ss)
			m.closing.Add(1) // under mu: Close, which waits for these, cannot have begun waiting
		}
	}
	ss := m.byID[id]
	m.mu.Unlock()
	for _, x := range stale {
		go func() { // destroying a machine takes a while; the session is already unreachable
			defer m.closing.Done()
			x.Close()
		}()
	}
	if ss != nil {
		ss.mu.Lock()
		ss.lastUsed = now
		ss.mu.Unlock()
	}
	return ss
}

// Close ends every session (at server shutdown).
func (m *mcpSessions) Close() {
	m.mu.Lock()
	m.closed = true
	all := make([]*mcpSession, 0, len(m.byID))
	for _, ss := range m.byID {
		all = append(all, ss)
	}
	m.byID = map[string]*mcpSession{}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, ss := range all {
		wg.Go(ss.Close)
	}
	wg.Wait()
	m.closing.Wait()
}

// Close ends the session: its calls are cancelled and waited for, then its machine is destroyed
// (unless kept). Safe to call more than once.
func (ss *mcpSession) Close() {
	ss.mu.Lock()
	if ss.closed {
		ss.mu.Unlock()
		return
	}
	ss.closed = true
	ss.mu.Unlock()
	ss.reg.mu.Lock()
	delete(ss.reg.byID, ss.id)
	ss.reg.mu.Unlock()
	ss.cancel()
	ss.calls.Wait()
	ss.machMu.Lock()
	id := ss.machineID
	ss.machMu.Unlock()
	if id != "" && !ss.keep {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		// An empty reason is a plain destroy (a reason is the reaper's, which re-checks idleness).
		if err := ss.reg.s.computers.destroy(ctx, id, ""); err != nil && asAPIError(err).Code != codeComputerNotFound {
			ss.reg.s.log.Warn("mcp: destroying the session's machine", "computer", id, "err", err)
		}
	}
}

// begin registers a call in flight; the returned context ends with the session, the caller's context,
// or a notifications/cancelled naming the request.
func (ss *mcpSession) begin(parent context.Context, id json.RawMessage) (context.Context, func(), bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		return nil, nil, false
	}
	ctx, cancel := context.WithCancel(parent)
	stop := context.AfterFunc(ss.ctx, cancel)
	key := string(id)
	if key != "" {
		ss.inflight[key] = cancel
	}
	ss.calls.Add(1)
	return ctx, func() {
		stop()
		cancel()
		ss.mu.Lock()
		delete(ss.inflight, key)
		ss.lastUsed = ss.reg.s.runs.now()
		ss.mu.Unlock()
		ss.calls.Done()
	}, true
}

// handle answers one message. notify sends a notification to the client while a request runs (progress);
// the answer is nil for notifications and responses.
func (ss *mcpSession) handle(ctx context.Context, m *rpcMessage, notify func(any)) *rpcResponse {
	if m.Method == "" { // a response to a request of ours: we send none, so there is nothing to match
		return nil
	}
	if len(m.ID) == 0 {
		ss.notification(m)
		return nil
	}
	ctx, done, ok := ss.begin(ctx, m.ID)
	if !ok {
		return rpcFail(m.ID, rpcInternalError, "the session has ended")
	}
	defer done()
	result, rerr := ss.dispatch(ctx, m, notify)
	ss.mu.Lock()
	dropped := ss.dropped[string(m.ID)]
	delete(ss.dropped, string(m.ID))
	ss.mu.Unlock()
	if dropped { // the client cancelled it: no answer (MCP cancellation)
		return nil
	}
	if rerr != nil {
		return &rpcResponse{JSONRPC: "2.0", ID: m.ID, Error: rerr}
	}
	return &rpcResponse{JSONRPC: "2.0", ID: m.ID, Result: result}
}

func (ss *mcpSession) notification(m *rpcMessage) {
	switch m.Method {
	case "notifications/cancelled":
		var p struct {
			RequestID json.RawMessage `json:"requestId"`
		}
		if json.Unmarshal(m.Params, &p) == nil {
			ss.mu.Lock()
			cancel := ss.inflight[string(p.RequestID)]
			if cancel != nil {
				ss.dropped[string(p.RequestID)] = true
			}
			ss.mu.Unlock()
			if cancel != nil {
				cancel()
			}
		}
	}
	// notifications/initialized and any other notification need nothing.
}

func (ss *mcpSession) dispatch(ctx context.Context, m *rpcMessage, notify func(any)) (any, *rpcError) {
	params := m.Params
	if len(params) == 0 || string(params) == "null" {
		params = json.RawMessage("{}")
	}
	switch m.Method {
	case "initialize":
		var p struct {
			ProtocolVersion string         `json:"protocolVersion"`
			Capabilities    map[string]any `json:"capabilities"`
			ClientInfo      map[string]any `json:"clientInfo"`
		}
		if err := json.Unmarshal(params, &p); err != nil || p.ProtocolVersion == "" {
			return nil, &rpcError{Code: rpcInvalidParams, Message: "initialize needs params.protocolVersion"}
		}
		v := p.ProtocolVersion
		if !mcpSupportedVersion(v) {
			v = mcpLatestVersion // the client decides whether it speaks ours
		}
		ss.mu.Lock()
		ss.protocol = v
		ss.mu.Unlock()
		return map[string]any{
			"protocolVersion": v,
			"capabilities":    mcpCapabilities(),
			"serverInfo":      map[string]any{"name": "agentd", "title": "agentd", "version": version},
			"instructions": "agentd runs AI agents and sandboxed machines. The machine tools (shell, read_file, write_file, " +
				"edit_file, list_dir, expose_port, computer_info) and the browser tools (browse, browser_goto, browser_snapshot, " +
				"browser_click, browser_type, ...: a real Chromium inside the machine, whose localhost is the machine's own) " +
				"act on a machine of this session's own, created on first use; " +
				"list_agents, run_agent, list_runs, get_run and list_computers drive the control plane.",
		}, nil
	case "ping":
		return map[string]any{}, nil
	case "logging/setLevel":
		var p struct {
			Level string `json:"level"`
		}
		if err := json.Unmarshal(params, &p); err != nil || mcpLogLevels[p.Level] == 0 {
			return nil, &rpcError{Code: rpcInvalidParams, Message: "level must be one of debug, info, notice, warning, error, critical, alert, emergency"}
		}
		ss.mu.Lock()
		ss.logLevel = p.Level
		ss.mu.Unlock()
		return map[string]any{}, nil
	case "tools/list":
		var p struct {
			Cursor string `json:"cursor"`
		}
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, &rpcError{Code: rpcInvalidParams, Message: "tools/list params must be an object"}
		}
		if p.Cursor != "" {
			return nil, &rpcError{Code: rpcInvalidParams, Message: "invalid cursor: the tool list has one page"}
		}
		tools := mcpToolList()
		if names := ss.mcpAgentNames(ctx); len(names) > 0 {
			for _, t := range tools {
				if t["name"] == "run_agent" {
					t["description"] = t["description"].(string) + " Agents here now: " + strings.Join(names, ", ") + "."
				}
			}
		}
		return map[string]any{"tools": tools}, nil
	case "resources/list", "resources/read":
		return ss.resources(ctx, m.Method, params)
	case "tools/call":
		var p struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
			Meta      struct {
				ProgressToken json.RawMessage `json:"progressToken"`
			} `json:"_meta"`
		}
		if err := json.Unmarshal(params, &p); err != nil || p.Name == "" {
			return nil, &rpcError{Code: rpcInvalidParams, Message: "tools/call needs params.name (and arguments as an object)"}
		}
		args := map[string]any{}
		if len(p.Arguments) > 0 && string(p.Arguments) != "null" {
			d := json.NewDecoder(bytes.NewReader(p.Arguments))
			d.UseNumber()
			if err := d.Decode(&args); err != nil {
				return nil, &rpcError{Code: rpcInvalidParams, Message: "tools/call: arguments must be a JSON object"}
			}
		}
		tool, ok := mcpTools()[p.Name]
		if !ok {
			return nil, &rpcError{Code: rpcInvalidParams, Message: fmt.Sprintf("unknown tool %q; tools/list names them", p.Name)}
		}
		pr := &mcpProgress{token: p.Meta.ProgressToken, notify: notify}
		return tool.call(ctx, ss, args, pr), nil
	}
	return nil, &rpcError{Code: rpcMethodNotFound, Message: fmt.Sprintf("method not found: %s", m.Method)}
}

// mcpLogLevels are the syslog levels MCP names, by severity.
var mcpLogLevels = map[string]int{"debug": 1, "info": 2, "notice": 3, "warning": 4, "error": 5, "critical": 6, "alert": 7, "emergency": 8}

// mcpProgress sends notifications/progress for a call whose request carried a progressToken.
type mcpProgress struct {
	token  json.RawMessage
	notify func(any)
	mu     sync.Mutex
	n      int
}

func (p *mcpProgress) send(msg string) {
	if p == nil || len(p.token) == 0 || string(p.token) == "null" || p.notify == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	p.notify(rpcNotification{JSONRPC: "2.0", Method: "notifications/progress",
		Params: map[string]any{"progressToken": p.token, "progress": p.n, "message": msg}})
}

// ---- tools ----

// mcpToolResult is a tools/call result.
type mcpToolResult struct {
	Content           []mcpContent `json:"content"`
	StructuredContent any          `json:"structuredContent,omitempty"`
	IsError           bool         `json:"isError"`
}

// mcpContent is one item of a tool result: text, or an image (base64 data with its MIME type).
type mcpContent struct {
	Type     string
	Text     string
	Data     []byte
	MIMEType string
}

func (c mcpContent) MarshalJSON() ([]byte, error) {
	if c.Type == "image" {
		return json.Marshal(map[string]string{"type": "image", "data": base64.StdEncoding.EncodeToString(c.Data), "mimeType": c.MIMEType})
	}
	return json.Marshal(map[string]string{"type": c.Type, "text": c.Text})
}

func toolText(text string, isErr bool) *mcpToolResult {
	return &mcpToolResult{Content: []mcpContent{{Type: "text", Text: text}}, IsError: isErr}
}

// toolErrText is an error as a tool result's text: the message, then the hint.
func toolErrText(err error) *mcpToolResult {
	ae := asAPIError(err)
	msg := ae.Message
	if ae.cause != nil {
		msg = "internal error"
	}
	if ae.Hint != "" {
		msg += " (hint: " + ae.Hint + ")"
	}
	return toolText(msg, true)
}

type mcpTool struct {
	name, title, description string
	schema                   map[string]any
	annotations              map[string]any
	call                     func(ctx context.Context, ss *mcpSession, args map[string]any, pr *mcpProgress) *mcpToolResult
}

// mcpMachineTools are the run tools offered on the session's machine, with their titles; the browser's
// (issue 28) drive a Chromium in it, and make the machine of flavor browser when they are the first.
var mcpMachineTools = [][2]string{
	{"shell", "Run a shell command"}, {"read_file", "Read a file"}, {"write_file", "Write a file"},
	{"edit_file", "Edit a file"}, {"list_dir", "List a directory"}, {"expose_port", "Expose a port"},
	{"computer_info", "Describe the machine"},
	{"browse", "Fetch a web page"}, {"browser_goto", "Open a page in the browser"}, {"browser_snapshot", "Read the page"},
	{"browser_click", "Click an element"}, {"browser_type", "Type into a field"}, {"browser_screenshot", "Screenshot the page"},
	{"browser_wait_for", "Wait for text or an element"}, {"browser_scroll", "Scroll the page"},
	{"browser_select", "Choose an option"}, {"browser_hover", "Hover over an element"},
	{"browser_navigate", "Go back, forward or reload"}, {"browser_tabs", "List, open, select or close tabs"},
	{"browser_status", "Describe the browser"},
}

func mcpTools() map[string]mcpTool {
	catalog := toolCatalog()
	out := map[string]mcpTool{}
	for _, nt := range mcpMachineTools {
		impl := catalog[nt[0]]
		ro := !isDangerous(nt[0])
		description := strings.NewReplacer("the agent's computer", "this session's machine", "the computer", "this session's machine").Replace(impl.def.Description)
		call := func(ctx context.Context, ss *mcpSession, args map[string]any, pr *mcpProgress) *mcpToolResult {
			return ss.machineTool(ctx, impl, args, pr)
		}
		if nt[0] == "browser_screenshot" { // inline, not a file in /work
			description = "A PNG screenshot of the page in this session's machine's browser (the viewport, or the whole page), as an image."
			call = func(ctx context.Context, ss *mcpSession, args map[string]any, _ *mcpProgress) *mcpToolResult {
				return ss.screenshot(ctx, args)
			}
		}
		out[nt[0]] = mcpTool{name: nt[0], title: nt[1],
			description: description + " (The machine belongs to this MCP session: created on first use, destroyed when the session ends.)",
			schema:      impl.def.Parameters,
			annotations: map[string]any{"readOnlyHint": ro, "destructiveHint": !ro, "openWorldHint": nt[0] == "shell" || strings.HasPrefix(nt[0], "browse")},
			call:        call}
	}
	// The read-only control tools, one row each: the /v1 path a call GETs, built from its arguments.
	reads := []struct {
		name, title, description string
		schema                   map[string]any
		path                     func(args map[string]any) (string, error)
	}{
		{"list_agents", "List agents", "List the agents defined on this agentd: name, description, model, tools, run count.",
			obj(nil, map[string]any{}),
			func(map[string]any) (string, error) { return "/v1/agents", nil }},
		{"list_runs", "List runs", "List recorded runs, newest first, optionally of one agent; pass nextCursor back as cursor for the next page.",
			obj(nil, map[string]any{"agent": prop("string", "only this agent's runs"),
				"limit":  map[string]any{"type": "integer", "minimum": 1, "maximum": 500, "description": "page size (default 50)"},
				"cursor": prop("string", "nextCursor of the previous page")}),
			func(args map[string]any) (string, error) {
				var a struct {
					Agent  string `arg:"agent"`
					Limit  int    `arg:"limit"`
					Cursor string `arg:"cursor"`
				}
				err := toolArgs(args, &a)
				limit := ""
				if a.Limit > 0 {
					limit = strconv.Itoa(a.Limit)
				}
				return "/v1/runs" + queryOf("agent", a.Agent, "limit", limit, "cursor", a.Cursor), err
			}},
		{"get_run", "Get a run", "Get one run: its result (text, stop reason, usage) and its recorded events.",
			obj([]string{"runId"}, map[string]any{"runId": prop("string", "the run's id (run_...)")}),
			func(args map[string]any) (string, error) {
				var a struct {
					ID string `arg:"runId,required"`
				}
				err := toolArgs(args, &a)
				return "/v1/runs/" + url.PathEscape(a.ID), err
			}},
		{"list_computers", "List computers", "List the machines agentd manages: id, name, provider, state, isolation.",
			obj(nil, map[string]any{"all": prop("boolean", "include destroyed machines")}),
			func(args map[string]any) (string, error) {
				var a struct {
					All bool `arg:"all"`
				}
				err := toolArgs(args, &a)
				return "/v1/computers?all=" + strconv.FormatBool(a.All), err
			}},
	}
	for _, t := range reads {
		out[t.name] = mcpTool{name: t.name, title: t.title, description: t.description, schema: t.schema,
			annotations: map[string]any{"readOnlyHint": true, "destructiveHint": false, "openWorldHint": false},
			call: func(ctx context.Context, ss *mcpSession, args map[string]any, _ *mcpProgress) *mcpToolResult {
				path, err := t.path(args)
				if err != nil {
					return toolErrText(err)
				}
				return ss.v1(ctx, path)
			}}
	}
	out["run_agent"] = mcpTool{name: "run_agent", title: "Run an agent",
		annotations: map[string]any{"readOnlyHint": false, "destructiveHint": true, "openWorldHint": true},
		description: "Run one of agentd's agents on an input and return its final text and stop reason. The run is recorded like any other (get_run shows it).",
		schema: obj([]string{"name", "input"}, map[string]any{"name": prop("string", "the agent's name (list_agents)"),
			"input": prop("string", "the task or message for the agent")}),
		call: func(ctx context.Context, ss *mcpSession, args map[string]any, pr *mcpProgress) *mcpToolResult {
			return ss.runAgent(ctx, args, pr)
		}}
	return out
}

// mcpToolList is tools/list's answer, in a stable order.
func mcpToolList() []map[string]any {
	tools := mcpTools()
	names := make([]string, 0, len(tools))
	for n := range tools {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]map[string]any, 0, len(names))
	for _, n := range names {
		t := tools[n]
		out = append(out, map[string]any{"name": t.name, "title": t.title, "description": t.description,
			"inputSchema": t.schema, "annotations": t.annotations})
	}
	return out
}

// v1 answers a read-only tool through the server's own /v1 handler, in-process: the JSON and the errors
// are the API's.
func (ss *mcpSession) v1(ctx context.Context, path string) *mcpToolResult {
	r, err := http.NewRequestWithContext(ctx, http.MethodGet, path, nil)
	if err != nil {
		return toolErrText(err)
	}
	r.RemoteAddr = "127.0.0.1:0"
	w := &bufferWriter{header: http.Header{}, status: http.StatusOK}
	ss.reg.s.handler.ServeHTTP(w, r)
	if w.status >= 400 {
		var env struct {
			Error apiError `json:"error"`
		}
		if json.Unmarshal(w.body.Bytes(), &env) == nil && env.Error.Message != "" {
			return toolErrText(&env.Error)
		}
		return toolText(fmt.Sprintf("HTTP %d: %s", w.status, w.body.String()), true)
	}
	var structured any
	json.Unmarshal(w.body.Bytes(), &structured)
	res := toolText(strings.TrimSpace(w.body.String()), false)
	res.StructuredContent = structured
	return res
}

// bufferWriter is an in-memory ResponseWriter for in-process calls of the /v1 handlers.
type bufferWriter struct {
	header http.Header
	status int
	wrote  bool
	body   bytes.Buffer
}

func (w *bufferWriter) Header() http.Header { return w.header }
func (w *bufferWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
}
func (w *bufferWriter) Write(b []byte) (int, error) { w.wrote = true; return w.body.Write(b) }

// runAgent runs an agent to its end; steps and tool calls are reported as progress.
func (ss *mcpSession) runAgent(ctx context.Context, args map[string]any, pr *mcpProgress) *mcpToolResult {
	var a struct {
		Name  string `arg:"name,required"`
		Input string `arg:"input,required"`
	}
	if err := toolArgs(args, &a); err != nil {
		return toolErrText(err)
	}
	s := ss.reg.s
	spec, err := s.loadAgent(ctx, a.Name)
	if err != nil {
		return toolErrText(err)
	}
	in, _ := json.Marshal(a.Input)
	p, err := prepareRun(spec, runBody{Input: in})
	if err != nil {
		return toolErrText(err)
	}
	p.Trigger = "mcp"
	ar, err := s.runs.start(spec, p, func(ev runEvent, _ []byte) {
		switch ev.Type {
		case "step_start":
			pr.send(fmt.Sprintf("step %d", ev.Step))
		case "tool_start":
			if ev.Call != nil {
				pr.send("tool " + ev.Call.Name)
			}
		case "approval_required":
			pr.send(fmt.Sprintf("waiting for approval %s (agentd approvals, or POST /v1/approvals/%s)", ev.ApprovalID, ev.ApprovalID))
		}
	})
	if err != nil {
		return toolErrText(err)
	}
	select {
	case <-ar.done:
	case <-ctx.Done():
		ar.cancel(s.goneCause(errClientGone))
		<-ar.done
	}
	res := ar.result
	var b strings.Builder
	b.WriteString(res.Text)
	if res.Text != "" {
		b.WriteString("\n\n")
	}
	fmt.Fprintf(&b, "[run %s of %s: stopReason %s, %d step(s)", res.RunID, res.Agent, res.StopReason, res.Steps)
	if res.Error != nil {
		fmt.Fprintf(&b, "; error %s: %s", res.Error.Code, res.Error.Message)
	}
	b.WriteString("]")
	out := toolText(b.String(), res.StopReason == "error")
	out.StructuredContent = map[string]any{"runId": res.RunID, "agent": res.Agent, "text": res.Text,
		"stopReason": res.StopReason, "steps": res.Steps, "usage": res.Usage, "error": res.Error}
	return out
}

// ---- machine tools ----

// mcpMachineName names a session's machine.
func (ss *mcpSession) machineName() string {
	return "mcp-" + strings.ToLower(strings.TrimPrefix(ss.id, "mcp_"))
}

// machine returns the session's running machine, creating it on first use (or after the reaper took
// the previous one for idleness) of flavor (a browser tool's first call makes it "browser", whose image
// has Chromium). note is the honest word about the provider, given once.
func (ss *mcpSession) machine(ctx context.Context, flavor string) (id, note string, err error) {
	ss.machMu.Lock()
	defer ss.machMu.Unlock()
	c := ss.reg.s.computers
	reaped := ""
	if ss.machineID != "" {
		info, err := c.Get(ctx, ss.machineID)
		if err == nil && info.State == stateRunning {
			return ss.machineID, "", nil
		}
		if err != nil && asAPIError(err).Code != codeComputerNotFound {
			return "", "", err
		}
		reaped = fmt.Sprintf("[agentd: the previous machine %s of this session is gone (idle or stopped); a new one was created]\n", ss.machineID)
		if err == nil { // stopped or failed: not ours to keep
			c.destroy(context.WithoutCancel(ctx), ss.machineID, "")
		}
		ss.machineID = ""
	}
	p, err := c.selectProvider(ctx, "")
	if err != nil {
		return "", "", err
	}
	meta := p.meta()
	if !meta.isolated && ss.transport != "stdio" {
		return "", "", errorf(codeExecDenied, "the machine tools over HTTP run only on an isolated provider, and the only one available is %q (%s)", meta.name, meta.description).
			withHint("install Docker or Podman (or set computerProvider to one), or use `agentd mcp` over stdio on this host, which may use the local provider")
	}
	info, err := c.create(ctx, ComputerSpec{Name: ss.machineName(), Provider: meta.name, Flavor: flavor}, commandPolicy{})
	if err != nil {
		return "", "", err
	}
	ss.machineID = info.ID
	if !ss.told {
		ss.told = true
		if meta.isolated {
			note = fmt.Sprintf("[agentd: this session's machine %s runs on provider %s: %s, isolated by the kernel (own filesystem, processes and network namespace); it is destroyed when the session ends]\n",
				info.ID, meta.name, meta.description)
		} else {
			note = fmt.Sprintf("[agentd: this session's machine %s runs on provider %s: %s. It is NOT isolated: commands run on this host as the user running agentd; only the command policy and the path jail guard them]\n",
				info.ID, meta.name, meta.description)
		}
	}
	return info.ID, reaped + note, nil
}

// machineTool runs one of runs_tools.go's tools on the session's machine, with the same policy, jail,
// bounds and redaction as a run.
func (ss *mcpSession) machineTool(ctx context.Context, impl toolImpl, args map[string]any, pr *mcpProgress) *mcpToolResult {
	id, note, err := ss.machine(ctx, machineFlavor(impl.def.Name))
	if err != nil {
		return toolErrText(err)
	}
	s := ss.reg.s
	spec := &AgentSpec{Name: ss.machineName()}
	lim := effectiveLimits(spec.Limits)
	red := newRedactor(s.runs.getenv)
	ar := &activeRun{rs: s.runs, agent: spec.Name, spec: spec, p: &runParams{ComputerID: id}, lim: lim, red: red,
		computerID: id, warned: map[string]bool{}}
	env := &toolEnv{ar: ar, delta: func(stream, text string) {}}
	out, err := impl.run(ctx, env, args)
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return toolText("cancelled", true)
		}
		r := toolErrText(err)
		r.Content[0].Text = note + red.redact(r.Content[0].Text)
		return r
	}
	out = red.redact(boundOutput(out, lim.MaxOutputBytes))
	isErr := impl.def.Name == "shell" && !shellSucceeded(out)
	return toolText(note+out, isErr)
}

// machineFlavor is the flavor of the session's machine when tool is the first to need it: a browser_*
// tool needs Chromium (browse only fetches).
func machineFlavor(tool string) string {
	if strings.HasPrefix(tool, "browser_") {
		return "browser"
	}
	return ""
}

// screenshot is browser_screenshot over MCP: the PNG inline as image content, after a line saying what
// it is.
func (ss *mcpSession) screenshot(ctx context.Context, args map[string]any) *mcpToolResult {
	var a struct {
		Full bool `arg:"fullPage"`
	}
	if err := toolArgs(args, &a); err != nil {
		return toolErrText(err)
	}
	id, note, err := ss.machine(ctx, "browser")
	if err != nil {
		return toolErrText(err)
	}
	png, err := ss.reg.s.computers.BrowserScreenshot(ctx, id, a.Full)
	if err != nil {
		r := toolErrText(err)
		r.Content[0].Text = note + r.Content[0].Text
		return r
	}
	what := "the viewport"
	if a.Full {
		what = "the whole page"
	}
	return &mcpToolResult{Content: []mcpContent{{Type: "text", Text: fmt.Sprintf("%sa %d-byte PNG screenshot of %s", note, len(png), what)},
		{Type: "image", Data: png, MIMEType: "image/png"}}}
}

// shellSucceeded reads the shell tool's closing "[exit code N...]" line: exit 0 and not timed out.
func shellSucceeded(out string) bool {
	i := strings.LastIndex(out, "[exit code ")
	if i < 0 {
		return false
	}
	tail := out[i:]
	return strings.HasPrefix(tail, "[exit code 0]") || strings.HasPrefix(tail, "[exit code 0;") && !strings.Contains(tail, "timed out")
}
