//go:build linux

// computers_sandbox_linux.go — the Linux-only parts of the sandbox provider (computers_sandbox.go): the
// helper's resource limits (setrlimit, inherited by every process it starts), the process-count
// watchdog of its pid namespace, the probe's look at the kernel's user-namespace switches, and the
// network-namespace switches of a full machine's namespace (computers_sandboxnet.go).
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
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

// sysSetns is setns(2)'s number per architecture (the syscall package has no SYS_SETNS).
var sysSetns = map[string]uintptr{"amd64": 308, "arm64": 268, "riscv64": 268, "loong64": 268, "386": 346, "arm": 375,
	"ppc64": 350, "ppc64le": 350, "s390x": 339, "mips": 4344, "mipsle": 4344, "mips64": 5303, "mips64le": 5303}

// inNetns runs f on a thread moved into the network namespace at nsPath (a /run/netns file), so what
// f reads and writes under /proc/sys/net is that namespace's. The thread is never given back: it ends
// with its goroutine, and no other goroutine ever runs in the namespace.
func inNetns(nsPath string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread dies with this goroutine
		fd, err := syscall.Open(nsPath, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		trap, ok := sysSetns[runtime.GOARCH]
		if !ok {
			syscall.Close(fd)
			errc <- fmt.Errorf("setns: no system call number known for %s", runtime.GOARCH)
			return
		}
		_, _, e := syscall.RawSyscall(trap, uintptr(fd), syscall.CLONE_NEWNET, 0)
		syscall.Close(fd)
		if e != 0 {
			errc <- fmt.Errorf("setns %s: %v", nsPath, e)
			return
		}
		errc <- f()
	}()
	return <-errc
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
// good: the bounding set emptied on every thread (where Go can: not under cgo, where setresuid still
// clears the capabilities), no supplementary groups, then gid and uid. It checks the result.
func helperBecome(uid, gid int) error {
	const prCapbsetDrop = 24
	last := 63
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			last = n
		}
	}
	for c := 0; c <= last; c++ {
		if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, prCapbsetDrop, uintptr(c), 0); e == syscall.ENOTSUP {
			break
		} else if e != 0 && e != syscall.EINVAL {
			return fmt.Errorf("dropping capability %d from the bounding set: %v", c, e)
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
	st, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return err
	}
	want := map[string]string{"Uid:": strconv.Itoa(uid), "Gid:": strconv.Itoa(gid), "CapPrm:": "0000000000000000", "CapEff:": "0000000000000000", "CapAmb:": "0000000000000000"}
	for _, line := range strings.Split(string(st), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		if w, ok := want[f[0]]; ok {
			for _, v := range f[1:] {
				if v != w {
					return fmt.Errorf("after the drop, %s", line)
				}
			}
		}
	}
	return nil
}
