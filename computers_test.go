package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/net/websocket"
)

// withHostEnv lets the server read this process's environment (PATH and the like reach local machines
// through the allow-list; the leak test looks for the host's secrets inside a machine).
func withHostEnv(c *testSetup) { c.getenv = os.Getenv }

func (ts *testServer) create(spec map[string]any) ComputerInfo {
	ts.t.Helper()
	var m ComputerInfo
	ts.call("POST", "/v1/computers", spec, 201, &m)
	return m
}

func (ts *testServer) exec(id string, body map[string]any) ExecResult {
	ts.t.Helper()
	var r ExecResult
	ts.call("POST", "/v1/computers/"+id+"/exec", body, 200, &r)
	return r
}

// sh runs a shell command in the machine and returns its stdout.
func (ts *testServer) sh(id, cmd string) string {
	ts.t.Helper()
	return ts.exec(id, map[string]any{"cmd": cmd}).Stdout
}

// processes lists the command lines of the processes visible inside the machine.
func (ts *testServer) processes(id string) string {
	ts.t.Helper()
	return ts.sh(id, `for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < "$f" 2>/dev/null; echo; done`)
}

// requireProvider skips a test whose provider cannot run here; with AGENT_TEST_DOCKER=1 a missing engine
// fails it instead.
func requireProvider(t *testing.T, name string) {
	t.Helper()
	if name == "local" {
		return
	}
	if name == "kubernetes" {
		requireKubernetes(t)
		return
	}
	if name == "sandbox" && os.Getenv("AGENT_TEST_CHANNEL") == "0" {
		t.Skip("the sandbox has no per-call path: its machine is the exec channel's helper (AGENT_TEST_CHANNEL=0)")
	}
	e := newTestServer(t, withHostEnv)
	pr := e.s.computers.probe(context.Background(), e.s.computers.providerByName(name))
	e.close()
	if name == "sandbox" {
		if !pr.available && os.Getenv("AGENT_TEST_SANDBOX") == "1" {
			t.Fatalf("provider sandbox is unavailable with AGENT_TEST_SANDBOX=1: %s (%s)", pr.reason, pr.hint)
		}
		if !pr.available {
			t.Skipf("provider sandbox unavailable: %s (set AGENT_TEST_SANDBOX=1 to make this a failure)", pr.reason)
		}
		return
	}
	if !pr.available {
		if os.Getenv("AGENT_TEST_DOCKER") == "1" {
			t.Fatalf("provider %s is unavailable with AGENT_TEST_DOCKER=1: %s (%s)", name, pr.reason, pr.hint)
		}
		t.Skipf("provider %s unavailable: %s (set AGENT_TEST_DOCKER=1 to make this a failure)", name, pr.reason)
	}
	requireTestImage(t, name, testImage)
}

// requireTestImage skips a test when the engine lacks the test image, with one line saying how to make
// it; with AGENT_TEST_DOCKER=1 (CI) that is a failure instead.
func requireTestImage(t *testing.T, engine, image string) {
	t.Helper()
	if out, err := exec.Command(engine, "image", "inspect", image).CombinedOutput(); err != nil {
		msg := fmt.Sprintf("%s has no test image %s: build it offline with scripts/test-image.sh", engine, image)
		if os.Getenv("AGENT_TEST_DOCKER") == "1" {
			t.Fatalf("%s (AGENT_TEST_DOCKER=1): %s", msg, bytes.TrimSpace(out))
		}
		t.Skip(msg + " (set AGENT_TEST_DOCKER=1 to make this a failure)")
	}
}

func tarGz(t testing.TB, entries []tar.Header, bodies map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, h := range entries {
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(bodies[h.Name]))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(bodies[h.Name]))
		}
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

// TestComputerConformance is THE conformance suite, run against every provider: one machine per provider
// is shared by the subtests that only use it; those that need machines of their own run in parallel.
func TestComputerConformance(t *testing.T) {
	// ssh-nomux: ssh with ssh.multiplex false (a connection per call, as on Windows).
	for i, name := range []string{"local", "docker", "podman", "sandbox", "kubernetes", "ssh", "ssh-nomux"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			prov, variant, _ := strings.Cut(name, "-")
			c := &conformance{prov: prov, local: prov == "local", hostNet: prov == "local", portBase: 41000 + i*10, opts: []testOption{withHostEnv}}
			if prov == "ssh" { // a real OpenSSH server on loopback (computers_ssh_test.go)
				c.opts = append(c.opts, withSSH(startSSHD(t)), withSSHMultiplex(variant != "nomux"))
			} else {
				requireProvider(t, prov)
			}
			c.e = c.server(t, func(c *testSetup) { c.MaxComputers = 4 })
			c.run(t)
		})
	}
	t.Cleanup(func() { checkNoLeaks(t); checkNoKubeLeaks(t) })
}

// checkNoLeaks: the suite ends with no agentd container of this process left on any engine.
func checkNoLeaks(t *testing.T) {
	// The sandboxes' cgroups (computers_sandbox_cgroup.go): agentd/agentd-<owner>-<id> in a hierarchy.
	if leaked, _ := filepath.Glob("/sys/fs/cgroup/*/agentd/agentd-" + testOwnerPrefix() + "*"); len(leaked) > 0 {
		t.Errorf("leaked cgroups: %q", leaked)
	}
	if leaked, _ := filepath.Glob("/sys/fs/cgroup/agentd/agentd-" + testOwnerPrefix() + "*"); len(leaked) > 0 {
		t.Errorf("leaked cgroups: %q", leaked)
	}
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil { // full sandboxes' namespaces
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, "agentd-"+testOwnerPrefix()) {
				t.Errorf("leaked network namespace: %s", line)
			}
		}
	}
	for _, eng := range []string{"docker", "podman"} {
		if _, err := exec.LookPath(eng); err != nil {
			continue
		}
		// The owner, then what tells where a leak came from: its state, when it was made, its pool label.
		format := `{{.Names}} {{.Label "agentd.owner"}} {{.Status}} {{.CreatedAt}} pool={{.Label "agentd.pool"}}`
		if eng == "podman" {
			format = `{{.Names}} {{index .Labels "agentd.owner"}} {{.Status}} {{.CreatedAt}} pool={{index .Labels "agentd.pool"}}`
		}
		out, err := exec.Command(eng, "ps", "-a", "--filter", "label=agentd.id", "--format", format).CombinedOutput()
		if err != nil {
			if eng == "docker" && exec.Command(eng, "info").Run() != nil {
				continue // daemon not running: nothing could leak
			}
			t.Errorf("%s ps: %v: %s", eng, err, out)
			continue
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && strings.HasPrefix(f[1], testOwnerPrefix()) {
				t.Errorf("%s: leaked container: %s\n%s", eng, line, origin(f[1]))
			}
		}
	}
}

// conformance is one provider's run of the suite.
type conformance struct {
	prov     string
	local    bool
	hostNet  bool        // the machine's ports are the host's (local; the sandbox only in mode full, not the suite's)
	portBase int         // spreads the sleep markers between the providers running at once
	e        *testServer // the provider's server
	id       string      // the shared machine
	opts     []testOption
}

// server starts a server of the provider's run (its options, then extra).
func (c *conformance) server(t *testing.T, extra ...testOption) *testServer {
	return newTestServer(t, append(slices.Clone(c.opts), extra...)...)
}

// spec is a create body for the provider: ssh honours only network mode full, which it must be asked.
func (c *conformance) spec(body map[string]any) map[string]any {
	if _, set := body["network"]; c.prov == "ssh" && !set {
		body["network"] = map[string]any{"mode": "full"}
	}
	return body
}

// sub runs a subtest with the server bound to it.
func (c *conformance) sub(t *testing.T, name string, f func(t *testing.T, e *testServer)) {
	t.Run(name, func(t *testing.T) { f(t, c.e.with(t)) })
}

// parallel runs a subtest with its own machines beside the others.
func (c *conformance) parallel(t *testing.T, name string, f func(t *testing.T, e *testServer)) {
	t.Run(name, func(t *testing.T) { t.Parallel(); f(t, c.e.with(t)) })
}

func (c *conformance) run(t *testing.T) {
	spec := c.spec(map[string]any{"provider": c.prov, "name": "conf-" + c.prov, "idleTimeoutSec": 0,
		"env": map[string]string{"SPEC_VAR": "from-spec"}})
	if os.Getenv("AGENT_TEST_CHANNEL") == "0" && !c.local {
		// Egress (the default) reaches out only over the exec channel, off here: the shared machine takes
		// the bridge (TestEgressFailsClosed checks egress without the channel; ports/expose, ports without it).
		spec["network"] = map[string]any{"mode": "full"}
	}
	m := c.e.with(t).create(spec)
	c.id = m.ID
	c.sub(t, "lifecycle/create", func(t *testing.T, e *testServer) {
		if m.State != "running" || m.Provider != c.prov || m.Workdir != "/work" || !strings.HasPrefix(m.ID, "cmp_") {
			t.Fatalf("created: %+v", m)
		}
		if m.Isolated == c.local {
			t.Fatalf("isolated=%v for %s", m.Isolated, c.prov)
		}
	})
	c.lifecycle(t)
	c.setup(t)
	c.execs(t)
	c.execStream(t)
	c.files(t)
	c.uploads(t)
	c.ports(t)
	c.terminal(t)
	c.badInput(t)
	c.quota(t)
	c.reaper(t)
	c.restart(t)
}

