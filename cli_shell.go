// cli_shell.go — the terminal WebSocket of a computer from the command line: `agentd exec -it` and
// `agentd shell`.
//
// Entry points: (*cli).execTTY, (*cli).shell. `exec -t ID -- CMD` runs CMD on a real pseudo-terminal
// (the socket's tty frames, computers_terminal.go): with -i our terminal in raw mode and keystrokes (Ctrl-C
// too) sent as they are typed; the window size sent at start and on SIGWINCH; the remote output written
// verbatim; the terminal restored and the remote exit code ours. `shell ID` on a terminal is `exec -it ID` of bash (sh
// when there is none). Where the provider has no tty (local, sandbox), or stdin is a pipe, shell falls
// back to one command per line: on a terminal a locally edited prompt (echo, backspace, Ctrl-C clears the
// line, Ctrl-D or `exit` leaves), from a pipe one command per input line.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"unicode/utf8"

	"golang.org/x/net/websocket"
)

type termFrame struct {
	Type     string    `json:"type"`
	Data     string    `json:"data"`
	ExitCode int       `json:"exitCode"`
	Workdir  string    `json:"workdir"`
	Error    *apiError `json:"error"`
}

// shellCmd starts the machine's best interactive shell.
var shellCmd = []string{"/bin/sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash -l; else exec sh -l; fi"}

// terminal is one connection to a computer's terminal socket: its ready frame and the frames after it.
type terminal struct {
	conn   *websocket.Conn
	ready  termFrame
	frames chan termFrame
	mu     sync.Mutex // one writer at a time: keystrokes, resizes and commands come from several goroutines
}

func (c *cli) openTerminal(id string) (*terminal, error) {
	conn, err := c.dialSocket("/v1/computers/" + url.PathEscape(id) + "/terminal")
	if err != nil {
		return nil, err
	}
	t := &terminal{conn: conn, frames: make(chan termFrame)}
	if err := websocket.JSON.Receive(conn, &t.ready); err != nil {
		conn.Close()
		return nil, fmt.Errorf("the terminal closed: %v", err)
	}
	if t.ready.Type == "error" && t.ready.Error != nil {
		conn.Close()
		return nil, t.ready.Error
	}
	go func() { // ends when the socket closes (the caller's Close)
		defer close(t.frames)
		for {
			var f termFrame
			if websocket.JSON.Receive(conn, &f) != nil {
				return
			}
			t.frames <- f
		}
	}()
	return t, nil
}

func (t *terminal) send(v any) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return websocket.JSON.Send(t.conn, v)
}

// execTTY is `exec -t`: CMD on a pseudo-terminal in the machine, ours in raw mode meanwhile.
func (c *cli) execTTY(id string, argv []string, interactive bool) error {
	in, ok := c.stdin.(*os.File)
	if !ok || !isTerminal(in) {
		return c.usage("-t needs a terminal on stdin (run it from one, or drop -t)")
	}
	t, err := c.openTerminal(id)
	if err != nil {
		return err
	}
	defer t.conn.Close()
	_, err = c.ttySession(t, in, argv, interactive)
	return err
}

// ttySession runs argv on the machine's pseudo-terminal. started is false when the command never ran
// (an error frame came first: the provider has no tty, the policy refused it).
func (c *cli) ttySession(t *terminal, in *os.File, argv []string, interactive bool) (started bool, err error) {
	cols, rows := windowSize(in)
	if err := t.send(map[string]any{"type": "exec", "cmd": argv, "tty": true, "cols": cols, "rows": rows}); err != nil {
		return false, fmt.Errorf("the terminal closed: %v", err)
	}
	for !started { // the answer to the command: it runs, or why not
		select {
		case f, ok := <-t.frames:
			switch {
			case !ok:
				return false, errors.New("the terminal closed")
			case f.Type == "error" && f.Error != nil:
				return false, f.Error
			case f.Type == "started":
				started = true
			}
		case <-c.ctx.Done():
			return false, c.ctx.Err()
		}
	}
	if interactive { // raw: every key, Ctrl-C too, goes to the program; without -i Ctrl-C stops us (130)
		restore, err := makeRaw(in)
		if err != nil {
			return true, err
		}
		defer restore()
	}
	winch := make(chan os.Signal, 1)
	notifyResize(winch)
	defer signal.Stop(winch)
	if interactive { // keystrokes as typed; the reader ends with the process (stdin stays open until then)
		go func() {
			b := make([]byte, 4096)
			for {
				n, err := in.Read(b)
				if n > 0 && t.send(map[string]any{"type": "stdin", "data": string(b[:n])}) != nil {
					return
				}
				if err != nil {
					return
				}
			}
		}()
	}
	for {
		select {
		case <-c.ctx.Done():
			return true, c.ctx.Err()
		case <-winch:
			if cols, rows := windowSize(in); cols > 0 {
				t.send(map[string]any{"type": "resize", "cols": cols, "rows": rows})
			}
		case f, ok := <-t.frames:
			if !ok {
				return true, errors.New("the terminal closed before the command ended")
			}
			switch f.Type {
			case "stdout", "stderr":
				io.WriteString(c.stdout, f.Data)
			case "error":
				if f.Error != nil {
					return true, f.Error
				}
			case "exit":
				if f.ExitCode != 0 {
					return true, exitCode{code: f.ExitCode}
				}
				return true, nil
			}
		}
	}
}

