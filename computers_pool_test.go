package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func withWarmPool(pool map[string]int) testOption {
	return func(c *testSetup) { c.WarmPool = pool }
}

// pooledIDs are the ids of the pool machines on record.
func (ts *testServer) pooledIDs() []string {
	ts.t.Helper()
	recs, err := ts.s.store.ListPooledComputers(context.Background())
	if err != nil {
		ts.t.Fatal(err)
	}
	var ids []string
	for _, m := range recs {
		ids = append(ids, m.ID)
	}
	return ids
}

// poolReady is the doctor's count of ready pool machines of a flavor.
func (ts *testServer) poolReady(flavor string) int {
	ts.t.Helper()
	var rep DoctorReport
	ts.call("GET", "/v1/doctor", nil, 200, &rep)
	for _, f := range rep.Pool.Flavors {
		if f.Flavor == flavor {
			return f.Ready
		}
	}
	return -1
}

func (ts *testServer) listIDs(all bool) []string {
	ts.t.Helper()
	var got struct{ Computers []ComputerInfo }
	path := "/v1/computers"
	if all {
		path += "?all=true"
	}
	ts.call("GET", path, nil, 200, &got)
	var ids []string
	for _, m := range got.Computers {
		ids = append(ids, m.ID)
	}
	return ids
}

// containerLabel reads one label of a machine's container.
func containerLabel(t *testing.T, prov, id, label string) string {
	t.Helper()
	out, err := exec.Command(prov, "inspect", "--format", `{{index .Config.Labels "`+label+`"}}`, "agentd-"+id).Output()
	if err != nil {
		t.Fatalf("inspect %s: %v", id, err)
	}
	return strings.TrimSpace(string(out))
}

// TestWarmPool: the pool fills to its target on docker and podman; its machines are in no listing and
// never reaped; a satisfying create takes one (named, relabelled, limits updated, listed, exec works, one
// computer_created) and the pool refills; a spec it cannot satisfy goes cold; an evicted machine is
// replaced; a restart with a smaller pool adopts what fits and destroys the rest; nothing is left behind.
func TestWarmPool(t *testing.T) {
	t.Cleanup(func() { checkNoLeaks(t) })
	for _, prov := range []string{"docker", "podman"} {
		t.Run(prov, func(t *testing.T) { testWarmPool(t, prov) })
	}
}

