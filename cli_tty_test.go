//go:build linux

// cli_tty_test.go — the CLI on real pseudo-terminals (openPTY, cli_term_linux.go: Linux only): `exec -it`
// and `shell` in raw mode, the terminal restored after.
package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// screen is what a test's pseudo-terminal shows: everything read from its master.
type screen struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	before syscall.Termios // the pty's modes before the CLI started
}

func (s *screen) read(master *os.File) {
	b := make([]byte, 4096)
	for {
		n, err := master.Read(b)
		s.mu.Lock()
		s.buf.Write(b[:n])
		s.mu.Unlock()
		if err != nil {
			return
		}
	}
}

func (s *screen) has(sub string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Contains(s.buf.String(), sub)
}

func (s *screen) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.buf.String() }

// onPTY starts the CLI with a pseudo-terminal as its controlling terminal, sized cols×rows.
// It returns the command, the pty's master and slave, and what the pty shows.
func (te *testServer) onPTY(t *testing.T, cols, rows int, args ...string) (cmd *exec.Cmd, master, slave *os.File, sc *screen) {
	t.Helper()
	master, slave = testPTY(t)
	if err := setWindowSize(slave, cols, rows); err != nil {
		t.Fatal(err)
	}
	sc = &screen{before: termios(t, slave)}
	cmd = exec.Command(cliBinary(t), args...)
	cmd.Env = []string{"AGENT_URL=" + te.url, "PATH=" + os.Getenv("PATH")}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		if t.Failed() {
			t.Logf("%v showed: %q", args, sc.String())
		}
	})
	go sc.read(master)
	return cmd, master, slave, sc
}

// exited waits for the CLI and returns its exit code.
func exited(t *testing.T, cmd *exec.Cmd, sc *screen) int {
	t.Helper()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("the CLI did not exit:\n%q", sc.String())
	}
	return -1
}

// Issue 26 item 7: `agentd exec -it` is a real terminal (the program inside sees our window size and
// its changes, exit code ours, our terminal restored); `agentd shell` is a shell on it, where cd sticks;
// `agentd stop` says that a non-persistent docker machine's /work is gone.
func TestCLIExecTTY(t *testing.T) {
	requireProvider(t, "docker")
	te := newE2E(t, cliModel(t), "")
	te.agentdOK("up", "--provider", "docker", "--name", "ttyd")

	script := `stty size; while read x; do [ "$x" = q ] && exit 7; stty size; done`
	cmd, master, slave, sc := te.onPTY(t, 101, 33, "exec", "-it", "ttyd", "--", "sh", "-c", script)
	eventually(t, "stty size of the starting window", func() bool { return sc.has("33 101\r\n") })
	slaveSize := func(cols, rows int) { // resize the test's terminal: the CLI gets SIGWINCH from the kernel
		if err := setWindowSize(master, cols, rows); err != nil {
			t.Fatal(err)
		}
	}
	slaveSize(120, 40)
	n := 0
	eventually(t, "stty size after a resize", func() bool {
		if n++; n%20 == 1 {
			if n > 1 {
				// docker's client registers for SIGWINCH only after the command started (its
				// MonitorTtySize): a resize in between is lost until the next one, as for a user, so
				// the window is resized again (through another size: the kernel signals only a change).
				slaveSize(121, 40)
				slaveSize(120, 40)
			}
			master.Write([]byte("\r"))
		}
		return sc.has("40 120\r\n")
	})
	master.Write([]byte("q\r"))
	if code := exited(t, cmd, sc); code != 7 {
		t.Fatalf("exec -it exit code %d, want 7:\n%q", code, sc.String())
	}
	if termios(t, slave) != sc.before {
		t.Fatal("the terminal was not restored")
	}

	// shell: one shell, so cd sticks; exit's code is the CLI's.
	cmd, master, _, sc = te.onPTY(t, 80, 24, "shell", "ttyd")
	master.Write([]byte("cd /tmp && echo went-$((40+2))\r"))
	eventually(t, "the cd", func() bool { return sc.has("went-42") })
	master.Write([]byte("pwd; exit 3\r"))
	if code := exited(t, cmd, sc); code != 3 {
		t.Fatalf("shell: exit %d, want 3:\n%q", code, sc.String())
	}
	// The CLI wrote pwd's line before it exited, but the screen reads the pty on a goroutine of its own,
	// which may not have read it yet when the exit is seen.
	eventually(t, "pwd's /tmp on the screen before the exit", func() bool { return sc.has("/tmp\r\n") })

	// stop on a machine whose /work is a tmpfs says so.
	te.agentdOK("exec", "ttyd", "--", "sh", "-c", "echo keep > /work/f")
	if r := te.agentdOK("stop", "ttyd"); !strings.Contains(r.stderr, "/work was in memory (persist: false) and is now empty") {
		t.Fatalf("stop of a docker machine without persist: %s", r)
	}
	te.agentdOK("start", "ttyd")
	if r := te.agentd("", nil, "exec", "ttyd", "--", "cat", "/work/f"); r.code == 0 {
		t.Fatalf("/work survived the stop, so the warning is wrong: %s", r)
	}
}

// shell on a real pseudo-terminal, on a provider without a tty (local): it says so and falls back to one
// command per line in raw mode: a typed command's output, Ctrl-D, the terminal restored. (On a provider
// with a tty, shell is a real shell: TestCLIExecTTY.)
func TestCLIShellOnAPseudoTerminal(t *testing.T) {
	te := newE2E(t, cliModel(t), "")
	te.agentdOK("up", "--provider", "local", "--name", "ttybox")
	master, slave := testPTY(t)
	before := termios(t, slave)
	cmd := exec.Command(cliBinary(t), "shell", "ttybox")
	cmd.Env = []string{"AGENT_URL=" + te.url, "PATH=" + os.Getenv("PATH")}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var screen bytes.Buffer
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := master.Read(b)
			mu.Lock()
			screen.Write(b[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	seen := func(s string) bool { mu.Lock(); defer mu.Unlock(); return strings.Contains(screen.String(), s) }
	eventually(t, "the prompt", func() bool { return seen("ttybox:/work$ ") })
	if !seen("the local provider has no tty; one command per line instead") {
		t.Errorf("shell did not say why it falls back: %q", screen.String())
	}
	master.Write([]byte("echo typ\x7fped-in-a-pty\r"))
	eventually(t, "the command's output", func() bool { return seen("\r\nped-in-a-pty\r\n") || seen("typed-in-a-pty\r\n") })
	master.Write([]byte{4}) // Ctrl-D
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("shell: %v\n%s", err, screen.String())
		}
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("shell did not exit on Ctrl-D:\n%s", screen.String())
	}
	if !seen("typed-in-a-pty") && !seen("ped-in-a-pty") {
		t.Fatalf("screen: %q", screen.String())
	}
	if after := termios(t, slave); after != before {
		t.Fatal("the terminal was not restored")
	}
}

func termios(t *testing.T, f *os.File) syscall.Termios {
	var tio syscall.Termios
	if err := ioctl(f.Fd(), syscall.TCGETS, unsafe.Pointer(&tio)); err != nil {
		t.Fatal(err)
	}
	return tio
}
