// computers_helper.go — the in-machine half of the warm exec channel: `agentd machine-helper`, a hidden
// subcommand that agentd starts once per docker/podman machine over one long-lived `docker exec -i`.
//
// Entry points: runMachineHelper (the subcommand).
//
// The wire (computers_wire.go, with its table of who sends what) is frames on stdin/stdout. The host starts a process with frameStart (JSON chanStart), feeds
// its stdin with frameStdin/frameStdinEOF, and may kill it with frameKill; the helper streams
// frameStdout/frameStderr and ends each request with one frameExit (JSON chanExit). A start with `op`
// set is a file operation the helper does itself (resolve, read, write, list: helperFileOp). TCP streams
// (port forwards, the egress proxy's connections) have frames of their own: computers_stream.go. Output is
// flow-controlled per request: at most chanWindow bytes are in flight until the host acknowledges them
// with frameAck, and the same holds for stdin the other way, so one slow reader never stalls the others
// and memory stays bounded on both sides.
//
// Rules: the helper runs as the machine's user and starts nothing the host did not ask for (the command
// policy and the path jail are applied on the host, before a request is sent, exactly as for the
// per-call path). Each process leads its own session; its group is recorded in /tmp/.agentd-chan-<token>.pid
// (on ssh, in the machine's own directory: --pid-files, since the host's /tmp is shared)
// and killed on frameKill. When the host goes away (stdin EOF), every process group is killed and the
// helper exits. A helper that was killed cannot do that, so a new one first kills the groups its
// predecessor recorded (and the restart reconcile does the same): nothing outlives the channel for long.
package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// helper is the running subcommand: one stdout writer, the processes by request id.
type helper struct {
	pidFiles string // the prefix of the pid files (helperPidFiles; a test's own directory)
	wmu      sync.Mutex
	out      io.Writer
	mu       sync.Mutex
	procs    map[uint32]*helperProc
	wg       sync.WaitGroup
	streams  map[uint32]*chanStream // TCP streams (computers_stream.go), by id
	nextSt   uint32
	ln       net.Listener // the egress proxy's port, after frameListen
	closing  bool         // stdin ended: no new streams
	sock     net.Conn     // the upgraded connection (computers_channel_sock.go), nil on stdio
	ended    chan error   // the first connection to end ends the helper
	drain    pipeDrain    // the output pipes of ended commands that background children still hold
}

type helperProc struct {
	id     uint32
	inQ    chan []byte // stdin frames, owned by the dispatch loop; nil when the request has no stdin
	mu     sync.Mutex
	cond   *sync.Cond
	unack  int           // output bytes sent and not yet acknowledged
	pgid   int           // guarded by mu: 0 until the process started
	killed bool          // guarded by mu: a kill came (perhaps before the start)
	done   chan struct{} // closed when the request is over
}

func (h *helper) send(id uint32, kind byte, payload []byte) error {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	return writeFrame(h.out, id, kind, payload)
}

// helperPidFiles is the prefix of the files that record the channel's process groups.
const helperPidFiles = "/tmp/.agentd-chan-"

// runMachineHelper serves one channel until stdin ends; then it kills what it started and returns.
// pidFiles is the prefix of its pid files ("": helperPidFiles; the ssh provider gives each machine its
// own, since every machine on an ssh host shares its /tmp).
func runMachineHelper(stdin io.Reader, stdout io.Writer, pidFiles string) error {
	if pidFiles == "" {
		pidFiles = helperPidFiles
	}
	return serveHelper(stdin, stdout, pidFiles)
}

