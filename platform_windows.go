//go:build windows

// platform_windows.go — the Windows twins of platform_unix.go. Windows has no descriptor limit for
// sockets, no SIGWINCH, no O_NOFOLLOW and no process groups a signal reaches, and no POSIX shell agentd
// can count on: the local provider is refused here (docker, podman — Docker Desktop's or Podman's CLI —
// and ssh are this host's providers; the sandbox needs Linux namespaces).
//
// Entry points and rules: as platform_unix.go; each function has the same signature there.
package main

import (
	"os"
	"os/exec"
)

// oNoFollow: no such flag; the jailed writes go through os.Root, which keeps every path, symlinks
// followed, inside the root.
const oNoFollow = 0

// raiseFileLimit: sockets are handles on Windows, not bounded by a per-process descriptor limit; this is
// the cap the connection limiter starts from.
func raiseFileLimit() uint64 { return 1 << 14 }

// notifyResize: Windows consoles send no resize signal; the size is sent once at start.
func notifyResize(ch chan<- os.Signal) {}

// killPid kills one process.
func killPid(pid int) {
	if p, err := os.FindProcess(pid); err == nil {
		p.Kill()
		p.Release()
	}
}

// localProcessGroup: the local provider is refused on Windows (localHostRefusal); exec's default
// cancel kills the process.
func localProcessGroup(cmd *exec.Cmd) {}

// killGroupOf kills pid (there are no process groups to reach); it returns 0.
func killGroupOf(pid int) int {
	killPid(pid)
	return 0
}

// localHostRefusal: the local provider runs commands through /bin/sh with POSIX paths and process
// groups; Windows has none of them.
func localHostRefusal() (reason, hint string) { return localWindowsReason, localWindowsHint }
