// computers_pool.go — the warm pool: running machines of each flavor's default spec, made ahead of time
// so that a create whose spec one of them satisfies answers without starting a container.
//
// Entry points: checkWarmPool (config validation, main.go), startPool (newComputerService), takeFromPool
// (create, before the cold path), poolDoctor (the doctor report's `pool`), drainPool (destroys every pool
// machine; tests), warm (the hook where a pool machine is made ready: its exec channel is opened there),
// poolEvict (drops a ready machine found bad).
//
// Rules:
//   - config `warmPool: {flavor: count}` (default empty) keeps that many machines of the flavor's default
//     spec running on the engine the pool uses: the configured computerProvider when it is docker,
//     podman, kubernetes or sandbox, or the one `auto` selects when that is one of them (poolable). On
//     kubernetes the pool's pods live in the cluster (label agentd.pool) and are adopted after a restart
//     like the others. On local the pool is off and the doctor says why. Each count is
//     0..maxWarmPoolPerFlavor and their sum is at most maxComputers.
//   - A pool machine has its final id (cmp_…) from the start, the container label agentd.pool=<flavor>,
//     and a record in state `pooled`. That state is outside every listing, lookup, quota count and
//     reaper pass (store.ListComputers leaves it out; Get treats it as not found), so a pool machine is
//     nobody's until taken; the doctor lists the pool.
//   - Taking (poolSatisfies says which specs may): one DB transition pooled → running with the user's
//     name, spec, labels and timers, under the same lock and quota check as a cold create, so it counts
//     against maxComputers from then on; `update` sets cpus and memory when they differ; `computer_created`
//     is published as for a cold create. A replacement is started in the background a second later.
//   - One goroutine owned by the service adopts recorded pool machines at start (a running container of
//     the pool's engine and the flavor's current image, up to the target), destroys the rest (the pool
//     shrank, the image or the engine changed, the container stopped or vanished), then fills and refills.
//     Close cancels it and waits; a fill in flight finishes its one `run` first (never a half-made
//     container behind the record). Pool machines are left running at Close and adopted at the next start.
//     Unrecorded containers are orphans as before: reconcile counts pooled records as known.
package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"
)

const (
	maxWarmPoolPerFlavor = 16               // a sane ceiling per flavor; the sum is bounded by maxComputers
	poolRetryInterval    = 30 * time.Second // after a failed fill (engine down, image missing)
	poolRefillDelay      = time.Second      // between a take and the start of its replacement
)

var poolFlavors = []string{"base", "python", "node", "full"}

// checkWarmPool validates config `warmPool` in the style of config.check. The pool's machines do not
// count toward maxComputers (they are nobody's), but the pool may never hold more machines than the
// quota allows live ones: so a host holds at most 2×maxComputers machines, and a pool that could never
// be taken from whole is refused rather than quietly half-used.
func checkWarmPool(pool map[string]int, maxComputers int, bad func(key string, v any, want string) error) error {
	total := 0
	for _, flavor := range slices.Sorted(maps.Keys(pool)) {
		n := pool[flavor]
		switch {
		case !slices.Contains(poolFlavors, flavor):
			return bad("warmPool", fmt.Sprintf("keyed by %q", flavor), "keyed by flavors: base, python, node, full")
		case n < 0 || n > maxWarmPoolPerFlavor:
			return bad("warmPool."+flavor, n, fmt.Sprintf("between 0 and %d", maxWarmPoolPerFlavor))
		}
		total += n
	}
	if total > maxComputers {
		return bad("warmPool", fmt.Sprintf("%d machines in all", total), fmt.Sprintf("at most maxComputers (%d) in all", maxComputers))
	}
	return nil
}

// warmPool is the pool's in-memory state. A ready list is the ownership: whoever removes an id from it
// (a take, a drain) owns that machine.
type warmPool struct {
	mu       sync.Mutex
	target   map[string]int      // flavor → machines to keep ready
	ready    map[string][]string // flavor → ids of ready machines, oldest first
	provider string              // the engine the pool runs on, once known
	off      string              // why the pool cannot run now ("" when it can or is not configured)
	lastErr  string              // the last failed fill, for the doctor
	kick     chan struct{}       // wakes the filler (a take, a drain)
	cancel   context.CancelFunc
	done     chan struct{} // closed when the pool goroutine has returned
}

