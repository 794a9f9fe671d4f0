// computers_engine.go — the `docker` and `podman` providers: one code path, the same argv, through ONE CLI helper.
//
// Entry points: newEngineProvider(name, priority, service). Every call to the engine goes through
// engineProvider.cli (exec.CommandContext, WaitDelay, explicit argv) and, when the output is wanted,
// engineProvider.call, which carries the engine's stderr into the error.
//
// Rules (DESIGN §4): containers are labelled agentd.id / agentd.provider / agentd.owner, run with
// --cap-drop ALL, no-new-privileges, a pids limit, --init, a read-only root (writable only when packages
// must be installed) with tmpfs /tmp and /run, /work as a tmpfs (or the named volume agentd-<id> with
// persist), cpu and memory limits, -u 1000:1000 unless `user`, and `sleep infinity`. Execs and files go
// over the machine's exec channel, else through the per-call fallback (computers_percall.go: one
// `docker exec` per call; files then by shell scripts inside the machine: readlink -m, cat, find, tar).
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

type engineProvider struct {
	name       string // docker | podman
	prio       int
	c          *computerService
	filterable func() bool // can full-mode machines be filtered here (fullFilterable; a test's own)
}

func newEngineProvider(name string, prio int, c *computerService) *engineProvider {
	return &engineProvider{name: name, prio: prio, c: c, filterable: fullFilterable}
}

func (e *engineProvider) meta() providerMeta {
	desc := "Docker containers (kernel isolation)"
	if e.name == "podman" {
		desc = "Podman containers (kernel isolation)"
	}
	return providerMeta{name: e.name, description: desc, priority: e.prio, isolated: true, isolationKind: "kernel"}
}

// cli is THE helper: every engine call is built here.
func (e *engineProvider) cli(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, e.name, args...)
	cmd.WaitDelay = 2 * time.Second
	dieWithParent(cmd) // an engine CLI child (a long docker exec) must not outlive a killed server
	return cmd
}

// call runs one engine command and returns its stdout; a failure carries the engine's own words.
func (e *engineProvider) call(ctx context.Context, stdin io.Reader, args ...string) (string, error) {
	cmd := e.cli(ctx, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), &engineError{args: args, err: err, stderr: strings.TrimSpace(stderr.String())}
	}
	return stdout.String(), nil
}

// engineError is a failed engine command with its stderr.
type engineError struct {
	args   []string
	err    error
	stderr string
}

func (e *engineError) Error() string {
	verb := ""
	if len(e.args) > 0 {
		verb = e.args[0] + ": "
	}
	if e.stderr != "" {
		return verb + e.stderr
	}
	return verb + e.err.Error()
}

func (e *engineProvider) container(m *ComputerInfo) string { return "agentd-" + m.ID }
func (e *engineProvider) volume(m *ComputerInfo) string    { return "agentd-" + m.ID }

// ---- probe ----

func (e *engineProvider) probe(ctx context.Context) probeResult {
	if _, err := exec.LookPath(e.name); err != nil {
		hint := "install Docker (apt-get install docker.io, or Docker Desktop) and start it"
		if e.name == "podman" {
			hint = "install Podman (apt-get install podman runc)"
		}
		return probeResult{reason: fmt.Sprintf("the %s CLI is not installed", e.name), hint: hint}
	}
	format := "{{.ServerVersion}}"
	if e.name == "podman" {
		format = "{{.Version.Version}}"
	}
	out, err := e.call(ctx, nil, "info", "--format", format)
	if err != nil {
		msg := err.Error()
		low := strings.ToLower(msg)
		switch {
		case strings.Contains(low, "permission denied"):
			return probeResult{reason: fmt.Sprintf("permission denied talking to %s: %s", e.name, firstLine(msg)),
				hint: fmt.Sprintf("add your user to the %s group (then log in again) or run agentd as root", e.name)}
		case strings.Contains(low, "cannot connect") || strings.Contains(low, "daemon running") || strings.Contains(low, "connection refused") || strings.Contains(low, "no such file"):
			return probeResult{reason: fmt.Sprintf("the %s daemon is not reachable: %s", e.name, firstLine(msg)),
				hint: "start it (systemctl start docker, or run dockerd) and check DOCKER_HOST"}
		}
		return probeResult{reason: fmt.Sprintf("%s info failed: %s", e.name, firstLine(msg)), hint: fmt.Sprintf("run `%s info` to see what is wrong", e.name)}
	}
	pr := probeResult{available: true, version: strings.TrimSpace(out)}
	if e.name == "podman" {
		// `podman info` succeeds even when no container can start (runtime or ulimit refused by the
		// host), so start a throw-away container on an empty root: "command not found" means it works.
		if r := e.probeRun(ctx); r != nil {
			return *r
		}
	}
	return pr
}

