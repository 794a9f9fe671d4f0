// computers_sandbox_userns.go — who a sandbox machine's user is on the host when agentd runs as root.
//
// Entry points: sandboxProvider.remapped (is agentd root), startFlags and startHelper (the channel's
// start of the machine: writes its user namespace's maps, moves it into its cgroup), bwrapFiles (bwrap's
// descriptors by name, with bwrap's rules for them in a table), ownForMachine (gives the machine's files to its user),
// helperBecome (computers_sandbox_linux.go: the helper's drop to the machine's user).
//
// Why: bwrap started by root maps the sandbox's uid 1000 to the caller's, 0, so every machine process
// was the host's root without capabilities. That is not nothing: the kernel's permission checks that
// look at the uid alone let it write the host's sysctls (/proc/sys is 0644 root: kernel.core_pattern
// runs a program as root on the host), open /proc/sysrq-trigger, and read any root-only file in what
// is bound in (/etc/ssl/private's keys). Rules: as root, bwrap runs with --userns-block-fd and
// --info-fd, and agentd writes the namespace's maps itself: the host's root as 0 (bwrap needs it to
// set the machine up, reading $AGENT_HOME as its owner) and the machine's 1000 as sandboxHostID, a host
// uid and gid no account has. The helper starts as 0 holding only CAP_SETUID, CAP_SETGID and
// CAP_SETPCAP (bwrap's --cap-drop/--cap-add; no new privileges already set), refuses new user
// namespaces, empties its bounding set, and becomes 1000:1000 for good before it says hello; every
// command it starts is then the host's sandboxHostID, with nothing of root's. bwrap's
// --disable-userns cannot be combined with --userns-block-fd: the helper's seccomp filter refuses new
// user namespaces instead (denyUserNamespaces). The machine's /work and /tmp are owned by
// sandboxHostID. Without root, bwrap maps 1000 to agentd's own uid, as before.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// sandboxHostID is the host uid and gid of every machine's user when agentd is root: 0x70000000, above
// systemd-nspawn's container range (0x80000–0x6FFFFFFF) and below the kernel's overflow and systemd's
// reserved ranges at the top of the 32-bit space.
const sandboxHostID = 0x70000000

// remapped: agentd is root, so the machine's user is sandboxHostID, not the host's root.
func (s *sandboxProvider) remapped() bool { return os.Geteuid() == 0 }

// A machine's bwrap gets these descriptors beyond stdin and stdout (the channel) and stderr. Each has a
// fixed number; bwrapFiles names them, and its files() puts each at cmd.ExtraFiles[fd-3] (one not used
// stays closed). bwrap's rules for them, which the start of a machine is built on:
//
//	fd  field        bwrap flag           end    used when                 rule
//	3   usernsBlock  --userns-block-fd    reads  agentd is root (remap)    bwrap's monitor waits here, after the
//	                                                                       clone, until agentd has written the
//	                                                                       child's uid_map and gid_map (one byte)
//	4   info         --info-fd            writes remap or a cgroup         {"child-pid": N} of bwrap's child, then
//	                                                                       closed: the pid agentd maps and moves
//	5   setupBlock   --block-fd           reads  the machine has a cgroup  the child, set up and having forked
//	                                                                       nothing, waits here (one byte) before it
//	                                                                       execs the helper: agentd moves it into
//	                                                                       the cgroup meanwhile
//	6…  mounts[i]    --bind-fd,           binds  spec.mounts[i]            the source openMountSources opened from /
//	                 --ro-bind-fd                                          without following a link, bound as that
//	                                                                       descriptor, never again by its path
//
//   - --userns-block-fd cannot be combined with --disable-userns (bwrap refuses): as root the helper's
//     seccomp filter refuses nested user namespaces instead (denyUserNamespaces).
//   - --userns-block-fd and --block-fd need --info-fd: the pid is what agentd writes the maps and
//     cgroup.procs of. bwrap writes it once the child exists and closes its end: read it to EOF.
//   - The cgroup move costs an RCU grace period on cgroup v1 (several ms): done at --block-fd, it is
//     spent while bwrap mounts the machine, and everything of the machine is born in the cgroup.
//   - --bind-fd and --ro-bind-fd are in newer bubblewraps only (the probe reads --help): without them a
//     machine with mounts is refused (supports), never bound by its path.
//   - bwrap gets its own copies at Start: agentd closes its copies of bwrap's ends then (and openChannel
//     the mount sources), so an end bwrap closes is seen closed.

// The descriptors' numbers (the table above).
const (
	usernsBlockFD  = 3
	usernsInfoFD   = 4
	setupBlockFD   = 5
	sandboxMountFD = 6 // the first mount source; the next ones follow
)

// bwrapFiles are bwrap's descriptors by name (the table above).
type bwrapFiles struct {
	usernsBlock, info, setupBlock *os.File
	mounts                        []*os.File
}

// files is cmd.ExtraFiles: each descriptor at its number less 3; none at all when nothing is used.
func (f bwrapFiles) files() []*os.File {
	if f.usernsBlock == nil && f.info == nil && f.setupBlock == nil && len(f.mounts) == 0 {
		return nil
	}
	return append([]*os.File{f.usernsBlock, f.info, f.setupBlock}, f.mounts...)
}

