//go:build linux

// computers_sandbox_linux.go — the Linux-only parts of the sandbox provider (computers_sandbox.go): the
// helper's resource limits (setrlimit, inherited by every process it starts), the process-count
// watchdog of its pid namespace, and the probe's look at the kernel's user-namespace switches.
package main

import (
	"os"
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