func testWarmPool(t *testing.T, prov string) {
	requireProvider(t, prov)
	home := t.TempDir()
	a := newTestServer(t, withHostEnv, withHome(home), withWarmPool(map[string]int{"base": 2}), func(c *testSetup) {
		c.ComputerProvider, c.MaxComputers = prov, 4
	})
	eventually(t, "the pool to fill", func() bool { return a.poolReady("base") == 2 })
	pooled := a.pooledIDs()
	if len(pooled) != 2 {
		t.Fatalf("pooled records: %v", pooled)
	}
	for _, id := range pooled {
		if !strings.HasPrefix(id, "cmp_") || containerLabel(t, prov, id, "agentd.pool") != "base" {
			t.Fatalf("pool machine %s: label agentd.pool=%q", id, containerLabel(t, prov, id, "agentd.pool"))
		}
	}
	var rep DoctorReport
	a.call("GET", "/v1/doctor", nil, 200, &rep)
	if !rep.Pool.Enabled || rep.Pool.Provider != prov || len(rep.Pool.Flavors) != 1 || rep.Pool.Flavors[0].Target != 2 ||
		!slices.Equal(rep.Pool.Flavors[0].Machines, pooled) {
		t.Fatalf("doctor pool: %+v", rep.Pool)
	}
	for _, w := range rep.Warnings {
		if strings.Contains(w, "orphan") {
			t.Fatalf("a pool machine taken for an orphan: %s", w)
		}
	}

	// Not listed, not found, not reaped.
	if ids := append(a.listIDs(false), a.listIDs(true)...); len(ids) != 0 {
		t.Fatalf("pool machines listed: %v", ids)
	}
	a.wantError("GET", "/v1/computers/"+pooled[0], nil, 404, codeComputerNotFound)
	a.wantError("POST", "/v1/computers/"+pooled[0]+"/exec", map[string]any{"cmd": "true"}, 404, codeComputerNotFound)
	a.s.computers.setNow(func() time.Time { return time.Now().Add(48 * time.Hour) })
	if got := a.s.computers.sweep(context.Background()); len(got) != 0 {
		t.Fatalf("the reaper took %v", got)
	}
	a.s.computers.setNow(time.Now)
	if got := a.pooledIDs(); !slices.Equal(got, pooled) {
		t.Fatalf("after a sweep the pool is %v, was %v", got, pooled)
	}

	// A satisfying spec takes the oldest pool machine.
	sub, _ := a.s.hub.subscribe()
	defer a.s.hub.unsubscribe(sub)
	m := a.create(map[string]any{"name": "fast", "labels": map[string]any{"team": "x"}, "cpus": 1, "memoryMb": 512, "idleTimeoutSec": 60})
	if m.ID != pooled[0] || m.Name != "fast" || m.State != "running" || m.Spec.Labels["team"] != "x" || m.Spec.IdleTimeoutSec != 60 {
		t.Fatalf("taken: %+v (pool was %v)", m, pooled)
	}
	if out := a.sh(m.ID, "echo hi; id -u; pwd"); out != "hi\n1000\n/work\n" {
		t.Fatalf("exec on the taken machine: %q", out)
	}
	// The limits as the machine sees them (podman's inspect keeps the values of creation).
	limits := `{ cat /sys/fs/cgroup/memory.max || cat /sys/fs/cgroup/memory/memory.limit_in_bytes; } 2>/dev/null; ` +
		`{ cut -d' ' -f1 /sys/fs/cgroup/cpu.max || cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us; } 2>/dev/null`
	if out := a.sh(m.ID, limits); out != "536870912\n100000\n" {
		t.Fatalf("limits of the taken machine: %q", out)
	}
	if ids := a.listIDs(false); !slices.Equal(ids, []string{m.ID}) {
		t.Fatalf("listed after taking: %v", ids)
	}
	var got ComputerInfo
	a.call("GET", "/v1/computers/fast", nil, 200, &got)
	if got.ID != m.ID {
		t.Fatalf("by name: %+v", got)
	}
	var created []string // published before create answered
	for len(sub.ch) > 0 {
		if ev := <-sub.ch; ev.Topic == "computers" {
			created = append(created, ev.Type+" "+ev.Payload.(*ComputerInfo).ID)
		}
	}
	if !slices.Equal(created, []string{"computer_created " + m.ID}) {
		t.Fatalf("computers events: %v", created)
	}
	// The pool refills in the background.
	eventually(t, "the pool to refill", func() bool { return a.poolReady("base") == 2 })
	refilled := a.pooledIDs()
	if slices.Contains(refilled, m.ID) || !slices.Contains(refilled, pooled[1]) || len(refilled) != 2 {
		t.Fatalf("refilled pool %v (taken %s)", refilled, m.ID)
	}

	// What a pool machine cannot be goes cold and leaves the pool alone.
	for _, spec := range []map[string]any{
		{"env": map[string]any{"X": "1"}},
		{"diskMb": 1024},
		{"network": map[string]any{"mode": "none"}},
		{"flavor": "python"},
	} {
		cold := a.create(spec)
		if slices.Contains(refilled, cold.ID) {
			t.Fatalf("%v took a pool machine", spec)
		}
		a.call("DELETE", "/v1/computers/"+cold.ID, nil, 204, nil)
	}
	if got := a.pooledIDs(); !slices.Equal(got, refilled) {
		t.Fatalf("cold creates changed the pool: %v, was %v", got, refilled)
	}

	// A ready machine found bad is dropped and replaced.
	a.s.computers.poolEvict(context.Background(), refilled[0], "test")
	if st, _ := a.s.computers.providerByName(prov).status(context.Background(), &ComputerInfo{ID: refilled[0]}); st != "missing" {
		t.Fatalf("evicted machine is %s", st)
	}
	eventually(t, "the pool to replace the evicted machine", func() bool { return a.poolReady("base") == 2 })
	if refilled = a.pooledIDs(); slices.Contains(refilled, m.ID) || len(refilled) != 2 {
		t.Fatalf("after eviction the pool is %v", refilled)
	}

	// Restart with a pool of one: one pool machine is adopted, the other destroyed; the taken machine
	// is adopted as any machine is.
	a.keep = true
	a.close()
	b := newTestServer(t, withHostEnv, withHome(home), withWarmPool(map[string]int{"base": 1}), func(c *testSetup) {
		c.ComputerProvider, c.MaxComputers = prov, 4
	})
	eventually(t, "the smaller pool", func() bool { return len(b.pooledIDs()) == 1 && b.poolReady("base") == 1 })
	kept := b.pooledIDs()[0]
	if !slices.Contains(refilled, kept) {
		t.Fatalf("the pool made %s instead of adopting one of %v", kept, refilled)
	}
	for _, id := range refilled {
		st, _ := b.s.computers.providerByName(prov).status(context.Background(), &ComputerInfo{ID: id})
		if want := map[bool]string{true: "running", false: "missing"}[id == kept]; st != want {
			t.Fatalf("pool machine %s is %s, want %s", id, st, want)
		}
	}
	if out := b.sh("fast", "echo again"); out != "again\n" {
		t.Fatalf("the taken machine after restart: %q", out)
	}
	eventually(t, "the background reconcile", func() bool {
		_, _, _, warnings := b.s.computers.doctor(context.Background())
		return !slices.ContainsFunc(warnings, func(w string) bool { return strings.Contains(w, "orphan") })
	})
	if got := b.s.computers.sweep(context.Background()); len(got) != 0 {
		t.Fatalf("after restart the reaper took %v", got)
	}
}