func (c *conformance) lifecycle(t *testing.T) {
	c.sub(t, "lifecycle/by-name", func(t *testing.T, e *testServer) {
		var got ComputerInfo
		if e.call("GET", "/v1/computers/conf-"+c.prov, nil, 200, &got); got.ID != c.id {
			t.Fatalf("by name: %+v", got)
		}
	})
	c.sub(t, "lifecycle/stop-start-destroy", func(t *testing.T, e *testServer) {
		sub, _ := e.s.hub.subscribe()
		defer e.s.hub.unsubscribe(sub)
		m2 := e.create(c.spec(map[string]any{"provider": c.prov, "idleTimeoutSec": 0, "labels": map[string]string{"team": "a"}}))
		var got ComputerInfo
		var list struct{ Computers []ComputerInfo }
		if e.call("POST", "/v1/computers/"+m2.ID+"/stop", nil, 200, &got); got.State != "stopped" {
			t.Fatalf("stop: %+v", got)
		}
		listed := func(c ComputerInfo) bool { return c.ID == m2.ID }
		if e.call("GET", "/v1/computers", nil, 200, &list); slices.ContainsFunc(list.Computers, listed) {
			t.Fatal("a stopped machine is listed without ?all=true")
		}
		if e.call("GET", "/v1/computers?all=true", nil, 200, &list); !slices.ContainsFunc(list.Computers, listed) {
			t.Fatal("a stopped machine is missing from ?all=true")
		}
		e.wantError("POST", "/v1/computers/"+m2.ID+"/exec", map[string]any{"cmd": "true"}, 500, codeComputerFailed)
		if e.call("POST", "/v1/computers/"+m2.ID+"/start", nil, 200, &got); got.State != "running" {
			t.Fatalf("start: %+v", got)
		}
		if out := e.sh(m2.ID, "echo again"); out != "again\n" {
			t.Fatalf("exec after start: %q", out)
		}
		// A restarted machine's user can still write its workspace and /tmp (Docker resets tmpfs modes).
		if out := e.sh(m2.ID, "touch w && test -w /tmp && echo ok"); out != "ok\n" {
			t.Fatalf("write after start: %q", out)
		}
		e.call("DELETE", "/v1/computers/"+m2.ID, nil, 204, nil)
		e.wantError("GET", "/v1/computers/"+m2.ID, nil, 404, codeComputerNotFound)
		var seen []string
		for len(seen) < 4 {
			select {
			case ev := <-sub.ch:
				var id string
				switch p := ev.Payload.(type) {
				case *ComputerInfo:
					id = p.ID
				case map[string]any:
					id, _ = p["computerId"].(string)
				}
				if ev.Topic == "computers" && id == m2.ID {
					seen = append(seen, ev.Type)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("computers events: %v", seen)
			}
		}
		if want := []string{"computer_created", "computer_stopped", "computer_started", "computer_destroyed"}; !slices.Equal(seen, want) {
			t.Fatalf("computers events %v, want %v", seen, want)
		}
		e.wantError("POST", "/v1/computers/"+m2.ID+"/exec", map[string]any{"cmd": "true"}, 404, codeComputerNotFound)
		e.wantError("DELETE", "/v1/computers/"+m2.ID, nil, 404, codeComputerNotFound)
	})
	c.sub(t, "lifecycle/not-found", func(t *testing.T, e *testServer) {
		e.wantError("GET", "/v1/computers/cmp_nope", nil, 404, codeComputerNotFound)
	})
}

func (c *conformance) setup(t *testing.T) {
	c.parallel(t, "setup/script", func(t *testing.T, e *testServer) {
		ok := e.create(c.spec(map[string]any{"provider": c.prov, "setup": "echo provisioned > setup.txt"}))
		if out := e.sh(ok.ID, "cat setup.txt"); out != "provisioned\n" {
			t.Fatalf("setup: %q", out)
		}
		e.call("DELETE", "/v1/computers/"+ok.ID, nil, 204, nil)
	})
	c.parallel(t, "setup/failure", func(t *testing.T, e *testServer) {
		env := e.wantError("POST", "/v1/computers", c.spec(map[string]any{"provider": c.prov, "setup": "echo broken >&2; exit 3"}), 500, codeComputerFailed)
		d, _ := env["details"].(map[string]any)
		var bad ComputerInfo
		e.call("GET", "/v1/computers/"+fmt.Sprint(d["computerId"]), nil, 200, &bad)
		if bad.State != "error" || !strings.Contains(bad.Error, "broken") {
			t.Fatalf("failed setup: %+v", bad)
		}
		e.call("DELETE", "/v1/computers/"+bad.ID, nil, 204, nil)
	})
	c.parallel(t, "setup/packages", func(t *testing.T, e *testServer) {
		if c.local || c.prov == "sandbox" || c.prov == "kubernetes" || c.prov == "ssh" { // the host's /usr, read-only; a non-root pod; a shared host
			e.wantError("POST", "/v1/computers", c.spec(map[string]any{"provider": c.prov, "packages": []string{"jq"}}), 501, codeNotImplemented)
			return
		}
		if os.Getenv("AGENT_TEST_PACKAGES") != "1" {
			t.Skip("packages need a Debian mirror reachable from the machine (AGENT_TEST_PACKAGES=1)")
		}
		pk := e.create(c.spec(map[string]any{"provider": c.prov, "packages": []string{"jq"}}))
		if out := e.sh(pk.ID, "echo '{\"a\":7}' | jq .a; id -u"); out != "7\n1000\n" {
			t.Fatalf("packages: %q", out)
		}
		e.call("DELETE", "/v1/computers/"+pk.ID, nil, 204, nil)
	})
	c.parallel(t, "setup/persist", func(t *testing.T, e *testServer) {
		if c.local || c.prov == "ssh" {
			t.Skip("a local or ssh machine's /work is a directory on its host (persistent, and pwd shows its real path)")
		}
		// persist keeps /work across stop and start; without it /work is a tmpfs.
		p := e.create(c.spec(map[string]any{"provider": c.prov, "persist": true, "workdir": "/work/proj"}))
		e.sh(p.ID, "pwd > where && echo kept > f")
		e.call("POST", "/v1/computers/"+p.ID+"/stop", nil, 200, nil)
		e.call("POST", "/v1/computers/"+p.ID+"/start", nil, 200, nil)
		if out := e.sh(p.ID, "cat f where"); out != "kept\n/work/proj\n" {
			t.Fatalf("persist: %q", out)
		}
		e.call("DELETE", "/v1/computers/"+p.ID, nil, 204, nil)
	})
	c.parallel(t, "setup/hardening", func(t *testing.T, e *testServer) {
		if c.local || c.prov == "ssh" {
			t.Skip("a local or ssh machine is not a container (ssh refuses network mode none: TestSSHRefusals)")
		}
		n := e.create(c.spec(map[string]any{"provider": c.prov, "network": map[string]any{"mode": "none"}}))
		out := e.sh(n.ID, "id -u; touch /etc/x 2>/dev/null && echo root-writable; grep CapEff /proc/self/status")
		if !strings.HasPrefix(out, "1000\n") || strings.Contains(out, "root-writable") || !strings.Contains(out, "0000000000000000") {
			t.Fatalf("hardening: %q", out)
		}
		env := e.wantError("POST", "/v1/computers/"+n.ID+"/ports", map[string]any{"port": 80}, 500, codeComputerFailed)
		if !strings.Contains(env["message"].(string), "network mode none") {
			t.Fatalf("ports with network none: %v", env)
		}
		e.call("DELETE", "/v1/computers/"+n.ID, nil, 204, nil)
	})
}

func (c *conformance) execs(t *testing.T) {
	id, x := c.id, "/v1/computers/"+c.id+"/exec"
	c.sub(t, "exec/exit-code-and-streams", func(t *testing.T, e *testServer) {
		if r := e.exec(id, map[string]any{"cmd": "echo out; echo err >&2; exit 3"}); r.ExitCode != 3 || r.Stdout != "out\n" || r.Stderr != "err\n" || r.TimedOut {
			t.Fatalf("non-zero exit: %+v", r)
		}
	})
	c.sub(t, "exec/argv", func(t *testing.T, e *testServer) {
		if r := e.exec(id, map[string]any{"cmd": []string{"echo", "a b", "$HOME"}}); r.Stdout != "a b $HOME\n" {
			t.Fatalf("argv: %+v", r)
		}
		if r := e.exec(id, map[string]any{"cmd": []string{"no-such-program-x"}}); r.ExitCode != 127 {
			t.Fatalf("argv with a missing program: %+v", r)
		}
	})
	c.sub(t, "exec/stdin", func(t *testing.T, e *testServer) {
		if r := e.exec(id, map[string]any{"cmd": "cat", "stdin": "hello\nworld"}); r.Stdout != "hello\nworld" {
			t.Fatalf("stdin: %+v", r)
		}
	})
	c.sub(t, "exec/env", func(t *testing.T, e *testServer) {
		if r := e.exec(id, map[string]any{"cmd": "echo $FOO $SPEC_VAR", "env": map[string]string{"FOO": "bar baz"}}); r.Stdout != "bar baz from-spec\n" {
			t.Fatalf("env: %+v", r)
		}
		if out := e.sh(id, "env"); strings.Contains(out, "AGENT_TOKEN") || strings.Contains(out, "_API_KEY") {
			t.Fatalf("server environment leaked into the machine: %s", out)
		}
	})
	c.sub(t, "exec/not-found", func(t *testing.T, e *testServer) {
		// A program that is not there: exit 127 and the shell's words, as an argv or as a string.
		for _, cmd := range []any{[]string{"no-such-program-x1"}, "no-such-program-x1 --flag"} {
			if r := e.exec(id, map[string]any{"cmd": cmd}); r.ExitCode != 127 || !strings.Contains(r.Stderr, "no-such-program-x1: not found") {
				t.Fatalf("%v: %+v", cmd, r)
			}
		}
	})
	c.sub(t, "exec/cwd", func(t *testing.T, e *testServer) {
		e.sh(id, "mkdir -p sub/dir")
		if r := e.exec(id, map[string]any{"cmd": "pwd", "cwd": "/work/sub/dir"}); !strings.HasSuffix(r.Stdout, "/work/sub/dir\n") {
			t.Fatalf("cwd: %+v", r)
		}
		e.wantError("POST", x, map[string]any{"cmd": "pwd", "cwd": "sub"}, 422, codeSpecInvalid) // relative: refused
		e.wantError("POST", x, map[string]any{"cmd": "pwd", "cwd": "--privileged"}, 422, codeSpecInvalid)
		if r := e.exec(id, map[string]any{"cmd": "pwd", "cwd": "/work/sub"}); !strings.HasSuffix(r.Stdout, "/work/sub\n") {
			t.Fatalf("relative cwd: %+v", r)
		}
		e.wantError("POST", x, map[string]any{"cmd": "pwd", "cwd": "/work/does/not/exist"}, 500, codeExecFailed)
	})
	c.sub(t, "exec/timeout", func(t *testing.T, e *testServer) {
		// Partial output, timedOut, 124, and the tree is gone inside the machine.
		n := fmt.Sprint(c.portBase + 31000000)
		r := e.exec(id, map[string]any{"cmd": "echo started; sleep " + n + "; echo never", "timeoutSec": 1})
		if !r.TimedOut || r.ExitCode != 124 || r.Stdout != "started\n" {
			t.Fatalf("timeout: %+v", r)
		}
		eventually(t, "the timed-out tree to die", func() bool { return !strings.Contains(e.processes(id), "sleep "+n) })
	})
	c.sub(t, "exec/background-child", func(t *testing.T, e *testServer) {
		// A background child holding stdout must not hold the exec; it keeps running.
		n := fmt.Sprint(c.portBase + 32000000)
		r := e.exec(id, map[string]any{"cmd": "sleep " + n + " & echo bg", "timeoutSec": 60})
		if r.TimedOut || r.ExitCode != 0 || r.Stdout != "bg\n" {
			t.Fatalf("background child: %+v", r)
		}
		if !strings.Contains(e.processes(id), "sleep "+n) {
			t.Fatal("the background child should keep running")
		}
		e.sh(id, killScript("sleep", n))
	})
	c.sub(t, "exec/truncation", func(t *testing.T, e *testServer) {
		r := e.exec(id, map[string]any{"cmd": "printf 'HEAD'; head -c 100000 /dev/zero | tr '\\0' 'x'; printf 'TAIL'", "maxOutputBytes": 1000})
		if !r.Truncated || !strings.HasPrefix(r.Stdout, "HEADx") || !strings.HasSuffix(r.Stdout, "xTAIL") || len(r.Stdout) > 1100 || !strings.Contains(r.Stdout, "bytes elided") {
			t.Fatalf("truncation: truncated=%v len=%d", r.Truncated, len(r.Stdout))
		}
		// UTF-8 is never split, whatever the cap.
		for _, capN := range []int{7, 100, 101, 1001} {
			r = e.exec(id, map[string]any{"cmd": "i=0; while [ $i -lt 700 ]; do printf 'é€'; i=$((i+1)); done", "maxOutputBytes": capN})
			if !utf8.ValidString(r.Stdout) || strings.ContainsRune(r.Stdout, utf8.RuneError) || !r.Truncated {
				t.Fatalf("utf-8 with cap %d: %q", capN, r.Stdout)
			}
		}
	})
	c.sub(t, "exec/tty-and-user", func(t *testing.T, e *testServer) {
		if c.local || c.prov == "sandbox" {
			e.wantError("POST", x, map[string]any{"cmd": "true", "tty": true}, 501, codeNotImplemented)
			e.wantError("POST", x, map[string]any{"cmd": "true", "user": "root"}, 501, codeNotImplemented)
			return
		}
		if r := e.exec(id, map[string]any{"cmd": "test -t 1 && echo tty; exit 4", "tty": true}); r.ExitCode != 4 || !strings.HasPrefix(r.Stdout, "tty") {
			t.Fatalf("tty: %+v", r)
		}
		if c.prov == "kubernetes" || c.prov == "ssh" { // runAsNonRoot, and kubectl exec has no user; ssh.target's user
			e.wantError("POST", x, map[string]any{"cmd": "true", "user": "root"}, 501, codeNotImplemented)
			return
		}
		if out := e.exec(id, map[string]any{"cmd": "id -u", "user": "0"}).Stdout; out != "0\n" {
			t.Fatalf("user: %q", out)
		}
	})
	c.sub(t, "exec/policy", func(t *testing.T, e *testServer) {
		env := e.wantError("POST", x, map[string]any{"cmd": "sudo ls"}, 403, codeExecDenied)
		if d, _ := env["details"].(map[string]any); d["rule"] != "sudo" {
			t.Fatalf("denied without details.rule: %v", env)
		}
		if r := e.exec(id, map[string]any{"cmd": "echo shutdown >> notes; grep -r shutdown notes"}); r.ExitCode != 0 {
			t.Fatalf("allowed command: %+v", r)
		}
	})
}

func (c *conformance) execStream(t *testing.T) {
	id, path := c.id, "/v1/computers/"+c.id+"/exec/stream"
	c.sub(t, "exec/stream", func(t *testing.T, e *testServer) {
		frames := e.sse("POST", path, map[string]any{"cmd": "echo out; echo err >&2; exit 2"}).all()
		var sawOut, sawErr bool
		var exit map[string]any
		for _, f := range frames {
			switch f["type"] {
			case "stdout":
				sawOut = sawOut || strings.Contains(f["data"].(string), "out")
			case "stderr":
				sawErr = sawErr || strings.Contains(f["data"].(string), "err")
			case "exit":
				exit = f["result"].(map[string]any)
			}
		}
		if !sawOut || !sawErr || exit == nil || exit["exitCode"].(float64) != 2 {
			t.Fatalf("frames: %v", frames)
		}
	})
	c.sub(t, "exec/stream-disconnect", func(t *testing.T, e *testServer) {
		// A client disconnect kills the process tree inside the machine.
		n := fmt.Sprint(c.portBase + 33000000)
		s := e.sse("POST", path, map[string]any{"cmd": "echo ready; sleep " + n})
		s.until(t, "stdout")
		s.close()
		eventually(t, "the disconnected exec's tree to die", func() bool { return !strings.Contains(e.processes(id), "sleep "+n) })
	})
	c.sub(t, "exec/stream-policy", func(t *testing.T, e *testServer) {
		e.wantError("POST", path, map[string]any{"cmd": "sudo id"}, 403, codeExecDenied)
	})
}

func (c *conformance) files(t *testing.T) {
	id, fs := c.id, "/v1/computers/"+c.id+"/fs"
	// The fixture the subtests read: 1024 bytes, every byte value.
	bin := make([]byte, 256*4)
	for i := range bin {
		bin[i] = byte(i)
	}
	c.e.with(t).call("PUT", fs+"/write?path=/work/dir/bin.dat", bin, 204, nil)
	c.sub(t, "files/binary-round-trip", func(t *testing.T, e *testServer) {
		if r := e.do("GET", fs+"/read?path=dir/bin.dat", nil); r.status != 200 || !bytes.Equal(r.body, bin) {
			t.Fatalf("binary round trip: %d len %d", r.status, len(r.body))
		}
		if out := e.sh(id, "wc -c < dir/bin.dat"); strings.TrimSpace(out) != "1024" {
			t.Fatalf("written file seen by exec: %q", out)
		}
		e.call("PUT", fs+"/write?path=/tmp/t.json", `{"a":1}`, 204, nil)
	})
	c.sub(t, "files/read-limit", func(t *testing.T, e *testServer) {
		e.s.computers.readLimit = 100
		defer func() { e.s.computers.readLimit = 256 << 20 }()
		e.wantError("GET", fs+"/read?path=dir/bin.dat", nil, 429, codeQuota)
	})
	c.sub(t, "files/list", func(t *testing.T, e *testServer) {
		var ls struct{ Entries []DirEntry }
		e.call("GET", fs+"?path=/work/dir", nil, 200, &ls)
		if len(ls.Entries) != 1 || ls.Entries[0].Name != "bin.dat" || ls.Entries[0].Type != "file" || ls.Entries[0].Size != 1024 || ls.Entries[0].Path != "/work/dir/bin.dat" {
			t.Fatalf("list: %+v", ls.Entries)
		}
		e.call("PUT", fs+"/write?path=a-file", []byte("a"), 204, nil) // sorts before "dir"
		if e.call("GET", fs+"?path=/work", nil, 200, &ls); len(ls.Entries) < 2 || ls.Entries[0].Type != "dir" {
			t.Fatalf("directories first: %+v", ls.Entries)
		}
	})
	c.sub(t, "files/escapes", func(t *testing.T, e *testServer) {
		for _, p := range []string{"../etc/passwd", "/etc/passwd", "/work/../etc/passwd", "/proc/self/environ", "/", "/var"} {
			e.wantError("GET", fs+"/read?path="+p, nil, 403, codeFSDenied)
		}
	})
	c.sub(t, "files/symlinks", func(t *testing.T, e *testServer) {
		e.sh(id, "ln -sf /etc etc-link; ln -sf / root-link; ln -sf /etc/passwd pw")
		for _, p := range []string{"/work/etc-link/passwd", "/work/pw", "/work/root-link/etc/hostname"} {
			env := e.wantError("GET", fs+"/read?path="+p, nil, 403, codeFSDenied)
			if !strings.Contains(env["message"].(string), "symlink") {
				t.Fatalf("%s: %v", p, env)
			}
		}
		e.wantError("GET", fs+"?path=/work/root-link", nil, 403, codeFSDenied)
		e.wantError("PUT", fs+"/write?path=/work/etc-link/evil", []byte("x"), 403, codeFSDenied)
		// Deleting the link itself is fine; its target is untouched.
		e.call("DELETE", fs+"?path=/work/pw", nil, 204, nil)
	})
	c.sub(t, "files/delete", func(t *testing.T, e *testServer) {
		for _, p := range []string{"/work", "/tmp", "/work/", "/work/.", "dir/.."} {
			env := e.wantError("DELETE", fs+"?path="+p+"&recursive=true", nil, 403, codeFSDenied)
			if !strings.Contains(env["message"].(string), "workspace root") {
				t.Fatalf("root delete %s: %v", p, env)
			}
		}
		e.call("PUT", fs+"/write?path=/work/del/f", []byte("x"), 204, nil)
		e.wantError("DELETE", fs+"?path=/work/del", nil, 403, codeFSDenied) // not empty
		e.call("DELETE", fs+"?path=/work/del&recursive=true", nil, 204, nil)
		e.wantError("GET", fs+"/read?path=/work/del/f", nil, 403, codeFSDenied)
	})
	c.sub(t, "files/read-errors", func(t *testing.T, e *testServer) {
		e.wantError("GET", fs+"/read", nil, 422, codeSpecInvalid)
		e.wantError("GET", fs+"/read?path=/work", nil, 403, codeFSDenied)
	})
	c.sub(t, "files/download", func(t *testing.T, e *testServer) {
		// Entries are relative to the parent of path.
		r := e.call("GET", fs+"/download?path=/work/dir", nil, 200, nil)
		zr, err := gzip.NewReader(bytes.NewReader(r.body))
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(zr)
		files := map[string]string{}
		for h, err := tr.Next(); err == nil; h, err = tr.Next() {
			b, _ := io.ReadAll(tr)
			files[h.Name] = string(b)
		}
		if files["dir/bin.dat"] != string(bin) {
			t.Fatalf("download content: %q", files)
		}
	})
	c.sub(t, "files/download-limits", func(t *testing.T, e *testServer) {
		e.s.computers.downloadLimit = 10
		defer func() { e.s.computers.downloadLimit = 256 << 20 }()
		env := e.wantError("GET", fs+"/download?path=/work/dir", nil, 429, codeQuota)
		if d, _ := env["details"].(map[string]any); d["limit"].(float64) != 10 || d["bytes"].(float64) <= 10 {
			t.Fatalf("download limit: %v", env)
		}
		e.wantError("GET", fs+"/download?path=/etc", nil, 403, codeFSDenied)
	})
}

func (c *conformance) uploads(t *testing.T) {
	id, fs := c.id, "/v1/computers/"+c.id+"/fs"
	c.sub(t, "files/upload", func(t *testing.T, e *testServer) {
		good := tarGz(t, []tar.Header{
			{Name: "proj/", Typeflag: tar.TypeDir, Mode: 0o755},
			{Name: "proj/a.txt", Typeflag: tar.TypeReg},
			{Name: "proj/link", Typeflag: tar.TypeSymlink, Linkname: "a.txt"},
		}, map[string]string{"proj/a.txt": "alpha"})
		up := e.call("POST", fs+"/upload?path=/work/up", good, 200, nil).json(t)
		if up["path"] != "/work/up" || up["entries"].(float64) != 3 || up["bytes"].(float64) != float64(len(good)) {
			t.Fatalf("upload answer: %v", up)
		}
		if out := e.sh(id, "cat up/proj/a.txt up/proj/link"); out != "alphaalpha" {
			t.Fatalf("uploaded: %q", out)
		}
	})
	c.sub(t, "files/upload-refused", func(t *testing.T, e *testServer) {
		bad := map[string][]tar.Header{
			"dotdot":   {{Name: "ok.txt", Typeflag: tar.TypeReg}, {Name: "../x", Typeflag: tar.TypeReg}},
			"absolute": {{Name: "ok.txt", Typeflag: tar.TypeReg}, {Name: "/tmp/abs", Typeflag: tar.TypeReg}},
			"symlink":  {{Name: "ok.txt", Typeflag: tar.TypeReg}, {Name: "etc", Typeflag: tar.TypeSymlink, Linkname: "/etc"}},
			"relative": {{Name: "ok.txt", Typeflag: tar.TypeReg}, {Name: "l", Typeflag: tar.TypeSymlink, Linkname: "../../.."}},
			"through":  {{Name: "ok.txt", Typeflag: tar.TypeReg}, {Name: "d", Typeflag: tar.TypeSymlink, Linkname: "."}, {Name: "d/x", Typeflag: tar.TypeReg}},
			"hardlink": {{Name: "ok.txt", Typeflag: tar.TypeReg}, {Name: "h", Typeflag: tar.TypeLink, Linkname: "../../etc/passwd"}},
			"device":   {{Name: "ok.txt", Typeflag: tar.TypeReg}, {Name: "dev", Typeflag: tar.TypeChar}},
		}
		for name, hs := range bad {
			e.wantError("POST", fs+"/upload?path=/work/bad-"+name, tarGz(t, hs, map[string]string{"ok.txt": "x"}), 403, codeFSDenied)
			if out := e.sh(id, "ls bad-"+name+" x ../tmp/abs 2>/dev/null | wc -l"); strings.TrimSpace(out) != "0" {
				t.Fatalf("%s: something was written: %q", name, out)
			}
		}
		e.wantError("POST", fs+"/upload?path=/work/x", []byte("not a tarball"), 422, codeSpecInvalid)
	})
	c.sub(t, "files/upload-through-planted-link", func(t *testing.T, e *testServer) {
		// A link planted inside the machine does not redirect an upload.
		e.sh(id, "mkdir -p trap && ln -sfn /etc trap/sub")
		e.wantError("POST", fs+"/upload?path=/work/trap", tarGz(t, []tar.Header{{Name: "sub/evil", Typeflag: tar.TypeReg}}, nil), 403, codeFSDenied)
		// A hard link naming a target through that planted link would share an inode outside the jail.
		e.wantError("POST", fs+"/upload?path=/work/trap", tarGz(t, []tar.Header{{Name: "h", Typeflag: tar.TypeLink, Linkname: "sub/passwd"}}, nil), 403, codeFSDenied)
		if out := e.sh(id, "ls trap/h 2>/dev/null | wc -l"); strings.TrimSpace(out) != "0" {
			t.Fatalf("hard link through a planted link was written: %q", out)
		}
		// ... nor when the archive first adds its own (lexically inside) link to the planted one.
		e.wantError("POST", fs+"/upload?path=/work/trap", tarGz(t, []tar.Header{
			{Name: "x", Typeflag: tar.TypeSymlink, Linkname: "sub"},
			{Name: "h2", Typeflag: tar.TypeLink, Linkname: "x/passwd"},
		}, nil), 403, codeFSDenied)
		if out := e.sh(id, "ls trap/h2 trap/x 2>/dev/null | wc -l"); strings.TrimSpace(out) != "0" {
			t.Fatalf("hard link through an archive link was written: %q", out)
		}
	})
	c.sub(t, "files/upload-bomb", func(t *testing.T, e *testServer) {
		// A decompression bomb is stopped without writing anything.
		e.s.computers.uploadLimit = 4 << 20
		var bomb bytes.Buffer
		zw := gzip.NewWriter(&bomb)
		tw := tar.NewWriter(zw)
		tw.WriteHeader(&tar.Header{Name: "zeros", Typeflag: tar.TypeReg, Size: 64 << 20, Mode: 0o644})
		tw.Write(make([]byte, 64<<20))
		tw.Close()
		zw.Close()
		env := e.wantError("POST", fs+"/upload?path=/work/bomb", bomb.Bytes(), 429, codeQuota)
		if d, _ := env["details"].(map[string]any); d["limit"] == nil {
			t.Fatalf("bomb: %v", env)
		}
		if out := e.sh(id, "ls bomb 2>/dev/null | wc -l"); strings.TrimSpace(out) != "0" {
			t.Fatal("bomb: something was written")
		}
	})
}

func (c *conformance) ports(t *testing.T) {
	id, ports := c.id, "/v1/computers/"+c.id+"/ports"
	c.sub(t, "ports/expose", func(t *testing.T, e *testServer) {
		if _, err := exec.LookPath("python3"); (c.local || c.prov == "sandbox" || c.prov == "ssh") && err != nil { // ssh: the test's host is this one
			t.Skip("the " + c.prov + " port test serves with the host's python3, which this host lacks")
		}
		port := 8000
		if c.hostNet || c.prov == "ssh" { // an ssh machine's ports are its host's: one free now, not a fixed one in the range the kernel hands out
			port = freePort(t)
		}
		if os.Getenv("AGENT_TEST_CHANNEL") == "0" && !c.hostNet && c.prov != "ssh" { // a guest port is a stream over the channel, off here (ssh has none: its master forwards)
			if env := e.wantError("POST", ports, map[string]any{"port": port}, 500, codeComputerFailed); !strings.Contains(env["message"].(string), "exec channel") {
				t.Fatalf("a port without the exec channel: %v", env)
			}
			return
		}
		e.sh(id, fmt.Sprintf("mkdir -p www && echo served-%s > www/index.html && cd www && nohup python3 -m http.server %d --bind 0.0.0.0 >/dev/null 2>&1 &", c.prov, port))
		var b, b2 PortBinding
		if e.call("POST", ports, map[string]any{"port": port}, 200, &b); b.HostPort == 0 || b.URL == "" {
			t.Fatalf("binding: %+v", b)
		}
		var body string
		eventually(t, "the port to answer through its binding", func() bool {
			resp, err := http.Get(b.URL + "/index.html")
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			x, _ := io.ReadAll(resp.Body)
			body = string(x)
			return resp.StatusCode == 200
		})
		if strings.TrimSpace(body) != "served-"+c.prov {
			t.Fatalf("served: %q", body)
		}
		if e.call("POST", ports, map[string]any{"port": port}, 200, &b2); b2.HostPort != b.HostPort || !b2.Reachable {
			t.Fatalf("not idempotent: %+v vs %+v", b, b2)
		}
		var got ComputerInfo
		if e.call("GET", "/v1/computers/"+id, nil, 200, &got); got.Ports[fmt.Sprint(port)].HostPort != b.HostPort || !got.Ports[fmt.Sprint(port)].Reachable {
			t.Fatalf("ports in info: %+v", got.Ports)
		}
		e.sh(id, killScript("http.server", fmt.Sprint(port)))
		// reachable is checked when the info is read (cached for a second), not frozen at expose time.
		eventually(t, "the stopped server to show as unreachable", func() bool {
			var now ComputerInfo
			e.call("GET", "/v1/computers/"+id, nil, 200, &now)
			return !now.Ports[fmt.Sprint(port)].Reachable
		})
	})
	c.sub(t, "ports/bad-input", func(t *testing.T, e *testServer) {
		for _, bad := range []any{0, 65536, -1, "80", 1.5} {
			e.wantError("POST", ports, map[string]any{"port": bad}, 422, codeSpecInvalid)
		}
		e.wantError("POST", ports, map[string]any{}, 422, codeSpecInvalid)
	})
}

func (c *conformance) terminal(t *testing.T) {
	id, path := c.id, "/v1/computers/"+c.id+"/terminal"
	c.sub(t, "terminal/upgrade", func(t *testing.T, e *testServer) {
		// The 101 is written on the hijacked connection; it too carries the version header.
		if r := e.do("GET", path, nil, upgradeHeaders()...); r.status != http.StatusSwitchingProtocols || r.header.Get(versionHeader) != version {
			t.Fatalf("terminal upgrade: %d, %s=%q", r.status, versionHeader, r.header.Get(versionHeader))
		}
		e.wantError("GET", path, nil, 422, codeSpecInvalid) // a plain GET
	})
	c.sub(t, "terminal/commands", func(t *testing.T, e *testServer) {
		// One command per message, one after another on the socket.
		conn := e.dial(path, "")
		if f := frame(t, conn); f["type"] != "ready" || f["computerId"] != id || f["workdir"] != "/work" {
			t.Fatalf("ready: %v", f)
		}
		websocket.Message.Send(conn, `{"type":"resize","cols":80,"rows":24}`)
		websocket.Message.Send(conn, "echo from-terminal; exit 5")
		var out string
		for {
			f := frame(t, conn)
			if f["type"] == "stdout" {
				out += f["data"].(string)
			}
			if f["type"] == "exit" {
				if f["exitCode"].(float64) != 5 {
					t.Fatalf("exit: %v", f)
				}
				break
			}
		}
		if out != "from-terminal\n" {
			t.Fatalf("terminal stdout %q", out)
		}
		websocket.Message.Send(conn, `{"type":"exec","cmd":"sudo reboot"}`)
		if f := frame(t, conn); f["type"] != "error" {
			t.Fatalf("denied in terminal: %v", f)
		}
		websocket.Message.Send(conn, `{"type":"exec","cmd":["echo","argv"]}`)
		if f := frame(t, conn); f["type"] != "stdout" || f["data"] != "argv\n" {
			t.Fatalf("argv frame: %v", f)
		}
	})
	// Issue 26 item 7: a command on a pseudo-terminal (the addition to the socket): sized, fed with
	// keystrokes, its exit code; still under the command policy; refused where the provider has no tty.
	c.sub(t, "terminal/tty", func(t *testing.T, e *testServer) {
		conn := e.dial(path, "")
		frame(t, conn) // ready
		sendFrame(t, conn, map[string]any{"type": "exec", "cmd": "sudo reboot", "tty": true, "cols": 90, "rows": 20})
		if f := frame(t, conn); f["type"] != "error" || apiCodeOf(f) != codeExecDenied {
			t.Fatalf("a denied command on a tty: %v", f)
		}
		script := `stty size; read x; echo got-$x; [ -t 0 ] && echo on-a-tty; exit 4`
		sendFrame(t, conn, map[string]any{"type": "exec", "cmd": []string{"sh", "-c", script}, "tty": true, "cols": 90, "rows": 20})
		f := frame(t, conn)
		if c.local || c.prov == "sandbox" {
			if f["type"] != "error" || apiCodeOf(f) != codeNotImplemented {
				t.Fatalf("a tty on %s: %v", c.prov, f)
			}
			return
		}
		if f["type"] != "started" {
			t.Fatalf("tty exec: %v", f)
		}
		var out string
		for sent := false; ; {
			f := frame(t, conn)
			if f["type"] == "stdout" {
				out += f["data"].(string)
			}
			if !sent && strings.Contains(out, "20 90\r\n") {
				sendFrame(t, conn, map[string]any{"type": "stdin", "data": "hi\r"})
				sent = true
			}
			if f["type"] == "exit" {
				if f["exitCode"].(float64) != 4 || !strings.Contains(out, "got-hi\r\non-a-tty\r\n") {
					t.Fatalf("tty session: %v after %q", f, out)
				}
				break
			}
			if f["type"] == "error" {
				t.Fatalf("tty session: %v after %q", f, out)
			}
		}
	})
}

// apiCodeOf is an error frame's code.
func apiCodeOf(f map[string]any) string {
	e, _ := f["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

func (c *conformance) badInput(t *testing.T) {
	id := c.id
	c.sub(t, "exec/bad-input", func(t *testing.T, e *testServer) {
		for _, body := range []any{
			map[string]any{"cmd": "true", "bogus": 1},
			map[string]any{"cmd": 5},
			map[string]any{"cmd": ""},
			map[string]any{"cmd": "  "},
			map[string]any{"cmd": []string{}},
			map[string]any{"cmd": []any{1}},
			map[string]any{},
			map[string]any{"cmd": "true", "timeoutSec": 0},
			map[string]any{"cmd": "true", "timeoutSec": -1},
			map[string]any{"cmd": "true", "timeoutSec": "5"},
			map[string]any{"cmd": "true", "maxOutputBytes": -1},
			map[string]any{"cmd": "true", "env": map[string]any{"A": 1}},
			map[string]any{"cmd": "true", "tty": "yes"},
			"not json",
		} {
			e.wantError("POST", "/v1/computers/"+id+"/exec", body, 422, codeSpecInvalid)
		}
		// Above its cap a timeout or an output limit is capped (API.md), and the result says so.
		var res ExecResult
		e.call("POST", "/v1/computers/"+id+"/exec", map[string]any{"cmd": "echo capped", "timeoutSec": 5000, "maxOutputBytes": 32 << 20}, 200, &res)
		if res.Stdout != "capped\n" || len(res.Warnings) != 2 || !strings.Contains(res.Warnings[0], "3600") || !strings.Contains(res.Warnings[1], "16 MiB") {
			t.Fatalf("capped exec: %+v", res)
		}
	})
	c.sub(t, "lifecycle/bad-input", func(t *testing.T, e *testServer) {
		for _, body := range []map[string]any{
			{"bogus": true},
			{"cpus": 0},
			{"cpus": 65},
			{"memoryMb": 131073},
			{"memoryMb": 1.5},
			{"flavor": "huge"},
			{"idleTimeoutSec": -1},
			{"network": map[string]any{"mode": "all"}},
			{"network": map[string]any{"mode": "none", "extra": 1}},
			{"mounts": []any{map[string]any{"target": "/x"}}},
			{"name": "bad name!"},
			{"image": "--privileged"},
			{"workdir": "relative"},
		} {
			body["provider"] = c.prov
			e.wantError("POST", "/v1/computers", body, 422, codeSpecInvalid)
		}
		e.wantError("POST", "/v1/computers", map[string]any{"provider": "nope"}, 503, codeProviderUnavailable)
	})
	c.sub(t, "files/bad-input", func(t *testing.T, e *testServer) {
		e.wantError("GET", "/v1/computers/"+id+"/fs?path=", nil, 422, codeSpecInvalid)
		e.wantError("DELETE", "/v1/computers/"+id+"/fs?path=/work/x&recursive=maybe", nil, 422, codeSpecInvalid)
	})
}

func (c *conformance) quota(t *testing.T) {
	t.Run("quota/max-computers", func(t *testing.T) {
		t.Parallel()
		q := c.server(t, func(c *testSetup) { c.MaxComputers = 2 })
		a := q.create(c.spec(map[string]any{"provider": c.prov}))
		b := q.create(c.spec(map[string]any{"provider": c.prov}))
		env := q.wantError("POST", "/v1/computers", c.spec(map[string]any{"provider": c.prov}), 429, codeQuota)
		if d, _ := env["details"].(map[string]any); d["limit"].(float64) != 2 {
			t.Fatalf("quota details: %v", env)
		}
		q.call("POST", "/v1/computers/"+b.ID+"/stop", nil, 200, nil) // stopped machines do not count
		third := q.create(c.spec(map[string]any{"provider": c.prov}))
		q.wantError("POST", "/v1/computers/"+b.ID+"/start", nil, 429, codeQuota)
		for _, m := range []ComputerInfo{a, b, third} {
			q.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
		}
	})
}

func (c *conformance) reaper(t *testing.T) {
	t.Run("reaper/idle-and-lifetime", func(t *testing.T) {
		t.Parallel()
		r := c.server(t)
		idle := r.create(c.spec(map[string]any{"provider": c.prov, "idleTimeoutSec": 5}))
		life := r.create(c.spec(map[string]any{"provider": c.prov, "idleTimeoutSec": 0, "maxLifetimeSec": 30}))
		keep := r.create(c.spec(map[string]any{"provider": c.prov, "idleTimeoutSec": 0}))
		sub, _ := r.s.hub.subscribe()
		defer r.s.hub.unsubscribe(sub)
		// The clock counts from life's creation, not from now: keep's create may take long on a loaded
		// host, and life would be past its lifetime at the first sweep.
		base, err := time.Parse(time.RFC3339Nano, life.CreatedAt)
		if err != nil {
			t.Fatal(err)
		}
		cs := r.s.computers
		cs.setNow(func() time.Time { return base.Add(10 * time.Second) })
		if got := cs.sweep(context.Background()); got[idle.ID] != "idle" || len(got) != 1 {
			t.Fatalf("first sweep: %v", got)
		}
		cs.setNow(func() time.Time { return base.Add(31 * time.Second) })
		if got := cs.sweep(context.Background()); got[life.ID] != "lifetime" || len(got) != 1 {
			t.Fatalf("second sweep: %v", got)
		}
		r.wantError("GET", "/v1/computers/"+idle.ID, nil, 404, codeComputerNotFound)
		r.wantError("GET", "/v1/computers/"+life.ID, nil, 404, codeComputerNotFound)
		reasons := map[string]string{}
		for len(reasons) < 2 {
			select {
			case ev := <-sub.ch:
				if ev.Topic == "reaper" {
					p := ev.Payload.(map[string]any)
					reasons[p["computerId"].(string)] = p["reason"].(string)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("reaper events: %v", reasons)
			}
		}
		if reasons[idle.ID] != "idle" || reasons[life.ID] != "lifetime" {
			t.Fatalf("reaper events: %v", reasons)
		}
		r.call("DELETE", "/v1/computers/"+keep.ID, nil, 204, nil)
	})
	t.Run("reaper/exec-is-activity", func(t *testing.T) {
		t.Parallel()
		r := c.server(t)
		base, cs := time.Now(), r.s.computers
		busy := r.create(c.spec(map[string]any{"provider": c.prov, "idleTimeoutSec": 5}))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			cs.Exec(ctx, busy.ID, ExecRequest{Cmd: execCommand{Shell: "sleep 600"}}, nil)
		}()
		eventually(t, "the exec to start", func() bool {
			cs.mu.Lock()
			defer cs.mu.Unlock()
			return cs.rt[busy.ID] != nil && cs.rt[busy.ID].active == 1
		})
		cs.setNow(func() time.Time { return base.Add(time.Hour) })
		if got := cs.sweep(context.Background()); got[busy.ID] != "" {
			t.Fatalf("a machine with a running exec was reaped: %v", got)
		}
		cancel()
		<-done
		cs.setNow(func() time.Time { return base.Add(time.Hour + 6*time.Second) }) // idle since the exec ended
		if got := cs.sweep(context.Background()); got[busy.ID] != "idle" {
			t.Fatalf("idle after the exec: %v", got)
		}
	})
}

func (c *conformance) restart(t *testing.T) {
	if !c.local {
		c.parallel(t, "lifecycle/vanished", func(t *testing.T, e *testServer) {
			// A machine removed behind agentd's back while it runs.
			vanish := e.create(c.spec(map[string]any{"provider": c.prov}))
			e.s.computers.providerByName(c.prov).destroy(context.Background(), &vanish)
			if c.prov == "kubernetes" { // a pod deleted behind agentd's back: the watch stops the computer (TestKubernetesFaults)
				var got ComputerInfo
				eventually(t, "the computer stopped by the pod watch", func() bool {
					e.call("GET", "/v1/computers/"+vanish.ID, nil, 200, &got)
					return got.State == "stopped"
				})
				e.call("DELETE", "/v1/computers/"+vanish.ID, nil, 204, nil)
				return
			}
			e.wantError("POST", "/v1/computers/"+vanish.ID+"/exec", map[string]any{"cmd": "true"}, 404, codeComputerNotFound)
			e.wantError("GET", "/v1/computers/"+vanish.ID, nil, 404, codeComputerNotFound)
		})
	}
	t.Run("restart/adopt-and-reconcile", func(t *testing.T) {
		t.Parallel()
		home := t.TempDir()
		a := c.server(t, withHome(home))
		a.keep = true
		spec := c.spec(map[string]any{"provider": c.prov, "idleTimeoutSec": 0})
		if c.prov == "sandbox" { // a sandbox's /work outlives its bwrap (which dies with the server) only with persist
			spec["persist"] = true
		}
		live := a.create(spec)
		gone := a.create(c.spec(map[string]any{"provider": c.prov, "idleTimeoutSec": 0}))
		a.sh(live.ID, "echo kept > note")
		// A process left running by an exec of a server that dies: its group is recorded as the exec
		// wrapper records it (engines), or it carries the machine's id (local).
		// The sleep's length is unique to this run: on local the count reads the host's /proc, which
		// also shows the processes of the engine providers' machines running the same test in parallel.
		secs := fmt.Sprint(40000 + rand.IntN(50000))
		leftovers := `for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c 'sleep ` + secs[:4] + `[` + secs[4:] + `]' || true`
		a.sh(live.ID, "setsid sleep "+secs+" >/dev/null 2>&1 </dev/null & echo $! > /tmp/.agentd-exec-leftover.pid")
		a.close()
		var survived bool // read behind the stopped server's back
		if ep, ok := a.s.computers.providerByName(c.prov).(*engineProvider); ok {
			out, _ := exec.Command(c.prov, "exec", ep.container(&live), "/bin/sh", "-c", leftovers).Output()
			survived = strings.TrimSpace(string(out)) != "0"
		} else {
			out, _ := exec.Command("/bin/sh", "-c", leftovers).Output()
			survived = strings.TrimSpace(string(out)) != "0"
		}
		// The machine of `gone` disappears while agentd is down.
		p := a.s.computers.providerByName(c.prov)
		p.destroy(context.Background(), &gone)
		// An unrecorded container of this owner appears (an orphan).
		var orphan ComputerInfo
		if !c.local {
			orphan = ComputerInfo{ID: "cmp_orphan" + strings.ToLower(randomChars(4)), Image: testImage, Provider: c.prov, Workdir: "/work"}
			applyComputerDefaults(&orphan.Spec)
			create := p.create
			if sp, ok := p.(*sandboxProvider); ok { // its service is closed: no bwrap to start, the directory is the machine
				create = func(_ context.Context, m *ComputerInfo) error { return sp.prepare(m) }
			}
			if err := create(context.Background(), &orphan); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.destroy(context.Background(), &orphan) })
		}
		b := c.server(t, withHome(home))
		var got ComputerInfo
		if b.call("GET", "/v1/computers/"+live.ID, nil, 200, &got); got.State != "running" {
			t.Fatalf("adopted: %+v", got)
		}
		if out := b.sh(live.ID, "cat note"); out != "kept\n" {
			t.Fatalf("after restart: %q", out)
		}
		if n := strings.TrimSpace(b.sh(live.ID, leftovers)); n != "0" {
			t.Fatalf("%s leftover process(es) of the previous server still run", n)
		}
		if survived {
			b.s.hub.mu.Lock()
			var killed any
			for _, ev := range b.s.hub.ring {
				if ev.Type == "computer_reconciled" && ev.Payload.(map[string]any)["computerId"] == live.ID {
					killed = ev.Payload.(map[string]any)["killed"]
				}
			}
			b.s.hub.mu.Unlock()
			if killed == nil || killed.(int) < 1 {
				t.Fatalf("computer_reconciled for %s: killed=%v", live.ID, killed)
			}
		}
		if c.prov == "kubernetes" { // a pod deleted behind agentd's back, while it ran or not: stopped
			if b.call("GET", "/v1/computers/"+gone.ID, nil, 200, &got); got.State != "stopped" {
				t.Fatalf("a machine whose pod went while agentd was down: %+v", got)
			}
			b.call("DELETE", "/v1/computers/"+gone.ID, nil, 204, nil)
		} else {
			b.wantError("GET", "/v1/computers/"+gone.ID, nil, 404, codeComputerNotFound)
		}
		if !c.local {
			eventually(t, "the orphan in the doctor's warnings", func() bool {
				_, _, _, warnings := b.s.computers.doctor(context.Background())
				return slices.ContainsFunc(warnings, func(w string) bool { return strings.Contains(w, orphan.ID) })
			})
			if got := b.s.computers.sweep(context.Background()); got[orphan.ID] != "orphan" {
				t.Fatalf("orphan not reaped: %v", got)
			}
			if st, _ := p.status(context.Background(), &orphan); st != "missing" {
				t.Fatalf("orphan still there: %s", st)
			}
		}
		b.call("DELETE", "/v1/computers/"+live.ID, nil, 204, nil)
	})
}

// killScript kills the processes whose command line contains "<word> <arg>", without matching itself.
func killScript(word, arg string) string {
	return `W='` + word + `'; A='` + arg + `'; for f in /proc/[0-9]*; do if tr '\0' ' ' < $f/cmdline 2>/dev/null | grep -qF "$W $A"; then kill ${f#/proc/} 2>/dev/null; fi; done; true`
}

// TestComputerProviderSelection: a named unavailable provider is 503 with reason and hint, never a
// substitute; the doctor reports every provider.
func TestComputerProviderSelection(t *testing.T) {
	e := newTestServer(t, withHostEnv)
	c := e.s.computers
	waitStartProbes(t, c)
	c.mu.Lock()
	c.probes["docker"] = probeResult{reason: "the docker daemon is not reachable", hint: "start dockerd", at: time.Now()}
	c.probes["podman"] = probeResult{reason: "the podman CLI is not installed", hint: "install podman", at: time.Now()}
	c.probes["sandbox"] = probeResult{reason: "bubblewrap (bwrap) is not installed", hint: "apt-get install bubblewrap", at: time.Now()}
	c.probes["kubernetes"] = probeResult{reason: "the kubectl CLI is not installed", hint: "install kubectl", at: time.Now()} // listed only when configured (AGENT_TEST_K8S=1)
	c.mu.Unlock()
	env := e.wantError("POST", "/v1/computers", map[string]any{"provider": "docker"}, 503, codeProviderUnavailable)
	if !strings.Contains(env["message"].(string), "not reachable") || env["hint"] != "start dockerd" {
		t.Fatalf("unavailable: %v", env)
	}
	var providers []doctorProvider
	var sel doctorSelection
	var warnings []string
	eventually(t, "the trials to end (computers_proof.go)", func() bool {
		providers, sel, _, warnings = c.doctor(context.Background())
		return sel.Provider != ""
	})
	if len(providers) != len(c.providers) || providers[len(providers)-2].Name != "sandbox" || providers[0].Name != "docker" || providers[0].Available || providers[0].Reason == "" || providers[0].Hint == "" {
		t.Fatalf("providers: %+v", providers)
	}
	if sel.Provider != "local" || sel.Isolated || sel.ProviderReason == "" {
		t.Fatalf("selection: %+v", sel)
	}
	if len(warnings) == 0 || !strings.Contains(warnings[0], "non-isolated") {
		t.Fatalf("warnings: %v", warnings)
	}
	m := e.create(map[string]any{}) // auto → local
	if m.Provider != "local" || m.IsolationKind != "guardrails" {
		t.Fatalf("auto: %+v", m)
	}
	e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
}

// fakeTrials sets providers' trial results (computers_proof.go) as if their trials had ended so, once the
// trials already asked for have ended (they would overwrite the fake).
func fakeTrials(t *testing.T, c *computerService, ok map[string]bool) {
	t.Helper()
	eventually(t, "the pending trials to end", func() bool {
		c.proof.mu.Lock()
		defer c.proof.mu.Unlock()
		return len(c.proof.pending) == 0
	})
	c.proof.mu.Lock()
	defer c.proof.mu.Unlock()
	for name, v := range ok {
		r := proofResult{ok: v, at: c.now()}
		if !v {
			r.reason, r.hint = "set by the test", "none"
		}
		c.proof.results[name] = r
	}
}

// waitStartProbes waits for the probes the start's background reconcile runs, so that none of them
// overwrites a probe result a test sets.
func waitStartProbes(t *testing.T, c *computerService) {
	t.Helper()
	eventually(t, "the start's background probes", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, done := c.probes["local"] // the last provider the background reconcile probes
		return done
	})
}

