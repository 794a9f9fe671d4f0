// computers_egress.go — network.mode egress on docker, podman and sandbox: the machine has no route out
// (docker/podman `--network none`, the sandbox its own empty network namespace) but one, the filtering
// HTTP/HTTPS proxy agentd runs here, reached inside the machine on 127.0.0.1:egressProxyPort (the helper
// listens there and carries each connection over the exec channel, computers_stream.go).
//
// Entry points: noRoute (does the machine get no network of its own), egressEnv (the proxy variables of
// the machine's environment), computerService.startEgress (at every channel open), serveEgress (one
// proxied connection).
//
// Rules: the proxy applies the machine's computer.network policy exactly as the agent's tools do
// (computers_netpolicy.go: checkHost on the name from CONNECT or the absolute URI, then netPolicy.dial,
// which checks deny against the name and every resolved address, refuses private, loopback and
// link-local addresses and every address of the host's own unless allowed, and connects only to the
// address it checked). One request per
// plain-HTTP connection (sent upstream with Connection: close); CONNECT tunnels anything, but a TLS
// ClientHello in the tunnel is held until its server name (SNI) is the CONNECT host or passes checkHost
// too, so an allowed host cannot front for a refused one (helloGate, clientHelloSNI). Every refusal is
// an `egress_refused` event on the computers topic, for the client a 403 whose body says why, and a line
// at the end of the stderr of each exec of that machine that was running meanwhile. Without
// the exec channel an egress machine has no proxy: it fails closed, with no network at all.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// egressProxyPort is where the proxy answers inside an egress machine.
const egressProxyPort = 3128

// noRoute: the machine gets no network of its own (mode none, or egress, whose way out is the proxy).
func noRoute(sp ComputerSpec) bool { return sp.Network.Mode == "none" || sp.Network.Mode == "egress" }

// egressEnv is the proxy environment of an egress machine (nil for the other modes).
func egressEnv(sp ComputerSpec) map[string]string {
	if sp.Network.Mode != "egress" {
		return nil
	}
	p := "http://127.0.0.1:" + strconv.Itoa(egressProxyPort)
	return map[string]string{"HTTP_PROXY": p, "HTTPS_PROXY": p, "http_proxy": p, "https_proxy": p,
		"NO_PROXY": "localhost,127.0.0.1", "no_proxy": "localhost,127.0.0.1"}
}

// startEgress asks a freshly opened channel's helper to accept the proxy's connections (egress only).
func (c *computerService) startEgress(ch *execChannel, m *ComputerInfo) {
	if m.Spec.Network.Mode != "egress" {
		return
	}
	id := m.ID
	serve := func(st *chanStream) {
		// The policy is read per connection from the record: a pool machine opened its channel under the
		// pool's spec, and the spec of whoever took it is the one that applies.
		rec, err := c.store.GetComputer(ch.ctx, id)
		if err != nil {
			st.Close()
			return
		}
		n := rec.Spec.Network
		c.serveEgress(ch.ctx, id, netPolicy{mode: n.Mode, allow: n.Allow, deny: n.Deny}, st)
	}
	if err := ch.listen(egressProxyPort, serve); err != nil {
		c.log.Warn("computers: the egress proxy could not start", "computer", id, "err", err)
	}
}

