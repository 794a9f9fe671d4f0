// computers_terminal.go — WS /v1/computers/:id/terminal: one command per message, no persistent shell;
// and, as an addition (issue 26), one command on a real pseudo-terminal (`agentd exec -it`, `agentd shell`).
//
// Frames (docs/API.md): server → {type: ready, computerId, workdir} on connect; client → a raw string or
// {type: exec, cmd} (one command, run through the command policy) and {type: resize, cols, rows}
// (recorded, not applied); server → {type: stdout|stderr, data}, {type: exit, exitCode, durationMs},
// {type: error, error}. Commands run one after another; closing the socket kills a running command's
// tree. The server's shutdown closes every terminal.
//
// Addition: {type: exec, cmd, tty: true, cols, rows} runs cmd on a pseudo-terminal of that size
// (ExecTTY: docker/podman/kubernetes; local and sandbox answer E_NOT_IMPLEMENTED); the server answers
// {type: started} once it runs, then {type: stdout, data} (the terminal's output, both streams as a
// terminal merges them) and {type: exit, exitCode}; the client sends keystrokes as {type: stdin, data},
// and {type: resize, cols, rows} is applied to it (the program gets SIGWINCH). A session lasts until the
// command exits or the socket closes (at most termSessionMax).
package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/websocket"
)

type terminalFrame struct {
	Type string          `json:"type"`
	Cmd  json.RawMessage `json:"cmd"`
	Cols int             `json:"cols"`
	Rows int             `json:"rows"`
	TTY  bool            `json:"tty"`
	Data string          `json:"data"`
}

// termCmd is one queued command; cols and rows size a tty command's terminal.
type termCmd struct {
	req        ExecRequest
	cols, rows int
}

// termSessionMax bounds one interactive terminal session.
const termSessionMax = 12 * time.Hour