func serveHelper(stdin io.Reader, stdout io.Writer, pidFiles string) error {
	if old, _ := filepath.Glob(pidFiles + "*.pid"); len(old) > 0 {
		for _, f := range old { // a previous helper's processes: it died without killing them
			if b, err := os.ReadFile(f); err == nil {
				if pgid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
					killGroup(pgid)
				}
			}
			os.Remove(f)
		}
	}
	h := &helper{out: stdout, procs: map[uint32]*helperProc{}, pidFiles: pidFiles, streams: map[uint32]*chanStream{}, ended: make(chan error, 2)}
	hello, _ := json.Marshal(helperHello{Pid: os.Getpid(), Sock: true})
	if err := h.send(0, frameHello, hello); err != nil {
		return err
	}
	// stdin is the tether: its end is the host's goodbye even after an upgrade moved the frames to the
	// socket, whose end is one too. A reader still blocked then ends with the process.
	go func() { h.ended <- eachFrame(newFrameReader(stdin), h.dispatch) }()
	err := <-h.ended
	h.mu.Lock()
	if h.sock != nil {
		h.sock.Close()
	}
	h.closing = true
	if h.ln != nil {
		h.ln.Close()
	}
	streams := make([]*chanStream, 0, len(h.streams))
	for _, st := range h.streams {
		streams = append(streams, st)
	}
	h.mu.Unlock()
	for _, st := range streams { // outside h.mu: an ended stream takes it to leave the table
		st.broken("the exec channel closed")
	}
	h.mu.Lock()
	for _, p := range h.procs {
		p.mu.Lock()
		p.killed = true // one still starting is killed by its start
		killGroup(p.pgid)
		p.unack = -1 << 40 // nobody will ack again: let the pumps drain into the closed output and end
		p.cond.Broadcast()
		p.mu.Unlock()
	}
	h.mu.Unlock()
	h.drain.Close()
	h.wg.Wait()
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

func (h *helper) dispatch(id uint32, kind byte, payload []byte) {
	switch kind {
	case frameStart:
		h.start(id, payload)
		return
	case frameOpen:
		h.openStream(id, payload)
		return
	case frameListen:
		h.listen(payload)
		return
	case frameUpgrade:
		h.upgrade(payload)
		return
	}
	h.mu.Lock()
	p, st := h.procs[id], h.streams[id]
	h.mu.Unlock()
	if st != nil {
		st.frame(kind, payload)
		return
	}
	if p == nil {
		return // a late frame for a request that is over
	}
	switch kind {
	case frameStdin:
		if p.inQ != nil {
			p.inQ <- payload
		}
	case frameStdinEOF:
		if p.inQ != nil {
			close(p.inQ)
			p.inQ = nil
		}
	case frameKill:
		p.mu.Lock()
		p.killed = true
		pgid := p.pgid
		p.mu.Unlock()
		killGroup(pgid) // 0 (not started yet) is nothing: the start sees killed
	case frameAck:
		if len(payload) == 4 {
			p.mu.Lock()
			p.unack -= int(binary.BigEndian.Uint32(payload))
			p.cond.Broadcast()
			p.mu.Unlock()
		}
	}
}

func (h *helper) fail(id uint32, msg string) {
	b, _ := json.Marshal(chanExit{Code: -1, Error: msg})
	h.send(id, frameExit, b)
}

func (h *helper) start(id uint32, payload []byte) {
	var req chanStart
	if err := json.Unmarshal(payload, &req); err != nil || len(req.Argv) == 0 {
		h.fail(id, "a start request without a command")
		return
	}
	if req.Op != "" {
		h.startFileOp(id, req)
		return
	}
	// Registered now, started by its own goroutine: process starts of concurrent requests overlap, and
	// this loop goes on reading (stdin frames queue up, a kill is remembered until there is a group).
	p := &helperProc{id: id, done: make(chan struct{})}
	p.cond = sync.NewCond(&p.mu)
	if req.Stdin {
		// The host sends at most chanWindow unacknowledged stdin bytes in chanChunk frames: never full.
		p.inQ = make(chan []byte, 2*chanWindow/chanChunk)
	}
	h.mu.Lock()
	h.procs[id] = p
	h.mu.Unlock()
	q := p.inQ // from here on p.inQ belongs to the dispatch loop (it closes and clears it at EOF)
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		code, msg := h.runProcess(p, req, q)
		close(p.done)
		h.mu.Lock()
		delete(h.procs, id)
		h.mu.Unlock()
		if msg != "" {
			code = -1
		}
		b, _ := json.Marshal(chanExit{Code: code, Error: msg})
		h.send(id, frameExit, b)
	}()
}