// The pool is off on local, and the doctor says why; the create path is the cold one.
func TestWarmPoolOffOnLocal(t *testing.T) {
	ts := newTestServer(t, withHostEnv, withWarmPool(map[string]int{"base": 1}), func(c *testSetup) { c.ComputerProvider = "local" })
	var rep DoctorReport
	ts.call("GET", "/v1/doctor", nil, 200, &rep)
	if rep.Pool.Enabled || !strings.Contains(rep.Pool.Reason, "local") || len(rep.Pool.Flavors) != 1 || rep.Pool.Flavors[0].Ready != 0 {
		t.Fatalf("doctor pool: %+v", rep.Pool)
	}
	if !slices.ContainsFunc(rep.Warnings, func(w string) bool { return strings.Contains(w, "warm pool is off") }) {
		t.Fatalf("warnings: %v", rep.Warnings)
	}
	m := ts.create(map[string]any{})
	if m.Provider != "local" || len(ts.pooledIDs()) != 0 {
		t.Fatalf("created %+v; pool %v", m, ts.pooledIDs())
	}
}

func TestWarmPoolConfig(t *testing.T) {
	for _, tc := range []struct {
		pool map[string]int
		max  int
		msg  string
	}{
		{map[string]int{"base": 2, "python": 1}, 8, ""},
		{map[string]int{"base": 0}, 0, ""},
		{map[string]int{"gpu": 1}, 8, `warmPool is keyed by "gpu"; it must be keyed by flavors`},
		{map[string]int{"base": -1}, 8, "warmPool.base is -1; it must be between 0 and 16"},
		{map[string]int{"node": 17}, 32, "warmPool.node is 17; it must be between 0 and 16"},
		{map[string]int{"base": 3, "full": 3}, 4, "warmPool is 6 machines in all; it must be at most maxComputers (4) in all"},
	} {
		cfg := defaultConfig()
		cfg.WarmPool, cfg.MaxComputers = tc.pool, tc.max
		err := cfg.check()
		switch {
		case tc.msg == "" && err != nil:
			t.Errorf("%v: %v", tc.pool, err)
		case tc.msg != "" && (err == nil || !strings.Contains(err.Error(), tc.msg) || asAPIError(err).Code != codeConfig):
			t.Errorf("%v: got %v, want %q", tc.pool, err, tc.msg)
		}
	}
	var cfg config
	if err := parseConfigFile([]byte("warmPool: {base: 2}\n"), &cfg); err != nil || cfg.WarmPool["base"] != 2 {
		t.Fatalf("parse: %v %v", err, cfg.WarmPool)
	}
}

