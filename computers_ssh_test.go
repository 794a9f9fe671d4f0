package main

// The ssh provider against a real OpenSSH server (Debian's openssh-server) that each test starts on a
// loopback port with a throwaway host key and user key: the conformance suite runs on it
// (TestComputerConformance/ssh), and here the failures of a real connection: the server restarted
// under a running exec, a host key that changed, an unknown host, and what the provider refuses.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// testSSHD is one sshd this test started, and the client config that reaches it.
type testSSHD struct {
	t    testing.TB
	dir  string
	port int
	conf sshConfig
	cmd  *exec.Cmd
	done chan struct{}
}

// startSSHD starts /usr/sbin/sshd -D on a free loopback port as root, with a new host key, a new user
// key authorised for root, and a known_hosts holding the host key. Without sshd (or root) the test is
// skipped in one line, unless AGENT_TEST_SSH=1 (.ci/run), which makes that a failure.
func startSSHD(t testing.TB) *testSSHD {
	t.Helper()
	skip := func(why string) {
		if os.Getenv("AGENT_TEST_SSH") == "1" {
			t.Fatalf("%s with AGENT_TEST_SSH=1", why)
		}
		t.Skip(why + " (apt-get install openssh-server; AGENT_TEST_SSH=1 makes this a failure)")
	}
	if _, err := os.Stat("/usr/sbin/sshd"); err != nil {
		skip("no OpenSSH server (/usr/sbin/sshd)")
	}
	if _, err := exec.LookPath("ssh"); err != nil {
		skip("no OpenSSH client (ssh)")
	}
	if os.Geteuid() != 0 {
		skip("the ssh tests start sshd as root")
	}
	dir, err := os.MkdirTemp("", "agentd-sshd-") // short: sshd and ssh put sockets and keys here
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	for _, k := range []string{"host", "user"} {
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "agentd-test", "-f", filepath.Join(dir, k)).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen: %v: %s", err, out)
		}
	}
	pub, _ := os.ReadFile(filepath.Join(dir, "user.pub"))
	os.WriteFile(filepath.Join(dir, "authorized_keys"), pub, 0o600)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cfg := fmt.Sprintf(`Port %d
ListenAddress 127.0.0.1
HostKey %s/host
PidFile none
AuthorizedKeysFile %s/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
MaxSessions 100
MaxStartups 100
AllowTcpForwarding yes
`, port, dir, dir)
	os.WriteFile(filepath.Join(dir, "sshd_config"), []byte(cfg), 0o600)
	os.MkdirAll("/run/sshd", 0o755) // sshd's privilege separation directory
	d := &testSSHD{t: t, dir: dir, port: port, conf: sshConfig{Target: "root@127.0.0.1:" + strconv.Itoa(port),
		Key: filepath.Join(dir, "user"), KnownHosts: filepath.Join(dir, "known_hosts")}}
	d.trustHostKey()
	d.start()
	t.Cleanup(d.kill)
	return d
}

// trustHostKey writes the current host key into known_hosts (what ssh-keyscan after a check would).
func (d *testSSHD) trustHostKey() {
	hk, err := os.ReadFile(filepath.Join(d.dir, "host.pub"))
	if err != nil {
		d.t.Fatal(err)
	}
	f := strings.Fields(string(hk))
	os.WriteFile(d.conf.KnownHosts, []byte(fmt.Sprintf("[127.0.0.1]:%d %s %s\n", d.port, f[0], f[1])), 0o600)
}

