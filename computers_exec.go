// computers_exec.go — running commands in machines: the exec semantics shared by every provider, the sync and
// SSE endpoints, and the one head-and-tail truncator (exec output and tool results).
//
// Entry points: computerService.Exec (API, terminal, agent tool), run (internal, no policy: provisioning,
// whose setup create judged already with setupRefused, and the engine's file operations), handleExec,
// handleExecStream. runProc also runs a terminal session's process on a host pseudo-terminal
// (procSpec.term; ExecTTY in computers_terminal.go).
//
// Rules (docs/API.md Exec, DESIGN §4): every exec passes the one command policy first (403 E_EXEC_DENIED);
// a string cmd runs under /bin/sh -c, an array directly; timeoutSec 1-3600 (default 120) kills the whole
// process tree inside the machine and answers timedOut with the partial output and exitCode 124; a
// cancelled context (client disconnect) kills the tree the same way; maxOutputBytes 1-16 MiB (default
// 256 KiB per stream) keeps head and tail without splitting a UTF-8 character; a background child that
// keeps stdout open does not hold the exec once the command itself ended; a failure of the mechanism
// (no shell, engine error) is 500 E_EXEC_FAILED, never a fake exit code.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

const (
	execDefaultTimeout = 120
	execMaxTimeout     = 3600
	execDefaultOutput  = 256 << 10
	execMaxOutput      = 16 << 20
	execTimedOutCode   = 124
	// execPipeGrace bounds how long output pipes may stay open after the command ended (a background
	// child holding stdout): the exec returns, the child keeps running.
	execPipeGrace = 250 * time.Millisecond
	// execPipeTail bounds what is read from a pipe once execPipeGrace passed: what it held then (the
	// command's last output: a pipe holds at most 1 MiB, growPipe), never a background child's
	// endless output, which would hold the exec until its timeout.
	execPipeTail = 1<<20 + 64<<10
)

// UnmarshalJSON accepts a non-empty string or a non-empty array of strings.
func (c *execCommand) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		return json.Unmarshal(b, &c.Shell)
	}
	if len(b) > 0 && b[0] == '[' {
		var argv []string
		if err := json.Unmarshal(b, &argv); err != nil {
			return errorf(codeSpecInvalid, "cmd: expected an array of strings").withHint(`send "cmd": "echo hi" or "cmd": ["echo", "hi"]`)
		}
		c.Argv = argv
		if argv == nil {
			c.Argv = []string{}
		}
		return nil
	}
	return errorf(codeSpecInvalid, "cmd: expected a string or an array of strings, received %s", jsonKind(b)).
		withHint(`send "cmd": "echo hi" or "cmd": ["echo", "hi"]`)
}

func (c execCommand) MarshalJSON() ([]byte, error) {
	if c.Argv != nil {
		return json.Marshal(c.Argv)
	}
	return json.Marshal(c.Shell)
}

func jsonKind(b []byte) string {
	switch {
	case len(b) == 0:
		return "nothing"
	case b[0] == '{':
		return "object"
	case b[0] == 't' || b[0] == 'f':
		return "boolean"
	case b[0] == 'n':
		return "null"
	}
	return "number"
}

// argv is the command as executed: a shell string runs under /bin/sh -c.
func (c execCommand) argv() []string {
	if c.Argv != nil {
		return c.Argv
	}
	return []string{"/bin/sh", "-c", c.Shell}
}

// policyText is what the command policy sees.
func (c execCommand) policyText() string {
	if c.Argv != nil {
		return shellJoin(c.Argv)
	}
	return c.Shell
}

