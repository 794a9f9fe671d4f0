// computers_ports.go — exposing a guest port on the host: a userspace TCP forwarder per (machine, port).
//
// Entry points: computerService.ExposePort (the run loop's expose_port tool) and handleExposePort.
// Rules (DESIGN §4): a forwarder on 127.0.0.1:<ephemeral> whose every connection is a stream over the
// machine's exec channel to 127.0.0.1:<port> inside it (computers_stream.go), on docker, podman,
// kubernetes, ssh and a sandbox with a network of its own (ssh without its channel: the forward of its
// own connection: forwarding); a machine without the channel gets
// E_COMPUTER_FAILED saying why, network none E_COMPUTER_FAILED. local, and a sandbox in mode full
// without root (the host's network), answer the port themselves. Exposing a port twice returns the
// same binding; forwarders close on stop and destroy (and with the server).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// portForwarder accepts on a host listener and pipes each connection to the guest port, a stream over
// the machine's exec channel.
type portForwarder struct {
	ln     net.Listener
	dial   guestDialer
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[io.Closer]struct{}
	closed bool
}

// guestDialer opens a stream to a machine's guest port.
type guestDialer func(ctx context.Context) (*chanStream, error)

// answers reports whether something accepts on the guest port within timeout: the helper inside the
// machine connects before it opens the stream.
func (d guestDialer) answers(timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	st, err := d(ctx)
	if err == nil {
		st.Close()
	}
	return err == nil
}

// hostPortAnswers reports whether something accepts on the host's port (a machine on the host's network).
func hostPortAnswers(port int, timeout time.Duration) bool {
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), timeout)
	if err == nil {
		c.Close()
	}
	return err == nil
}

func startForwarder(dial guestDialer) (*portForwarder, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &portForwarder{ln: ln, dial: dial, conns: map[io.Closer]struct{}{}}
	f.wg.Add(1)
	go f.accept()
	return f, nil
}

func (f *portForwarder) port() int { return f.ln.Addr().(*net.TCPAddr).Port }

func (f *portForwarder) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		if !f.track(c) {
			c.Close()
			return
		}
		f.wg.Add(1)
		go f.pipe(c)
	}
}

func (f *portForwarder) track(c io.Closer) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *portForwarder) untrack(c io.Closer) {
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
	c.Close()
}

func (f *portForwarder) pipe(c net.Conn) {
	defer f.wg.Done()
	defer f.untrack(c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	up, err := f.dial(ctx)
	cancel()
	if err != nil {
		return
	}
	if !f.track(up) {
		up.Close()
		return
	}
	defer f.untrack(up)
	splice(up, asHalfConn(c))
}

// Close stops accepting, cuts every connection and waits.
func (f *portForwarder) Close() {
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.ln.Close()
	f.wg.Wait()
}

func (c *computerService) closePorts(rt *machineRT) {
	c.mu.Lock()
	fws := rt.ports
	rt.ports = map[int]*portForwarder{}
	c.mu.Unlock()
	for _, f := range fws {
		f.Close()
	}
}

// ExposePort binds a guest port to the host (idempotent per port).
func (c *computerService) ExposePort(ctx context.Context, id string, port int) (*PortBinding, error) {
	if port < 1 || port > 65535 {
		return nil, errorf(codeSpecInvalid, "port: must be between 1 and 65535, received %d", port).withHint("send {\"port\": 8080}")
	}
	m, err := c.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	rt := c.runtime(m.ID)
	rt.mu.Lock()
	defer rt.mu.Unlock()
	// Read the record again under the lock: a stop or destroy that held it meanwhile changed it, and
	// saving the stale copy would bring the machine back as running (with a forwarder nobody closes).
	m, p, err := c.getLive(ctx, m.ID)
	if err != nil {
		return nil, err
	}
	key := strconv.Itoa(port)
	c.mu.Lock()
	fw := rt.ports[port]
	c.mu.Unlock()
	var b PortBinding
	switch {
	case sharesHostNetwork(p, m):
		b = PortBinding{HostPort: port, URL: fmt.Sprintf("http://127.0.0.1:%d", port)}
	case fw != nil:
		b = PortBinding{HostPort: fw.port(), URL: fmt.Sprintf("http://127.0.0.1:%d", fw.port())}
	case isForwarding(p) && !c.channelCarries(ctx, p, m):
		hp, err := forwardedPort(ctx, p, m, port)
		if err != nil {
			return nil, err
		}
		b = PortBinding{HostPort: hp, URL: fmt.Sprintf("http://127.0.0.1:%d", hp)}
	default:
		dial, err := c.guestDialer(ctx, p, m, port)
		if err != nil {
			return nil, err
		}
		fw, err = startForwarder(dial)
		if err != nil {
			return nil, errorf(codeComputerFailed, "cannot open a host port: %v", err).withHint("check the host's free ports")
		}
		c.mu.Lock()
		rt.ports[port] = fw
		c.mu.Unlock()
		b = PortBinding{HostPort: fw.port(), URL: fmt.Sprintf("http://127.0.0.1:%d", fw.port())}
	}
	switch {
	case fw != nil:
		b.Reachable = fw.dial.answers(time.Second)
	case isForwarding(p):
		b.Reachable = relayAnswers(b.HostPort, time.Second)
	default:
		b.Reachable = hostPortAnswers(port, time.Second)
	}
	old, had := m.Ports[key]
	m.Ports[key] = b
	if !had || old.HostPort != b.HostPort {
		if err := c.save(ctx, m); err != nil {
			return nil, err
		}
		c.hub.publish("computers", "port_exposed", map[string]any{"computerId": m.ID, "port": port, "hostPort": b.HostPort, "binding": b})
	}
	return &b, nil
}

// guestDialer is how a forwarder reaches the machine's port: a stream over its exec channel.
func (c *computerService) guestDialer(ctx context.Context, p provider, m *ComputerInfo, port int) (guestDialer, error) {
	if m.Spec.Network.Mode == "none" {
		return nil, errorf(codeComputerFailed, "computer %s has network mode none, so no port can be reached", m.ID).
			withHint("create the computer with network.mode egress or full")
	}
	host, ok := p.(channelHost)
	if !ok {
		return nil, errorf(codeComputerFailed, "the %s provider cannot forward a port", m.Provider)
	}
	if _, err := c.channelErr(ctx, host, m); err != nil {
		return nil, errorf(codeComputerFailed, "computer %s's ports are reached only over its exec channel, which is unavailable: %v", m.ID, err).
			withHint("turn execChannel on in config.yaml (" + takesEffect("execChannel") + "), or use an image agentd's helper runs in (a CGO_ENABLED=0 build runs in any)")
	}
	mc := *m
	return func(ctx context.Context) (*chanStream, error) {
		ch, err := c.channelErr(ctx, host, &mc)
		if err != nil {
			return nil, err
		}
		return ch.dial(ctx, port)
	}, nil
}

// forwarding is a provider whose own connection forwards a guest port to a host port (ssh: the
// machine's master, `ssh -O forward -L`), with no exec channel to carry a stream: the binding is that
// host port, with no forwarder of agentd's.
type forwarding interface {
	guestAddr(ctx context.Context, m *ComputerInfo, port int) (string, error)
}

func isForwarding(p provider) bool { _, ok := p.(forwarding); return ok }

// channelCarries: a forwarding provider that also has an exec channel (ssh, computers_ssh_chan.go) takes
// its ports over the channel like the others while the channel can be opened; its own forward is the fallback.
func (c *computerService) channelCarries(ctx context.Context, p provider, m *ComputerInfo) bool {
	host, ok := p.(channelHost)
	return ok && c.channel(ctx, host, m) != nil
}

func forwardedPort(ctx context.Context, p provider, m *ComputerInfo, port int) (int, error) {
	addr, err := p.(forwarding).guestAddr(ctx, m, port)
	if err != nil {
		return 0, err
	}
	a, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return 0, errorf(codeComputerFailed, "the %s provider forwarded port %d to %q: %v", m.Provider, port, addr, err)
	}
	return a.Port, nil
}

