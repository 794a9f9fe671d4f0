// computers_sandbox.go — the `sandbox` provider: kernel namespaces through bubblewrap (`bwrap`), no daemon.
//
// Entry points: newSandboxProvider; machineHelperMain (the `machine-helper` subcommand's flags: the
// limits and the process watchdog the sandbox asks for).
//
// A machine is a directory $AGENT_HOME/sandboxes/<id>/{work,tmp,etc} and, while it is used, ONE
// long-lived bwrap whose first process is agentd's own helper (computers_helper.go) speaking the exec
// channel on bwrap's stdin and stdout (computers_channel.go): every exec and file operation enters the
// same namespaces, so a server started by one exec is reachable by the next. The bwrap runs with new
// user, mount, pid, ipc and uts namespaces (and network with `network.mode` none and egress, whose one
// way out is agentd's proxy over the channel, computers_egress.go; full gets a filtered namespace of its own
// when agentd is root, computers_sandboxnet.go, and shares the host's otherwise), uid/gid 1000 (the
// host's sandboxHostID, not its root, when agentd is root: computers_sandbox_userns.go), every
// capability dropped, no new privileges, --die-with-parent and
// --new-session. Its root is an empty read-only tmpfs holding the host's /usr, /bin, /sbin, /lib* and the
// few /etc files a program needs, read-only; a synthesized passwd and group; /work and /tmp as tmpfs of
// diskMb and sandboxTmpMB (bounded in total, emptied when the bwrap ends), or with persist /work the host
// directory <id>/work (an image of diskMb mounted over it where agentd can: computers_sandbox_disk.go);
// the spec's mounts bound from descriptors opened without following links (openMountSources); new /proc and
// /dev. No host home, no $AGENT_HOME, no sockets. The environment is built from an allow-list like local's.
// Limits: where agentd can write a cgroup for the machine (computers_sandbox_cgroup.go), the bwrap starts
// in one bounding memoryMb, cpus and sandboxNproc tasks for the whole machine. Always: the helper sets
// RLIMIT_DATA (memoryMb), RLIMIT_FSIZE (diskMb, per file), RLIMIT_CPU and RLIMIT_NPROC on itself, so every process
// inherits them, and kills everything in the machine when its pid namespace holds more than
// sandboxMaxProcs processes (RLIMIT_NPROC does not bind processes whose host uid is root).
//
// Lifecycle: the bwrap is the machine's exec channel: opened at create and start, reopened on the next
// use after it died; closed (the helper kills what it started, the namespaces go) at stop, destroy and
// server shutdown, where the machines' cgroups, full-mode networks and disk images are removed or unmounted
// too (close). A restarted server finds the directories and keeps their records running: the processes
// of the previous server are gone (they died with it), and so are a non-persist machine's /work and
// /tmp (its tmpfs); a persist machine's files are there, and the first exec starts a new bwrap. Packages, an image, another user and a tty are refused, not ignored.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
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
)

const (
	sandboxMaxProcs  = 512      // the watchdog's bound on the processes of one machine
	sandboxNproc     = 1024     // RLIMIT_NPROC: the kernel's bound where it applies (agentd not root)
	sandboxCPUSecs   = 6 * 3600 // RLIMIT_CPU per process
	sandboxShmBytes  = 64 << 20
	sandboxMinDataMB = 512         // RLIMIT_DATA's floor, whatever memoryMb says    // /dev/shm, a tmpfs
	sandboxUser      = "1000:1000" // the one uid and gid mapped into the machine
	sandboxTmpMB     = 512         // the machine's /tmp, a tmpfs of this size (docker's too)
)

type sandboxProvider struct {
	c    *computerService
	root string // $AGENT_HOME/sandboxes

	mu      sync.Mutex
	bwrap   string     // the bwrap binary, found by probe
	newOpts bool       // bwrap ≥ 0.7 (--disable-userns, --size)
	bindFD  bool       // bwrap binds an opened descriptor (--bind-fd): the only way mounts are made
	cg      cgroupHost // where the machines' cgroups go, found by probe (computers_sandbox_cgroup.go)

	netMu         sync.Mutex  // orders this server's full machines' network setups (computers_sandboxnet.go)
	netFilterable func() bool // can full machines get a filtered network here (sandboxNetFilterable; tests swap it)
}