// serveEgress serves one connection made to the proxy inside the machine.
func (c *computerService) serveEgress(ctx context.Context, machine string, np netPolicy, st *chanStream) {
	defer st.Close()
	br := bufio.NewReader(st)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	var host, port string
	switch {
	case req.Method == http.MethodConnect:
		host, port, err = net.SplitHostPort(req.RequestURI)
		if err != nil {
			host, port = req.RequestURI, "443"
		}
	case req.URL.IsAbs() && req.URL.Scheme == "http":
		host, port = req.URL.Hostname(), req.URL.Port()
		if port == "" {
			port = "80"
		}
	default:
		c.egressRefused(st, machine, req.Host, "", "this proxy takes CONNECT and absolute http:// URLs (https goes through CONNECT)", http.StatusBadRequest)
		return
	}
	if err := np.checkHost(host); err != nil {
		c.egressRefused(st, machine, host, port, errText(err), http.StatusForbidden)
		return
	}
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	up, err := np.dial(dctx, &net.Dialer{}, "tcp", net.JoinHostPort(host, port))
	cancel()
	if err != nil {
		var ae *apiError
		if errors.As(err, &ae) && ae.Code == codeExecDenied {
			c.egressRefused(st, machine, host, port, errText(err), http.StatusForbidden)
		} else {
			writeProxyAnswer(st, http.StatusBadGateway, "agentd egress proxy: cannot reach "+net.JoinHostPort(host, port)+": "+errText(err))
		}
		return
	}
	uc := asHalfConn(up)
	if req.Method == http.MethodConnect {
		if _, err := io.WriteString(st, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			uc.Close()
			return
		}
		// What the client sends first is held until its TLS ClientHello shows the name it asks for:
		// a CONNECT to an allowed host must not carry a TLS session for another (domain fronting).
		gate := &helloGate{halfConn: uc, check: func(sni string) error {
			if strings.EqualFold(strings.TrimSuffix(sni, "."), host) {
				return nil
			}
			if err := np.checkHost(sni); err != nil {
				c.noteRefusal(machine, host, port, fmt.Sprintf("the TLS server name %q: %s", sni, errText(err)))
				return err
			}
			return nil
		}}
		if n := br.Buffered(); n > 0 { // bytes the client sent after the CONNECT (a TLS hello, early)
			b, _ := br.Peek(n)
			if _, err := gate.Write(b); err != nil {
				uc.Close()
				return
			}
		}
		splice(st, gate)
		return
	}
	// Plain HTTP: the request in origin form, one per connection, then the answer as it comes.
	req.Header.Del("Proxy-Connection")
	req.Header.Del("Proxy-Authorization")
	req.RequestURI = ""
	req.Close = true
	done := make(chan struct{})
	go func() {
		defer close(done)
		req.Write(uc)
	}()
	io.Copy(st, uc)
	uc.Close()
	st.Close() // a body the upstream did not wait for: the write above ends at the stream's EOF
	<-done
}

// egressRefused answers a refused request with why, and publishes the refusal.
func (c *computerService) egressRefused(st *chanStream, machine, host, port, why string, status int) {
	c.noteRefusal(machine, host, port, why)
	writeProxyAnswer(st, status, "agentd egress proxy: "+why)
}

// noteRefusal publishes a refusal and keeps its line for the machine's running execs' stderr.
func (c *computerService) noteRefusal(machine, host, port, why string) {
	c.hub.publish("computers", "egress_refused", map[string]any{"computerId": machine, "host": host, "port": port, "reason": why})
	rt := c.runtime(machine)
	c.mu.Lock()
	rt.refused.add(fmt.Sprintf("agentd: the egress proxy refused %s: %s\n", net.JoinHostPort(host, port), why))
	c.mu.Unlock()
}

// helloGate is the upstream side of a CONNECT tunnel that holds the client's first bytes until they
// are known not to be TLS, or are a whole ClientHello whose server name check allows. A refusal (or a
// handshake that cannot be read) closes the upstream, which ends the tunnel. Bytes from the upstream
// flow meanwhile, so protocols whose server speaks first are not held up.
type helloGate struct {
	halfConn
	check   func(sni string) error
	buf     []byte
	hello   helloReader // reads buf as it grows: each byte once, however the client cuts its writes
	decided bool
}

const maxHelloBytes = 64 << 10

