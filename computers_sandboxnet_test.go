package main

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// TestSandboxNetSlots: full sandboxes of two servers on one host, created at once, get distinct
// addresses, and a slot whose link name is taken by something else is skipped (the kernel's refusal of
// a second link of one name is the claim, across servers).
func TestSandboxNetSlots(t *testing.T) {
	requireProvider(t, "sandbox")
	if !sandboxNetFilterable() {
		t.Skip("a full sandbox gets its own network only as root with iptables, ip and nsenter")
	}
	free, err := freeSandboxSlot(nil)
	if err != nil {
		t.Fatal(err)
	}
	squat := fmt.Sprintf("%s%d", sandboxNetPrefix, free)
	if out, err := exec.Command("ip", "link", "add", squat, "type", "veth", "peer", "name", squat+"p").CombinedOutput(); err != nil {
		t.Fatalf("ip link add %s: %v %s", squat, err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "link", "del", squat).Run() })
	_, squatGuest := sandboxSlotAddrs(free)

	servers := []*testServer{newTestServer(t, withHostEnv), newTestServer(t, withHostEnv)}
	var mu sync.Mutex
	addrs := map[string]string{}
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := servers[i%2]
			m := e.create(map[string]any{"provider": "sandbox", "network": map[string]any{"mode": "full"}})
			r := e.exec(m.ID, map[string]any{"cmd": "ip -o -4 addr show dev eth0"})
			addr := e.s.computers.providerByName("sandbox").(*sandboxProvider).guestNetAddr(context.Background(), &m)
			if r.ExitCode != 0 || addr == "" || !strings.Contains(r.Stdout, addr+"/30") {
				t.Errorf("machine %s: address %q, inside: %q %q", m.ID, addr, r.Stdout, r.Stderr)
			}
			mu.Lock()
			defer mu.Unlock()
			if other, dup := addrs[addr]; dup {
				t.Errorf("machines %s and %s share the address %s", other, m.ID, addr)
			}
			addrs[addr] = m.ID
		}()
	}
	wg.Wait()
	if id, ok := addrs[squatGuest]; ok {
		t.Fatalf("machine %s took the slot whose link name %s was taken", id, squat)
	}
}

// guestNetAddr is the machine's address in its namespace ("" when it has none); only tests ask.
func (s *sandboxProvider) guestNetAddr(ctx context.Context, m *ComputerInfo) string {
	out, err := exec.CommandContext(ctx, "ip", "-n", s.netns(m.ID), "-o", "-4", "addr", "show", "dev", "eth0").Output()
	if err != nil {
		return ""
	}
	for _, f := range strings.Fields(string(out)) {
		if ip, _, err := net.ParseCIDR(f); err == nil {
			return ip.String()
		}
	}
	return ""
}