func newSandboxProvider(c *computerService) *sandboxProvider {
	return &sandboxProvider{c: c, root: filepath.Join(c.home, "sandboxes"), netFilterable: sandboxNetFilterable}
}

func (s *sandboxProvider) meta() providerMeta {
	return providerMeta{name: "sandbox", description: "bubblewrap namespaces on this host (no daemon; the host's /usr, read-only)",
		priority: 50, isolated: true, isolationKind: "namespaces"}
}

func (s *sandboxProvider) probe(ctx context.Context) probeResult {
	if runtime.GOOS != "linux" {
		return probeResult{reason: "the sandbox needs Linux namespaces", hint: "use provider docker or podman on this system"}
	}
	bw, err := exec.LookPath("bwrap")
	if err != nil {
		return probeResult{reason: "bubblewrap (bwrap) is not installed", hint: "apt-get install bubblewrap (or dnf install bubblewrap)"}
	}
	if s.c.helper == "" {
		return probeResult{reason: "agentd cannot run its helper in the sandbox: " + s.c.helperNote,
			hint: "run a Linux build of agentd (go build, static or cgo) with execChannel left on"}
	}
	if reason, hint := userNamespacesOff(); reason != "" {
		return probeResult{reason: reason, hint: hint}
	}
	if err := os.MkdirAll(s.root, 0o700); err != nil {
		return probeResult{reason: fmt.Sprintf("cannot create %s: %v", s.root, err), hint: "make AGENT_HOME writable"}
	}
	ver, _ := bwrapOutput(ctx, bw, "--version")
	help, _ := bwrapOutput(ctx, bw, "--help")
	s.mu.Lock()
	s.bwrap, s.newOpts = bw, strings.Contains(string(help), "--disable-userns") && strings.Contains(string(help), "--size")
	s.bindFD = strings.Contains(string(help), "--bind-fd")
	s.mu.Unlock()
	// A real trial: the namespaces this provider asks for, around /bin/true.
	trial := append(s.nsArgs(ComputerSpec{Network: NetworkSpec{Mode: "none"}}, false), s.systemArgs()...)
	trial = append(trial, "--proc", "/proc", "--dev", "/dev", "--", "/bin/true")
	if out, err := bwrapOutput(ctx, bw, trial...); err != nil {
		msg := firstLine(string(out))
		if msg == "" {
			msg = err.Error()
		}
		return probeResult{reason: "bwrap cannot create a sandbox here: " + msg,
			hint: "user namespaces may be disabled: sysctl -w user.max_user_namespaces=15000 kernel.unprivileged_userns_clone=1; inside a container, run it with --security-opt seccomp=unconfined or use provider docker"}
	}
	// Where the machines' cgroups go is found once: a later probe that failed its trial (another server
	// removing the shared parent at that moment) must not make this one forget, and so leave, the
	// cgroups its machines have.
	s.mu.Lock()
	found := s.cg.version != 0
	s.mu.Unlock()
	if !found {
		cg := detectCgroups(hostCgroupEnv(), s.c.owner).tried()
		s.mu.Lock()
		if s.cg.version == 0 {
			s.cg = cg
		}
		s.mu.Unlock()
	}
	return probeResult{available: true, version: strings.TrimPrefix(strings.TrimSpace(string(ver)), "bubblewrap ")}
}

func (s *sandboxProvider) cgroups() cgroupHost {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cg
}

// limitsNote says, for the doctor, which limits bind a machine here: cgroups or rlimits alone.
func (s *sandboxProvider) limitsNote() string {
	disk := fmt.Sprintf("disk: /work (diskMb) and /tmp (%d MB) are tmpfs bounded in total, emptied at stop; with persist, /work is an ext4 image of diskMb loop-mounted over a host directory", sandboxTmpMB)
	if ok, no := loopDisks(); !ok {
		disk += fmt.Sprintf("; with persist, /work is a host directory bounded per file only (diskMb), NOT in total: %s", no)
	}
	if !s.canSizeTmpfs() {
		disk = "disk: NOT bounded in total (this bwrap cannot size a tmpfs: install bubblewrap 0.7 or later): diskMb bounds each file only"
	}
	return s.cgroups().note() + "; " + disk
}

