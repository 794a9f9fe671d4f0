package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestBackgroundServerOutlivesExec (issue 24 item 5): a server an agent starts in the background the
// way agents do (`setsid nohup … &`) is still there for the next exec and through the ports API, on every
// provider: a machine keeps what ran in it until it stops. (Before: on the sandbox it died with the exec
// that started it.)
func TestBackgroundServerOutlivesExec(t *testing.T) {
	for i, prov := range []string{"local", "docker", "podman", "sandbox", "kubernetes"} {
		t.Run(prov, func(t *testing.T) {
			t.Parallel()
			requireProvider(t, prov)
			if _, err := exec.LookPath("python3"); (prov == "local" || prov == "sandbox") && err != nil {
				t.Skip("the " + prov + " machine serves with the host's python3, which this host lacks")
			}
			port := 8000
			if prov == "local" { // the host's own ports
				port = 41700 + i
			}
			e := newTestServer(t, withHostEnv)
			m := e.create(map[string]any{"provider": prov, "idleTimeoutSec": 0})
			defer e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
			e.sh(m.ID, "mkdir -p www && echo bg-"+prov+" > www/index.html")
			// The issue's own command: no redirection, a new session, the exec returns at once.
			start := e.exec(m.ID, map[string]any{"cmd": fmt.Sprintf("cd www && setsid nohup python3 -m http.server %d &", port)})
			if start.ExitCode != 0 {
				t.Fatalf("starting the server: %+v", start)
			}
			// The next exec: the server answers (it may take a moment to bind; the loop is the machine's).
			probe := fmt.Sprintf(`python3 -c '
import time, urllib.request
for i in range(200):
    try:
        print(urllib.request.urlopen("http://127.0.0.1:%d/index.html", timeout=2).read().decode().strip()); break
    except Exception as e:
        err = e; time.sleep(0.1)
else:
    print("unreachable:", err)
'`, port)
			if out := strings.TrimSpace(e.sh(m.ID, probe)); out != "bg-"+prov {
				t.Fatalf("the background server from the next exec: %q", out)
			}
			// And once more, an exec later: still there.
			if out := strings.TrimSpace(e.sh(m.ID, probe)); out != "bg-"+prov {
				t.Fatalf("the background server two execs later: %q", out)
			}
			var b PortBinding
			e.call("POST", "/v1/computers/"+m.ID+"/ports", map[string]any{"port": port}, 200, &b)
			var body string
			eventually(t, "the background server to answer through its port binding", func() bool {
				resp, err := http.Get(b.URL + "/index.html")
				if err != nil {
					return false
				}
				defer resp.Body.Close()
				x, _ := io.ReadAll(resp.Body)
				body = strings.TrimSpace(string(x))
				return resp.StatusCode == 200
			})
			if body != "bg-"+prov {
				t.Fatalf("through the ports API: %q", body)
			}
			e.sh(m.ID, killScript("http.server", fmt.Sprint(port)))
		})
	}
}

// TestChattyBackgroundChildDoesNotHoldExec: a background child that writes without pause (a dev server
// logging in a loop) must not hold the exec that started it: the exec ends with the command, and the
// child keeps running. (Before: over the exec channel, the sandbox and docker, the helper read on while
// the output kept coming, and the exec ended only at its timeout, reported timedOut with 124.)
func TestChattyBackgroundChildDoesNotHoldExec(t *testing.T) {
	for _, prov := range []string{"local", "docker", "podman", "sandbox", "kubernetes"} {
		t.Run(prov, func(t *testing.T) {
			t.Parallel()
			requireProvider(t, prov)
			e := newTestServer(t, withHostEnv)
			m := e.create(map[string]any{"provider": prov, "idleTimeoutSec": 0})
			defer e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
			// `timeout` bounds the child should the kill below not come; the pid file lets it be ended.
			res := e.exec(m.ID, map[string]any{"cmd": "timeout 60 yes chatty & echo $! > chatty.pid", "timeoutSec": 30})
			defer e.sh(m.ID, `kill "$(cat chatty.pid)"`)
			if res.TimedOut || res.ExitCode != 0 {
				t.Fatalf("the exec was held by its background child: exit %d, timedOut %v, stdout %q...", res.ExitCode, res.TimedOut, lastLines(res.Stdout[:min(len(res.Stdout), 200)], 3))
			}
			// The child was not killed with the exec: it is still there for the next one.
			if out := strings.TrimSpace(e.sh(m.ID, `kill -0 "$(cat chatty.pid)" && echo alive`)); out != "alive" {
				t.Fatalf("the background child did not outlive its exec: %q", out)
			}
		})
	}
}

