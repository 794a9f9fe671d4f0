// mcp_http.go — MCP's streamable HTTP transport at /mcp (revision 2025-11-25).
//
// Entry point: handleMCP (one route for every method: GET opens the session's stream, mcp_stream.go).
// Rules: POST carries one JSON-RPC message; a request is answered as application/json, or as
// text/event-stream when it is a tools/call with a progressToken and the client accepts a stream
// (progress notifications, then the result); a notification or a response is 202 with no body.
// Mcp-Session-Id is minted at initialize; any other message needs it (400 without, 404 when unknown or
// ended). DELETE ends the session (its machine is destroyed). MCP-Protocol-Version, when sent, must be
// one agentd speaks (400). Origin and the bearer token are checked by the server's middleware as on /v1
// (foreign origins 403; a token-less server answers only loopback Host names); loopback origins are
// also accepted here when the Host is loopback (a local client on localhost talking to 127.0.0.1).
package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
)

const mcpSessionHeader = "Mcp-Session-Id"

// writeRPC answers with one JSON-RPC message as application/json.
func writeRPC(w http.ResponseWriter, status int, msg any) {
	b, _ := json.Marshal(msg)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// mcpLoopbackOrigin reports whether an Origin names a loopback host (any port).
func mcpLoopbackOrigin(origin string) bool {
	u, err := url.Parse(origin)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && loopbackHostHeader(u.Host)
}

func (s *server) handleMCP(w http.ResponseWriter, r *http.Request) error {
	// GET is the session's server-to-client stream (mcp_stream.go); anything else but POST and DELETE
	// is answered before any work.
	if r.Method == http.MethodGet {
		return s.handleMCPStream(w, r)
	}
	if r.Method != http.MethodPost && r.Method != http.MethodDelete {
		w.Header().Set("Allow", "GET, POST, DELETE")
		writeRPC(w, http.StatusMethodNotAllowed, rpcFail(nil, -32000, "method not allowed: POST JSON-RPC messages to /mcp; DELETE ends a session"))
		return nil
	}
	if v := r.Header.Get("MCP-Protocol-Version"); v != "" && !mcpSupportedVersion(v) {
		writeRPC(w, http.StatusBadRequest, rpcFail(nil, -32000, "unsupported MCP-Protocol-Version %q; agentd speaks 2025-11-25, 2025-06-18 and 2025-03-26", v))
		return nil
	}
	sid := r.Header.Get(mcpSessionHeader)
	if r.Method == http.MethodDelete {
		if sid == "" {
			writeRPC(w, http.StatusBadRequest, rpcFail(nil, -32000, "DELETE /mcp needs the Mcp-Session-Id header"))
			return nil
		}
		ss := s.mcp.get(sid)
		if ss == nil {
			writeRPC(w, http.StatusNotFound, rpcFail(nil, -32001, "session not found"))
			return nil
		}
		ss.Close()
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(strings.ToLower(strings.TrimSpace(ct)), "application/json") {
		writeRPC(w, http.StatusUnsupportedMediaType, rpcFail(nil, -32000, "Content-Type must be application/json"))
		return nil
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	m, bad := parseRPC(body)
	if bad != nil {
		writeRPC(w, http.StatusBadRequest, bad)
		return nil
	}
	var ss *mcpSession
	if m.Method == "initialize" {
		if len(m.ID) == 0 {
			writeRPC(w, http.StatusBadRequest, rpcFail(nil, rpcInvalidRequest, "initialize must be a request (with an id)"))
			return nil
		}
		if ss, err = s.mcp.open("http", false); err != nil {
			return err
		}
		w.Header().Set(mcpSessionHeader, ss.id)
	} else {
		if sid == "" {
			writeRPC(w, http.StatusBadRequest, rpcFail(m.ID, -32000, "Mcp-Session-Id header is required after initialize"))
			return nil
		}
		if ss = s.mcp.get(sid); ss == nil {
			writeRPC(w, http.StatusNotFound, rpcFail(m.ID, -32001, "session not found; initialize a new one"))
			return nil
		}
	}
	if len(m.ID) == 0 || m.Method == "" { // a notification, or a response to us
		ss.handle(r.Context(), m, nil)
		w.WriteHeader(http.StatusAccepted)
		return nil
	}
	if !wantsProgressStream(r, m) {
		resp := ss.handle(r.Context(), m, nil)
		if resp == nil { // cancelled by the client (notifications/cancelled): no answer
			w.WriteHeader(http.StatusAccepted)
			return nil
		}
		if m.Method == "initialize" && resp.Error != nil {
			ss.Close() // no session behind a failed initialize
			w.Header().Del(mcpSessionHeader)
		}
		writeRPC(w, http.StatusOK, resp)
		return nil
	}
	// The stream: progress notifications as they come, then the response, then the end.
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	var mu sync.Mutex
	send := func(msg any) {
		b, _ := json.Marshal(msg)
		mu.Lock()
		defer mu.Unlock()
		io.WriteString(w, "event: message\ndata: ")
		w.Write(b)
		io.WriteString(w, "\n\n")
		rc.Flush()
	}
	rc.Flush()
	if resp := ss.handle(r.Context(), m, send); resp != nil { // nil: cancelled by the client
		send(resp)
	}
	return nil
}

// wantsProgressStream: a tools/call carrying _meta.progressToken, from a client that accepts a stream.
func wantsProgressStream(r *http.Request, m *rpcMessage) bool {
	if m.Method != "tools/call" || !strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		return false
	}
	var p struct {
		Meta struct {
			ProgressToken json.RawMessage `json:"progressToken"`
		} `json:"_meta"`
	}
	return json.Unmarshal(m.Params, &p) == nil && len(p.Meta.ProgressToken) > 0 && !bytes.Equal(p.Meta.ProgressToken, []byte("null"))
}
