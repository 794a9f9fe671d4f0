package main

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// channelUp reports whether the machine's exec channel is open.
func channelUp(e *testServer, id string) bool {
	rt := e.s.computers.runtime(id)
	rt.chMu.Lock()
	defer rt.chMu.Unlock()
	return rt.ch != nil && rt.ch.alive()
}

// channelOnSocket reports whether the machine's open channel moved to its socket (computers_channel_sock.go).
func channelOnSocket(e *testServer, id string) bool {
	rt := e.s.computers.runtime(id)
	rt.chMu.Lock()
	defer rt.chMu.Unlock()
	if rt.ch == nil {
		return false
	}
	rt.ch.mu.Lock()
	defer rt.ch.mu.Unlock()
	return rt.ch.sock != nil
}

// helperPid finds the helper's pid inside the machine (from the host: the engine's exec as root).
func helperPid(t *testing.T, prov, ctr string) string {
	t.Helper()
	out, err := exec.Command(prov, "exec", "-u", "1000:1000", ctr, "sh", "-c",
		`for f in /proc/[0-9]*/cmdline; do if tr '\0' ' ' < "$f" 2>/dev/null | grep -q '^/.agentd/agentd machine-helper'; then basename "$(dirname "$f")"; fi; done 2>/dev/null`).Output()
	if err != nil {
		t.Fatalf("finding the helper: %v %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// The channel carries execs and file operations on docker and podman: concurrent requests, output past
// the flow-control window, stdin, timeouts and aborts that kill the whole process group.
func TestExecChannel(t *testing.T) {
	for _, prov := range []string{"docker", "podman"} {
		t.Run(prov, func(t *testing.T) {
			requireProvider(t, prov)
			e := newTestServer(t, withHostEnv)
			if e.s.computers.helper == "" {
				t.Skipf("the exec channel is off: %s", e.s.computers.helperNote)
			}
			m := e.create(map[string]any{"provider": prov})
			if got := e.sh(m.ID, "echo hi"); got != "hi\n" {
				t.Fatalf("echo: %q", got)
			}
			if !channelUp(e, m.ID) {
				t.Fatal("the channel did not open on first use")
			}
			if pid := helperPid(t, prov, "agentd-"+m.ID); pid == "" {
				t.Fatal("no machine-helper process inside the machine")
			}
			// The frames moved to the socket; the machine sees an empty, read-only directory.
			if !channelOnSocket(e, m.ID) {
				t.Fatal("the channel stayed on the engine's stdio")
			}
			if got := e.sh(m.ID, "ls -A /.agentd/chan; touch /.agentd/chan/x 2>/dev/null && echo writable; true"); got != "" {
				t.Fatalf("the socket directory in the machine: %q", got)
			}
			var doc DoctorReport
			e.call("GET", "/v1/doctor", nil, 200, &doc)
			// On, with the note of the build under test (the README's: cgo where a C compiler is).
			_, note := findHelperBinary(cliBinary(t))
			for _, p := range doc.Providers {
				if p.Name == prov && (p.ExecChannel == nil || !p.ExecChannel.Enabled || p.ExecChannel.Reason != note) {
					t.Fatalf("doctor's execChannel for %s: %+v, want enabled with %q", prov, p.ExecChannel, note)
				}
			}

			// 20 at once, each with its own answer.
			var wg sync.WaitGroup
			errs := make(chan string, 20)
			for i := range 20 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var r ExecResult
					res := e.do("POST", "/v1/computers/"+m.ID+"/exec", map[string]any{"cmd": fmt.Sprintf("echo n%d; echo e%d >&2; exit %d", i, i, i%3)})
					if res.status != 200 || json.Unmarshal(res.body, &r) != nil || r.Stdout != fmt.Sprintf("n%d\n", i) ||
						r.Stderr != fmt.Sprintf("e%d\n", i) || r.ExitCode != i%3 {
						errs <- fmt.Sprintf("exec %d: %d %s", i, res.status, res.body)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for msg := range errs {
				t.Error(msg)
			}

			// 5 MB of output (five windows) arrives whole, in order; 3 MB of stdin comes back through cat.
			var n int
			_, err := e.s.computers.Exec(context.Background(), m.ID, ExecRequest{Cmd: execCommand{Shell: "head -c 5000000 /dev/zero | tr '\\0' a"}, TimeoutSec: 60, MaxOutputBytes: 8 << 20},
				func(stream, data string) { n += len(data) })
			if err != nil || n != 5000000 {
				t.Fatalf("5 MB: %d bytes, %v", n, err)
			}
			in := strings.Repeat("0123456789abcdef", 3<<16)
			r, err := e.s.computers.Exec(context.Background(), m.ID, ExecRequest{Cmd: execCommand{Shell: "wc -c"}, Stdin: &in, TimeoutSec: 60}, nil)
			if err != nil || strings.TrimSpace(r.Stdout) != fmt.Sprint(len(in)) {
				t.Fatalf("stdin through wc: %+v %v", r, err)
			}

			// A command that never reads its 6 MB of stdin (more than a window) holds back no one else.
			big := strings.Repeat("z", 6<<20)
			stuck := make(chan error, 1)
			go func() {
				_, err := e.s.computers.Exec(context.Background(), m.ID, ExecRequest{Cmd: execCommand{Shell: "sleep 305"}, Stdin: &big, TimeoutSec: 60}, nil)
				stuck <- err
			}()
			eventually(t, "the command ignoring its stdin running", func() bool { return strings.Contains(e.processes(m.ID), "sleep 305") })
			if got := e.sh(m.ID, "echo beside"); got != "beside\n" {
				t.Fatalf("beside a stalled stdin: %q", got)
			}
			select {
			case err := <-stuck:
				t.Fatalf("the stdin-ignoring command ended early: %v", err)
			default:
			}
			e.sh(m.ID, `for p in /proc/[0-9]*; do [ "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" = "sleep 305 " ] && kill ${p#/proc/}; done; true`)
			if err := <-stuck; err != nil {
				t.Fatalf("the stdin-ignoring command: %v", err)
			}

			// A file round trip over the channel, bigger than a frame.
			body := bytes.Repeat([]byte("x"), 3<<20)
			e.call("PUT", "/v1/computers/"+m.ID+"/fs/write?path=/work/big.bin", body, 204, nil)
			if got := e.do("GET", "/v1/computers/"+m.ID+"/fs/read?path=/work/big.bin", nil); got.status != 200 || !bytes.Equal(got.body, body) {
				t.Fatalf("read back: %d, %d bytes", got.status, len(got.body))
			}

			// A timeout kills the command and what it started in the background.
			if r := e.exec(m.ID, map[string]any{"cmd": "sleep 301 & sleep 302", "timeoutSec": 1}); !r.TimedOut || r.ExitCode != execTimedOutCode {
				t.Fatalf("timeout: %+v", r)
			}
			// An abort (the caller goes away) does the same.
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := e.s.computers.Exec(ctx, m.ID, ExecRequest{Cmd: execCommand{Shell: "sleep 303 & sleep 304"}, TimeoutSec: 60}, nil)
				done <- err
			}()
			eventually(t, "the aborted command running", func() bool { return strings.Contains(e.processes(m.ID), "sleep 304") })
			cancel()
			if err := <-done; asAPIError(err).Code != codeAborted {
				t.Fatalf("abort: %v", err)
			}
			eventually(t, "no sleep left in the machine", func() bool { return !strings.Contains(e.processes(m.ID), "sleep 30") })

			// Stopping the machine closes its channel; after a start, the next exec opens a new one.
			e.call("POST", "/v1/computers/"+m.ID+"/stop", nil, 200, nil)
			if channelUp(e, m.ID) {
				t.Fatal("the channel outlived the stop")
			}
			e.call("POST", "/v1/computers/"+m.ID+"/start", nil, 200, nil)
			if got := e.sh(m.ID, "echo again"); got != "again\n" || !channelUp(e, m.ID) || !channelOnSocket(e, m.ID) {
				t.Fatalf("after start: %q, channel up %v, on its socket %v", got, channelUp(e, m.ID), channelOnSocket(e, m.ID))
			}
			// Destroy removes the socket directory.
			e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
			if _, err := os.Stat(e.s.computers.channelSockDir(m.ID)); err == nil {
				t.Fatal("the socket directory outlived the machine")
			}
		})
	}
}

// Faults: the helper killed mid-exec, the machine restarted behind agentd's back, the machine's pids
// exhausted. The call in flight gets a clear error, the next one succeeds, nothing hangs and no
// process is left behind.
func TestExecChannelFaults(t *testing.T) {
	requireProvider(t, "docker")
	e := newTestServer(t, withHostEnv)
	if e.s.computers.helper == "" {
		t.Skipf("the exec channel is off: %s", e.s.computers.helperNote)
	}
	m := e.create(map[string]any{"provider": "docker"})
	ctr := "agentd-" + m.ID
	inFlight := func(cmd string) chan response {
		ch := make(chan response, 1)
		go func() {
			ch <- e.do("POST", "/v1/computers/"+m.ID+"/exec", map[string]any{"cmd": cmd, "timeoutSec": 120})
		}()
		return ch
	}
	wantBroken := func(what string, res response) {
		t.Helper()
		if res.status != 500 || res.errCode(t) != codeExecFailed || !strings.Contains(string(res.body), "channel") {
			t.Fatalf("%s: the call in flight got %d %s, want E_EXEC_FAILED naming the channel", what, res.status, res.body)
		}
	}

	// 1. The helper is killed while a command runs.
	e.sh(m.ID, "true")
	done := inFlight("sleep 311")
	eventually(t, "the command running", func() bool { return strings.Contains(e.processes(m.ID), "sleep 311") })
	pid := helperPid(t, "docker", ctr)
	if out, err := exec.Command("docker", "exec", "-u", "1000:1000", ctr, "sh", "-c", "kill -9 "+pid).CombinedOutput(); err != nil {
		t.Fatalf("kill the helper: %v %s", err, out)
	}
	wantBroken("helper killed", <-done)
	if got := e.sh(m.ID, "echo next"); got != "next\n" {
		t.Fatalf("after the helper died: %q", got)
	}
	// The new helper kills the group before it serves; SIGKILL's delivery is asynchronous, so poll.
	eventually(t, "the killed helper's command gone", func() bool { return !strings.Contains(e.processes(m.ID), "sleep 311") })

	// 2. The machine is restarted behind agentd's back.
	done = inFlight("sleep 312")
	eventually(t, "the command running", func() bool { return strings.Contains(e.processes(m.ID), "sleep 312") })
	if out, err := exec.Command("docker", "restart", "-t", "0", ctr).CombinedOutput(); err != nil {
		t.Fatalf("docker restart: %v %s", err, out)
	}
	wantBroken("machine restarted", <-done)
	if got := e.sh(m.ID, "echo back"); got != "back\n" {
		t.Fatalf("after the restart: %q", got)
	}

	// 3. A command exhausts the machine's pids (limit 512; bash, unlike dash, carries on when a fork
	// fails), then its client goes away: the abort kills its whole group.
	sleeps := func() int { // from the host, as root: a fork failing in the machine is not "none"
		out, err := exec.Command("docker", "exec", "-u", "0", ctr, "sh", "-c", "cat /proc/[0-9]*/comm 2>/dev/null | grep -c '^sleep$' || true").Output()
		if err != nil {
			return -1
		}
		var n int
		fmt.Sscan(string(out), &n)
		return n - 1 // the machine's own `sleep infinity`
	}
	ctx, cancel := context.WithCancel(context.Background())
	bomb := make(chan error, 1)
	go func() {
		res, err := http.DefaultClient.Do(e.request(ctx, "POST", "/v1/computers/"+m.ID+"/exec", map[string]any{"timeoutSec": 600,
			"cmd": `exec bash -c 'for i in $(seq 700); do sleep 313 & done; sleep 314'`}, nil))
		if err == nil {
			res.Body.Close()
		}
		bomb <- err
	}()
	// Forking 450 bash children takes long on a loaded 2-core host: poll for up to 3 minutes.
	for deadline, n := time.Now().Add(3*time.Minute), sleeps(); n < 450 && n != -1; n = sleeps() { // -1: not even a count can start
		if time.Now().After(deadline) {
			t.Fatalf("the pids limit was not reached: %d sleeps", n)
		}
	}
	during := e.do("POST", "/v1/computers/"+m.ID+"/exec", map[string]any{"cmd": "echo during", "timeoutSec": 5})
	if during.status != 200 && during.errCode(t) != codeExecFailed {
		t.Fatalf("an exec while the pids are exhausted: %d %s", during.status, during.body)
	}
	t.Logf("an exec while the pids are exhausted: %d %s", during.status, firstLine(string(during.body)))
	cancel()
	select {
	case <-bomb:
	case <-time.After(time.Minute):
		t.Fatal("the exhausting exec hangs after its client left")
	}
	eventually(t, "an exec succeeds again", func() bool {
		r := e.do("POST", "/v1/computers/"+m.ID+"/exec", map[string]any{"cmd": "echo ok"})
		return r.status == 200 && strings.Contains(string(r.body), `"stdout":"ok\n"`)
	})
	eventually(t, "no sleep left", func() bool { return sleeps() == 0 })
}

// findHelperBinary: a static Linux build is the helper with no note; a cgo build is used with a note
// saying what it needs; anything that is not a Linux executable of this architecture turns the channel off.
func TestFindHelperBinary(t *testing.T) {
	static := filepath.Join(t.TempDir(), "agentd-static")
	build := exec.Command("go", "build", "-o", static, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("static build: %v %s", err, out)
	}
	if p, note := findHelperBinary(static); p == "" || note != "" {
		t.Fatalf("static build: %q %q", p, note)
	}
	dyn := filepath.Join(t.TempDir(), "agentd-cgo")
	build = exec.Command("go", "build", "-o", dyn, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("cgo build: %v %s", err, out)
	}
	if f, err := elf.Open(dyn); err == nil && slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP }) {
		if p, note := findHelperBinary(dyn); p != dyn || !strings.Contains(note, "CGO_ENABLED=0") {
			t.Fatalf("cgo build: %q %q", p, note)
		}
	} // else no C compiler here: the build came out static
	script := filepath.Join(t.TempDir(), "agentd")
	os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755)
	if p, note := findHelperBinary(script); p != "" || !strings.Contains(note, "not a Linux executable") {
		t.Fatalf("a script: %q %q", p, note)
	}
}

