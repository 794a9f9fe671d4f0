// computers_ssh.go — the `ssh` provider: machines on a Linux host you already own, driven through the system
// `ssh` client (issue 29). The local provider on another host: a machine is a private directory there,
// presented as /work and /tmp, and the jail, the exec semantics and the file operations are the same.
//
// Entry points: newSSHProvider (only when config.yaml has an `ssh:` block), sshConfig.check (the config's
// validation); the file operations are in computers_ssh_fs.go, the exec channel in computers_ssh_chan.go.
//
// Rules: every call to the host goes through sshProvider.cli (exec.CommandContext, WaitDelay, explicit
// argv: BatchMode, a connect timeout, keep-alives, the configured key and known_hosts, host keys checked
// strictly unless acceptNewHostKeys) and, when the output is wanted, sshProvider.call, which carries ssh's
// and the remote shell's stderr into the error. Each machine has ONE ControlMaster connection (its socket
// in the data directory), opened at create and start, closed at stop and destroy, rebuilt once when it is
// found dead; every file operation, and every exec the exec channel does not carry (computers_ssh_chan.go:
// one helper per machine over one long session), is a session multiplexed over it, and a port is the
// master's own -L. Without multiplexing (ssh.multiplex: false; the default on Windows, whose OpenSSH client has no
// ControlMaster) every call is a connection of its own with the same options, and each forwarded port is
// an `ssh -N -L` process of its own (sshTunnel), owned by the provider and ended with the machine. A machine is
// ~/.agentd/<owner>/<id>/{work,tmp} on the host (mode 0700; <owner> is this data directory's instance id,
// so two servers sharing a host never reap each other's machines). A process runs there with only PATH,
// HOME, TMPDIR, the spec's and the exec's environment (env -i) and AGENTD_COMPUTER_ID, which stop, destroy
// and a restart use to find and kill the machine's processes; an exec's process group is recorded in the
// machine's directory and killed whole on timeout and cancel. Isolation is honest: isolationKind machine
// (another computer, shared by every machine on it: one user, no limits on cpus, memory or disk), and a
// network mode other than full, mounts, packages, another user and an image are refused (501).
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"
)

// sshConfig is config.yaml's `ssh:` block.
type sshConfig struct {
	Target            string `yaml:"target"`            // user@host[:port]
	Key               string `yaml:"key"`               // the private key's path; empty: ssh's own defaults (agent, ~/.ssh/id_*)
	KnownHosts        string `yaml:"knownHosts"`        // the known_hosts file; empty: ~/.ssh/known_hosts
	AcceptNewHostKeys bool   `yaml:"acceptNewHostKeys"` // a host not yet known is trusted on first use (a changed key is still refused)
	// Multiplex: one ControlMaster per machine (true), or a connection of its own for every call (false).
	// Unset: true, but on Windows, whose OpenSSH client has no ControlMaster (sshConfig.multiplex).
	Multiplex *bool `yaml:"multiplex"`
}

// multiplex says whether machines get a ControlMaster on a host running goos: what the config says, else
// everywhere but Windows (Win32-OpenSSH has no ControlMaster or ControlPath).
func (s sshConfig) multiplex(goos string) bool {
	if s.Multiplex != nil {
		return *s.Multiplex
	}
	return goos != "windows"
}

// UnmarshalYAML reads the block strictly, as config.yaml's top level is read: an unknown key is an error
// naming it (a misspelt `multiplex` must not silently leave the default).
func (s *sshConfig) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.MappingNode {
		known := []string{"target", "key", "knownHosts", "acceptNewHostKeys", "multiplex"}
		for i := 0; i < len(n.Content); i += 2 {
			if k := n.Content[i].Value; !slices.Contains(known, k) {
				return fmt.Errorf("unknown key ssh.%s (line %d); the ssh block's keys are %s", k, n.Content[i].Line, strings.Join(known, ", "))
			}
		}
	}
	type plain sshConfig
	return n.Decode((*plain)(s))
}

const (
	sshConnectTimeout = 10 // seconds: ConnectTimeout
	sshAliveInterval  = 15 // seconds: ServerAliveInterval (three missed answers end a dead connection)
	sshMasterWait     = 30 * time.Second
)

// check validates the block (config.yaml's check); the target is split into user, host and port.
func (s sshConfig) check() error {
	_, _, _, err := parseSSHTarget(s.Target)
	if err != nil {
		return err
	}
	for key, p := range map[string]string{"ssh.key": s.Key, "ssh.knownHosts": s.KnownHosts} {
		if p != "" && !filepath.IsAbs(p) {
			return errorf(codeConfig, "config.yaml: %s is %q; it must be an absolute path", key, p).withHint("write the full path of the file")
		}
	}
	return nil
}

// parseSSHTarget splits user@host[:port] (an IPv6 host in brackets). Nothing in it may start like a flag.
func parseSSHTarget(t string) (user, host string, port int, err error) {
	bad := func(why string) error {
		return errorf(codeConfig, "config.yaml: ssh.target is %q; %s", t, why).withHint("write ssh.target as user@host or user@host:port")
	}
	user, rest, ok := strings.Cut(t, "@")
	if !ok || user == "" || rest == "" {
		return "", "", 0, bad("it needs a user and a host")
	}
	port = 22
	host = rest
	if strings.HasPrefix(rest, "[") {
		end := strings.Index(rest, "]")
		if end < 0 {
			return "", "", 0, bad("an IPv6 address needs its closing ]")
		}
		host = rest[1:end]
		if tail := rest[end+1:]; tail != "" {
			p, ok := strings.CutPrefix(tail, ":")
			if !ok {
				return "", "", 0, bad("only :port may follow the host")
			}
			if port, err = strconv.Atoi(p); err != nil {
				return "", "", 0, bad("the port must be a number")
			}
		}
	} else if h, p, ok := strings.Cut(rest, ":"); ok {
		host = h
		if port, err = strconv.Atoi(p); err != nil {
			return "", "", 0, bad("the port must be a number")
		}
	}
	switch {
	case port < 1 || port > 65535:
		return "", "", 0, bad("the port must be between 1 and 65535")
	case host == "" || strings.HasPrefix(host, "-") || strings.HasPrefix(user, "-"):
		return "", "", 0, bad("the user and the host must not start with -")
	case strings.ContainsAny(t, " \t\n\r\x00'\"\\;&|`$"):
		return "", "", 0, bad("it may not contain spaces, quotes or shell characters")
	}
	return user, host, port, nil
}

