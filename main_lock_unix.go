//go:build unix

// main_lock_unix.go — one agentd process per data directory: `serve` and the in-process `agentd mcp`
// take an exclusive flock on $AGENT_HOME/agentd.lock, so a second one is told who holds the directory
// instead of adopting, reconciling and reaping the first one's machines as its own. The kernel drops
// the lock when its holder dies (kill -9 included), so a crash never leaves the directory locked.
package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// lockHome takes the data directory's lock; release gives it back. The file holds the holder's pid.
func lockHome(home, whatElse string) (release func(), err error) {
	if err := os.MkdirAll(home, 0o700); err != nil {
		return nil, errorf(codeConfig, "cannot create %s: %v", home, err).withHint("make AGENT_HOME writable")
	}
	path := filepath.Join(home, "agentd.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, errorf(codeConfig, "cannot open %s: %v", path, err).withHint("make AGENT_HOME writable")
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errorf(codeConfig, "cannot lock %s: %v", path, err).withHint("put AGENT_HOME on a local filesystem")
		}
		holder := "another agentd"
		if b, _ := os.ReadFile(path); len(strings.TrimSpace(string(b))) > 0 {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				holder = fmt.Sprintf("agentd (pid %d)", pid)
			}
		}
		return nil, errorf(codeConfig, "%s is already using the data directory %s", holder, home).
			withHint("stop it, or give this one its own --home or AGENT_HOME" + whatElse)
	}
	f.Truncate(0)
	f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}