// TestMountSwapAtRestart (issue 24 item 1): a machine with a read-write mount of a host directory and a
// second mount of a directory below it replaces that directory by a symlink to the host's root (the
// issue's `rmdir /data/sub && ln -s / /data/sub`); at the next start the provider must mount what it
// checked or refuse, never the host's /. (Before: docker and podman mounted the host's / at /sub.)
func TestMountSwapAtRestart(t *testing.T) {
	for _, prov := range []string{"docker", "podman", "sandbox"} {
		t.Run(prov, func(t *testing.T) {
			t.Parallel()
			requireProvider(t, prov)
			// A host file the machine must never see: world-readable, outside allowedMounts.
			outside, err := os.MkdirTemp("", "agentd-swap-outside-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(outside) })
			os.Chmod(outside, 0o755)
			marker := "host-secret-" + randomChars(8)
			if err := os.WriteFile(filepath.Join(outside, "secret"), []byte(marker), 0o644); err != nil {
				t.Fatal(err)
			}
			share := filepath.Join(t.TempDir(), "share")
			sub := filepath.Join(share, "sub")
			if err := os.MkdirAll(sub, 0o777); err != nil {
				t.Fatal(err)
			}
			os.Chmod(share, 0o777) // the machine's user may replace what is in it
			os.Chmod(sub, 0o777)
			e := newTestServer(t, withHostEnv, func(c *testSetup) { c.AllowedMounts = []string{share} })
			m := e.create(map[string]any{"provider": prov, "idleTimeoutSec": 0, "mounts": []any{
				map[string]any{"source": share, "target": "/data", "readonly": false},
				map[string]any{"source": sub, "target": "/sub"},
			}})
			defer e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
			if r := e.exec(m.ID, map[string]any{"cmd": "rmdir /data/sub && ln -s / /data/sub"}); r.ExitCode != 0 {
				t.Fatalf("the swap inside the machine: %+v", r)
			}
			if fi, err := os.Lstat(sub); err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Fatalf("the swap did not reach the host: %v %v", fi, err)
			}
			e.call("POST", "/v1/computers/"+m.ID+"/stop", nil, 200, nil)
			if r := e.do("POST", "/v1/computers/"+m.ID+"/start", nil); r.status == 200 {
				out := e.sh(m.ID, "cat /sub"+outside+"/secret 2>&1; ls /sub 2>&1 | head -3")
				t.Fatalf("the start mounted the swapped source; /sub shows: %q (host secret seen: %v)", out, strings.Contains(out, marker))
			} else if r.status != 422 || r.errCode(t) != codeSpecInvalid || !strings.Contains(string(r.body), "mounts.1.source") || !strings.Contains(string(r.body), "symlink") {
				t.Fatalf("the refusal does not name the mount and the symlink: %d %s", r.status, r.body)
			}
			// Put right on the host, the machine starts again and mounts the new directory.
			os.Remove(sub)
			if err := os.Mkdir(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(sub, "f"), []byte("fresh\n"), 0o644)
			e.call("POST", "/v1/computers/"+m.ID+"/start", nil, 200, nil)
			if out := e.sh(m.ID, "cat /sub/f"); out != "fresh\n" {
				t.Fatalf("after the repair: %q", out)
			}
		})
	}
}