// validateExecWire checks an exec body as received over HTTP: a timeoutSec or maxOutputBytes above its
// cap is lowered to the cap (API.md: "capped"), with a warning in the result; other out-of-range values
// are 422.
func validateExecWire(req *ExecRequest, seen map[string]json.RawMessage) error {
	if _, ok := seen["cmd"]; !ok {
		return errorf(codeSpecInvalid, "cmd: Required").withHint(`send "cmd": "echo hi" or "cmd": ["echo", "hi"]`)
	}
	if req.TimeoutSec > execMaxTimeout {
		req.capped = append(req.capped, fmt.Sprintf("timeoutSec %d is above the cap: %d was used", req.TimeoutSec, execMaxTimeout))
		req.TimeoutSec = execMaxTimeout
	}
	if req.MaxOutputBytes > execMaxOutput {
		req.capped = append(req.capped, fmt.Sprintf("maxOutputBytes %d is above the cap: %d (16 MiB) was used", req.MaxOutputBytes, execMaxOutput))
		req.MaxOutputBytes = execMaxOutput
	}
	if req.TimeoutSec < 0 {
		return errorf(codeSpecInvalid, "timeoutSec: must be between 1 and %d, received %d", execMaxTimeout, req.TimeoutSec).
			withHint("use a timeout of at most 3600 seconds")
	}
	if _, ok := seen["timeoutSec"]; ok && req.TimeoutSec == 0 {
		return errorf(codeSpecInvalid, "timeoutSec: must be between 1 and %d, received 0", execMaxTimeout).withHint("omit timeoutSec for the default of 120")
	}
	if req.MaxOutputBytes < 0 {
		return errorf(codeSpecInvalid, "maxOutputBytes: must be between 1 and %d (16 MiB), received %d", execMaxOutput, req.MaxOutputBytes).
			withHint("use at most 16777216")
	}
	if _, ok := seen["maxOutputBytes"]; ok && req.MaxOutputBytes == 0 {
		return errorf(codeSpecInvalid, "maxOutputBytes: must be between 1 and %d, received 0", execMaxOutput).withHint("omit it for the default of 262144")
	}
	return nil
}

// normaliseExec validates what every caller must get right and applies defaults and caps.
func normaliseExec(req *ExecRequest) error {
	switch {
	case req.Cmd.Argv == nil && strings.TrimSpace(req.Cmd.Shell) == "":
		return errorf(codeSpecInvalid, "cmd: must be a non-empty string or a non-empty array").withHint(`send "cmd": "echo hi"`)
	case req.Cmd.Argv != nil && (len(req.Cmd.Argv) == 0 || req.Cmd.Argv[0] == ""):
		return errorf(codeSpecInvalid, "cmd: the array must be non-empty and start with a program").withHint(`send "cmd": ["echo", "hi"]`)
	}
	for _, a := range req.Cmd.argv() {
		if strings.IndexByte(a, 0) >= 0 {
			return errorf(codeSpecInvalid, "cmd: contains a NUL byte").withHint("remove the NUL byte")
		}
	}
	if strings.ContainsAny(req.Cwd, "\x00\n\r") {
		return errorf(codeSpecInvalid, "cwd: contains a control character").withHint("use a plain path under /work or /tmp")
	}
	if req.Cwd != "" && !strings.HasPrefix(req.Cwd, "/") {
		return errorf(codeSpecInvalid, "cwd: must be an absolute path, received %q", req.Cwd).
			withHint("send an absolute directory such as /work/src (omit cwd for the machine's workdir)")
	}
	if strings.HasPrefix(req.User, "-") || strings.ContainsAny(req.User, "\x00\n\r \t") {
		return errorf(codeSpecInvalid, "user: invalid value %q", req.User).withHint(`use a user name or uid[:gid], e.g. "1000:1000"`)
	}
	for k, v := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return errorf(codeSpecInvalid, "env: invalid variable name %q", k).withHint("names must be non-empty without '=' or NUL")
		}
		if strings.IndexByte(v, 0) >= 0 {
			return errorf(codeSpecInvalid, "env.%s: the value contains a NUL byte", k).withHint("remove the NUL byte: an environment value cannot carry one")
		}
	}
	if req.TimeoutSec <= 0 {
		req.TimeoutSec = execDefaultTimeout
	}
	req.TimeoutSec = min(req.TimeoutSec, execMaxTimeout)
	if req.MaxOutputBytes <= 0 {
		req.MaxOutputBytes = execDefaultOutput
	}
	req.MaxOutputBytes = min(req.MaxOutputBytes, execMaxOutput)
	return nil
}

// procSpec is one process to run inside a machine, as the providers see it.
type procSpec struct {
	argv  []string
	cwd   string // guest path; "" is the machine's workdir
	env   map[string]string
	user  string // "" is the machine's user
	tty   bool
	stdin io.Reader
	token string // names the process group inside the machine (killTree)
	// term, when set, is the pseudo-terminal the host process runs on (an interactive tty exec,
	// ExecTTY): its stdio and controlling terminal, the output read from the master. Implies tty.
	term *ptyPair
}

// ptyPair is a pseudo-terminal: runProc hands the slave to the process and reads the master; started,
// when set, is called once the process runs.
type ptyPair struct {
	master, slave *os.File
	cols, rows    int
	started       func()
}