// startPool starts the pool goroutine (owned by the service: Close cancels it and waits).
func (c *computerService) startPool() {
	c.pool.target = map[string]int{}
	for f, n := range c.warmPool {
		if n > 0 {
			c.pool.target[f] = n
		}
	}
	c.pool.ready = map[string][]string{}
	c.pool.kick = make(chan struct{}, 1)
	c.pool.done = make(chan struct{})
	ctx, cancel := context.WithCancel(c.ctx)
	c.pool.cancel = cancel
	c.wg.Add(1)
	go c.poolLoop(ctx)
}

func (c *computerService) poolKick() {
	select {
	case c.pool.kick <- struct{}{}:
	default:
	}
}

func (c *computerService) poolLoop(ctx context.Context) {
	defer c.wg.Done()
	defer close(c.pool.done)
	c.poolAdopt(ctx)
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		if err := c.poolFill(ctx); err != nil && ctx.Err() == nil {
			c.pool.mu.Lock()
			c.pool.lastErr = asAPIError(err).Message
			c.pool.mu.Unlock()
			c.log.Warn("computers: warm pool fill", "err", err)
			retry.Reset(poolRetryInterval)
		}
		select {
		case <-ctx.Done():
			return
		case <-c.pool.kick:
		case <-retry.C:
		}
	}
}

// poolSpec is the spec every pool machine of a flavor is made with: the flavor's defaults.
func poolSpec(flavor string) ComputerSpec {
	sp := ComputerSpec{Flavor: flavor}
	applyComputerDefaults(&sp)
	return sp
}

// poolProvider is the engine the pool runs on now, or nil and why not; byConfig says that is the
// configuration's doing (local), not an engine that may come back.
func (c *computerService) poolProvider(ctx context.Context) (p provider, off string, byConfig bool) {
	switch c.provider {
	case "local":
		return nil, "computerProvider is local: the warm pool keeps docker, podman, kubernetes or sandbox machines only", true
	case "docker", "podman", "kubernetes", "sandbox":
		p := c.providerByName(c.provider)
		if pr := c.probe(ctx, p); !pr.available {
			return nil, fmt.Sprintf("computerProvider %s is unavailable: %s", c.provider, pr.reason), false
		}
		return p, "", false
	}
	p, err := c.selectProvider(ctx, "auto")
	if err != nil {
		return nil, asAPIError(err).Message, false
	}
	if !poolable(p) {
		return nil, fmt.Sprintf("auto selects %s (no docker, podman, kubernetes or sandbox can run): the warm pool keeps docker, podman, kubernetes or sandbox machines only", p.meta().name), false
	}
	return p, "", false
}

// poolAdopt runs once at start: recorded pool machines that are still good are ready again; the others
// (beyond the target, another engine, an old image, not running) are destroyed. A record whose engine
// cannot be asked now is left for a later start.
func (c *computerService) poolAdopt(ctx context.Context) {
	recs, err := c.store.ListPooledComputers(ctx)
	if err != nil {
		c.log.Warn("computers: warm pool: list records", "err", err)
		return
	}
	if len(recs) == 0 {
		return
	}
	cur, _, _ := c.poolProvider(ctx)
	kept := map[string]int{}
	for i := range recs {
		m := &recs[i]
		p := c.providerByName(m.Provider)
		if p == nil || !c.probe(ctx, p).available {
			continue
		}
		flavor, why := m.Spec.Flavor, ""
		switch {
		case cur == nil || cur.meta().name != m.Provider:
			why = "the warm pool no longer uses " + m.Provider
		case kept[flavor] >= c.pool.target[flavor]:
			why = "the warm pool shrank"
		case m.Image != c.machineImage(p, poolSpec(flavor)):
			why = "the flavor's image changed"
		default:
			if st, err := p.status(ctx, m); err != nil {
				continue // the engine hiccuped: judge it at the next start
			} else if st != "running" {
				why = "the pool machine was " + st + " at start"
			}
		}
		if why != "" {
			c.destroyPooled(ctx, p, m, why)
			continue
		}
		kept[flavor]++
		c.warm(m)
		c.pool.mu.Lock()
		c.pool.ready[flavor] = append(c.pool.ready[flavor], m.ID)
		c.pool.mu.Unlock()
		c.log.Info("computers: warm pool machine adopted", "computer", m.ID, "flavor", flavor)
	}
}

