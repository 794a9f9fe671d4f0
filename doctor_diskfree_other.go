//go:build !(linux || darwin || freebsd)

// doctor_diskfree_other.go — platforms where the free space is not read: the full-disk warning is skipped.
package main

func diskFree(string) (avail, total uint64, err error) { return 0, 0, nil }
