package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// mcpHTTP is a minimal streamable-HTTP client of the test server's /mcp.
type mcpHTTP struct {
	t   *testing.T
	ts  *testServer
	sid string
	n   atomic.Int64
}

func mcpConnect(t *testing.T, ts *testServer, version string) (*mcpHTTP, map[string]any) {
	t.Helper()
	c := &mcpHTTP{t: t, ts: ts}
	r := ts.do("POST", "/mcp", map[string]any{"jsonrpc": "2.0", "id": 0, "method": "initialize",
		"params": map[string]any{"protocolVersion": version, "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "test", "version": "1"}}},
		"Accept", "application/json, text/event-stream")
	if r.status != 200 || r.header.Get("Mcp-Session-Id") == "" {
		t.Fatalf("initialize: %d %v %s", r.status, r.header, r.body)
	}
	c.sid = r.header.Get("Mcp-Session-Id")
	if r := c.post(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"}); r.status != 202 || len(r.body) != 0 {
		t.Fatalf("initialized: %d %s", r.status, r.body)
	}
	return c, r.json(t)["result"].(map[string]any)
}

func (c *mcpHTTP) post(msg any, headers ...string) response {
	c.t.Helper()
	h := append([]string{"Accept", "application/json, text/event-stream", "Mcp-Session-Id", c.sid, "MCP-Protocol-Version", "2025-11-25"}, headers...)
	return c.ts.do("POST", "/mcp", msg, h...)
}

// rpc sends a request and returns the whole answer (result or error).
func (c *mcpHTTP) rpc(method string, params any) map[string]any {
	c.t.Helper()
	id := c.n.Add(1)
	r := c.post(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
		c.t.Fatalf("%s: %d %s", method, r.status, r.body)
	}
	m := r.json(c.t)
	if m["id"].(float64) != float64(id) || m["jsonrpc"] != "2.0" {
		c.t.Fatalf("%s: answer %v", method, m)
	}
	return m
}

// call runs a tool and returns its text and isError.
func (c *mcpHTTP) call(name string, args map[string]any) (string, bool, map[string]any) {
	c.t.Helper()
	m := c.rpc("tools/call", map[string]any{"name": name, "arguments": args})
	res, ok := m["result"].(map[string]any)
	if !ok {
		c.t.Fatalf("tools/call %s: %v", name, m)
	}
	return mcpText(res), res["isError"] == true, res
}

func mcpText(res map[string]any) string {
	var b strings.Builder
	for _, c := range res["content"].([]any) {
		if text, ok := c.(map[string]any)["text"].(string); ok { // an image has none
			b.WriteString(text)
		}
	}
	return b.String()
}

func rpcCode(m map[string]any) float64 {
	e, _ := m["error"].(map[string]any)
	if e == nil {
		return 0
	}
	return e["code"].(float64)
}

func TestMCPHTTPLifecycleAndErrors(t *testing.T) {
	ts := newTestServer(t)
	for _, v := range []string{"2025-11-25", "2025-06-18", "2025-03-26"} {
		_, res := mcpConnect(t, ts, v)
		if res["protocolVersion"] != v {
			t.Fatalf("version %s: answered %v", v, res["protocolVersion"])
		}
	}
	c, res := mcpConnect(t, ts, "1999-01-01")
	caps := res["capabilities"].(map[string]any)
	if res["protocolVersion"] != mcpLatestVersion || caps["tools"] == nil || caps["logging"] == nil ||
		res["serverInfo"].(map[string]any)["name"] != "agentd" {
		t.Fatalf("initialize result %v", res)
	}
	if m := c.rpc("ping", nil); m["result"] == nil || len(m["result"].(map[string]any)) != 0 {
		t.Fatalf("ping %v", m)
	}
	// Tools: names, titles, descriptions, object schemas.
	tools := c.rpc("tools/list", map[string]any{})["result"].(map[string]any)["tools"].([]any)
	want := []string{"browse", "browser_click", "browser_hover", "browser_navigate", "browser_screenshot", "browser_scroll",
		"browser_select", "browser_snapshot", "browser_status", "browser_tabs", "browser_type", "browser_wait_for", "browser_goto",
		"computer_info", "edit_file", "expose_port", "get_run", "list_agents", "list_computers", "list_dir",
		"list_runs", "read_file", "run_agent", "shell", "write_file"}
	sort.Strings(want)
	var got []string
	nameRE := regexp.MustCompile(`^[a-z0-9_]{1,64}$`)
	for _, x := range tools {
		tl := x.(map[string]any)
		got = append(got, tl["name"].(string))
		sch, _ := tl["inputSchema"].(map[string]any)
		if !nameRE.MatchString(tl["name"].(string)) || tl["title"] == "" || tl["description"] == "" || sch["type"] != "object" || sch["properties"] == nil {
			t.Fatalf("tool %v", tl)
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("tools %v", got)
	}
	// Logging.
	if m := c.rpc("logging/setLevel", map[string]any{"level": "debug"}); m["result"] == nil {
		t.Fatalf("setLevel %v", m)
	}
	if m := c.rpc("logging/setLevel", map[string]any{"level": "loud"}); rpcCode(m) != rpcInvalidParams {
		t.Fatalf("bad level %v", m)
	}
	// JSON-RPC errors.
	if m := c.rpc("prompts/list", nil); rpcCode(m) != rpcMethodNotFound {
		t.Fatalf("unknown method %v", m)
	}
	if m := c.rpc("tools/call", map[string]any{"name": "nope"}); rpcCode(m) != rpcInvalidParams {
		t.Fatalf("unknown tool %v", m)
	}
	if m := c.rpc("tools/call", map[string]any{"name": "shell", "arguments": "ls"}); rpcCode(m) != rpcInvalidParams {
		t.Fatalf("arguments not an object %v", m)
	}
	if r := c.post(`{"jsonrpc":"2.0","id":1,`); r.status != 400 || rpcCode(r.json(t)) != rpcParseError {
		t.Fatalf("parse error: %d %s", r.status, r.body)
	}
	if r := c.post(`{"jsonrpc":"1.0","id":1,"method":"ping"}`); r.status != 400 || rpcCode(r.json(t)) != rpcInvalidRequest {
		t.Fatalf("invalid request: %d %s", r.status, r.body)
	}
	if r := c.post(`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`); r.status != 400 || rpcCode(r.json(t)) != rpcInvalidRequest {
		t.Fatalf("batch: %d %s", r.status, r.body)
	}
	// A tool's argument error is a tool result, not a protocol error.
	if text, isErr, _ := c.call("get_run", map[string]any{}); !isErr || !strings.Contains(text, "runId") {
		t.Fatalf("missing argument: %v %q", isErr, text)
	}
	// Transport rules.
	ping := map[string]any{"jsonrpc": "2.0", "id": 9, "method": "ping"}
	if r := c.post(ping, "Mcp-Session-Id", ""); r.status != 400 {
		t.Fatalf("no session: %d %s", r.status, r.body)
	}
	if r := c.post(ping, "Mcp-Session-Id", "mcp_unknown"); r.status != 404 {
		t.Fatalf("unknown session: %d %s", r.status, r.body)
	}
	if r := c.post(ping, "MCP-Protocol-Version", "2024-01-01"); r.status != 400 {
		t.Fatalf("bad protocol version: %d %s", r.status, r.body)
	}
	if r := c.post(ping, "Origin", "https://evil.example"); r.status != 403 {
		t.Fatalf("foreign origin: %d %s", r.status, r.body)
	}
	if r := c.post(ping, "Origin", "http://localhost:1234"); r.status != 200 {
		t.Fatalf("loopback origin: %d %s", r.status, r.body)
	}
	if r := c.post(ping, "Host", "evil.example.com", "Origin", "http://evil.example.com"); r.status != 403 {
		t.Fatalf("rebinding: %d %s", r.status, r.body)
	}
	if r := c.post(ping, "Content-Type", "text/plain"); r.status != 415 {
		t.Fatalf("content type: %d %s", r.status, r.body)
	}
	if r := ts.do("GET", "/mcp", nil, "Mcp-Session-Id", c.sid); r.status != 406 { // the stream wants Accept: text/event-stream
		t.Fatalf("GET: %d %v", r.status, r.header)
	}
	if r := ts.do("PUT", "/mcp", nil, "Mcp-Session-Id", c.sid); r.status != 405 || r.header.Get("Allow") != "GET, POST, DELETE" {
		t.Fatalf("PUT: %d %v", r.status, r.header)
	}
	if r := ts.do("DELETE", "/mcp", nil, "Mcp-Session-Id", c.sid); r.status != 204 {
		t.Fatalf("DELETE: %d %s", r.status, r.body)
	}
	if r := c.post(ping); r.status != 404 {
		t.Fatalf("after DELETE: %d %s", r.status, r.body)
	}
	if r := ts.do("DELETE", "/mcp", nil, "Mcp-Session-Id", c.sid); r.status != 404 {
		t.Fatalf("DELETE again: %d %s", r.status, r.body)
	}
}

func TestMCPHTTPBearerToken(t *testing.T) {
	ts := newTestServer(t, func(c *testSetup) { c.Token = "a-long-enough-test-token" })
	r := ts.do("POST", "/mcp", map[string]any{"jsonrpc": "2.0", "id": 1, "method": "ping"}, "Authorization", "")
	if r.status != 401 {
		t.Fatalf("no token: %d %s", r.status, r.body)
	}
}

// The HTTP transport never runs machine tools on the local provider: a tool result says why.
func TestMCPHTTPRefusesLocalProvider(t *testing.T) {
	ts := newTestServer(t, func(c *testSetup) { c.ComputerProvider = "local" })
	c, _ := mcpConnect(t, ts, mcpLatestVersion)
	text, isErr, _ := c.call("shell", map[string]any{"command": "echo hi"})
	if !isErr || !strings.Contains(text, "isolated provider") || !strings.Contains(text, `"local"`) {
		t.Fatalf("shell over HTTP on local: %v %q", isErr, text)
	}
	if list, _ := ts.s.store.ListComputers(context.Background()); len(list) != 0 {
		t.Fatalf("a machine was made: %v", list)
	}
}

func TestMCPControlPlaneTools(t *testing.T) {
	so := newScriptedOpenAI(t, stepwise(
		scriptReply{text: "Looking.", calls: []ToolCall{tc("c1", "shell", map[string]any{"command": "echo tool-ran"})}},
		scriptReply{text: "All done here."},
	))
	ts := newE2E(t, so, "")
	ts.createAgent(map[string]any{"name": "helper", "description": "helps", "tools": []string{"computer"}})
	c, _ := mcpConnect(t, ts, mcpLatestVersion)

	text, isErr, res := c.call("list_agents", nil)
	if isErr || !strings.Contains(text, `"helper"`) || res["structuredContent"] == nil {
		t.Fatalf("list_agents: %v %s", isErr, text)
	}
	// run_agent with a progress token: the answer is an event stream of progress, then the result.
	r := c.post(map[string]any{"jsonrpc": "2.0", "id": 50, "method": "tools/call", "params": map[string]any{
		"name": "run_agent", "arguments": map[string]any{"name": "helper", "input": "go"}, "_meta": map[string]any{"progressToken": "tok-1"}}})
	if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("run_agent stream: %d %v %s", r.status, r.header, r.body)
	}
	var msgs []map[string]any
	for _, line := range strings.Split(string(r.body), "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			var m map[string]any
			if err := json.Unmarshal([]byte(d), &m); err != nil {
				t.Fatal(err)
			}
			msgs = append(msgs, m)
		}
	}
	if len(msgs) < 3 {
		t.Fatalf("stream: %s", r.body)
	}
	last := msgs[len(msgs)-1]
	for i, m := range msgs[:len(msgs)-1] {
		p := m["params"].(map[string]any)
		if m["method"] != "notifications/progress" || p["progressToken"] != "tok-1" || p["progress"].(float64) != float64(i+1) {
			t.Fatalf("progress %d: %v", i, m)
		}
	}
	result := last["result"].(map[string]any)
	sc := result["structuredContent"].(map[string]any)
	if last["id"].(float64) != 50 || result["isError"] != false || !strings.Contains(mcpText(result), "All done here.") ||
		!strings.Contains(mcpText(result), "stopReason complete") || sc["stopReason"] != "complete" {
		t.Fatalf("result %v", last)
	}
	runID := sc["runId"].(string)
	// Without a token: plain JSON.
	text, isErr, _ = c.call("run_agent", map[string]any{"name": "helper", "input": "again"})
	if isErr || !strings.Contains(text, "stopReason complete") {
		t.Fatalf("run_agent json: %v %s", isErr, text)
	}
	if text, isErr, _ = c.call("run_agent", map[string]any{"name": "ghost", "input": "x"}); !isErr || !strings.Contains(text, "ghost") {
		t.Fatalf("unknown agent: %v %s", isErr, text)
	}
	if text, isErr, _ = c.call("list_runs", map[string]any{"agent": "helper", "limit": 1}); isErr || !strings.Contains(text, "nextCursor") {
		t.Fatalf("list_runs: %v %s", isErr, text)
	}
	if text, isErr, _ = c.call("get_run", map[string]any{"runId": runID}); isErr || !strings.Contains(text, "tool-ran") || !strings.Contains(text, `"trigger":"mcp"`) && !strings.Contains(text, runID) {
		t.Fatalf("get_run: %v %s", isErr, text)
	}
	if text, isErr, _ = c.call("get_run", map[string]any{"runId": "run_nope"}); !isErr || !strings.Contains(text, "run_nope") {
		t.Fatalf("get_run unknown: %v %s", isErr, text)
	}
	if text, isErr, _ = c.call("list_computers", nil); isErr || !strings.Contains(text, `"computers"`) {
		t.Fatalf("list_computers: %v %s", isErr, text)
	}
}

// mcpStdio drives serveMCPStdio over pipes.
type mcpStdio struct {
	t    *testing.T
	in   *io.PipeWriter
	out  chan map[string]any
	done chan error
}

func startMCPStdio(t *testing.T, ts *testServer, keep bool) (*mcpStdio, *mcpSession) {
	ss, err := ts.s.mcp.open("stdio", keep)
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := &mcpStdio{t: t, in: inW, out: make(chan map[string]any, 100), done: make(chan error, 1)}
	go func() {
		c.done <- serveMCPStdio(context.Background(), ss, inR, outW, ts.s.log)
		ss.Close()
		outW.Close()
	}()
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<24)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Errorf("stdout line is not JSON: %q", sc.Text())
				continue
			}
			c.out <- m
		}
		close(c.out)
	}()
	t.Cleanup(func() { inW.Close(); <-c.done })
	return c, ss
}

