// computers_ports.go — exposing a guest port on the host: a userspace TCP forwarder per (machine, port).
//
// Entry points: computerService.ExposePort (the run loop's expose_port tool) and handleExposePort.
// Rules (DESIGN §4): docker/podman get a forwarder on 127.0.0.1:<ephemeral> to the container's address;
// a machine in network mode egress (docker, podman, sandbox: no network of its own) a forwarder whose
// connections are streams over its exec channel (computers_stream.go; without the channel it is
// E_COMPUTER_FAILED saying why), and network none E_COMPUTER_FAILED; local, and a sandbox in mode full
// (the host's network), answer the port themselves. Exposing a port twice
// returns the same binding; forwarders close on stop and destroy (and with the server).
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

// portForwarder accepts on a host listener and pipes each connection to the guest port: a TCP address,
// or (machines with no network of their own) a stream over the exec channel.
type portForwarder struct {
	ln     net.Listener
	dial   guestDialer
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[io.Closer]struct{}
	closed bool
}

// guestDialer connects to a machine's guest port.
type guestDialer func(ctx context.Context) (halfConn, error)

// tcpDialer dials a guest port at a host-reachable address.
func tcpDialer(target string) guestDialer {
	return func(ctx context.Context) (halfConn, error) {
		c, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", target)
		if err != nil {
			return nil, err
		}
		return asHalfConn(c), nil
	}
}

// dialOnce reports whether something answers through d within timeout. Behind a relay (relayed) a
// connection still open after the timeout, or one that sent a byte, is what counts.
func dialOnce(d guestDialer, timeout time.Duration, relayed bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := d(ctx)
	if err != nil {
		return false
	}
	defer c.Close()
	rd, ok := c.(interface{ SetReadDeadline(time.Time) error })
	if !relayed || !ok {
		return true
	}
	rd.SetReadDeadline(time.Now().Add(timeout))
	n, err := c.Read(make([]byte, 1))
	var ne net.Error
	return n > 0 || errors.As(err, &ne) && ne.Timeout()
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
	if st, ok := up.(*chanStream); ok {
		splice(st, asHalfConn(c))
		return
	}
	done := make(chan struct{}, 2)
	cp := func(dst, src halfConn) {
		io.Copy(dst, src)
		dst.CloseWrite()
		done <- struct{}{}
	}
	hc := asHalfConn(c)
	go cp(up, hc)
	go cp(hc, up)
	<-done
	<-done
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
	if fw != nil {
		b.Reachable = dialOnce(fw.dial, time.Second, relayed(p))
	} else {
		b.Reachable = dialOnce(tcpDialer(net.JoinHostPort("127.0.0.1", strconv.Itoa(port))), time.Second, false)
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

// guestDialer is how a forwarder reaches the machine's port: its address on the engine's network, or,
// for an egress machine (no network of its own), a stream over its exec channel.
func (c *computerService) guestDialer(ctx context.Context, p provider, m *ComputerInfo, port int) (guestDialer, error) {
	host, ok := p.(channelHost)
	if !ok || m.Spec.Network.Mode != "egress" {
		target, err := p.guestAddr(ctx, m, port)
		if err != nil {
			return nil, err
		}
		return tcpDialer(target), nil
	}
	if _, err := c.channelErr(ctx, host, m); err != nil {
		return nil, errorf(codeComputerFailed, "computer %s has network mode egress (no network of its own) and its port can only be reached over the exec channel, which is unavailable: %v", m.ID, err).
			withHint("turn execChannel on in config.yaml (egress needs it; " + takesEffect("execChannel") + "), or create the computer with network.mode full")
	}
	mc := *m
	return func(ctx context.Context) (halfConn, error) {
		ch, err := c.channelErr(ctx, host, &mc)
		if err != nil {
			return nil, err
		}
		return ch.dial(ctx, port)
	}, nil
}

// hostNetworked is a provider whose machine may share the host's network (local; a sandbox not in
// network mode none): a guest port is then the host's port, with no forwarder.
type hostNetworked interface{ hostNetwork(m *ComputerInfo) bool }

func sharesHostNetwork(p provider, m *ComputerInfo) bool {
	h, ok := p.(hostNetworked)
	return ok && h.hostNetwork(m)
}

// relayed: the provider's guest ports sit behind a relay that accepts before the guest does (kubernetes:
// kubectl port-forward), which then closes a connection the guest refused.
func relayed(p provider) bool {
	r, ok := p.(interface{ relayed() bool })
	return ok && r.relayed()
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
	if dial == nil && sharesHostNetwork(c.providerByName(m.Provider), m) {
		dial = tcpDialer(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	}
	up := false
	if dial != nil { // a forwarder gone with a restart: not reachable until the port is exposed again
		up = dialOnce(dial, 300*time.Millisecond, relayed(c.providerByName(m.Provider)))
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
