// computers_local.go — the `local` provider: a jailed workspace directory on the host, guarded but not isolated.
//
// Entry point: newLocalProvider. A machine is $AGENT_HOME/workspaces/<id>/{work,tmp}, presented as /work
// and /tmp: cwd and file paths are mapped, and must map inside. Every process runs in its own process
// group (killed whole on timeout, cancel, stop and destroy) with an environment built from an allow-list
// plus the exec's env — never the server's secrets. Each process carries AGENTD_COMPUTER_ID so stop and
// destroy find the machine's processes even after a restart. Mounts, packages, another user, a tty and
// network policy cannot be honoured here and are refused, not ignored.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type localProvider struct {
	c    *computerService
	root string // $AGENT_HOME/workspaces
}

func newLocalProvider(c *computerService) *localProvider {
	return &localProvider{c: c, root: filepath.Join(c.home, "workspaces")}
}

func (l *localProvider) meta() providerMeta {
	return providerMeta{name: "local", description: "a jailed workspace directory on this host (guardrails, no isolation)",
		priority: 10, isolated: false, isolationKind: "guardrails"}
}

func (l *localProvider) probe(ctx context.Context) probeResult {
	if _, err := exec.LookPath("sh"); err != nil {
		return probeResult{reason: "no /bin/sh on this host", hint: "install a POSIX shell"}
	}
	if err := os.MkdirAll(l.root, 0o700); err != nil {
		return probeResult{reason: fmt.Sprintf("cannot create %s: %v", l.root, err), hint: "make AGENT_HOME writable"}
	}
	return probeResult{available: true, version: "1"}
}

func (l *localProvider) supports(sp ComputerSpec) error {
	refuse := func(what string) error {
		return errorf(codeNotImplemented, "the local provider cannot honour %s", what).
			withHint("use provider docker or podman for this, or drop the setting")
	}
	switch {
	case len(sp.Mounts) > 0:
		return refuse("mounts")
	case len(sp.Packages) > 0:
		return refuse("packages")
	case sp.User != "":
		return refuse("user")
	case sp.Network.Mode == "none" || len(sp.Network.Allow) > 0 || len(sp.Network.Deny) > 0:
		return refuse("network restrictions")
	case sp.Workdir != "/work" && !strings.HasPrefix(sp.Workdir, "/work/") && sp.Workdir != "/tmp" && !strings.HasPrefix(sp.Workdir, "/tmp/"):
		return refuse("a workdir outside /work and /tmp")
	}
	return nil
}

func (l *localProvider) dir(m *ComputerInfo) string { return filepath.Join(l.root, m.ID) }

// hostPath maps a clean guest path under /work or /tmp to the host; ok is false outside them.
func (l *localProvider) hostPath(m *ComputerInfo, guest string) (string, bool) {
	guest = path.Clean("/" + guest) // a `..` must not climb out of the mapped directory
	for _, top := range []string{"/work", "/tmp"} {
		if guest == top || strings.HasPrefix(guest, top+"/") {
			return filepath.Join(l.dir(m), top[1:], filepath.FromSlash(strings.TrimPrefix(guest, top))), true
		}
	}
	return "", false
}

// guestPath maps a host path back; ok is false when it is outside the workspace.
func (l *localProvider) guestPath(m *ComputerInfo, host string) (string, bool) {
	for _, top := range []string{"work", "tmp"} {
		base := filepath.Join(l.dir(m), top)
		if host == base {
			return "/" + top, true
		}
		if rel, ok := strings.CutPrefix(host, base+string(filepath.Separator)); ok {
			return "/" + top + "/" + filepath.ToSlash(rel), true
		}
	}
	return "", false
}

func (l *localProvider) create(ctx context.Context, m *ComputerInfo) error {
	for _, d := range []string{"work", "tmp"} {
		if err := os.MkdirAll(filepath.Join(l.dir(m), d), 0o700); err != nil {
			return errorf(codeComputerFailed, "cannot create the workspace: %v", err).withHint("make AGENT_HOME writable")
		}
	}
	if hp, ok := l.hostPath(m, m.Workdir); ok {
		os.MkdirAll(hp, 0o700)
	}
	return nil
}

