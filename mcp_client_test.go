package main

import (
	"strings"
	"testing"
)

func TestMCPClientToolNameAndConfig(t *testing.T) {
	if n := mcpToolName("git-hub", "search.repos"); n != "mcp_git_hub_search_repos" {
		t.Fatalf("name %q", n)
	}
	long := mcpToolName("server", strings.Repeat("x", 100))
	if len(long) != 64 || long == mcpToolName("server", strings.Repeat("x", 99)) || !strings.HasPrefix(long, "mcp_server_xxx") {
		t.Fatalf("long name %q", long)
	}
	for _, bad := range []map[string]mcpServerConfig{
		{"a b": {Command: "x"}},
		{"both": {Command: "x", URL: "http://h/mcp"}},
		{"none": {}},
		{"ftp": {URL: "ftp://h/mcp"}},
	} {
		if err := checkMCPServers(bad); err == nil {
			t.Fatalf("accepted %v", bad)
		}
	}
	if err := checkMCPServers(map[string]mcpServerConfig{"fs": {Command: "npx", Args: []string{"x"}}, "web": {URL: "https://h/mcp"}}); err != nil {
		t.Fatal(err)
	}
}

// agentd as an MCP client of agentd: over streamable HTTP (another server's /mcp) and over stdio
// (`agentd mcp` spawned on that server's data directory): tools listed and called, an error surfaced, a
// hang timed out (and cancelled upstream), approvals for an untrusted server's tools, none for a trusted one.
func TestMCPClientAgainstAgentd(t *testing.T) {
	up := newE2E(t, newScriptedOpenAI(t, func(r scriptReq) scriptReply {
		if r.lastUser() == "hang" {
			return scriptReply{hang: true}
		}
		return scriptReply{text: "upstream says hi"}
	}), "")
	up.createAgent(map[string]any{"name": "upagent", "tools": []string{}})
	upHome := up.s.cfg.Home

	scripts := map[string]func(scriptReq) scriptReply{
		"go": stepwise(
			scriptReply{calls: []ToolCall{tc("c1", "mcp_up_list_agents", nil)}},
			scriptReply{calls: []ToolCall{tc("c2", "mcp_up_run_agent", map[string]any{"name": "upagent", "input": "hang"})}},
			scriptReply{calls: []ToolCall{tc("c3", "mcp_self_list_agents", nil)}},
			scriptReply{calls: []ToolCall{tc("c4", "mcp_up_get_run", map[string]any{"runId": "run_nope"})}},
			scriptReply{calls: []ToolCall{tc("c5", "mcp_up_run_agent", map[string]any{"name": "upagent", "input": "hello"})}},
			scriptReply{text: "fin"},
		),
		"again": stepwise(scriptReply{calls: []ToolCall{tc("r1", "mcp_up_list_agents", nil)}}, scriptReply{text: "again done"}),
		"careful": stepwise(
			scriptReply{calls: []ToolCall{tc("t1", "mcp_upt_list_agents", nil)}},
			scriptReply{calls: []ToolCall{tc("t2", "mcp_up_list_agents", nil)}},
			scriptReply{text: "careful done"},
		),
	}
	down := newE2E(t, newScriptedOpenAI(t, func(r scriptReq) scriptReply { return scripts[r.lastUser()](r) }), "", func(c *testSetup) {
		c.MCPServers = map[string]mcpServerConfig{
			"up":  {URL: up.url + "/mcp", TimeoutSec: 2},
			"upt": {URL: up.url + "/mcp", Trusted: true},
			"self": {Command: cliBinary(t), Args: []string{"mcp"}, Env: map[string]string{"AGENT_HOME": upHome,
				"OLLAMA_BASE_URL": "http://127.0.0.1:1", "LMSTUDIO_BASE_URL": "http://127.0.0.1:1"}},
		}
	})
	down.createAgent(map[string]any{"name": "user", "tools": []string{"mcp:up", "mcp:self/list_agents"}})
	evs := down.stream("user", map[string]any{"input": "go"}).all()
	out, isErr := map[string]string{}, map[string]bool{}
	for _, e := range evs {
		if e["type"] == "tool_end" {
			id := e["call"].(map[string]any)["id"].(string)
			out[id], isErr[id] = e["output"].(string), e["isError"] == true
		}
	}
	res := evs[len(evs)-1]["result"].(map[string]any)
	if res["stopReason"] != "complete" || res["text"] != "fin" {
		t.Fatalf("run %v", res)
	}
	if isErr["c1"] || !strings.Contains(out["c1"], `"upagent"`) {
		t.Fatalf("list_agents over HTTP: %v %q", isErr["c1"], out["c1"])
	}
	if !isErr["c2"] || !strings.Contains(out["c2"], "timed out") {
		t.Fatalf("hang: %v %q", isErr["c2"], out["c2"])
	}
	if isErr["c3"] || !strings.Contains(out["c3"], `"upagent"`) {
		t.Fatalf("list_agents over stdio: %v %q", isErr["c3"], out["c3"])
	}
	if !isErr["c4"] || !strings.Contains(out["c4"], "run_nope") {
		t.Fatalf("error surfaced: %v %q", isErr["c4"], out["c4"])
	}
	if isErr["c5"] || !strings.Contains(out["c5"], "upstream says hi") {
		t.Fatalf("run_agent: %v %q", isErr["c5"], out["c5"])
	}
	// The timed-out call was cancelled upstream: its run does not go on.
	eventually(t, "the upstream hanging run ends", func() bool {
		runs := up.call("GET", "/v1/runs?agent=upagent", nil, 200, nil).json(t)["runs"].([]any)
		for _, r := range runs {
			if r.(map[string]any)["status"] == "running" {
				return false
			}
		}
		return len(runs) == 2
	})

	// The upstream forgets the session (404): the client initialises a new one and the call goes through.
	up.s.mcp.mu.Lock()
	var gone []*mcpSession
	for _, ss := range up.s.mcp.byID {
		gone = append(gone, ss)
	}
	up.s.mcp.mu.Unlock()
	if len(gone) != 1 { // up holds one (upt is first used below)
		t.Fatalf("upstream sessions: %d", len(gone))
	}
	for _, ss := range gone {
		ss.Close()
	}
	var again string
	for _, e := range down.stream("user", map[string]any{"input": "again"}).all() {
		if e["type"] == "tool_end" && e["isError"] != true {
			again = e["output"].(string)
		}
	}
	if !strings.Contains(again, `"upagent"`) {
		t.Fatalf("after the upstream session was lost: %q", again)
	}

	// Approvals: the untrusted server's tool asks; the trusted one's does not.
	down.createAgent(map[string]any{"name": "careful", "tools": []string{"mcp:up/list_agents", "mcp:upt/list_agents"},
		"guardrails": map[string]any{"approvalMode": "ask"}})
	s := down.stream("careful", map[string]any{"input": "careful"})
	ev := s.until(t, "approval_required")
	req := ev["request"].(map[string]any)
	if req["tool"] != "mcp_up_list_agents" || req["dangerous"] != true {
		t.Fatalf("approval %v", ev)
	}
	down.call("POST", "/v1/approvals/"+ev["approvalId"].(string), map[string]any{"approve": true}, 200, nil)
	rest := s.all()
	if r := rest[len(rest)-1]["result"].(map[string]any); r["stopReason"] != "complete" {
		t.Fatalf("careful run %v", r)
	}
	// The doctor shows the servers.
	doc := down.call("GET", "/v1/doctor", nil, 200, nil).json(t)
	states := map[string]string{}
	for _, x := range doc["mcpServers"].([]any) {
		m := x.(map[string]any)
		states[m["name"].(string)] = m["state"].(string)
	}
	if states["up"] != "running" || states["upt"] != "running" || states["self"] != "running" {
		t.Fatalf("doctor mcpServers %v", doc["mcpServers"])
	}
}