func (e *engineProvider) probeRun(ctx context.Context) *probeResult {
	dir := filepath.Join(e.c.home, "podman-probe-root")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return &probeResult{reason: "cannot create the probe root: " + err.Error(), hint: "make AGENT_HOME writable"}
	}
	// A podman killed half-way through setting up a container leaves its runtime writing into the probe
	// root after we return; so the caller going away does not cut the probe short, only the time limit does.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probeTimeout)
	defer cancel()
	_, err := e.call(ctx, nil, "run", "--rm", "--network", "none", "--rootfs", dir, "/agentd-probe")
	var ee *engineError
	if err == nil || errors.As(err, &ee) && (strings.Contains(ee.stderr, "not found") || strings.Contains(ee.stderr, "no such file or directory: OCI runtime attempted")) {
		return nil
	}
	msg := firstLine(err.Error())
	hint := "run `podman run --rm debian true` to see what is wrong"
	if strings.Contains(msg, "rlimit") || strings.Contains(msg, "crun") || strings.Contains(msg, "OCI") {
		hint = `podman cannot start containers here; in /etc/containers/containers.conf set [engine] runtime = "runc" and [containers] default_ulimits = ["nofile=1024:1024","nproc=1024:1024"]`
	}
	return &probeResult{reason: "podman cannot start a container: " + msg, hint: hint}
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// supports refuses only what this host cannot enforce: a deny list in mode full where agentd cannot add
// the rules that drop it (not root, or no iptables: a rootless engine's machine reaches what its engine's
// user networking reaches, README), rather than pretending it holds for commands.
func (e *engineProvider) supports(sp ComputerSpec) error {
	if sp.Network.Mode == "full" && len(sp.Network.Deny) > 0 && !e.filterable() {
		return errorf(codeNotImplemented, "%s cannot honour network.deny in mode full here: agentd adds the rules that enforce it only as root with iptables", e.name).
			withHint("use network.mode egress (deny is enforced by agentd's proxy there), or run agentd as root with iptables")
	}
	return nil
}

// ---- lifecycle ----