func (c *mcpStdio) send(line string) {
	c.t.Helper()
	if _, err := io.WriteString(c.in, line+"\n"); err != nil {
		c.t.Fatal(err)
	}
}

func (c *mcpStdio) next() map[string]any {
	c.t.Helper()
	select {
	case m := <-c.out:
		return m
	case <-time.After(2 * time.Minute):
		c.t.Fatal("no message on stdout")
	}
	return nil
}

func (c *mcpStdio) tool(id int, name string, args map[string]any) (string, bool) {
	c.t.Helper()
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": map[string]any{"name": name, "arguments": args}})
	c.send(string(b))
	m := c.next()
	if m["id"].(float64) != float64(id) {
		c.t.Fatalf("answer %v", m)
	}
	res := m["result"].(map[string]any)
	return mcpText(res), res["isError"] == true
}

// Over stdio the local provider may run the machine tools, and the first result says so.
func TestMCPStdioMachineTools(t *testing.T) {
	so := newScriptedOpenAI(t, stepwise())
	ts := newE2E(t, so, "", func(c *testSetup) { c.ComputerProvider = "local" })
	c, ss := startMCPStdio(t, ts, false)
	c.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if m := c.next(); m["result"].(map[string]any)["protocolVersion"] != "2025-11-25" {
		t.Fatalf("initialize %v", m)
	}
	c.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	c.send(`not json`)
	if m := c.next(); rpcCode(m) != rpcParseError {
		t.Fatalf("parse error %v", m)
	}
	text, isErr := c.tool(2, "shell", map[string]any{"command": "echo hello-mcp"})
	if isErr || !strings.Contains(text, "hello-mcp") || !strings.Contains(text, "provider local") || !strings.Contains(text, "NOT isolated") {
		t.Fatalf("first shell: %v %q", isErr, text)
	}
	text, isErr = c.tool(3, "shell", map[string]any{"command": "echo again"})
	if isErr || strings.Contains(text, "provider") || !strings.Contains(text, "again") {
		t.Fatalf("second shell: %v %q", isErr, text)
	}
	if text, isErr = c.tool(4, "shell", map[string]any{"command": "echo oops >&2; exit 3"}); !isErr || !strings.Contains(text, "exit code 3") || !strings.Contains(text, "oops") {
		t.Fatalf("failing command: %v %q", isErr, text)
	}
	if text, isErr = c.tool(5, "shell", map[string]any{"command": "rm -rf /"}); !isErr || !strings.Contains(text, "refused") {
		t.Fatalf("policy: %v %q", isErr, text)
	}
	if text, isErr = c.tool(6, "write_file", map[string]any{"path": "notes/a.txt", "content": "one\ntwo\n"}); isErr {
		t.Fatalf("write_file: %q", text)
	}
	if text, isErr = c.tool(7, "edit_file", map[string]any{"path": "notes/a.txt", "old_string": "two", "new_string": "TWO"}); isErr {
		t.Fatalf("edit_file: %q", text)
	}
	if text, isErr = c.tool(8, "read_file", map[string]any{"path": "/work/notes/a.txt"}); isErr || !strings.Contains(text, "TWO") {
		t.Fatalf("read_file: %v %q", isErr, text)
	}
	if text, isErr = c.tool(9, "list_dir", map[string]any{"recursive": true}); isErr || !strings.Contains(text, "/work/notes/a.txt") {
		t.Fatalf("list_dir: %v %q", isErr, text)
	}
	if text, isErr = c.tool(10, "read_file", map[string]any{"path": "/etc/passwd"}); !isErr {
		t.Fatalf("jail: %q", text)
	}
	if text, isErr = c.tool(11, "computer_info", nil); isErr || !strings.Contains(text, `"provider":"local"`) {
		t.Fatalf("computer_info: %v %q", isErr, text)
	}
	// Secrets in output are redacted as in runs.
	if text, _ = c.tool(12, "shell", map[string]any{"command": "echo sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD"}); strings.Contains(text, "abcdefghijklmnopqrstuvwxyz0123456789") {
		t.Fatalf("not redacted: %q", text)
	}
	ss.machMu.Lock()
	id := ss.machineID
	ss.machMu.Unlock()
	if info, err := ts.s.computers.Get(context.Background(), id); err != nil || info.State != stateRunning {
		t.Fatalf("machine %s: %v %v", id, info, err)
	}
	// EOF ends the session: exit status nil, machine destroyed.
	c.in.Close()
	if err := <-c.done; err != nil {
		t.Fatal(err)
	}
	c.done <- nil
	eventually(t, "the session's machine is destroyed", func() bool {
		_, err := ts.s.computers.Get(context.Background(), id)
		return err != nil
	})
}

