//go:build !linux

// cli_term_other.go — platforms without the Linux ioctls: no raw mode, no colour, no pseudo-terminals;
// `agentd shell` reads whole lines and the terminal WebSocket refuses tty commands.
package main

import (
	"errors"
	"os"
	"os/exec"
)

func openPTY() (master, slave *os.File, err error) {
	return nil, nil, errors.New("pseudo-terminals are only implemented on Linux")
}

func setWindowSize(f *os.File, cols, rows int) error { return errors.New("no pseudo-terminals here") }

func controllingTerminal(cmd *exec.Cmd) {}

func isTerminal(f *os.File) bool { return false }

func makeRaw(f *os.File) (func(), error) {
	return nil, errors.New("raw mode is only implemented on Linux")
}

func windowSize(f *os.File) (cols, rows int) { return 0, 0 }