// runArgs is the container argv of DESIGN §4.
func (e *engineProvider) runArgs(m *ComputerInfo) []string {
	sp := m.Spec
	a := []string{"run", "-d", "--name", e.container(m),
		"--label", "agentd.id=" + m.ID, "--label", "agentd.provider=" + e.name, "--label", "agentd.owner=" + e.c.owner,
		"--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--pids-limit", "512", "--init",
		"--tmpfs", "/tmp:rw,exec,nosuid,nodev,size=512m,mode=1777", "--tmpfs", "/run:rw,nosuid,nodev,size=64m",
		"--cpus", strconv.FormatFloat(sp.CPUs, 'f', -1, 64),
		"--memory", strconv.Itoa(sp.MemoryMB) + "m", "--memory-swap", strconv.Itoa(sp.MemoryMB) + "m",
	}
	// No -w: the engine would create the workdir over the /work tmpfs as root 0755. Every exec passes
	// its own -w instead, and create makes a workdir below /work as the machine's user.
	for k, v := range sp.Labels {
		a = append(a, "--label", "agentd.label."+k+"="+v)
	}
	if m.State == statePooled { // a warm-pool machine (computers_pool.go); labels cannot change once taken
		a = append(a, "--label", "agentd.pool="+sp.Flavor)
	}
	if len(sp.Packages) == 0 {
		a = append(a, "--read-only")
	} else {
		// Installing packages needs a writable root and root's file capabilities; execs run as the
		// unprivileged user, which holds no capabilities anyway.
		for _, cp := range []string{"CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID"} {
			a = append(a, "--cap-add", cp)
		}
	}
	if sp.Persist {
		a = append(a, "-v", e.volume(m)+":/work")
	} else {
		a = append(a, "--tmpfs", fmt.Sprintf("/work:rw,exec,nosuid,nodev,size=%dm,mode=1777", sp.DiskMB))
	}
	if len(sp.Packages) == 0 {
		a = append(a, "-u", machineUser(m))
	} // else the main process stays root so that the root exec installing packages keeps its capabilities
	// (the engine derives an exec's capabilities from the main process); every exec names its user.
	if _, ok := sp.Env["HOME"]; !ok {
		a = append(a, "-e", "HOME=/work")
	}
	for k, v := range egressEnv(sp) { // the spec's own env below may override
		a = append(a, "-e", k+"="+v)
	}
	for k, v := range sp.Env {
		a = append(a, "-e", k+"="+v)
	}
	for _, mt := range sp.Mounts {
		ro := mt.Readonly == nil || *mt.Readonly
		v := mt.Source + ":" + mt.Target
		if ro {
			v += ":ro"
		}
		a = append(a, "-v", v)
	}
	if noRoute(sp) { // egress reaches out only through the proxy over the exec channel (computers_egress.go)
		a = append(a, "--network", "none")
	} else if sp.Network.Mode == "full" { // the full-mode rules are IPv4 (computers_fullnet.go)
		a = append(a, fullV6Off()...)
	}
	if hm := e.c.helperMount(); hm != "" {
		a = append(a, "-v", hm, "-v", e.c.channelSockDir(m.ID)+":"+chanSockInMachine+":ro")
	}
	return append(a, m.Image, "sleep", "infinity")
}

// create is one `run -d` (the engine pulls a missing image itself). Only when that fails for want of the
// image does it pull explicitly (the one that explains itself), then run again: no inspect before.
func (e *engineProvider) create(ctx context.Context, m *ComputerInfo) error {
	ms, err := e.c.openMountSources(m.Spec) // judged again: the create's check was before the pull
	if err != nil {
		return err
	}
	defer closeMountSources(ms)
	e.c.makeChannelSockDir(m.ID)
	_, err = e.call(ctx, nil, e.runArgs(m)...)
	if err != nil && e.missingImage(ctx, err, m.Image) {
		if _, perr := e.call(ctx, nil, "pull", m.Image); perr != nil {
			what := "the spec's image"
			if m.Spec.Image == "" {
				what = "the " + m.Spec.Flavor + " flavor's image"
			}
			return errorf(codeProviderUnavailable, "%s %s is not on this machine and could not be pulled", what, m.Image).
				withHint(fmt.Sprintf("either make it present (`%s pull %s`; on a host with no registry `%s load -i image.tar`, or build one with debootstrap and `%s import`), or point the flavor at an image you have in config.yaml: images: {%s: <local image>}, "+takesEffect("images"),
					e.name, m.Image, e.name, e.name, firstNonEmpty(m.Spec.Flavor, "base"))).
				withDetail("image", m.Image).withDetail("flavor", m.Spec.Flavor)
		}
		e.call(ctx, nil, "rm", "-f", e.container(m)) // a run that failed after creating leaves its name taken
		_, err = e.call(ctx, nil, e.runArgs(m)...)
	}
	if err != nil {
		return errorf(codeComputerFailed, "%s could not start the machine: %s", e.name, err.Error()).
			withHint(fmt.Sprintf("run `%s info` and check the engine can start containers", e.name))
	}
	if err := e.verifyMounts(ctx, m, ms); err != nil {
		return err // create's caller removes the container
	}
	if err := e.filterFull(ctx, m); err != nil { // computers_fullnet.go
		return errorf(codeComputerFailed, "cannot filter the machine's network (mode full): %v", err).
			withHint("agentd adds iptables rules for full-mode machines when it runs as root; check iptables works, or use network.mode egress")
	}
	if m.Spec.Persist {
		// A fresh named volume is owned by root; let the machine's user write to it.
		e.call(ctx, nil, "exec", "-u", "0", e.container(m), "chmod", "1777", "/work")
	}
	if m.Workdir != "/work" && m.Workdir != "/tmp" {
		if _, err := e.call(ctx, nil, "exec", "-u", machineUser(m), e.container(m), "mkdir", "-p", "--", m.Workdir); err != nil {
			return errorf(codeComputerFailed, "cannot create the workdir %s: %s", m.Workdir, err.Error()).
				withHint("use a workdir under /work or /tmp")
		}
	}
	return nil
}