// destroyPooled removes a pool machine and marks its record destroyed (its id was in no ready list, or
// the caller removed it).
func (c *computerService) destroyPooled(ctx context.Context, p provider, m *ComputerInfo, why string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lifecycleTimout)
	defer cancel()
	if err := p.destroy(dctx, m); err != nil {
		c.log.Warn("computers: warm pool: destroy", "computer", m.ID, "err", err)
		return // the record stays pooled: the next start judges it again
	}
	m.State, m.Error = stateDestroyed, why
	c.save(dctx, m)
	c.log.Info("computers: warm pool machine destroyed", "computer", m.ID, "flavor", m.Spec.Flavor, "why", why)
}

// poolFill makes machines until every flavor has its target ready, one at a time (a pool is a
// background convenience: it never competes with the API for the engine more than one `run` at a time).
func (c *computerService) poolFill(ctx context.Context) error {
	c.pool.mu.Lock()
	want := len(c.pool.target) > 0
	c.pool.mu.Unlock()
	if !want {
		return nil
	}
	p, off, byConfig := c.poolProvider(ctx)
	c.pool.mu.Lock()
	c.pool.off = off
	if p != nil {
		c.pool.provider = p.meta().name
	}
	c.pool.mu.Unlock()
	switch {
	case p == nil && byConfig:
		return nil // nothing to retry
	case p == nil:
		return errorf(codeProviderUnavailable, "%s", off) // retried: the engine may come (back)
	}
	for _, flavor := range poolFlavors {
		for {
			if ctx.Err() != nil {
				return nil
			}
			c.pool.mu.Lock()
			short := len(c.pool.ready[flavor]) < c.pool.target[flavor]
			c.pool.mu.Unlock()
			if !short {
				break
			}
			if err := c.poolMake(ctx, p, flavor); err != nil {
				return err
			}
		}
	}
	c.pool.mu.Lock()
	c.pool.lastErr = ""
	c.pool.mu.Unlock()
	return nil
}

// poolMake makes one pool machine: the record first (so the reconcile never takes the container for an
// orphan), then one `run`, then the warm-up; then it is offered.
func (c *computerService) poolMake(ctx context.Context, p provider, flavor string) error {
	sp := poolSpec(flavor)
	now := c.now()
	m := &ComputerInfo{
		ID: newID("cmp"), Provider: p.meta().name, State: statePooled, Image: c.machineImage(p, sp),
		Workdir: sp.Workdir, CreatedAt: timestamp(now), LastUsedAt: timestamp(now), Spec: sp,
		Ports: map[string]PortBinding{},
	}
	m.Name = m.ID
	if err := c.store.InsertComputer(ctx, *m); err != nil {
		return err
	}
	// Not cut short by Close: a `run` killed half-way may still leave a container behind the record.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), createTimeout)
	defer cancel()
	if err := p.create(mctx, m); err != nil {
		c.destroyOrOrphan(mctx, p, m)
		m.State, m.Error = stateDestroyed, asAPIError(err).Message
		c.save(mctx, m)
		return err
	}
	c.warm(m)
	c.pool.mu.Lock()
	c.pool.ready[flavor] = append(c.pool.ready[flavor], m.ID)
	c.pool.mu.Unlock()
	c.log.Info("computers: warm pool machine ready", "computer", m.ID, "flavor", flavor, "provider", m.Provider)
	return nil
}

// warm is THE hook where a pool machine becomes ready (after its `run` at fill time, and after adoption
// at start): whatever makes the first exec fast is done here, before the machine is offered. The exec
// channel (computers_channel.go) opens its channel to m here. It must not block long and must not fail
// the machine: a machine that could not be warmed is still a good, merely slower, pool machine (one
// found dead is dropped with poolEvict, from outside this call: warm runs before the machine is offered).
func (c *computerService) warm(m *ComputerInfo) {
	switch p := c.providerByName(m.Provider).(type) {
	case *engineProvider:
		c.channel(c.ctx, p, m) // opened now, so the taker's first exec is a frame, not a docker exec
	case *sandboxProvider:
		c.channel(c.ctx, p, m) // after a restart the sandbox's bwrap is started again here
	case *kubeProvider:
		c.channel(c.ctx, p, m) // its `kubectl exec -i`, the helper having been copied in at create
	}
}

// poolEvict drops a ready pool machine that turned out bad (its warm-up or its channel saw it die):
// it is destroyed and replaced. A machine no longer in a ready list was taken meanwhile and is left alone.
func (c *computerService) poolEvict(ctx context.Context, id, why string) {
	c.pool.mu.Lock()
	found := false
	for f, ids := range c.pool.ready {
		if i := slices.Index(ids, id); i >= 0 {
			c.pool.ready[f], found = slices.Delete(ids, i, i+1), true
		}
	}
	c.pool.mu.Unlock()
	if !found {
		return
	}
	if m, err := c.store.GetComputer(ctx, id); err == nil && m.State == statePooled {
		if p := c.providerByName(m.Provider); p != nil {
			c.destroyPooled(ctx, p, &m, why)
		}
	}
	c.poolKick()
}