func (l *localProvider) start(ctx context.Context, m *ComputerInfo) error {
	if _, err := os.Stat(filepath.Join(l.dir(m), "work")); err != nil {
		return errorf(codeComputerNotFound, "the workspace of computer %s is gone", m.ID).withHint("delete the computer and create a new one")
	}
	return nil
}

func (l *localProvider) stop(ctx context.Context, m *ComputerInfo) error {
	l.killAll(m)
	return nil
}

func (l *localProvider) destroy(ctx context.Context, m *ComputerInfo) error {
	l.killAll(m)
	if err := os.RemoveAll(l.dir(m)); err != nil {
		return errorf(codeComputerFailed, "cannot remove the workspace: %v", err)
	}
	return nil
}

func (l *localProvider) status(ctx context.Context, m *ComputerInfo) (string, error) {
	if _, err := os.Stat(filepath.Join(l.dir(m), "work")); err != nil {
		return "missing", nil
	}
	if m.State == stateStopped {
		return "stopped", nil
	}
	return "running", nil
}

// owned lists workspaces; a workspace is "running" unless its record says stopped (the caller knows).
func (l *localProvider) owned(ctx context.Context) (map[string]bool, error) {
	return machineDirs(l.root)
}

// machineDirs lists the machines' directories under root (local's workspaces, the sandbox's roots).
func machineDirs(root string) (map[string]bool, error) {
	out := map[string]bool{}
	ents, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), "cmp_") {
			out[e.Name()] = true
		}
	}
	return out, nil
}

// localEnvAllow is the allow-list of the server's environment a local process inherits.
var localEnvAllow = []string{"PATH", "LANG", "LC_ALL", "TZ", "TERM", "USER", "LOGNAME", "SHELL"}

