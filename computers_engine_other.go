//go:build !linux

// computers_engine_other.go — no parent-death signal outside Linux: the reconcile at start cleans up.
package main

import "os/exec"

func dieWithParent(cmd *exec.Cmd) {}