type sshProvider struct {
	c          *computerService
	conf       sshConfig
	user, host string
	port       int
	ctlDir     string // where the ControlMaster sockets live (and every ssh process's cwd)
	mux        bool   // one ControlMaster per machine; false: a connection of its own for every call
	mu         sync.Mutex
	masters    map[string]*sshMaster         // machine id → its connection
	fwd        map[string]map[int]string     // machine id → guest port → the local address its master forwards
	tunnels    map[string]map[int]*sshTunnel // without multiplexing: machine id → guest port → its `ssh -N -L`
	home       string                        // the remote user's physical home directory, learned once
	helperMu   sync.Mutex                    // held while the helper is copied (computers_ssh_chan.go)
	helperBin  string                        // the helper's absolute path on the host, once copied and run
	helperOff  string                        // why the host cannot run the helper ("": not known yet, or it can)
	closed     bool
}

// sshMaster is one machine's ControlMaster: an ssh process this server owns.
type sshMaster struct {
	cmd    *exec.Cmd
	sock   string
	done   chan struct{} // closed when the process has exited
	stderr *limitedBuffer
	buf    *bytes.Buffer
}

func (m *sshMaster) alive() bool {
	select {
	case <-m.done:
		return false
	default:
		return true
	}
}

func newSSHProvider(conf sshConfig, c *computerService) *sshProvider {
	user, host, port, _ := parseSSHTarget(conf.Target) // checked with the config
	s := &sshProvider{c: c, conf: conf, user: user, host: host, port: port, mux: conf.multiplex(runtime.GOOS),
		masters: map[string]*sshMaster{}, fwd: map[string]map[int]string{}, tunnels: map[string]map[int]*sshTunnel{}}
	s.ctlDir = filepath.Join(c.home, "ssh")
	return s
}

func (s *sshProvider) hostKeyPolicy() string {
	if s.conf.AcceptNewHostKeys {
		return "accept-new"
	}
	return "yes"
}

func (s *sshProvider) knownHosts() string {
	if s.conf.KnownHosts != "" {
		return s.conf.KnownHosts
	}
	return "~/.ssh/known_hosts"
}

func (s *sshProvider) meta() providerMeta {
	keys := "host keys checked strictly against " + s.knownHosts() + " (an unknown host is refused)"
	if s.conf.AcceptNewHostKeys {
		keys = "host keys: a new host is trusted on first use and recorded in " + s.knownHosts() + " (acceptNewHostKeys); a changed key is refused"
	}
	conn := "one ControlMaster connection per machine"
	if !s.mux {
		conn = "a connection of its own for every call (multiplex off: no ControlMaster)"
	}
	return providerMeta{name: "ssh", priority: 5, isolated: true, isolationKind: "machine",
		description: fmt.Sprintf("a private directory per machine on %s over ssh (another computer, shared by every machine on it); %s; %s", s.target(), conn, keys)}
}

// limitsNote: the doctor says what a spec asks that the host does not enforce.
func (s *sshProvider) limitsNote() string {
	return "cpus, memoryMb and diskMb are not enforced on the ssh host; every machine there runs as " + s.user + " and can see the others' processes"
}

func (s *sshProvider) target() string {
	return s.user + "@" + net.JoinHostPort(s.host, strconv.Itoa(s.port))
}

// ---- the one ssh helper ----

// opts are the options of every ssh call: no prompt, bounded connect, keep-alives, the configured key
// and known_hosts, then ctl (how the call uses a ControlMaster).
func (s *sshProvider) opts(ctl []string) []string {
	a := []string{"-o", "BatchMode=yes", "-o", "ConnectTimeout=" + strconv.Itoa(sshConnectTimeout),
		"-o", "ServerAliveInterval=" + strconv.Itoa(sshAliveInterval), "-o", "ServerAliveCountMax=3",
		"-o", "StrictHostKeyChecking=" + s.hostKeyPolicy(), "-o", "LogLevel=ERROR",
		"-o", "PasswordAuthentication=no", "-o", "KbdInteractiveAuthentication=no",
		"-o", "ForwardAgent=no", "-o", "ForwardX11=no",
		"-p", strconv.Itoa(s.port), "-l", s.user}
	if s.conf.KnownHosts != "" {
		a = append(a, "-o", "UserKnownHostsFile="+s.conf.KnownHosts, "-o", "GlobalKnownHostsFile=/dev/null")
	}
	if s.conf.Key != "" {
		a = append(a, "-i", s.conf.Key, "-o", "IdentitiesOnly=yes")
	}
	return append(a, ctl...)
}

// muxOpts: a session over the master listening on sock ("": a connection of its own), never a master.
func muxOpts(sock string) []string {
	if sock == "" {
		sock = "none"
	}
	return []string{"-o", "ControlMaster=no", "-o", "ControlPath=" + sock, "-o", "ClearAllForwardings=yes"}
}

// cli is THE helper: every ssh process is built here: the options, ctl, args, the host, the remote
// command. It runs in the sockets' directory, so a ControlPath is a short relative name (a socket's
// path is at most 107 bytes, and a data directory can be long).
func (s *sshProvider) cli(ctx context.Context, ctl, args []string, remote string) *exec.Cmd {
	argv := append(s.opts(ctl), args...)
	argv = append(argv, s.host)
	if remote != "" {
		argv = append(argv, remote)
	}
	cmd := exec.CommandContext(ctx, "ssh", argv...)
	os.MkdirAll(s.ctlDir, 0o700) // its cwd (a failure shows in the call's own error)
	cmd.Dir = s.ctlDir
	cmd.WaitDelay = 2 * time.Second
	dieWithParent(cmd) // an ssh child must not outlive a killed server
	return cmd
}