// missingImage says whether a failed run failed for want of its image: the engines' words for it, or,
// when they say something else, the image is not there (asked only after a failure).
func (e *engineProvider) missingImage(ctx context.Context, err error, image string) bool {
	low := strings.ToLower(err.Error())
	for _, s := range []string{"no such image", "unable to find image", "image not known", "pull access denied", "manifest unknown"} {
		if strings.Contains(low, s) {
			return true
		}
	}
	_, ierr := e.call(ctx, nil, "image", "inspect", "--format", "{{.Id}}", image)
	return ierr != nil
}

func (e *engineProvider) start(ctx context.Context, m *ComputerInfo) error {
	// The engine resolves each -v source by its path again now: judge it again first, then check that
	// what got mounted is what was judged (verifyMounts), before anything of the machine's runs.
	ms, err := e.c.openMountSources(m.Spec)
	if err != nil {
		return err
	}
	defer closeMountSources(ms)
	if _, err := e.call(ctx, nil, "start", e.container(m)); err != nil {
		if isNoSuch(err) {
			return errorf(codeComputerNotFound, "the container of computer %s is gone", m.ID).withHint("delete the computer and create a new one")
		}
		return errorf(codeComputerFailed, "%s could not start the machine: %s", e.name, err.Error()).withHint("check the engine")
	}
	if err := e.verifyMounts(ctx, m, ms); err != nil {
		e.call(ctx, nil, "stop", "-t", "0", e.container(m)) // fail closed: nothing of the machine ran yet
		return err
	}
	// A restarted container gets its tmpfs mounts back as root 0755, not the mode=1777 they were created
	// with (seen on Docker 20.10): the machine's user could no longer write /work or /tmp.
	dirs := []string{"/tmp"}
	if !m.Spec.Persist {
		dirs = append(dirs, "/work")
	}
	if _, err := e.call(ctx, nil, append([]string{"exec", "-u", "0:0", e.container(m), "chmod", "1777"}, dirs...)...); err != nil {
		return errorf(codeComputerFailed, "%s started the machine but could not restore its /work and /tmp: %s", e.name, err.Error()).withHint("check the engine")
	}
	if err := e.filterFull(ctx, m); err != nil {
		e.call(ctx, nil, "stop", "-t", "0", e.container(m)) // fail closed
		return errorf(codeComputerFailed, "cannot filter the machine's network (mode full): %v", err).
			withHint("agentd adds iptables rules for full-mode machines when it runs as root; check iptables works, or use network.mode egress")
	}
	return nil
}

