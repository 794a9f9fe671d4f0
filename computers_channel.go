// computers_channel.go — the host half of the warm exec channel: one long-lived `docker exec -i` (or
// podman) per machine into agentd's own binary (`machine-helper`, computers_helper.go), multiplexing every
// exec and file operation of that machine, so a small command costs a frame, not an engine round trip.
// For the sandbox provider (computers_sandbox.go) the channel's process is the machine's bwrap itself.
//
// Entry points: findHelperBinary (at start: may this binary run inside machines?), helperMount (the
// bind mount added at create), computerService.channel (the machine's channel, opened on first use,
// reopened after it broke), execChannel.start / chanProc.wait.
//
// Rules: the channel only carries what the per-call path would run: the command policy and the path
// jail are applied before a request is sent. It runs as the machine's user, so an exec as another user
// or with a TTY takes the per-call path. When the channel is down (not started yet, helper killed, machine
// restarted) the call in flight fails clearly and the next one reopens it; a machine whose helper cannot
// run (created before the channel existed, or a binary that cannot run there) stays on the per-call
// path, and so does everything when findHelperBinary says no. The channel is closed when its machine
// stops, is destroyed or vanishes, and when the service closes: the helper then kills what it started.
package main

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"
)

// helperInMachine is where the helper binary is mounted, read-only, in every docker/podman machine.
const helperInMachine = "/.agentd/agentd"

// helperHelloTimeout bounds a channel's opening (a `docker exec -i`, or a sandbox's whole bwrap, up to
// the helper's hello): generous, since a loaded 2-core host takes seconds where a quiet one takes ms.
const helperHelloTimeout = 30 * time.Second

// findHelperBinary returns the host path of a binary the machines can run as the helper — this
// program, when it is a Linux executable of this architecture — and a note: why the channel is off
// (no path), or what limits it. A static build (CGO_ENABLED=0) runs in any image. A cgo build, which
// is what `go install` makes wherever a C compiler is installed, needs the image's glibc: it is used
// all the same, and a machine where it cannot start (musl, an older glibc) stays on the per-call path.
func findHelperBinary(configured string) (string, string) {
	p := configured
	if p == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", "cannot find agentd's own executable: " + err.Error()
		}
		p = exe
	}
	f, err := elf.Open(p)
	if err != nil {
		return "", fmt.Sprintf("%s is not a Linux executable, so it cannot run inside the machines", p)
	}
	defer f.Close()
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "386": elf.EM_386,
		"arm": elf.EM_ARM, "riscv64": elf.EM_RISCV, "ppc64le": elf.EM_PPC64, "s390x": elf.EM_S390}[runtime.GOARCH]
	if f.Machine != want {
		return "", fmt.Sprintf("%s is built for %v, not for this host's %s", p, f.Machine, runtime.GOARCH)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return p, "agentd is dynamically linked (built with cgo): the channel runs in images with a compatible glibc, other machines use the per-call path; build with CGO_ENABLED=0 for every image"
		}
	}
	return p, ""
}

// helperMount is the engine's -v argument for the helper, or "" when the channel is off.
func (c *computerService) helperMount() string {
	if c.helper == "" {
		return ""
	}
	return c.helper + ":" + helperInMachine + ":ro"
}

// channelHost is a provider whose machines carry the exec channel: docker and podman (over a long
// `docker exec -i`) and the sandbox (the helper is its bwrap's first process).
type channelHost interface {
	provider
	// helperCmd is the host process whose stdin and stdout are the helper's.
	helperCmd(ctx context.Context, m *ComputerInfo) *exec.Cmd
}

// channel returns the machine's open channel, opening it when there is none; nil means "use the
// per-call path" (the channel is off, or cannot run in this machine, or an exec as another user).
func (c *computerService) channel(ctx context.Context, host channelHost, m *ComputerInfo) *execChannel {
	ch, _ := c.channelErr(ctx, host, m)
	return ch
}