func (s *sandboxProvider) canSizeTmpfs() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.newOpts
}

// bwrapOutput runs one short bwrap and returns its combined output. WaitDelay bounds the wait for its
// pipes: a sandboxed descendant that outlives a killed bwrap must not hang the probe (and with it the
// reconciler and shutdown) forever.
func bwrapOutput(ctx context.Context, bw string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, bw, args...)
	cmd.WaitDelay = 2 * time.Second
	out, err := cmd.CombinedOutput()
	if errors.Is(err, exec.ErrWaitDelay) {
		// bwrap itself succeeded (Wait returns ErrWaitDelay only in place of nil): a descendant held the
		// pipe past WaitDelay, as a loaded host's sandbox init can; the trial did not fail.
		err = nil
	}
	return out, err
}

func (s *sandboxProvider) supports(sp ComputerSpec) error {
	refuse := func(what, hint string) error {
		return errorf(codeNotImplemented, "the sandbox provider cannot honour %s", what).withHint(hint)
	}
	switch {
	case len(sp.Packages) > 0:
		return refuse("packages", "the sandbox runs this host's /usr read-only: install them on the host, or use provider docker or podman")
	case sp.Image != "":
		return refuse("an image", "the sandbox runs this host's userland; use provider docker or podman for an image")
	case sp.User != "" && sp.User != sandboxUser && sp.User != "1000":
		return refuse("user", "the sandbox has one user, 1000:1000; omit user")
	case sp.Workdir != "/work" && !strings.HasPrefix(sp.Workdir, "/work/") && sp.Workdir != "/tmp" && !strings.HasPrefix(sp.Workdir, "/tmp/"):
		return refuse("a workdir outside /work and /tmp", "use a workdir under /work")
	case len(sp.Mounts) > 0 && !s.canBindFD():
		return refuse("mounts with this bwrap", "install a bubblewrap with --bind-fd (0.8 or later): agentd binds a mount from the directory it checked, never again from its path")
	case sp.Network.Mode == "full" && len(sp.Network.Deny) > 0 && !s.netFilterable():
		// Without root, full is the host's own network, with nothing in between to drop what deny names.
		return refuse("network.deny in mode full without root", "use mode egress (deny is enforced by agentd's proxy there), run agentd as root with iptables, or use provider docker or podman")
	}
	return nil
}

func (s *sandboxProvider) canBindFD() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bindFD
}

func (s *sandboxProvider) dir(m *ComputerInfo) string { return filepath.Join(s.root, m.ID) }

// nsArgs are the namespaces and the identity of a machine. remap: agentd is root and maps the
// namespace itself (computers_sandbox_userns.go); the helper starts as 0 with CAP_SETUID, CAP_SETGID and
// CAP_SETPCAP alone (bwrap empties the bounding set of the others) and drops them, and to 1000, before
// anything runs.
func (s *sandboxProvider) nsArgs(sp ComputerSpec, remap bool) []string {
	a := []string{"--die-with-parent", "--new-session", "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
		"--unshare-cgroup-try", "--hostname", "sandbox"}
	if remap { // the helper keeps only what it needs to drop to 1000:1000
		a = append(a, "--uid", "0", "--gid", "0", "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP")
	} else {
		a = append(a, "--uid", "1000", "--gid", "1000", "--cap-drop", "ALL")
		s.mu.Lock()
		if s.newOpts {
			a = append(a, "--disable-userns") // no nested user namespace: the kernel surface stays small
		}
		s.mu.Unlock()
	}
	if noRoute(sp) { // egress reaches out only through the proxy over the channel (computers_egress.go)
		a = append(a, "--unshare-net")
	}
	return a
}

