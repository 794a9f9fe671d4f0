//go:build linux

// computers_engine_linux.go — engine CLI children die with the server (Linux's parent-death signal).
package main

import (
	"os/exec"
	"syscall"
)

func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