// TestVerifyMountsComparesWhatWasMounted: the check after an engine's start compares what the container
// has at each target with what was opened and judged, so a source swapped between the judgement and
// the engine's own resolution (a window TestMountSwapAtRestart cannot time) fails the start.
func TestVerifyMountsComparesWhatWasMounted(t *testing.T) {
	for _, prov := range []string{"docker", "podman"} {
		t.Run(prov, func(t *testing.T) {
			t.Parallel()
			requireProvider(t, prov)
			share := filepath.Join(t.TempDir(), "share")
			other := filepath.Join(share, "other")
			os.MkdirAll(other, 0o755)
			e := newTestServer(t, withHostEnv, func(c *testSetup) { c.AllowedMounts = []string{share} })
			m := e.create(map[string]any{"provider": prov, "idleTimeoutSec": 0, "mounts": []any{
				map[string]any{"source": share, "target": "/data"}}})
			defer e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
			ep := e.s.computers.providerByName(prov).(*engineProvider)
			ms, err := e.s.computers.openMountSources(m.Spec)
			if err != nil {
				t.Fatal(err)
			}
			defer closeMountSources(ms)
			if err := ep.verifyMounts(context.Background(), &m, ms); err != nil {
				t.Fatalf("what was mounted: %v", err)
			}
			swapped, err := e.s.computers.openMountSources(ComputerSpec{Mounts: []Mount{{Source: other, Target: "/data"}}})
			if err != nil {
				t.Fatal(err)
			}
			defer closeMountSources(swapped)
			if err := ep.verifyMounts(context.Background(), &m, swapped); err == nil || !strings.Contains(err.Error(), "mounts.0.source") {
				t.Fatalf("another directory than the one mounted passed: %v", err)
			}
		})
	}
}

// TestSandboxDiskBoundedInTotal (issue 24 item 6): a 1 GiB write, in files each below diskMb, into a
// `diskMb: 256` sandbox is stopped near 256 MB: /work is bounded in total, not per file; /tmp too (at
// sandboxTmpMB). The machine's info and the doctor say how; a persist machine, whose /work is a host
// directory, says it is NOT bounded in total. (Before: RLIMIT_FSIZE bounded each file, and the whole
// GiB reached the host's disk.)
func TestSandboxDiskBoundedInTotal(t *testing.T) {
	requireProvider(t, "sandbox")
	e := newTestServer(t, withHostEnv)
	m := e.create(map[string]any{"provider": "sandbox", "diskMb": 256, "idleTimeoutSec": 0})
	defer e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
	written := func(id, dir string) int {
		t.Helper()
		// 8 files of 128 MB: each below the per-file limit, 1 GiB in all.
		out := e.sh(id, `for i in 1 2 3 4 5 6 7 8; do head -c 134217728 /dev/zero > `+dir+`/big$i 2>/dev/null || break; done; du -sm `+dir+` | cut -f1; rm -f `+dir+`/big*`)
		n, err := strconv.Atoi(strings.TrimSpace(out))
		if err != nil {
			t.Fatalf("measuring %s: %q", dir, out)
		}
		return n
	}
	if n := written(m.ID, "/work"); n < 200 || n > 270 {
		t.Fatalf("a 1 GiB write into /work of a diskMb 256 machine left %d MB, want it stopped near 256", n)
	}
	if n := written(m.ID, "/tmp"); n < sandboxTmpMB-60 || n > sandboxTmpMB+20 {
		t.Fatalf("a 1 GiB write into /tmp left %d MB, want it stopped near %d", n, sandboxTmpMB)
	}
	// A workdir in either tmpfs is made in it at every start.
	for _, wd := range []string{"/work/a/b", "/tmp/wd"} {
		w := e.create(map[string]any{"provider": "sandbox", "workdir": wd, "idleTimeoutSec": 0})
		if out := e.sh(w.ID, "pwd; touch x && echo writable"); out != wd+"\nwritable\n" {
			t.Fatalf("workdir %s: %q", wd, out)
		}
		e.call("POST", "/v1/computers/"+w.ID+"/stop", nil, 200, nil)
		e.call("POST", "/v1/computers/"+w.ID+"/start", nil, 200, nil)
		if out := e.sh(w.ID, "pwd; touch x && echo writable"); out != wd+"\nwritable\n" {
			t.Fatalf("workdir %s after stop and start: %q", wd, out)
		}
		e.call("DELETE", "/v1/computers/"+w.ID, nil, 204, nil)
	}
	var got ComputerInfo
	if e.call("GET", "/v1/computers/"+m.ID, nil, 200, &got); !strings.Contains(got.Disk, "tmpfs of 256 MB") {
		t.Fatalf("the machine's info does not say how its disk is bounded: %q", got.Disk)
	}
	// persist: an image of diskMb where agentd can loop-mount one (root), kept across stop and start;
	// elsewhere the info says /work is NOT bounded in total.
	p := e.create(map[string]any{"provider": "sandbox", "persist": true, "diskMb": 256, "idleTimeoutSec": 0})
	defer e.call("DELETE", "/v1/computers/"+p.ID, nil, 204, nil)
	if ok, why := loopDisks(); !ok {
		if !strings.Contains(p.Disk, "NOT bounded in total") || !strings.Contains(p.Disk, why) {
			t.Fatalf("a persist sandbox without an image does not say its disk is unbounded: %q", p.Disk)
		}
	} else {
		if n := written(p.ID, "/work"); n < 200 || n > 270 {
			t.Fatalf("a 1 GiB write into a persist machine's /work left %d MB, want it stopped near 256", n)
		}
		e.sh(p.ID, "echo kept > f")
		e.call("POST", "/v1/computers/"+p.ID+"/stop", nil, 200, nil)
		e.call("POST", "/v1/computers/"+p.ID+"/start", nil, 200, nil)
		if out := e.sh(p.ID, "cat f; df -m /work | tail -1 | awk '{print $2}'"); !strings.HasPrefix(out, "kept\n") {
			t.Fatalf("the persist machine's image after stop and start: %q", out)
		}
		if e.call("GET", "/v1/computers/"+p.ID, nil, 200, &got); !strings.Contains(got.Disk, "ext4 image of 256 MB") {
			t.Fatalf("a persist machine's info: %q", got.Disk)
		}
	}
	var doc DoctorReport
	e.call("GET", "/v1/doctor", nil, 200, &doc)
	for _, pr := range doc.Providers {
		if pr.Name == "sandbox" && !strings.Contains(pr.Limits, "disk: /work") {
			t.Fatalf("the doctor does not say how the sandbox bounds disk: %q", pr.Limits)
		}
	}
}

