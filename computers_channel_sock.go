// computers_channel_sock.go — the exec channel's fast lane on docker and podman: once the helper has said
// hello over its `docker exec -i`, both ends move their frames to a unix socket that agentd listens on
// inside a directory bind-mounted (read-only) into the machine, so bytes cross one socket instead of the
// engine's stdio relay (CLI → daemon → containerd → shim and back, four processes copying every frame).
//
// Entry points: computerService.channelSockDir and makeChannelSockDir (the machine's directory, made at
// create and mounted by runArgs), execChannel.upgrade (host), helper.upgrade (in the machine).
//
// Rules: the socket exists only while a channel is being opened: agentd listens, sends frameUpgrade with
// the socket's path and a fresh 128-bit token over stdio, accepts the one connection whose first frame is
// a hello carrying that token (compared in constant time; a few wrong ones are dropped), confirms on it,
// and removes the socket. Only then does the helper switch its output to the socket; until the
// confirmation nothing moves, so a refused or late upgrade leaves the channel on stdio, exactly as before
// (machines made before this existed have no directory and are never asked). The `docker exec -i` stays
// open as the helper's tether: its end (stdin EOF) still ends the helper and kills what it started, and
// the end of either connection breaks the channel. A process in the machine that reached the socket
// would learn nothing and gain nothing: the channel runs as the machine's own user, and the host already
// treats every frame from the machine as untrusted.
package main

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"
)

const (
	chanSockInMachine = "/.agentd/chan" // where the machine sees its socket directory
	chanSockName      = "s"
	chanUpgradeWait   = 5 * time.Second // for the helper's connection, after frameUpgrade
	chanUpgradeTries  = 4               // connections with a wrong token before the upgrade is given up
)

// channelSockDir is the host directory holding machine id's socket while its channel opens.
func (c *computerService) channelSockDir(id string) string { return filepath.Join(c.home, "chan", id) }

// makeChannelSockDir makes machine id's socket directory before its container is created: searchable by
// the machine's user (0711), holding nothing but the socket while a channel opens, and mounted read-only
// (connecting to a socket needs no write). Without it the channel stays on stdio.
func (c *computerService) makeChannelSockDir(id string) {
	if c.helper == "" {
		return
	}
	dir := c.channelSockDir(id)
	if err := os.MkdirAll(dir, 0o711); err != nil {
		c.log.Debug("computers: no socket directory for the exec channel", "computer", id, "err", err)
		return
	}
	os.Chmod(dir, 0o711) // MkdirAll's mode is under the umask; the machine's user must get through
}

// upgrade moves an open channel (hello received, nothing in flight) to a socket in hostDir, which the
// machine sees as guestDir. It returns nil when the frames now go over the socket; any error leaves the
// channel on stdio, working.
func (ch *execChannel) upgrade(hostDir, guestDir string) error {
	if _, err := os.Stat(hostDir); err != nil {
		return errors.New("the machine has no socket directory (made before the fast lane existed)")
	}
	ln, cleanup, err := listenUnixIn(hostDir, chanSockName)
	if err != nil {
		return err
	}
	defer cleanup()
	var tb [16]byte
	rand.Read(tb[:])
	token := hex.EncodeToString(tb[:])
	body, _ := json.Marshal(chanUpgrade{Path: guestDir + "/" + chanSockName, Token: token})
	if err := ch.send(0, frameUpgrade, body); err != nil {
		return err
	}
	type accepted struct {
		conn net.Conn
		err  error
	}
	got := make(chan accepted, 1)
	go func() {
		conn, err := acceptHelper(ln, token)
		got <- accepted{conn, err}
	}()
	select {
	case a := <-got:
		if a.err != nil {
			return a.err
		}
		ch.switchTo(a.conn)
		return nil
	case why := <-ch.upgradeNack:
		ln.Close() // ends the accept loop
		if a := <-got; a.conn != nil {
			a.conn.Close()
		}
		return errors.New("the helper could not connect: " + why)
	case <-ch.done: // the helper went away meanwhile
		ln.Close()
		if a := <-got; a.conn != nil {
			a.conn.Close()
		}
		return errors.New("the channel ended during the upgrade")
	}
}

