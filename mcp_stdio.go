// mcp_stdio.go — `agentd mcp`: the MCP server over stdio (newline-delimited JSON-RPC on stdin/stdout).
//
// Entry points: runMCP (the subcommand), serveMCPStdio (the loop, on any reader and writer).
// Rules: stdout carries only JSON-RPC messages, one per line; logs go to stderr; EOF on stdin ends the
// session (calls in flight are cancelled, the machine destroyed unless --keep) and exits 0. Without
// AGENT_URL it runs in-process on the data directory (the server's triggers are not mounted here); with
// AGENT_URL it relays every message to that server's /mcp (the HTTP transport's rules then apply,
// the refusal of a non-isolated provider included). Requests run concurrently, so ping and
// notifications/cancelled are answered while a long tool call runs; initialize is handled in order.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"
)

// mcpEOFGrace is how long the calls in flight at EOF on stdin may still finish.
const mcpEOFGrace = 10 * time.Second

const mcpUsage = "usage: agentd mcp [--keep] [--home DIR] [--log-level L]\n"

func runMCP(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	keep := fs.Bool("keep", false, "leave the session's machine running when the session ends")
	home := fs.String("home", "", "data directory (default $AGENT_HOME or ~/.agentd)")
	level := fs.String("log-level", "warn", "debug, info, warn or error (stderr)")
	if err := fs.Parse(args); err != nil {
		return usageError{msg: err.Error(), usage: mcpUsage}
	}
	if fs.NArg() > 0 {
		return usageError{msg: fmt.Sprintf("unexpected argument %q", fs.Arg(0)), usage: mcpUsage}
	}
	if base := getenv("AGENT_URL"); base != "" {
		return relayMCP(ctx, strings.TrimRight(base, "/")+"/mcp", getenv("AGENT_TOKEN"), stdin, stdout, stderr)
	}
	sargs := []string{"--log-level", *level}
	if *home != "" {
		sargs = append(sargs, "--home", *home)
	}
	cfg, err := loadConfig(sargs, getenv, stderr)
	if err != nil {
		return err
	}
	cfg.noTriggers = true
	release, err := lockHome(cfg.Home, "; or, to use that server's machines and agents, set AGENT_URL (and AGENT_TOKEN) to its address")
	if err != nil {
		return err
	}
	defer release()
	s, err := newServer(cfg, newLogger(cfg, stderr), time.Now)
	if err != nil {
		return err
	}
	defer s.Close(context.Background())
	ss, err := s.mcp.open("stdio", *keep)
	if err != nil {
		return err
	}
	defer ss.Close()
	return serveMCPStdio(ctx, ss, stdin, stdout, s.log)
}

// lineWriter writes whole messages, one per line, from any goroutine.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (lw *lineWriter) send(msg any) {
	b, err := json.Marshal(msg)
	if err != nil {
		return
	}
	lw.mu.Lock()
	defer lw.mu.Unlock()
	lw.w.Write(append(b, '\n'))
}

func (lw *lineWriter) sendRaw(b []byte) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	lw.w.Write(append(bytes.TrimSpace(b), '\n'))
}

