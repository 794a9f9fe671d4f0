// computers_fullnet.go — network.mode full on docker and podman: the engine's bridge, filtered by iptables
// rules agentd adds for the machine's address, so what is never reachable by default stays unreachable
// and `deny` binds commands too (API.md: deny applies even in full).
//
// Entry points: engineProvider.filterFull (after create and start), engineProvider.unfilterFull (stop,
// destroy), fullFilterable, fullRules and machineBridges (shared with the sandbox's full mode,
// computers_sandboxnet.go), fullV6Off (the engines' --sysctl that turns IPv6 off in a full machine).
//
// Rules: each rule carries the comment agentd:<id>, and is removed by it. From the machine's address:
// NEW connections to the host itself (INPUT: the bridge gateway, where agentd and the host's services
// listen) are dropped, and so are forwarded packets to link-local 169.254.0.0/16 (cloud metadata), to the
// bridge's subnet (the other machines), out of any other machines' bridge (docker's, podman's, the
// sandboxes', every bridge but the one the default route leaves by: a docker machine must not reach a
// podman one, nor either a sandbox), and to each `deny` entry that is an address, a CIDR or a name
// (resolved now; a `*.` wildcard cannot be, and is left to the tools). Replies to connections the host
// opened (port forwards) pass. The rules are IPv4: a full machine has IPv6 turned off (fullV6Off; the
// engines would otherwise give it a link-local address on the bridge, from which the host's services
// listening on [::] answer). The rules need root and iptables; where they cannot be added (rootless
// engines), full stays unfiltered, the README says so, and a `deny` list in full is refused with 501
// (engineProvider.supports) instead of binding only agentd's own tools. When they can and adding one fails, the
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
	for _, bin := range []string{"iptables", "iptables-restore"} {
		if _, err := exec.LookPath(bin); err != nil {
			return false
		}
	}
	return true
}

func fullComment(m *ComputerInfo) string { return "agentd:" + m.ID }

// fullRules are the iptables rules (without -I/-D) of a full-mode machine at addr in subnet; bridges
// are the interfaces (iptables names, `+` a wildcard) behind which other machines live.
func fullRules(m *ComputerInfo, addr, subnet string, bridges []string, lookup func(string) []string) [][]string {
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
	for _, br := range bridges {
		rules = append(rules, rule("FORWARD", "-o", br, "-j", "DROP"))
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
				continue // IPv6 is off in a full machine (fullV6Off)
			}
			rules = append(rules, rule("FORWARD", "-d", ip, "-j", "DROP"))
		}
	}
	return rules
}

// machineBridgePatterns name the interfaces the usual engines put their machines behind, present or
// not yet made (podman makes podman0 with its first container): docker's default and user networks,
// podman's (netavark, CNI), libvirt's and LXC/LXD's, and the sandboxes' veths.
var machineBridgePatterns = []string{"docker0", "br-+", "podman+", "cni+", "virbr+", "lxcbr+", "lxdbr+", sandboxNetPrefix + "+"}

// machineBridges are the interfaces a full machine's traffic must not leave by: the patterns above and
// every bridge on the host now, except those the default IPv4 route leaves by (the way out; a host
// whose uplink is br0 keeps it). bridgesNow and uplinks are `ip -o link show type bridge` and
// `ip -4 route show default` (parameters for the tests).
func machineBridges(bridgesNow, uplinks string) []string {
	var out []string
	var up []string
	for _, line := range strings.Split(uplinks, "\n") {
		if f := strings.Fields(line); slices.Contains(f, "dev") {
			if i := slices.Index(f, "dev"); i+1 < len(f) {
				up = append(up, f[i+1])
			}
		}
	}
	matches := func(pattern, name string) bool {
		if p, ok := strings.CutSuffix(pattern, "+"); ok {
			return strings.HasPrefix(name, p)
		}
		return pattern == name
	}
	for _, p := range machineBridgePatterns {
		if !slices.ContainsFunc(up, func(u string) bool { return matches(p, u) }) {
			out = append(out, p)
		}
	}
	for _, line := range strings.Split(bridgesNow, "\n") {
		f := strings.Fields(line) // "5: docker0: <BROADCAST,...> ..."
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		if name == "" || slices.Contains(up, name) || slices.ContainsFunc(out, func(p string) bool { return matches(p, name) }) {
			continue
		}
		out = append(out, name)
	}
	return out
}

// hostMachineBridges is machineBridges on this host now.
func hostMachineBridges(ctx context.Context) []string {
	br, _ := exec.CommandContext(ctx, "ip", "-o", "link", "show", "type", "bridge").Output()
	up, _ := exec.CommandContext(ctx, "ip", "-4", "route", "show", "default").Output()
	return machineBridges(string(br), string(up))
}

// fullV6Off are the engine flags that turn IPv6 off in a full machine's network namespace ("" on a
// host without IPv6, where the engine could not set them).
func fullV6Off() []string {
	if _, err := os.Stat("/proc/sys/net/ipv6"); err != nil {
		return nil
	}
	return []string{"--sysctl", "net.ipv6.conf.all.disable_ipv6=1", "--sysctl", "net.ipv6.conf.default.disable_ipv6=1"}
}

// fullRestore is rules as iptables-restore input for the filter table (each -I goes to the top of its
// chain, so the last rule written is the first one matched).
func fullRestore(rules [][]string) string {
	var b strings.Builder
	b.WriteString("*filter\n")
	for _, r := range rules {
		b.WriteString("-I " + strings.Join(r, " ") + "\n")
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// filterFull adds the machine's rules (again after a start: the address may have changed).
func (e *engineProvider) filterFull(ctx context.Context, m *ComputerInfo) error {
	if m.Spec.Network.Mode != "full" || !e.filterable() {
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
	// One iptables-restore: the rules land together or not at all.
	rules := fullRules(m, addr, subnet, hostMachineBridges(ctx), lookup)
	if err := runQuiet(ctx, fullRestore(rules), "iptables-restore", "-w", "5", "--noflush"); err != nil {
		e.unfilterFull(ctx, m)
		return err
	}
	return nil
}

// unfilterFull removes every rule carrying the machine's comment.
func (e *engineProvider) unfilterFull(ctx context.Context, m *ComputerInfo) {
	if m.Spec.Network.Mode != "full" || !e.filterable() {
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
