// computers_sandboxnet.go — network.mode full on the sandbox, filtered the way docker's full mode is.
//
// Entry points: sandboxProvider.filteredFull (does this machine get its own network), netUp (before its
// bwrap starts), netDown (stop, destroy, orphans), sweepNets (reconcile).
//
// Rules: when agentd runs as root with iptables, `ip` and `nsenter`, a full machine's bwrap starts inside
// a network namespace of its own, agentd-<owner>-<id>, joined to the host by a veth pair in
// 10.233.0.0/16 (one /30 per machine: the host .1, the machine .2) and masqueraded out. The namespace is
// owned by the host's user namespace, so the machine (uid 1000, no capabilities) cannot change its
// addresses or routes. The iptables rules are docker's full-mode rules (computers_fullnet.go, tagged
// agentd:<id>): no new connection from the machine to the host itself (agentd and the host's services),
// to link-local 169.254.0.0/16 (cloud metadata), to the other sandboxes (10.233.0.0/16), out of the
// other engines' bridges (their machines) or to what `deny` names; nothing but replies is forwarded to
// it; the host's 127.0.0.1 is not the machine's. Ports are reached at the machine's address. IPv6 is
// off in the namespace and on the host's end of the pair (the rules are IPv4; a link-local address
// there would reach the host's services on [::]). The namespace and the rules are rebuilt whenever the
// bwrap starts, and removed at stop, destroy and shutdown; a namespace of this owner without a machine
// directory is swept at reconcile. Without root the machine shares the host's network, unfiltered, and a `deny`
// list is refused (README, "what each provider stops").
package main

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

const (
	sandboxNetCIDR   = "10.233.0.0/16"
	sandboxNetSlots  = 1 << 14 // /30s in the /16
	sandboxNetPrefix = "agsb"  // host-side veth names: agsb<slot> (at most 15 bytes)
)

// sandboxNetFilterable says whether this host can give full sandboxes a filtered network.
func sandboxNetFilterable() bool {
	if !fullFilterable() {
		return false
	}
	for _, bin := range []string{"ip", "nsenter", "iptables-restore"} {
		if _, err := exec.LookPath(bin); err != nil {
			return false
		}
	}
	return true
}

// filteredFull: this machine runs in a namespace of its own behind the full-mode rules.
func (s *sandboxProvider) filteredFull(sp ComputerSpec) bool {
	return sp.Network.Mode == "full" && s.netFilterable()
}

func (s *sandboxProvider) netns(id string) string { return "agentd-" + s.c.owner + "-" + id }

// netUp makes the machine's namespace, link, addresses and rules from scratch and returns the
// namespace's path for nsenter.
func (s *sandboxProvider) netUp(ctx context.Context, m *ComputerInfo) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ns, nsPath := s.netns(m.ID), filepath.Join("/run/netns", s.netns(m.ID))
	s.netDown(ctx, m.ID) // what the bwrap before this one, or a crash, left: its namespace and its rules
	fail := func(err error) (string, error) {
		s.netDown(context.WithoutCancel(ctx), m.ID)
		return "", err
	}
	if err := runQuiet(ctx, "", "ip", "netns", "add", ns); err != nil {
		return fail(err)
	}
	// No IPv6 in the namespace: the rules are IPv4, and a link-local address on the veth would reach
	// the host's services listening on [::] past them. The veth's end made in here inherits "default".
	// A shell entered into the namespace writes it (/proc/sys/net is the opener's namespace's): never a
	// thread of agentd's moved there, since a thread that cannot be given back must exit, and its exit
	// SIGKILLs every child it forked with a parent-death signal (the engines' exec channels).
	if err := runQuiet(ctx, "", "nsenter", "--net="+nsPath, "--", "/bin/sh", "-c",
		`[ -d /proc/sys/net/ipv6 ] || exit 0; for i in all default; do echo 1 > /proc/sys/net/ipv6/conf/$i/disable_ipv6 || exit 1; done`); err != nil {
		return fail(fmt.Errorf("cannot turn IPv6 off in the machine's namespace: %v", err))
	}
	s.netMu.Lock()
	defer s.netMu.Unlock()
	// The host's end of the veth pair is named after its slot: the kernel refuses a second link of one
	// name, which makes taking a slot atomic across the servers of this host (netMu only orders this
	// one's). A slot taken meanwhile is "File exists": try the next. The host's end gets no IPv6
	// address either (addrgenmode none, then disable_ipv6).
	var host, guest, link string
	tried := map[int]bool{}
	for {
		slot, err := freeSandboxSlot(tried)
		if err != nil {
			return fail(err)
		}
		tried[slot] = true
		host, guest = sandboxSlotAddrs(slot)
		link = fmt.Sprintf("%s%d", sandboxNetPrefix, slot)
		batch := fmt.Sprintf("link add %s type veth peer name eth0 netns %s\nlink set %s addrgenmode none\naddr add %s/30 dev %s\nlink set %s up\n", link, ns, link, host, link, link)
		err = runQuiet(ctx, batch, "ip", "-batch", "-")
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "File exists") || len(tried) >= 64 {
			return fail(err)
		}
	}
	if err := disableIPv6(link); err != nil {
		return fail(fmt.Errorf("cannot turn IPv6 off on %s: %v", link, err))
	}
	inside := fmt.Sprintf("addr add %s/30 dev eth0\nlink set eth0 up\nlink set lo up\nroute add default via %s\n", guest, host)
	if err := runQuiet(ctx, inside, "ip", "-n", ns, "-batch", "-"); err != nil {
		return fail(err)
	}
	if err := enableForwarding(); err != nil {
		return fail(err)
	}
	if err := runQuiet(ctx, sandboxNetRules(m, guest, hostMachineBridges(ctx)), "iptables-restore", "-w", "5", "--noflush"); err != nil {
		return fail(err)
	}
	return nsPath, nil
}

