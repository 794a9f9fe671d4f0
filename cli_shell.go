// cli_shell.go — `agentd shell ID`: the terminal WebSocket of a computer as an interactive prompt.
//
// Entry point: (*cli).shell. The API's terminal runs one command per line (docs/API.md: no persistent
// shell), so the prompt is edited locally: on a terminal, in raw mode (echo, backspace, Ctrl-C clears the
// line, Ctrl-D or `exit` leaves), with the window size sent on SIGWINCH and the terminal restored on exit;
// from a pipe, one command per input line.
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
	"syscall"
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

func (c *cli) shell(args []string) error {
	pos, err := c.flags(args, func(fs *flag.FlagSet) {}, 1, 1)
	if err != nil {
		return err
	}
	conn, err := c.dialSocket("/v1/computers/" + url.PathEscape(pos[0]) + "/terminal")
	if err != nil {
		return err
	}
	defer conn.Close()
	var ready termFrame
	if err := websocket.JSON.Receive(conn, &ready); err != nil {
		return fmt.Errorf("the terminal closed: %v", err)
	}
	if ready.Type == "error" && ready.Error != nil {
		return ready.Error
	}
	frames := make(chan termFrame)
	go func() {
		defer close(frames)
		for {
			var f termFrame
			if websocket.JSON.Receive(conn, &f) != nil {
				return
			}
			frames <- f
		}
	}()
	prompt := pos[0] + ":" + ready.Workdir + "$ "
	in, isFile := c.stdin.(*os.File)
	if isFile && isTerminal(in) {
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
	signal.Notify(winch, syscall.SIGWINCH)
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
	fmt.Fprint(c.stdout, "(each line runs on its own: no persistent shell; Ctrl-D or `exit` leaves)\r\n"+prompt)
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