// sizeFirst is the wrapper's first step on a terminal: the engine sizes the machine's tty only after the
// command started (docker before API 1.42 and kubectl race it: `stty size` said "0 0"), so the wrapper
// sizes it itself; later resizes come from the engine. "" without a terminal.
func (p *procSpec) sizeFirst() string {
	if p.term == nil || p.term.cols <= 0 || p.term.rows <= 0 {
		return ""
	}
	return fmt.Sprintf("stty cols %d rows %d 2>/dev/null; ", p.term.cols, p.term.rows)
}

// procHandle is a prepared host process. endMarker is set when the process announces the end of the
// command on both output streams (engine wrapper), so a background child cannot hold the exec.
type procHandle struct {
	cmd       *exec.Cmd
	endMarker bool
	remote    *execChannel // when set, req runs over the machine's exec channel instead of cmd
	req       chanStart
	// call, when set, runs the process as one API call instead of cmd (fly: computers_fly.go): its
	// output is written when it returns, with the exit code.
	call func(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) (int, error)
}

// execPrepared is an exec that passed validation and the policy, ready to run.
type execPrepared struct {
	m   *ComputerInfo
	p   provider
	req ExecRequest
	ps  *procSpec
}

// prepareExec resolves the machine and checks the request and the policy; nothing runs yet.
func (c *computerService) prepareExec(ctx context.Context, id string, req ExecRequest) (*execPrepared, error) {
	if err := normaliseExec(&req); err != nil {
		return nil, err
	}
	if err := req.Policy.check(req.Cmd.policyText()); err != nil {
		return nil, err
	}
	m, p, err := c.getLive(ctx, id)
	if err != nil {
		return nil, err
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = m.Workdir
	} else if !strings.HasPrefix(cwd, "/") {
		cwd = joinGuest(m.Workdir, cwd)
	}
	ps := &procSpec{argv: req.Cmd.argv(), cwd: cleanGuest(cwd), env: req.Env, user: req.User, tty: req.TTY}
	if req.Stdin != nil {
		ps.stdin = strings.NewReader(*req.Stdin)
	}
	return &execPrepared{m: m, p: p, req: req, ps: ps}, nil
}

// Exec runs one command after the command policy allowed it; onOutput (may be nil) receives output
// chunks as they arrive, stream being "stdout" or "stderr". Cancelling ctx kills the process tree.
// onOutput is never called concurrently and never after Exec returns.
func (c *computerService) Exec(ctx context.Context, id string, req ExecRequest, onOutput func(stream, data string)) (*ExecResult, error) {
	x, err := c.prepareExec(ctx, id, req)
	if err != nil {
		return nil, err
	}
	return c.runPrepared(ctx, x, onOutput)
}

func (c *computerService) runPrepared(ctx context.Context, x *execPrepared, onOutput func(stream, data string)) (*ExecResult, error) {
	c.beginUse(x.m.ID)
	defer c.endUse(x.m.ID)
	t0 := time.Now()
	mark := c.refusalMark(x.m.ID)
	res, err := c.runProc(ctx, x.p, x.m, x.ps, time.Duration(x.req.TimeoutSec)*time.Second, x.req.MaxOutputBytes, onOutput)
	c.metrics.execDone(x.m.Provider, res, err, time.Since(t0))
	if res != nil {
		res.Warnings = x.req.capped
		if lines := c.refusalsSince(x.m.ID, mark); lines != "" { // the egress proxy's refusals meanwhile
			res.Stderr += lines
			if onOutput != nil {
				onOutput("stderr", lines)
			}
		}
	}
	return res, err
}

// run executes an internal command (no policy; provisioning and file operations) and collects output.
func (c *computerService) run(ctx context.Context, p provider, m *ComputerInfo, ps *procSpec, timeout time.Duration) (*ExecResult, error) {
	return c.runProc(ctx, p, m, ps, timeout, execMaxOutput, nil)
}

// beginUse and endUse mark activity for the reaper: a running exec counts as activity.
func (c *computerService) beginUse(id string) {
	rt := c.runtime(id)
	c.mu.Lock()
	rt.active++
	rt.lastUsed = c.now()
	c.mu.Unlock()
}

func (c *computerService) endUse(id string) {
	rt := c.runtime(id)
	c.mu.Lock()
	rt.active--
	rt.lastUsed = c.now()
	c.mu.Unlock()
}