// ExecTTY runs one command on a pseudo-terminal of cols×rows after the command policy allowed it: in
// carries keystrokes, resize new sizes, out the terminal's output; started is called once it runs. The
// host process (docker exec -it, kubectl exec -it) gets the terminal as its controlling one, so a resize
// reaches the program inside as SIGWINCH. Providers without a tty refuse it (E_NOT_IMPLEMENTED).
func (c *computerService) ExecTTY(ctx context.Context, id string, req ExecRequest, cols, rows int, in <-chan string, resize <-chan [2]int, started func(), out func(data string)) (*ExecResult, error) {
	req.TTY = true
	// A person at a terminal types what runs: like a human who approved the very call in `ask` mode
	// (commandPolicy.Seen), the session's own shell is not refused as a program read from stdin; what the
	// policy sees on its lists (sudo, denyCommands) still refuses the command that starts it. Agents and MCP
	// clients have no tty session: this is the terminal WebSocket's alone (`agentd exec -it`, `agentd shell`).
	req.Policy.Seen = true
	x, err := c.prepareExec(ctx, id, req)
	if err != nil {
		return nil, err
	}
	master, slave, err := openPTY()
	if err != nil {
		return nil, errorf(codeNotImplemented, "this server cannot open a pseudo-terminal: %v", err).withHint("run the command without tty")
	}
	defer slave.Close() // runProc closes it once the process holds it; this covers an early error
	if setWindowSize(master, cols, rows) != nil {
		cols, rows = 80, 24
		setWindowSize(master, cols, rows)
	}
	x.ps.term = &ptyPair{master: master, slave: slave, cols: cols, rows: rows, started: started}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // keystrokes and resizes into the terminal until the command ended
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case d := <-in:
				master.Write([]byte(d))
			case sz := <-resize:
				setWindowSize(master, sz[0], sz[1])
			}
		}
	}()
	defer func() { close(done); master.Close(); wg.Wait() }() // Close unblocks a write to a full terminal
	c.beginUse(x.m.ID)
	defer c.endUse(x.m.ID)
	return c.runProc(ctx, x.p, x.m, x.ps, termSessionMax, 64<<10, func(_, data string) { out(data) })
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
	// The reader only queues commands, so a closed socket is noticed while a command runs. Keystrokes and
	// resizes go to the tty command queued or running (ttyOn); without one they are dropped.
	cmds := make(chan termCmd, 16)
	input, resizes := make(chan string, 256), make(chan [2]int, 8)
	var ttyOn atomic.Bool
	go func() {
		defer cancel()
		for {
			var raw string
			if err := websocket.Message.Receive(conn, &raw); err != nil {
				return
			}
			if kind, data, size := terminalInput(raw); kind != "" {
				switch {
				case !ttyOn.Load():
				case kind == "stdin":
					select {
					case input <- data:
					case <-ctx.Done():
						return
					}
				case kind == "resize":
					select {
					case resizes <- size:
					default: // a burst of resizes: the last ones still arrive
					}
				}
				continue
			}
			req, ok := parseTerminalFrame(raw, send)
			if !ok {
				continue
			}
			if req.req.TTY {
				ttyOn.Store(true)
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
		case tc := <-cmds:
			var res *ExecResult
			var err error
			if tc.req.TTY {
				res, err = s.computers.ExecTTY(ctx, m.ID, tc.req, tc.cols, tc.rows, input, resizes,
					func() { send(map[string]any{"type": "started"}) },
					func(data string) { send(map[string]any{"type": "stdout", "data": data}) })
				ttyOn.Store(false)
				for drained := false; !drained; { // what was typed after the end goes nowhere
					select {
					case <-input:
					case <-resizes:
					default:
						drained = true
					}
				}
			} else {
				res, err = s.computers.Exec(ctx, m.ID, tc.req, func(stream, data string) {
					send(map[string]any{"type": stream, "data": data})
				})
			}
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

// terminalInput recognises the frames meant for a running tty command: stdin (its data) and resize (its
// size); kind is "" for anything else.
func terminalInput(raw string) (kind, data string, size [2]int) {
	t := strings.TrimSpace(raw)
	if !strings.HasPrefix(t, "{") {
		return "", "", size
	}
	var f terminalFrame
	if json.Unmarshal([]byte(t), &f) != nil {
		return "", "", size
	}
	switch f.Type {
	case "stdin":
		return "stdin", f.Data, size
	case "resize":
		return "resize", "", [2]int{f.Cols, f.Rows}
	}
	return "", "", size
}

// parseTerminalFrame turns one client message into a command.
func parseTerminalFrame(raw string, send func(any) bool) (termCmd, bool) {
	t := strings.TrimSpace(raw)
	if !strings.HasPrefix(t, "{") {
		if t == "" {
			return termCmd{}, false
		}
		return termCmd{req: ExecRequest{Cmd: execCommand{Shell: raw}}}, true
	}
	var f terminalFrame
	if err := json.Unmarshal([]byte(t), &f); err != nil {
		send(map[string]any{"type": "error", "error": errorf(codeSpecInvalid, "malformed frame: %v", err).withHint(`send a command string or {"type":"exec","cmd":"..."}`)})
		return termCmd{}, false
	}
	switch f.Type {
	case "exec":
		var cmd execCommand
		if len(f.Cmd) == 0 {
			send(map[string]any{"type": "error", "error": errorf(codeSpecInvalid, "cmd: Required").withHint(`send {"type":"exec","cmd":"ls"}`)})
			return termCmd{}, false
		}
		if err := cmd.UnmarshalJSON(f.Cmd); err != nil {
			send(map[string]any{"type": "error", "error": asAPIError(err)})
			return termCmd{}, false
		}
		return termCmd{req: ExecRequest{Cmd: cmd, TTY: f.TTY}, cols: f.Cols, rows: f.Rows}, true
	}
	send(map[string]any{"type": "error", "error": errorf(codeSpecInvalid, "unknown frame type %q", f.Type).withHint("send exec, stdin or resize frames")})
	return termCmd{}, false
}
