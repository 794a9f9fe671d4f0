// computers_netpolicy.go — the machine's network policy: which hosts may be reached, from the spec's
// computer.network block (mode none|egress|full, allow, deny).
//
// Entry points: netPolicy.checkURL (before any connection), netPolicy.httpClient (every dial, first
// request and redirects, checked on the resolved address), privateIP, hostMatches.
//
// Rules (docs/API.md E_EXEC_DENIED, computer.network): only http and https; mode none reaches nothing; deny is
// checked against the name and applies even in full; outside full, allow is an allow-list; one leading
// `*.` wildcard is supported; private, loopback, link-local, CGNAT and "this network" addresses, and every
// address of every interface of the host (listed again at each dial, so an address added a moment ago
// counts; then, once connected, a connection whose local end is its remote end is the host talking to
// itself and is closed), also inside IPv6 forms that carry IPv4, are refused unless the name or address
// is in allow; the dial connects only to the address it checked, so DNS rebinding between check and
// connect gains nothing.
package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// netPolicy is a machine's computer.network block: mode, allow and deny.
type netPolicy struct {
	mode  string
	allow []string
	deny  []string
}

// hostMatches: exact (case-insensitive) or one leading `*.` wildcard matching any sub-domain.
func hostMatches(pattern, host string) bool {
	pattern, host = strings.ToLower(strings.TrimSpace(pattern)), strings.ToLower(strings.Trim(host, "[]"))
	if suffix, ok := strings.CutPrefix(pattern, "*."); ok {
		return strings.HasSuffix(host, "."+suffix)
	}
	return pattern == host
}

func matchesAny(patterns []string, host string) bool {
	for _, p := range patterns {
		if hostMatches(p, host) {
			return true
		}
	}
	return false
}

func denied(format string, a ...any) *apiError {
	return errorf(codeExecDenied, "refused: "+format, a...).withHint("the agent's computer.network policy decides which hosts tools may reach")
}

// checkURL applies the policy to a URL before any connection: scheme, mode, deny list, allow list.
func (np netPolicy) checkURL(u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" {
		return denied("URL scheme %q is not http or https", u.Scheme)
	}
	return np.checkHost(u.Hostname())
}

// checkHost applies mode, deny and allow to a host name or address (before it is resolved).
func (np netPolicy) checkHost(host string) error {
	if host == "" {
		return denied("URL has no host")
	}
	if np.mode == "none" {
		return denied("the agent's network mode is none")
	}
	if matchesAny(np.deny, host) {
		return denied("host %s is in computer.network.deny", host)
	}
	if np.mode != "full" && len(np.allow) > 0 && !matchesAny(np.allow, host) {
		return denied("host %s is not in computer.network.allow", host)
	}
	return nil
}

// embeddedIPv4 is the IPv4 address an IPv6 form carries and reaches (nil for the others; ::ffff:a.b.c.d
// is To4's): IPv4-compatible ::a.b.c.d, NAT64 64:ff9b::a.b.c.d and 6to4 2002:aabb:ccdd::.
func embeddedIPv4(ip net.IP) net.IP {
	if len(ip) != net.IPv6len || ip.To4() != nil {
		return nil
	}
	var v4 net.IP
	switch {
	case isZero(ip[:12]) && !isZero(ip[12:]):
		v4 = ip[12:16]
	case ip[0] == 0x00 && ip[1] == 0x64 && ip[2] == 0xff && ip[3] == 0x9b && isZero(ip[4:12]):
		v4 = ip[12:16]
	case ip[0] == 0x20 && ip[1] == 0x02:
		v4 = ip[2:6]
	default:
		return nil
	}
	return net.IPv4(v4[0], v4[1], v4[2], v4[3])
}

func privateIP(ip net.IP) bool {
	if v4 := embeddedIPv4(ip); v4 != nil && privateIP(v4) {
		return true
	}
	if ip4 := ip.To4(); ip4 != nil && ip4[0] == 0 { // 0.0.0.0/8 "this network" reaches the host itself
		return true
	}
	return ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsUnspecified() || ip.IsMulticast() || ip.IsInterfaceLocalMulticast() ||
		(ip.To4() != nil && ip.To4()[0] == 100 && ip.To4()[1]&0xC0 == 64) // carrier-grade NAT 100.64/10
}

