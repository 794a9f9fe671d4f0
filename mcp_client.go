// mcp_client.go — agentd as an MCP client: the servers of config.yaml's `mcpServers` (Claude Desktop's
// shape: {command, args, env} for stdio, {url, headers} for streamable HTTP; plus trusted and timeoutSec)
// become run tools. An agent names `mcp:<server>` (all its tools) or `mcp:<server>/<tool>` in `tools`;
// each becomes the tool `mcp_<server>_<tool>` (sanitised, at most 64 characters).
//
// Entry points: newMCPClients (owned by the server; Close stops every server), (*activeRun).addMCPTools
// (at the start of a run), (*mcpClients).doctor.
// Rules: a server is started on first use and shared by every run; a dead one is started again at the
// next use. The handshake is initialize + notifications/initialized; tools/list follows nextCursor and is
// cached until notifications/tools/list_changed. Each call has a timeout (timeoutSec, default 60 s); when
// it passes, notifications/cancelled is sent and the call is a tool error. Over HTTP the session id is
// echoed, and a 404 for it re-initialises once. MCP tools are dangerous (approvals apply) unless the
// server is `trusted: true`. A stdio server gets only PATH, HOME, LANG and its own env — never agentd's
// provider keys.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// mcpServerConfig is one entry of config.yaml's mcpServers.
type mcpServerConfig struct {
	Type       string            `yaml:"type"` // Claude Code's "stdio" or "http"; informative
	Command    string            `yaml:"command"`
	Args       []string          `yaml:"args"`
	Env        map[string]string `yaml:"env"`
	URL        string            `yaml:"url"`
	Headers    map[string]string `yaml:"headers"`
	Trusted    bool              `yaml:"trusted"`    // its tools need no approval
	TimeoutSec int               `yaml:"timeoutSec"` // per call; default 60
}

var mcpServerNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,40}$`)

// checkMCPServers validates mcpServers, naming the key.
func checkMCPServers(servers map[string]mcpServerConfig) error {
	for name, sc := range servers {
		switch {
		case !mcpServerNameRE.MatchString(name):
			return errorf(codeConfig, "mcpServers.%s: a server name is 1-40 letters, digits, _ or -", name)
		case (sc.Command == "") == (sc.URL == ""):
			return errorf(codeConfig, "mcpServers.%s: give either command (stdio) or url (streamable HTTP)", name)
		case sc.URL != "" && !strings.HasPrefix(sc.URL, "http://") && !strings.HasPrefix(sc.URL, "https://"):
			return errorf(codeConfig, "mcpServers.%s.url: expected an http or https URL", name)
		case sc.TimeoutSec < 0 || sc.TimeoutSec > 3600:
			return errorf(codeConfig, "mcpServers.%s.timeoutSec: expected 0-3600", name)
		}
	}
	return nil
}

// mcpToolName is the run tool name of a server's tool: mcp_<server>_<tool>, sanitised, ≤ 64 characters.
func mcpToolName(server, tool string) string {
	clean := func(s string) string {
		return strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
				return r
			}
			return '_'
		}, s)
	}
	n := "mcp_" + clean(server) + "_" + clean(tool)
	if len(n) > 64 {
		h := sha256.Sum256([]byte(server + "/" + tool))
		n = n[:55] + "_" + hex.EncodeToString(h[:4])
	}
	return n
}

// mcpClients owns the MCP servers agentd talks to.
type mcpClients struct {
	cfg map[string]mcpServerConfig
	log *slog.Logger

	mu      sync.Mutex
	conns   map[string]*mcpConn
	closed  bool
	closing sync.WaitGroup // dead connections being stopped in the background
}

func newMCPClients(cfg map[string]mcpServerConfig, log *slog.Logger) *mcpClients {
	return &mcpClients{cfg: cfg, log: log, conns: map[string]*mcpConn{}}
}

// conn returns the live connection to a server, starting it on first use (or again after it died).
func (mc *mcpClients) conn(ctx context.Context, name string) (*mcpConn, error) {
	sc, ok := mc.cfg[name]
	if !ok {
		return nil, errorf(codeToolError, "no MCP server %q in config.yaml's mcpServers", name)
	}
	mc.mu.Lock()
	if mc.closed {
		mc.mu.Unlock()
		return nil, errorf(codeAborted, "the server is shutting down")
	}
	c := mc.conns[name]
	if c == nil || c.dead() {
		if c != nil {
			mc.closing.Go(c.Close)
		}
		c = &mcpConn{name: name, cfg: sc, log: mc.log, pending: map[string]chan *rpcMessage{}}
		mc.conns[name] = c
	}
	mc.mu.Unlock()
	return c, c.start(ctx)
}

// Close stops every server.
func (mc *mcpClients) Close() {
	mc.mu.Lock()
	mc.closed = true
	all := mc.conns
	mc.conns = map[string]*mcpConn{}
	mc.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range all {
		wg.Go(c.Close)
	}
	wg.Wait()
	mc.closing.Wait()
}

// doctor is each configured server's state: not started, running (with its tool count) or failed.
func (mc *mcpClients) doctor() []map[string]any {
	names := make([]string, 0, len(mc.cfg))
	for n := range mc.cfg {
		names = append(names, n)
	}
	sort.Strings(names)
	out := []map[string]any{}
	for _, n := range names {
		sc := mc.cfg[n]
		row := map[string]any{"name": n, "transport": "stdio", "trusted": sc.Trusted, "state": "not started"}
		if sc.URL != "" {
			row["transport"] = "http"
		}
		mc.mu.Lock()
		c := mc.conns[n]
		mc.mu.Unlock()
		if c != nil {
			c.mu.Lock()
			switch {
			case c.startErr != nil:
				row["state"], row["error"] = "failed", c.startErr.Error()
			case c.exited:
				row["state"] = "exited"
			case c.started:
				row["state"], row["tools"], row["protocolVersion"] = "running", len(c.tools), c.proto
			}
			c.mu.Unlock()
		}
		out = append(out, row)
	}
	return out
}

// mcpConn is one server: its transport, the calls in flight, the cached tool list.
type mcpConn struct {
	name string
	cfg  mcpServerConfig
	log  *slog.Logger

	startOnce sync.Once
	mu        sync.Mutex
	started   bool
	startErr  error
	exited    bool
	proto     string
	sid       string // HTTP session id
	tools     []mcpRemoteTool
	toolsOK   bool
	nextID    int64
	pending   map[string]chan *rpcMessage // stdio: request id → its answer

	// stdio
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	wmu    sync.Mutex
	readWG sync.WaitGroup
	// http
	client *http.Client
}

type mcpRemoteTool struct {
	Name        string         `json:"name"`
	Title       string         `json:"title"`
	Description string         `json:"description"`
	InputSchema map[string]any `json:"inputSchema"`
}

func (c *mcpConn) dead() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exited || c.startErr != nil
}

func (c *mcpConn) timeout() time.Duration {
	if c.cfg.TimeoutSec > 0 {
		return time.Duration(c.cfg.TimeoutSec) * time.Second
	}
	return 60 * time.Second
}

// start launches the transport and does the handshake, once.
func (c *mcpConn) start(ctx context.Context) error {
	c.startOnce.Do(func() {
		err := c.open()
		if err == nil {
			// Starting may be slower than a call (npx fetching a package, a cold runtime): at least a minute.
			hctx, cancel := context.WithTimeout(ctx, max(c.timeout(), time.Minute))
			err = c.handshake(hctx)
			cancel()
		}
		c.mu.Lock()
		c.started, c.startErr = err == nil, err
		c.mu.Unlock()
		if err != nil {
			c.log.Warn("mcp client: server failed to start", "server", c.name, "err", err)
		}
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.startErr
}

func (c *mcpConn) open() error {
	if c.cfg.URL != "" {
		c.client = &http.Client{}
		return nil
	}
	cmd := exec.Command(c.cfg.Command, c.cfg.Args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "LANG=" + firstNonEmpty(os.Getenv("LANG"), "C.UTF-8")}
	for k, v := range c.cfg.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return errorf(codeToolError, "MCP server %q: cannot start %s: %v", c.name, c.cfg.Command, err)
	}
	c.cmd, c.stdin = cmd, stdin
	c.readWG.Add(2)
	go func() { // its stderr is its log
		defer c.readWG.Done()
		readLines(stderr, func(l []byte) {
			c.log.Debug("mcp server stderr", "server", c.name, "line", string(bytes.TrimSpace(l)))
		})
	}()
	go func() {
		defer c.readWG.Done()
		readLines(stdout, func(l []byte) {
			var m rpcMessage
			if json.Unmarshal(l, &m) == nil {
				c.receive(&m)
			}
		})
		c.mu.Lock()
		c.exited = true
		for id, ch := range c.pending {
			close(ch)
			delete(c.pending, id)
		}
		c.mu.Unlock()
	}()
	return nil
}

// receive routes one message from the server: an answer to its call, a notification, or a request.
func (c *mcpConn) receive(m *rpcMessage) {
	switch {
	case m.Method == "" && len(m.ID) > 0:
		c.mu.Lock()
		ch := c.pending[string(m.ID)]
		delete(c.pending, string(m.ID))
		c.mu.Unlock()
		if ch != nil {
			ch <- m
		}
	case m.Method == "notifications/tools/list_changed":
		c.mu.Lock()
		c.toolsOK = false
		c.mu.Unlock()
	case m.Method != "" && len(m.ID) > 0 && c.cmd != nil: // a request of the server's (ping; nothing else is offered)
		resp := rpcResponse{JSONRPC: "2.0", ID: m.ID, Result: map[string]any{}}
		if m.Method != "ping" {
			resp = *rpcFail(m.ID, rpcMethodNotFound, "agentd offers no %s", m.Method)
		}
		b, _ := json.Marshal(resp)
		c.write(b)
	}
}

func (c *mcpConn) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.stdin.Write(append(b, '\n'))
	return err
}

func (c *mcpConn) handshake(ctx context.Context) error {
	res, err := c.request(ctx, "initialize", map[string]any{"protocolVersion": mcpLatestVersion, "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "agentd", "version": version}})
	if err != nil {
		return err
	}
	var r struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	json.Unmarshal(res, &r)
	if !mcpSupportedVersion(r.ProtocolVersion) {
		return errorf(codeToolError, "MCP server %q speaks protocol %q, which agentd does not", c.name, r.ProtocolVersion)
	}
	c.mu.Lock()
	c.proto = r.ProtocolVersion
	c.mu.Unlock()
	return c.notify(ctx, "notifications/initialized", nil)
}

// request sends a request and waits for its answer (bounded by ctx); a result or a JSON-RPC error.
func (c *mcpConn) request(ctx context.Context, method string, params any) (json.RawMessage, error) {
	c.mu.Lock()
	c.nextID++
	id := json.RawMessage(fmt.Sprint(c.nextID))
	c.mu.Unlock()
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	var m *rpcMessage
	var err error
	if c.client != nil {
		m, err = c.post(ctx, b, id, method == "initialize")
		if err == errMCPSessionGone && method != "initialize" { // the server forgot us: a new session, once
			c.mu.Lock()
			c.sid = ""
			c.mu.Unlock()
			if err = c.handshake(ctx); err == nil {
				m, err = c.post(ctx, b, id, false)
			}
		}
	} else {
		m, err = c.stdioRoundTrip(ctx, b, id)
	}
	if err != nil {
		if ctx.Err() != nil { // timed out or abandoned: tell the server to stop working on it
			c.notify(context.WithoutCancel(ctx), "notifications/cancelled", map[string]any{"requestId": id, "reason": "timed out or cancelled by agentd"})
		}
		return nil, err
	}
	if m.Error != nil {
		return nil, errorf(codeToolError, "MCP server %q: %s (%d)", c.name, m.Error.Message, m.Error.Code)
	}
	return m.Result, nil
}

var errMCPSessionGone = errors.New("mcp session gone")

func (c *mcpConn) stdioRoundTrip(ctx context.Context, b []byte, id json.RawMessage) (*rpcMessage, error) {
	ch := make(chan *rpcMessage, 1)
	c.mu.Lock()
	if c.exited {
		c.mu.Unlock()
		return nil, errorf(codeToolError, "MCP server %q has exited", c.name)
	}
	c.pending[string(id)] = ch
	c.mu.Unlock()
	if err := c.write(b); err != nil {
		return nil, errorf(codeToolError, "MCP server %q: %v", c.name, err)
	}
	select {
	case m, ok := <-ch:
		if !ok {
			return nil, errorf(codeToolError, "MCP server %q exited during the call", c.name)
		}
		return m, nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.pending, string(id))
		c.mu.Unlock()
		return nil, ctx.Err()
	}
}

// post sends one message over streamable HTTP and returns the answer to id (nil for a notification).
func (c *mcpConn) post(ctx context.Context, b []byte, id json.RawMessage, initialize bool) (*rpcMessage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.URL, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	c.headers(req)
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, errorf(codeToolError, "MCP server %q: %v", c.name, err)
	}
	defer resp.Body.Close()
	c.mu.Lock()
	hadSession := c.sid != ""
	if initialize && resp.Header.Get(mcpSessionHeader) != "" {
		c.sid = resp.Header.Get(mcpSessionHeader)
	}
	c.mu.Unlock()
	if resp.StatusCode == http.StatusNotFound && hadSession && !initialize {
		return nil, errMCPSessionGone
	}
	if resp.StatusCode == http.StatusAccepted || id == nil {
		return nil, nil
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		return nil, errorf(codeToolError, "MCP server %q answered HTTP %d: %s", c.name, resp.StatusCode, bytes.TrimSpace(msg))
	}
	if ct == "text/event-stream" {
		var answer *rpcMessage
		rd := newSSEReader(resp.Body, maxBodyBytes)
		for answer == nil {
			_, data, err := rd.next()
			if err != nil || rd.cut {
				break
			}
			var m rpcMessage
			if len(data) > 0 && json.Unmarshal(data, &m) == nil {
				if m.Method == "" && string(m.ID) == string(id) {
					answer = &m
				} else {
					c.receive(&m)
				}
			}
		}
		if answer == nil {
			return nil, errorf(codeToolError, "MCP server %q ended its stream without an answer", c.name)
		}
		return answer, nil
	}
	var m rpcMessage
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxBodyBytes)).Decode(&m); err != nil {
		return nil, errorf(codeToolError, "MCP server %q: unreadable answer: %v", c.name, err)
	}
	return &m, nil
}

func (c *mcpConn) headers(req *http.Request) {
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range c.cfg.Headers {
		req.Header.Set(k, v)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sid != "" {
		req.Header.Set(mcpSessionHeader, c.sid)
	}
	if c.proto != "" {
		req.Header.Set("MCP-Protocol-Version", c.proto)
	}
}

func (c *mcpConn) notify(ctx context.Context, method string, params any) error {
	msg := map[string]any{"jsonrpc": "2.0", "method": method}
	if params != nil {
		msg["params"] = params
	}
	b, _ := json.Marshal(msg)
	if c.client != nil {
		_, err := c.post(ctx, b, nil, false)
		return err
	}
	return c.write(b)
}

// listTools returns the server's tools, following nextCursor; cached until list_changed.
func (c *mcpConn) listTools(ctx context.Context) ([]mcpRemoteTool, error) {
	c.mu.Lock()
	if c.toolsOK {
		t := c.tools
		c.mu.Unlock()
		return t, nil
	}
	c.mu.Unlock()
	var all []mcpRemoteTool
	cursor := ""
	for page := 0; page < 100; page++ {
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		cctx, cancel := context.WithTimeout(ctx, c.timeout())
		res, err := c.request(cctx, "tools/list", params)
		cancel()
		if err != nil {
			return nil, err
		}
		var r struct {
			Tools      []mcpRemoteTool `json:"tools"`
			NextCursor string          `json:"nextCursor"`
		}
		if err := json.Unmarshal(res, &r); err != nil {
			return nil, errorf(codeToolError, "MCP server %q: unreadable tools/list: %v", c.name, err)
		}
		all = append(all, r.Tools...)
		if cursor = r.NextCursor; cursor == "" {
			break
		}
	}
	c.mu.Lock()
	c.tools, c.toolsOK = all, true
	c.mu.Unlock()
	return all, nil
}

// callTool runs a tool; its isError result is an error of the tool, its text the output.
func (c *mcpConn) callTool(ctx context.Context, name string, args map[string]any) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	if args == nil {
		args = map[string]any{}
	}
	res, err := c.request(cctx, "tools/call", map[string]any{"name": name, "arguments": args})
	if err != nil {
		if errors.Is(cctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
			return "", errorf(codeToolError, "MCP server %q: %s timed out after %s (cancelled)", c.name, name, c.timeout())
		}
		return "", err
	}
	var r struct {
		Content []struct {
			Type     string `json:"type"`
			Text     string `json:"text"`
			MimeType string `json:"mimeType"`
		} `json:"content"`
		StructuredContent json.RawMessage `json:"structuredContent"`
		IsError           bool            `json:"isError"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		return "", errorf(codeToolError, "MCP server %q: unreadable tools/call result: %v", c.name, err)
	}
	var b strings.Builder
	for _, part := range r.Content {
		if part.Type == "text" {
			b.WriteString(part.Text)
		} else {
			fmt.Fprintf(&b, "[%s content %s not shown]", part.Type, part.MimeType)
		}
	}
	if b.Len() == 0 && len(r.StructuredContent) > 0 {
		b.Write(r.StructuredContent)
	}
	if r.IsError {
		return "", errorf(codeToolError, "%s", b.String())
	}
	return b.String(), nil
}

