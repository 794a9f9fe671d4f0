//go:build linux

// computers_sandbox_linux.go — the Linux-only parts of the sandbox provider (computers_sandbox.go): the
// helper's resource limits (setrlimit, inherited by every process it starts), the process-count
// watchdog of its pid namespace, the probe's look at the kernel's user-namespace switches, and the
// network-namespace switches of a full machine's namespace (computers_sandboxnet.go).
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// The rlimit numbers of the generic Linux ABI (amd64, arm64, riscv64, 386, arm, ppc64le, s390x).
const (
	rlimitCPU   = 0
	rlimitFSIZE = 1
	rlimitDATA  = 2
	rlimitNPROC = 6
)

// applyHelperLimits sets the limits named in spec ("nproc=512,data=2147483648,cpu=21600,fsize=...")
// on this process, soft and hard alike, so nothing it starts can raise them again. The helper itself
// lives with them: the Go runtime ignores SIGXCPU and SIGXFSZ (a write past fsize is an EFBIG error).
func applyHelperLimits(spec string) error {
	names := map[string]int{"cpu": rlimitCPU, "fsize": rlimitFSIZE, "data": rlimitDATA, "nproc": rlimitNPROC}
	for _, kv := range strings.Split(spec, ",") {
		if kv == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		res, ok := names[k]
		n, err := strconv.ParseUint(v, 10, 64)
		if !ok || err != nil {
			return errorf(codeSpecInvalid, "machine-helper: bad limit %q", kv)
		}
		if err := syscall.Setrlimit(res, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
			return errorf(codeComputerFailed, "machine-helper: setrlimit %s=%d: %v", k, n, err)
		}
	}
	return nil
}

// watchProcesses bounds the processes of the helper's pid namespace: when more than max are alive it
// kills every process it may signal but itself and the namespace's init (kill -1), until none is left. RLIMIT_NPROC cannot do this alone: it is not enforced for processes whose host uid is root
// (agentd running as root), and a Go helper that hits it cannot start threads.
func watchProcesses(max int, stop <-chan struct{}) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if countProcesses() <= max {
			continue
		}
		// Everything goes, until only the namespace's init and the helper are left: a bomb that kept a
		// few processes through one sweep would grow back.
		for i := 0; i < 200 && countProcesses() > 2; i++ {
			syscall.Kill(-1, syscall.SIGKILL)
			time.Sleep(10 * time.Millisecond) // let the kernel reap before counting again
		}
	}
}

func countProcesses() int {
	f, err := os.Open("/proc")
	if err != nil {
		return 0
	}
	defer f.Close()
	names, _ := f.Readdirnames(-1)
	n := 0
	for _, s := range names {
		if s != "" && s[0] >= '0' && s[0] <= '9' {
			n++
		}
	}
	return n
}

// userNamespacesOff says why this kernel refuses unprivileged user namespaces (bwrap needs them), with
// the switch to flip; "" when nothing here says they are off.
func userNamespacesOff() (reason, hint string) {
	read := func(p string) string { b, _ := os.ReadFile(p); return strings.TrimSpace(string(b)) }
	if read("/proc/sys/user/max_user_namespaces") == "0" {
		return "user namespaces are disabled (user.max_user_namespaces = 0)", "sysctl -w user.max_user_namespaces=15000 (and persist it in /etc/sysctl.d)"
	}
	if os.Geteuid() != 0 && read("/proc/sys/kernel/unprivileged_userns_clone") == "0" {
		return "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0)", "sysctl -w kernel.unprivileged_userns_clone=1 (and persist it in /etc/sysctl.d)"
	}
	if os.Geteuid() != 0 && read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1" {
		return "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns = 1)", "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0, or give bwrap an AppArmor profile that allows userns"
	}
	return "", ""
}