func (d *testSSHD) start() {
	d.t.Helper()
	cmd := exec.Command("/usr/sbin/sshd", "-D", "-e", "-f", filepath.Join(d.dir, "sshd_config"))
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	d.cmd, d.done = cmd, make(chan struct{})
	go func() { defer close(d.done); cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(d.port), time.Second); err == nil {
			c.Close()
			return
		}
		select {
		case <-d.done:
			d.t.Fatalf("sshd exited: %s", log.String())
		default:
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("sshd did not listen on %d: %s", d.port, log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill ends this sshd and its connections' sshd processes: the server going away, as in a restart or a
// crash, for everyone connected. The sessions' own processes are left to end on their own (a shell killed
// in its startup files can leave their locks behind, as a real restart would not).
func (d *testSSHD) kill() {
	if d.cmd == nil || d.cmd.Process == nil {
		return
	}
	tree := processTree(d.cmd.Process.Pid, "sshd")
	d.cmd.Process.Kill()
	for _, pid := range tree {
		if p, err := os.FindProcess(pid); err == nil {
			p.Kill()
		}
	}
	<-d.done
	d.cmd = nil
}

// restart is the server restarted: every connection dropped, then a new sshd on the same port.
func (d *testSSHD) restart() {
	d.kill()
	d.start()
}

// processTree is the processes under pid named comm, read from /proc.
func processTree(pid int, comm string) []int {
	kids := map[int][]int{}
	name := map[int]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(st)
		if i := strings.IndexByte(s, '('); i >= 0 && strings.LastIndexByte(s, ')') > i {
			name[p] = s[i+1 : strings.LastIndexByte(s, ')')]
		}
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 {
			pp, _ := strconv.Atoi(f[1])
			kids[pp] = append(kids[pp], p)
		}
	}
	var out []int
	for q := []int{pid}; len(q) > 0; q = q[1:] {
		for _, k := range kids[q[0]] {
			if name[k] == comm {
				out = append(out, k)
			}
			q = append(q, k)
		}
	}
	return out
}

// withSSH configures the server's ssh provider to reach d.
func withSSH(d *testSSHD) testOption {
	return func(c *testSetup) { conf := d.conf; c.SSH = &conf }
}

// withSSHMultiplex sets ssh.multiplex (after withSSH).
func withSSHMultiplex(on bool) testOption {
	return func(c *testSetup) { c.SSH.Multiplex = &on }
}

// sshModes runs f once with a ControlMaster per machine and once with a connection per call.
func sshModes(t *testing.T, f func(t *testing.T, mux testOption)) {
	for _, on := range []bool{true, false} {
		name := "mux"
		if !on {
			name = "nomux"
		}
		t.Run(name, func(t *testing.T) { f(t, withSSHMultiplex(on)) })
	}
}

// checkNoSSHLeaks closes the server (its trial machines end with it) and checks that none of its
// machines is left on the host.
func checkNoSSHLeaks(t *testing.T, e *testServer) {
	t.Helper()
	e.close()
	home := e.s.computers.providerByName("ssh").(*sshProvider).home // the test's host is this one
	if home == "" {
		t.Fatal("the ssh provider never learned the remote home")
	}
	dir := filepath.Join(home, ".agentd", e.s.computers.owner)
	ents, _ := os.ReadDir(dir)
	if len(ents) > 0 {
		t.Errorf("machines left on the ssh host in %s: %v", dir, ents)
	}
}

// settleTrials waits for the ssh provider's trial machine (computers_proof.go) to have ended, so a test
// that restarts the server or changes its key does not break the trial instead.
func settleTrials(t *testing.T, e *testServer) {
	t.Helper()
	p := e.s.computers.providerByName("ssh")
	eventually(t, "the ssh provider's trial to end", func() bool {
		r, pending := e.s.computers.proofOf(p)
		return !r.at.IsZero() && !pending
	})
}

// TestSSHDroppedConnection: the server restarts under a running exec: the exec fails saying the
// connection dropped (500 E_EXEC_FAILED, never a fake exit code), and the next exec works over a
// rebuilt connection (mux), or a new one (nomux: each call its own).
func TestSSHDroppedConnection(t *testing.T) { sshModes(t, testSSHDroppedConnection) }

func testSSHDroppedConnection(t *testing.T, mux testOption) {
	d := startSSHD(t)
	e := newTestServer(t, withHostEnv, withSSH(d), mux)
	m := e.create(map[string]any{"provider": "ssh", "network": map[string]any{"mode": "full"}, "idleTimeoutSec": 0})
	if out := e.sh(m.ID, "echo before"); out != "before\n" {
		t.Fatalf("before: %q", out)
	}
	p := e.s.computers.providerByName("ssh").(*sshProvider)
	p.mu.Lock()
	_, has := p.masters[m.ID]
	masters := len(p.masters)
	p.mu.Unlock()
	if p.mux != has || !p.mux && masters > 0 { // nomux: no ControlMaster at all
		t.Fatalf("multiplex %v: %d masters, the machine's %v", p.mux, masters, has)
	}
	settleTrials(t, e)
	type answer struct {
		res *ExecResult
		err error
	}
	got := make(chan answer, 1)
	go func() {
		r, err := e.s.computers.Exec(context.Background(), m.ID, ExecRequest{Cmd: execCommand{Shell: "echo started; sleep 300"}, TimeoutSec: 120}, nil)
		got <- answer{r, err}
	}()
	eventually(t, "the exec to run on the host", func() bool { return strings.Contains(e.processes(m.ID), "sleep 300") })
	d.restart()
	var a answer
	select {
	case a = <-got:
	case <-time.After(60 * time.Second):
		t.Fatal("the exec did not end when its connection dropped")
	}
	var ae *apiError
	said := func(m string) bool { // a session of its own, or the exec channel's session (computers_ssh_chan.go)
		return strings.Contains(m, "ssh connection") && strings.Contains(m, "dropped") || strings.Contains(m, "exec channel broke mid-call")
	}
	if !errors.As(a.err, &ae) || ae.Code != codeExecFailed || !said(ae.Message) {
		t.Fatalf("an exec whose connection dropped: %+v, %v", a.res, a.err)
	}
	if out := e.sh(m.ID, "echo after"); out != "after\n" {
		t.Fatalf("after the restart: %q", out)
	}
	e.sh(m.ID, killScript("sleep", "300"))
	e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
	checkNoSSHLeaks(t, e)
}

// TestSSHHostKeys: a changed host key is refused and the error says so; an unknown host is refused
// unless acceptNewHostKeys, and then recorded; the doctor says which policy holds.
func TestSSHHostKeys(t *testing.T) { sshModes(t, testSSHHostKeys) }

func testSSHHostKeys(t *testing.T, mux testOption) {
	d := startSSHD(t)
	full := map[string]any{"provider": "ssh", "network": map[string]any{"mode": "full"}}
	t.Run("changed", func(t *testing.T) {
		e := newTestServer(t, withHostEnv, withSSH(d), mux)
		m := e.create(full)
		settleTrials(t, e)
		// The host is reinstalled: a new host key, the server restarted.
		os.Remove(filepath.Join(d.dir, "host"))
		os.Remove(filepath.Join(d.dir, "host.pub"))
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", filepath.Join(d.dir, "host")).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen: %v: %s", err, out)
		}
		d.restart()
		// An exec on a machine (its connection is rebuilt: refused), and a new machine (refused by the
		// create, or by the provider's probe once its cached answer expired: 503).
		for _, r := range []response{
			e.do("POST", "/v1/computers/"+m.ID+"/exec", map[string]any{"cmd": "echo hi"}),
			e.do("POST", "/v1/computers", full),
		} {
			env, _ := r.json(t)["error"].(map[string]any)
			msg, _ := env["message"].(string)
			hint, _ := env["hint"].(string)
			if r.status != 500 && r.status != 503 || !strings.Contains(msg, "host key") || !strings.Contains(msg, "has changed") || !strings.Contains(hint, "ssh-keygen -R") {
				t.Fatalf("a changed host key: %d %s", r.status, r.body)
			}
		}
		d.trustHostKey() // the key checked and recorded: it works again
		if out := e.sh(m.ID, "echo again"); out != "again\n" {
			t.Fatalf("after recording the new key: %q", out)
		}
	})
	t.Run("unknown", func(t *testing.T) {
		kh := filepath.Join(t.TempDir(), "known_hosts")
		strict := func(c *testSetup) { c.SSH.KnownHosts = kh }
		e := newTestServer(t, withHostEnv, withSSH(d), mux, strict)
		env := e.wantError("POST", "/v1/computers", full, 503, codeProviderUnavailable)
		if msg := env["message"].(string); !strings.Contains(msg, "not in "+kh) || !strings.Contains(msg, "acceptNewHostKeys is off") {
			t.Fatalf("an unknown host: %v", env)
		}
		if p := doctorProviderOf(t, e, "ssh"); !strings.Contains(p.Description, "checked strictly") {
			t.Fatalf("doctor: %+v", p)
		}
		accept := newTestServer(t, withHostEnv, withSSH(d), mux, strict, func(c *testSetup) { c.SSH.AcceptNewHostKeys = true })
		m := accept.create(full)
		if out := accept.sh(m.ID, "echo trusted"); out != "trusted\n" {
			t.Fatalf("accept-new: %q", out)
		}
		// (ssh may hash the names it records: HashKnownHosts, Debian's default)
		if out, err := exec.Command("ssh-keygen", "-F", fmt.Sprintf("[127.0.0.1]:%d", d.port), "-f", kh).CombinedOutput(); err != nil {
			b, _ := os.ReadFile(kh)
			t.Fatalf("the new key was not recorded: %v %s; known_hosts: %q", err, out, b)
		}
		if p := doctorProviderOf(t, accept, "ssh"); !strings.Contains(p.Description, "trusted on first use") {
			t.Fatalf("doctor: %+v", p)
		}
	})
}

