// computers_sandbox_userns.go — who a sandbox machine's user is on the host when agentd runs as root.
//
// Entry points: sandboxProvider.remapped (is agentd root), startFlags and startHelper (the channel's
// start of the machine: writes its user namespace's maps, moves it into its cgroup), ownForMachine (gives the machine's files to its user),
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
	"time"
)

// sandboxHostID is the host uid and gid of every machine's user when agentd is root: 0x70000000, above
// systemd-nspawn's container range (0x80000–0x6FFFFFFF) and below the kernel's overflow and systemd's
// reserved ranges at the top of the 32-bit space.
const sandboxHostID = 0x70000000

// remapped: agentd is root, so the machine's user is sandboxHostID, not the host's root.
func (s *sandboxProvider) remapped() bool { return os.Geteuid() == 0 }

// The file descriptors of bwrap's waits and word (cmd.ExtraFiles 0, 1, 2; an unused one stays closed).
const (
	usernsBlockFD = 3 // bwrap's monitor waits here, after the clone, for the namespace's maps
	usernsInfoFD  = 4 // bwrap writes its child's pid here
	setupBlockFD  = 5 // the child waits here, its setup done, before it forks anything
)

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
	// bwrap's ends, at usernsBlockFD, usernsInfoFD, setupBlockFD; then what helperCmd gave (the mount sources)
	extra := make([]*os.File, max(3, len(cmd.ExtraFiles)))
	copy(extra[3:], cmd.ExtraFiles[min(3, len(cmd.ExtraFiles)):])
	var ours []*os.File
	defer func() {
		for _, f := range ours {
			f.Close()
		}
	}()
	pipe := func(bwrapReads bool, slot int) (*os.File, error) {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		if bwrapReads {
			extra[slot], ours = r, append(ours, w)
			return w, nil
		}
		extra[slot], ours = w, append(ours, r)
		return r, nil
	}
	var usernsW, infoR, setupW *os.File
	var errs [3]error
	if remap {
		usernsW, errs[0] = pipe(true, 0)
	}
	infoR, errs[1] = pipe(false, 1)
	if cgroup {
		setupW, errs[2] = pipe(true, 2)
	}
	if err := errors.Join(errs[:]...); err != nil {
		for _, f := range extra {
			if f != nil {
				f.Close()
			}
		}
		return fmt.Errorf("cannot make the pipes bwrap waits on: %v", err)
	}
	cmd.ExtraFiles = extra
	err := cmd.Start()
	for _, f := range extra {
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
	infoR.SetReadDeadline(time.Now().Add(helperHelloTimeout))
	var info struct {
		ChildPid int `json:"child-pid"`
	}
	b, err := io.ReadAll(io.LimitReader(infoR, 4096)) // bwrap closes its end once it has written
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
		if _, err := usernsW.Write([]byte{1}); err != nil {
			return fail(err)
		}
	}
	if cgroup {
		for _, d := range s.cgroups().dirs(m.ID) {
			if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(info.ChildPid)), 0); err != nil {
				return fail(fmt.Errorf("moving it into its cgroup %s: %v", d, err))
			}
		}
		if _, err := setupW.Write([]byte{1}); err != nil {
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
	if ownedBy(fi, sandboxHostID) { // computers_sandbox_linux.go
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