// disableIPv6 turns IPv6 off on each named interface ("all" and "default" included) of the calling
// thread's network namespace; a kernel without IPv6 has nothing to turn off.
func disableIPv6(ifaces ...string) error {
	if _, err := os.Stat("/proc/sys/net/ipv6"); err != nil {
		return nil
	}
	for _, i := range ifaces {
		if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+i+"/disable_ipv6", []byte("1\n"), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// helperBecome drops the helper, started as the machine's 0 with bwrap's capabilities, to uid:gid for
// good, then executes itself again (argv with --become turned into --became) and never returns on
// success: no new user namespace from then on (denyUserNamespaces), the bounding set emptied, no
// supplementary groups, then gid and uid.
//
// Why the exec: the bounding set is per thread, and a Go process has several. A static build could drop
// it on every thread at once (syscall.AllThreadsSyscall), but a cgo build, which is what `go build` and
// `go install` make wherever a C compiler is installed, cannot: Go refuses AllThreadsSyscall under cgo
// (ENOTSUP), and a thread left with CAP_SETUID in its bounding set fails the check (issue 24: every
// sandbox create as root failed with the README's build). So the drop is done, with a raw prctl, on one
// locked thread only, followed by setgroups/setresgid/setresuid (which Go and glibc apply to every thread
// in both builds), and then that thread execs this binary again. execve keeps the calling thread's
// credentials for the new image, bounding set included, and ends every other thread: the new helper
// starts with one thread and every thread it ever makes copies it. One path for both builds, so CI's
// static and cgo runs test the same code. The seccomp filter, no new privileges, the rlimits, the pid,
// stdin and stdout carry over; helperBecame then checks the result on every thread.
func helperBecome(uid, gid int, args []string) error {
	if err := denyUserNamespaces(); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cannot find the helper's own executable: %v", err)
	}
	runtime.LockOSThread() // never unlocked: this thread execs, or the helper exits with the error
	// What is left in the bounding set (bwrap left CAP_SETUID, CAP_SETGID, CAP_SETPCAP), dropped on this thread.
	const prCapbsetDrop = 24
	for c := 0; c < 64; c++ {
		if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prCapbsetDrop, uintptr(c), 0); e != 0 && e != syscall.EINVAL {
			return fmt.Errorf("dropping capability %d from the bounding set: %v", c, e) // EINVAL: past the kernel's last
		}
	}
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %v", err)
	}
	if err := syscall.Setresgid(gid, gid, gid); err != nil {
		return fmt.Errorf("setresgid %d: %v", gid, err)
	}
	if err := syscall.Setresuid(uid, uid, uid); err != nil {
		return fmt.Errorf("setresuid %d: %v", uid, err)
	}
	argv := append([]string{self}, args...)
	for i, a := range argv {
		if a == "--become" {
			argv[i] = "--became"
		}
	}
	return fmt.Errorf("exec %s after the drop: %v", self, syscall.Exec(self, argv, os.Environ()))
}

// helperBecame checks, in the helper helperBecome executed, that every thread is uid:gid with no
// capability left anywhere, not even in the bounding set, no new privileges and the seccomp filter on.
func helperBecame(uid, gid int) error {
	tasks, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil || len(tasks) == 0 {
		return fmt.Errorf("cannot read the helper's threads: %v", err)
	}
	want := map[string]string{"Uid:": strconv.Itoa(uid), "Gid:": strconv.Itoa(gid), "CapPrm:": "0000000000000000", "CapEff:": "0000000000000000",
		"CapAmb:": "0000000000000000", "CapBnd:": "0000000000000000", "NoNewPrivs:": "1", "Groups:": ""}
	if _, ok := seccompArch[runtime.GOARCH]; ok {
		want["Seccomp:"] = "2"
	}
	for _, task := range tasks {
		st, err := os.ReadFile(task)
		if err != nil {
			continue // a thread that ended meanwhile
		}
		seen := 0
		for _, line := range strings.Split(string(st), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 {
				continue
			}
			w, ok := want[f[0]]
			if !ok {
				continue
			}
			seen++
			if w == "" && len(f) > 1 {
				return fmt.Errorf("after the drop, %s", line)
			}
			for _, v := range f[1:] {
				if v != w {
					return fmt.Errorf("after the drop, %s", line)
				}
			}
		}
		if seen != len(want) {
			return fmt.Errorf("after the drop, %s names %d of the %d fields checked", task, seen, len(want))
		}
	}
	return nil
}