// After a restart, an adopted machine gets its channel on first use; a machine made while the channel
// was off (no helper mounted) keeps working over the per-call path.
func TestExecChannelAdoptedMachines(t *testing.T) {
	requireProvider(t, "docker")
	home := t.TempDir()
	off := newTestServer(t, withHostEnv, withHome(home), func(c *testSetup) { c.ExecChannel, c.helperBinary = new(bool), "" })
	off.keep = true
	bare := off.create(map[string]any{"provider": "docker", "idleTimeoutSec": 0})
	off.close()
	a := newTestServer(t, withHostEnv, withHome(home))
	if a.s.computers.helper == "" {
		t.Skipf("the exec channel is off: %s", a.s.computers.helperNote)
	}
	a.keep = true
	mounted := a.create(map[string]any{"provider": "docker", "idleTimeoutSec": 0})
	a.sh(mounted.ID, "true")
	a.close()

	b := newTestServer(t, withHostEnv, withHome(home))
	if got := b.sh(mounted.ID, "echo adopted"); got != "adopted\n" || !channelUp(b, mounted.ID) {
		t.Fatalf("adopted machine: %q, channel up %v", got, channelUp(b, mounted.ID))
	}
	for range 2 { // the second call does not try the helper again
		if got := b.sh(bare.ID, "echo per-call"); got != "per-call\n" || channelUp(b, bare.ID) {
			t.Fatalf("machine without a helper: %q, channel up %v", got, channelUp(b, bare.ID))
		}
	}
	if rt := b.s.computers.runtime(bare.ID); !strings.Contains(rt.chOff, "no helper") {
		t.Fatalf("why the machine has no channel: %q", rt.chOff)
	}
	body := bytes.Repeat([]byte("y"), 70000)
	b.call("PUT", "/v1/computers/"+bare.ID+"/fs/write?path=/work/y", body, 204, nil)
	if got := b.do("GET", "/v1/computers/"+bare.ID+"/fs/read?path=/work/y", nil); !bytes.Equal(got.body, body) {
		t.Fatalf("files over the per-call path: %d bytes", len(got.body))
	}
}