// What a pool machine can stand for: only what its container was made with, limits and record-only
// fields aside.
func TestWarmPoolSatisfies(t *testing.T) {
	c := &computerService{computerDeps: computerDeps{images: map[string]string{"base": testImage}}}
	docker := newEngineProvider("docker", 100, c)
	spec := func(edit func(*ComputerSpec)) ComputerSpec {
		sp := ComputerSpec{}
		edit(&sp)
		applyComputerDefaults(&sp)
		return sp
	}
	yes := []func(*ComputerSpec){
		func(sp *ComputerSpec) {},
		func(sp *ComputerSpec) {
			sp.Name, sp.Labels, sp.IdleTimeoutSec, sp.MaxLifetimeSec = "n", map[string]string{"a": "b"}, 5, 60
		},
		func(sp *ComputerSpec) { sp.CPUs, sp.MemoryMB = 1, 256 },
		func(sp *ComputerSpec) { sp.Image = testImage },
		func(sp *ComputerSpec) { sp.Setup = "true"; sp.Network.Allow = []string{"example.com"} },
	}
	no := []func(*ComputerSpec){
		func(sp *ComputerSpec) { sp.Image = "debian:bookworm" },
		func(sp *ComputerSpec) { sp.User = "0:0" },
		func(sp *ComputerSpec) { sp.Env = map[string]string{"A": "b"} },
		func(sp *ComputerSpec) { sp.Mounts = []Mount{{Source: "/srv", Target: "/data"}} },
		func(sp *ComputerSpec) { sp.Packages = []string{"curl"} },
		func(sp *ComputerSpec) { sp.Network.Mode = "none" },
		func(sp *ComputerSpec) { sp.Persist = true },
		func(sp *ComputerSpec) { sp.DiskMB = 4096 },
		func(sp *ComputerSpec) { sp.Workdir = "/work/app" },
	}
	for i, e := range yes {
		if !c.poolSatisfies(docker, spec(e)) {
			t.Errorf("yes[%d] refused: %+v", i, spec(e))
		}
	}
	for i, e := range no {
		if c.poolSatisfies(docker, spec(e)) {
			t.Errorf("no[%d] accepted: %+v", i, spec(e))
		}
	}
	if c.poolSatisfies(newLocalProvider(c), spec(func(*ComputerSpec) {})) {
		t.Error("local accepted")
	}
	// A pod's limits are set at its creation: on kubernetes they must be the flavor's defaults.
	kube := newKubeProvider(kubeConfig{}, c)
	if !c.poolSatisfies(kube, spec(func(*ComputerSpec) {})) || c.poolSatisfies(kube, spec(func(sp *ComputerSpec) { sp.CPUs = 1 })) ||
		c.poolSatisfies(kube, spec(func(sp *ComputerSpec) { sp.MemoryMB = 256 })) || c.poolSatisfies(kube, spec(func(sp *ComputerSpec) { sp.Persist = true })) {
		t.Error("kubernetes: the default spec only, limits included")
	}
}