// remoteSh is the remote command that runs script under /bin/sh with args as $1...: the remote user's
// login shell reads it, so everything is quoted for a POSIX shell.
func remoteSh(script string, args ...string) string {
	return "exec /bin/sh -c " + shellQuote(script) + " agentd " + shellJoin(args)
}

// sshError is a failed ssh call with ssh's or the remote shell's words.
type sshError struct {
	err    error
	stderr string
	code   int // the exit code; 255 is ssh's own failure (connection, authentication, host key)
}

func (e *sshError) Error() string {
	if e.stderr != "" {
		return e.stderr
	}
	return e.err.Error()
}

// connFailed: the call failed in ssh itself, not in the remote command.
func (e *sshError) connFailed() bool { return e.code == 255 }

// call runs script on the host over machine m's master (nil m, or a machine without a live master: a
// connection of its own) and returns its stdout. A call whose master turned out dead is retried once
// over a rebuilt one when it has no stdin to replay.
func (s *sshProvider) call(ctx context.Context, m *ComputerInfo, stdin io.Reader, stdout io.Writer, script string, args ...string) error {
	err := s.callOnce(ctx, m, stdin, stdout, script, args...)
	var se *sshError
	if err != nil && m != nil && stdin == nil && errors.As(err, &se) && se.connFailed() && s.hasMaster(m.ID) {
		s.closeMaster(m.ID) // stale: rebuilt once
		if _, merr := s.master(ctx, m); merr == nil {
			err = s.callOnce(ctx, m, stdin, stdout, script, args...)
		}
	}
	return err
}

func (s *sshProvider) callOnce(ctx context.Context, m *ComputerInfo, stdin io.Reader, stdout io.Writer, script string, args ...string) error {
	sock := ""
	if m != nil {
		sock = s.liveSock(m.ID)
	}
	cmd := s.cli(ctx, muxOpts(sock), []string{"-T"}, remoteSh(script, args...))
	var stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, &limitedBuffer{b: &stderr, max: 64 << 10}
	if cmd.Stdout == nil {
		cmd.Stdout = io.Discard
	}
	if err := cmd.Run(); err != nil {
		code := -1
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		msg := strings.TrimSpace(stderr.String())
		if code == 255 {
			msg = s.explain(msg)
		}
		return &sshError{err: err, stderr: msg, code: code}
	}
	return nil
}

// explain turns ssh's own failure into words that say what to fix.
func (s *sshProvider) explain(msg string) string {
	low := strings.ToLower(msg)
	switch {
	case strings.Contains(low, "remote host identification has changed") || strings.Contains(low, "host key for") && strings.Contains(low, "has changed"):
		return fmt.Sprintf("the host key of %s has changed since it was recorded in %s: refused (ssh: %s)", s.target(), s.knownHosts(), lastSSHLine(msg))
	case strings.Contains(low, "no ") && strings.Contains(low, "host key is known") || strings.Contains(low, "host key verification failed"):
		return fmt.Sprintf("the host key of %s is not in %s, and acceptNewHostKeys is off: refused (ssh: %s)", s.target(), s.knownHosts(), lastSSHLine(msg))
	case strings.Contains(low, "permission denied"):
		return fmt.Sprintf("%s refused the key: %s", s.target(), lastSSHLine(msg))
	case msg == "":
		return fmt.Sprintf("the ssh connection to %s failed", s.target())
	}
	return fmt.Sprintf("ssh to %s: %s", s.target(), lastSSHLine(msg))
}

func lastSSHLine(msg string) string {
	lines := strings.Split(strings.TrimSpace(msg), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" && !strings.HasPrefix(l, "@@@") {
			return l
		}
	}
	return msg
}

// sshHint is the fix for a failure explain described.
func (s *sshProvider) sshHint(msg string) string {
	switch {
	case strings.Contains(msg, "has changed"):
		return fmt.Sprintf("if the host was really reinstalled, remove its old key (ssh-keygen -R '[%s]:%d' -f %s) and connect again; otherwise someone may be in the middle", s.host, s.port, s.knownHosts())
	case strings.Contains(msg, "is not in"):
		return fmt.Sprintf("record the host's key (ssh-keyscan -p %d %s >> %s, after checking its fingerprint), or set ssh.acceptNewHostKeys: true in config.yaml, %s", s.port, s.host, s.knownHosts(), takesEffect("ssh"))
	case strings.Contains(msg, "refused the key"):
		return "add the public half of ssh.key to the user's ~/.ssh/authorized_keys on the host"
	}
	return fmt.Sprintf("check that `ssh -p %d %s` works from this host without a prompt", s.port, s.user+"@"+s.host)
}

// ---- the ControlMaster of each machine ----

// sockPath is the ControlPath of a machine's master, relative to the sockets' directory (cli's cwd).
func (s *sshProvider) sockPath(id string) string { return "./" + strings.TrimPrefix(id, "cmp_") }

func (s *sshProvider) hasMaster(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.masters[id] != nil
}

// liveSock is the socket of the machine's live master, or "" (the call then connects on its own).
func (s *sshProvider) liveSock(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if mm := s.masters[id]; mm != nil && mm.alive() {
		return mm.sock
	}
	return ""
}

// connect is the ControlPath a machine's session uses: its live master's (opened when there is none or
// the old one died), or "" without multiplexing, where every call makes a connection of its own (and
// says by its own failure that the host does not answer).
func (s *sshProvider) connect(ctx context.Context, m *ComputerInfo) (string, error) {
	if !s.mux {
		return "", nil
	}
	mm, err := s.master(ctx, m)
	if err != nil {
		return "", err
	}
	return mm.sock, nil
}