// sandboxEtc are the host's /etc entries a program needs (names, TLS roots, the loader's cache), read-only.
var sandboxEtc = []string{"resolv.conf", "hosts", "host.conf", "nsswitch.conf", "gai.conf", "protocols", "services",
	"ssl", "ca-certificates", "ca-certificates.conf", "pki", "crypto-policies", "alternatives", "ld.so.cache", "ld.so.conf",
	"ld.so.conf.d", "localtime", "timezone", "mime.types", "os-release", "debian_version", "inputrc", "bash.bashrc", "profile"}

// systemArgs bind the host's system directories read-only (a merged-/usr link stays a link).
func (s *sandboxProvider) systemArgs() []string {
	var a []string
	for _, d := range []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
		case fi.Mode()&fs.ModeSymlink != 0:
			if target, err := os.Readlink(d); err == nil {
				a = append(a, "--symlink", target, d)
			}
		case fi.IsDir():
			a = append(a, "--ro-bind", d, d)
		}
	}
	a = append(a, "--dir", "/etc")
	for _, e := range sandboxEtc {
		a = append(a, "--ro-bind-try", "/etc/"+e, "/etc/"+e)
	}
	if py, _ := filepath.Glob("/etc/python3*"); len(py) > 0 {
		for _, p := range py {
			a = append(a, "--ro-bind-try", p, p)
		}
	}
	return a
}

// tmpfsWork: the machine's /work and /tmp are tmpfs of their own, bounded in total (bwrap's --size),
// unless persist keeps /work in the host directory (or this bwrap cannot size a tmpfs): diskMb then
// bounds each file only (RLIMIT_FSIZE), which diskNote says in the machine's info and the doctor's.
func (s *sandboxProvider) tmpfsWork(sp ComputerSpec) bool {
	return !sp.Persist && s.canSizeTmpfs()
}

// diskNote says how the machine's disk is bounded (ComputerInfo.disk).
func (s *sandboxProvider) diskNote(m *ComputerInfo) string {
	if s.tmpfsWork(m.Spec) {
		return fmt.Sprintf("/work is a tmpfs of %d MB and /tmp one of %d MB (memory, counted in the machine's memory cgroup where it has one); both are emptied when the machine stops or the server does", m.Spec.DiskMB, sandboxTmpMB)
	}
	if _, err := os.Stat(s.diskImage(m)); err == nil && m.Spec.Persist {
		return fmt.Sprintf("/work is an ext4 image of %d MB, loop-mounted over the machine's host directory while it runs (kept across stops); /tmp a tmpfs of %d MB", m.Spec.DiskMB, sandboxTmpMB)
	}
	why := "this bwrap cannot size a tmpfs (--size, bubblewrap 0.7 or later)"
	if m.Spec.Persist {
		why = "persist keeps /work in a host directory and "
		if ok, no := loopDisks(); !ok {
			why += no
		} else {
			why += "the machine's files were there before agentd bounded persist machines"
		}
	}
	return fmt.Sprintf("NOT bounded in total: %s, so diskMb (%d MB) bounds each file, not their sum: the machine can fill the host's disk; use docker or podman for a bounded persistent /work", why, m.Spec.DiskMB)
}

