// computers_fullnet.go — network.mode full on docker and podman: the engine's bridge, filtered by iptables
// rules agentd adds for the machine's address, so what is never reachable by default stays unreachable
// and `deny` binds commands too (API.md: deny applies even in full).
//
// Entry points: engineProvider.filterFull (after create and start), engineProvider.unfilterFull (stop,
// destroy), fullFilterable.
//
// Rules: each rule carries the comment agentd:<id>, and is removed by it. From the machine's address:
// NEW connections to the host itself (INPUT: the bridge gateway, where agentd and the host's services
// listen) are dropped, and so are forwarded packets to link-local 169.254.0.0/16 (cloud metadata), to the
// bridge's subnet (the other machines), and to each `deny` entry that is an address, a CIDR or a name
// (resolved now; a `*.` wildcard cannot be, and is left to the tools). Replies to connections the host
// opened (port forwards) pass. The rules need root and iptables; where they cannot be added (rootless
// engines), full stays unfiltered and the README says so. When they can and adding one fails, the
// machine is not started (fail closed).
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// fullFilterable says whether this host can filter full-mode machines (root and iptables).
func fullFilterable() bool {
	if os.Geteuid() != 0 {
		return false
	}
	_, err := exec.LookPath("iptables")
	return err == nil
}

func fullComment(m *ComputerInfo) string { return "agentd:" + m.ID }

// fullRules are the iptables rules (without -I/-D) of a full-mode machine at addr in subnet.
func fullRules(m *ComputerInfo, addr, subnet string, lookup func(string) []string) [][]string {
	tag := []string{"-m", "comment", "--comment", fullComment(m)}
	rule := func(chain string, a ...string) []string {
		return append(append([]string{chain, "-s", addr}, a...), tag...)
	}
	rules := [][]string{
		rule("INPUT", "-m", "conntrack", "--ctstate", "NEW", "-j", "DROP"),
		rule("FORWARD", "-d", "169.254.0.0/16", "-j", "DROP"),
	}
	if subnet != "" {
		rules = append(rules, rule("FORWARD", "-d", subnet, "-j", "DROP"))
	}
	for _, d := range m.Spec.Network.Deny {
		d = strings.TrimSpace(d)
		var dsts []string
		switch {
		case strings.HasPrefix(d, "*."):
			continue
		case net.ParseIP(strings.Trim(d, "[]")) != nil:
			dsts = []string{strings.Trim(d, "[]")}
		default:
			if _, n, err := net.ParseCIDR(d); err == nil {
				dsts = []string{n.String()}
			} else {
				dsts = lookup(d)
			}
		}
		for _, ip := range dsts {
			if strings.Contains(ip, ":") {
				continue // the bridge is IPv4 here; ip6tables is not managed
			}
			rules = append(rules, rule("FORWARD", "-d", ip, "-j", "DROP"))
		}
	}
	return rules
}

// filterFull adds the machine's rules (again after a start: the address may have changed).
func (e *engineProvider) filterFull(ctx context.Context, m *ComputerInfo) error {
	if m.Spec.Network.Mode != "full" || !fullFilterable() {
		return nil
	}
	e.unfilterFull(ctx, m)
	out, err := e.call(ctx, nil, "inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}/{{.IPPrefixLen}} {{end}}", e.container(m))
	if err != nil {
		return fmt.Errorf("cannot find the machine's address: %v", err)
	}
	addr, subnet := "", ""
	for _, f := range strings.Fields(out) {
		if ip, n, err := net.ParseCIDR(f); err == nil && ip.To4() != nil {
			addr, subnet = ip.String(), n.String()
			break
		}
	}
	if addr == "" {
		return fmt.Errorf("the machine has no IPv4 address on the engine's network (%q)", strings.TrimSpace(out))
	}
	lookup := func(name string) []string {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		ips, _ := net.DefaultResolver.LookupHost(lctx, name)
		return ips
	}
	for _, r := range fullRules(m, addr, subnet, lookup) {
		if b, err := exec.CommandContext(ctx, "iptables", append([]string{"-w", "-I"}, r...)...).CombinedOutput(); err != nil {
			e.unfilterFull(ctx, m)
			return fmt.Errorf("iptables -I %s: %v: %s", strings.Join(r, " "), err, strings.TrimSpace(string(b)))
		}
	}
	return nil
}

// unfilterFull removes every rule carrying the machine's comment.
func (e *engineProvider) unfilterFull(ctx context.Context, m *ComputerInfo) {
	if m.Spec.Network.Mode != "full" || !fullFilterable() {
		return
	}
	removeTaggedRules(ctx, fullComment(m), "filter")
}

// removeTaggedRules deletes, in each table, every rule whose comment is tag.
func removeTaggedRules(ctx context.Context, tag string, tables ...string) {
	for _, table := range tables {
		out, err := exec.CommandContext(ctx, "iptables", "-w", "-t", table, "-S").Output()
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(strings.ReplaceAll(line, `"`, "")) // iptables -S quotes comments
			if len(f) < 2 || f[0] != "-A" || !slices.Contains(f, tag) {
				continue
			}
			f[0] = "-D"
			exec.CommandContext(ctx, "iptables", append([]string{"-w", "-t", table}, f...)...).Run()
		}
	}
}
