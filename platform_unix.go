//go:build unix

// platform_unix.go — what Unix hosts (Linux, macOS, the BSDs) do where Windows differs
// (platform_windows.go): the descriptor limit, the terminal's resize signal, a file opened without
// following a final symlink, killing a process or a whole process group, and the local provider's
// process groups.
//
// Entry points: raiseFileLimit (runServe), notifyResize (cli_shell.go), oNoFollow (the jailed writes of
// computers_files.go and computers_local.go), killPid (the sandbox's cgroup cleanup), localProcessGroup
// and killGroupOf (computers_local.go), localHostRefusal (the local provider's probe).
//
// Rules: each function here has a twin with the same signature in platform_windows.go; keep them in step.
package main

import (
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

// oNoFollow makes an open refuse a final-component symlink.
const oNoFollow = syscall.O_NOFOLLOW

// raiseFileLimit lifts the soft descriptor limit to the hard one and returns the result.
func raiseFileLimit() uint64 {
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) != nil {
		return 1024
	}
	if rl.Cur < rl.Max {
		rl.Cur = rl.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
		syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl)
	}
	return uint64(rl.Cur) // int64 on the BSDs
}

// notifyResize delivers the terminal's window-size changes (SIGWINCH) on ch.
func notifyResize(ch chan<- os.Signal) { signal.Notify(ch, syscall.SIGWINCH) }

// killPid kills one process (SIGKILL).
func killPid(pid int) { syscall.Kill(pid, syscall.SIGKILL) }

// localProcessGroup makes cmd lead its own process group, killed whole when its context ends.
func localProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		if cmd.Process != nil {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		return nil
	}
}

// killGroupOf kills pid's process group (unless it is agentd's own) and pid itself; it returns the group
// it killed, or 0.
func killGroupOf(pid int) int {
	killed := 0
	if pgid, err := syscall.Getpgid(pid); err == nil && pgid != syscall.Getpgrp() {
		syscall.Kill(-pgid, syscall.SIGKILL)
		killed = pgid
	}
	syscall.Kill(pid, syscall.SIGKILL)
	return killed
}

// localHostRefusal is why the local provider cannot run on this host ("" when it can).
func localHostRefusal() (reason, hint string) { return "", "" }