// TestEnsureForAgent: one computer per agent, shared by concurrent callers, restarted when stopped.
func TestEnsureForAgent(t *testing.T) {
	e := newTestServer(t, withHostEnv, func(c *testSetup) { c.ComputerProvider = "local" })
	c := e.s.computers
	var wg sync.WaitGroup
	ids := make([]string, 5)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := c.EnsureForAgent(context.Background(), "helper-agent", ComputerSpec{Flavor: "base", IdleTimeoutSec: 900}, commandPolicy{})
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = m.ID
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("not shared: %v", ids)
		}
	}
	if n := len(c.agents.entries); n != 0 {
		t.Fatalf("the per-agent lock kept %d entries after its callers left", n)
	}
	if _, err := c.stop(context.Background(), ids[0]); err != nil {
		t.Fatal(err)
	}
	m, err := c.EnsureForAgent(context.Background(), "helper-agent", ComputerSpec{}, commandPolicy{})
	if err != nil || m.ID != ids[0] || m.State != "running" {
		t.Fatalf("restart: %+v %v", m, err)
	}
	got, err := c.Get(context.Background(), "helper-agent")
	if err != nil || got.ID != m.ID {
		t.Fatalf("get by name: %v", err)
	}
	if err := c.WriteFile(context.Background(), m.ID, "notes/a.txt", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if b, err := c.ReadFile(context.Background(), m.ID, "/work/notes/a.txt"); err != nil || string(b) != "hi" {
		t.Fatalf("read: %q %v", b, err)
	}
	if ents, err := c.ListDir(context.Background(), m.ID, "/work"); err != nil || len(ents) != 1 || ents[0].Type != "dir" {
		t.Fatalf("list: %+v %v", ents, err)
	}
	var chunks []string
	res, err := c.Exec(context.Background(), m.ID, ExecRequest{Cmd: execCommand{Shell: "echo a; echo b >&2"}}, func(s, d string) { chunks = append(chunks, s+":"+d) })
	if err != nil || res.ExitCode != 0 || len(chunks) == 0 {
		t.Fatalf("exec: %+v %v %v", res, err, chunks)
	}
	_, err = c.Exec(context.Background(), m.ID, ExecRequest{Cmd: execCommand{Shell: "curl x"}, Policy: commandPolicy{Deny: []string{"curl"}}}, nil)
	if ae := asAPIError(err); ae.Code != codeExecDenied {
		t.Fatalf("agent deny: %v", err)
	}
	if err := c.DeletePath(context.Background(), m.ID, "/work/notes", true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ExposePort(context.Background(), m.ID, 0); asAPIError(err).Code != codeSpecInvalid {
		t.Fatalf("port 0: %v", err)
	}
	if err := c.destroy(context.Background(), m.ID, ""); err != nil {
		t.Fatal(err)
	}
}

// TestComputerLocalKillOnDestroy: destroying a local machine kills its background processes.
func TestComputerLocalKillOnDestroy(t *testing.T) {
	e := newTestServer(t, withHostEnv)
	m := e.create(map[string]any{"provider": "local"})
	e.exec(m.ID, map[string]any{"cmd": "sleep 41999 &"})
	hasSleep := func() bool {
		out, _ := exec.Command("sh", "-c", "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '").Output()
		return strings.Contains(string(out), "sleep 41999")
	}
	if !hasSleep() {
		t.Fatal("background process not running")
	}
	e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
	eventually(t, "the local machine's processes to die", func() bool { return !hasSleep() })
}

func TestHeadTailUTF8(t *testing.T) {
	for _, max := range []int{1, 2, 3, 5, 8, 13, 64} {
		h := newHeadTail(max)
		s := strings.Repeat("aé€😀", 50)
		for i := 0; i < len(s); i += 7 {
			h.write([]byte(s[i:min(i+7, len(s))]))
		}
		out, tr := h.String()
		if !tr || !utf8.ValidString(out) {
			t.Fatalf("max %d: %q %v", max, out, tr)
		}
	}
	h := newHeadTail(100)
	h.write([]byte("short"))
	if out, tr := h.String(); out != "short" || tr {
		t.Fatalf("%q %v", out, tr)
	}
}

func TestOutputSinkMarker(t *testing.T) {
	m := &endMarkers{need: 1, done: make(chan struct{})}
	var got strings.Builder
	s := newOutputSink("stdout", 1<<20, func(_, d string) { got.WriteString(d) }, true, "tok", m)
	full := "hello \x1e world" + markerPrefix("tok") + "007\x1e" + "after"
	for i := 0; i < len(full); i++ { // byte by byte: the marker spans writes
		s.Write([]byte{full[i]})
	}
	s.flush()
	if !m.complete() || m.code != 7 || got.String() != "hello \x1e world" {
		t.Fatalf("marker: %v %d %q", m.complete(), m.code, got.String())
	}
}

// The per-agent lock excludes per key, lets different keys run together, and forgets a key once no one
// holds or waits for it.
func TestKeyedMutexExcludesAndPrunes(t *testing.T) {
	var k keyedMutex
	keys := []string{"a", "b", "c", "d"}
	inside := make([]atomic.Int32, len(keys))
	var overlap atomic.Int32 // times two keys were held at once: different keys must not exclude each other
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				ki := (g + i) % len(keys)
				unlock := k.lock(keys[ki])
				if n := inside[ki].Add(1); n != 1 {
					t.Errorf("key %s held by %d callers at once", keys[ki], n)
				}
				for j := range inside {
					if j != ki && inside[j].Load() > 0 {
						overlap.Add(1)
					}
				}
				runtime.Gosched()
				inside[ki].Add(-1)
				unlock()
			}
		}()
	}
	wg.Wait()
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.entries) != 0 {
		t.Fatalf("%d entries left after every caller unlocked: the map grows with every key ever seen", len(k.entries))
	}
	if overlap.Load() == 0 {
		t.Fatal("different keys never held together: the lock is global, not per key")
	}
}

