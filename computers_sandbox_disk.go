// computers_sandbox_disk.go — a persist sandbox's /work bounded in total: an ext4 image of diskMb,
// loop-mounted over the machine's host directory, where agentd is root and the host has mkfs.ext4,
// mount and loop devices (a machine without persist has tmpfs, computers_sandbox.go). Elsewhere, and for a
// persist machine made before this with files in its directory, /work stays the host directory, bounded
// per file only (RLIMIT_FSIZE): diskNote says so in the machine's info, limitsNote in the doctor's.
//
// Entry points: sandboxProvider.mountDisk (create, start, and every start of the machine's bwrap:
// helperCmd, so a server restarted after a shutdown mounts it again before the machine sees /work),
// unmountDisk (stop, destroy), unmountDisks (server shutdown), diskMounted.
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// loopDisks says whether persist machines get an image here, or why not.
func loopDisks() (bool, string) {
	if os.Geteuid() != 0 {
		return false, "agentd is not root (a loop mount needs it)"
	}
	for _, bin := range []string{"mkfs.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(bin); err != nil {
			return false, bin + " is not installed (apt-get install e2fsprogs mount)"
		}
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		return false, "this host has no loop devices (/dev/loop-control)"
	}
	return true, ""
}

func (s *sandboxProvider) diskImage(m *ComputerInfo) string {
	return filepath.Join(s.dir(m), "work.img")
}

// diskMounted: the machine's work directory is a mount point (another device than its parent).
func (s *sandboxProvider) diskMounted(m *ComputerInfo) bool {
	return otherDevice(filepath.Join(s.dir(m), "work"), s.dir(m)) // computers_sandbox_linux.go
}

// mountDisk loop-mounts a persist machine's image over its work directory, making the image (sparse,
// diskMb, owned by the machine's user) the first time, while that directory is still empty.
func (s *sandboxProvider) mountDisk(ctx context.Context, m *ComputerInfo) error {
	if ok, _ := loopDisks(); !ok || !m.Spec.Persist || s.diskMounted(m) {
		return nil
	}
	work, img := filepath.Join(s.dir(m), "work"), s.diskImage(m)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	run := func(argv ...string) error {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.WaitDelay = 2 * time.Second
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", argv[0], err, firstLine(string(out)))
		}
		return nil
	}
	if _, err := os.Stat(img); os.IsNotExist(err) {
		if ents, _ := os.ReadDir(work); len(ents) > 0 {
			return nil // a machine from before: its files stay where they are, unbounded (diskNote)
		}
		f, err := os.OpenFile(img, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		err = f.Truncate(int64(m.Spec.DiskMB) << 20)
		f.Close()
		id := strconv.Itoa(sandboxHostID)
		if err == nil {
			err = run("mkfs.ext4", "-q", "-F", "-m", "0", "-E", "root_owner="+id+":"+id, img)
		}
		if err != nil {
			os.Remove(img)
			return fmt.Errorf("cannot make the machine's disk image: %v", err)
		}
	}
	if err := run("mount", "-o", "loop,nosuid,nodev", img, work); err != nil {
		return fmt.Errorf("cannot mount the machine's disk image: %v", err)
	}
	os.Remove(filepath.Join(work, "lost+found")) // mkfs's, empty: not the machine's
	os.Chmod(work, 0o755)
	return nil
}

// unmountDisk takes the image off the work directory (stop, destroy); its files stay in the image.
func (s *sandboxProvider) unmountDisk(m *ComputerInfo) error {
	if !s.diskMounted(m) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "umount", filepath.Join(s.dir(m), "work"))
	cmd.WaitDelay = 2 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("cannot unmount the machine's disk image: %v: %s", err, firstLine(string(out)))
	}
	return nil
}

// unmountDisks takes every machine's image off at server shutdown (the machines' bwraps are gone):
// nothing of agentd's stays mounted on the host; the next start of the machine mounts it again.
func (s *sandboxProvider) unmountDisks() {
	ents, _ := os.ReadDir(s.root)
	for _, e := range ents {
		if e.IsDir() {
			s.unmountDisk(&ComputerInfo{ID: e.Name()})
		}
	}
}