// channelErr is channel with the reason there is none (the sandbox has no per-call path to fall back on).
func (c *computerService) channelErr(ctx context.Context, host channelHost, m *ComputerInfo) (*execChannel, error) {
	if c.helper == "" {
		return nil, errors.New("the exec channel is off: " + c.helperNote)
	}
	rt := c.runtime(m.ID)
	rt.chMu.Lock()
	defer rt.chMu.Unlock()
	if rt.ch != nil && rt.ch.alive() {
		return rt.ch, nil
	}
	if rt.chOff != "" {
		return nil, errors.New(rt.chOff)
	}
	ch, err := openChannel(c.ctx, host, m)
	if err != nil {
		var nf *helperMissing
		if _, engine := host.(*engineProvider); engine && errors.As(err, &nf) {
			rt.chOff = err.Error() // a machine made without the mount: per-call until it is recreated
		}
		c.log.Debug("computers: exec channel not opened", "computer", m.ID, "err", err)
		return nil, err
	}
	if sh, ok := host.(socketHost); ok && ch.canUpgrade {
		if dir := sh.channelSocket(m); dir != "" {
			if err := ch.upgrade(dir, chanSockInMachine); err != nil {
				c.log.Debug("computers: exec channel stays on the engine's stdio", "computer", m.ID, "err", err)
			}
		}
	}
	rt.ch = ch
	c.startEgress(ch, m)
	return ch, nil
}

// closeChannel ends a machine's channel (stop, destroy, gone, shutdown); the helper kills its processes.
func (c *computerService) closeChannel(rt *machineRT) {
	rt.chMu.Lock()
	ch := rt.ch
	rt.ch = nil
	rt.chMu.Unlock()
	if ch != nil {
		ch.close()
	}
}

// helperMissing says the machine has no helper to start (it was created without the mount).
type helperMissing struct{ msg string }

func (h *helperMissing) Error() string { return h.msg }

// execChannel is one open channel to one machine.
type execChannel struct {
	machine string
	cmd     interface{ Wait() error }
	kill    context.CancelFunc
	stdin   io.WriteCloser // the helper's stdin: frames until an upgrade, then only its tether
	wmu     sync.Mutex
	w       io.Writer // where frames go: stdin, or the socket after an upgrade (computers_channel_sock.go)

	ctx      context.Context // ends with the channel (dials for its streams)
	mu       sync.Mutex
	procs    map[uint32]*chanProc
	streams  map[uint32]*chanStream // TCP streams (computers_stream.go)
	accept   func(s *chanStream)    // serves a stream the helper accepted (the egress proxy); nil: refused
	handlers sync.WaitGroup         // the accept handlers, waited for by close
	serving  int                    // accept handlers running (at most maxAcceptedStreams)
	next     uint32
	sock     net.Conn      // the upgraded connection, nil on stdio
	err      error         // why the channel broke; nil while it is up
	done     chan struct{} // closed when the channel has ended and every request was failed
	endOnce  sync.Once

	canUpgrade  bool        // the helper's hello says it can move to a socket
	upgradeNack chan string // why the helper could not move to the socket (said on stdio)
}

// newExecChannel is a channel whose frames go to stdin until an upgrade; its reader is started by the caller.
func newExecChannel(ctx context.Context, machine string, cmd interface{ Wait() error }, kill context.CancelFunc, stdin io.WriteCloser) *execChannel {
	return &execChannel{machine: machine, cmd: cmd, kill: kill, ctx: ctx, stdin: stdin, w: stdin, procs: map[uint32]*chanProc{},
		streams: map[uint32]*chanStream{}, done: make(chan struct{}), upgradeNack: make(chan string, 1)}
}