// runProc is the one place a process runs in a machine.
func (c *computerService) runProc(ctx context.Context, p provider, m *ComputerInfo, ps *procSpec, timeout time.Duration, maxOut int, onOutput func(stream, data string)) (*ExecResult, error) {
	if ps.token == "" {
		ps.token = randomChars(12)
	}
	if ps.cwd == "" {
		ps.cwd = m.Workdir
	}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	h, err := p.command(tctx, m, ps)
	if err != nil {
		return nil, err
	}
	var emitMu sync.Mutex
	var emit func(stream, data string)
	if onOutput != nil {
		emit = func(stream, data string) {
			emitMu.Lock()
			defer emitMu.Unlock()
			onOutput(stream, data)
		}
	}
	markers := &endMarkers{need: 2, done: make(chan struct{})}
	if ps.tty || ps.term != nil {
		markers.need = 1
	}
	stdout := newOutputSink("stdout", maxOut, emit, h.endMarker, ps.token, markers)
	stderr := newOutputSink("stderr", maxOut, emit, h.endMarker, ps.token, markers)
	if h.remote != nil {
		return c.runOverChannel(ctx, tctx, p, m, h, ps.stdin, stdout, stderr)
	}
	if h.call != nil {
		return c.runOverCall(ctx, tctx, p, m, h, ps.stdin, stdout, stderr) // computers_fly.go
	}
	var copied chan struct{} // a terminal's output: read from the master until the slave's last holder exits
	var pipes *outputPipes
	if t := ps.term; t != nil {
		h.cmd.Stdin, h.cmd.Stdout, h.cmd.Stderr = t.slave, t.slave, t.slave
		controllingTerminal(h.cmd)
	} else {
		h.cmd.Stdout, h.cmd.Stderr = stdout, stderr
		if !h.endMarker { // the process is the command itself (local): its background children hold its pipes
			if pipes, err = newOutputPipes(h.cmd, stdout, stderr); err != nil {
				return nil, errorf(codeExecFailed, "cannot make the command's pipes: %v", err).withHint("check the host's open file limit")
			}
		}
		if ps.stdin != nil {
			h.cmd.Stdin = ps.stdin
		}
	}
	start := time.Now()
	err = h.cmd.Start()
	pipes.started(err == nil)
	if err != nil {
		return nil, errorf(codeExecFailed, "cannot start the command: %v", err).withHint("check that the machine is healthy")
	}
	if t := ps.term; t != nil {
		t.slave.Close() // the process holds it now: its exit ends the master's reads
		copied = make(chan struct{})
		go func() { defer close(copied); io.Copy(stdout, t.master) }()
		if t.started != nil {
			t.started()
		}
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- h.cmd.Wait() }()

	var werr error
	if h.endMarker {
		select {
		case werr = <-waitErr:
		case <-markers.done:
			// The command ended; whatever still holds the pipes is a background child. Give the engine a
			// moment to deliver, then stop waiting for the CLI.
			select {
			case werr = <-waitErr:
			case <-time.After(execPipeGrace):
				h.cmd.Process.Kill()
				werr = <-waitErr
			}
		}
	} else {
		werr = <-waitErr
		pipes.ended(&c.drain)
	}
	if copied != nil { // the terminal's last output, unless something in the machine still holds it
		select {
		case <-copied:
		case <-time.After(execPipeGrace):
		}
	}
	res := collected(start, stdout, stderr)
	switch {
	case ctx.Err() != nil:
		return nil, errExecAborted(ctx)
	case tctx.Err() != nil && !markers.complete():
		res.TimedOut, res.ExitCode = true, execTimedOutCode
		return res, nil
	case h.endMarker && markers.complete():
		res.ExitCode = markers.code
		return res, nil
	case h.endMarker:
		// The wrapper never reported: the engine could not run it, or the machine went away.
		if l, ok := p.(interface {
			lostExec(context.Context, *ComputerInfo, *exec.Cmd) error
		}); ok { // ssh: the connection dropped under it
			if err := l.lostExec(context.WithoutCancel(ctx), m, h.cmd); err != nil {
				return nil, err
			}
		}
		if st, err := p.status(context.WithoutCancel(ctx), m); err == nil && st == "missing" {
			return nil, c.markGone(ctx, m)
		}
		msg := strings.TrimSpace(res.Stderr)
		if msg == "" && werr != nil {
			msg = werr.Error()
		}
		return nil, errorf(codeExecFailed, "exec failed in computer %s: %s", m.ID, msg).
			withHint("check that the machine is running and its image has /bin/sh").withDetail("computerId", m.ID)
	}
	var ee *exec.ExitError
	switch {
	case werr == nil:
		res.ExitCode = 0
	case errors.As(werr, &ee):
		res.ExitCode = ee.ExitCode()
		if res.ExitCode < 0 { // killed by a signal
			res.ExitCode = 128 + signalOf(ee)
		}
	case errors.Is(werr, exec.ErrWaitDelay):
		res.ExitCode = h.cmd.ProcessState.ExitCode()
	default:
		return nil, errorf(codeExecFailed, "exec failed: %v", werr).withHint("check that the machine is healthy")
	}
	return res, nil
}

