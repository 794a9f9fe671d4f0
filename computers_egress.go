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
// too, so an allowed host cannot front for a refused one (helloGate; clientHelloSNI reads the hello with
// crypto/tls). Every refusal is
// an `egress_refused` event on the computers topic, for the client a 403 whose body says why, and a line
// at the end of the stderr of each exec of that machine that was running meanwhile. Without
// the exec channel an egress machine has no proxy: it fails closed, with no network at all.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
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
		gate.early, _ = br.Peek(br.Buffered()) // bytes the client sent after the CONNECT (a TLS hello, early)
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

// helloGate is the upstream side of a CONNECT tunnel. Its ReadFrom (splice's client-to-upstream copy)
// holds the client's first bytes until they are known not to be TLS, or are a whole ClientHello whose
// server name check allows; then it forwards them unchanged and copies the rest. A refusal (or a
// handshake that cannot be read) closes the upstream, which ends the tunnel. Bytes from the upstream
// flow meanwhile (splice's other copy), so protocols whose server speaks first are not held up.
type helloGate struct {
	halfConn
	check func(sni string) error
	early []byte // what the client sent after the CONNECT, read already
}

const (
	maxHelloBytes      = 64 << 10
	tlsRecordHandshake = 22
)

func (g *helloGate) ReadFrom(r io.Reader) (int64, error) {
	br := bufio.NewReader(io.MultiReader(bytes.NewReader(g.early), r))
	var held []byte
	if first, err := br.Peek(1); err == nil && first[0] == tlsRecordHandshake { // else nothing names a server
		sni, read, err := clientHelloSNI(br)
		if err == nil && sni != "" {
			err = g.check(sni)
		}
		if err != nil {
			g.halfConn.Close()
			return 0, err
		}
		held = read
	}
	if _, err := g.halfConn.Write(held); err != nil {
		return 0, err
	}
	n, err := io.Copy(g.halfConn, br)
	return int64(len(held)) + n, err
}

// clientHelloSNI reads a TLS ClientHello from r with crypto/tls's own server handshake, stopped as soon
// as the hello is parsed (it may span any number of records, cut anywhere). It returns the hello's
// server name ("" when it has none) and every byte it read, at most 64 KiB. Anything else than a whole
// ClientHello before r ends or the cap is an error.
func clientHelloSNI(r io.Reader) (sni string, read []byte, err error) {
	c := &helloConn{r: io.LimitReader(r, maxHelloBytes)}
	gotHello := errors.New("the ClientHello is read")
	err = tls.Server(c, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		sni = h.ServerName
		return nil, gotHello
	}}).Handshake()
	if !errors.Is(err, gotHello) {
		return "", c.read, fmt.Errorf("not a TLS ClientHello of at most 64 KiB: %w", err)
	}
	return sni, c.read, nil
}

// helloConn is what clientHelloSNI's handshake runs over: it keeps what it reads, and drops the alert
// the aborted handshake writes. The handshake calls no other method of a net.Conn.
type helloConn struct {
	net.Conn
	r    io.Reader
	read []byte
}

func (c *helloConn) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read = append(c.read, p[:n]...)
	return n, err
}

func (c *helloConn) Write(p []byte) (int, error) { return len(p), nil }

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