// verifyMounts checks, right after the engine made or restarted the container and before any command
// of the machine runs in it (the machine's lock is held; its main process is `sleep infinity`), that
// each mount target holds the very object openMountSources opened and judged: the same device and
// inode. An engine takes a -v source by its path when it starts the container, so there is a window
// after our check: a directory swapped for a symlink in it (by another machine with the parent mounted
// read-write, or a host user) would hand the machine whatever the link names. Re-creating the container
// would not close it (the engine resolves the path again) and refusing nested mounts would not either
// (another machine can own the parent): comparing what was mounted does, and fails closed.
func (e *engineProvider) verifyMounts(ctx context.Context, m *ComputerInfo, ms []mountSource) error {
	if len(ms) == 0 {
		return nil
	}
	args := []string{"exec", "-u", "0:0", e.container(m), "stat", "-c", "%d %i", "--"}
	for _, mt := range m.Spec.Mounts {
		args = append(args, mt.Target)
	}
	out, err := e.call(ctx, nil, args...)
	got := strings.Split(strings.TrimSpace(out), "\n")
	if err != nil || len(got) != len(ms) {
		return errorf(codeComputerFailed, "cannot check what %s mounted in the machine: %v", e.name, err).
			withHint("the image needs stat (coreutils or busybox) for a machine with mounts, and the engine must run on this host")
	}
	for i, src := range ms {
		var dev, ino uint64
		if _, err := fmt.Sscanf(got[i], "%d %d", &dev, &ino); err != nil || dev != src.dev || ino != src.ino {
			return errorf(codeComputerFailed, "mounts.%d.source: %s was replaced while %s started the machine: what it mounted at %s is not the directory agentd checked, so the machine was not started",
				i, m.Spec.Mounts[i].Source, e.name, m.Spec.Mounts[i].Target).
				withHint("something replaced a directory under allowedMounts (a machine with its parent mounted read-write can); check it, then start again")
		}
	}
	return nil
}

func (e *engineProvider) stop(ctx context.Context, m *ComputerInfo) error {
	defer e.unfilterFull(ctx, m)
	if _, err := e.call(ctx, nil, "stop", "-t", "2", e.container(m)); err != nil && !isNoSuch(err) {
		return errorf(codeComputerFailed, "%s could not stop the machine: %s", e.name, err.Error()).withHint("check the engine")
	}
	return nil
}

func (e *engineProvider) destroy(ctx context.Context, m *ComputerInfo) error {
	defer e.unfilterFull(ctx, m)
	_, err := e.call(ctx, nil, "rm", "-f", "-v", e.container(m))
	if err != nil && !isNoSuch(err) && ctx.Err() == nil {
		// Once more: a loaded engine may answer a transient state (a container still being created or
		// stopped, a lock); a second rm sees it settled. A machine left behind is the worst outcome here.
		_, err = e.call(ctx, nil, "rm", "-f", "-v", e.container(m))
	}
	if err != nil && !isNoSuch(err) {
		return errorf(codeComputerFailed, "%s could not remove the machine: %s", e.name, err.Error()).withHint("check the engine")
	}
	if m.Spec.Persist {
		e.call(ctx, nil, "volume", "rm", "-f", e.volume(m))
	}
	os.RemoveAll(e.c.channelSockDir(m.ID))
	return nil
}

// machineUser is who commands run as by default: the spec's user, else 1000:1000.
func machineUser(m *ComputerInfo) string {
	if m.Spec.User != "" {
		return m.Spec.User
	}
	return "1000:1000"
}

func isNoSuch(err error) bool {
	s := strings.ToLower(err.Error())
	return strings.Contains(s, "no such") || strings.Contains(s, "not found") || strings.Contains(s, "no container")
}

func (e *engineProvider) status(ctx context.Context, m *ComputerInfo) (string, error) {
	out, err := e.call(ctx, nil, "inspect", "--format", "{{.State.Status}}", e.container(m))
	if err != nil {
		if isNoSuch(err) {
			return "missing", nil
		}
		return "", err
	}
	if strings.TrimSpace(out) == "running" {
		return "running", nil
	}
	return "stopped", nil
}

func (e *engineProvider) owned(ctx context.Context) (map[string]bool, error) {
	out, err := e.call(ctx, nil, "ps", "-a", "-q", "--no-trunc", "--filter", "label=agentd.owner="+e.c.owner)
	if err != nil {
		return nil, err
	}
	ids := strings.Fields(out)
	res := map[string]bool{}
	if len(ids) == 0 {
		return res, nil
	}
	out, err = e.call(ctx, nil, append([]string{"inspect", "--format", `{{index .Config.Labels "agentd.id"}} {{.State.Status}}`}, ids...)...)
	if err != nil && !isNoSuch(err) {
		return nil, err
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] != "" {
			res[f[0]] = f[1] == "running"
		}
	}
	return res, nil
}