// ---- TCP streams (computers_stream.go) ----

// sendLater sends a frame from its own goroutine: the frame reader must not wait on the host reading.
func (h *helper) sendLater(id uint32, kind byte, payload []byte) {
	h.wg.Add(1)
	go func() { defer h.wg.Done(); h.send(id, kind, payload) }()
}

// addStream registers a stream under id; false once the helper is closing.
func (h *helper) addStream(id uint32) (*chanStream, bool) {
	st := newChanStream(id, h.send, func() {
		h.mu.Lock()
		delete(h.streams, id)
		h.mu.Unlock()
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing {
		return nil, false
	}
	h.streams[id] = st
	h.wg.Add(1)
	return st, true
}

// openStream connects to 127.0.0.1:port inside the machine for the host (a port forward).
func (h *helper) openStream(id uint32, payload []byte) {
	var req struct {
		Port int `json:"port"`
	}
	if json.Unmarshal(payload, &req) != nil || req.Port < 1 || req.Port > 65535 {
		h.sendLater(id, frameClose, []byte("a stream request without a port"))
		return
	}
	st, ok := h.addStream(id)
	if !ok {
		h.sendLater(id, frameClose, []byte("the helper is closing"))
		return
	}
	go func() {
		defer h.wg.Done()
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(req.Port)), 5*time.Second)
		if err != nil {
			st.closeWith(fmt.Sprintf("nothing answers on port %d inside the machine: %v", req.Port, err))
			return
		}
		h.send(id, frameOpened, nil)
		splice(st, asHalfConn(c))
	}()
}

// listen accepts connections on 127.0.0.1:port inside the machine (the egress proxy's address) and
// carries each to the host as a new stream. A second listen is ignored.
func (h *helper) listen(payload []byte) {
	var req struct {
		Port int `json:"port"`
	}
	if json.Unmarshal(payload, &req) != nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ln != nil || h.closing {
		return
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(req.Port)))
	if err != nil {
		h.sendLater(0, frameStderr, fmt.Appendf(nil, "machine-helper: cannot listen on the proxy port: %v\n", err))
		return
	}
	h.ln = ln
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h.mu.Lock()
			h.nextSt++
			id := helperStream | h.nextSt
			h.mu.Unlock()
			st, ok := h.addStream(id)
			if !ok {
				c.Close()
				return
			}
			if h.send(id, frameAccept, nil) != nil {
				c.Close()
				st.broken("the exec channel closed")
				h.wg.Done()
				return
			}
			go func() { defer h.wg.Done(); splice(st, asHalfConn(c)) }()
		}
	}()
}