// bwrapArgs is the whole machine: namespaces, the filesystem, then the helper with the limits. A mount
// is bound from the descriptor helperCmd opened its source on, never from its path: a directory swapped
// for a symlink between that open and bwrap's mount cannot redirect it (issue 24).
func (s *sandboxProvider) bwrapArgs(m *ComputerInfo) []string {
	sp, dir := m.Spec, s.dir(m)
	a := append(s.nsArgs(sp, s.remapped()), s.systemArgs()...)
	if s.filteredFull(sp) {
		if r := sandboxResolvConf(); r != "" {
			a = append(a, "--ro-bind", r, "/etc/resolv.conf")
		}
	}
	a = append(a, "--ro-bind", filepath.Join(dir, "etc", "passwd"), "/etc/passwd", "--ro-bind", filepath.Join(dir, "etc", "group"), "/etc/group")
	// /work and /tmp bounded in total, as docker's: tmpfs of diskMb and sandboxTmpMB (mode 1777, the
	// machine's user writes there whoever owns the mount), gone when the machine's bwrap ends; the workdir
	// is made again in /work at every start. With persist, /work is the host directory (an image of
	// diskMb mounted over it where agentd can: computers_sandbox_disk.go).
	if s.tmpfsWork(sp) {
		a = append(a, "--perms", "1777", "--size", strconv.FormatInt(int64(sp.DiskMB)<<20, 10), "--tmpfs", "/work")
	} else {
		a = append(a, "--bind", filepath.Join(dir, "work"), "/work")
	}
	if s.canSizeTmpfs() {
		a = append(a, "--perms", "1777", "--size", strconv.FormatInt(sandboxTmpMB<<20, 10), "--tmpfs", "/tmp")
		if m.Workdir != "/work" && m.Workdir != "/tmp" && (s.tmpfsWork(sp) || strings.HasPrefix(m.Workdir, "/tmp/")) {
			a = append(a, "--perms", "1777", "--dir", m.Workdir) // in a tmpfs: made again at every start
		}
	} else {
		a = append(a, "--bind", filepath.Join(dir, "tmp"), "/tmp")
	}
	a = append(a, "--dir", "/var", "--symlink", "../tmp", "/var/tmp", "--proc", "/proc", "--dev", "/dev")
	s.mu.Lock()
	if s.newOpts { // a bounded /dev/shm, and /dev itself read-only (it is a tmpfs: writes there are memory)
		a = append(a, "--size", strconv.Itoa(sandboxShmBytes), "--tmpfs", "/dev/shm", "--remount-ro", "/dev")
	}
	s.mu.Unlock()
	for i, mt := range sp.Mounts { // each source opened by helperCmd (openMountSources), bound by its descriptor
		fd := strconv.Itoa(sandboxMountFD + i)
		if mt.Readonly == nil || *mt.Readonly {
			a = append(a, "--ro-bind-fd", fd, mt.Target)
		} else {
			a = append(a, "--bind-fd", fd, mt.Target)
		}
	}
	// The helper lives under the same data limit; the Go runtime needs a few hundred MB of it to grow.
	data := max(int64(sp.MemoryMB), sandboxMinDataMB) << 20
	limits := fmt.Sprintf("nproc=%d,data=%d,cpu=%d,fsize=%d", sandboxNproc, data, sandboxCPUSecs, int64(sp.DiskMB)<<20)
	// /.agentd is made 0755 (--dir), not bwrap's 0700 for a bind's parent: the helper executes itself
	// again after its drop to the machine's user (helperBecome), as every docker machine can read it too.
	a = append(a, "--dir", path.Dir(helperInMachine), "--ro-bind", s.c.helper, helperInMachine, "--chdir", "/", "--remount-ro", "/",
		"--", helperInMachine, "machine-helper", "--limits", limits, "--max-procs", strconv.Itoa(sandboxMaxProcs))
	if s.remapped() {
		a = append(a, "--become", sandboxUser)
	}
	return a
}

// env is the machine's environment: fixed names, the allow-list of local's (no PATH: the host's may
// name directories the machine does not have), and the spec's.
func (s *sandboxProvider) env(m *ComputerInfo) []string {
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/work", "USER=agent", "LOGNAME=agent", "SHELL=/bin/sh"}
	for _, k := range localEnvAllow {
		if v := s.c.getenv(k); v != "" && !slices.Contains([]string{"PATH", "USER", "LOGNAME", "SHELL"}, k) {
			env = append(env, k+"="+v)
		}
	}
	for k, v := range egressEnv(m.Spec) {
		env = append(env, k+"="+v)
	}
	for k, v := range m.Spec.Env {
		env = append(env, k+"="+v)
	}
	return env
}