func FuzzCheckArchive(f *testing.F) {
	f.Add([]byte("not gzip"))
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	tw := tar.NewWriter(zw)
	tw.WriteHeader(&tar.Header{Name: "a/../../x", Typeflag: tar.TypeReg, Mode: 0o644})
	tw.Close()
	zw.Close()
	f.Add(b.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		ca, err := checkArchive(data, 1<<20)
		if err != nil {
			return
		}
		for _, n := range ca.names {
			if strings.HasPrefix(n, "/") || n == ".." || strings.HasPrefix(n, "../") {
				t.Fatalf("escaping entry accepted: %q", n)
			}
		}
	})
}

// TestExecRefusesUnusableCwdAndUser: a NUL or newline in cwd or user, or a user read as an engine flag,
// is the caller's mistake (422), not a failure of the mechanism (500).
func TestExecRefusesUnusableCwdAndUser(t *testing.T) {
	e := newTestServer(t, withHostEnv)
	m := e.create(map[string]any{"provider": "local"})
	for _, b := range []map[string]any{
		{"cmd": "true", "cwd": "/work/a\x00b"},
		{"cmd": "true", "cwd": "/work/a\nb"},
		{"cmd": "true", "user": "-x"},
		{"cmd": "true", "user": "1000\x00"},
		{"cmd": "true", "user": "root\n"},
	} {
		e.wantError("POST", "/v1/computers/"+m.ID+"/exec", b, 422, codeSpecInvalid)
	}
}