// runProcess starts req's process and streams it until it is over: its exit code, or why it never ran.
func (h *helper) runProcess(p *helperProc, req chanStart, stdinQ chan []byte) (int, string) {
	cmd := exec.Command(req.Argv[0], req.Argv[1:]...)
	if lp, err := exec.LookPath(req.Argv[0]); err == nil {
		cmd.Path, cmd.Err = lp, nil
	} else if !strings.Contains(req.Argv[0], "/") {
		// What the per-call path's shell says (and the local provider), without starting one.
		h.send(p.id, frameStderr, fmt.Appendf(nil, "sh: 1: %s: not found\n", req.Argv[0]))
		return 127, ""
	}
	if req.Cwd != "" {
		if st, err := os.Stat(req.Cwd); err != nil || !st.IsDir() {
			return 0, fmt.Sprintf("chdir to cwd (%q): no such directory", req.Cwd)
		}
	}
	cmd.Dir = req.Cwd
	cmd.Env = os.Environ()
	for k, v := range req.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	newSession(cmd)
	var ours, theirs []*os.File // our ends, closed when the process is over; the child's, after its start
	defer func() {
		for _, f := range append(ours, theirs...) {
			f.Close()
		}
	}()
	var stdinW *os.File
	if stdinQ != nil {
		r, w, err := os.Pipe()
		if err != nil {
			return 0, "cannot make a pipe: " + err.Error()
		}
		cmd.Stdin, stdinW, theirs = r, w, append(theirs, r)
	}
	outR, outW, err1 := os.Pipe()
	errR, errW, err2 := os.Pipe()
	if err := errors.Join(err1, err2); err != nil {
		return 0, "cannot make a pipe: " + err.Error()
	}
	growPipe(outR)
	ours, theirs = append(ours, outR, errR), append(theirs, outW, errW)
	cmd.Stdout, cmd.Stderr = outW, errW
	if err := cmd.Start(); err != nil {
		if stdinW != nil {
			stdinW.Close()
		}
		return 0, "cannot start " + req.Argv[0] + ": " + err.Error()
	}
	for _, f := range theirs {
		f.Close() // the child holds its own copies; ours would keep the pipes from ever ending
	}
	theirs = nil
	p.mu.Lock()
	p.pgid = cmd.Process.Pid
	killed := p.killed
	p.mu.Unlock()
	if killed {
		killGroup(p.pgid)
	}
	pidFile := h.pidFiles + req.Token + ".pid"
	if req.Token != "" {
		os.WriteFile(pidFile, fmt.Appendf(nil, "%d\n", p.pgid), 0o600)
		defer os.Remove(pidFile)
	}
	if stdinW != nil {
		go h.feedStdin(p.id, stdinW, stdinQ, p.done)
	}
	var pumps sync.WaitGroup
	pumps.Add(2)
	go func() { defer pumps.Done(); h.pump(p, outR, frameStdout) }()
	go func() { defer pumps.Done(); h.pump(p, errR, frameStderr) }()
	err := cmd.Wait()
	// Whatever still holds the pipes now is a background child: read what arrives within execPipeGrace,
	// then what the pipes hold (at most execPipeTail), as the per-call path does.
	outR.SetReadDeadline(time.Now().Add(execPipeGrace))
	errR.SetReadDeadline(time.Now().Add(execPipeGrace))
	pumps.Wait()
	// The pipes are not closed under that child (its next write would be a SIGPIPE or an EPIPE: a dev
	// server started with `setsid nohup … &` died at its first log line): drained until it closes them.
	h.drain.add(outR, errR)
	ours = nil
	if err != nil {
		return exitCodeOf(cmd.ProcessState), ""
	}
	return 0, ""
}

// pipeDrain owns the read ends of output pipes whose command ended while a background child of it
// still holds the write ends: it reads and discards what that child writes until the child closes them
// (it ends) or Close (the helper or the service ends; the machine's processes end with its stop). So
// a process started in the background keeps running, and writing, after the exec that started it.
type pipeDrain struct {
	mu     sync.Mutex
	files  map[*os.File]struct{}
	closed bool
	wg     sync.WaitGroup
}

// add drains each file from now on (closed at once after Close).
func (d *pipeDrain) add(files ...*os.File) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, f := range files {
		if d.closed {
			f.Close()
			continue
		}
		if d.files == nil {
			d.files = map[*os.File]struct{}{}
		}
		d.files[f] = struct{}{}
		f.SetReadDeadline(time.Time{})
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			io.Copy(io.Discard, f)
			d.mu.Lock()
			delete(d.files, f)
			d.mu.Unlock()
			f.Close()
		}()
	}
}

// Close stops draining (a blocked read ends when its file closes) and waits for the drains.
func (d *pipeDrain) Close() {
	d.mu.Lock()
	d.closed = true
	for f := range d.files {
		f.Close()
	}
	d.mu.Unlock()
	d.wg.Wait()
}