// seccompArch is, per architecture, what the seccomp filter checks: seccomp(2)'s number, then for the
// native ABI and its 32-bit compat ABI the audit arch and the numbers of unshare, clone and clone3.
var seccompArch = map[string]struct {
	seccomp uint32
	abi     [2]struct{ audit, unshare, clone, clone3 uint32 }
}{
	"amd64": {317, [2]struct{ audit, unshare, clone, clone3 uint32 }{{0xC000003E, 272, 56, 435}, {0x40000003, 310, 120, 435}}},
	"arm64": {277, [2]struct{ audit, unshare, clone, clone3 uint32 }{{0xC00000B7, 97, 220, 435}, {0x40000028, 337, 120, 435}}},
}

// denyUserNamespaces installs, on every thread of the helper and so on everything it starts, a seccomp
// filter refusing a new user namespace: unshare and clone with CLONE_NEWUSER are EPERM, clone3 (whose
// flags a filter cannot read) is ENOSYS, which glibc and Go answer by using clone; so are x32 calls
// (numbers from 0x40000000), whose table the filter does not hold. It stands in for bwrap's
// --disable-userns, which cannot be combined with the mapping a root agentd writes. No new privileges
// is set already (bwrap). Another architecture keeps nested user namespaces, and says so on stderr.
func denyUserNamespaces() error {
	a, ok := seccompArch[runtime.GOARCH]
	if !ok {
		fmt.Fprintf(os.Stderr, "agentd machine-helper: no seccomp filter for %s: nested user namespaces stay possible\n", runtime.GOARCH)
		return nil
	}
	const (
		ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06 // BPF_LD|W|ABS; BPF_JMP|JEQ|JGE|JSET|K; BPF_RET|K
		allow                   = 0x7fff0000                   // SECCOMP_RET_ALLOW
		errno                   = 0x00050000                   // SECCOMP_RET_ERRNO
		cloneNewUser            = 0x10000000
	)
	type insn struct {
		code   uint16
		jt, jf uint8
		k      uint32
	}
	n, c := a.abi[0], a.abi[1]
	prog := []insn{ // jumps count from the next instruction
		{ld, 0, 0, 4},                               // 0: the arch
		{jeq, 0, 6, n.audit},                        // 1: native, else → 8
		{ld, 0, 0, 0},                               // 2: the syscall's number
		{jge, 14, 0, 0x40000000},                    // 3: x32 → 18
		{jeq, 9, 0, n.unshare},                      // 4: → 14
		{jeq, 8, 0, n.clone},                        // 5: → 14
		{jeq, 11, 0, n.clone3},                      // 6: → 18
		{ret, 0, 0, allow},                          // 7
		{jeq, 0, 7, c.audit},                        // 8: compat, else → 16
		{ld, 0, 0, 0},                               // 9
		{jeq, 3, 0, c.unshare},                      // 10: → 14
		{jeq, 2, 0, c.clone},                        // 11: → 14
		{jeq, 5, 0, c.clone3},                       // 12: → 18
		{ret, 0, 0, allow},                          // 13
		{ld, 0, 0, 16},                              // 14: args[0]'s low 32 bits (little-endian)
		{jset, 1, 0, cloneNewUser},                  // 15: → 17
		{ret, 0, 0, allow},                          // 16
		{ret, 0, 0, errno | uint32(syscall.EPERM)},  // 17
		{ret, 0, 0, errno | uint32(syscall.ENOSYS)}, // 18
	}
	fprog := struct {
		n uint16
		f *insn
	}{uint16(len(prog)), &prog[0]}
	const setModeFilter, flagTsync = 1, 1
	if r, _, e := syscall.RawSyscall(uintptr(a.seccomp), setModeFilter, flagTsync, uintptr(unsafe.Pointer(&fprog))); e != 0 || r != 0 {
		return fmt.Errorf("seccomp filter against new user namespaces: %v (thread %d)", e, r)
	}
	return nil
}

// otherDevice: dir is on another device than parent (a mount point over it).
func otherDevice(dir, parent string) bool {
	var w, d syscall.Stat_t
	return syscall.Stat(dir, &w) == nil && syscall.Stat(parent, &d) == nil && w.Dev != d.Dev
}

// ownedBy: fi's owner and group are both id.
func ownedBy(fi os.FileInfo, id int) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == id && int(st.Gid) == id
}