// TestSandboxBindsMountsByDescriptor: the sandbox's bwrap gets each mount source as a descriptor opened
// by helperCmd (the checked directory itself), never as a path bwrap would resolve again later.
func TestSandboxBindsMountsByDescriptor(t *testing.T) {
	requireProvider(t, "sandbox")
	share := filepath.Join(t.TempDir(), "share")
	os.MkdirAll(filepath.Join(share, "sub"), 0o755)
	e := newTestServer(t, withHostEnv, func(c *testSetup) { c.AllowedMounts = []string{share} })
	sp := e.s.computers.providerByName("sandbox").(*sandboxProvider)
	m := ComputerInfo{ID: "cmp_bindfd", Workdir: "/work", Spec: ComputerSpec{Mounts: []Mount{
		{Source: share, Target: "/data", Readonly: new(bool)}, {Source: filepath.Join(share, "sub"), Target: "/sub"}}}}
	applyComputerDefaults(&m.Spec)
	cmd := sp.helperCmd(context.Background(), &m)
	defer func() {
		for _, f := range cmd.ExtraFiles {
			if f != nil {
				f.Close()
			}
		}
	}()
	args := strings.Join(cmd.Args, " ")
	for _, want := range []string{fmt.Sprintf("--bind-fd %d /data", sandboxMountFD), fmt.Sprintf("--ro-bind-fd %d /sub", sandboxMountFD+1)} {
		if !strings.Contains(args, want) {
			t.Fatalf("bwrap's argv lacks %q: %s", want, args)
		}
	}
	if strings.Contains(args, share) {
		t.Fatalf("a mount source reaches bwrap as a path: %s", args)
	}
	if n := len(cmd.ExtraFiles); n != sandboxMountFD-3+2 || cmd.ExtraFiles[sandboxMountFD-3] == nil || cmd.ExtraFiles[sandboxMountFD-2] == nil {
		t.Fatalf("the opened sources are not bwrap's descriptors %d and %d: %v", sandboxMountFD, sandboxMountFD+1, cmd.ExtraFiles)
	}
	if got, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", cmd.ExtraFiles[sandboxMountFD-2].Fd())); got != filepath.Join(share, "sub") {
		t.Fatalf("descriptor %d is %q", sandboxMountFD+1, got)
	}
}