// TestExposePortAfterConcurrentStop: an expose that waited for a stop to finish must see the stopped
// machine, not save its stale running record back (which resurrected the computer as running).
func TestExposePortAfterConcurrentStop(t *testing.T) {
	e := newTestServer(t, withHostEnv)
	m := e.create(map[string]any{"provider": "local"})
	c := e.s.computers
	rt := c.runtime(m.ID)
	rt.mu.Lock()
	done := make(chan error, 1)
	go func() { _, err := c.ExposePort(context.Background(), m.ID, 4555); done <- err }()
	eventually(t, "ExposePort to wait for the machine's lifecycle lock", func() bool {
		buf := make([]byte, 1<<20)
		st := string(buf[:runtime.Stack(buf, true)])
		for _, g := range strings.Split(st, "\n\n") {
			if strings.Contains(g, ".ExposePort(") && strings.Contains(g, "sync.(*Mutex).Lock") {
				return true
			}
		}
		return false
	})
	// What a stop holding the lock does to the record.
	cur, err := c.Get(context.Background(), m.ID)
	if err != nil {
		t.Fatal(err)
	}
	cur.State = stateStopped
	if err := c.save(context.Background(), cur); err != nil {
		t.Fatal(err)
	}
	rt.mu.Unlock()
	if err := <-done; err == nil {
		t.Fatal("ExposePort on a machine stopped while it waited succeeded")
	}
	if got, _ := c.Get(context.Background(), m.ID); got.State != stateStopped {
		t.Fatalf("state after the expose: %s, want stopped", got.State)
	}
}