// poolable: the pool keeps machines of docker, podman, kubernetes (a pod's create is seconds: apply,
// schedule, Ready, the helper copied in) and sandbox (a bwrap and a helper start, ~100x its first exec);
// a local machine is a directory and costs nothing to make.
func poolable(p provider) bool {
	switch p.(type) {
	case *engineProvider, *sandboxProvider, *kubeProvider:
		return true
	}
	return false
}

// poolSatisfies says whether a pool machine can stand for a cold create of sp on p. Conservative: what
// the container was made with must be what sp would make. The same engine; the flavor's image (no
// image, or the same one); the default user, no env, no mounts, no packages, egress network mode (the
// run flag differs for none), no persist, the default diskMb (the /work tmpfs size is fixed at run) and
// the default workdir. cpus and memoryMb may differ (`update` sets them). What only the record holds
// may differ: name, labels, idle and lifetime timers, network allow/deny (applied by agentd, not the
// container), setup (run after taking, as after a cold create).
func (c *computerService) poolSatisfies(p provider, sp ComputerSpec) bool {
	if !poolable(p) {
		return false
	}
	def := poolSpec(sp.Flavor)
	if _, sandbox := p.(*sandboxProvider); sandbox && (sp.Image != "" || sp.CPUs != def.CPUs || sp.MemoryMB != def.MemoryMB) {
		return false // a sandbox's limits are its helper's rlimits, set when its bwrap starts
	}
	// A pod's limits are fixed at its creation for agentd: an in-place resize needs the pods/resize
	// subresource (another verb in the Role) and a runtime that applies it; a spec with other limits goes cold.
	if _, pod := p.(*kubeProvider); pod && (sp.CPUs != def.CPUs || sp.MemoryMB != def.MemoryMB) {
		return false
	}
	return c.imageFor(sp) == c.imageFor(def) && sp.User == "" && len(sp.Env) == 0 && len(sp.Mounts) == 0 &&
		len(sp.Packages) == 0 && sp.Network.Mode == def.Network.Mode && !sp.Persist && sp.DiskMB == def.DiskMB &&
		sp.Workdir == def.Workdir
}

// takeFromPool turns a ready pool machine into the machine sp asks for. took false (with no error)
// sends the caller down the cold path: no machine satisfies sp, the quota is full (the cold path says
// so in its own words), or the taken machine could not be fitted (it is destroyed and replaced).
func (c *computerService) takeFromPool(ctx context.Context, p provider, sp ComputerSpec) (*ComputerInfo, bool, error) {
	if !c.poolSatisfies(p, sp) {
		return nil, false, nil
	}
	c.creating.Lock()
	live, err := c.store.CountLiveComputers(ctx)
	if err != nil || live >= c.conf().maxComputers {
		c.creating.Unlock()
		return nil, false, nil
	}
	m, ok := c.poolPop(ctx, p.meta().name, sp.Flavor)
	if !ok {
		c.creating.Unlock()
		return nil, false, nil
	}
	// The transition: from here the machine is the caller's and counts against maxComputers. The spec's
	// labels are the record's; the container keeps the agentd.label.* it was made with (none) and its
	// agentd.pool label, since an engine's labels cannot change after creation.
	now := c.now()
	m.Name, m.Spec, m.State, m.Error = sp.Name, sp, stateRunning, ""
	if m.Name == "" {
		m.Name = m.ID
	}
	m.Workdir, m.CreatedAt, m.LastUsedAt, m.ExpiresAt = sp.Workdir, timestamp(now), timestamp(now), ""
	if sp.MaxLifetimeSec > 0 {
		m.ExpiresAt = timestamp(now.Add(time.Duration(sp.MaxLifetimeSec) * time.Second))
	}
	err = c.save(ctx, m)
	c.creating.Unlock()
	// The replacement, a moment later: its `run` would otherwise compete with the taker's first commands
	// for the engine and the CPUs (on a 2-core host, loaded: first exec p50 ~290 ms with the delay,
	// 430-580 ms without, BenchmarkCreateFromPool).
	time.AfterFunc(poolRefillDelay, c.poolKick)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), createTimeout)
	defer cancel()
	if err != nil {
		c.destroyPooled(cctx, p, m, "taking it failed: "+err.Error())
		return nil, false, nil
	}
	rt := c.runtime(m.ID)
	rt.mu.Lock()
	defer rt.mu.Unlock()
	def := poolSpec(sp.Flavor)
	if sp.CPUs != def.CPUs || sp.MemoryMB != def.MemoryMB {
		if err := p.(*engineProvider).update(cctx, m); err != nil {
			c.log.Warn("computers: warm pool: limits", "computer", m.ID, "err", err)
			p.destroy(cctx, m)
			m.State, m.Error = stateDestroyed, "setting its limits failed: "+err.Error()
			c.save(cctx, m)
			c.mu.Lock()
			delete(c.rt, m.ID)
			c.mu.Unlock()
			return nil, false, nil
		}
	}
	if msg, err := c.provision(cctx, p, m); err != nil {
		m.State, m.Error = stateError, msg
		c.save(cctx, m)
		c.hub.publish("computers", "computer_created", c.decorate(m))
		return nil, true, errorf(codeComputerFailed, "computer %s: %s", m.ID, msg).
			withHint("the computer is kept in state error for inspection; delete it when done").withDetail("computerId", m.ID)
	}
	c.log.Info("computer created", "computer", m.ID, "name", m.Name, "provider", m.Provider, "image", m.Image, "warmPool", true)
	c.hub.publish("computers", "computer_created", c.decorate(m))
	return c.decorate(m), true, nil
}

