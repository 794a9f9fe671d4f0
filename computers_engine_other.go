//go:build !linux

// computers_engine_other.go — no parent-death signal outside Linux: the reconcile at start cleans up.
package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

func dieWithParent(cmd *exec.Cmd) {}

// The machine helper runs only inside Linux machines; elsewhere these keep the package building.
func newSession(cmd *exec.Cmd)                  {}
func killGroup(pgid int)                        {}
func signalled(ps *os.ProcessState) (int, bool) { return 0, false }

// readNow: the helper runs only inside Linux machines.
func readNow(r *os.File, buf []byte) (int, error) { return 0, io.EOF }

// growPipe: the helper runs only inside Linux machines.
func growPipe(f *os.File) {}

// openNoFollow: without O_PATH, each prefix of p is looked at with Lstat (a symlink refused), then p is
// opened; the check and the open are two steps here (Linux's walk is one descriptor throughout).
func openNoFollow(p string) (*os.File, error) {
	walked := ""
	for _, name := range strings.Split(strings.TrimPrefix(p, "/"), "/") {
		if name == "" {
			continue
		}
		walked += "/" + name
		fi, err := os.Lstat(walked)
		if err != nil {
			return nil, err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			return nil, fmt.Errorf("%s is a symlink: a mount source must be named by its real path, with no symlink in it", walked)
		}
	}
	return os.Open(p)
}

// fileID: no inode outside Linux's and the BSDs' Stat_t here; the type alone.
func fileID(f *os.File) (dev, ino uint64, mode os.FileMode, err error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, 0, err
	}
	return 0, 0, fi.Mode().Type(), nil
}