// gatedLocal is the local provider with a start that waits for the test.
type gatedLocal struct {
	*localProvider
	entered chan string
	release chan struct{}
}

func (g *gatedLocal) start(ctx context.Context, m *ComputerInfo) error {
	g.entered <- m.ID
	<-g.release
	return g.localProvider.start(ctx, m)
}

// TestComputerStartQuotaIsAtomic: two starts racing for the last live slot cannot both pass the
// maxComputers count (the first was still stopped in the record when the second counted).
func TestComputerStartQuotaIsAtomic(t *testing.T) {
	e := newTestServer(t, withHostEnv, func(c *testSetup) { c.MaxComputers = 1 })
	c := e.s.computers
	a := e.create(map[string]any{"provider": "local"})
	e.call("POST", "/v1/computers/"+a.ID+"/stop", nil, 200, nil)
	b := e.create(map[string]any{"provider": "local"})
	e.call("POST", "/v1/computers/"+b.ID+"/stop", nil, 200, nil)
	quiesce(c)
	var g *gatedLocal
	for i, p := range c.providers {
		if lp, ok := p.(*localProvider); ok {
			g = &gatedLocal{localProvider: lp, entered: make(chan string, 2), release: make(chan struct{})}
			c.providers[i] = g
		}
	}
	errs := make(chan error, 2)
	go func() { _, err := c.start(context.Background(), a.ID); errs <- err }()
	select { // a is starting and counted as stopped until it is saved running
	case <-g.entered:
	case err := <-errs:
		t.Fatalf("start a: %v", err)
	}
	go func() { _, err := c.start(context.Background(), b.ID); errs <- err }()
	eventually(t, "the second start to count or wait for the count", func() bool {
		if len(g.entered) > 0 {
			return true
		}
		buf := make([]byte, 1<<20)
		for _, gr := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(gr, "(*computerService).start(") && strings.Contains(gr, "sync.(*Mutex).Lock") {
				return true
			}
		}
		return false
	})
	close(g.release)
	ok := 0
	for range 2 {
		if err := <-errs; err == nil {
			ok++
		} else if asAPIError(err).Code != codeQuota {
			t.Fatalf("start: %v", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d starts succeeded with maxComputers 1", ok)
	}
}

// TestComputerLocalWorkdirDotDot: a workdir climbing out of /work with `..` is not mapped onto the host
// (it created directories anywhere the server could write).
func TestComputerLocalWorkdirDotDot(t *testing.T) {
	e := newTestServer(t, withHostEnv)
	outside := filepath.Join(t.TempDir(), "escaped")
	wd := "/work/" + strings.Repeat("../", 30) + strings.TrimPrefix(outside, "/")
	r := e.do("POST", "/v1/computers", map[string]any{"provider": "local", "workdir": wd})
	if _, err := os.Stat(outside); err == nil {
		t.Fatalf("workdir %s created %s on the host (answer %d %s)", wd, outside, r.status, r.body)
	}
	// It is judged where it lands: here inside the guest /tmp, mapped under the machine's directory.
	if r.status != 201 || strings.Contains(string(r.body), "..") {
		t.Fatalf("create with workdir %s: %d %s, want the cleaned workdir", wd, r.status, r.body)
	}
}

// racingLocal creates a machine between reconcile's read of the records and its listing of machines,
// as a create right after startup does while the background reconcile probes a slow engine.
type racingLocal struct {
	*localProvider
	once    sync.Once
	created *ComputerInfo
}

func (r *racingLocal) owned(ctx context.Context) (map[string]bool, error) {
	r.once.Do(func() {
		m, err := r.c.create(ctx, ComputerSpec{Provider: "local"}, commandPolicy{})
		if err != nil {
			panic(err)
		}
		r.created = m
	})
	return r.localProvider.owned(ctx)
}

// TestReconcileDoesNotOrphanFreshMachines: a machine created while reconcile runs is not taken for an
// orphan and reaped by the next sweep.
func TestReconcileDoesNotOrphanFreshMachines(t *testing.T) {
	e := newTestServer(t, withHostEnv)
	c := e.s.computers
	quiesce(c)
	var r *racingLocal
	for _, p := range c.providers {
		if lp, ok := p.(*localProvider); ok {
			r = &racingLocal{localProvider: lp}
		}
	}
	c.providers = []provider{r}
	c.reconcile(context.Background(), map[string]bool{})
	if r.created == nil {
		t.Fatal("the racing create did not run")
	}
	if got := c.sweep(context.Background()); len(got) != 0 {
		t.Fatalf("sweep reaped %v; the machine %s was created while reconcile ran", got, r.created.ID)
	}
	if m, err := c.Get(context.Background(), r.created.ID); err != nil || m.State != stateRunning {
		t.Fatalf("machine after the sweep: %+v %v", m, err)
	}
}

// TestCheckEngineArgsMountTargets: a mount over a directory agentd itself mounts (the engine refuses a
// duplicate mount point, a 500 from the engine) or over the root is the caller's mistake: 422.
func TestCheckEngineArgsMountTargets(t *testing.T) {
	for _, target := range []string{"/", "/work", "/tmp/", "/run", "/work/../tmp", "//work"} {
		sp := ComputerSpec{Workdir: "/work", Mounts: []Mount{{Source: "/srv/data", Target: target}}}
		err := checkEngineArgs(sp, "")
		if err == nil || asAPIError(err).Code != codeSpecInvalid {
			t.Errorf("target %q: %v, want E_SPEC_INVALID", target, err)
		}
	}
	for _, target := range []string{"/data", "/work/data", "/opt/x"} {
		sp := ComputerSpec{Workdir: "/work", Mounts: []Mount{{Source: "/srv/data", Target: target}}}
		if err := checkEngineArgs(sp, ""); err != nil {
			t.Errorf("target %q: %v, want accepted", target, err)
		}
	}
}

// TestReaperSparesMachineUsedWhileWaiting: an exec that starts while the reaper waits for the machine's
// lifecycle lock keeps an idle machine alive.
func TestReaperSparesMachineUsedWhileWaiting(t *testing.T) {
	e := newTestServer(t, withHostEnv)
	c := e.s.computers
	m := e.create(map[string]any{"provider": "local", "idleTimeoutSec": 5})
	base := time.Now()
	c.setNow(func() time.Time { return base.Add(10 * time.Second) })
	rt := c.runtime(m.ID)
	rt.mu.Lock()
	got := make(chan map[string]string, 1)
	go func() { got <- c.sweep(context.Background()) }()
	eventually(t, "the sweep to wait for the machine's lifecycle lock", func() bool {
		buf := make([]byte, 1<<20)
		for _, gr := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(gr, "(*computerService).destroy(") && strings.Contains(gr, "sync.(*Mutex).Lock") {
				return true
			}
		}
		return false
	})
	c.beginUse(m.ID) // an exec starts
	rt.mu.Unlock()
	if r := <-got; len(r) != 0 {
		t.Fatalf("reaped %v while an exec was running", r)
	}
	c.endUse(m.ID)
	if cur, err := c.Get(context.Background(), m.ID); err != nil || cur.State != stateRunning {
		t.Fatalf("machine after the sweep: %+v %v", cur, err)
	}
}