// acceptHelper takes the first connection on ln whose first frame is a hello carrying token, confirms
// it, and returns it; connections without the token are closed unconfirmed, up to chanUpgradeTries.
func acceptHelper(ln *net.UnixListener, token string) (net.Conn, error) {
	last := errors.New("no connection")
	for range chanUpgradeTries {
		ln.SetDeadline(time.Now().Add(chanUpgradeWait))
		conn, err := ln.Accept()
		if err != nil {
			return nil, fmt.Errorf("the helper did not connect (%v; before: %v)", err, last)
		}
		conn.SetDeadline(time.Now().Add(chanUpgradeWait))
		_, kind, payload, err := readFrame(conn)
		if err == nil && kind == frameHello && subtle.ConstantTimeCompare(payload, []byte(token)) == 1 {
			if err = writeFrame(conn, 0, frameUpgrade, nil); err == nil {
				conn.SetDeadline(time.Time{})
				return conn, nil
			}
		}
		conn.Close()
		if err == nil {
			err = fmt.Errorf("its first frame was a %q or the token was wrong", kind)
		}
		last = fmt.Errorf("a connection without the token (%v)", err)
	}
	return nil, last
}

// listenUnixIn listens on dir/name, removing a socket left there; a directory whose path is too long for
// a socket address is reached through /proc/self/fd. cleanup closes the listener and removes the socket.
func listenUnixIn(dir, name string) (*net.UnixListener, func(), error) {
	full := filepath.Join(dir, name)
	os.Remove(full)
	addr, closeDir := full, func() {}
	if len(full) >= 100 { // sun_path holds 108 bytes
		d, err := os.Open(dir)
		if err != nil {
			return nil, nil, err
		}
		addr, closeDir = fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), name), func() { d.Close() }
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: addr, Net: "unix"})
	if err != nil {
		closeDir()
		return nil, nil, fmt.Errorf("cannot listen for the helper: %v", err)
	}
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(full, 0o666); err != nil { // the machine's user connects (its uid is not ours)
		ln.Close()
		os.Remove(full)
		closeDir()
		return nil, nil, err
	}
	return ln, func() { ln.Close(); os.Remove(full); closeDir() }, nil
}

// switchTo makes conn the channel's connection both ways; stdio stays open as the helper's tether.
func (ch *execChannel) switchTo(conn net.Conn) {
	ch.wmu.Lock()
	ch.w = conn
	ch.wmu.Unlock()
	ch.mu.Lock()
	ch.sock = conn
	ch.mu.Unlock()
	go ch.read(conn)
}

// upgrade is the helper's half: connect, say hello with the token, wait for the host's confirmation,
// then send every frame over the socket and read the host's from it. Any failure is said on stdio, and
// the channel stays there.
func (h *helper) upgrade(payload []byte) {
	var req chanUpgrade
	if err := json.Unmarshal(payload, &req); err != nil || req.Path == "" {
		h.send(0, frameUpgrade, []byte("an upgrade request without a path"))
		return
	}
	conn, err := net.DialTimeout("unix", req.Path, chanUpgradeWait)
	if err != nil {
		h.send(0, frameUpgrade, []byte(err.Error()))
		return
	}
	conn.SetDeadline(time.Now().Add(chanUpgradeWait))
	err = writeFrame(conn, 0, frameHello, []byte(req.Token))
	if err == nil {
		var kind byte
		_, kind, _, err = readFrame(conn)
		if err == nil && kind != frameUpgrade {
			err = fmt.Errorf("the host answered %q", kind)
		}
	}
	if err != nil {
		conn.Close()
		h.send(0, frameUpgrade, []byte("no confirmation: "+err.Error()))
		return
	}
	conn.SetDeadline(time.Time{})
	h.wmu.Lock()
	h.out = conn
	h.wmu.Unlock()
	h.mu.Lock()
	h.sock = conn
	h.mu.Unlock()
	go func() { h.ended <- eachFrame(newFrameReader(conn), h.dispatch) }()
}