// readLines hands each non-empty line of r to each, in order, until EOF (nil) or a read error.
func readLines(r io.Reader, each func([]byte)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			each(line)
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// serveMCPStdio answers the messages of r on w until EOF or ctx ends, then waits for the calls in flight
// (cancelled first).
func serveMCPStdio(ctx context.Context, ss *mcpSession, r io.Reader, w io.Writer, log *slog.Logger) error {
	out := &lineWriter{w: w}
	var wg sync.WaitGroup
	lines := make(chan []byte)
	readErr := make(chan error, 1)
	go func() { // owned here: it ends at EOF, and stdin closes with the process
		readErr <- readLines(r, func(b []byte) {
			select {
			case lines <- bytes.Clone(b):
			case <-ctx.Done():
			}
		})
		close(lines)
	}()
	for {
		var line []byte
		var ok bool
		select {
		case <-ctx.Done():
			ss.cancel() // shutdown: the calls in flight end now
			wg.Wait()
			return nil
		case line, ok = <-lines:
		}
		if !ok {
			if err := <-readErr; err != nil {
				log.Warn("mcp: reading stdin", "err", err)
			}
			// EOF: the answers of calls in flight are still written for a grace period (a client that
			// pipes requests and closes stdin reads them), then the calls are cancelled.
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			grace := time.NewTimer(mcpEOFGrace)
			defer grace.Stop()
			select {
			case <-done:
			case <-grace.C:
				ss.cancel()
				<-done
			case <-ctx.Done():
				ss.cancel()
				<-done
			}
			return nil
		}
		if len(line) > maxBodyBytes {
			out.send(rpcFail(nil, rpcInvalidRequest, "message larger than %d bytes", maxBodyBytes))
			continue
		}
		m, bad := parseRPC(line)
		if bad != nil {
			out.send(bad)
			continue
		}
		if m.Method == "initialize" || len(m.ID) == 0 { // in order: the lifecycle and notifications
			if resp := ss.handle(ctx, m, out.send); resp != nil {
				out.send(resp)
			}
			continue
		}
		wg.Go(func() {
			if resp := ss.handle(ctx, m, out.send); resp != nil {
				out.send(resp)
			}
		})
	}
}

// relayMCP relays stdio to a server's /mcp: each message is POSTed with the session's headers, and the
// answer (JSON, or an event stream) is written back line by line. At EOF the session is deleted.
func relayMCP(ctx context.Context, endpoint, token string, stdin io.Reader, stdout, stderr io.Writer) error {
	out := &lineWriter{w: stdout}
	client := &http.Client{}
	var mu sync.Mutex
	var sid, proto string
	headers := func(req *http.Request) {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		mu.Lock()
		defer mu.Unlock()
		if sid != "" {
			req.Header.Set(mcpSessionHeader, sid)
		}
		if proto != "" {
			req.Header.Set("MCP-Protocol-Version", proto)
		}
	}
	post := func(line []byte) {
		m, bad := parseRPC(line)
		if bad != nil {
			out.send(bad)
			return
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(line))
		if err != nil {
			return
		}
		headers(req)
		resp, err := client.Do(req)
		if err != nil {
			if len(m.ID) > 0 {
				out.send(rpcFail(m.ID, rpcInternalError, "agentd at %s: %v", endpoint, err))
			}
			return
		}
		defer resp.Body.Close()
		if m.Method == "initialize" && resp.StatusCode == http.StatusOK {
			mu.Lock()
			sid = resp.Header.Get(mcpSessionHeader)
			mu.Unlock()
		}
		ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
		switch {
		case ct == "text/event-stream":
			for rd := newSSEReader(resp.Body, maxBodyBytes); ; {
				_, data, err := rd.next()
				if err != nil {
					break
				}
				if data != nil {
					out.sendRaw(data)
				}
			}
		case ct == "application/json":
			b, _ := io.ReadAll(resp.Body)
			if m.Method == "initialize" {
				var r struct {
					Result struct {
						ProtocolVersion string `json:"protocolVersion"`
					} `json:"result"`
				}
				json.Unmarshal(b, &r)
				mu.Lock()
				proto = r.Result.ProtocolVersion
				mu.Unlock()
			}
			if len(m.ID) > 0 {
				var probe rpcMessage
				if json.Unmarshal(b, &probe) == nil && probe.JSONRPC == "2.0" {
					out.sendRaw(b)
					return
				}
				out.send(rpcFail(m.ID, rpcInternalError, "agentd answered HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b)))
			}
		default:
			if len(m.ID) > 0 {
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
				out.send(rpcFail(m.ID, rpcInternalError, "agentd answered HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b)))
			}
		}
	}
	var wg sync.WaitGroup
	err := readLines(stdin, func(line []byte) {
		line = bytes.Clone(line)
		var probe struct {
			Method string `json:"method"`
		}
		if json.Unmarshal(line, &probe) == nil && probe.Method == "initialize" {
			post(line) // in order: the session id must be known before the next message
			return
		}
		wg.Go(func() { post(line) })
	})
	wg.Wait()
	mu.Lock()
	id := sid
	mu.Unlock()
	if id != "" {
		if req, e := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodDelete, endpoint, nil); e == nil {
			headers(req)
			if resp, e := client.Do(req); e == nil {
				resp.Body.Close()
			}
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "agentd mcp: reading stdin:", err)
	}
	return nil
}