// quiesce stops the service's own goroutines (background reconcile, reaper) so a test may swap its
// providers without racing them.
func quiesce(c *computerService) {
	c.cancel()
	c.wg.Wait()
}

// TestComputerBackgroundReconcileLeavesNewRecordsAlone: the background reconcile pass (providers that
// held no record at start) runs while the server answers, so every record it sees was made by this
// process. It must neither destroy a machine being created nor undo a stop made meanwhile.
func TestComputerBackgroundReconcileLeavesNewRecordsAlone(t *testing.T) {
	e := newTestServer(t, withHostEnv)
	c := e.s.computers
	quiesce(c)
	stopped := e.create(map[string]any{"provider": "local"})
	e.call("POST", "/v1/computers/"+stopped.ID+"/stop", nil, 200, nil)
	// A record inserted by a create whose machine does not exist yet.
	now := timestamp(time.Now())
	creating := ComputerInfo{ID: "cmp_beingcreated0001", Name: "new", Provider: "local", State: stateCreating,
		Workdir: "/work", CreatedAt: now, LastUsedAt: now, Ports: map[string]PortBinding{}}
	if err := e.s.store.InsertComputer(context.Background(), creating); err != nil {
		t.Fatal(err)
	}
	c.reconcile(context.Background(), map[string]bool{"docker": true, "podman": true})
	for id, want := range map[string]string{stopped.ID: stateStopped, creating.ID: stateCreating} {
		got, err := e.s.store.GetComputer(context.Background(), id)
		if err != nil || got.State != want {
			t.Errorf("%s after the background pass: %q %v, want %s", id, got.State, err, want)
		}
	}
}

