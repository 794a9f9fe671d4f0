// computers_ports.go — exposing a guest port on the host: a userspace TCP forwarder per (machine, port).
//
// Entry points: computerService.ExposePort (the run loop's expose_port tool) and handleExposePort.
// Rules (DESIGN §4): docker/podman get a forwarder on 127.0.0.1:<ephemeral> to the container's address
// (network none → E_COMPUTER_FAILED saying why); local, and a sandbox sharing the host's network, answer
// the port themselves. Exposing a port twice
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

// portForwarder accepts on a host listener and pipes each connection to target.
type portForwarder struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

func startForwarder(target string) (*portForwarder, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &portForwarder{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
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

func (f *portForwarder) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *portForwarder) untrack(c net.Conn) {
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
	c.Close()
}

func (f *portForwarder) pipe(c net.Conn) {
	defer f.wg.Done()
	defer f.untrack(c)
	up, err := net.DialTimeout("tcp", f.target, 5*time.Second)
	if err != nil {
		return
	}
	if !f.track(up) {
		up.Close()
		return
	}
	defer f.untrack(up)
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(up, c)
	go cp(c, up)
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
		target, err := p.guestAddr(ctx, m, port)
		if err != nil {
			return nil, err
		}
		fw, err = startForwarder(target)
		if err != nil {
			return nil, errorf(codeComputerFailed, "cannot open a host port: %v", err).withHint("check the host's free ports")
		}
		c.mu.Lock()
		rt.ports[port] = fw
		c.mu.Unlock()
		b = PortBinding{HostPort: fw.port(), URL: fmt.Sprintf("http://127.0.0.1:%d", fw.port())}
	}
	target, _ := p.guestAddr(ctx, m, port)
	b.Reachable = answers(p, target, time.Second)
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

// hostNetworked is a provider whose machine may share the host's network (local; a sandbox not in
// network mode none): a guest port is then the host's port, with no forwarder.
type hostNetworked interface{ hostNetwork(m *ComputerInfo) bool }

func sharesHostNetwork(p provider, m *ComputerInfo) bool {
	h, ok := p.(hostNetworked)
	return ok && h.hostNetwork(m)
}

// answers reports whether something accepts on target. Behind a relay (kubernetes: kubectl port-forward
// accepts before the guest does) the relay closes a connection the guest refused, so there a connection
// still open after a short wait is what counts.
func answers(p provider, target string, timeout time.Duration) bool {
	conn, err := net.DialTimeout("tcp", target, timeout)
	if err != nil {
		return false
	}
	defer conn.Close()
	if r, ok := p.(interface{ relayed() bool }); !ok || !r.relayed() {
		return true
	}
	conn.SetReadDeadline(time.Now().Add(timeout))
	n, err := conn.Read(make([]byte, 1))
	var ne net.Error
	return n > 0 || errors.As(err, &ne) && ne.Timeout()
}

// reachable reports whether something answers on a machine's guest port, checked at most once a second
// per port (ComputerInfo is read often; a dial is cheap but not free).
func (c *computerService) reachable(m *ComputerInfo, port int) bool {
	rt := c.runtime(m.ID)
	now := c.now()
	c.mu.Lock()
	last, ok := rt.reach[port]
	target := ""
	if fw := rt.ports[port]; fw != nil {
		target = fw.target
	}
	c.mu.Unlock()
	if ok && now.Sub(last.at) < time.Second && now.Sub(last.at) >= 0 {
		return last.ok
	}
	if target == "" && sharesHostNetwork(c.providerByName(m.Provider), m) {
		target = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	}
	// a forwarder gone with a restart: not reachable until the port is exposed again
	up := target != "" && answers(c.providerByName(m.Provider), target, 300*time.Millisecond)
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