// ---- exec ----

func (e *engineProvider) execArgs(m *ComputerInfo, user, cwd string, env map[string]string, interactive, tty bool) []string {
	a := []string{"exec"}
	if interactive {
		a = append(a, "-i")
	}
	if tty {
		a = append(a, "-t")
	}
	if user == "" {
		user = machineUser(m)
	}
	a = append(a, "-u", user)
	if cwd != "" {
		a = append(a, "-w", cwd)
	}
	for k, v := range env {
		a = append(a, "-e", k+"="+v)
	}
	return append(a, e.container(m))
}

func (e *engineProvider) command(ctx context.Context, m *ComputerInfo, p *procSpec) (*procHandle, error) {
	return e.c.machineCommand(ctx, e, m, p), nil
}

// perCallCmd is the fallback's host process (computers_percall.go): one `docker exec`.
func (e *engineProvider) perCallCmd(ctx context.Context, m *ComputerInfo, p *procSpec, argv []string) *exec.Cmd {
	return e.cli(ctx, append(e.execArgs(m, p.user, p.cwd, p.env, p.stdin != nil || p.term != nil, p.tty), argv...)...)
}

// channelSocket: a machine made with the socket directory mounted moves its channel there.
func (e *engineProvider) channelSocket(m *ComputerInfo) string {
	dir := e.c.channelSockDir(m.ID)
	if _, err := os.Stat(dir); err != nil {
		return ""
	}
	return dir
}

// helperCmd is the channel's process: one long `docker exec -i` into the mounted helper.
func (e *engineProvider) helperCmd(ctx context.Context, m *ComputerInfo) *exec.Cmd {
	return e.cli(ctx, append(e.execArgs(m, "", "/", nil, true, false), helperInMachine, "machine-helper")...)
}

func (e *engineProvider) killLeftovers(ctx context.Context, m *ComputerInfo) int {
	return e.c.killLeftovers(ctx, e, m)
}

// ---- files inside the machine ----

func (e *engineProvider) fs(m *ComputerInfo) machineFS {
	return &engineFS{pc: e, c: e.c, host: e, m: m}
}

// engineFS does file operations inside a machine: over its exec channel, else through the per-call
// fallback (computers_percall.go). The sandbox uses it too, with pc nil: the channel is its only way in.
type engineFS struct {
	pc   perCaller // nil: no fallback
	c    *computerService
	host channelHost
	m    *ComputerInfo
	// call, with host nil, is the only path of a provider without a channel: one API call (fly).
	call func(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, argv []string) (int, error)
}

const fsOpTimeout = 10 * time.Minute

