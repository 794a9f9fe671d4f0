// mcp_stream.go — what MCP clients learn without asking a tool: GET /mcp/info, the server-to-client
// stream of the streamable HTTP transport (GET /mcp), the list_changed notifications it carries, and
// agents as MCP resources.
//
// Entry points: handleMCPInfo (GET /mcp/info), handleMCPStream (GET /mcp, from handleMCP),
// (*mcpSession).resources (resources/list, resources/read from dispatch), mcpAgentNames (the agent
// names run_agent's description lists, so that the tool list changes when the agents do).
// Rules: the stream needs a live session (Mcp-Session-Id: 400 without, 404 unknown) and a client that
// accepts text/event-stream (406); it carries notifications only (agentd sends no requests), a comment
// ping every 15 s, and ends with the session, the client or the server. When an agent is created,
// updated or deleted, every open stream gets notifications/tools/list_changed and
// notifications/resources/list_changed. An agent is the resource agentd://agents/<name>, its text the
// YAML it was created with (application/yaml). /mcp/info reveals nothing a tools/list would not, and is
// behind the token like every route but /health.
package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"time"
)

func (s *server) handleMCPInfo(w http.ResponseWriter, r *http.Request) error {
	rows, err := s.store.ListAgents(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"name": "agentd", "version": version, "transport": "streamable-http", "endpoint": "/mcp",
		"protocolVersions": []string{"2025-11-25", "2025-06-18", "2025-03-26"},
		"authRequired":     s.cfg.Token != "", "tools": len(mcpToolList()), "resources": len(rows),
		"capabilities": mcpCapabilities(),
	})
	return nil
}

func mcpCapabilities() map[string]any {
	return map[string]any{"tools": map[string]any{"listChanged": true}, "resources": map[string]any{"listChanged": true},
		"logging": map[string]any{}}
}

// handleMCPStream is GET /mcp: the session's server-to-client stream.
func (s *server) handleMCPStream(w http.ResponseWriter, r *http.Request) error {
	sid := r.Header.Get(mcpSessionHeader)
	if sid == "" {
		writeRPC(w, http.StatusBadRequest, rpcFail(nil, -32000, "GET /mcp needs the Mcp-Session-Id header of an initialized session"))
		return nil
	}
	ss := s.mcp.get(sid)
	if ss == nil {
		writeRPC(w, http.StatusNotFound, rpcFail(nil, -32001, "session not found; initialize a new one"))
		return nil
	}
	if !strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		writeRPC(w, http.StatusNotAcceptable, rpcFail(nil, -32000, "GET /mcp is an event stream: send Accept: text/event-stream"))
		return nil
	}
	sub, _ := s.hub.subscribe()
	defer s.hub.unsubscribe(sub)
	sse := newSSE(w, 15*time.Second)
	defer sse.close()
	for {
		select {
		case <-r.Context().Done():
			return nil
		case <-ss.ctx.Done():
			return nil
		case <-sse.Done():
			return nil
		case <-sub.dropped:
			return nil
		case ev := <-sub.ch:
			if ev.Topic != "triggers" || !strings.HasPrefix(ev.Type, "agent_") {
				continue
			}
			for _, method := range []string{"notifications/tools/list_changed", "notifications/resources/list_changed"} {
				if sse.send(map[string]any{"jsonrpc": "2.0", "method": method}) != nil {
					return nil
				}
			}
		}
	}
}

const agentResourcePrefix = "agentd://agents/"

// resources answers resources/list and resources/read: the agents, as their YAML.
func (ss *mcpSession) resources(ctx context.Context, method string, params json.RawMessage) (any, *rpcError) {
	st := ss.reg.s.store
	if method == "resources/list" {
		rows, err := st.ListAgents(ctx)
		if err != nil {
			return nil, &rpcError{Code: rpcInternalError, Message: "listing agents failed"}
		}
		out := make([]map[string]any, 0, len(rows))
		for _, row := range rows {
			var spec AgentSpec
			json.Unmarshal([]byte(row.SpecJSON), &spec)
			out = append(out, map[string]any{"uri": agentResourcePrefix + url.PathEscape(row.Name), "name": row.Name,
				"title": "Agent " + row.Name, "description": firstNonEmpty(spec.Description, "the agent spec of "+row.Name),
				"mimeType": "application/yaml"})
		}
		return map[string]any{"resources": out}, nil
	}
	var p struct {
		URI string `json:"uri"`
	}
	if err := json.Unmarshal(params, &p); err != nil || p.URI == "" {
		return nil, &rpcError{Code: rpcInvalidParams, Message: "resources/read needs params.uri"}
	}
	name, ok := strings.CutPrefix(p.URI, agentResourcePrefix)
	if n, err := url.PathUnescape(name); ok && err == nil {
		name = n
	} else {
		ok = false
	}
	row, err := st.GetAgent(ctx, name)
	if !ok || err != nil {
		return nil, &rpcError{Code: -32002, Message: "resource not found: " + p.URI}
	}
	text := row.YAML
	if text == "" {
		var spec AgentSpec
		json.Unmarshal([]byte(row.SpecJSON), &spec)
		text = renderSpecYAML(&spec)
	}
	return map[string]any{"contents": []map[string]any{{"uri": p.URI, "mimeType": "application/yaml", "text": text}}}, nil
}

// mcpAgentNames are the agents run_agent can run now, for its description.
func (ss *mcpSession) mcpAgentNames(ctx context.Context) []string {
	rows, _ := ss.reg.s.store.ListAgents(ctx)
	names := make([]string, 0, len(rows))
	for _, row := range rows {
		names = append(names, row.Name)
	}
	return names
}