// doctorProviderOf is the doctor's entry for a provider.
func doctorProviderOf(t *testing.T, e *testServer, name string) doctorProvider {
	t.Helper()
	var doc struct{ Providers []doctorProvider }
	e.call("GET", "/v1/doctor", nil, 200, &doc)
	for _, p := range doc.Providers {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no %s in the doctor's providers: %+v", name, doc.Providers)
	return doctorProvider{}
}

// TestSSHRefusals: what an ssh machine cannot honour is refused with 501 and the reason, never ignored;
// machine info says isolationKind machine.
func TestSSHRefusals(t *testing.T) {
	d := startSSHD(t)
	e := newTestServer(t, withHostEnv, withSSH(d))
	for _, body := range []map[string]any{
		{}, // the default network mode, egress
		{"network": map[string]any{"mode": "none"}},
		{"network": map[string]any{"mode": "full", "deny": []string{"example.com"}}},
		{"network": map[string]any{"mode": "full"}, "packages": []string{"jq"}},
		{"network": map[string]any{"mode": "full"}, "user": "nobody"},
		{"network": map[string]any{"mode": "full"}, "image": "debian:bookworm"},
	} {
		body["provider"] = "ssh"
		env := e.wantError("POST", "/v1/computers", body, 501, codeNotImplemented)
		if !strings.Contains(env["message"].(string), "the ssh provider cannot honour") {
			t.Fatalf("%v: %v", body, env)
		}
	}
	m := e.create(map[string]any{"provider": "ssh", "network": map[string]any{"mode": "full"}})
	if m.IsolationKind != "machine" || !m.Isolated || m.Image != "" {
		t.Fatalf("machine info: %+v", m)
	}
	if p := doctorProviderOf(t, e, "ssh"); p.IsolationKind != "machine" {
		t.Fatalf("doctor: %+v", p)
	}
	e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
	checkNoSSHLeaks(t, e)
}

func TestSSHConfigTarget(t *testing.T) {
	for in, want := range map[string]string{
		"root@host":         "root host 22",
		"me@10.0.0.1:2222":  "me 10.0.0.1 2222",
		"me@[::1]:2200":     "me ::1 2200",
		"me@[fe80::1]":      "me fe80::1 22",
		"a.b-c@box.example": "a.b-c box.example 22",
	} {
		u, h, p, err := parseSSHTarget(in)
		if err != nil || fmt.Sprint(u, " ", h, " ", p) != want {
			t.Errorf("%s: %s %s %d %v", in, u, h, p, err)
		}
	}
	for _, bad := range []string{"", "host", "@host", "me@", "me@-oProxyCommand=x", "-me@host", "me@host:0", "me@host:99999", "me@host:x", "me@[::1", "me@[::1]x", "me@ho st", "me@host;id"} {
		if _, _, _, err := parseSSHTarget(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// BenchmarkSSHExec: an exec through agentd over the machine's exec channel (computers_ssh_chan.go) and
// one over its ControlMaster without the channel (a session per call), beside a plain `ssh host true` (a
// connection of its own: key exchange and authentication every time), a bare session over the same
// master (`ssh -S … true`, the per-call path's floor) and an exec through agentd without multiplexing nor
// channel (ssh.multiplex: false, Windows' default: a connection per call), interleaved in one run against
// the test sshd:
//
//	AGENT_TEST_SSH=1 go test -run '^$' -bench SSHExec -benchtime 30x .
func BenchmarkSSHExec(b *testing.B) {
	d := startSSHD(b)
	perCall := func(c *testSetup) { c.ExecChannel = new(bool); c.helperBinary = "" }
	e := newTestServer(b, withHostEnv, withSSH(d)) // the exec channel on (unless AGENT_TEST_CHANNEL=0)
	m := e.create(map[string]any{"provider": "ssh", "network": map[string]any{"mode": "full"}})
	pc := newTestServer(b, withHostEnv, withSSH(d), perCall)
	pm := pc.create(map[string]any{"provider": "ssh", "network": map[string]any{"mode": "full"}})
	p := pc.s.computers.providerByName("ssh").(*sshProvider)
	nomux := newTestServer(b, withHostEnv, withSSH(d), withSSHMultiplex(false), perCall)
	nm := nomux.create(map[string]any{"provider": "ssh", "network": map[string]any{"mode": "full"}})
	mm, err := p.master(context.Background(), &pm)
	if err != nil {
		b.Fatal(err)
	}
	run := func(cmd *exec.Cmd) time.Duration {
		t0 := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
		return time.Since(t0)
	}
	exe := func(ts *testServer, id string) time.Duration {
		t0 := time.Now()
		if r, err := ts.s.computers.Exec(context.Background(), id, ExecRequest{Cmd: execCommand{Shell: "true"}}, nil); err != nil || r.ExitCode != 0 {
			b.Fatalf("exec: %+v %v", r, err)
		}
		return time.Since(t0)
	}
	exe(e, m.ID) // the helper copied and the channel opened before the clock starts
	var api, perc, plain, mux, apiNomux []time.Duration
	b.ResetTimer()
	for range b.N {
		api = append(api, exe(e, m.ID))
		perc = append(perc, exe(pc, pm.ID))
		apiNomux = append(apiNomux, exe(nomux, nm.ID))
		plain = append(plain, run(p.cli(context.Background(), muxOpts(""), []string{"-T"}, "true")))
		mux = append(mux, run(p.cli(context.Background(), muxOpts(mm.sock), []string{"-T"}, "true")))
	}
	b.StopTimer()
	b.ReportMetric(float64(pct(api, 0.5).Microseconds())/1000, "agentd-exec-channel-p50-ms")
	b.ReportMetric(float64(pct(perc, 0.5).Microseconds())/1000, "agentd-exec-percall-p50-ms")
	b.ReportMetric(float64(pct(mux, 0.5).Microseconds())/1000, "mux-true-p50-ms")
	b.ReportMetric(float64(pct(plain, 0.5).Microseconds())/1000, "plain-ssh-true-p50-ms")
	b.ReportMetric(float64(pct(apiNomux, 0.5).Microseconds())/1000, "agentd-exec-nomux-p50-ms")
}

// FuzzSSHTarget: whatever ssh.target holds, an accepted one reaches ssh's argv as a user and a host that
// cannot be read as an option and carry nothing a shell would act on.
func FuzzSSHTarget(f *testing.F) {
	for _, s := range []string{"root@host", "me@[::1]:22", "me@h:-1", "-oProxyCommand=x@h", "a@b@c", "me@h:22:33"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, h, p, err := parseSSHTarget(s)
		if err != nil {
			return
		}
		if u == "" || h == "" || strings.HasPrefix(u, "-") || strings.HasPrefix(h, "-") || p < 1 || p > 65535 || strings.ContainsAny(u+h, " '\"\\;&|`$\n\x00") {
			t.Fatalf("%q accepted as %q %q %d", s, u, h, p)
		}
	})
}

// TestSSHConfigChecked: a bad ssh block, or computerProvider ssh without one, stops the server at start
// with E_CONFIG naming the key.
func TestSSHConfigChecked(t *testing.T) {
	for file, want := range map[string]string{
		"ssh: {target: nohost}\n":                  "ssh.target",
		"ssh: {target: me@h, key: relative/key}\n": "ssh.key",
		"ssh: {target: me@h, knownHosts: kh}\n":    "ssh.knownHosts",
		"computerProvider: ssh\n":                  "an ssh: block",
		"ssh: {target: \"me@h;reboot\"}\n":         "shell characters",
		"ssh: {target: me@h, multiplx: false}\n":   "ssh.multiplx",
		"ssh: {target: me@h, multiplex: maybe}\n":  "bool",
	} {
		home := t.TempDir()
		writeConfig(t, home, file)
		_, err := loadConfig(nil, envOf(map[string]string{"AGENT_HOME": home}), io.Discard)
		var ae *apiError
		if !errors.As(err, &ae) || ae.Code != codeConfig || !strings.Contains(ae.Message, want) {
			t.Errorf("%s: %v", file, err)
		}
	}
}

// TestSSHStoppedStaysStopped: a machine stopped before agentd restarts is adopted stopped (its directory
// is marked on the host), and starts again with its files.
func TestSSHStoppedStaysStopped(t *testing.T) {
	d := startSSHD(t)
	home := t.TempDir()
	a := newTestServer(t, withHostEnv, withSSH(d), withHome(home))
	a.keep = true
	m := a.create(map[string]any{"provider": "ssh", "network": map[string]any{"mode": "full"}, "idleTimeoutSec": 0})
	a.sh(m.ID, "echo kept > f")
	a.call("POST", "/v1/computers/"+m.ID+"/stop", nil, 200, nil)
	a.close()
	b := newTestServer(t, withHostEnv, withSSH(d), withHome(home))
	var got ComputerInfo
	if b.call("GET", "/v1/computers/"+m.ID, nil, 200, &got); got.State != "stopped" {
		t.Fatalf("a stopped machine after the restart: %+v", got)
	}
	b.call("POST", "/v1/computers/"+m.ID+"/start", nil, 200, nil)
	if out := b.sh(m.ID, "cat f"); out != "kept\n" {
		t.Fatalf("after start: %q", out)
	}
	b.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
	checkNoSSHLeaks(t, b)
}

// TestSSHTunnels: without multiplexing a forwarded port is an `ssh -N -L` of its own: it reaches the
// port on the host's loopback, comes back on the same local address after the server restarted, and is
// ended (no process, nothing listening) when the machine stops.
func TestSSHTunnels(t *testing.T) {
	d := startSSHD(t)
	e := newTestServer(t, withHostEnv, withSSH(d), withSSHMultiplex(false))
	m := e.create(map[string]any{"provider": "ssh", "network": map[string]any{"mode": "full"}, "idleTimeoutSec": 0})
	settleTrials(t, e)
	if p := doctorProviderOf(t, e, "ssh"); !strings.Contains(p.Description, "a connection of its own for every call") {
		t.Fatalf("the doctor does not say the mode: %+v", p)
	}
	guest, err := net.Listen("tcp", "127.0.0.1:0") // the "guest" service: the test's host is the ssh host
	if err != nil {
		t.Fatal(err)
	}
	defer guest.Close()
	go func() {
		for {
			c, err := guest.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	echoes := func(addr string) bool {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			return false
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("ping\n")); err != nil {
			return false
		}
		b := make([]byte, 5)
		_, err = io.ReadFull(c, b)
		return err == nil && string(b) == "ping\n"
	}
	p := e.s.computers.providerByName("ssh").(*sshProvider)
	port := guest.Addr().(*net.TCPAddr).Port
	addr, err := p.guestAddr(context.Background(), &m, port)
	if err != nil || !echoes(addr) {
		t.Fatalf("the tunnel at %q: %v", addr, err)
	}
	tunnelProcs := func() int { // the provider's ssh -L processes for this address
		out, _ := exec.Command("pgrep", "-f", "--", "-L "+addr+":").Output()
		return len(strings.Fields(string(out)))
	}
	if n := tunnelProcs(); n != 1 {
		t.Fatalf("%d ssh -L processes for %s", n, addr)
	}
	d.restart()
	eventually(t, "the tunnel to come back on "+addr, func() bool { return echoes(addr) })
	if again, err := p.guestAddr(context.Background(), &m, port); err != nil || again != addr {
		t.Fatalf("after the restart: %q %v (was %q)", again, err, addr)
	}
	e.call("POST", "/v1/computers/"+m.ID+"/stop", nil, 200, nil)
	if n := tunnelProcs(); n != 0 {
		t.Fatalf("%d ssh -L processes left for %s after stop", n, addr)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatalf("%s still accepts after stop", addr)
	}
	e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
	checkNoSSHLeaks(t, e)
}

// TestSSHExecChannel: with the exec channel on, an exec on the ssh provider runs under the machine's own
// `machine-helper` (copied once to the host), not under an ssh session of its own; its process group is
// recorded in the machine's directory (a shared /tmp would let one machine's helper kill another's
// processes), and its environment is still only the machine's.
func TestSSHExecChannel(t *testing.T) { sshModes(t, testSSHExecChannel) }

func testSSHExecChannel(t *testing.T, mux testOption) {
	if os.Getenv("AGENT_TEST_CHANNEL") == "0" {
		t.Skip("the exec channel is off here (AGENT_TEST_CHANNEL=0)")
	}
	d := startSSHD(t)
	e := newTestServer(t, withHostEnv, withSSH(d), mux)
	m := e.create(map[string]any{"provider": "ssh", "network": map[string]any{"mode": "full"}, "env": map[string]any{"SPEC_VAR": "x"}})
	parent := e.sh(m.ID, `tr '\0' ' ' < /proc/$PPID/cmdline`)
	if !strings.Contains(parent, "machine-helper --pid-files") {
		t.Fatalf("the exec's parent is %q, not the machine's helper", parent)
	}
	// The helper records the group just after it starts the command, so the command polls for it (at most 5 s).
	if out := e.sh(m.ID, `for i in $(seq 100); do ls "$HOME"/../.chan-*.pid >/dev/null 2>&1 && break; sleep 0.05; done
ls "$HOME"/../.chan-*.pid | wc -l; env | cut -d= -f1 | sort | tr '\n' ' '`); !strings.HasPrefix(out, "1\n") ||
		!strings.Contains(out, "AGENTD_COMPUTER_ID") || !strings.Contains(out, "SPEC_VAR") || strings.Contains(out, "SSH_CONNECTION") {
		t.Fatalf("pid file in the machine's directory and only the machine's environment: %q", out)
	}
	if out := e.sh(m.ID, `mkdir -p sub && cd sub && pwd`); out != "/work/sub\n" && !strings.HasSuffix(out, "/work/sub\n") {
		t.Fatalf("cwd: %q", out)
	}
	p := e.s.computers.providerByName("ssh").(*sshProvider)
	if p.helperBin == "" || !strings.Contains(p.helperBin, "/.agentd/bin/agentd-") {
		t.Fatalf("helper on the host: %q (%s)", p.helperBin, p.helperOff)
	}
	if st, err := os.Stat(p.helperBin); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("the copied helper: %v %v", st, err)
	}
	// A port goes over the channel too: a forwarder of agentd's, no -L of the master, no ssh -N -L.
	guest, err := net.Listen("tcp", "127.0.0.1:0") // the test's host is the ssh host
	if err != nil {
		t.Fatal(err)
	}
	defer guest.Close()
	go func() {
		for {
			c, err := guest.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	var b PortBinding
	e.call("POST", "/v1/computers/"+m.ID+"/ports", map[string]any{"port": guest.Addr().(*net.TCPAddr).Port}, 200, &b)
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", b.HostPort), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write([]byte("ping\n"))
	got := make([]byte, 5)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "ping\n" {
		t.Fatalf("the port over the channel: %q %v", got, err)
	}
	c.Close()
	p.mu.Lock()
	fwd, tun := len(p.fwd[m.ID]), len(p.tunnels[m.ID])
	p.mu.Unlock()
	if fwd+tun != 0 {
		t.Fatalf("the port was forwarded by ssh (%d -L, %d tunnels), not over the channel", fwd, tun)
	}
	checkNoSSHLeaks(t, e)
}