func (g *helloGate) Write(p []byte) (int, error) {
	if g.decided {
		return g.halfConn.Write(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	g.buf = append(g.buf, p...)
	if g.buf[0] != tlsRecordHandshake { // not TLS: nothing names a server here
		return g.release(len(p))
	}
	sni, complete, err := g.hello.read(g.buf)
	switch {
	case err == nil && !complete && len(g.buf) < maxHelloBytes:
		return len(p), nil // wait for the rest of the hello
	case err == nil && !complete:
		err = errors.New("a TLS ClientHello larger than 64 KiB")
	case err == nil && sni != "":
		err = g.check(sni)
	}
	if err != nil {
		g.halfConn.Close()
		return 0, err
	}
	return g.release(len(p))
}

// release forwards what was held; from then on the gate is a plain connection.
func (g *helloGate) release(n int) (int, error) {
	g.decided = true
	b := g.buf
	g.buf = nil
	if _, err := g.halfConn.Write(b); err != nil {
		return 0, err
	}
	return n, nil
}

const (
	tlsRecordHandshake = 22
	tlsClientHello     = 1
	tlsExtServerName   = 0
)

// clientHelloSNI reads the server name of the TLS ClientHello at the start of b, which may span
// several records. complete is false while more bytes are needed; a ClientHello without the extension
// has no name (""). Anything else than a ClientHello is an error.
func clientHelloSNI(b []byte) (sni string, complete bool, err error) {
	var r helloReader
	return r.read(b)
}

// helloReader is clientHelloSNI over a buffer that grows between calls: the records read by one call
// are not read again by the next (b must start with what the earlier calls saw).
type helloReader struct {
	used int    // bytes of b consumed as whole records
	hs   []byte // the handshake messages, reassembled from those records' fragments
}

func (r *helloReader) read(b []byte) (sni string, complete bool, err error) {
	for {
		if len(r.hs) >= 4 {
			if r.hs[0] != tlsClientHello {
				return "", false, errors.New("the first TLS handshake message is not a ClientHello")
			}
			n := int(r.hs[1])<<16 | int(r.hs[2])<<8 | int(r.hs[3])
			if n > maxHelloBytes {
				return "", false, errors.New("a TLS ClientHello larger than 64 KiB")
			}
			if len(r.hs) >= 4+n {
				sni, err := helloServerName(r.hs[4 : 4+n])
				return sni, err == nil, err
			}
		}
		rest := b[r.used:]
		if len(rest) < 5 {
			return "", false, nil
		}
		if rest[0] != tlsRecordHandshake {
			return "", false, errors.New("a TLS record that is not a handshake came before the ClientHello ended")
		}
		n := int(rest[3])<<8 | int(rest[4])
		if n == 0 || n > 1<<14 {
			return "", false, errors.New("a TLS handshake record of an invalid length")
		}
		if len(rest) < 5+n {
			return "", false, nil
		}
		r.hs = append(r.hs, rest[5:5+n]...)
		r.used += 5 + n
	}
}

// helloServerName is the host_name of a ClientHello body's server_name extension (RFC 8446 4.1.2,
// RFC 6066 3).
func helloServerName(h []byte) (string, error) {
	bad := errors.New("a malformed TLS ClientHello")
	skip := func(n int) bool {
		if n > len(h) {
			return false
		}
		h = h[n:]
		return true
	}
	vec := func(lenBytes int) ([]byte, bool) {
		if len(h) < lenBytes {
			return nil, false
		}
		n := 0
		for _, c := range h[:lenBytes] {
			n = n<<8 | int(c)
		}
		if len(h) < lenBytes+n {
			return nil, false
		}
		v := h[lenBytes : lenBytes+n]
		h = h[lenBytes+n:]
		return v, true
	}
	if !skip(2 + 32) { // legacy_version, random
		return "", bad
	}
	for _, lb := range []int{1, 2, 1} { // session id, cipher suites, compression methods
		if _, ok := vec(lb); !ok {
			return "", bad
		}
	}
	if len(h) == 0 {
		return "", nil // no extensions
	}
	exts, ok := vec(2)
	if !ok {
		return "", bad
	}
	h = exts
	for len(h) > 0 {
		if len(h) < 2 {
			return "", bad
		}
		typ := int(h[0])<<8 | int(h[1])
		h = h[2:]
		data, ok := vec(2)
		if !ok {
			return "", bad
		}
		if typ != tlsExtServerName {
			continue
		}
		h = data
		list, ok := vec(2)
		if !ok {
			return "", bad
		}
		h = list
		for len(h) > 0 {
			if len(h) < 1 {
				return "", bad
			}
			kind := h[0]
			h = h[1:]
			name, ok := vec(2)
			if !ok {
				return "", bad
			}
			if kind == 0 {
				return string(name), nil
			}
		}
		return "", nil
	}
	return "", nil
}

// refusalLog keeps a machine's last refusals, numbered, so an exec's stderr can end with those made while
// it ran (a program that hides the proxy's 403 still leaves a trace the agent reads).
type refusalLog struct {
	seq   int
	lines []string // the last refusalKeep, the newest last
}

const refusalKeep = 8

func (l *refusalLog) add(line string) {
	l.seq++
	l.lines = append(l.lines, line)
	if len(l.lines) > refusalKeep {
		l.lines = l.lines[len(l.lines)-refusalKeep:]
	}
}

// refusalMark is the machine's refusal count now; refusalsSince the lines of the refusals after it.
func (c *computerService) refusalMark(id string) int {
	rt := c.runtime(id)
	c.mu.Lock()
	defer c.mu.Unlock()
	return rt.refused.seq
}

func (c *computerService) refusalsSince(id string, mark int) string {
	rt := c.runtime(id)
	c.mu.Lock()
	defer c.mu.Unlock()
	n := min(rt.refused.seq-mark, len(rt.refused.lines))
	if n <= 0 {
		return ""
	}
	return strings.Join(rt.refused.lines[len(rt.refused.lines)-n:], "")
}

func writeProxyAnswer(w io.Writer, status int, msg string) {
	body := msg + "\n"
	fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
}

// errText is an error's message (an apiError's own, without the envelope).
func errText(err error) string {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.Message
	}
	return strings.TrimSpace(err.Error())
}
