//go:build !linux

// cli_term_other.go — platforms without the Linux ioctls: no raw mode, no colour; `agentd shell` reads
// whole lines.
package main

import (
	"errors"
	"os"
)

func isTerminal(f *os.File) bool { return false }

func makeRaw(f *os.File) (func(), error) {
	return nil, errors.New("raw mode is only implemented on Linux")
}

func windowSize(f *os.File) (cols, rows int) { return 0, 0 }