// startFlags are bwrap's flags for startHelper's waits: remap, the maps agentd writes; cgroup, the
// machine's cgroup its first process is moved into before it forks.
func (s *sandboxProvider) startFlags(remap, cgroup bool) []string {
	var a []string
	if remap {
		a = append(a, "--userns-block-fd", strconv.Itoa(usernsBlockFD))
	}
	if remap || cgroup {
		a = append(a, "--info-fd", strconv.Itoa(usernsInfoFD))
	}
	if cgroup {
		a = append(a, "--block-fd", strconv.Itoa(setupBlockFD))
	}
	return a
}

// startHelper starts the machine's process and, when cmd asks for it (startFlags), does what bwrap
// waits for: reads its child's pid; writes the namespace's maps and lets bwrap go on; moves the child,
// which is setting the machine up meanwhile and has forked nothing yet, into the machine's cgroup (the
// move costs an RCU grace period on cgroup v1, several ms, spent while bwrap mounts); then lets the
// child fork the machine's processes, born in the cgroup. A failure kills what was started.
func (s *sandboxProvider) startHelper(cmd *exec.Cmd, m *ComputerInfo) error {
	remap, cgroup := slices.Contains(cmd.Args, "--userns-block-fd"), slices.Contains(cmd.Args, "--block-fd")
	if !remap && !cgroup {
		return cmd.Start()
	}
	bw := bwrapFiles{mounts: cmd.ExtraFiles[min(sandboxMountFD-3, len(cmd.ExtraFiles)):]} // helperCmd's
	var ours bwrapFiles                                                                   // agentd's ends
	defer func() {
		for _, f := range ours.files() {
			if f != nil {
				f.Close()
			}
		}
	}()
	var err error
	pipe := func(bwrapReads bool) (theirs, mine *os.File) {
		r, w, e := os.Pipe()
		if err = errors.Join(err, e); bwrapReads {
			return r, w
		}
		return w, r
	}
	if remap {
		bw.usernsBlock, ours.usernsBlock = pipe(true)
	}
	bw.info, ours.info = pipe(false)
	if cgroup {
		bw.setupBlock, ours.setupBlock = pipe(true)
	}
	cmd.ExtraFiles = bw.files()
	if err != nil {
		for _, f := range cmd.ExtraFiles {
			if f != nil {
				f.Close()
			}
		}
		return fmt.Errorf("cannot make the pipes bwrap waits on: %v", err)
	}
	err = cmd.Start()
	for _, f := range cmd.ExtraFiles {
		if f != nil {
			f.Close() // bwrap's ends: ours to close once it has them
		}
	}
	if err != nil {
		return err
	}
	fail := func(err error) error {
		cmd.Process.Kill()
		cmd.Wait()
		return fmt.Errorf("cannot start the machine's namespaces: %v", err)
	}
	ours.info.SetReadDeadline(time.Now().Add(helperHelloTimeout))
	var info struct {
		ChildPid int `json:"child-pid"`
	}
	b, err := io.ReadAll(io.LimitReader(ours.info, 4096)) // bwrap closes its end once it has written
	if err != nil {
		return fail(err)
	}
	if err := json.Unmarshal(b, &info); err != nil || info.ChildPid <= 0 {
		return fail(fmt.Errorf("bwrap said %q instead of its child's pid", b))
	}
	if remap {
		maps := fmt.Sprintf("0 0 1\n1000 %d 1\n", sandboxHostID)
		for _, f := range []string{"uid_map", "gid_map"} {
			if err := os.WriteFile(fmt.Sprintf("/proc/%d/%s", info.ChildPid, f), []byte(maps), 0); err != nil {
				return fail(err)
			}
		}
		if _, err := ours.usernsBlock.Write([]byte{1}); err != nil {
			return fail(err)
		}
	}
	if cgroup {
		for _, d := range s.cgroups().dirs(m.ID) {
			if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(info.ChildPid)), 0); err != nil {
				return fail(fmt.Errorf("moving it into its cgroup %s: %v", d, err))
			}
		}
		if _, err := ours.setupBlock.Write([]byte{1}); err != nil {
			return fail(err)
		}
	}
	return nil
}

// ownForMachine gives path, and below it what is still the host root's (a machine made before the
// remap, or a directory agentd made), to the machine's user; nothing to do without root.
func (s *sandboxProvider) ownForMachine(path string) error {
	if !s.remapped() {
		return nil
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid == sandboxHostID && st.Gid == sandboxHostID {
		return nil // owned already: what is below was made by the machine's own user
	}
	return filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, sandboxHostID, sandboxHostID)
	})
}

// parseBecome reads the helper's --become "uid:gid".
func parseBecome(v string) (uid, gid int, err error) {
	u, g, ok := strings.Cut(v, ":")
	if _, e := fmt.Sscanf(u+" "+g, "%d %d", &uid, &gid); !ok || e != nil || uid <= 0 || gid <= 0 {
		return 0, 0, errors.New("machine-helper: --become takes uid:gid, both above 0")
	}
	return uid, gid, nil
}