// hostIPs lists the addresses of every interface of this host, now: no cache, so an address added a
// moment ago is in it (about 20 µs with a handful of interfaces, against a DNS lookup and a TCP connect).
func hostIPs() ([]net.IP, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, denied("cannot list this host's addresses to keep them out of reach: %v", err)
	}
	ips := make([]net.IP, 0, len(addrs))
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			ips = append(ips, n.IP)
		}
	}
	return ips, nil
}

// ownIP: ip, or the IPv4 address it carries, is one of the host's.
func ownIP(own []net.IP, ip net.IP) bool {
	v4 := embeddedIPv4(ip)
	for _, o := range own {
		if o.Equal(ip) || (v4 != nil && o.Equal(v4)) {
			return true
		}
	}
	return false
}

// selfConnected: the connection's two ends are one address, the host talking to itself (the kernel
// picks a local destination as the source address): an address the host gained between check and connect.
func selfConnected(c net.Conn) bool {
	l, lok := c.LocalAddr().(*net.TCPAddr)
	r, rok := c.RemoteAddr().(*net.TCPAddr)
	return lok && rok && l.IP.Equal(r.IP)
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// httpClient returns a client whose every connection (first request and redirects) is checked against
// the policy on the resolved address.
func (np netPolicy) httpClient(timeout time.Duration) *http.Client {
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	tr := &http.Transport{
		Proxy: nil, // a proxy would hide the destination from the check
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return np.dial(ctx, dialer, network, addr)
		},
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: timeout,
		MaxIdleConns:          4,
		IdleConnTimeout:       30 * time.Second,
	}
	return &http.Client{
		Transport: tr,
		Timeout:   timeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 10 {
				return errorf(codeToolError, "stopped after 10 redirects")
			}
			return np.checkURL(req.URL)
		},
	}
}

// dial connects to addr (host:port) after checking deny against the name and every resolved address, and
// refusing private, loopback and link-local addresses and the host's own unless the name or the address
// is in allow. It connects only to an address it checked. The tools' client and the egress proxy both
// dial through it.
func (np netPolicy) dial(ctx context.Context, dialer *net.Dialer, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if matchesAny(np.deny, host) {
		return nil, denied("host %s is in computer.network.deny", host)
	}
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return nil, errorf(codeToolError, "cannot resolve %s: %v", host, err)
	}
	for _, ip := range ips {
		if matchesAny(np.deny, ip.IP.String()) {
			return nil, denied("%s resolves to %s, which is in computer.network.deny", host, ip.IP)
		}
	}
	own, err := hostIPs()
	if err != nil {
		return nil, err
	}
	var lastErr error = errorf(codeToolError, "no address for %s", host)
	for _, ip := range ips {
		allowed := matchesAny(np.allow, host) || matchesAny(np.allow, ip.IP.String())
		if privateIP(ip.IP) && !allowed {
			lastErr = denied("%s resolves to the private, loopback or link-local address %s; name it in computer.network.allow to reach it", host, ip.IP)
			continue
		}
		ownRefusal := denied("%s resolves to %s, an address of this host; name it in computer.network.allow to reach it", host, ip.IP)
		if ownIP(own, ip.IP) && !allowed {
			lastErr = ownRefusal
			continue
		}
		c, err := dialer.DialContext(ctx, network, net.JoinHostPort(ip.IP.String(), port))
		if err != nil {
			lastErr = err
			continue
		}
		if selfConnected(c) && !allowed {
			c.Close()
			lastErr = ownRefusal
			continue
		}
		return c, nil
	}
	return nil, lastErr
}

// fetchError unwraps url.Error so a policy refusal surfaces as E_EXEC_DENIED.
func fetchError(err error) error {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	return errorf(codeToolError, "request failed: %v", err)
}