// do runs a script inside the machine as its user with stdin and stdout wired through: over the
// machine's exec channel when it is up, else through the per-call fallback. With op set and the channel
// up, the helper does the operation itself (its Go twin of the script, computers_helper.go) instead of
// starting a shell.
func (f *engineFS) do(ctx context.Context, op string, stdin io.Reader, stdout io.Writer, script string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, fsOpTimeout)
	defer cancel()
	if f.call != nil { // computers_fly.go: no channel, one exec call per operation
		var stderr bytes.Buffer
		code, err := f.call(ctx, stdin, stdout, &limitedBuffer{b: &stderr, max: 64 << 10}, append([]string{"/bin/sh", "-c", script, "agentd"}, args...))
		if err == nil && code != 0 {
			err = fmt.Errorf("exit status %d", code)
		}
		if err != nil {
			msg := strings.TrimSpace(stderr.String())
			if msg == "" {
				msg = err.Error()
			}
			return &engineError{args: []string{"exec"}, err: err, stderr: msg}
		}
		return nil
	}
	ch, cherr := f.c.channelErr(ctx, f.host, f.m)
	if ch != nil {
		var stderr bytes.Buffer
		req := chanStart{Argv: append([]string{"/bin/sh", "-c", script, "agentd"}, args...), Cwd: "/"}
		if op != "" {
			req = chanStart{Op: op, Argv: args}
			if op != "write" {
				stdin = nil // the script's stdin (resolve's list) is the op's Argv
			}
		}
		proc, err := ch.start(req, stdin, stdout, &limitedBuffer{b: &stderr, max: 64 << 10})
		if err == nil {
			x, err := proc.wait(ctx)
			switch {
			case err != nil:
				return &engineError{args: []string{"exec"}, err: err, stderr: "the machine's exec channel broke: " + err.Error()}
			case x.Error != "":
				return &engineError{args: []string{"exec"}, err: errors.New(x.Error), stderr: x.Error}
			case x.Code != 0:
				msg := strings.TrimSpace(stderr.String())
				if msg == "" {
					msg = fmt.Sprintf("exit status %d", x.Code)
				}
				return &engineError{args: []string{"exec"}, err: fmt.Errorf("exit status %d", x.Code), stderr: msg}
			}
			return nil
		} // not sent: the channel was already down, so the per-call path below does the work
		cherr = err
	}
	if f.pc == nil {
		return &engineError{args: []string{"exec"}, err: cherr, stderr: "the machine's helper is not running: " + cherr.Error()}
	}
	cmd := f.pc.perCallCmd(ctx, f.m, &procSpec{cwd: "/", stdin: stdin}, append([]string{"/bin/sh", "-c", script, "agentd"}, args...))
	var stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return &engineError{args: []string{"exec"}, err: err, stderr: msg}
	}
	return nil
}

func fsFail(op, p string, err error) error {
	msg := err.Error()
	if ee, ok := err.(*engineError); ok {
		msg = ee.stderr
	}
	msg = strings.TrimPrefix(msg, "agentd: ")
	if strings.Contains(msg, "escapes the jail") {
		return errSymlinkEscape()
	}
	return errorf(codeFSDenied, "%s %s failed: %s", op, p, firstLine(msg)).withHint("check the path and its permissions")
}

func (f *engineFS) resolve(ctx context.Context, paths []string) ([]string, error) {
	var out bytes.Buffer
	in := strings.NewReader(strings.Join(paths, "\n") + "\n")
	err := f.do(ctx, "resolve", in, &out, `while IFS= read -r p; do readlink -m -- "$p" || echo "(unresolvable)$p"; done`, paths...)
	if err != nil {
		return nil, errorf(codeFSDenied, "cannot resolve paths inside the machine: %s", firstLine(err.Error())).withHint("check the machine is running")
	}
	res := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(res) != len(paths) {
		return nil, errorf(codeFSDenied, "cannot resolve paths inside the machine").withHint("check the machine is running")
	}
	return res, nil
}

// openedInside is the in-machine half of the jail for reads and writes: the file is opened on fd 3 first
// and what was opened (/proc/self/fd/3) must be under /work or /tmp, so a symlink swapped in after the
// resolve is caught on the object actually used — open, then check, never check, then open.
const openedInside = `case "$(readlink /proc/self/fd/3)" in /work|/work/*|/tmp|/tmp/*) ;; *) echo "escapes the jail through a symlink" >&2; exit 3;; esac; `

func (f *engineFS) read(ctx context.Context, p string, w io.Writer) error {
	script := `exec 3< "$1" || exit 1; ` + openedInside +
		`if [ -d /proc/self/fd/3 ]; then echo "is a directory" >&2; exit 1; fi; exec cat <&3`
	if err := f.do(ctx, "read", nil, w, script, p); err != nil {
		return fsFail("read", p, err)
	}
	return nil
}

// write opens without truncating (<>), checks what it opened, and only then truncates and writes.
func (f *engineFS) write(ctx context.Context, p string, r io.Reader) error {
	script := `mkdir -p -- "$(dirname -- "$1")" && exec 3<> "$1" || exit 1; ` + openedInside +
		`: > /proc/self/fd/3 && exec cat >&3`
	if err := f.do(ctx, "write", r, io.Discard, script, p); err != nil {
		return fsFail("write", p, err)
	}
	return nil
}