// master returns the machine's live master, opening it when there is none or the old one died.
func (s *sshProvider) master(ctx context.Context, m *ComputerInfo) (*sshMaster, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errorf(codeComputerFailed, "the server is shutting down").withHint("retry after the restart")
	}
	mm := s.masters[m.ID]
	if mm != nil && mm.alive() {
		s.mu.Unlock()
		return mm, nil
	}
	delete(s.masters, m.ID)
	s.mu.Unlock()
	if mm != nil { // it died: say so once in the log, with ssh's own words
		s.c.log.Warn("computers: the ssh connection of a machine dropped; reconnecting", "computer", m.ID, "ssh", strings.TrimSpace(mm.buf.String()))
	}
	if err := s.ensureCtlDir(); err != nil {
		return nil, err
	}
	sock := s.sockPath(m.ID)
	os.Remove(filepath.Join(s.ctlDir, sock)) // a socket left by a server that died
	// Owned by the service, not by the request: the connection outlives the call that opened it.
	cmd := s.cli(s.c.ctx, []string{"-o", "ControlMaster=yes", "-o", "ControlPath=" + sock, "-o", "ControlPersist=no",
		"-o", "ClearAllForwardings=yes"}, []string{"-N"}, "")
	buf := &bytes.Buffer{}
	mm = &sshMaster{cmd: cmd, sock: sock, done: make(chan struct{}), buf: buf, stderr: &limitedBuffer{b: buf, max: 16 << 10}}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, nil, mm.stderr
	if err := cmd.Start(); err != nil {
		return nil, errorf(codeComputerFailed, "cannot start ssh: %v", err).withHint("install the OpenSSH client (apt-get install openssh-client)")
	}
	go func() { defer close(mm.done); cmd.Wait() }()
	// Ready when the socket appears (ssh links it into place only once authenticated), failed when the
	// process ends first.
	deadline := time.NewTimer(sshMasterWait)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if fi, err := os.Lstat(filepath.Join(s.ctlDir, sock)); err == nil && fi.Mode()&os.ModeSocket != 0 {
			break
		}
		select {
		case <-mm.done: // Wait returned: the stderr copy is over
			msg := s.explain(strings.TrimSpace(buf.String()))
			return nil, errorf(codeComputerFailed, "cannot connect to %s: %s", s.target(), msg).withHint(s.sshHint(msg))
		case <-ctx.Done():
			cmd.Process.Kill()
			<-mm.done
			return nil, errorf(codeComputerFailed, "connecting to %s was cancelled", s.target()).withHint("retry")
		case <-deadline.C:
			cmd.Process.Kill()
			<-mm.done
			return nil, errorf(codeComputerFailed, "ssh to %s did not connect within %s", s.target(), sshMasterWait).withHint(s.sshHint(""))
		case <-tick.C:
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.masters[m.ID] != nil { // the server closed, or another call won the race
		cmd.Process.Kill()
		if s.closed {
			return nil, errorf(codeComputerFailed, "the server is shutting down").withHint("retry after the restart")
		}
		return s.masters[m.ID], nil
	}
	s.masters[m.ID] = mm
	for port, addr := range s.fwd[m.ID] { // forwards live in the master: a rebuilt one gets them again
		s.forwardLocked(mm, port, addr)
	}
	return mm, nil
}

// ensureCtlDir makes the sockets' directory, private to this user (a directory in /tmp must be ours).
func (s *sshProvider) ensureCtlDir() error {
	if err := os.MkdirAll(s.ctlDir, 0o700); err != nil {
		return errorf(codeComputerFailed, "cannot create %s: %v", s.ctlDir, err).withHint("make AGENT_HOME writable")
	}
	return os.Chmod(s.ctlDir, 0o700)
}

// closeMaster ends a machine's connection (its forwards with it).
func (s *sshProvider) closeMaster(id string) {
	s.mu.Lock()
	mm := s.masters[id]
	delete(s.masters, id)
	s.mu.Unlock()
	if mm != nil {
		mm.cmd.Process.Kill()
		<-mm.done
		os.Remove(filepath.Join(s.ctlDir, mm.sock))
	}
}