func openChannel(parent context.Context, host channelHost, m *ComputerInfo) (*execChannel, error) {
	ctx, kill := context.WithCancel(parent)
	cmd := host.helperCmd(ctx, m)
	cmd.WaitDelay = time.Second
	stdin, err1 := cmd.StdinPipe()
	stdout, err2 := cmd.StdoutPipe()
	if err := errors.Join(err1, err2); err != nil {
		kill()
		return nil, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &limitedBuffer{b: &stderr, max: 4096}
	start := cmd.Start
	if h, ok := host.(interface {
		startHelper(*exec.Cmd, *ComputerInfo) error
	}); ok { // the sandbox: its user namespace's maps, its cgroup (computers_sandbox_userns.go)
		start = func() error { return h.startHelper(cmd, m) }
	}
	err := start()
	for _, f := range cmd.ExtraFiles { // the child has its copies (the sandbox's mount sources)
		if f != nil {
			f.Close()
		}
	}
	if err != nil {
		kill()
		return nil, err
	}
	ch := newExecChannel(ctx, m.ID, cmd, kill, stdin)
	in := newFrameReader(stdout)
	hello := make(chan error, 1)
	var early bytes.Buffer // what came instead of a hello: the engine prints its exec errors on stdout
	go func() {
		_, kind, payload, err := readFrame(io.TeeReader(in, &limitedBuffer{b: &early, max: 4096}))
		if err == nil && kind != frameHello {
			err = fmt.Errorf("the helper said %q before hello", kind)
		}
		var h helperHello
		json.Unmarshal(payload, &h)
		ch.canUpgrade = h.Sock
		if err != nil {
			io.Copy(&limitedBuffer{b: &early, max: 4096}, in)
		}
		hello <- err
		if err == nil {
			ch.read(in)
		}
	}()
	select {
	case err := <-hello:
		if err == nil {
			return ch, nil
		}
		kill()
		cmd.Wait()
		said := strings.TrimSpace(stderr.String() + "\n" + early.String())
		msg := firstLine(said)
		if msg == "" {
			msg = err.Error()
		}
		if strings.Contains(said, "no such file") || strings.Contains(said, "not found") {
			return nil, &helperMissing{"the machine has no helper at " + helperInMachine + ": " + msg}
		}
		return nil, errors.New("the helper did not start: " + msg)
	case <-time.After(helperHelloTimeout):
		kill()
		cmd.Wait()
		if said := firstLine(stderr.String() + "\n" + early.String()); said != "" {
			return nil, fmt.Errorf("the helper did not answer within %s (it said %q)", helperHelloTimeout, said)
		}
		return nil, fmt.Errorf("the helper did not answer within %s", helperHelloTimeout)
	}
}

// socketHost is a channelHost whose machines can carry the channel over a socket (docker, podman):
// channelSocket is the machine's socket directory on the host, or "" when it has none.
type socketHost interface {
	channelSocket(m *ComputerInfo) string
}

// read dispatches the frames of one connection (stdio, or the upgraded socket) until it ends, then ends
// the channel.
func (ch *execChannel) read(in io.Reader) {
	ch.end(eachFrame(in, ch.frame))
}

func (ch *execChannel) frame(id uint32, kind byte, payload []byte) {
	if kind == frameAccept {
		ch.accepted(id)
		return
	}
	if kind == frameUpgrade && id == 0 { // the helper could not move to the socket
		select {
		case ch.upgradeNack <- string(payload):
		default:
		}
		return
	}
	ch.mu.Lock()
	if st := ch.streams[id]; st != nil {
		ch.mu.Unlock()
		st.frame(kind, payload)
		return
	}
	p := ch.procs[id]
	if kind == frameExit {
		delete(ch.procs, id)
	}
	ch.mu.Unlock()
	if p == nil {
		return // a late frame for a request that is over
	}
	switch kind {
	case frameStdout, frameStderr:
		p.push(chanItem{kind: kind, data: payload})
	case frameExit:
		var x chanExit
		if json.Unmarshal(payload, &x) != nil {
			x = chanExit{Code: -1, Error: "an unreadable exit frame"}
		}
		p.push(chanItem{kind: frameExit, exit: &x})
	case frameAck:
		if len(payload) == 4 {
			p.stdinAcked(int(binary.BigEndian.Uint32(payload)))
		}
	}
}

// end breaks the channel once, for the first connection that ended: the helper's process is stopped,
// the other connection closed, and what is still in flight fails with err.
func (ch *execChannel) end(err error) {
	ch.endOnce.Do(func() {
		ch.kill()
		ch.mu.Lock()
		sock := ch.sock
		ch.mu.Unlock()
		if sock != nil {
			sock.Close()
		}
		werr := ch.cmd.Wait()
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
			err = errors.New("the helper's connection closed")
			if werr != nil {
				err = fmt.Errorf("the helper's connection closed (%v)", werr)
			}
		}
		ch.mu.Lock()
		ch.err = err
		procs, streams := ch.procs, ch.streams
		ch.procs, ch.streams = map[uint32]*chanProc{}, map[uint32]*chanStream{}
		ch.mu.Unlock()
		for _, p := range procs {
			p.push(chanItem{kind: frameExit, broken: err})
		}
		for _, st := range streams {
			st.broken(err.Error())
		}
		ch.handlers.Wait()
		close(ch.done)
	})
}