// helperCmd is the machine itself: one bwrap whose first process is the helper (through nsenter, in the
// machine's network namespace, for a filtered full machine). Where agentd maps the machine's user
// namespace or has a cgroup for it, bwrap also waits for agentd at two points (startHelper).
func (s *sandboxProvider) helperCmd(ctx context.Context, m *ComputerInfo) *exec.Cmd {
	s.mu.Lock()
	bw := s.bwrap
	s.mu.Unlock()
	if bw == "" {
		bw = "bwrap"
	}
	var errs []error
	if err := s.mountDisk(ctx, m); err != nil { // a persist machine's image (computers_sandbox_disk.go)
		errs = append(errs, err)
	}
	procs, err := s.cgroups().create(m.ID, m.Spec.MemoryMB, m.Spec.CPUs, sandboxNproc)
	if err != nil {
		errs = append(errs, fmt.Errorf("cannot give the machine its cgroup: %v", err))
	}
	// The mount sources, judged and opened again now (every start and every reopen of the channel), go to
	// bwrap as descriptors sandboxMountFD…; openChannel closes our copies once bwrap has its own.
	ms, err := s.c.openMountSources(m.Spec)
	if err != nil {
		errs = append(errs, err)
	}
	var fds bwrapFiles // bwrap's descriptors (computers_sandbox_userns.go); startHelper adds its waits' ends
	for _, src := range ms {
		fds.mounts = append(fds.mounts, src.f)
	}
	argv := append(append([]string{bw}, s.startFlags(s.remapped(), len(procs) > 0)...), s.bwrapArgs(m)...)
	if s.filteredFull(m.Spec) {
		// nsenter joins the machine's namespace and execs bwrap, which stays the channel's process.
		nsPath, err := s.netUp(ctx, m)
		if err != nil {
			errs = append(errs, fmt.Errorf("cannot give the machine its filtered network: %v", err))
		}
		argv = append([]string{"nsenter", "--net=" + nsPath, "--"}, argv...)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = s.env(m)
	cmd.ExtraFiles = fds.files()
	if len(errs) > 0 {
		cmd.Err = errors.Join(errs...) // Start fails with it
	}
	return cmd
}

func (s *sandboxProvider) create(ctx context.Context, m *ComputerInfo) error {
	if err := s.prepare(m); err != nil {
		return err
	}
	if err := s.mountDisk(ctx, m); err != nil { // before the workdir is made in it
		return errorf(codeComputerFailed, "%v", err).withHint("check mkfs.ext4 and loop devices, or create the machine without persist")
	}
	// A persist machine's workdir is made once in its host directory (or image); a tmpfs one's by bwrap.
	if hp, ok := s.hostPath(m, m.Workdir); ok && !s.tmpfsWork(m.Spec) && hp != filepath.Join(s.dir(m), "work") && hp != filepath.Join(s.dir(m), "tmp") {
		os.MkdirAll(hp, 0o755)
		top := filepath.Join(s.dir(m), strings.Split(strings.TrimPrefix(path.Clean(m.Workdir), "/"), "/")[0])
		for d := hp; len(d) > len(top); d = filepath.Dir(d) { // what MkdirAll made, root's until now
			if err := s.ownForMachine(d); err != nil {
				return errorf(codeComputerFailed, "cannot give the workdir to the sandbox's user: %v", err)
			}
		}
	}
	return s.open(ctx, m)
}

// prepare makes the machine's directories and its passwd and group (again after a restart: cheap).
func (s *sandboxProvider) prepare(m *ComputerInfo) error {
	dir := s.dir(m)
	for _, d := range []string{"work", "tmp", "etc"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return errorf(codeComputerFailed, "cannot create the sandbox's directories: %v", err).withHint("make AGENT_HOME writable")
		}
		if d != "etc" {
			if err := s.ownForMachine(filepath.Join(dir, d)); err != nil {
				return errorf(codeComputerFailed, "cannot give the sandbox's /%s to its user: %v", d, err)
			}
		}
	}
	files := map[string]string{
		"passwd": "root:x:0:0:root:/nonexistent:/usr/sbin/nologin\nagent:x:1000:1000:agent:/work:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		"group":  "root:x:0:\nagent:x:1000:\nnogroup:x:65534:\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, "etc", name), []byte(body), 0o644); err != nil {
			return errorf(codeComputerFailed, "cannot write the sandbox's /etc/%s: %v", name, err).withHint("make AGENT_HOME writable")
		}
	}
	return nil
}