// sandboxNetRules is the machine's rules as iptables-restore input. Each -I goes to the top of its
// chain, so the accepts are written first and the drops land above them. Nothing opens a connection to
// the machine through the host (the host's own connections, the port forwards, are not forwarded).
func sandboxNetRules(m *ComputerInfo, guest string, bridges []string) string {
	tag := "-m comment --comment " + fullComment(m)
	var b strings.Builder
	fmt.Fprintf(&b, "*nat\n-I POSTROUTING -s %s/32 ! -d %s -j MASQUERADE %s\nCOMMIT\n", guest, sandboxNetCIDR, tag)
	fmt.Fprintf(&b, "*filter\n-I FORWARD -s %s/32 -j ACCEPT %s\n", guest, tag)
	fmt.Fprintf(&b, "-I FORWARD -d %s/32 -j DROP %s\n", guest, tag)
	fmt.Fprintf(&b, "-I FORWARD -d %s/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT %s\n", guest, tag)
	lookup := func(name string) []string {
		lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ips, _ := net.DefaultResolver.LookupHost(lctx, name)
		return ips
	}
	for _, r := range fullRules(m, guest, sandboxNetCIDR, bridges, lookup) {
		fmt.Fprintf(&b, "-I %s\n", strings.Join(r, " "))
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// netDown removes the machine's namespace (its veth pair goes with it) and its rules; a no-op when
// there is neither.
func (s *sandboxProvider) netDown(ctx context.Context, id string) {
	if !sandboxNetFilterable() {
		return
	}
	ns := s.netns(id)
	if _, err := os.Stat(filepath.Join("/run/netns", ns)); err == nil {
		runQuiet(ctx, "", "ip", "netns", "del", ns)
	}
	removeTaggedRules(ctx, "agentd:"+id, "filter", "nat")
}

// netIDs is this owner's machine ids that have a namespace, listed before the machine directories (as
// cgroupHost.list: a namespace made after the directory listing is never taken).
func (s *sandboxProvider) netIDs() []string {
	if !sandboxNetFilterable() {
		return nil
	}
	ents, _ := os.ReadDir("/run/netns")
	prefix := "agentd-" + s.c.owner + "-"
	var ids []string
	for _, e := range ents {
		if id, ok := strings.CutPrefix(e.Name(), prefix); ok {
			ids = append(ids, id)
		}
	}
	return ids
}

// sweepNets removes the namespaces of ids (from netIDs) whose machine directory is gone (a crash between
// the two).
func (s *sandboxProvider) sweepNets(ctx context.Context, ids []string, dirs map[string]bool) {
	for _, id := range ids {
		if !dirs[id] {
			s.netDown(ctx, id)
		}
	}
}

// freeSandboxSlot is the lowest /30 of 10.233.0.0/16 that no host address is in and was not tried.
func freeSandboxSlot(tried map[int]bool) (int, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return 0, fmt.Errorf("cannot list the host's addresses: %v", err)
	}
	_, cidr, _ := net.ParseCIDR(sandboxNetCIDR)
	used := map[int]bool{}
	maps.Copy(used, tried)
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && cidr.Contains(n.IP) {
			v := n.IP.To4()
			used[(int(v[2])<<8|int(v[3]))/4] = true
		}
	}
	for i := 0; i < sandboxNetSlots; i++ {
		if !used[i] {
			return i, nil
		}
	}
	return 0, fmt.Errorf("every address of %s is taken", sandboxNetCIDR)
}

// sandboxSlotAddrs are the host's and the machine's addresses of a slot.
func sandboxSlotAddrs(slot int) (host, guest string) {
	n := slot * 4
	return fmt.Sprintf("10.233.%d.%d", n>>8, n&255+1), fmt.Sprintf("10.233.%d.%d", n>>8, n&255+2)
}

// enableForwarding turns on IPv4 forwarding, as docker and podman do for their bridges.
func enableForwarding() error {
	const p = "/proc/sys/net/ipv4/ip_forward"
	if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) == "1" {
		return nil
	}
	if err := os.WriteFile(p, []byte("1\n"), 0o644); err != nil {
		return fmt.Errorf("cannot enable IPv4 forwarding: %v", err)
	}
	return nil
}

// runQuiet runs one short host command, stdin from in, and carries its output into the error.
func runQuiet(ctx context.Context, in, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = 2 * time.Second
	if in != "" {
		cmd.Stdin = strings.NewReader(in)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// sandboxResolvConf is the resolv.conf to bind into a namespaced machine when the host's names only
// loopback resolvers (systemd-resolved's 127.0.0.53 is the host's loopback, not the machine's): the
// upstream list systemd-resolved keeps. "" keeps the host's file.
func sandboxResolvConf() string {
	const upstream = "/run/systemd/resolve/resolv.conf"
	b, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			if ip := net.ParseIP(f[1]); ip == nil || !ip.IsLoopback() {
				return ""
			}
		}
	}
	if _, err := os.Stat(upstream); err != nil {
		return ""
	}
	return upstream
}