func (c *cli) shell(args []string) error {
	pos, err := c.flags(args, func(fs *flag.FlagSet) {}, 1, 1)
	if err != nil {
		return err
	}
	t, err := c.openTerminal(pos[0])
	if err != nil {
		return err
	}
	defer t.conn.Close()
	conn, frames := t.conn, t.frames
	prompt := pos[0] + ":" + t.ready.Workdir + "$ "
	in, isFile := c.stdin.(*os.File)
	if isFile && isTerminal(in) {
		started, err := c.ttySession(t, in, shellCmd, true)
		var ae *apiError
		if started || !errors.As(err, &ae) || ae.Code != codeNotImplemented {
			return err
		}
		fmt.Fprintf(c.stderr, "agentd: %s; one command per line instead\n", ae.Message)
		return c.rawShell(conn, in, frames, prompt)
	}
	sc := bufio.NewScanner(c.stdin)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if line == "exit" {
			return nil
		}
		if err := c.runLine(conn, frames, line, "\n"); err != nil {
			return err
		}
	}
	return nil
}

// runLine sends one command and copies its output until its exit frame.
func (c *cli) runLine(conn *websocket.Conn, frames <-chan termFrame, line, nl string) error {
	if err := websocket.Message.Send(conn, line); err != nil {
		return fmt.Errorf("the terminal closed: %v", err)
	}
	for {
		select {
		case f, ok := <-frames:
			if !ok {
				return errors.New("the terminal closed")
			}
			switch f.Type {
			case "stdout":
				io.WriteString(c.stdout, strings.ReplaceAll(f.Data, "\n", nl))
			case "stderr":
				io.WriteString(c.stderr, strings.ReplaceAll(f.Data, "\n", nl))
			case "error":
				if f.Error != nil {
					fmt.Fprintf(c.stderr, "%s%s", f.Error.Error(), nl)
				}
				return nil
			case "exit":
				if f.ExitCode != 0 {
					fmt.Fprintf(c.stderr, "[exit %d]%s", f.ExitCode, nl)
				}
				return nil
			}
		case <-c.ctx.Done():
			return c.ctx.Err()
		}
	}
}

// rawShell is the interactive prompt on a terminal.
func (c *cli) rawShell(conn *websocket.Conn, in *os.File, frames <-chan termFrame, prompt string) error {
	restore, err := makeRaw(in)
	if err != nil {
		return err
	}
	defer restore()
	sendSize := func() {
		if cols, rows := windowSize(in); cols > 0 {
			websocket.JSON.Send(conn, map[string]any{"type": "resize", "cols": cols, "rows": rows})
		}
	}
	sendSize()
	winch := make(chan os.Signal, 1)
	notifyResize(winch)
	defer signal.Stop(winch)
	keys := make(chan byte)
	go func() {
		defer close(keys)
		b := make([]byte, 1)
		for {
			if n, err := in.Read(b); err != nil || n == 0 {
				return
			}
			keys <- b[0]
		}
	}()
	fmt.Fprint(c.stdout, "(each line runs on its own: cd does not stick; Ctrl-D or `exit` leaves)\r\n"+prompt)
	var line []byte
	for {
		select {
		case <-c.ctx.Done():
			return c.ctx.Err()
		case <-winch:
			sendSize()
		case k, ok := <-keys:
			if !ok {
				return nil
			}
			switch {
			case k == 4 && len(line) == 0: // Ctrl-D
				fmt.Fprint(c.stdout, "\r\n")
				return nil
			case k == 3: // Ctrl-C
				line = line[:0]
				fmt.Fprint(c.stdout, "^C\r\n"+prompt)
			case k == '\r' || k == '\n':
				fmt.Fprint(c.stdout, "\r\n")
				cmd := strings.TrimSpace(string(line))
				line = line[:0]
				if cmd == "exit" {
					return nil
				}
				if cmd != "" {
					if err := c.runLine(conn, frames, cmd, "\r\n"); err != nil {
						return err
					}
				}
				fmt.Fprint(c.stdout, prompt)
			case k == 127 || k == 8: // backspace
				if len(line) > 0 {
					_, size := utf8.DecodeLastRune(line) // a whole character, not one of its bytes
					line = line[:len(line)-size]
					fmt.Fprint(c.stdout, "\b \b")
				}
			case k >= 32:
				line = append(line, k)
				c.stdout.Write([]byte{k})
			}
		}
	}
}