// open starts the machine's bwrap now (create, start) so a failure is the caller's answer.
func (s *sandboxProvider) open(ctx context.Context, m *ComputerInfo) error {
	if _, err := s.c.channelErr(ctx, s, m); err != nil {
		return errorf(codeComputerFailed, "bwrap could not start the machine: %v", err).withHint("check the sandbox provider in GET /v1/doctor")
	}
	return nil
}

// hostPath maps a clean guest path under /work or /tmp to the host.
func (s *sandboxProvider) hostPath(m *ComputerInfo, guest string) (string, bool) {
	guest = path.Clean("/" + guest)
	for _, top := range []string{"/work", "/tmp"} {
		if guest == top || strings.HasPrefix(guest, top+"/") {
			return filepath.Join(s.dir(m), top[1:], filepath.FromSlash(strings.TrimPrefix(guest, top))), true
		}
	}
	return "", false
}

func (s *sandboxProvider) exists(m *ComputerInfo) bool {
	_, err := os.Stat(filepath.Join(s.dir(m), "work"))
	return err == nil
}

func (s *sandboxProvider) start(ctx context.Context, m *ComputerInfo) error {
	if !s.exists(m) {
		return errorf(codeComputerNotFound, "the workspace of computer %s is gone", m.ID).withHint("delete the computer and create a new one")
	}
	if err := s.prepare(m); err != nil {
		return err
	}
	ms, err := s.c.openMountSources(m.Spec) // a clear refusal now; helperCmd opens them again to bind them
	if err != nil {
		return err
	}
	closeMountSources(ms)
	return s.open(ctx, m)
}

// closeMachine ends the machine's bwrap (a destroy behind the service's back must not leave it running).
func (s *sandboxProvider) closeMachine(m *ComputerInfo) {
	s.c.mu.Lock()
	rt := s.c.rt[m.ID]
	s.c.mu.Unlock()
	if rt != nil {
		s.c.closeChannel(rt)
	}
}

// close runs at server shutdown, after every channel was closed (the machines' bwraps are gone): what
// they leave on the host, their cgroups and full machines' namespaces and rules, goes too; the next
// start of a machine makes them again.
func (s *sandboxProvider) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.sweepNets(ctx, s.netIDs(), nil)
	s.cgroups().sweep(s.cgroups().list(), nil)
	s.unmountDisks()
}

func (s *sandboxProvider) stop(ctx context.Context, m *ComputerInfo) error {
	s.closeMachine(m)
	s.netDown(ctx, m.ID)
	if err := s.cgroups().remove(m.ID); err != nil {
		return errorf(codeComputerFailed, "%v", err)
	}
	if err := s.unmountDisk(m); err != nil {
		return errorf(codeComputerFailed, "%v", err)
	}
	return nil
}

func (s *sandboxProvider) destroy(ctx context.Context, m *ComputerInfo) error {
	s.closeMachine(m)
	s.netDown(ctx, m.ID)
	if err := s.cgroups().remove(m.ID); err != nil {
		return errorf(codeComputerFailed, "%v", err)
	}
	if err := s.unmountDisk(m); err != nil { // never a RemoveAll into a mounted image
		return errorf(codeComputerFailed, "%v", err)
	}
	if err := os.RemoveAll(s.dir(m)); err != nil {
		return errorf(codeComputerFailed, "cannot remove the sandbox's directory: %v", err)
	}
	return nil
}

func (s *sandboxProvider) status(ctx context.Context, m *ComputerInfo) (string, error) {
	switch {
	case !s.exists(m):
		return "missing", nil
	case m.State == stateStopped:
		return "stopped", nil
	}
	return "running", nil
}

// owned lists the machines' directories; one is "running" unless its record says stopped.
func (s *sandboxProvider) owned(ctx context.Context) (map[string]bool, error) {
	nets, cgs := s.netIDs(), s.cgroups().list() // before the directories (cgroupHost.list)
	dirs, err := machineDirs(s.root)
	if err == nil {
		s.sweepNets(ctx, nets, dirs)
		s.cgroups().sweep(cgs, dirs)
	}
	return dirs, err
}