func (l *localProvider) command(ctx context.Context, m *ComputerInfo, p *procSpec) (*procHandle, error) {
	if p.user != "" && p.user != "0:0" {
		return nil, errorf(codeNotImplemented, "the local provider cannot run a command as another user").
			withHint("omit user, or use provider docker or podman")
	}
	if p.tty {
		return nil, errorf(codeNotImplemented, "the local provider has no tty").withHint("omit tty, or use provider docker or podman")
	}
	dir, ok := l.hostPath(m, p.cwd)
	if !ok {
		return nil, errorf(codeFSDenied, "path is outside the machine's writable area: %s", p.cwd).
			withHint("use a cwd under /work or /tmp")
	}
	if real, err := filepath.EvalSymlinks(dir); err != nil {
		return nil, errorf(codeExecFailed, "cwd %s does not exist in the machine", p.cwd).withHint("create the directory first")
	} else if _, ok := l.guestPath(m, real); !ok {
		return nil, errorf(codeFSDenied, "path resolves outside the workspace through a symlink").withHint("use a cwd inside /work or /tmp")
	}
	env := []string{}
	for _, k := range localEnvAllow {
		if v := l.c.getenv(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	if l.c.getenv("PATH") == "" {
		env = append(env, "PATH=/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin")
	}
	env = append(env, "HOME="+filepath.Join(l.dir(m), "work"), "TMPDIR="+filepath.Join(l.dir(m), "tmp"))
	for k, v := range m.Spec.Env {
		env = append(env, k+"="+v)
	}
	for k, v := range p.env {
		env = append(env, k+"="+v)
	}
	env = append(env, "AGENTD_COMPUTER_ID="+m.ID)

	argv := p.argv
	if !strings.Contains(argv[0], "/") {
		if _, err := lookPathIn(argv[0], env); err != nil {
			// Same answer as a shell would give, so argv and string commands agree across providers.
			argv = []string{"/bin/sh", "-c", `echo "sh: 1: $0: not found" >&2; exit 127`, argv[0]}
		}
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if !strings.Contains(argv[0], "/") {
		if lp, err := lookPathIn(argv[0], env); err == nil {
			cmd.Path = lp
			cmd.Err = nil
		}
	}
	cmd.Dir, cmd.Env = dir, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		if cmd.Process != nil {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		return nil
	}
	cmd.WaitDelay = execPipeGrace
	if p.stdin == nil {
		cmd.Stdin = nil // /dev/null
	}
	return &procHandle{cmd: cmd}, nil
}

// lookPathIn resolves a program name against the PATH of env (not the server's).
func lookPathIn(name string, env []string) (string, error) {
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, d := range filepath.SplitList(path) {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

// killLeftovers: after a restart every process of a local machine was started by the previous server.
func (l *localProvider) killLeftovers(ctx context.Context, m *ComputerInfo) int { return l.killAll(m) }

// killAll kills every process that carries the machine's id, group by group, and says how many groups.
func (l *localProvider) killAll(m *ComputerInfo) int {
	needle := []byte("AGENTD_COMPUTER_ID=" + m.ID + "\x00")
	groups := map[int]bool{}
	for round := 0; round < 3; round++ {
		ents, _ := os.ReadDir("/proc")
		found := false
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
			if err != nil || !bytes.Contains(append(env, 0), needle) {
				continue
			}
			found = true
			if pgid, err := syscall.Getpgid(pid); err == nil && pgid != syscall.Getpgrp() {
				syscall.Kill(-pgid, syscall.SIGKILL)
				groups[pgid] = true
			}
			syscall.Kill(pid, syscall.SIGKILL)
		}
		if !found {
			return len(groups)
		}
		time.Sleep(20 * time.Millisecond) // let the kernel reap before looking again
	}
	return len(groups)
}

func signalOf(ee *exec.ExitError) int {
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return int(ws.Signal())
	}
	return 0
}

// hostNetwork: a local machine's ports are the host's.
func (l *localProvider) hostNetwork(m *ComputerInfo) bool { return true }

func (l *localProvider) fs(m *ComputerInfo) machineFS { return &localFS{l: l, m: m} }

// ---- files on the host ----

// localFS implements machineFS on the mapped workspace with Go's file functions.
type localFS struct {
	l *localProvider
	m *ComputerInfo
}

// resolve maps each guest path to the host, follows symlinks of the nearest existing ancestor, and
// maps back; a path that lands outside the workspace comes back as "(host)<path>", which fails the jail.
func (f *localFS) resolve(ctx context.Context, paths []string) ([]string, error) {
	out := make([]string, len(paths))
	for i, g := range paths {
		hp, ok := f.l.hostPath(f.m, g)
		if !ok {
			out[i] = "(host)" + g
			continue
		}
		real, err := resolveExisting(hp)
		if err != nil {
			return nil, errorf(codeFSDenied, "cannot resolve %s: %v", g, err).withHint("check the path")
		}
		if gp, ok := f.l.guestPath(f.m, real); ok {
			out[i] = gp
		} else {
			out[i] = "(host)" + real
		}
	}
	return out, nil
}

// resolveExisting follows symlinks of the nearest existing ancestor of p and appends the rest.
func resolveExisting(p string) (string, error) {
	rest := ""
	cur := p
	for {
		real, err := filepath.EvalSymlinks(cur)
		if err == nil {
			return filepath.Join(real, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return p, nil
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}

// open roots every file operation at the machine's directory (work/ and tmp/ beneath it) with os.Root:
// each path is resolved and opened in one step by the kernel (openat2 RESOLVE_BENEATH, or O_NOFOLLOW
// per component), so a symlink swapped in after the jail's check cannot lead outside. rel is the guest
// path relative to that directory ("work/x").
func (f *localFS) open(g string) (root *os.Root, rel string, err error) {
	if _, ok := f.l.hostPath(f.m, g); !ok {
		return nil, "", errOutside(g)
	}
	root, err = os.OpenRoot(f.l.dir(f.m))
	if err != nil {
		return nil, "", errorf(codeComputerFailed, "the workspace of %s is gone: %v", f.m.ID, err).withHint("recreate the computer")
	}
	return root, strings.TrimPrefix(path.Clean("/"+g), "/"), nil
}

func fsErr(op, g string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return errorf(codeFSDenied, "%s %s: no such file or directory", op, g).withHint("check the path with GET /v1/computers/:id/fs")
	case errors.Is(err, syscall.EISDIR):
		return errorf(codeFSDenied, "%s %s: is a directory", op, g).withHint("use the directory listing or download")
	case errors.Is(err, syscall.ENOTEMPTY):
		return errorf(codeFSDenied, "%s %s: directory not empty", op, g).withHint("pass recursive=true")
	case strings.Contains(err.Error(), "escapes from parent"), errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.EXDEV):
		return errSymlinkEscape()
	}
	return errorf(codeFSDenied, "%s %s failed: %v", op, g, err).withHint("check the path and its permissions")
}

func (f *localFS) read(ctx context.Context, g string, w io.Writer) error {
	root, rel, err := f.open(g)
	if err != nil {
		return err
	}
	defer root.Close()
	file, err := root.Open(rel)
	if err != nil {
		return fsErr("read", g, err)
	}
	defer file.Close()
	if st, err := file.Stat(); err == nil && st.IsDir() {
		return fsErr("read", g, syscall.EISDIR)
	}
	_, err = io.Copy(w, file)
	return err
}

func (f *localFS) write(ctx context.Context, g string, r io.Reader) error {
	root, rel, err := f.open(g)
	if err != nil {
		return err
	}
	defer root.Close()
	if err := root.MkdirAll(path.Dir(rel), 0o755); err != nil {
		return fsErr("write", g, err)
	}
	file, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return fsErr("write", g, err)
	}
	if _, err := io.Copy(file, r); err != nil {
		file.Close()
		return fsErr("write", g, err)
	}
	return file.Close()
}

func (f *localFS) list(ctx context.Context, g string) ([]DirEntry, error) {
	root, rel, err := f.open(g)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	dir, err := root.Open(rel)
	if err != nil {
		return nil, fsErr("list", g, err)
	}
	defer dir.Close()
	st, err := dir.Stat()
	if err != nil {
		return nil, fsErr("list", g, err)
	}
	if !st.IsDir() {
		return []DirEntry{dirEntryOf(g, st)}, nil
	}
	ents, err := dir.ReadDir(-1)
	if err != nil {
		return nil, fsErr("list", g, err)
	}
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	out := make([]DirEntry, 0, len(ents))
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			continue
		}
		out = append(out, dirEntryOf(joinGuest(g, e.Name()), info))
	}
	return out, nil
}

func dirEntryOf(g string, fi fs.FileInfo) DirEntry {
	t := "other"
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		t = "symlink"
	case fi.IsDir():
		t = "dir"
	case fi.Mode().IsRegular():
		t = "file"
	}
	return DirEntry{Name: fi.Name(), Path: g, Type: t, Size: fi.Size(), ModifiedAt: timestamp(fi.ModTime()),
		Mode: fmt.Sprintf("%04o", fi.Mode().Perm())}
}