// Close ends the session (HTTP DELETE; stdio: close stdin, then kill if it lingers).
func (c *mcpConn) Close() {
	if c.client != nil {
		c.mu.Lock()
		sid := c.sid
		c.mu.Unlock()
		if sid != "" {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if req, err := http.NewRequestWithContext(ctx, http.MethodDelete, c.cfg.URL, nil); err == nil {
				c.headers(req)
				if resp, err := c.client.Do(req); err == nil {
					resp.Body.Close()
				}
			}
		}
		return
	}
	if c.cmd == nil {
		return
	}
	c.stdin.Close()
	done := make(chan struct{})
	go func() { c.readWG.Wait(); c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		c.cmd.Process.Kill()
		<-done
	}
}

// addMCPTools adds the run's `mcp:` tools (started on first use), warning about a server that fails.
func (ar *activeRun) addMCPTools() {
	mc := ar.rs.mcp
	for _, entry := range ar.spec.Tools {
		rest, ok := strings.CutPrefix(entry, "mcp:")
		if !ok {
			continue
		}
		server, only, _ := strings.Cut(rest, "/")
		if mc == nil {
			ar.warn("mcp", fmt.Sprintf("tool %q: no MCP servers are configured", entry))
			continue
		}
		conn, err := mc.conn(ar.ctx, server)
		var tools []mcpRemoteTool
		if err == nil {
			tools, err = conn.listTools(ar.ctx)
		}
		if err != nil {
			ar.warn("mcp", fmt.Sprintf("MCP server %q is not available, its tools are not offered: %s", server, asAPIError(err).Message))
			continue
		}
		found := false
		for _, t := range tools {
			if only != "" && t.Name != only {
				continue
			}
			found = true
			name := mcpToolName(server, t.Name)
			if slices.Contains(ar.tools, name) {
				continue
			}
			schema := t.InputSchema
			if schema == nil || schema["type"] != "object" {
				schema = map[string]any{"type": "object", "properties": map[string]any{}}
			}
			remote := t.Name
			impl := toolImpl{def: ToolDef{Name: name, Description: firstNonEmpty(t.Description, t.Title, t.Name) + " (MCP server " + server + ")", Parameters: schema},
				run: func(ctx context.Context, _ *toolEnv, args map[string]any) (string, error) {
					return conn.callTool(ctx, remote, args)
				}}
			if ar.extra == nil {
				ar.extra, ar.trusted = map[string]toolImpl{}, map[string]bool{}
			}
			ar.extra[name] = impl
			ar.trusted[name] = conn.cfg.Trusted
			ar.tools = append(ar.tools, name)
			ar.defs = append(ar.defs, impl.def)
		}
		if only != "" && !found {
			ar.warn("mcp", fmt.Sprintf("MCP server %q has no tool %q", server, only))
		}
	}
}
