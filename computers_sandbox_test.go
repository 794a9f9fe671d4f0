//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// hostEscape is one thing a command in a machine should not be able to do to the host.
type hostEscape struct {
	name    string
	cmd     string
	escaped func(out string) bool
}

// hostEscapes are tried as a user of a machine would: read the host's secrets, write outside /work and
// /tmp, signal a host process, see the host's processes. On local each works (the README says local
// guards paths, it does not isolate); on sandbox, docker and podman none does.
func hostEscapes(t *testing.T, home string) []hostEscape {
	marker := "escape-marker-" + randomChars(8)
	if err := os.WriteFile(filepath.Join(home, "config.yaml"), []byte("# "+marker+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir() // a host directory no machine mounts
	victim := exec.Command("sleep", "4321987")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { victim.Process.Kill(); victim.Wait() })
	pid := os.Getpid()
	hostHome, _ := os.UserHomeDir()
	var hostListing []string
	if ents, err := os.ReadDir(hostHome); err == nil {
		for _, e := range ents {
			hostListing = append(hostListing, e.Name())
		}
	}
	sameListing := func(out string) bool {
		got := strings.Fields(out)
		slices.Sort(got)
		return len(hostListing) > 0 && slices.Equal(got, hostListing)
	}
	return []hostEscape{
		{"read-agent-home-config", "cat " + filepath.Join(home, "config.yaml") + " 2>/dev/null",
			func(out string) bool { return strings.Contains(out, marker) }},
		{"read-host-home", "ls -A " + hostHome + " 2>/dev/null | LC_ALL=C sort", sameListing},
		{"read-ssh-dir", "ls -A " + filepath.Join(hostHome, ".ssh") + " 2>/dev/null && echo listed",
			func(out string) bool {
				_, err := os.Stat(filepath.Join(hostHome, ".ssh"))
				return err == nil && strings.Contains(out, "listed")
			}},
		{"read-server-environment", fmt.Sprintf("tr '\\0' '\\n' < /proc/%d/environ 2>/dev/null | grep -c '^PATH=' || true", pid),
			func(out string) bool { return strings.TrimSpace(out) != "0" && strings.TrimSpace(out) != "" }},
		{"see-server-process", fmt.Sprintf("tr '\\0' ' ' < /proc/%d/cmdline 2>/dev/null", pid),
			func(out string) bool { return strings.Contains(out, filepath.Base(os.Args[0])) }},
		{"write-outside", "for f in /x /usr/x /etc/x /var/x /dev/x " + outside + "/x; do touch $f 2>/dev/null && echo wrote $f; done; true",
			func(out string) bool {
				_, err := os.Stat(filepath.Join(outside, "x"))
				return strings.Contains(out, "wrote") || err == nil
			}},
		{"signal-host-process", fmt.Sprintf("kill -9 %d 2>&1; true", victim.Process.Pid),
			func(out string) bool {
				st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", victim.Process.Pid))
				f := strings.Fields(string(st))
				if syscall.Kill(victim.Process.Pid, 0) != nil || len(f) > 2 && f[2] == "Z" {
					return true
				}
				// A SIGKILL is delivered before kill(1) returns; the victim is dying if it was sent.
				return strings.TrimSpace(out) == ""
			}},
	}
}

// TestSandboxEscapes: what a command can do to the host, per provider. local is the control: every
// escape works there, which is what the README's table says.
func TestSandboxEscapes(t *testing.T) {
	for _, prov := range []string{"local", "sandbox", "docker", "podman"} {
		t.Run(prov, func(t *testing.T) {
			t.Parallel()
			requireProvider(t, prov)
			home := t.TempDir()
			e := newTestServer(t, withHostEnv, withHome(home))
			m := e.create(map[string]any{"provider": prov, "idleTimeoutSec": 0})
			for _, x := range hostEscapes(t, home) {
				out := e.exec(m.ID, map[string]any{"cmd": x.cmd}).Stdout
				got := x.escaped(out)
				if x.name == "read-ssh-dir" && !got && prov == "local" {
					continue // this host has no ~/.ssh: nothing to read, nothing shown
				}
				if x.name == "read-host-home" && !got && prov == "local" {
					t.Logf("the host's home is empty or unreadable: %s not shown", x.name)
					continue
				}
				if want := prov == "local"; got != want {
					t.Errorf("%s on %s: escaped=%v, want %v; output %q", x.name, prov, got, want, out)
				}
			}
			if prov != "local" {
				// Only the machine's own processes are in its /proc.
				if n, _ := strconv.Atoi(strings.TrimSpace(e.sh(m.ID, `ls /proc | grep -c '^[0-9]'`))); n == 0 || n > 20 {
					t.Errorf("%s: %d processes in /proc", prov, n)
				}
			}
		})
	}
}

// TestSandboxNotHostRoot: with agentd as root, a machine's user is the host's sandboxHostID, not its
// root: it cannot write the host's sysctls (a same-value write, harmless had it passed), open
// /proc/sysrq-trigger for writing (only asked, never written), read a root-only file in what is bound
// in, hold a capability or make a user namespace (threads still start: clone3 is refused, clone is
// not); what it creates is sandboxHostID's on the host. (Before: uid 1000 was the
// host's root without capabilities, and all of these but the last passed.)
func TestSandboxNotHostRoot(t *testing.T) {
	requireProvider(t, "sandbox")
	if os.Geteuid() != 0 {
		t.Skip("without root the machine's user is agentd's own uid")
	}
	e := newTestServer(t, withHostEnv)
	m := e.create(map[string]any{"provider": "sandbox", "persist": true}) // /work is the host directory
	sb := e.s.computers.providerByName("sandbox").(*sandboxProvider)
	secret := filepath.Join(sb.dir(&m), "work", "root-only")
	if err := os.WriteFile(secret, []byte("host root's"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := e.sh(m.ID, `v=$(cat /proc/sys/vm/overcommit_ratio); (echo "$v" > /proc/sys/vm/overcommit_ratio) 2>/dev/null && echo SYSCTL-WRITTEN
test -w /proc/sysrq-trigger && echo SYSRQ-WRITABLE
cat /work/root-only 2>/dev/null && echo ROOT-FILE-READ
for k in /etc/ssl/private/*; do [ -e "$k" ] && head -c1 "$k" >/dev/null 2>&1 && echo KEY-READ; done
grep -E '^(CapPrm|CapEff|CapBnd|CapAmb):' /proc/self/status | grep -v '0000000000000000$'
unshare -U true 2>/dev/null && echo NESTED-USERNS
python3 -c 'import threading; t = threading.Thread(target=print); t.start(); t.join()' >/dev/null || echo NO-THREADS
touch /work/mine; id -u`)
	if out != "1000\n" {
		t.Fatalf("inside: %q", out)
	}
	fi, err := os.Stat(filepath.Join(sb.dir(&m), "work", "mine"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != sandboxHostID || st.Gid != sandboxHostID {
		t.Fatalf("a file the machine made is %d:%d on the host, want %d", st.Uid, st.Gid, sandboxHostID)
	}
}

// TestSandboxLimits: a fork bomb and a 10 GB write are bounded, and the machine lives on.
func TestSandboxLimits(t *testing.T) {
	requireProvider(t, "sandbox")
	e := newTestServer(t, withHostEnv)
	m := e.create(map[string]any{"provider": "sandbox", "idleTimeoutSec": 0, "diskMb": 64})
	// The other subtests run on a machine of their own: the watchdog that killed the bomb goes on
	// killing every process of its machine for a moment after, and would take theirs too.
	quiet := e.create(map[string]any{"provider": "sandbox", "idleTimeoutSec": 0, "diskMb": 64})
	t.Run("fork-bomb", func(t *testing.T) {
		// From a file, as an attacker past the command policy's fork-bomb rule would run it. A bomb never
		// ends by itself: that it is gone, and the machine answers, is the watchdog's work.
		e.call("PUT", "/v1/computers/"+m.ID+"/fs/write?path=/work/b.sh", []byte("bomb() { bomb | bomb & }; bomb\n"), 204, nil)
		e.exec(m.ID, map[string]any{"cmd": "sh b.sh", "timeoutSec": 60})
		eventually(t, "the bomb to be killed and the machine back to a handful of processes", func() bool {
			r, err := e.s.computers.Exec(context.Background(), m.ID, ExecRequest{Cmd: execCommand{Shell: `n=0; b=0; for f in /proc/[0-9]*; do n=$((n+1)); [ "$(tr '\0' ' ' < $f/cmdline 2>/dev/null)" = "sh b.sh " ] && b=$((b+1)); done; echo $n $b`}}, nil)
			if err != nil {
				return false // the bomb may leave no room for one more process for a moment
			}
			var n, bombs int
			fmt.Sscan(r.Stdout, &n, &bombs)
			return n > 0 && n < 20 && bombs == 0
		})
		if out := e.sh(m.ID, "echo alive"); out != "alive\n" {
			t.Fatalf("after the bomb: %q", out)
		}
	})
	t.Run("10GB-write", func(t *testing.T) {
		r := e.exec(quiet.ID, map[string]any{"cmd": "head -c 10000000000 /dev/zero > /work/big", "timeoutSec": 300})
		if r.ExitCode == 0 {
			t.Fatalf("a 10 GB write succeeded: %+v", r)
		}
		size, _ := strconv.Atoi(strings.TrimSpace(e.sh(quiet.ID, "wc -c < /work/big; rm -f /work/big")))
		if size == 0 || size > 64<<20 {
			t.Fatalf("the write stopped at %d bytes, want at most diskMb (64 MB)", size)
		}
	})
	t.Run("limits-inside", func(t *testing.T) {
		out := e.sh(quiet.ID, "ulimit -f; ulimit -d; ulimit -t; grep NoNewPrivs /proc/self/status; id -u; hostname")
		want := fmt.Sprintf("%d\n%d\n%d\nNoNewPrivs:\t1\n1000\nsandbox\n", (64<<20)/512, 2048<<10, sandboxCPUSecs)
		if out != want {
			t.Fatalf("inside: %q, want %q", out, want)
		}
	})
}

// TestSandboxServerOutlivesExec: a server started by one exec is reachable from the next (the same
// namespaces), and through POST .../ports from the host; network none has no route anywhere.
func TestSandboxNetwork(t *testing.T) {
	requireProvider(t, "sandbox")
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("the sandbox serves with the host's python3, which this host lacks")
	}
	e := newTestServer(t, withHostEnv)
	none := e.create(map[string]any{"provider": "sandbox", "network": map[string]any{"mode": "none"}})
	port := 41977
	e.sh(none.ID, fmt.Sprintf("echo in-none > index.html; nohup python3 -m http.server %d --bind 127.0.0.1 >/dev/null 2>&1 &", port))
	probe := fmt.Sprintf(`python3 -c 'import urllib.request,sys; print(urllib.request.urlopen("http://127.0.0.1:%d/index.html", timeout=2).read().decode().strip())'`, port)
	eventually(t, "the server in the machine to answer the machine's next exec", func() bool {
		return e.sh(none.ID, probe+" 2>/dev/null") == "in-none\n"
	})
	if out := e.sh(none.ID, "cat /proc/net/dev | grep -c ':' ; ls /sys/class/net 2>/dev/null | grep -vc '^lo$' || true"); !strings.HasPrefix(out, "1\n") {
		t.Fatalf("network none has interfaces besides lo: %q", out)
	}
	// Not the host's loopback: nothing listens on the port there.
	c := exec.Command("python3", "-c", fmt.Sprintf(`import socket; s=socket.socket(); s.settimeout(1); print(s.connect_ex(("127.0.0.1", %d)))`, port))
	if out, _ := c.Output(); strings.TrimSpace(string(out)) == "0" {
		t.Fatalf("the server of a network-none sandbox is reachable on the host's loopback")
	}
	if _, err := e.s.computers.ExposePort(context.Background(), none.ID, port); asAPIError(err).Code != codeComputerFailed {
		t.Fatalf("expose on network none: %v", err)
	}
	// Without root, full is the host's network: a deny list there could not be honoured, so it is
	// refused, not ignored (as root it is filtered: TestFullModeFiltered/sandbox).
	body := map[string]any{"provider": "sandbox", "network": map[string]any{"mode": "full", "deny": []string{"169.254.169.254"}}}
	sb := e.s.computers.providerByName("sandbox").(*sandboxProvider)
	sb.netFilterable = func() bool { return false } // as without root
	if msg := e.wantError("POST", "/v1/computers", body, 501, codeNotImplemented)["message"].(string); !strings.Contains(msg, "network.deny") {
		t.Fatalf("deny in full on the sandbox: %s", msg)
	}
	if full := e.create(map[string]any{"provider": "sandbox", "network": map[string]any{"mode": "full"}}); !sb.hostNetwork(&full) {
		t.Fatal("without root, a full sandbox should share the host's network")
	}
}

// TestSandboxProbeSaysWhy: without bwrap, or without a helper binary, the sandbox is unavailable with
// the reason and the fix, and `auto` passes over it.
func TestSandboxProbeSaysWhy(t *testing.T) {
	e := newTestServer(t, withHostEnv)
	c := e.s.computers
	sb := c.providerByName("sandbox")
	t.Setenv("PATH", t.TempDir()) // no bwrap on it
	if pr := sb.probe(context.Background()); pr.available || !strings.Contains(pr.reason, "bwrap") || !strings.Contains(pr.hint, "bubblewrap") {
		t.Fatalf("without bwrap: %+v", pr)
	}
	off := newTestServer(t, withHostEnv, func(c *testSetup) { c.ExecChannel, c.helperBinary = new(bool), "" })
	if bw, err := exec.LookPath("/usr/bin/bwrap"); err == nil {
		t.Setenv("PATH", filepath.Dir(bw))
		if pr := off.s.computers.providerByName("sandbox").probe(context.Background()); pr.available || !strings.Contains(pr.reason, "helper") {
			t.Fatalf("without a helper: %+v", pr)
		}
	}
	env := off.wantError("POST", "/v1/computers", map[string]any{"provider": "sandbox"}, 503, codeProviderUnavailable)
	if env["hint"] == "" {
		t.Fatalf("no hint: %v", env)
	}
}

// TestSandboxMounts: a host directory under allowedMounts is bound where the spec says, read-only unless
// readonly is false; one outside allowedMounts is a 422 before any bwrap starts.
func TestSandboxMounts(t *testing.T) {
	requireProvider(t, "sandbox")
	allowed := t.TempDir()
	ro, rw := filepath.Join(allowed, "ro"), filepath.Join(allowed, "rw")
	os.MkdirAll(ro, 0o755)
	os.MkdirAll(rw, 0o777)
	os.Chmod(rw, 0o777) // the machine's uid 1000 writes here
	if err := os.WriteFile(filepath.Join(ro, "f"), []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newTestServer(t, withHostEnv, func(c *testSetup) { c.AllowedMounts = []string{allowed} })
	m := e.create(map[string]any{"provider": "sandbox", "mounts": []any{
		map[string]any{"source": ro, "target": "/data"},
		map[string]any{"source": rw, "target": "/work/rw", "readonly": false},
	}})
	if out := e.sh(m.ID, "cat /data/f"); out != "from the host\n" {
		t.Fatalf("read through the mount: %q", out)
	}
	if r := e.exec(m.ID, map[string]any{"cmd": "echo x > /data/g"}); r.ExitCode == 0 {
		t.Fatalf("a write to a read-only mount succeeded: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(ro, "g")); err == nil {
		t.Fatal("the read-only mount's host directory was written")
	}
	e.sh(m.ID, "echo y > /work/rw/h")
	if b, err := os.ReadFile(filepath.Join(rw, "h")); err != nil || string(b) != "y\n" {
		t.Fatalf("the writable mount on the host: %q %v", b, err)
	}
	outside := t.TempDir()
	body := map[string]any{"provider": "sandbox", "mounts": []any{map[string]any{"source": outside, "target": "/data"}}}
	if msg := e.wantError("POST", "/v1/computers", body, 422, codeSpecInvalid)["message"].(string); !strings.Contains(msg, "allowedMounts") {
		t.Fatalf("a mount outside allowedMounts: %s", msg)
	}
}

// TestSandboxReadmeBuild: agentd built the README's way (`go build`: cgo wherever a C compiler is
// installed, as here) serves a sandbox machine, its helper being that binary itself, and a command runs
// in it as the machine's user with nothing of root's. As root this failed before (issue 24): the
// bounding-set drop was skipped under cgo and every create refused with "after the drop, CapBnd:
// 00000000000001c0". CI runs it as root and as a normal user, with the README's build and a static one
// (AGENT_TEST_AGENTD).
func TestSandboxReadmeBuild(t *testing.T) {
	requireProvider(t, "sandbox")
	bin := cliBinary(t)
	_, note := findHelperBinary(bin)
	t.Logf("agentd under test: %s (%s)", bin, map[bool]string{true: "cgo: " + note, false: "static"}[note != ""])
	e, _ := serveBinary(t, bin, t.TempDir(), "computerProvider: sandbox\n")
	m := e.create(map[string]any{"provider": "sandbox"})
	out := e.sh(m.ID, `id -u; grep -E '^(CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' /proc/self/status`)
	want := "1000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\n"
	if out != want {
		t.Fatalf("inside the machine: %q, want %q", out, want)
	}
}

// TestBwrapOutputSucceededIsSuccess: a bwrap that succeeded while a descendant held its output pipe past
// WaitDelay (a loaded host's sandbox init, seen in TestComputerConformance/sandbox as "bwrap cannot
// create a sandbox here: exec: WaitDelay expired before I/O complete") is a success, not a failed probe
// that turns the provider unavailable.
func TestBwrapOutputSucceededIsSuccess(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "bwrap")
	// The descendant holds stdout for 4 s (WaitDelay is 2 s), then ends by itself.
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho ok\nsleep 4 &\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := bwrapOutput(context.Background(), fake)
	if err != nil || !strings.HasPrefix(string(out), "ok") {
		t.Fatalf("a bwrap that exited 0: %q %v", out, err)
	}
	// A bwrap that failed still fails.
	os.WriteFile(fake, []byte("#!/bin/sh\necho 'bwrap: no' >&2\nexit 1\n"), 0o755)
	if _, err := bwrapOutput(context.Background(), fake); err == nil {
		t.Fatal("a bwrap that exited 1 succeeded")
	}
}
