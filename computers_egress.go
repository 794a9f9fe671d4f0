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
// link-local addresses unless allowed, and connects only to the address it checked). One request per
// plain-HTTP connection (sent upstream with Connection: close); CONNECT tunnels any TLS. Every refusal is
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
		if n := br.Buffered(); n > 0 { // bytes the client sent after the CONNECT (a TLS hello, early)
			b, _ := br.Peek(n)
			uc.Write(b)
		}
		splice(st, uc)
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
	c.hub.publish("computers", "egress_refused", map[string]any{"computerId": machine, "host": host, "port": port, "reason": why})
	rt := c.runtime(machine)
	c.mu.Lock()
	rt.refused.add(fmt.Sprintf("agentd: the egress proxy refused %s: %s\n", net.JoinHostPort(host, port), why))
	c.mu.Unlock()
	writeProxyAnswer(st, status, "agentd egress proxy: "+why)
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