// poolPop removes the oldest ready machine of flavor on engine prov whose record is still pooled.
func (c *computerService) poolPop(ctx context.Context, prov, flavor string) (*ComputerInfo, bool) {
	for {
		c.pool.mu.Lock()
		if c.pool.provider != prov || len(c.pool.ready[flavor]) == 0 {
			c.pool.mu.Unlock()
			return nil, false
		}
		id := c.pool.ready[flavor][0]
		c.pool.ready[flavor] = c.pool.ready[flavor][1:]
		c.pool.mu.Unlock()
		m, err := c.store.GetComputer(ctx, id)
		if err == nil && m.State == statePooled {
			return &m, true
		}
	}
}

// update sets a taken pool machine's cpu and memory limits to its spec's.
func (e *engineProvider) update(ctx context.Context, m *ComputerInfo) error {
	mem := strconv.Itoa(m.Spec.MemoryMB) + "m"
	_, err := e.call(ctx, nil, "update", "--cpus", strconv.FormatFloat(m.Spec.CPUs, 'f', -1, 64),
		"--memory", mem, "--memory-swap", mem, e.container(m))
	return err
}

// drainPool stops the pool goroutine and destroys every pool machine (a test server's cleanup; a
// server that shuts down leaves them for adoption instead).
func (c *computerService) drainPool(ctx context.Context) {
	c.pool.cancel()
	<-c.pool.done
	c.pool.mu.Lock()
	c.pool.ready = map[string][]string{}
	c.pool.mu.Unlock()
	recs, _ := c.store.ListPooledComputers(ctx)
	for i := range recs {
		if p := c.providerByName(recs[i].Provider); p != nil {
			c.destroyPooled(ctx, p, &recs[i], "the pool was drained")
		}
	}
}

// poolDoctor is the doctor's view of the pool: per flavor the target and how many are ready, or why
// the pool is off; a configured pool that cannot run is also a warning.
func (c *computerService) poolDoctor(ctx context.Context) (doctorPool, []string) {
	c.pool.mu.Lock()
	d := doctorPool{Flavors: []doctorPoolFlavor{}, LastError: c.pool.lastErr}
	total := 0
	for _, f := range poolFlavors {
		if n := c.pool.target[f]; n > 0 {
			d.Flavors = append(d.Flavors, doctorPoolFlavor{Flavor: f, Target: n, Ready: len(c.pool.ready[f]),
				Provider: c.pool.provider, Machines: append([]string{}, c.pool.ready[f]...)})
			total += n
		}
	}
	c.pool.mu.Unlock()
	if total == 0 {
		d.Reason = "warmPool is empty in config.yaml"
		return d, nil
	}
	p, off, _ := c.poolProvider(ctx)
	if p == nil {
		d.Reason = off
		return d, []string{"the warm pool is off: " + off}
	}
	d.Enabled, d.Provider = true, p.meta().name
	return d, nil
}
