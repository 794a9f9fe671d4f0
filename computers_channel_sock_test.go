package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// execOver runs a shell command over ch and returns its stdout and exit.
func execOver(t *testing.T, ch *execChannel, script string) (string, chanExit) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	p, err := ch.start(chanStart{Argv: []string{"/bin/sh", "-c", script}, Token: "t" + randomChars(8)}, nil, &stdout, &stderr)
	if err != nil {
		t.Fatalf("start %q: %v", script, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	x, err := p.wait(ctx)
	if err != nil {
		t.Fatalf("%q: %v (stderr %q)", script, err, stderr.String())
	}
	return stdout.String(), x
}

// sockDir is a directory short enough for a socket address (t.TempDir's can pass 108 bytes).
func sockDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "agch")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// An upgraded channel carries its frames over the socket: output of several windows arrives whole, the
// socket is gone from the directory once taken, and the channel ends when the helper goes.
func TestChannelUpgradeInProcess(t *testing.T) {
	ch := inProcessChannel(t)
	dir := sockDir(t)
	if err := ch.upgrade(dir, dir); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	if ch.sock == nil {
		t.Fatal("upgrade returned nil but the channel has no socket")
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("the socket directory still holds %v after the upgrade", left)
	}
	out, x := execOver(t, ch, "head -c 9000000 /dev/zero | tr '\\0' a; echo; exit 3")
	if len(out) != 9000001 || strings.Trim(out, "a\n") != "" || x.Code != 3 {
		t.Fatalf("over the socket: %d bytes, exit %+v", len(out), x)
	}
	ch.close()
	if ch.alive() {
		t.Fatal("the channel is alive after close")
	}
	if _, err := ch.start(chanStart{Argv: []string{"true"}}, nil, &bytes.Buffer{}, &bytes.Buffer{}); err == nil {
		t.Fatal("a start on a closed upgraded channel succeeded")
	}
}

// A helper that cannot reach the socket says why on stdio, and the channel goes on there.
func TestChannelUpgradeRefusedStaysOnStdio(t *testing.T) {
	ch := inProcessChannel(t)
	err := ch.upgrade(sockDir(t), filepath.Join(sockDir(t), "elsewhere"))
	if err == nil || !strings.Contains(err.Error(), "could not connect") {
		t.Fatalf("upgrade towards a path the helper cannot reach: %v", err)
	}
	if ch.sock != nil {
		t.Fatal("the channel moved although the upgrade failed")
	}
	if out, x := execOver(t, ch, "echo still"); out != "still\n" || x.Code != 0 {
		t.Fatalf("after a refused upgrade: %q %+v", out, x)
	}
	if err := ch.upgrade(filepath.Join(sockDir(t), "missing"), "/nowhere"); err == nil || !strings.Contains(err.Error(), "no socket directory") {
		t.Fatalf("upgrade of a machine without the directory: %v", err)
	}
}

// Connections without the token are closed unconfirmed; the one with it is taken.
func TestAcceptHelperNeedsTheToken(t *testing.T) {
	dir := sockDir(t)
	ln, cleanup, err := listenUnixIn(dir, chanSockName)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	path := filepath.Join(dir, chanSockName)
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o666 {
		t.Fatalf("the socket: %v %v", fi.Mode(), err)
	}
	dial := func(token string) net.Conn {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if err := writeFrame(c, 0, frameHello, []byte(token)); err != nil {
			t.Fatal(err)
		}
		return c
	}
	rogue, junk := dial("guessed"), dial("")
	good := dial("the-token")
	conn, err := acceptHelper(ln, "the-token")
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	defer conn.Close()
	for _, c := range []net.Conn{rogue, junk} {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, kind, _, err := readFrame(c); err == nil {
			t.Fatalf("a connection without the token got a %q frame", kind)
		}
	}
	good.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, kind, _, err := readFrame(good); err != nil || kind != frameUpgrade {
		t.Fatalf("the helper's connection: %q %v", kind, err)
	}

	// Only wrong ones: given up after chanUpgradeTries, with why.
	for range chanUpgradeTries {
		dial("nope")
	}
	if _, err := acceptHelper(ln, "the-token"); err == nil || !strings.Contains(err.Error(), "without the token") {
		t.Fatalf("only wrong tokens: %v", err)
	}
}

// A directory whose path is too long for a socket address still gets its socket.
func TestListenUnixInLongPath(t *testing.T) {
	dir := filepath.Join(sockDir(t), strings.Repeat("d", 60), strings.Repeat("e", 60))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	ln, cleanup, err := listenUnixIn(dir, chanSockName)
	if err != nil {
		t.Fatalf("listen in a %d-byte directory: %v", len(dir), err)
	}
	if _, err := os.Stat(filepath.Join(dir, chanSockName)); err != nil {
		t.Fatalf("the socket is not in the directory: %v", err)
	}
	ln.Close()
	cleanup()
	if _, err := os.Stat(filepath.Join(dir, chanSockName)); err == nil {
		t.Fatal("cleanup left the socket")
	}
}