func (f *localFS) remove(ctx context.Context, g string, recursive bool) error {
	root, rel, err := f.open(g)
	if err != nil {
		return err
	}
	defer root.Close()
	st, err := root.Lstat(rel)
	if err != nil {
		return fsErr("delete", g, err)
	}
	if st.IsDir() && recursive {
		err = root.RemoveAll(rel)
	} else {
		err = root.Remove(rel)
	}
	if err != nil {
		return fsErr("delete", g, err)
	}
	return nil
}

// untar extracts an archive that checkArchive already passed, through a second pass over the bytes.
func (f *localFS) untar(ctx context.Context, g string, archive []byte) (int, error) {
	root, rel, err := f.open(g)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	if err := root.MkdirAll(rel, 0o755); err != nil {
		return 0, fsErr("upload", g, err)
	}
	sub, err := root.OpenRoot(rel)
	if err != nil {
		return 0, fsErr("upload", g, err)
	}
	defer sub.Close()
	n, err := untarTo(sub, bytes.NewReader(archive), nil)
	if err != nil {
		return n, errArchive("%v", err)
	}
	return n, nil
}

func (f *localFS) tar(ctx context.Context, g string, w io.Writer) (int64, error) {
	root, rel, err := f.open(g)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	if _, err := root.Lstat(rel); err != nil {
		return 0, fsErr("download", g, err)
	}
	cw := &countingWriter{w: w}
	if err := tarTo(ctx, cw, root.FS(), rel, path.Base(rel)); err != nil {
		return cw.n, errorf(codeFSDenied, "archiving %s failed: %v", g, err).withHint("check the path")
	}
	return cw.n, nil
}

// countingWriter counts bytes and forwards them to w (discards them when w is nil).
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	if c.w == nil {
		return len(p), nil
	}
	return c.w.Write(p)
}