// Issue 26 item 2: on a host with the engine but not the test image, outside CI, the engine tests skip
// with one line naming the script that builds the image (AGENT_TEST_DOCKER=1 makes it a failure).
func TestMissingTestImageSkips(t *testing.T) {
	if exec.Command("docker", "info").Run() != nil {
		t.Skip("no docker here")
	}
	t.Setenv("AGENT_TEST_DOCKER", "")
	var skipped bool
	var msg string
	t.Run("hidden", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		requireTestImage(t, "docker", "agentd-test:absent-"+randomChars(6))
		msg = "not skipped"
	})
	if !skipped || msg != "" {
		t.Fatalf("a missing test image did not skip the test (%s)", msg)
	}
}

// The terminal socket's client frames, tty additions included: any message is a command, input for a
// tty command, or an error frame; never a panic.
func FuzzTerminalFrames(f *testing.F) {
	for _, s := range []string{"ls -la", `{"type":"exec","cmd":["sh"],"tty":true,"cols":80,"rows":24}`, `{"type":"stdin","data":"q\r"}`,
		`{"type":"resize","cols":-1,"rows":70000}`, `{"type":"exec","cmd":5}`, `{"type":"exec"}`, `{"type":"exec","cmd":""}`, `{`, `{"type":"nope"}`, "  "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if kind, _, _ := terminalInput(raw); kind != "" {
			return
		}
		var errs int
		tc, ok := parseTerminalFrame(raw, func(v any) bool { errs++; return true })
		if ok && errs > 0 { // (an empty command is queued: the exec's own validation answers it)
			t.Fatalf("%q: a command and an error frame: %+v", raw, tc)
		}
		if !ok && errs == 0 && strings.HasPrefix(strings.TrimSpace(raw), "{") {
			t.Fatalf("%q: a frame neither run nor answered", raw)
		}
	})
}
