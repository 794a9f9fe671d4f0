package main

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
	"time"
)

// GET /mcp/info; GET /mcp as the session's server-to-client stream (it was 405), carrying
// notifications/tools/list_changed and notifications/resources/list_changed when an agent changes;
// agents as resources (their YAML); run_agent's description naming the agents, so the tool list
// really changes. Over real HTTP on loopback, in the transport's wire format.
func TestMCPStreamInfoAndAgentResources(t *testing.T) {
	ts := newTestServer(t)
	var info map[string]any
	ts.call("GET", "/mcp/info", nil, 200, &info)
	if info["name"] != "agentd" || info["transport"] != "streamable-http" || info["authRequired"] != false || info["tools"] != float64(len(mcpToolList())) || info["resources"] != 0.0 {
		t.Fatalf("info: %v", info)
	}
	c, init := mcpConnect(t, ts, "2025-11-25")
	caps := init["capabilities"].(map[string]any)
	if caps["tools"].(map[string]any)["listChanged"] != true || caps["resources"].(map[string]any)["listChanged"] != true {
		t.Fatalf("capabilities: %v", caps)
	}

	// The stream: refused without a session, with an unknown one, or without Accept; open with both.
	for _, h := range [][]string{{"Accept", "text/event-stream"}, {"Accept", "text/event-stream", "Mcp-Session-Id", "mcp_nope"}} {
		if r := ts.do("GET", "/mcp", nil, h...); r.status != 400 && r.status != 404 {
			t.Fatalf("GET /mcp %v: %d %s", h, r.status, r.body)
		}
	}
	req, _ := http.NewRequest("GET", ts.url+"/mcp", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", c.sid)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream: %d %v", resp.StatusCode, resp.Header)
	}
	frames := make(chan string, 16)
	go func() {
		defer close(frames)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				frames <- data
			}
		}
	}()
	next := func() string {
		t.Helper()
		select {
		case f, ok := <-frames:
			if !ok {
				t.Fatal("the stream ended")
			}
			return f
		case <-time.After(30 * time.Second):
			t.Fatal("no notification within 30 s")
		}
		return ""
	}

	// An agent created: both notifications; it is a resource with its YAML, and run_agent names it.
	yaml := "name: reviewer\ndescription: Reviews diffs.\nmodel: auto\ncomputer: {enabled: false}\ntools: []\n"
	ts.call("POST", "/v1/agents", map[string]any{"yaml": yaml}, 201, nil)
	if a, b := next(), next(); a != `{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}` || b != `{"jsonrpc":"2.0","method":"notifications/resources/list_changed"}` {
		t.Fatalf("notifications: %s %s", a, b)
	}
	list := c.rpc("resources/list", map[string]any{})["result"].(map[string]any)["resources"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["uri"] != "agentd://agents/reviewer" || list[0].(map[string]any)["mimeType"] != "application/yaml" ||
		list[0].(map[string]any)["description"] != "Reviews diffs." {
		t.Fatalf("resources/list: %v", list)
	}
	read := c.rpc("resources/read", map[string]any{"uri": "agentd://agents/reviewer"})["result"].(map[string]any)["contents"].([]any)
	if len(read) != 1 || read[0].(map[string]any)["text"] != yaml {
		t.Fatalf("resources/read: %v", read)
	}
	if e := c.rpc("resources/read", map[string]any{"uri": "agentd://agents/ghost"})["error"].(map[string]any); e["code"] != -32002.0 {
		t.Fatalf("unknown resource: %v", e)
	}
	tools := c.rpc("tools/list", map[string]any{})["result"].(map[string]any)["tools"].([]any)
	for _, x := range tools {
		if tl := x.(map[string]any); tl["name"] == "run_agent" && !strings.Contains(tl["description"].(string), "Agents here now: reviewer.") {
			t.Fatalf("run_agent: %v", tl["description"])
		}
	}
	// Deleted: notified again; info counts it.
	ts.call("DELETE", "/v1/agents/reviewer", nil, 204, nil)
	if a := next(); !strings.Contains(a, "tools/list_changed") {
		t.Fatalf("after delete: %s", a)
	}
	// Ending the session ends its stream.
	ts.do("DELETE", "/mcp", nil, "Mcp-Session-Id", c.sid)
	deadline := time.After(30 * time.Second)
	for {
		select {
		case _, ok := <-frames:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("the stream outlived its session")
		}
	}
}
