// computers_terminal.go — WS /v1/computers/:id/terminal: one command per message, no persistent shell.
//
// Frames (docs/API.md): server → {type: ready, computerId, workdir} on connect; client → a raw string or
// {type: exec, cmd} (one command, run through the command policy) and {type: resize, cols, rows}
// (recorded, not applied); server → {type: stdout|stderr, data}, {type: exit, exitCode, durationMs},
// {type: error, error}. Commands run one after another; closing the socket kills a running command's
// tree. The server's shutdown closes every terminal.
package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/websocket"
)

type terminalFrame struct {
	Type string          `json:"type"`
	Cmd  json.RawMessage `json:"cmd"`
	Cols int             `json:"cols"`
	Rows int             `json:"rows"`
}

func (s *server) handleTerminal(w http.ResponseWriter, r *http.Request) error {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return errorf(codeSpecInvalid, "the terminal speaks WebSocket; this request is not an upgrade").
			withHint("connect with a WebSocket client (Upgrade: websocket)")
	}
	m, _, err := s.computers.getLive(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	if err := s.checkWebsocket(w, r); err != nil {
		return err
	}
	serveWebsocket(w, r, func(conn *websocket.Conn) { s.serveTerminal(conn, m) })
	return nil
}

func (s *server) serveTerminal(conn *websocket.Conn, m *ComputerInfo) {
	defer conn.Close()
	ctx, cancel := context.WithCancel(s.streamCtx)
	defer cancel()
	var wmu sync.Mutex
	send := func(v any) bool {
		wmu.Lock()
		defer wmu.Unlock()
		conn.SetWriteDeadline(time.Now().Add(wsWriteTimeout))
		return websocket.JSON.Send(conn, v) == nil
	}
	// The reader only queues commands, so a closed socket is noticed while a command runs.
	cmds := make(chan ExecRequest, 16)
	go func() {
		defer cancel()
		for {
			var raw string
			if err := websocket.Message.Receive(conn, &raw); err != nil {
				return
			}
			req, ok := parseTerminalFrame(raw, send)
			if !ok {
				continue
			}
			select {
			case cmds <- req:
			case <-ctx.Done():
				return
			default:
				send(map[string]any{"type": "error", "error": errorf(codeQuota, "too many queued commands").withHint("wait for the running command to exit")})
			}
		}
	}()
	if !send(map[string]any{"type": "ready", "computerId": m.ID, "workdir": m.Workdir}) {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case req := <-cmds:
			res, err := s.computers.Exec(ctx, m.ID, req, func(stream, data string) {
				send(map[string]any{"type": stream, "data": data})
			})
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				if !send(map[string]any{"type": "error", "error": s.publicError(context.Background(), err)}) {
					return
				}
				continue
			}
			if !send(map[string]any{"type": "exit", "exitCode": res.ExitCode, "durationMs": res.DurationMS, "timedOut": res.TimedOut}) {
				return
			}
		}
	}
}

// parseTerminalFrame turns one client message into a command; resize frames are recorded only.
func parseTerminalFrame(raw string, send func(any) bool) (ExecRequest, bool) {
	t := strings.TrimSpace(raw)
	if !strings.HasPrefix(t, "{") {
		if t == "" {
			return ExecRequest{}, false
		}
		return ExecRequest{Cmd: execCommand{Shell: raw}}, true
	}
	var f terminalFrame
	if err := json.Unmarshal([]byte(t), &f); err != nil {
		send(map[string]any{"type": "error", "error": errorf(codeSpecInvalid, "malformed frame: %v", err).withHint(`send a command string or {"type":"exec","cmd":"..."}`)})
		return ExecRequest{}, false
	}
	switch f.Type {
	case "resize":
		return ExecRequest{}, false
	case "exec":
		var cmd execCommand
		if len(f.Cmd) == 0 {
			send(map[string]any{"type": "error", "error": errorf(codeSpecInvalid, "cmd: Required").withHint(`send {"type":"exec","cmd":"ls"}`)})
			return ExecRequest{}, false
		}
		if err := cmd.UnmarshalJSON(f.Cmd); err != nil {
			send(map[string]any{"type": "error", "error": asAPIError(err)})
			return ExecRequest{}, false
		}
		return ExecRequest{Cmd: cmd}, true
	}
	send(map[string]any{"type": "error", "error": errorf(codeSpecInvalid, "unknown frame type %q", f.Type).withHint("send exec or resize frames")})
	return ExecRequest{}, false
}