// close ends every connection (the service's Close): machines keep running on the host, and the next
// start adopts them over new connections.
func (s *sshProvider) close() {
	s.mu.Lock()
	s.closed = true
	ids := make([]string, 0, len(s.masters)+len(s.tunnels))
	for id := range s.masters {
		ids = append(ids, id)
	}
	for id := range s.tunnels {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	for _, id := range ids {
		s.dropForwards(id)
		s.closeMaster(id)
	}
}

// ---- the machine's directory on the host ----

// remoteHome is the remote user's physical home directory (symlinks resolved), asked once.
func (s *sshProvider) remoteHome(ctx context.Context, m *ComputerInfo) (string, error) {
	s.mu.Lock()
	h := s.home
	s.mu.Unlock()
	if h != "" {
		return h, nil
	}
	var out bytes.Buffer
	if err := s.call(ctx, m, nil, &out, `cd && pwd -P`); err != nil {
		return "", s.failed("cannot read the remote home directory", err)
	}
	h = strings.TrimSpace(out.String())
	if !strings.HasPrefix(h, "/") || strings.ContainsAny(h, "\n\x00") {
		return "", errorf(codeComputerFailed, "the host answered an odd home directory %q", h).withHint("check the remote user's shell")
	}
	s.mu.Lock()
	s.home = h
	s.mu.Unlock()
	return h, nil
}

// rel is the machine's directory relative to the remote home (where every ssh command starts).
func (s *sshProvider) rel(m *ComputerInfo) string { return ".agentd/" + s.c.owner + "/" + m.ID }

// dir is the machine's absolute directory on the host.
func (s *sshProvider) dir(ctx context.Context, m *ComputerInfo) (string, error) {
	h, err := s.remoteHome(ctx, m)
	if err != nil {
		return "", err
	}
	return path.Join(h, s.rel(m)), nil
}

// failed is a lifecycle failure in the contract's envelope, with ssh's words and the fix.
func (s *sshProvider) failed(what string, err error) error {
	if ae, ok := err.(*apiError); ok {
		return ae
	}
	msg := err.Error()
	return errorf(codeComputerFailed, "%s on %s: %s", what, s.target(), msg).withHint(s.sshHint(msg))
}

// ---- provider ----

func (s *sshProvider) probe(ctx context.Context) probeResult {
	if _, err := exec.LookPath("ssh"); err != nil {
		return probeResult{reason: "the ssh client is not installed", hint: "install the OpenSSH client (apt-get install openssh-client)"}
	}
	if s.conf.Key != "" {
		if _, err := os.Stat(s.conf.Key); err != nil {
			return probeResult{reason: fmt.Sprintf("ssh.key %s cannot be read: %v", s.conf.Key, err), hint: "fix ssh.key in config.yaml, " + takesEffect("ssh")}
		}
	}
	var out bytes.Buffer
	err := s.call(ctx, nil, nil, &out, `uname -sr; command -v readlink find tar >/dev/null || echo "missing readlink, find or tar"`)
	if err != nil {
		msg := err.Error()
		return probeResult{reason: msg, hint: s.sshHint(msg)}
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) > 1 {
		return probeResult{reason: fmt.Sprintf("%s is %s but has no %s", s.target(), lines[0], strings.TrimPrefix(lines[1], "missing ")),
			hint: "install coreutils, findutils and tar on the host"}
	}
	if !strings.HasPrefix(lines[0], "Linux") {
		return probeResult{reason: fmt.Sprintf("%s runs %s; the ssh provider needs a Linux host (/proc, GNU readlink and find)", s.target(), lines[0]),
			hint: "point ssh.target at a Linux host"}
	}
	return probeResult{available: true, version: lines[0]}
}

func (s *sshProvider) supports(sp ComputerSpec) error {
	refuse := func(what, hint string) error {
		return errorf(codeNotImplemented, "the ssh provider cannot honour %s", what).withHint(hint)
	}
	switch {
	case sp.Network.Mode != "full":
		return refuse(fmt.Sprintf("network mode %s: a machine on the ssh host uses the host's own network, which agentd cannot restrict", sp.Network.Mode),
			`set computer.network.mode to "full" (the host's network, unrestricted), or use provider docker, podman or sandbox for egress rules`)
	case len(sp.Network.Allow) > 0 || len(sp.Network.Deny) > 0:
		return refuse("network allow or deny lists", "drop network.allow and network.deny, or use provider docker, podman or sandbox")
	case len(sp.Mounts) > 0:
		return refuse("mounts (the files are on another host)", "copy files in with the upload endpoint, or use provider docker or podman")
	case len(sp.Packages) > 0:
		return refuse("packages (the host's system is shared by every machine on it)", "install what you need on the host once, or use provider docker or podman")
	case sp.User != "":
		return refuse("user (every machine runs as ssh.target's user)", "omit user")
	case sp.Image != "":
		return refuse("an image (a machine runs on the host's own system)", "omit image, or use provider docker or podman")
	case !insideWritable(sp.Workdir):
		return refuse("a workdir outside /work and /tmp", "use a workdir under /work or /tmp")
	}
	return nil
}

func (s *sshProvider) create(ctx context.Context, m *ComputerInfo) error {
	s.mu.Lock()
	closed := s.closed // a closed service's provider still makes a machine (over a connection of its own)
	s.mu.Unlock()
	if !closed {
		if _, err := s.connect(ctx, m); err != nil {
			return err
		}
	}
	wd, _ := splitRoot(m.Workdir)
	_, wrel := splitRoot(m.Workdir)
	err := s.call(ctx, m, nil, nil, `umask 077 && mkdir -p -- "$1/work" "$1/tmp" && chmod 700 -- "$1" "$1/work" "$1/tmp" && mkdir -p -- "$1/$2/$3"`,
		s.rel(m), strings.TrimPrefix(wd, "/"), wrel)
	if err != nil {
		return s.failed("cannot create the machine's directory", err)
	}
	_, err = s.remoteHome(ctx, m)
	return err
}

func (s *sshProvider) start(ctx context.Context, m *ComputerInfo) error {
	if _, err := s.connect(ctx, m); err != nil { // without multiplexing the check below connects
		return err
	}
	var out bytes.Buffer
	if err := s.call(ctx, m, nil, &out, `[ -d "$1/work" ] || { echo missing; exit 0; }; rm -f -- "$1/.stopped"`, s.rel(m)); err != nil {
		return s.failed("cannot check the machine's directory", err)
	} else if strings.TrimSpace(out.String()) == "missing" {
		s.closeMaster(m.ID)
		return errorf(codeComputerNotFound, "the directory of computer %s is gone from %s", m.ID, s.target()).withHint("delete the computer and create a new one")
	}
	return nil
}

// stop kills the machine's processes on the host and closes its connection and its port tunnels; its
// directory stays, marked stopped (a restarted server adopts it as stopped, not running).
func (s *sshProvider) stop(ctx context.Context, m *ComputerInfo) error {
	s.killAll(ctx, m)
	if err := s.call(ctx, m, nil, nil, `[ ! -d "$1" ] || : > "$1/.stopped"`, s.rel(m)); err != nil {
		s.c.log.Warn("computers: marking an ssh machine stopped", "computer", m.ID, "err", err)
	}
	s.dropForwards(m.ID)
	s.closeMaster(m.ID)
	return nil
}

// destroy kills the machine's processes and removes its directory (and this owner's, once empty). A host
// that does not answer is asked twice more, a second apart (a restarting sshd): no leaked machines.
func (s *sshProvider) destroy(ctx context.Context, m *ComputerInfo) error {
	s.killAll(ctx, m)
	var err error
	for attempt := 1; ; attempt++ {
		err = s.call(ctx, m, nil, nil, `[ ! -e "$1" ] || { chmod -R u+rwx -- "$1" 2>/dev/null; rm -rf -- "$1"; }; rmdir -- "${1%/*}" 2>/dev/null; true`, s.rel(m))
		var se *sshError
		if err == nil || attempt == 3 || !errors.As(err, &se) || !se.connFailed() {
			break
		}
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
	}
	s.dropForwards(m.ID)
	s.closeMaster(m.ID)
	if err != nil {
		return s.failed("cannot remove the machine's directory", err)
	}
	return nil
}

func (s *sshProvider) status(ctx context.Context, m *ComputerInfo) (string, error) {
	var out bytes.Buffer
	if err := s.call(ctx, m, nil, &out, `if [ -d "$1/work" ]; then echo present; else echo missing; fi`, s.rel(m)); err != nil {
		return "", err // the host not answering is not the machine gone
	}
	switch {
	case strings.TrimSpace(out.String()) == "missing":
		return "missing", nil
	case m.State == stateStopped:
		return "stopped", nil
	}
	return "running", nil
}

// owned lists this owner's machine directories on the host: id → running (not marked stopped).
func (s *sshProvider) owned(ctx context.Context) (map[string]bool, error) {
	var out bytes.Buffer
	err := s.call(ctx, nil, nil, &out, `cd "$1" 2>/dev/null || exit 0; for d in cmp_*; do [ -d "$d/work" ] || continue; if [ -e "$d/.stopped" ]; then echo "$d stopped"; else echo "$d running"; fi; done; true`, ".agentd/"+s.c.owner)
	if err != nil {
		return nil, err
	}
	res := map[string]bool{}
	for _, line := range strings.Split(out.String(), "\n") {
		if id, st, ok := strings.Cut(line, " "); ok && strings.HasPrefix(id, "cmp_") {
			res[id] = st == "running"
		}
	}
	return res, nil
}

// sshKillScript kills every process on the host whose environment carries AGENTD_COMPUTER_ID=$1, group by
// group, and prints how many groups.
const sshKillScript = `set -- "$1" $(cat /proc/$$/stat); me=$6; set -- "$1"; n=0; seen=' '; for round in 1 2 3; do found=0
for p in /proc/[0-9]*; do
  tr '\0' '\n' 2>/dev/null < "$p/environ" | grep -qxF "AGENTD_COMPUTER_ID=$1" || continue
  found=1; pid=${p#/proc/}; st=$(cat "$p/stat" 2>/dev/null) || continue; st=${st##*) }; set -- "$1" $st; pg=$4
  [ "$pg" -gt 1 ] 2>/dev/null && [ "$pg" != "$me" ] || { kill -9 "$pid" 2>/dev/null; continue; }
  case "$seen" in *" $pg "*) ;; *) seen="$seen$pg "; n=$((n+1));; esac
  kill -9 -"$pg" 2>/dev/null; kill -9 "$pid" 2>/dev/null
done; [ $found = 0 ] && break; sleep 0.02; done; echo $n`

// killAll kills the machine's processes on the host and says how many process groups it killed.
func (s *sshProvider) killAll(ctx context.Context, m *ComputerInfo) int {
	var out bytes.Buffer
	if err := s.call(ctx, m, nil, &out, sshKillScript, m.ID); err != nil {
		s.c.log.Warn("computers: killing a machine's processes on the ssh host", "computer", m.ID, "err", err)
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(out.String()))
	return n
}

// killLeftovers: after a restart every process of an ssh machine was started by the previous server.
func (s *sshProvider) killLeftovers(ctx context.Context, m *ComputerInfo) int {
	return s.killAll(ctx, m)
}

// ---- exec ----

// guestHost maps a clean guest path under /work or /tmp to the machine's directory on the host (as the
// local provider maps its workspace); ok is false outside them.
func guestHost(dir, guest string) (string, bool) {
	guest = path.Clean("/" + guest)
	for _, top := range []string{"/work", "/tmp"} {
		if guest == top || strings.HasPrefix(guest, top+"/") {
			return path.Join(dir, top[1:], strings.TrimPrefix(guest, top)), true
		}
	}
	return "", false
}

// hostGuest maps a path on the host back to the guest; ok is false outside the machine's directory.
func hostGuest(dir, host string) (string, bool) {
	for _, top := range []string{"work", "tmp"} {
		base := path.Join(dir, top)
		if host == base {
			return "/" + top, true
		}
		if rest, ok := strings.CutPrefix(host, base+"/"); ok {
			return "/" + top + "/" + rest, true
		}
	}
	return "", false
}

func (s *sshProvider) pidFile(dir string, p *procSpec) string {
	return dir + "/.exec-" + p.token + ".pid"
}

// execScript is the remote half of an exec: into the mapped cwd (which must still be inside once its
// links are followed), then, with only the machine's environment, a wrapper that records its process
// group and announces the end of the command with its exit code on both streams (as the engines' does).
func (s *sshProvider) execScript(dir, cwd string, m *ComputerInfo, p *procSpec) string {
	mk := strings.ReplaceAll(markerPrefix(p.token), "\x1e", `\036`)
	pf := shellQuote(s.pidFile(dir, p))
	wrapper := p.sizeFirst() + `echo $$ > ` + pf + `; "$@"; rc=$?; rm -f ` + pf +
		`; printf '` + mk + `%03d\036' "$rc"; printf '` + mk + `%03d\036' "$rc" >&2; exit $rc`
	d := shellQuote(dir)
	env := sshEnv(dir, m, p.env, p.tty || p.term != nil)
	return `cd -P -- ` + shellQuote(cwd) + ` 2>/dev/null || { [ -d ` + d + `/work ] || exit 255; echo "agentd: cwd ` + shellQuote(p.cwd) + ` does not exist in the machine" >&2; exit 1; }; ` +
		`case "$(pwd -P)" in ` + d + `/work|` + d + `/work/*|` + d + `/tmp|` + d + `/tmp/*) ;; *) echo "agentd: cwd resolves outside the workspace through a symlink" >&2; exit 1;; esac; ` +
		`exec env -i ` + strings.Join(env, " ") + ` /bin/sh -c ` + shellQuote(wrapper) + ` agentd ` + shellJoin(p.argv)
}

// sshEnv is the environment a machine's process starts with under `env -i`, quoted for the remote shell:
// PATH, HOME, TMPDIR (TERM with a terminal), the spec's, then extra, then AGENTD_COMPUTER_ID (last: the
// reaper finds the machine's processes by it, so nothing may override it).
func sshEnv(dir string, m *ComputerInfo, extra map[string]string, term bool) []string {
	env := []string{`PATH="$PATH"`, "HOME=" + shellQuote(dir+"/work"), "TMPDIR=" + shellQuote(dir+"/tmp")}
	if term {
		env = append(env, `TERM="${TERM:-xterm}"`)
	}
	for k, v := range m.Spec.Env {
		env = append(env, shellQuote(k+"="+v))
	}
	for k, v := range extra {
		env = append(env, shellQuote(k+"="+v))
	}
	return append(env, shellQuote("AGENTD_COMPUTER_ID="+m.ID))
}

func (s *sshProvider) command(ctx context.Context, m *ComputerInfo, p *procSpec) (*procHandle, error) {
	if p.user != "" {
		return nil, errorf(codeNotImplemented, "the ssh provider runs every command as %s and cannot run one as another user", s.user).withHint("omit user")
	}
	dir, err := s.dir(ctx, m)
	if err != nil {
		return nil, err
	}
	cwd, ok := guestHost(dir, p.cwd)
	if !ok {
		return nil, errorf(codeFSDenied, "path is outside the machine's writable area: %s", p.cwd).withHint("use a cwd under /work or /tmp")
	}
	if h, err := s.channelCommand(ctx, m, dir, cwd, p); h != nil || err != nil { // computers_ssh_chan.go
		return h, err
	}
	sock, err := s.connect(ctx, m)
	if err != nil {
		return nil, err
	}
	tty := "-T"
	if p.tty || p.term != nil {
		tty = "-tt"
	}
	cmd := s.cli(ctx, muxOpts(sock), []string{tty}, s.execScript(dir, cwd, m, p))
	cmd.Cancel = func() error {
		kctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.killTree(kctx, m, dir, p)
		return cmd.Process.Kill()
	}
	cmd.WaitDelay = execPipeGrace
	return &procHandle{cmd: cmd, endMarker: true}, nil
}

// killTree kills the exec's process group on the host, waiting briefly for its pid file in case the kill
// races the start.
func (s *sshProvider) killTree(ctx context.Context, m *ComputerInfo, dir string, p *procSpec) {
	script := `i=0; while [ ! -s "$1" ] && [ $i -lt 20 ]; do sleep 0.05; i=$((i+1)); done; ` +
		`p=$(cat "$1" 2>/dev/null) && [ -n "$p" ] && { kill -9 -"$p" 2>/dev/null || kill -9 "$p"; }; rm -f "$1"`
	s.call(ctx, m, nil, nil, script, s.pidFile(dir, p))
}

// ---- ports ----

// guestAddr is a local address whose connections the machine's master forwards to the port on the
// host's loopback (`ssh -O forward -L`, the -L of the master: it lives and dies with the connection, and
// a rebuilt connection forwards the same local port again).
func (s *sshProvider) guestAddr(ctx context.Context, m *ComputerInfo, port int) (string, error) {
	if !s.mux {
		return s.tunnel(ctx, m, port)
	}
	mm, err := s.master(ctx, m)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if addr := s.fwd[m.ID][port]; addr != "" {
		return addr, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0") // a free port for the master to listen on
	if err != nil {
		return "", errorf(codeComputerFailed, "cannot find a free host port: %v", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if err := s.forwardLocked(mm, port, addr); err != nil {
		return "", errorf(codeComputerFailed, "ssh did not forward port %d: %v", port, err).withHint("check AllowTcpForwarding on the host's sshd")
	}
	if s.fwd[m.ID] == nil {
		s.fwd[m.ID] = map[int]string{}
	}
	s.fwd[m.ID][port] = addr
	return addr, nil
}

// forwardLocked asks a master to forward addr to the guest port (s.mu held).
func (s *sshProvider) forwardLocked(mm *sshMaster, port int, addr string) error {
	ctx, cancel := context.WithTimeout(s.c.ctx, 15*time.Second)
	defer cancel()
	cmd := s.cli(ctx, []string{"-o", "ControlPath=" + mm.sock}, []string{"-O", "forward", "-L", addr + ":127.0.0.1:" + strconv.Itoa(port)}, "")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s", strings.TrimSpace(string(out)))
	}
	return nil
}

// dropForwards forgets a machine's forwards (its master's die with it) and ends its tunnels.
func (s *sshProvider) dropForwards(id string) {
	s.mu.Lock()
	delete(s.fwd, id)
	ts := s.tunnels[id]
	delete(s.tunnels, id)
	s.mu.Unlock()
	for _, t := range ts {
		t.close()
	}
}

// sshTunnel is one forwarded port without multiplexing: an `ssh -N -L addr:127.0.0.1:port` process this
// server owns, kept up by its keeper goroutine (started again on the same local address when the
// connection drops) until the machine stops, is destroyed, or the service closes (close: cancel, wait).
type sshTunnel struct {
	addr   string
	cancel context.CancelFunc
	ready  chan struct{} // closed when the first process forwards, or failed (err)
	err    error         // why the first process did not forward; set before ready closes
	done   chan struct{} // closed when the keeper has ended and its ssh was reaped
}

func (t *sshTunnel) close() {
	t.cancel()
	<-t.done
}

// sshTunnelRetry bounds the wait between two attempts of a tunnel whose connection dropped.
const sshTunnelRetry = 30 * time.Second

// tunnel is the local address of the machine's tunnel to a guest port, started when there is none.
func (s *sshProvider) tunnel(ctx context.Context, m *ComputerInfo, port int) (string, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return "", errorf(codeComputerFailed, "the server is shutting down").withHint("retry after the restart")
	}
	t := s.tunnels[m.ID][port]
	if t == nil {
		ln, err := net.Listen("tcp", "127.0.0.1:0") // a free port for ssh to listen on
		if err != nil {
			s.mu.Unlock()
			return "", errorf(codeComputerFailed, "cannot find a free host port: %v", err)
		}
		tctx, cancel := context.WithCancel(s.c.ctx)
		t = &sshTunnel{addr: ln.Addr().String(), cancel: cancel, ready: make(chan struct{}), done: make(chan struct{})}
		ln.Close()
		if s.tunnels[m.ID] == nil {
			s.tunnels[m.ID] = map[int]*sshTunnel{}
		}
		s.tunnels[m.ID][port] = t
		go s.keepTunnel(tctx, t, m.ID, port)
	}
	s.mu.Unlock()
	select {
	case <-t.ready:
	case <-ctx.Done():
		return "", errorf(codeComputerFailed, "forwarding port %d was cancelled", port).withHint("retry")
	}
	if t.err != nil {
		s.mu.Lock()
		if s.tunnels[m.ID][port] == t {
			delete(s.tunnels[m.ID], port)
		}
		s.mu.Unlock()
		msg := t.err.Error()
		return "", errorf(codeComputerFailed, "ssh did not forward port %d: %s", port, msg).withHint(s.sshHint(msg) + "; and check AllowTcpForwarding on the host's sshd")
	}
	return t.addr, nil
}

// keepTunnel runs the tunnel's ssh until ctx ends: the first attempt's outcome is the tunnel's (ready),
// a later drop is followed by a new process on the same address, a second later and then less often.
func (s *sshProvider) keepTunnel(ctx context.Context, t *sshTunnel, id string, port int) {
	defer close(t.done)
	wait := time.Second
	for first := true; ; first = false {
		forwarded, err := s.runTunnel(ctx, t, port, first)
		if first && !forwarded {
			t.err = err
			close(t.ready)
			return
		}
		if ctx.Err() != nil {
			return
		}
		s.c.log.Warn("computers: an ssh port tunnel dropped; reconnecting", "computer", id, "port", port, "err", err)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return
		}
		wait = min(2*wait, sshTunnelRetry)
	}
}

// runTunnel runs one `ssh -N -L` until it ends (first: closing t.ready once it forwards, and saying
// whether it did). It forwards when its local address accepts: ssh listens only once the connection is
// authenticated.
func (s *sshProvider) runTunnel(ctx context.Context, t *sshTunnel, port int, first bool) (bool, error) {
	cmd := s.cli(ctx, []string{"-o", "ControlMaster=no", "-o", "ControlPath=none", "-o", "ExitOnForwardFailure=yes"},
		[]string{"-N", "-L", t.addr + ":127.0.0.1:" + strconv.Itoa(port)}, "")
	var buf bytes.Buffer
	cmd.Stderr = &limitedBuffer{b: &buf, max: 16 << 10}
	if err := cmd.Start(); err != nil {
		return false, fmt.Errorf("cannot start ssh: %v", err)
	}
	exited := make(chan struct{})
	var werr error
	go func() { defer close(exited); werr = cmd.Wait() }()
	said := func() error {
		if msg := strings.TrimSpace(buf.String()); msg != "" {
			return errors.New(s.explain(msg))
		}
		return fmt.Errorf("ssh ended: %v", werr)
	}
	if first {
		deadline := time.NewTimer(sshMasterWait)
		defer deadline.Stop()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for up := false; !up; {
			select {
			case <-exited:
				return false, said()
			case <-deadline.C:
				cmd.Process.Kill()
				<-exited
				return false, fmt.Errorf("ssh to %s did not connect within %s", s.target(), sshMasterWait)
			case <-tick.C:
				if c, err := net.DialTimeout("tcp", t.addr, time.Second); err == nil {
					c.Close()
					up = true
				}
			}
		}
		close(t.ready)
	}
	<-exited
	return true, said()
}

// lostExec explains an exec (cmd, its ssh) that ended without its end marker when the cause is the
// connection: its master died under it, or without multiplexing its own connection failed (the server
// restarted, the network dropped, the host key changed). nil: not the connection. runProc asks it
// (computers_exec.go).
func (s *sshProvider) lostExec(ctx context.Context, m *ComputerInfo, cmd *exec.Cmd) error {
	lost := func(ssh string) error {
		return errorf(codeExecFailed, "exec failed in computer %s: the ssh connection to %s dropped during the command (ssh: %s); it may still be running on the host, and the next call reconnects",
			m.ID, s.target(), ssh).withHint("run it again if it is safe to repeat").withDetail("computerId", m.ID)
	}
	if !s.mux {
		if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 255 {
			return nil // ssh's own failures are 255 (a cwd in a vanished machine too: the status says which)
		}
		st, err := s.status(ctx, m) // over a connection of its own: what is wrong with the host now?
		var se *sshError
		switch {
		case err == nil && st == "missing":
			return nil // the machine is gone: runProc says so
		case errors.As(err, &se) && (strings.Contains(se.stderr, "host key") || strings.Contains(se.stderr, "refused the key")):
			return s.failed("cannot reach the machine", err)
		case err != nil:
			return lost(lastSSHLine(err.Error()))
		}
		return lost("its connection closed")
	}
	s.mu.Lock()
	mm := s.masters[m.ID]
	s.mu.Unlock()
	if mm == nil {
		return nil
	}
	select { // the session ends as its master goes: give the master a moment to be reaped
	case <-mm.done:
	case <-time.After(time.Second):
		return nil
	}
	return lost(lastSSHLine(strings.TrimSpace(mm.buf.String())))
}
