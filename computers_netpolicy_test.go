package main

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"
)

// privateIP sees through the address spellings that reach a private host.
func TestPrivateIPForms(t *testing.T) {
	for _, s := range []string{"127.0.0.1", "::1", "::ffff:127.0.0.1", "::ffff:7f00:1", "::127.0.0.1", "64:ff9b::7f00:1",
		"64:ff9b::a9fe:a9fe", "2002:7f00:1::", "2002:a00:1::1", "0.0.0.0", "0.1.2.3", "10.1.2.3", "169.254.169.254",
		"fe80::1", "fc00::1", "100.64.0.1", "::"} {
		if !privateIP(net.ParseIP(s)) {
			t.Errorf("%s is not treated as private", s)
		}
	}
	for _, s := range []string{"93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946", "64:ff9b::5db8:d822", "2002:5db8:d822::1"} {
		if privateIP(net.ParseIP(s)) {
			t.Errorf("%s is treated as private", s)
		}
	}
}

// TestOwnIPForms: the host's own addresses are recognised in every spelling that reaches them, and a
// connection whose two ends are one address is the host talking to itself.
func TestOwnIPForms(t *testing.T) {
	own := []net.IP{net.ParseIP("203.0.114.7"), net.ParseIP("2a01:4f8::7")}
	for _, s := range []string{"203.0.114.7", "::ffff:203.0.114.7", "::203.0.114.7", "64:ff9b::cb00:7207", "2002:cb00:7207::1", "2a01:4f8::7"} {
		if !ownIP(own, net.ParseIP(s)) {
			t.Errorf("%s is not seen as the host's own", s)
		}
	}
	for _, s := range []string{"203.0.114.8", "2a01:4f8::8", "93.184.216.34"} {
		if ownIP(own, net.ParseIP(s)) {
			t.Errorf("%s is seen as the host's own", s)
		}
	}
	ips, err := hostIPs()
	if err != nil || !slices.ContainsFunc(ips, func(ip net.IP) bool { return ip.IsLoopback() }) {
		t.Fatalf("the host's addresses %v lack loopback: %v", ips, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !selfConnected(c) {
		t.Fatalf("%s → %s is not seen as the host talking to itself", c.LocalAddr(), c.RemoteAddr())
	}
}

func TestHostMatches(t *testing.T) {
	if !hostMatches("*.example.test", "a.b.example.test") || hostMatches("*.example.test", "example.test") || hostMatches("*.example.test", "badexample.test") {
		t.Fatal("wildcard matching")
	}
}

// TestPolicyDialDeniesResolvedAddress: deny is checked against every address a name resolves to, not
// only the name, and allow lets a private address through.
func TestPolicyDialDeniesResolvedAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	d := &net.Dialer{}
	np := netPolicy{mode: "egress", allow: []string{"localhost"}, deny: []string{"127.0.0.1", "::1"}}
	if _, err := np.dial(context.Background(), d, "tcp", "localhost:"+port); asAPIError(err).Code != codeExecDenied || !strings.Contains(err.Error(), "deny") {
		t.Fatalf("a name resolving to a denied address: %v", err)
	}
	np = netPolicy{mode: "egress", allow: []string{"127.0.0.1"}}
	c, err := np.dial(context.Background(), d, "tcp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatalf("an allowed private address: %v", err)
	}
	c.Close()
	if _, err := (netPolicy{mode: "egress"}).dial(context.Background(), d, "tcp", "127.0.0.1:"+port); asAPIError(err).Code != codeExecDenied {
		t.Fatalf("loopback not allowed: %v", err)
	}
}

// TestFullRules: a full machine's iptables rules: the host, link-local, the other machines, and each
// deny entry (an address, a CIDR, a name resolved now; a wildcard and IPv6 are not rules), and out of
// other machines' bridges.
func TestFullRules(t *testing.T) {
	m := &ComputerInfo{ID: "cmp_x", Spec: ComputerSpec{Network: NetworkSpec{Mode: "full",
		Deny: []string{"10.0.0.9", "192.0.2.0/24", "db.internal", "*.corp.example", "::1"}}}}
	lookup := func(name string) []string {
		if name == "db.internal" {
			return []string{"10.0.0.7", "fd00::7"}
		}
		return nil
	}
	var got []string
	for _, r := range fullRules(m, "172.17.0.5", "172.17.0.0/16", []string{"podman+", "k8s0"}, lookup) {
		got = append(got, strings.Join(r, " "))
	}
	tag := " -m comment --comment agentd:cmp_x"
	want := []string{
		"INPUT -s 172.17.0.5 -m conntrack --ctstate NEW -j DROP" + tag,
		"FORWARD -s 172.17.0.5 -d 169.254.0.0/16 -j DROP" + tag,
		"FORWARD -s 172.17.0.5 -d 172.17.0.0/16 -j DROP" + tag,
		"FORWARD -s 172.17.0.5 -o podman+ -j DROP" + tag,
		"FORWARD -s 172.17.0.5 -o k8s0 -j DROP" + tag,
		"FORWARD -s 172.17.0.5 -d 10.0.0.9 -j DROP" + tag,
		"FORWARD -s 172.17.0.5 -d 192.0.2.0/24 -j DROP" + tag,
		"FORWARD -s 172.17.0.5 -d 10.0.0.7 -j DROP" + tag,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("rules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestMachineBridges: the engines' bridge names, made or not, and every bridge present, but never the
// interface the default route leaves by (a host whose uplink is a bridge keeps its way out).
func TestMachineBridges(t *testing.T) {
	bridges := "5: docker0: <NO-CARRIER,BROADCAST,MULTICAST,UP> mtu 1500\n8: k8slocal0: <BROADCAST> mtu 1500\n3: br0: <BROADCAST,UP> mtu 1500\n9: br-1a2b: <BROADCAST> mtu 1500\n"
	got := machineBridges(bridges, "default via 192.0.2.1 dev br0 proto dhcp\n")
	want := []string{"docker0", "br-+", "podman+", "cni+", "virbr+", "lxcbr+", "lxdbr+", "agsb+", "k8slocal0"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("got %q, want %q", got, want)
	}
	// An uplink a pattern would match: the pattern goes, the other bridges it matched are named instead.
	got = machineBridges(bridges, "default via 192.0.2.1 dev br-1a2b\ndefault via 192.0.2.9 dev eth1 metric 200\n")
	if slices.Contains(got, "br-+") || slices.Contains(got, "br-1a2b") || !slices.Contains(got, "br0") || !slices.Contains(got, "docker0") {
		t.Fatalf("with the uplink br-1a2b: %q", got)
	}
}