func (f *engineFS) list(ctx context.Context, p string) ([]DirEntry, error) {
	var out bytes.Buffer
	if err := f.do(ctx, "list", nil, &out, findListScript, p); err != nil {
		return nil, fsFail("list", p, err)
	}
	return parseFindList(out.String(), p), nil
}

// findListScript lists "$1" (a directory's entries, else the one file) as parseFindList reads them: the
// one listing of the shell-script file operations (engineFS here, sshFS on a remote host).
const findListScript = `if [ -d "$1" ]; then exec find "$1" -mindepth 1 -maxdepth 1 -printf '%y\t%s\t%T@\t%m\t%f\0'; else exec find "$1" -maxdepth 0 -printf '%y\t%s\t%T@\t%m\t%f\0'; fi`

// parseFindList reads findListScript's records (type, size, mtime, mode, name; NUL-ended) as entries
// of the guest directory dir.
func parseFindList(out, dir string) []DirEntry {
	ents := []DirEntry{}
	for _, rec := range strings.Split(out, "\x00") {
		fl := strings.SplitN(rec, "\t", 5)
		if len(fl) != 5 {
			continue
		}
		t := map[string]string{"f": "file", "d": "dir", "l": "symlink"}[fl[0]]
		if t == "" {
			t = "other"
		}
		size, _ := strconv.ParseInt(fl[1], 10, 64)
		secs, _ := strconv.ParseFloat(fl[2], 64)
		mode, _ := strconv.ParseUint(fl[3], 8, 32)
		ents = append(ents, DirEntry{Name: fl[4], Path: joinGuest(dir, fl[4]), Type: t, Size: size,
			ModifiedAt: timestamp(time.Unix(0, int64(secs*1e9))), Mode: fmt.Sprintf("%04o", mode)})
	}
	return ents
}

func (f *engineFS) remove(ctx context.Context, p string, recursive bool) error {
	rec := "0"
	if recursive {
		rec = "1"
	}
	script := `[ -e "$1" ] || [ -L "$1" ] || { echo "no such file or directory" >&2; exit 1; }
if [ -d "$1" ] && [ ! -L "$1" ]; then if [ "$2" = 1 ]; then exec rm -rf -- "$1"; else exec rmdir -- "$1"; fi; else exec rm -f -- "$1"; fi`
	if err := f.do(ctx, "", nil, io.Discard, script, p, rec); err != nil {
		return fsFail("delete", p, err)
	}
	return nil
}

func (f *engineFS) untar(ctx context.Context, dir string, archive []byte) (int, error) {
	err := f.do(ctx, "", bytes.NewReader(archive), io.Discard,
		`mkdir -p -- "$1" && exec tar -xzf - -C "$1" --no-same-owner --no-overwrite-dir`, dir)
	if err != nil {
		return 0, fsFail("upload to", dir, err)
	}
	return 0, nil
}

func (f *engineFS) tar(ctx context.Context, p string, w io.Writer) (int64, error) {
	if w == nil {
		var out bytes.Buffer
		err := f.do(ctx, "", nil, &out, `[ -e "$1" ] || { echo "no such file or directory" >&2; exit 1; }
tar -czf - -C "$(dirname -- "$1")" -- "$(basename -- "$1")" | wc -c`, p)
		if err != nil {
			return 0, fsFail("download", p, err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(out.String()), 10, 64)
		if err != nil {
			return 0, errorf(codeFSDenied, "cannot measure the archive of %s", p).withHint("check the machine has tar and gzip")
		}
		return n, nil
	}
	cw := &countingWriter{w: w}
	if err := f.do(ctx, "", nil, cw, `exec tar -czf - -C "$(dirname -- "$1")" -- "$(basename -- "$1")"`, p); err != nil {
		return cw.n, fsFail("download", p, err)
	}
	return cw.n, nil
}