func (s *sandboxProvider) command(ctx context.Context, m *ComputerInfo, p *procSpec) (*procHandle, error) {
	if p.tty {
		return nil, errorf(codeNotImplemented, "the sandbox provider has no tty").withHint("omit tty, or use provider docker or podman")
	}
	if p.user != "" && p.user != sandboxUser && p.user != "1000" {
		return nil, errorf(codeNotImplemented, "the sandbox provider cannot run a command as another user").
			withHint("omit user (the sandbox has one user, 1000:1000), or use provider docker or podman")
	}
	if !s.exists(m) {
		return nil, s.c.markGone(ctx, m)
	}
	ch, err := s.c.channelErr(ctx, s, m)
	if err != nil {
		return nil, errorf(codeExecFailed, "the sandbox of computer %s could not start: %v", m.ID, err).
			withHint("check the sandbox provider in GET /v1/doctor").withDetail("computerId", m.ID)
	}
	return &procHandle{remote: ch, req: chanStart{Argv: p.argv, Cwd: p.cwd, Env: p.env, Token: p.token}}, nil
}

func (s *sandboxProvider) fs(m *ComputerInfo) machineFS { return &engineFS{c: s.c, host: s, m: m} }

// hostNetwork: a sandbox shares the host's network only in mode full without root; none and egress get
// an empty one, and a filtered full one of its own.
func (s *sandboxProvider) hostNetwork(m *ComputerInfo) bool {
	return !noRoute(m.Spec) && !s.filteredFull(m.Spec)
}

// killLeftovers: nothing of a previous server's sandbox survives it (its bwrap died with it).
func (s *sandboxProvider) killLeftovers(ctx context.Context, m *ComputerInfo) int { return 0 }

// machineHelperMain is `agentd machine-helper [--limits k=v,...] [--max-procs N] [--become uid:gid] [--pid-files PREFIX]`: the
// sandbox passes its limits (and, as root, the user to become, which executes the helper once more with
// --became: helperBecome); docker and podman pass nothing (the engine applies theirs); ssh passes the
// machine's own --pid-files (computers_ssh_chan.go).
func machineHelperMain(args []string, stdin io.Reader, stdout io.Writer) error {
	fl := flag.NewFlagSet("machine-helper", flag.ContinueOnError)
	fl.SetOutput(io.Discard)
	limits := fl.String("limits", "", "rlimits to set: nproc=,data=,cpu=,fsize=")
	maxProcs := fl.Int("max-procs", 0, "kill everything when the pid namespace holds more processes")
	become := fl.String("become", "", "uid:gid to drop to (from 0, with bwrap's capabilities) before anything runs")
	became := fl.String("became", "", "uid:gid the helper dropped to before it executed itself again (checked)")
	pidFiles := fl.String("pid-files", "", "the prefix of the files recording process groups (default /tmp/.agentd-chan-)")
	if err := fl.Parse(args); err != nil {
		return errorf(codeSpecInvalid, "machine-helper: %v", err)
	}
	if err := applyHelperLimits(*limits); err != nil {
		return err
	}
	switch { // computers_sandbox_userns.go, computers_sandbox_linux.go
	case *become != "":
		uid, gid, err := parseBecome(*become)
		if err != nil {
			return err
		}
		return errorf(codeComputerFailed, "machine-helper: %v", helperBecome(uid, gid, append([]string{"machine-helper"}, args...))) // only on failure
	case *became != "":
		uid, gid, err := parseBecome(*became)
		if err != nil {
			return err
		}
		if err := helperBecame(uid, gid); err != nil {
			return errorf(codeComputerFailed, "machine-helper: %v", err)
		}
	}
	if *maxProcs > 0 {
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() { defer close(done); watchProcesses(*maxProcs, stop) }()
		defer func() { close(stop); <-done }()
	}
	return runMachineHelper(stdin, stdout, *pidFiles)
}
