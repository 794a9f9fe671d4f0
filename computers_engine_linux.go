//go:build linux

// computers_engine_linux.go — engine CLI children die with the server (Linux's parent-death signal); the
// machine helper's process groups and its deadline-proof pipe read (computers_helper.go runs only
// inside Linux machines).
package main

import (
	"io"
	"os"
	"os/exec"
	"syscall"
)

// dieWithParent: the signal comes when the THREAD that forked the child exits, not the process. Go
// reuses threads, and ends one only when a goroutine exits while locked to it (runtime.LockOSThread with
// no unlock), so agentd never does that: such an exit would SIGKILL every engine CLI that thread ever
// started (the exec channels among them).
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// newSession makes a channel process lead its own session and process group, so that killGroup reaches
// everything it started (the per-call path gets the same from the engine's exec).
// The parent-death signal reaches the command's first process if the helper itself is killed.
func newSession(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
}

func killGroup(pgid int) {
	if pgid > 0 {
		syscall.Kill(-pgid, syscall.SIGKILL)
	}
}

func signalled(ps *os.ProcessState) (int, bool) {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return int(ws.Signal()), true
	}
	return 0, false
}

// readNow reads what the pipe holds at this moment, past any read deadline: a non-blocking read on the
// descriptor itself. Nothing there (EAGAIN) or the end of the pipe is io.EOF.
func readNow(r *os.File, buf []byte) (int, error) {
	rc, err := r.SyscallConn()
	if err != nil {
		return 0, err
	}
	n := 0
	var rerr error
	if err := rc.Control(func(fd uintptr) { n, rerr = syscall.Read(int(fd), buf) }); err != nil {
		return 0, err
	}
	if n <= 0 || rerr != nil {
		return 0, io.EOF
	}
	return n, nil
}

// growPipe asks for a 1 MiB pipe buffer (F_SETPIPE_SZ; the unprivileged ceiling, fs.pipe-max-size, is
// 1 MiB by default): a fast writer runs further ahead and each read takes more, so output moves in fewer,
// larger frames. A refusal keeps the default 64 KiB.
func growPipe(f *os.File) {
	const fSetPipeSz = 1031
	if rc, err := f.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { syscall.Syscall(syscall.SYS_FCNTL, fd, fSetPipeSz, 1<<20) })
	}
}
