//go:build linux

// cli_term_linux.go — the terminal's modes for `agentd shell` and colour: raw mode, window size, and
// whether a file is a terminal, through ioctl (no dependency beyond syscall).
package main

import (
	"os"
	"syscall"
	"unsafe"
)

func ioctl(fd uintptr, req uintptr, arg unsafe.Pointer) error {
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, req, uintptr(arg)); e != 0 {
		return e
	}
	return nil
}

func isTerminal(f *os.File) bool {
	var t syscall.Termios
	return ioctl(f.Fd(), syscall.TCGETS, unsafe.Pointer(&t)) == nil
}

// makeRaw puts the terminal in raw mode and returns the function that restores it.
func makeRaw(f *os.File) (restore func(), err error) {
	var old syscall.Termios
	if err := ioctl(f.Fd(), syscall.TCGETS, unsafe.Pointer(&old)); err != nil {
		return nil, err
	}
	raw := old
	raw.Iflag &^= syscall.IGNBRK | syscall.BRKINT | syscall.PARMRK | syscall.ISTRIP | syscall.INLCR | syscall.IGNCR | syscall.ICRNL | syscall.IXON
	raw.Oflag &^= syscall.OPOST
	raw.Lflag &^= syscall.ECHO | syscall.ECHONL | syscall.ICANON | syscall.ISIG | syscall.IEXTEN
	raw.Cflag &^= syscall.CSIZE | syscall.PARENB
	raw.Cflag |= syscall.CS8
	raw.Cc[syscall.VMIN], raw.Cc[syscall.VTIME] = 1, 0
	if err := ioctl(f.Fd(), syscall.TCSETS, unsafe.Pointer(&raw)); err != nil {
		return nil, err
	}
	return func() { ioctl(f.Fd(), syscall.TCSETS, unsafe.Pointer(&old)) }, nil
}

// windowSize is the terminal's columns and rows (0, 0 when unknown).
func windowSize(f *os.File) (cols, rows int) {
	var ws struct{ Row, Col, X, Y uint16 }
	if ioctl(f.Fd(), syscall.TIOCGWINSZ, unsafe.Pointer(&ws)) != nil {
		return 0, 0
	}
	return int(ws.Col), int(ws.Row)
}