// pump sends one output pipe as frames, waiting for acks when a window is in flight.
func (h *helper) pump(p *helperProc, r *os.File, kind byte) {
	buf := make([]byte, chanOutChunk)
	late := 0
	for {
		p.mu.Lock()
		for p.unack >= chanWindow {
			p.cond.Wait()
		}
		p.mu.Unlock()
		n, err := readOutput(r, buf, &late) // past runProcess's deadline, at most execPipeTail more
		if n > 0 {
			p.mu.Lock()
			p.unack += n
			p.mu.Unlock()
			if h.send(p.id, kind, buf[:n]) != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// feedStdin writes stdin frames to the process and acks each, which lets the host send more.
func (h *helper) feedStdin(id uint32, w *os.File, q chan []byte, done chan struct{}) {
	defer w.Close()
	broken := false
	for {
		var b []byte
		var ok bool
		select {
		case b, ok = <-q:
		case <-done: // the process ended before its stdin did: frames still coming are ignored
			return
		}
		if !ok {
			return
		}
		if !broken {
			_, err := w.Write(b)
			broken = err != nil // the process stopped reading: the rest is acked and dropped
		}
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(b)))
		h.send(id, frameAck, n[:])
	}
}

// exitCodeOf is the shell's convention: the code, or 128+signal for a killed process.
func exitCodeOf(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	if sig, ok := signalled(ps); ok {
		return 128 + sig
	}
	return ps.ExitCode()
}

// ---- file operations, done by the helper itself (no shell per call) ----
//
// Each is the Go twin of engineFS's script for the same operation (computers_engine.go), with the same
// answers and the same rule for reads and writes: open first, then check what was opened
// (/proc/self/fd) is under /work or /tmp, so a symlink swapped in after the host's resolve is caught.

// helperFileOp runs one file operation; its output goes to out, its failure is the error's text.
func helperFileOp(req chanStart, in io.Reader, out io.Writer) error {
	switch req.Op {
	case "resolve":
		var b strings.Builder
		for _, p := range req.Argv {
			b.WriteString(canonicalPath(p) + "\n")
		}
		_, err := io.WriteString(out, b.String())
		return err
	case "read":
		f, err := openChecked(req.Argv[0], os.O_RDONLY)
		if err != nil {
			return err
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil && st.IsDir() {
			return errors.New("is a directory")
		}
		_, err = io.Copy(out, f)
		return err
	case "write":
		p := req.Argv[0]
		if err := os.MkdirAll(filepath.Dir(p), 0o777); err != nil {
			return err
		}
		f, err := openChecked(p, os.O_RDWR|os.O_CREATE)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := f.Truncate(0); err != nil {
			return err
		}
		if _, err := io.Copy(f, in); err != nil {
			return err
		}
		return f.Close()
	case "list":
		return listEntries(req.Argv[0], out)
	}
	return fmt.Errorf("unknown file operation %q", req.Op)
}

// openChecked opens p and refuses the file when what was opened is outside /work and /tmp.
func openChecked(p string, flag int) (*os.File, error) {
	f, err := os.OpenFile(p, flag, 0o666)
	if err != nil {
		return nil, fmt.Errorf("cannot open %s: %w", p, unwrapPathError(err))
	}
	real, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	if err != nil || !insideWritable(real) {
		f.Close()
		return nil, errors.New("escapes the jail through a symlink")
	}
	return f, nil
}

// canonicalPath is `readlink -m`: every symlink of every existing component followed (a ".." after a
// link applies to where the link led, so nothing is cleaned before), the rest lexical. Like readlink -m,
// a loop leaves the path as it was given (opening it then fails).
func canonicalPath(p string) string {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	cur, links := "/", 0
	for i := 0; i < len(parts); i++ {
		part := parts[i]
		switch part {
		case "", ".":
			continue
		case "..":
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, part)
		fi, err := os.Lstat(next)
		if err != nil {
			return path.Clean(next + "/" + strings.Join(parts[i+1:], "/"))
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			cur = next
			continue
		}
		if links++; links > 40 {
			return path.Clean("/" + p)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "(unresolvable)" + p
		}
		if !path.IsAbs(target) {
			target = path.Join(cur, target)
		}
		parts = append(strings.Split(strings.TrimPrefix(path.Clean(target), "/"), "/"), parts[i+1:]...)
		cur, i = "/", -1
	}
	return cur
}

// listEntries writes find's records for p: its entries when it is a directory, else p itself.
func listEntries(p string, out io.Writer) error {
	st, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("'%s': %w", p, unwrapPathError(err))
	}
	var names []string
	if st.IsDir() {
		ents, err := os.ReadDir(p)
		if err != nil {
			return fmt.Errorf("'%s': %w", p, unwrapPathError(err))
		}
		for _, e := range ents {
			names = append(names, filepath.Join(p, e.Name()))
		}
	} else {
		names = []string{p}
	}
	var b bytes.Buffer
	for _, n := range names {
		fi, err := os.Lstat(n)
		if err != nil {
			continue // gone meanwhile
		}
		t := "f"
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			t = "l"
		case fi.IsDir():
			t = "d"
		case !fi.Mode().IsRegular():
			t = "o"
		}
		mode := fi.Mode().Perm()
		for bit, v := range map[os.FileMode]os.FileMode{os.ModeSetuid: 0o4000, os.ModeSetgid: 0o2000, os.ModeSticky: 0o1000} {
			if fi.Mode()&bit != 0 {
				mode |= v
			}
		}
		fmt.Fprintf(&b, "%s\t%d\t%d.%09d\t%o\t%s\x00", t, fi.Size(), fi.ModTime().Unix(), fi.ModTime().Nanosecond(), uint32(mode), fi.Name())
	}
	_, err = out.Write(b.Bytes())
	return err
}

