//go:build windows

// platform_windows_test.go — the tests' twin of platform_windows.go: whether a process is alive (it can
// be opened and has not exited).
package main

import "syscall"

func processAlive(pid int) bool {
	const stillActive = 259
	h, err := syscall.OpenProcess(syscall.PROCESS_QUERY_INFORMATION, false, uint32(pid))
	if err != nil {
		return false
	}
	defer syscall.CloseHandle(h)
	var code uint32
	return syscall.GetExitCodeProcess(h, &code) == nil && code == stillActive
}
