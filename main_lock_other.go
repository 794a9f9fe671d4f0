//go:build !unix

// main_lock_other.go — no data-directory lock where flock does not exist (see main_lock_unix.go).
package main

func lockHome(home, whatElse string) (release func(), err error) { return func() {}, nil }
