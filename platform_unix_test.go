//go:build unix

// platform_unix_test.go — the tests' twin of platform_unix.go: whether a process is alive (signal 0).
package main

import "syscall"

func processAlive(pid int) bool { return syscall.Kill(pid, 0) == nil }