// maxAcceptedStreams bounds the connections one machine has open through the egress proxy at once.
const maxAcceptedStreams = 256

// newStream registers a stream under id (nil when the channel is broken).
func (ch *execChannel) newStream(id uint32) *chanStream {
	st := newChanStream(id, ch.send, func() {
		ch.mu.Lock()
		delete(ch.streams, id)
		ch.mu.Unlock()
	})
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.err != nil {
		return nil
	}
	ch.streams[id] = st
	return st
}

// accepted serves a connection the helper accepted on the listen port (frameAccept).
func (ch *execChannel) accepted(id uint32) {
	ch.mu.Lock()
	serve := ch.accept
	_, dup := ch.streams[id]
	ok := serve != nil && ch.err == nil && id&helperStream != 0 && !dup && ch.serving < maxAcceptedStreams
	if ok {
		ch.serving++
		ch.handlers.Add(1)
	}
	if !ok {
		ch.handlers.Add(1)
	}
	ch.mu.Unlock()
	if !ok {
		// Not from this goroutine, the frame reader: a write to the helper may wait on it reading.
		go func() {
			defer ch.handlers.Done()
			ch.send(id, frameClose, []byte("the host refused the connection (nothing serves it, or too many are open)"))
		}()
		return
	}
	done := func() {
		ch.mu.Lock()
		ch.serving--
		ch.mu.Unlock()
		ch.handlers.Done()
	}
	st := ch.newStream(id)
	if st == nil {
		done()
		return
	}
	go func() { defer done(); serve(st) }()
}

// listen asks the helper to accept connections on 127.0.0.1:port inside the machine; serve handles each.
func (ch *execChannel) listen(port int, serve func(s *chanStream)) error {
	ch.mu.Lock()
	ch.accept = serve
	ch.mu.Unlock()
	return ch.send(0, frameListen, fmt.Appendf(nil, `{"port":%d}`, port))
}

// dial opens a stream to 127.0.0.1:port inside the machine.
func (ch *execChannel) dial(ctx context.Context, port int) (*chanStream, error) {
	ch.mu.Lock()
	if ch.err != nil {
		ch.mu.Unlock()
		return nil, ch.err
	}
	ch.next++
	id := ch.next
	ch.mu.Unlock()
	st := ch.newStream(id)
	if st == nil {
		return nil, errors.New("the exec channel closed")
	}
	if err := ch.send(id, frameOpen, fmt.Appendf(nil, `{"port":%d}`, port)); err != nil {
		st.broken(err.Error())
		return nil, err
	}
	select {
	case <-st.opened:
		if st.dialErr != "" {
			return nil, errors.New(st.dialErr)
		}
		return st, nil
	case <-ctx.Done():
		st.Close()
		return nil, ctx.Err()
	}
}

func (ch *execChannel) alive() bool {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.err == nil
}

func (ch *execChannel) send(id uint32, kind byte, payload []byte) error {
	ch.wmu.Lock()
	defer ch.wmu.Unlock()
	return writeFrame(ch.w, id, kind, payload)
}

// close ends the channel and waits for its reader; the helper sees EOF and kills its processes.
func (ch *execChannel) close() {
	ch.stdin.Close()
	select {
	case <-ch.done:
	case <-time.After(2 * time.Second):
		ch.kill()
		<-ch.done
	}
}

// chanProc is one request on a channel. Output is delivered, in order, by its own goroutine, so a slow
// writer holds back only this request (and the helper's window bounds what waits here).
type chanProc struct {
	ch             *execChannel
	id             uint32
	stdout, stderr io.Writer

	wmu      sync.Mutex // held while output is written; detached under it
	detached bool       // wait gave up: output still arriving is dropped, the caller has returned

	mu      sync.Mutex
	cond    *sync.Cond
	queue   []chanItem
	credit  int  // stdin bytes the helper has not acknowledged yet
	over    bool // the exit (or the break) was delivered
	result  chanExit
	broken  error
	settled chan struct{}
}

type chanItem struct {
	kind   byte
	data   []byte
	exit   *chanExit
	broken error
}

