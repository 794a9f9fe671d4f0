//go:build !linux

// computers_sandbox_other.go — the sandbox provider needs Linux namespaces; elsewhere it is unavailable
// (computers_sandbox.go's probe says so) and these keep the package building.
package main

import (
	"errors"
	"os"
)

func applyHelperLimits(spec string) error            { return nil }
func watchProcesses(max int, stop <-chan struct{})   {}
func userNamespacesOff() (reason, hint string)       { return "", "" }
func disableIPv6(ifaces ...string) error             { return nil }
func helperBecome(uid, gid int, args []string) error { return errors.New("the sandbox needs Linux") }
func helperBecame(uid, gid int) error                { return errors.New("the sandbox needs Linux") }
func otherDevice(dir, parent string) bool            { return false }
func ownedBy(fi os.FileInfo, id int) bool            { return false }
