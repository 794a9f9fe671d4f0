//go:build linux

// computers_engine_linux.go — engine CLI children die with the server (Linux's parent-death signal); the
// machine helper's process groups and its deadline-proof pipe read (computers_helper.go runs only
// inside Linux machines).
package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
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

// oPath is O_PATH (not in package syscall): a descriptor naming an object without opening it for I/O.
const oPath = 0x200000

// openNoFollow opens p (absolute, clean) one component at a time from /, each with O_NOFOLLOW, so
// nothing in it may be a symlink: one is refused naming it. The result is an O_PATH descriptor of the
// object p names now, whatever p names later.
func openNoFollow(p string) (*os.File, error) {
	fd, err := syscall.Open("/", oPath|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	walked := ""
	for _, name := range strings.Split(strings.TrimPrefix(p, "/"), "/") {
		if name == "" {
			continue
		}
		walked += "/" + name
		next, err := syscall.Openat(fd, name, oPath|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		syscall.Close(fd)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", walked, err)
		}
		fd = next
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			syscall.Close(fd)
			return nil, fmt.Errorf("%s: %v", walked, err)
		}
		if st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
			syscall.Close(fd)
			return nil, fmt.Errorf("%s is a symlink: a mount source must be named by its real path, with no symlink in it", walked)
		}
	}
	return os.NewFile(uintptr(fd), p), nil
}

// fileID is the device, inode and type of what f is open on.
func fileID(f *os.File) (dev, ino uint64, mode os.FileMode, err error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return 0, 0, 0, err
	}
	mode = os.ModeIrregular
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		mode = os.ModeDir
	case syscall.S_IFREG:
		mode = 0
	}
	return uint64(st.Dev), uint64(st.Ino), mode, nil
}