// start sends a request; stdout and stderr receive the output as it comes; stdin (may be nil) is
// streamed under the window and then closed.
func (ch *execChannel) start(req chanStart, stdin io.Reader, stdout, stderr io.Writer) (*chanProc, error) {
	p := &chanProc{ch: ch, stdout: stdout, stderr: stderr, settled: make(chan struct{})}
	p.cond = sync.NewCond(&p.mu)
	req.Stdin = stdin != nil
	body, _ := json.Marshal(req)
	ch.mu.Lock()
	if ch.err != nil {
		ch.mu.Unlock()
		return nil, ch.err
	}
	ch.next++
	p.id = ch.next
	ch.procs[p.id] = p
	ch.mu.Unlock()
	if err := ch.send(p.id, frameStart, body); err != nil {
		ch.mu.Lock()
		delete(ch.procs, p.id)
		ch.mu.Unlock()
		return nil, err
	}
	go p.deliver()
	if stdin != nil {
		go p.feed(stdin)
	}
	return p, nil
}

func (p *chanProc) push(it chanItem) {
	p.mu.Lock()
	p.queue = append(p.queue, it)
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *chanProc) deliver() {
	unacked := 0
	for {
		p.mu.Lock()
		for len(p.queue) == 0 {
			p.cond.Wait()
		}
		it := p.queue[0]
		p.queue = p.queue[1:]
		p.mu.Unlock()
		switch {
		case it.kind == frameStdout || it.kind == frameStderr:
			w := p.stdout
			if it.kind == frameStderr {
				w = p.stderr
			}
			p.wmu.Lock()
			if !p.detached {
				w.Write(it.data)
			}
			p.wmu.Unlock()
			// Acks are coalesced, one per quarter window: the helper waits only with a whole window
			// unacknowledged, so what is held back here (under a quarter) never stalls it, and a small
			// command's output costs no ack at all.
			unacked += len(it.data)
			if unacked >= chanWindow/4 {
				var n [4]byte
				binary.BigEndian.PutUint32(n[:], uint32(unacked))
				p.ch.send(p.id, frameAck, n[:])
				unacked = 0
			}
		default:
			p.mu.Lock()
			p.over = true
			if it.exit != nil {
				p.result = *it.exit
			}
			p.broken = it.broken
			p.cond.Broadcast()
			p.mu.Unlock()
			close(p.settled)
			return
		}
	}
}

// feed streams stdin in chunks, never more than chanWindow unacknowledged, then closes it. Chunks are
// full (but the last), so the window is at most chanWindow/chanChunk frames: the helper's queue for
// them never fills, and its one reader never waits on a process that does not read its stdin.
func (p *chanProc) feed(r io.Reader) {
	buf := make([]byte, chanChunk)
	for {
		n, err := io.ReadFull(r, buf)
		if err == io.ErrUnexpectedEOF {
			err = io.EOF
		}
		if n > 0 {
			p.mu.Lock()
			for p.credit+n > chanWindow && !p.over {
				p.cond.Wait()
			}
			over := p.over
			p.credit += n
			p.mu.Unlock()
			if over || p.ch.send(p.id, frameStdin, buf[:n]) != nil {
				return
			}
		}
		if err != nil {
			p.ch.send(p.id, frameStdinEOF, nil)
			return
		}
	}
}

func (p *chanProc) stdinAcked(n int) {
	p.mu.Lock()
	p.credit -= n
	p.cond.Broadcast()
	p.mu.Unlock()
}

// errChannelAbandoned is wait's answer when ctx ended and the helper did not confirm the kill in time.
var errChannelAbandoned = errors.New("the process was killed; its end was not confirmed")

// wait returns the process's end after all its output was written. When ctx ends first, the process
// group is killed and wait returns once the helper confirms (or after a short grace).
func (p *chanProc) wait(ctx context.Context) (chanExit, error) {
	select {
	case <-p.settled:
	case <-ctx.Done():
		p.ch.send(p.id, frameKill, nil)
		select {
		case <-p.settled:
		case <-time.After(2 * time.Second):
			p.wmu.Lock()
			p.detached = true
			p.wmu.Unlock()
			return chanExit{}, errChannelAbandoned
		}
	}
	return p.result, p.broken
}

// limitedBuffer keeps the first max bytes written (the helper's stderr: a reason, never a flood).
type limitedBuffer struct {
	mu  sync.Mutex
	b   *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := l.max - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
