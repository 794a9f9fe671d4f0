//go:build linux || darwin || freebsd

// doctor_diskfree_unix.go — free space of the filesystem holding a path, for the doctor's full-disk warning.
package main

import "syscall"

func diskFree(dir string) (avail, total uint64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return uint64(st.Bavail) * uint64(st.Bsize), uint64(st.Blocks) * uint64(st.Bsize), nil
}