// TestWarmPoolSandbox: the pool keeps sandbox machines too (a sandbox's create is a bwrap and a helper
// start): it fills, a default create takes a ready machine whose helper already answers, a spec whose
// limits differ goes cold, the pool refills, and after a restart the kept machine's bwrap is started
// again and it is taken as before. Nothing is left on disk.
func TestWarmPoolSandbox(t *testing.T) {
	requireProvider(t, "sandbox")
	home := t.TempDir()
	setup := func(c *testSetup) { c.ComputerProvider, c.MaxComputers = "sandbox", 4 }
	a := newTestServer(t, withHostEnv, withHome(home), withWarmPool(map[string]int{"base": 1}), setup)
	eventually(t, "the pool to fill", func() bool { return a.poolReady("base") == 1 })
	pooled := a.pooledIDs()
	var rep DoctorReport
	a.call("GET", "/v1/doctor", nil, 200, &rep)
	if !rep.Pool.Enabled || rep.Pool.Provider != "sandbox" || len(pooled) != 1 {
		t.Fatalf("doctor pool: %+v; pooled %v", rep.Pool, pooled)
	}
	if ids := a.listIDs(true); len(ids) != 0 {
		t.Fatalf("pool machines listed: %v", ids)
	}

	m := a.create(map[string]any{"name": "quick"})
	if m.ID != pooled[0] || m.Provider != "sandbox" || m.Name != "quick" || m.Image != "" {
		t.Fatalf("taken: %+v (pool was %v)", m, pooled)
	}
	if out := a.sh(m.ID, "echo hi; id -u; pwd"); out != "hi\n1000\n/work\n" {
		t.Fatalf("exec on the taken machine: %q", out)
	}
	cold := a.create(map[string]any{"memoryMb": 1024})
	if cold.ID == pooled[0] || slices.Contains(a.pooledIDs(), cold.ID) {
		t.Fatalf("a spec with other limits took a pool machine: %+v", cold)
	}
	a.call("DELETE", "/v1/computers/"+cold.ID, nil, 204, nil)
	eventually(t, "the pool to refill", func() bool { return a.poolReady("base") == 1 })
	refilled := a.pooledIDs()
	if len(refilled) != 1 || refilled[0] == m.ID {
		t.Fatalf("refilled pool %v (taken %s)", refilled, m.ID)
	}

	// The bwraps die with the server; the next one adopts the pool machine and starts it again.
	b, again := restartTakesPool(t, a, home, setup, refilled, func(ts *testServer) int { return ts.poolReady("base") })
	for _, id := range []string{m.ID, again.ID} {
		b.call("DELETE", "/v1/computers/"+id, nil, 204, nil)
	}
	b.s.computers.drainPool(context.Background())
	eventually(t, "every sandbox directory removed", func() bool {
		dirs, _ := os.ReadDir(filepath.Join(home, "sandboxes"))
		return len(dirs) == 0
	})
}

