package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestSandboxCgroups: where this host lets agentd write cgroups (root on v1 or v2, or a delegated v2
// subtree), a machine's memory is bounded by memoryMb for the whole machine (a 400 MB allocation, under
// the 512 MB per-process rlimit, is killed at 128 MB), its tasks by sandboxNproc (a thread bomb, which
// the process-counting watchdog does not see and RLIMIT_NPROC does not bind for root, stops there), and
// nothing of its cgroup is left after destroy, nor after a crash (reconcile sweeps what no machine owns).
func TestSandboxCgroups(t *testing.T) {
	requireProvider(t, "sandbox")
	e := newTestServer(t, withHostEnv)
	sb := e.s.computers.providerByName("sandbox").(*sandboxProvider)
	m := e.create(map[string]any{"provider": "sandbox", "memoryMb": 128, "cpus": 1})
	cg := sb.cgroups() // found by the probe the create ran
	if cg.version == 0 {
		e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
		t.Skipf("no cgroups for the sandbox here: %s", cg.why)
	}
	dirs := cg.dirs(m.ID)
	want := map[string]string{"pids.max": strconv.Itoa(sandboxNproc)}
	if cg.version == 1 {
		want["memory.limit_in_bytes"] = strconv.Itoa(128 << 20)
		if cg.cpu {
			want["cpu.cfs_quota_us"] = "100000"
		}
	} else {
		want["memory.max"] = strconv.Itoa(128 << 20)
		if cg.cpu {
			want["cpu.max"] = "100000 100000"
		}
	}
	for file, v := range want {
		found := false
		for _, d := range dirs {
			if got, err := os.ReadFile(filepath.Join(d, file)); err == nil {
				found = true
				if strings.TrimSpace(string(got)) != v {
					t.Errorf("%s/%s = %q, want %s", d, file, got, v)
				}
			}
		}
		if !found {
			t.Errorf("no %s in the machine's cgroup %v", file, dirs)
		}
	}
	// The machine's processes are in it: the helper's shell's cgroup (as the host sees it) is the machine's.
	helper := strings.TrimSpace(e.sh(m.ID, "echo $$"))
	if helper == "" {
		t.Fatal("no pid inside")
	}
	for _, d := range dirs {
		if procs, _ := os.ReadFile(filepath.Join(d, "cgroup.procs")); len(strings.Fields(string(procs))) < 2 {
			t.Errorf("%s holds %q: the machine's bwrap and helper are not in it", d, procs)
		}
	}

	hog := e.exec(m.ID, map[string]any{"cmd": []string{"python3", "-c", "x = b'\\x01' * (400 << 20); print('survived', len(x))"}, "timeoutSec": 120})
	if hog.ExitCode == 0 || strings.Contains(hog.Stdout, "survived") {
		t.Fatalf("a 400 MB allocation survived memoryMb 128: %+v", hog)
	}
	if out := e.sh(m.ID, "echo alive"); out != "alive\n" {
		t.Fatalf("after the memory hog: %q", out)
	}

	const threads = `import threading, sys
threading.stack_size(65536)
stop = threading.Event(); n = 0; why = "cap"
try:
    while n < 3000:
        threading.Thread(target=stop.wait).start(); n += 1
except Exception as e:
    why = type(e).__name__
stop.set(); print(n, why)`
	var n int
	var why string
	fmt.Sscan(e.exec(m.ID, map[string]any{"cmd": []string{"python3", "-c", threads}, "timeoutSec": 120}).Stdout, &n, &why)
	if n == 0 || n >= sandboxNproc || why == "cap" {
		t.Fatalf("a thread bomb started %d threads (%s), want fewer than %d", n, why, sandboxNproc)
	}
	if out := e.sh(m.ID, "echo alive"); out != "alive\n" {
		t.Fatalf("after the thread bomb: %q", out)
	}

	// A cgroup no machine owns (left by a crash between a destroy's two steps) goes at reconcile.
	stray := "cmp_strayzzzzzzzzzzz"
	if _, err := cg.create(stray, 64, 1, 16); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.owned(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
	for _, d := range append(cg.dirs(m.ID), cg.dirs(stray)...) {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("%s outlived its machine", d)
		}
	}
	// Found once: a later probe keeps what the machines' cgroups were made with (it does not detect
	// again, and so cannot forget them when its own trial fails).
	marked := cg
	marked.why = "found by the first probe"
	sb.mu.Lock()
	sb.cg = marked
	sb.mu.Unlock()
	sb.probe(context.Background())
	if got := sb.cgroups(); got.why != marked.why || got.version != cg.version {
		t.Errorf("a later probe replaced the cgroups found: %+v", got)
	}
	// The doctor says which limits apply.
	var doc map[string]any
	e.call("GET", "/v1/doctor", nil, 200, &doc)
	if !strings.Contains(fmt.Sprint(doc), fmt.Sprintf("cgroup v%d per machine", cg.version)) {
		t.Errorf("the doctor does not say the sandbox's cgroups apply: %v", doc["computers"])
	}
}

// fakeCgroupTree is a directory standing in for cgroup filesystems (the kernel's own cannot be made
// here): the files detection reads, with the controllers given.
func fakeCgroupTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, body := range files {
		p := filepath.Join(root, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestDetectCgroups: which hierarchy detection picks and where, over fake trees: v1 as root (machines
// beside agentd's cgroup, under agentd/), a hybrid host's empty v2 ignored, v1 refused without root, v2
// as root (the root's and agentd/'s subtree_control hand the controllers down), a delegated v2 subtree
// (agentd moves itself into its leaf and enables the controllers for its children; a second probe finds
// it there), and a v2 cgroup shared with other processes refused with why.
func TestDetectCgroups(t *testing.T) {
	mount := func(point, fstype, opts string) string {
		return fmt.Sprintf("35 31 0:32 / %s rw,relatime - %s %s rw,%s\n", point, fstype, fstype, opts)
	}
	t.Run("v1", func(t *testing.T) {
		root := fakeCgroupTree(t, map[string]string{"unified/cgroup.controllers": ""})
		mi := mount(root+"/memory", "cgroup", "memory") + mount(root+"/pids", "cgroup", "pids") + mount(root+"/cpu,cpuacct", "cgroup", "cpu,cpuacct") + mount(root+"/unified", "cgroup2", "nsdelegate")
		h := detectCgroups(cgroupEnv{euid: 0, pid: 42, selfCgroup: "4:memory:/user.slice\n0::/user.slice\n", mountinfo: mi}, "own")
		if h.version != 1 || !h.cpu || h.parents["memory"] != root+"/memory/agentd" || h.parents["cpu"] != root+"/cpu,cpuacct/agentd" {
			t.Fatalf("%+v", h)
		}
		if d := h.dirs("cmp_1"); len(d) != 3 || d[1] != root+"/pids/agentd/agentd-own-cmp_1" {
			t.Fatalf("dirs: %q", d)
		}
		if h := detectCgroups(cgroupEnv{euid: 1000, pid: 42, mountinfo: mi}, "own"); h.version != 0 || !strings.Contains(h.why, "root") {
			t.Fatalf("v1 without root: %+v", h)
		}
		if h := detectCgroups(cgroupEnv{euid: 0, pid: 42, mountinfo: mount(root+"/memory", "cgroup", "memory")}, "own"); h.version != 0 || !strings.Contains(h.why, "pids") {
			t.Fatalf("v1 without pids: %+v", h)
		}
	})
	t.Run("v2-root", func(t *testing.T) {
		root := fakeCgroupTree(t, map[string]string{"cgroup.controllers": "cpuset cpu io memory pids", "cgroup.subtree_control": "memory"})
		h := detectCgroups(cgroupEnv{euid: 0, pid: 42, selfCgroup: "0::/system.slice/agentd.service\n", mountinfo: mount(root, "cgroup2", "nsdelegate")}, "own")
		if h.version != 2 || !h.cpu || h.parents[""] != root+"/agentd" {
			t.Fatalf("%+v", h)
		}
		if got := readTrim(root + "/cgroup.subtree_control"); got != "+pids +cpu" {
			t.Fatalf("the root's subtree_control got %q (memory was there)", got)
		}
		if got := readTrim(root + "/agentd/cgroup.subtree_control"); got != "+memory +pids +cpu" {
			t.Fatalf("agentd/'s subtree_control got %q", got)
		}
	})
	t.Run("v2-delegated", func(t *testing.T) {
		own := "/user.slice/user-1000.slice/user@1000.service/app.slice/agentd.scope"
		root := fakeCgroupTree(t, map[string]string{own + "/cgroup.controllers": "memory pids", own + "/cgroup.procs": "42\n", "cgroup.controllers": "cpu memory pids"})
		env := cgroupEnv{euid: 1000, pid: 42, selfCgroup: "0::" + own + "\n", mountinfo: mount(root, "cgroup2", "nsdelegate")}
		h := detectCgroups(env, "own")
		if h.version != 2 || h.cpu || h.parents[""] != root+own {
			t.Fatalf("%+v", h)
		}
		if got := readTrim(root + own + "/agentd-serve/cgroup.procs"); got != "42" {
			t.Fatalf("agentd did not move itself into its leaf: %q", got)
		}
		if got := readTrim(root + own + "/cgroup.subtree_control"); got != "+memory +pids" {
			t.Fatalf("the delegated cgroup's subtree_control got %q", got)
		}
		if d := h.dirs("cmp_1"); len(d) != 1 || d[0] != root+own+"/agentd-own-cmp_1" {
			t.Fatalf("dirs: %q", d)
		}
		env.selfCgroup = "0::" + own + "/agentd-serve\n" // the next probe, from the leaf
		if h2 := detectCgroups(env, "own"); h2.version != 2 || h2.parents[""] != root+own {
			t.Fatalf("the second probe: %+v", h2)
		}
		os.WriteFile(root+own+"/cgroup.procs", []byte("42\n77\n"), 0o644)
		os.RemoveAll(root + own + "/agentd-serve")
		env.selfCgroup = "0::" + own + "\n"
		if h := detectCgroups(env, "own"); h.version != 0 || !strings.Contains(h.why, "other processes") {
			t.Fatalf("a shared cgroup: %+v", h)
		}
		os.WriteFile(root+own+"/cgroup.controllers", []byte("cpu"), 0o644)
		if h := detectCgroups(env, "own"); h.version != 0 || !strings.Contains(h.why, "Delegate=yes") {
			t.Fatalf("a cgroup without the controllers: %+v", h)
		}
	})
}

// TestCgroupSettings: memoryMb, cpus and the task bound as each version's files.
func TestCgroupSettings(t *testing.T) {
	str := func(s []cgroupSetting) string {
		var b []string
		for _, x := range s {
			b = append(b, x.ctrl+":"+x.file+"="+x.value)
		}
		return strings.Join(b, " ")
	}
	if got := str(cgroupHost{version: 1, cpu: true}.settings(256, 1.5, 1024)); got != "memory:memory.limit_in_bytes=268435456 memory:memory.memsw.limit_in_bytes=268435456 pids:pids.max=1024 cpu:cpu.cfs_period_us=100000 cpu:cpu.cfs_quota_us=150000" {
		t.Fatalf("v1: %s", got)
	}
	if got := str(cgroupHost{version: 2, cpu: true}.settings(256, 0.5, 1024)); got != ":memory.max=268435456 :memory.swap.max=0 :pids.max=1024 :cpu.max=50000 100000" {
		t.Fatalf("v2: %s", got)
	}
}

// The reconcile at start runs in the background while the first machines are made: a sweep that listed
// the machine directories before a machine's directory existed must not take that machine's cgroup
// (found in CI: a create answered 500 "moving it into its cgroup …/cgroup.procs: no such file").
func TestSandboxSweepSparesMachinesBeingMade(t *testing.T) {
	requireProvider(t, "sandbox")
	e := newTestServer(t, withHostEnv)
	sp := e.s.computers.providerByName("sandbox").(*sandboxProvider)
	first := e.create(map[string]any{"provider": "sandbox", "idleTimeoutSec": 0}) // runs the probe
	e.call("DELETE", "/v1/computers/"+first.ID, nil, 204, nil)
	if cg := sp.cgroups(); cg.version == 0 {
		t.Skipf("no cgroups here: nothing for a sweep to take (%s)", cg.why)
	}
	done := make(chan struct{})
	swept := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-done:
				swept <- n
				return
			default:
			}
			sp.owned(context.Background())
			n++
		}
	}()
	for i := range 6 {
		m := e.create(map[string]any{"provider": "sandbox", "idleTimeoutSec": 0})
		if out := e.sh(m.ID, "echo ok"); out != "ok\n" {
			t.Fatalf("machine %d under concurrent sweeps: %q", i, out)
		}
		e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
	}
	close(done)
	if n := <-swept; n == 0 {
		t.Fatal("no sweep ran while the machines were made")
	}
}
