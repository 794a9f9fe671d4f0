package main

import (
	"context"
	"strings"
	"testing"
)

// BenchmarkMCPShellRoundTrip: MCP `shell` over streamable HTTP next to POST /v1/computers/{id}/exec, on
// the same docker machine, in the same run (BENCHMARKS.md):
//
//	go test -run '^$' -bench BenchmarkMCPShellRoundTrip -benchtime 200x .
func BenchmarkMCPShellRoundTrip(b *testing.B) {
	ts := newTestServer(b, withHostEnv, func(c *testSetup) { c.ComputerProvider = "docker" })
	if pr := ts.s.computers.probe(context.Background(), ts.s.computers.providerByName("docker")); !pr.available {
		b.Skipf("docker unavailable: %s", pr.reason)
	}
	init := ts.do("POST", "/mcp", map[string]any{"jsonrpc": "2.0", "id": 0, "method": "initialize",
		"params": map[string]any{"protocolVersion": mcpLatestVersion, "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "bench", "version": "1"}}})
	sid := init.header.Get(mcpSessionHeader)
	shell := func(i int) {
		r := ts.do("POST", "/mcp", map[string]any{"jsonrpc": "2.0", "id": i, "method": "tools/call",
			"params": map[string]any{"name": "shell", "arguments": map[string]any{"command": "echo hi"}}},
			"Mcp-Session-Id", sid, "MCP-Protocol-Version", mcpLatestVersion, "Accept", "application/json, text/event-stream")
		if r.status != 200 || !strings.Contains(string(r.body), `"isError":false`) {
			b.Fatalf("shell: %d %s", r.status, r.body)
		}
	}
	shell(1) // creates the session's machine
	ss := ts.s.mcp.get(sid)
	ss.machMu.Lock()
	id := ss.machineID
	ss.machMu.Unlock()
	for i := range 5 { // warm both paths
		shell(2 + i)
		ts.call("POST", "/v1/computers/"+id+"/exec", map[string]any{"cmd": "echo hi"}, 200, nil)
	}
	b.Run("v1-exec", func(b *testing.B) {
		for b.Loop() {
			ts.call("POST", "/v1/computers/"+id+"/exec", map[string]any{"cmd": "echo hi"}, 200, nil)
		}
	})
	b.Run("mcp-shell", func(b *testing.B) {
		i := 100
		for b.Loop() {
			i++
			shell(i)
		}
	})
	ts.do("DELETE", "/mcp", nil, "Mcp-Session-Id", sid)
}