// outputPipes are a host command's stdout and stderr as pipes of agentd's own, copied into the sinks:
// when the command ends, what a background child of it still holds is drained (pipeDrain), never
// closed under it, as the exec channel's helper does inside machines (computers_helper.go). exec.Cmd's
// own pipes would be closed after WaitDelay, and that child killed by SIGPIPE at its next write.
type outputPipes struct {
	r, w   [2]*os.File
	copies sync.WaitGroup
}

func newOutputPipes(cmd *exec.Cmd, stdout, stderr io.Writer) (*outputPipes, error) {
	p := &outputPipes{}
	for i, sink := range []io.Writer{stdout, stderr} {
		r, w, err := os.Pipe()
		if err != nil {
			p.started(false)
			return nil, err
		}
		p.r[i], p.w[i] = r, w
		p.copies.Add(1)
		go func() { defer p.copies.Done(); copyUntilPause(sink, r) }()
	}
	cmd.Stdout, cmd.Stderr = p.w[0], p.w[1]
	return p, nil
}

// copyUntilPause copies r to dst until r ends or, past its read deadline, holds nothing more
// (readOutput).
func copyUntilPause(dst io.Writer, r *os.File) {
	buf := make([]byte, 64<<10)
	late := 0
	for {
		n, err := readOutput(r, buf, &late)
		if n > 0 {
			dst.Write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// readOutput is one read of a command's output pipe, whose read deadline is set when the command ended
// (execPipeGrace). Past it, what the pipe holds is read at once (readNow), however late this goroutine
// runs: Go refuses a read past its deadline without looking, and what is there was written by the
// command. late counts those reads; past execPipeTail, a background child that never pauses is writing,
// and it must not hold the exec: the read ends (os.ErrDeadlineExceeded).
func readOutput(r *os.File, buf []byte, late *int) (int, error) {
	n, err := r.Read(buf)
	if !errors.Is(err, os.ErrDeadlineExceeded) || *late >= execPipeTail {
		return n, err
	}
	n, err = readNow(r, buf)
	*late += n
	return n, err
}

// started closes the write ends (the child has its copies); when the start failed, everything.
func (p *outputPipes) started(ok bool) {
	if p == nil {
		return
	}
	for i := range p.w {
		if p.w[i] != nil {
			p.w[i].Close()
		}
		if !ok && p.r[i] != nil {
			p.r[i].Close()
		}
	}
}

// ended runs once the command exited: what arrives within execPipeGrace is read, then what the pipes
// hold (at most execPipeTail, readOutput), then a background child's pipes go to d.
func (p *outputPipes) ended(d *pipeDrain) {
	if p == nil {
		return
	}
	for _, r := range p.r {
		r.SetReadDeadline(time.Now().Add(execPipeGrace))
	}
	p.copies.Wait()
	d.add(p.r[:]...)
}

// runOverChannel is runProc's second half when the process runs over the machine's exec channel: the
// same result, the same errors, the same timeout and abort behaviour as the per-call path.
func (c *computerService) runOverChannel(ctx, tctx context.Context, p provider, m *ComputerInfo, h *procHandle, stdin io.Reader, stdout, stderr *outputSink) (*ExecResult, error) {
	start := time.Now()
	proc, err := h.remote.start(h.req, stdin, stdout, stderr)
	if err != nil {
		return nil, errorf(codeExecFailed, "exec failed in computer %s: its exec channel is down (%v)", m.ID, err).
			withHint("retry: the next call reopens the channel").withDetail("computerId", m.ID)
	}
	x, werr := proc.wait(tctx)
	res := collected(start, stdout, stderr)
	switch {
	case ctx.Err() != nil:
		return nil, errExecAborted(ctx)
	case tctx.Err() != nil:
		res.TimedOut, res.ExitCode = true, execTimedOutCode
		return res, nil
	case werr != nil:
		if st, err := p.status(context.WithoutCancel(ctx), m); err == nil && st == "missing" {
			return nil, c.markGone(ctx, m)
		}
		return nil, errorf(codeExecFailed, "exec failed in computer %s: the machine's exec channel broke mid-call (%v); the command was stopped", m.ID, werr).
			withHint("retry: the next call reopens the channel; if the machine restarted, its /work may be empty").withDetail("computerId", m.ID)
	case x.Error != "":
		return nil, errorf(codeExecFailed, "exec failed in computer %s: %s", m.ID, x.Error).
			withHint("check the cwd exists and the machine is healthy").withDetail("computerId", m.ID)
	}
	res.ExitCode = x.Code
	return res, nil
}

// collected is an ended process's output as a result: both streams flushed, capped, and marked truncated.
func collected(start time.Time, stdout, stderr *outputSink) *ExecResult {
	stdout.flush()
	stderr.flush()
	res := &ExecResult{DurationMS: time.Since(start).Milliseconds()}
	res.Stdout, res.Truncated = stdout.result()
	var t2 bool
	res.Stderr, t2 = stderr.result()
	res.Truncated = res.Truncated || t2
	return res
}

func errExecAborted(ctx context.Context) error {
	return errorf(codeAborted, "exec aborted: %v", context.Cause(ctx)).withHint("the caller went away; the process tree was killed")
}

// endMarkers collects the wrapper's end-of-command announcements from both streams.
type endMarkers struct {
	mu   sync.Mutex
	need int
	seen int
	code int
	done chan struct{}
}

func (e *endMarkers) mark(code int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seen++
	e.code = code
	if e.seen == e.need {
		close(e.done)
	}
}

func (e *endMarkers) complete() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.seen >= e.need
}

// markerPrefix is what the engine wrapper prints (twice: stdout and stderr) after the command ended:
// "\x1e\x1eagentd-end:<token>:<3-digit exit code>\x1e".
func markerPrefix(token string) string { return "\x1e\x1eagentd-end:" + token + ":" }

// outputSink receives one stream: it strips the end marker, forwards complete UTF-8 text to emit, and
// keeps the capped head and tail for the result.
type outputSink struct {
	stream  string
	emit    func(stream, data string)
	cap     *headTail
	marker  []byte // full marker length is len(marker)+4
	markers *endMarkers
	ended   bool
	closed  bool   // set by flush: a copier abandoned after WaitDelay must not emit after Exec returned
	pending []byte // bytes that may start the marker
	carry   []byte // incomplete UTF-8 sequence for emit
	mu      sync.Mutex
}

func newOutputSink(stream string, maxOut int, emit func(stream, data string), withMarker bool, token string, m *endMarkers) *outputSink {
	s := &outputSink{stream: stream, emit: emit, cap: newHeadTail(maxOut), markers: m}
	if withMarker {
		s.marker = []byte(markerPrefix(token))
	}
	return s
}

func (s *outputSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(p)
	if s.ended || s.closed {
		return n, nil
	}
	if s.marker == nil {
		s.deliver(p)
		return n, nil
	}
	data := append(s.pending, p...)
	s.pending = nil
	full := len(s.marker) + 4
	if i := bytes.Index(data, s.marker); i >= 0 && len(data)-i >= full {
		s.deliver(data[:i])
		code, _ := strconv.Atoi(string(data[i+len(s.marker) : i+len(s.marker)+3]))
		s.ended = true
		s.markers.mark(code)
		return n, nil
	}
	// Hold back the longest suffix that could begin the marker.
	keep := 0
	for k := min(len(data), full-1); k > 0; k-- {
		tail := data[len(data)-k:]
		if bytes.HasPrefix(s.marker, tail[:min(k, len(s.marker))]) && (k <= len(s.marker) || bytes.HasPrefix(tail, s.marker)) {
			keep = k
			break
		}
	}
	s.deliver(data[:len(data)-keep])
	s.pending = append([]byte(nil), data[len(data)-keep:]...)
	return n, nil
}

func (s *outputSink) deliver(p []byte) {
	if len(p) == 0 {
		return
	}
	s.cap.write(p)
	if s.emit == nil {
		return
	}
	data := p
	if len(s.carry) > 0 {
		data = append(s.carry, p...)
	}
	cut := utf8Boundary(data)
	s.carry = append(s.carry[:0:0], data[cut:]...)
	if cut > 0 {
		s.emit(s.stream, string(data[:cut]))
	}
}

// flush delivers what is held back once the process is gone.
func (s *outputSink) flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended && len(s.pending) > 0 {
		p := s.pending
		s.pending = nil
		s.deliver(p)
	}
	if s.emit != nil && len(s.carry) > 0 {
		s.emit(s.stream, string(s.carry))
		s.carry = nil
	}
	s.closed = true
}

func (s *outputSink) result() (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cap.String()
}

// utf8Boundary returns the length of the longest prefix of p that does not end inside a UTF-8
// sequence that could still be completed.
func utf8Boundary(p []byte) int {
	for i := 1; i <= 3 && i <= len(p); i++ {
		b := p[len(p)-i]
		if b < 0x80 {
			return len(p)
		}
		if b >= 0xC0 { // a lead byte: is its sequence complete?
			need := 2
			switch {
			case b >= 0xF0:
				need = 4
			case b >= 0xE0:
				need = 3
			}
			if i < need {
				return len(p) - i
			}
			return len(p)
		}
	}
	return len(p)
}

// headTail is the one head-and-tail truncator, for exec output (streamed in, per stream) and tool results
// (boundOutput): past max bytes it keeps the first half and the last half, cut on character boundaries,
// and marks the elided middle "\n…[N bytes elided]…\n".
type headTail struct {
	max   int
	head  []byte
	tail  []byte // the bytes past the head: all of them with wholeWords, else the last half (with slack)
	total int64
	// wholeWords also moves each cut off a word a secret could be part of (and past a bearer/basic
	// credential whose scheme word was elided): tool results are redacted after the cut, and the redactor
	// cannot recognise half a key. It keeps every byte to look around the cuts: whole results only.
	wholeWords bool
}

func newHeadTail(max int) *headTail { return &headTail{max: max} }

func (h *headTail) write(p []byte) {
	h.total += int64(len(p))
	if n := h.max/2 - len(h.head); n > 0 {
		n = min(n, len(p))
		h.head = append(h.head, p[:n]...)
		p = p[n:]
	}
	h.tail = append(h.tail, p...)
	if tmax := h.max - h.max/2; !h.wholeWords && len(h.tail) > 2*tmax+4096 {
		h.tail = h.tail[:copy(h.tail, h.tail[len(h.tail)-tmax:])] // in place: no new buffer per cut
	}
}

// String returns the kept output and whether anything was elided.
func (h *headTail) String() (string, bool) {
	s := string(h.head) + string(h.tail)
	if h.total <= int64(h.max) {
		return s, false
	}
	hn, ts := utf8Boundary(h.head), len(s)-(h.max-h.max/2)
	for i := 0; i < 3 && ts < len(s) && !utf8.RuneStart(s[ts]); i++ {
		ts++
	}
	if h.wholeWords {
		if hn > 0 && secretByte(s[hn-1]) && secretByte(s[hn]) {
			hn = safeCut(s[:hn]) + 1
		}
		ts = len(s) - tailAfterSecret(s, ts)
	}
	elided := h.total - int64(hn) - int64(len(s)-ts)
	return s[:hn] + fmt.Sprintf("\n…[%d bytes elided]…\n", elided) + s[ts:], true
}

// boundOutput bounds a whole tool result to max bytes (0: unbounded) by the exec output's rule and
// marker, keeping whole the words a secret could be part of.
func boundOutput(s string, max int) string {
	if max <= 0 || len(s) <= max {
		return s
	}
	h := &headTail{max: max, wholeWords: true}
	h.write([]byte(s))
	out, _ := h.String()
	return out
}

// ---- HTTP ----

// decodeExec reads and checks an exec body as received over the wire.
func decodeExec(r *http.Request) (ExecRequest, error) {
	var req ExecRequest
	b, err := readBody(r)
	if err != nil {
		return req, err
	}
	if err := decodeBytes(b, &req); err != nil {
		return req, err
	}
	var seen map[string]json.RawMessage
	json.Unmarshal(b, &seen)
	if err := validateExecWire(&req, seen); err != nil {
		return req, err
	}
	return req, nil
}

func (s *server) handleExec(w http.ResponseWriter, r *http.Request) error {
	req, err := decodeExec(r)
	if err != nil {
		return err
	}
	res, err := s.computers.Exec(r.Context(), r.PathValue("id"), req, nil)
	return reply(w, http.StatusOK, res, err)
}

// handleExecStream answers `{type: stdout|stderr, data}` frames, then `{type: exit, result}`, then
// `event: done`. Problems found before the command starts are plain error responses.
func (s *server) handleExecStream(w http.ResponseWriter, r *http.Request) error {
	req, err := decodeExec(r)
	if err != nil {
		return err
	}
	x, err := s.computers.prepareExec(r.Context(), r.PathValue("id"), req)
	if err != nil {
		return err
	}
	sse := newSSE(w, ssePingEvery)
	if d := s.streamStallFor; d > 0 {
		sse.mu.Lock()
		sse.stall = d
		sse.mu.Unlock()
	}
	defer sse.close()
	ctx, cancel := sse.bind(r.Context()) // a consumer gone or stalled aborts the work
	defer cancel()
	out := newOutputBatcher(sse.sendOutput)
	res, err := s.computers.runPrepared(ctx, x, out.add)
	out.close()
	if err != nil {
		sse.fail(s.publicError(r.Context(), err))
		return nil
	}
	sse.send(map[string]any{"type": "exit", "result": res})
	return nil
}

// streamMaxPending is how much command output one exec stream queues for its consumer (and the largest
// frame): about 1 MB per stream in all with the frame on the wire and the result's head and tail.
const streamMaxPending = 128 << 10

// outputBatcher sits between a command's output and a slow consumer (an SSE stream): add never waits
// for the network unless maxPending bytes are already queued, and the sender takes everything queued
// at once, merging consecutive chunks of one stream into frames of up to maxFrame bytes. So the command
// keeps running while a frame is on the wire, and a fast producer gets few big frames instead of one
// per pipe read. Order across stdout and stderr is kept. Chunks arrive at UTF-8 boundaries, so merged
// frames stay valid text. What one stream holds is bounded (queued plus on the wire, at most about
// 2×maxPending, issue 25): a consumer that does not read blocks add, which blocks the command's pipe (or
// the exec channel's acknowledgements), so the backpressure reaches the machine instead of memory.
type outputBatcher struct {
	send       func(stream string, data []byte) error // data is the sender's only until it returns
	maxFrame   int
	maxPending int
	minFrame   int           // below this, the sender lingers for more
	linger     time.Duration // at most this long

	mu       sync.Mutex
	cond     *sync.Cond
	queue    []outputChunk
	pending  int
	closed   bool
	failed   bool // the consumer is gone: later output is dropped (the producer is being cancelled)
	lingered bool
	done     chan struct{}
}

type outputChunk struct {
	stream string
	data   []byte
}

func newOutputBatcher(send func(stream string, data []byte) error) *outputBatcher {
	b := &outputBatcher{send: send, maxFrame: streamMaxPending, maxPending: streamMaxPending, minFrame: 64 << 10, linger: time.Millisecond, done: make(chan struct{})}
	b.cond = sync.NewCond(&b.mu)
	go b.run()
	return b
}

// add queues output; it blocks only while maxPending bytes wait for the consumer.
func (b *outputBatcher) add(stream, data string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.pending >= b.maxPending && !b.failed {
		b.cond.Wait()
	}
	if b.failed {
		return
	}
	if n := len(b.queue); n > 0 && b.queue[n-1].stream == stream && len(b.queue[n-1].data)+len(data) <= b.maxFrame {
		b.queue[n-1].data = append(b.queue[n-1].data, data...)
	} else {
		b.queue = append(b.queue, outputChunk{stream: stream, data: append(make([]byte, 0, max(len(data), 64<<10)), data...)})
	}
	b.pending += len(data)
	b.cond.Broadcast()
}

func (b *outputBatcher) run() {
	defer close(b.done)
	for {
		b.mu.Lock()
		for len(b.queue) == 0 && !b.closed {
			b.cond.Wait()
		}
		if b.pending < b.minFrame && !b.closed {
			// A trickle: give the producer a moment to fill a bigger frame (one frame per pipe read
			// costs the consumer a write and a wake-up each).
			t := time.AfterFunc(b.linger, func() { b.mu.Lock(); b.lingered = true; b.cond.Broadcast(); b.mu.Unlock() })
			b.lingered = false
			for b.pending < b.minFrame && !b.closed && !b.lingered {
				b.cond.Wait()
			}
			t.Stop()
		}
		batch := b.queue
		b.queue, b.pending = nil, 0
		closed := b.closed
		b.cond.Broadcast()
		b.mu.Unlock()
		for _, c := range batch {
			if err := b.send(c.stream, c.data); err != nil {
				b.mu.Lock()
				b.failed = true
				b.cond.Broadcast()
				b.mu.Unlock()
				break
			}
		}
		if closed && len(batch) == 0 {
			return
		}
	}
}

// close sends what is queued and waits for the sender. add must not be called after it.
func (b *outputBatcher) close() {
	b.mu.Lock()
	b.closed = true
	b.cond.Broadcast()
	b.mu.Unlock()
	<-b.done
}