// relayAnswers reports whether the guest answers behind a forward that accepts before the guest does
// and closes a connection the guest refused: one still open after timeout, or that sent a byte, counts.
func relayAnswers(hostPort int, timeout time.Duration) bool {
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(hostPort)), timeout)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(timeout))
	n, err := c.Read(make([]byte, 1))
	var ne net.Error
	return n > 0 || errors.As(err, &ne) && ne.Timeout()
}

// hostNetworked is a provider whose machine may share the host's network (local; a sandbox not in
// network mode none): a guest port is then the host's port, with no forwarder.
type hostNetworked interface{ hostNetwork(m *ComputerInfo) bool }

func sharesHostNetwork(p provider, m *ComputerInfo) bool {
	h, ok := p.(hostNetworked)
	return ok && h.hostNetwork(m)
}

// reachable reports whether something answers on a machine's guest port, checked at most once a second
// per port (ComputerInfo is read often; a dial is cheap but not free).
func (c *computerService) reachable(m *ComputerInfo, port int) bool {
	rt := c.runtime(m.ID)
	now := c.now()
	c.mu.Lock()
	last, ok := rt.reach[port]
	var dial guestDialer
	if fw := rt.ports[port]; fw != nil {
		dial = fw.dial
	}
	c.mu.Unlock()
	if ok && now.Sub(last.at) < time.Second && now.Sub(last.at) >= 0 {
		return last.ok
	}
	up := false
	switch { // a forwarder gone with a restart: not reachable until the port is exposed again
	case dial != nil:
		up = dial.answers(300 * time.Millisecond)
	case sharesHostNetwork(c.providerByName(m.Provider), m):
		up = hostPortAnswers(port, 300*time.Millisecond)
	case isForwarding(c.providerByName(m.Provider)):
		if hp, err := forwardedPort(context.Background(), c.providerByName(m.Provider), m, port); err == nil {
			up = relayAnswers(hp, 300*time.Millisecond)
		}
	}
	c.mu.Lock()
	if rt.reach == nil {
		rt.reach = map[int]reachCheck{}
	}
	rt.reach[port] = reachCheck{at: now, ok: up}
	c.mu.Unlock()
	return up
}

func (s *server) handleExposePort(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Port json.RawMessage `json:"port"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	if len(body.Port) == 0 {
		return errorf(codeSpecInvalid, "port: Required").withHint(`send {"port": 8080}`)
	}
	port, err := strconv.Atoi(string(body.Port))
	if err != nil {
		return errorf(codeSpecInvalid, "port: expected an integer between 1 and 65535, received %s", body.Port).withHint(`send {"port": 8080}`)
	}
	b, err := s.computers.ExposePort(r.Context(), r.PathValue("id"), port)
	return reply(w, http.StatusOK, b, err)
}