// A progress token over stdio: progress notifications on stdout before the answer; ping is answered
// while a call runs.
func TestMCPStdioRunAgentProgress(t *testing.T) {
	so := newScriptedOpenAI(t, stepwise(scriptReply{text: "Thinking.", calls: []ToolCall{tc("c1", "shell", map[string]any{"command": "echo x"})}},
		scriptReply{text: "Answer: 42"}))
	ts := newE2E(t, so, "")
	ts.createAgent(map[string]any{"name": "calc", "tools": []string{"computer"}})
	c, _ := startMCPStdio(t, ts, false)
	c.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	c.next()
	c.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_agent","arguments":{"name":"calc","input":"q"},"_meta":{"progressToken":7}}}`)
	var progress int
	for {
		m := c.next()
		if m["method"] == "notifications/progress" {
			if m["params"].(map[string]any)["progressToken"].(float64) != 7 {
				t.Fatalf("progress %v", m)
			}
			progress++
			continue
		}
		res := m["result"].(map[string]any)
		if m["id"].(float64) != 2 || !strings.Contains(mcpText(res), "Answer: 42") || progress < 2 {
			t.Fatalf("answer after %d progress: %v", progress, m)
		}
		break
	}
}

// Docker: the HTTP transport runs the machine tools, says which provider, and DELETE destroys the machine.
func TestMCPHTTPMachineDocker(t *testing.T) {
	requireProvider(t, "docker")
	ts := newTestServer(t, withHostEnv, func(c *testSetup) { c.ComputerProvider = "docker" })
	c, _ := mcpConnect(t, ts, mcpLatestVersion)
	text, isErr, _ := c.call("shell", map[string]any{"command": "echo in-container; test -f /.dockerenv && echo dockerenv"})
	if isErr || !strings.Contains(text, "provider docker") || !strings.Contains(text, "in-container") {
		t.Fatalf("shell: %v %q", isErr, text)
	}
	if text, isErr, _ = c.call("shell", map[string]any{"command": "false"}); !isErr || !strings.Contains(text, "exit code 1") {
		t.Fatalf("false: %v %q", isErr, text)
	}
	list, _ := ts.s.store.ListComputers(context.Background())
	if len(list) != 1 {
		t.Fatalf("machines %v", list)
	}
	if r := ts.do("DELETE", "/mcp", nil, "Mcp-Session-Id", c.sid); r.status != 204 {
		t.Fatalf("DELETE %d %s", r.status, r.body)
	}
	if _, err := ts.s.computers.Get(context.Background(), list[0].ID); err == nil {
		t.Fatal(fmt.Sprintf("machine %s survived the session", list[0].ID))
	}
}