// frameOut writes a request's output as frames under the flow-control window.
type frameOut struct {
	h *helper
	p *helperProc
}

func (w *frameOut) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) > 0 {
		c := b[:min(len(b), chanChunk)]
		w.p.mu.Lock()
		for w.p.unack >= chanWindow {
			w.p.cond.Wait()
		}
		w.p.unack += len(c)
		w.p.mu.Unlock()
		if err := w.h.send(w.p.id, frameStdout, c); err != nil {
			return 0, err
		}
		b = b[len(c):]
	}
	return n, nil
}

// queueReader reads a request's stdin frames, acknowledging each so the host sends more.
type queueReader struct {
	h    *helper
	id   uint32
	q    chan []byte
	done chan struct{}
	cur  []byte
}

func (r *queueReader) Read(b []byte) (int, error) {
	for len(r.cur) == 0 {
		select {
		case c, ok := <-r.q:
			if !ok {
				return 0, io.EOF
			}
			r.cur = c
			var n [4]byte
			binary.BigEndian.PutUint32(n[:], uint32(len(c)))
			r.h.send(r.id, frameAck, n[:])
		case <-r.done:
			return 0, io.EOF
		}
	}
	n := copy(b, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

// startFileOp runs a file operation as a request: stdin frames feed it, output goes out as stdout.
func (h *helper) startFileOp(id uint32, req chanStart) {
	p := &helperProc{id: id, done: make(chan struct{})}
	p.cond = sync.NewCond(&p.mu)
	var in io.Reader = bytes.NewReader(nil)
	if req.Stdin {
		p.inQ = make(chan []byte, 2*chanWindow/chanChunk)
		in = &queueReader{h: h, id: id, q: p.inQ, done: p.done}
	}
	if len(req.Argv) == 0 && req.Op != "resolve" {
		h.fail(id, "a file operation without a path")
		return
	}
	h.mu.Lock()
	h.procs[id] = p
	h.mu.Unlock()
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		err := helperFileOp(req, in, &frameOut{h: h, p: p})
		close(p.done)
		h.mu.Lock()
		delete(h.procs, id)
		h.mu.Unlock()
		x := chanExit{}
		if err != nil {
			x = chanExit{Code: 1, Error: err.Error()}
		}
		b, _ := json.Marshal(x)
		h.send(id, frameExit, b)
	}()
}