// The helper's canonicalPath is the jail's `readlink -m` in Go: on a tree of relative, absolute,
// chained, looping and dangling links, a ".." after a link, and a file used as a directory, it agrees
// with readlink -m.
func TestCanonicalPathMatchesReadlink(t *testing.T) {
	if _, err := exec.LookPath("readlink"); err != nil {
		t.Skip("no readlink")
	}
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(d+"/a/b/c", 0o755)
	os.WriteFile(d+"/a/f", []byte("x"), 0o644)
	for link, target := range map[string]string{
		"l1": "a", "l2": d + "/a/b", "l3": "l1/b/../f", "loop1": "loop2", "loop2": "loop1",
		"dangling": "nowhere/x", "up": "..", "a/b/back": "../../l1", "self": ".", "abs-up": "/..",
	} {
		if err := os.Symlink(target, d+"/"+link); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"/l1/b/c", "/l2/../f", "/l3", "/l3/x", "/loop1/x", "/loop1", "/dangling/y/../z",
		"/up/x", "/a/b/back/b/c", "/missing/../a", "/a/f/x", "/self/self/l1", "/abs-up/etc", "/a/b/../../l2/..", "/", "/l1/"} {
		full := d + p
		want, err := exec.Command("readlink", "-m", "--", full).Output()
		w := strings.TrimSuffix(string(want), "\n")
		if err != nil {
			w = "(unresolvable)" + full
		}
		if got := canonicalPath(full); got != w {
			t.Errorf("%s: canonicalPath %q, readlink -m %q", p, got, w)
		}
	}
}