// `agentd mcp` with AGENT_URL relays stdio to the server's /mcp; EOF deletes the HTTP session.
func TestMCPStdioRelaysToAgentURL(t *testing.T) {
	ts := newTestServer(t, func(c *testSetup) { c.ComputerProvider = "local" })
	cmd := exec.Command(cliBinary(t), "mcp")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "AGENT_URL=" + ts.url, "HOME=" + t.TempDir()}
	cmd.Stdin = strings.NewReader(strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"shell","arguments":{"command":"echo hi"}}}`,
		`{"jsonrpc":"2.0","id":4,"method":"nope"}`,
	}, "\n") + "\n")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("agentd mcp: %v\n%s", err, stderr.String())
	}
	byID := map[float64]map[string]any{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("stdout line %q: %v", line, err)
		}
		byID[m["id"].(float64)] = m
	}
	if len(byID) != 4 || byID[1]["result"].(map[string]any)["protocolVersion"] != "2025-11-25" ||
		len(byID[2]["result"].(map[string]any)["tools"].([]any)) != len(mcpToolList()) || rpcCode(byID[4]) != rpcMethodNotFound {
		t.Fatalf("answers %s", out)
	}
	// Relayed to HTTP: the HTTP rule holds (no machine tools on the local provider).
	if res := byID[3]["result"].(map[string]any); res["isError"] != true || !strings.Contains(mcpText(res), "isolated provider") {
		t.Fatalf("shell %v", res)
	}
	ts.s.mcp.mu.Lock()
	n := len(ts.s.mcp.byID)
	ts.s.mcp.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d sessions left after EOF", n)
	}
}

// An HTTP session left without DELETE ends once idle past the TTL (seen at the next request).
func TestMCPHTTPIdleSessionEnds(t *testing.T) {
	clock := newFakeClock()
	ts := newTestServer(t, withClock(clock.now))
	old, _ := mcpConnect(t, ts, mcpLatestVersion)
	clock.advance(30 * time.Minute)
	if m := old.rpc("ping", nil); m["result"] == nil { // used: its idle time starts again
		t.Fatalf("ping %v", m)
	}
	clock.advance(ts.s.mcp.idleTTL - time.Minute)
	fresh, _ := mcpConnect(t, ts, mcpLatestVersion)
	if r := old.post(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "ping"}); r.status != 200 {
		t.Fatalf("a session used within the TTL ended: %d", r.status)
	}
	clock.advance(ts.s.mcp.idleTTL + time.Minute)
	fresh.rpc("ping", nil) // any request sweeps the idle sessions (never its own)
	if r := old.post(map[string]any{"jsonrpc": "2.0", "id": 2, "method": "ping"}); r.status != 404 {
		t.Fatalf("idle session: %d %s", r.status, r.body)
	}
}

// notifications/cancelled over stdio: the call stops (its run ends cancelled), no answer is sent for
// it, and the session goes on.
func TestMCPStdioCancelledRequest(t *testing.T) {
	so := newScriptedOpenAI(t, func(r scriptReq) scriptReply { return scriptReply{hang: true} })
	ts := newE2E(t, so, "")
	ts.createAgent(map[string]any{"name": "stuck", "tools": []string{}})
	c, _ := startMCPStdio(t, ts, false)
	c.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	c.next()
	c.send(`{"jsonrpc":"2.0","id":"r1","method":"tools/call","params":{"name":"run_agent","arguments":{"name":"stuck","input":"x"}}}`)
	var runID string
	eventually(t, "the run starts", func() bool {
		runs := ts.call("GET", "/v1/runs?agent=stuck", nil, 200, nil).json(t)["runs"].([]any)
		if len(runs) == 1 {
			runID = runs[0].(map[string]any)["runId"].(string)
		}
		return runID != ""
	})
	c.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"r1","reason":"user stop"}}`)
	eventually(t, "the run ends", func() bool {
		sum := ts.call("GET", "/v1/runs/"+runID, nil, 200, nil).json(t)["result"].(map[string]any)
		return sum["stopReason"] != nil && sum["stopReason"] != "" || sum["status"] != nil && sum["status"] != "running"
	})
	c.send(`{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	if m := c.next(); m["id"] != float64(2) || m["result"] == nil {
		t.Fatalf("after the cancel, the next message is %v (want the ping's answer, nothing for r1)", m)
	}
}