// TestWarmPoolKubernetes: the pool keeps pods in the cluster: it fills (pods labelled agentd.pool), its
// machines are in no listing and never reaped; a default create takes one whose channel already answers;
// a pool pod deleted behind agentd's back is noticed by the pod watch and replaced; after a restart the
// pool pod is adopted and taken as before, and a restart with a smaller pool destroys it. No pod is left.
func TestWarmPoolKubernetes(t *testing.T) {
	requireKubernetes(t)
	t.Cleanup(func() { checkNoKubeLeaks(t) })
	home := t.TempDir()
	setup := func(c *testSetup) { c.ComputerProvider, c.MaxComputers = "kubernetes", 4 }
	a := newTestServer(t, withHostEnv, withHome(home), withWarmPool(map[string]int{"base": 1}), setup)
	k := a.s.computers.providerByName("kubernetes").(*kubeProvider)
	podLabel := func(id string) string {
		out, _ := kubectlTest(t, "get", "pod", k.pod(&ComputerInfo{ID: id}), "--ignore-not-found", "-o", `jsonpath={.metadata.labels.agentd\.pool}`)
		return strings.TrimSpace(out)
	}
	// The pool's view without GET /v1/doctor, which would start the network-policy check's pods too.
	ready := func(ts *testServer) int {
		d, _ := ts.s.computers.poolDoctor(context.Background())
		if len(d.Flavors) == 0 {
			return -1
		}
		return d.Flavors[0].Ready
	}
	eventually(t, "the pool to fill", func() bool { return ready(a) == 1 })
	pooled := a.pooledIDs()
	if d, _ := a.s.computers.poolDoctor(context.Background()); !d.Enabled || d.Provider != "kubernetes" || len(pooled) != 1 || podLabel(pooled[0]) != "base" {
		t.Fatalf("doctor pool: %+v; pooled %v, pod label %q", d, pooled, podLabel(pooled[0]))
	}
	if ids := a.listIDs(true); len(ids) != 0 {
		t.Fatalf("pool machines listed: %v", ids)
	}
	a.s.computers.setNow(func() time.Time { return time.Now().Add(48 * time.Hour) })
	if got := a.s.computers.sweep(context.Background()); len(got) != 0 {
		t.Fatalf("the reaper took %v", got)
	}
	a.s.computers.setNow(time.Now)

	m := a.create(map[string]any{"name": "quick"})
	if m.ID != pooled[0] || m.Provider != "kubernetes" || m.Name != "quick" {
		t.Fatalf("taken: %+v (pool was %v)", m, pooled)
	}
	if out := a.sh(m.ID, "echo hi; id -u; pwd"); out != "hi\n1000\n/work\n" {
		t.Fatalf("exec on the taken machine: %q", out)
	}
	eventually(t, "the pool to refill", func() bool { return ready(a) == 1 })
	refilled := a.pooledIDs()
	if len(refilled) != 1 || refilled[0] == m.ID {
		t.Fatalf("refilled pool %v (taken %s)", refilled, m.ID)
	}

	// A pool pod deleted behind agentd's back: evicted by the pod watch, and replaced.
	if out, err := kubectlTest(t, "delete", "pod", k.pod(&ComputerInfo{ID: refilled[0]}), "--wait=true", "--grace-period=1"); err != nil {
		t.Fatalf("kubectl delete: %v: %s", err, out)
	}
	eventually(t, "the deleted pool pod replaced", func() bool {
		ids := a.pooledIDs()
		return len(ids) == 1 && ids[0] != refilled[0] && ready(a) == 1
	})
	replaced := a.pooledIDs()

	// A restart adopts the pool pod; the next create takes it.
	b, again := restartTakesPool(t, a, home, setup, replaced, ready)
	eventually(t, "the pool to refill", func() bool { return ready(b) == 1 })
	last := b.pooledIDs()
	b.keep = true
	b.close()

	// The pool shrinks to nothing: its pod is destroyed at the next start.
	c := newTestServer(t, withHostEnv, withHome(home), setup)
	eventually(t, "the pool machine destroyed", func() bool { return len(c.pooledIDs()) == 0 && podLabel(last[0]) == "" })
	for _, id := range []string{m.ID, again.ID} {
		c.call("DELETE", "/v1/computers/"+id, nil, 204, nil)
	}
}

// restartTakesPool stops a (keeping its machines), starts a server on the same home with a one-machine
// base pool, checks it adopted exactly pool (ready counts its ready machines), and takes that machine
// with a create that must run a command on it.
func restartTakesPool(t *testing.T, a *testServer, home string, setup testOption, pool []string, ready func(*testServer) int) (*testServer, ComputerInfo) {
	t.Helper()
	a.keep = true
	a.close()
	b := newTestServer(t, withHostEnv, withHome(home), withWarmPool(map[string]int{"base": 1}), setup)
	eventually(t, "the adopted pool", func() bool { return ready(b) == 1 })
	if got := b.pooledIDs(); !slices.Equal(got, pool) {
		t.Fatalf("after restart the pool is %v, was %v", got, pool)
	}
	again := b.create(map[string]any{})
	if again.ID != pool[0] {
		t.Fatalf("after restart a create made %s instead of taking %s", again.ID, pool[0])
	}
	if out := b.sh(again.ID, "echo adopted"); out != "adopted\n" {
		t.Fatalf("exec on the adopted machine: %q", out)
	}
	return b, again
}