// The channel's framing never panics on bytes it did not expect, never reads a payload past maxFrame,
// and gives back what writeFrame wrote.
func FuzzChannelFrames(f *testing.F) {
	var b bytes.Buffer
	writeFrame(&b, 7, frameStart, []byte(`{"argv":["echo","hi"],"cwd":"/work"}`))
	writeFrame(&b, 7, frameStdinEOF, nil)
	f.Add(b.Bytes())
	f.Add([]byte{0, 0, 0, 1, 'O', 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		for {
			id, kind, payload, err := readFrame(r)
			if err != nil {
				return
			}
			if len(payload) > maxFrame {
				t.Fatalf("a %d-byte payload", len(payload))
			}
			var again bytes.Buffer
			writeFrame(&again, id, kind, payload)
			id2, kind2, p2, err := readFrame(&again)
			if err != nil || id2 != id || kind2 != kind || !bytes.Equal(p2, payload) {
				t.Fatalf("round trip: %v %d %q", err, id2, kind2)
			}
			var req chanStart
			json.Unmarshal(payload, &req) // the helper's decode of a start: no panic on any payload
		}
	})
}

// The helper itself, in this process under the race detector, driven by raw frames over pipes:
// concurrent starts, output, exit codes, stdin, a kill that may come before the start, not found, a
// missing cwd, file operations, pid files, and the end of the channel killing what is left.
func TestMachineHelperInProcess(t *testing.T) {
	dir := t.TempDir()
	if !insideWritable(dir) {
		t.Skipf("the temp dir %s is not under /tmp", dir)
	}
	toHelper, in := io.Pipe()
	out, fromHelper := io.Pipe()
	served := make(chan error, 1)
	go func() { served <- serveHelper(toHelper, fromHelper, dir+"/pid-"); fromHelper.Close() }()
	type result struct {
		stdout, stderr string
		exit           chanExit
	}
	results := map[uint32]*result{}
	ended := make(chan uint32, 100)
	var mu sync.Mutex
	go func() {
		for {
			id, kind, payload, err := readFrame(out)
			if err != nil {
				close(ended)
				return
			}
			mu.Lock()
			r := results[id]
			if r == nil {
				r = &result{}
				results[id] = r
			}
			switch kind {
			case frameStdout:
				r.stdout += string(payload)
			case frameStderr:
				r.stderr += string(payload)
			case frameExit:
				json.Unmarshal(payload, &r.exit)
			}
			mu.Unlock()
			if kind == frameExit {
				ended <- id
			}
		}
	}()
	var wmu sync.Mutex
	send := func(id uint32, kind byte, v any) {
		var b []byte
		switch v := v.(type) {
		case string:
			b = []byte(v)
		case nil:
		default:
			b, _ = json.Marshal(v)
		}
		wmu.Lock()
		defer wmu.Unlock()
		if err := writeFrame(in, id, kind, b); err != nil {
			t.Fatal(err)
		}
	}
	wait := func(n int) {
		for range n {
			if _, ok := <-ended; !ok {
				t.Fatal("the helper's output ended")
			}
		}
	}

	for i := range 20 {
		send(uint32(100+i), frameStart, chanStart{Argv: []string{"/bin/sh", "-c", fmt.Sprintf("echo out%d; echo err%d >&2; exit %d", i, i, i%4)}, Cwd: dir, Token: fmt.Sprint("t", i)})
	}
	send(1, frameStart, chanStart{Argv: []string{"cat"}, Cwd: dir, Stdin: true})
	send(1, frameStdin, "hello ")
	send(1, frameStdin, "helper")
	send(1, frameStdinEOF, nil)
	send(2, frameStart, chanStart{Argv: []string{"sleep", "306"}, Cwd: dir})
	send(2, frameKill, nil) // perhaps before the process exists
	send(3, frameStart, chanStart{Argv: []string{"no-such-program-x2"}, Cwd: dir})
	send(4, frameStart, chanStart{Argv: []string{"true"}, Cwd: dir + "/missing"})
	send(5, frameStart, chanStart{Op: "write", Argv: []string{dir + "/sub/f.txt"}, Stdin: true})
	send(5, frameStdin, "file body")
	send(5, frameStdinEOF, nil)
	wait(25)
	send(6, frameStart, chanStart{Op: "read", Argv: []string{dir + "/sub/f.txt"}})
	send(7, frameStart, chanStart{Op: "list", Argv: []string{dir + "/sub"}})
	send(8, frameStart, chanStart{Op: "read", Argv: []string{"/etc/hostname"}})
	wait(3)

	mu.Lock()
	for i := range 20 {
		r := results[uint32(100+i)]
		if r.stdout != fmt.Sprintf("out%d\n", i) || r.stderr != fmt.Sprintf("err%d\n", i) || r.exit.Code != i%4 {
			t.Errorf("exec %d: %+v", i, r)
		}
	}
	for id, want := range map[uint32]string{1: "hello helper", 6: "file body"} {
		if r := results[id]; r.stdout != want || r.exit.Code != 0 || r.exit.Error != "" {
			t.Errorf("request %d: %+v", id, r)
		}
	}
	if r := results[2]; r.exit.Code != 128+9 {
		t.Errorf("killed: %+v", r)
	}
	if r := results[3]; r.exit.Code != 127 || !strings.Contains(r.stderr, "no-such-program-x2: not found") {
		t.Errorf("not found: %+v", r)
	}
	if r := results[4]; !strings.Contains(r.exit.Error, "no such directory") {
		t.Errorf("missing cwd: %+v", r)
	}
	if r := results[7]; !strings.HasPrefix(r.stdout, "f\t9\t") || !strings.HasSuffix(r.stdout, "\tf.txt\x00") {
		t.Errorf("list: %q", r.stdout)
	}
	if r := results[8]; !strings.Contains(r.exit.Error, "escapes the jail") {
		t.Errorf("a read outside /work and /tmp: %+v", r)
	}
	mu.Unlock()
	if left, _ := filepath.Glob(dir + "/pid-*.pid"); len(left) != 0 {
		t.Errorf("pid files left: %v", left)
	}

	// The host goes away with a command running: the helper kills it and returns.
	send(9, frameStart, chanStart{Argv: []string{"sleep", "307"}, Cwd: dir, Token: "last"})
	var n int // the file is created before its pid is written: wait for the pid
	eventually(t, "the last command's pid file", func() bool {
		b, _ := os.ReadFile(dir + "/pid-last.pid")
		fmt.Sscan(string(b), &n)
		return n > 0
	})
	in.Close()
	if err := <-served; err != nil {
		t.Fatalf("the helper ended with %v", err)
	}
	if processAlive(n) {
		t.Fatalf("the command %d outlived the channel", n)
	}
}

// TestHelperPumpReadsPastItsDeadline: output already in the pipe when the pause deadline has passed (a
// pump that ran late on a loaded host) is still sent. The soak once saw `echo soak` end 0 with no stdout.
func TestHelperPumpReadsPastItsDeadline(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w.WriteString("soak\n")
	w.Close()
	// The pump saw the process running, then ran late: the exit's pause deadline passed before its read.
	r.SetReadDeadline(time.Now().Add(-time.Second))
	var out bytes.Buffer
	h := &helper{out: &out, procs: map[uint32]*helperProc{}}
	p := &helperProc{id: 7}
	p.cond = sync.NewCond(&p.mu)
	h.pump(p, r, frameStdout)
	id, kind, payload, err := readFrame(&out)
	if err != nil || id != 7 || kind != frameStdout || string(payload) != "soak\n" {
		t.Fatalf("frame: id %d kind %c %q %v", id, kind, payload, err)
	}
}
