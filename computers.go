// computers.go — the computer service: providers (docker, podman, kubernetes, sandbox, local, ssh), lifecycle,
// records, and the /v1/computers lifecycle endpoints. What a spec may ask lives in computers_spec.go, exec
// in computers_exec.go, files in computers_files.go, ports in computers_ports.go, the terminal in
// computers_terminal.go, the reaper in computers_reaper.go, the warm pool in computers_pool.go; the
// providers in computers_engine.go, computers_kubernetes.go, computers_sandbox.go, computers_local.go and
// computers_ssh.go.
//
// Entry points used elsewhere (the run loop depends on these exact signatures): EnsureForAgent, Get,
// Exec, ReadFile, WriteFile, ListDir, DeletePath, ExposePort; doctor for the doctor report.
//
// Rules: records live in SQLite and are the truth across restarts; a named provider that cannot run is
// E_PROVIDER_UNAVAILABLE (never a silent substitute); creating and running machines count toward
// maxComputers; a destroyed machine is gone (E_COMPUTER_NOT_FOUND); every lifecycle change is published
// on the `computers` topic. At start the service reconciles records with the engines (adopting live
// machines, marking vanished ones destroyed, listing unrecorded containers of this owner as orphans).
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ComputerInfo is the API's view of a machine (DESIGN §4).
type ComputerInfo struct {
	ID            string                 `json:"id"`
	Name          string                 `json:"name"`
	Provider      string                 `json:"provider"`
	State         string                 `json:"state"` // creating, running, stopped, destroyed, error
	Isolated      bool                   `json:"isolated"`
	IsolationKind string                 `json:"isolationKind"` // kernel | namespaces | guardrails | vm (fly)
	Image         string                 `json:"image"`
	Workdir       string                 `json:"workdir"`
	CreatedAt     string                 `json:"createdAt"`
	LastUsedAt    string                 `json:"lastUsedAt"`
	ExpiresAt     string                 `json:"expiresAt,omitempty"`
	Spec          ComputerSpec           `json:"spec"`
	Ports         map[string]PortBinding `json:"ports"`
	Error         string                 `json:"error,omitempty"`
	Disk          string                 `json:"disk,omitempty"` // how the machine's disk is bounded, where that is not diskMb in total (sandbox)
}

// PortBinding is a guest port reachable from the host.
type PortBinding struct {
	HostPort  int    `json:"hostPort"`
	URL       string `json:"url"`
	PublicURL string `json:"publicUrl,omitempty"`
	Reachable bool   `json:"reachable"`
}

// ExecRequest is the exec body. Cmd is a string (run under /bin/sh -c) or an argv array (run directly).
type ExecRequest struct {
	Cmd            execCommand       `json:"cmd"`
	Cwd            string            `json:"cwd,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	TimeoutSec     int               `json:"timeoutSec,omitempty"` // 1-3600, default 120
	Stdin          *string           `json:"stdin,omitempty"`
	TTY            bool              `json:"tty,omitempty"`
	User           string            `json:"user,omitempty"`
	MaxOutputBytes int               `json:"maxOutputBytes,omitempty"` // 1-16 MiB, default 256 KiB per stream

	// Policy is the caller's allow/deny patterns; the built-in deny list always applies. Not on the wire.
	Policy commandPolicy `json:"-"`
	// capped says which values above their cap were lowered to it (the result's warnings).
	capped []string
}

// execCommand holds either a shell string or an argv.
type execCommand struct {
	Shell string
	Argv  []string
}

// ExecResult is the outcome of one exec. A non-zero exit is still a successful exec.
type ExecResult struct {
	ExitCode   int    `json:"exitCode"`
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	DurationMS int64  `json:"durationMs"`
	Truncated  bool   `json:"truncated"`
	TimedOut   bool   `json:"timedOut"`
	// Warnings say what the request asked for beyond a cap, and what it got instead.
	Warnings []string `json:"warnings,omitempty"`
}

// DirEntry is one element of a directory listing; directories first.
type DirEntry struct {
	Name       string `json:"name"`
	Path       string `json:"path"`
	Type       string `json:"type"` // file, dir, symlink, other
	Size       int64  `json:"size"`
	ModifiedAt string `json:"modifiedAt"`
	Mode       string `json:"mode"`
}

const (
	stateCreating  = "creating"
	stateRunning   = "running"
	stateStopped   = "stopped"
	stateDestroyed = "destroyed"
	stateError     = "error"
	// statePooled is a warm-pool machine (computers_pool.go): never listed, looked up, counted or reaped.
	statePooled = "pooled"

	probeCacheTTL   = 30 * time.Second
	probeTimeout    = 30 * time.Second // podman's probe starts a container: >10 s on a loaded 2-core host
	createTimeout   = 10 * time.Minute
	lifecycleTimout = 2 * time.Minute
)

// provider is one way of running machines. docker and podman share computers_engine.go; sandbox is
// computers_sandbox.go; local is computers_local.go.
type provider interface {
	meta() providerMeta
	probe(ctx context.Context) probeResult
	create(ctx context.Context, m *ComputerInfo) error
	start(ctx context.Context, m *ComputerInfo) error
	stop(ctx context.Context, m *ComputerInfo) error
	destroy(ctx context.Context, m *ComputerInfo) error
	// status reports "running", "stopped" or "missing" for a recorded machine.
	status(ctx context.Context, m *ComputerInfo) (string, error)
	// owned lists the machines this server's owner id has on the provider: id → running.
	owned(ctx context.Context) (map[string]bool, error)
	// command builds the host process that runs p inside m; its Cancel kills p's process group there.
	command(ctx context.Context, m *ComputerInfo, p *procSpec) (*procHandle, error)
	fs(m *ComputerInfo) machineFS
	// supports refuses a spec the provider cannot honour (never silently ignored).
	supports(sp ComputerSpec) error
	// killLeftovers kills, in a machine adopted after a restart, the processes of the previous server's
	// execs (no client is left to read them or to cancel them) and says how many groups it killed.
	killLeftovers(ctx context.Context, m *ComputerInfo) int
}

type providerMeta struct {
	name, description, isolationKind string
	priority                         int
	isolated                         bool
}

type probeResult struct {
	available    bool
	version      string
	reason, hint string
	at           time.Time
}

// machineRT is the in-memory state of one machine: activity, lifecycle lock, forwarders.
type machineRT struct {
	mu       sync.Mutex // serialises lifecycle operations on the machine
	active   int        // execs in flight (guarded by computerService.mu)
	lastUsed time.Time  // guarded by computerService.mu
	ports    map[int]*portForwarder
	reach    map[int]reachCheck // guarded by computerService.mu: the last reachability check per port

	chMu  sync.Mutex   // guards ch and chOff (computers_channel.go)
	ch    *execChannel // the warm exec channel, nil until first use
	chOff string       // why this machine cannot have one (then every call takes the per-call path)

	refused refusalLog // guarded by computerService.mu: the egress proxy's recent refusals (computers_egress.go)

	brMu sync.Mutex      // guards br (computers_browser.go)
	br   *machineBrowser // the machine's running Chromium, nil until first use
}

type reachCheck struct {
	at time.Time
	ok bool
}

// computerDeps are the parts a computer service is built from (newServer fills them from the config).
type computerDeps struct {
	store    *store
	hub      *hub
	log      *slog.Logger
	clock    func() time.Time    // read through c.now(), which a test may swap while the reaper runs
	getenv   func(string) string // the server's environment: the local provider's allow-list reads it
	home     string              // the data directory: instance id, local workspaces, podman probe root
	provider string              // computerProvider: auto or a provider's name
	// The settings a config reload may change: read them through c.conf(), never directly.
	images       map[string]string // flavor → image, overriding defaultImages
	registries   []string          // allowedRegistries (config); empty: the flavor images' registries
	mountRoots   []string          // allowedMounts (config): host directories mounts may come from; empty: none
	maxComputers int
	reapInterval time.Duration
	helper       string         // host path of the binary mounted into machines for the exec channel; "" = off
	helperNote   string         // why the exec channel is off, or what limits it (the doctor says it)
	warmPool     map[string]int // warmPool (config): flavor → machines kept ready (computers_pool.go)
	metrics      *metrics       // exec and create durations (metrics.go); nil counts nothing
	kube         *kubeConfig    // kubernetes (config): the provider exists only when set (computers_kubernetes.go)
	ssh          *sshConfig     // ssh (config): the provider exists only when set (computers_ssh.go)
	fly          *flyConfig     // fly (config): the provider exists only when set (computers_fly.go)
}

// computerService owns machines and the reaper goroutine.
type computerService struct {
	computerDeps
	live      atomic.Pointer[computerConf]     // the reloaded settings (reconfigure); nil: computerDeps'
	nowFn     atomic.Pointer[func() time.Time] // the clock now (setNow)
	owner     string
	providers []provider // priority order, highest first

	// Limits a test may shrink.
	downloadLimit int64 // compressed bytes of a download archive
	uploadLimit   int64 // uncompressed bytes of an upload archive
	readLimit     int64 // bytes of one file read (streamed past readHold; checked before the first byte)

	agents keyedMutex // EnsureForAgent, per agent name

	mu       sync.Mutex
	rt       map[string]*machineRT
	probes   map[string]probeResult
	orphans  map[string]string // "<provider>/<id>" → provider, found at reconcile
	scanned  chan struct{}     // closed when the start's background reconcile (the orphan scan) is done
	podsGone chan struct{}     // kubernetes' pod watch wakes the reaper's pod sweep (computers_reaper.go)
	creating sync.Mutex        // quota check + insert are atomic
	pool     warmPool          // computers_pool.go
	// browserCfg are the in-machine browsers' timings (computers_browser.go); a test may shorten them
	// before the first browser starts.
	browserCfg browserSettings
	proof      proofs    // computers_proof.go: the trials behind "available"
	drain      pipeDrain // local commands' output pipes still held by their background children

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newComputerService(d computerDeps) (*computerService, error) {
	c := &computerService{
		computerDeps:  d,
		downloadLimit: 256 << 20, uploadLimit: 1 << 30, readLimit: 256 << 20,
		rt: map[string]*machineRT{}, probes: map[string]probeResult{}, orphans: map[string]string{},
		podsGone: make(chan struct{}, 1),
	}
	c.setNow(d.clock)
	owner, err := loadOwnerID(d.home)
	if err != nil {
		return nil, err
	}
	c.owner = owner
	c.providers = []provider{
		newEngineProvider("docker", 100, c),
		newEngineProvider("podman", 90, c),
	}
	if d.kube != nil { // after docker and podman, before the sandbox; used only when configured
		c.providers = append(c.providers, newKubeProvider(*d.kube, c))
	}
	if d.fly != nil { // Fly Machines: used only when configured
		c.providers = append(c.providers, newFlyProvider(*d.fly, c))
	}
	c.providers = append(c.providers,
		newSandboxProvider(c), // computers_sandbox.go: bubblewrap namespaces, between the engines and local
		newLocalProvider(c),
	)
	if d.ssh != nil { // last: `auto` never picks another host over this one; name it (computers_ssh.go)
		c.providers = append(c.providers, newSSHProvider(*d.ssh, c))
	}
	c.proof = newProofs(len(c.providers))
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.wg.Add(1)
	go c.proveLoop() // runs the trials asked for (computers_proof.go)
	// Providers holding records are reconciled before the server answers; the others are only scanned
	// for orphans, in the background, so a start never waits on an engine it does not use.
	done := c.reconcile(c.ctx, nil)
	c.scanned = make(chan struct{})
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer close(c.scanned)
		c.reconcile(c.ctx, done)
	}()
	c.wg.Add(1)
	go c.reaperLoop()
	c.startPool() // the warm pool's goroutine (computers_pool.go): adopt, shrink, fill
	return c, nil
}

// Close stops the in-machine browsers, the reaper and the port forwarders and waits; machines keep
// running and are adopted at the next start.
func (c *computerService) Close() {
	c.endBrowsers() // computers_browser.go: through the exec channels, so before they go
	c.cancel()
	c.wg.Wait()
	defer c.drain.Close()
	c.mu.Lock()
	rts := make(map[string]*machineRT, len(c.rt))
	for id, rt := range c.rt {
		rts[id] = rt
	}
	c.mu.Unlock()
	for id, rt := range rts {
		c.closePorts(rt)
		c.closeBrowser(rt)
		c.closeChannel(rt)
		c.flushLastUsed(context.Background(), id)
	}
	// One last removal of the machines no record keeps whose removal failed (a loaded engine; the trials
	// and the pool have ended above): the reaper's retry will not come, and a server that is not started
	// again would leave them running. One that fails again is an orphan at the next start.
	ctx, cancel := context.WithTimeout(context.Background(), lifecycleTimout)
	c.reapOrphans(ctx, map[string]string{})
	cancel()
	for _, p := range c.providers { // kubernetes: its pod watch and network check; sandbox: cgroups, namespaces
		if cl, ok := p.(interface{ close() }); ok {
			cl.close()
		}
	}
}

// computerConf is what a reload of config.yaml changes in a running computer service.
type computerConf struct {
	images                 map[string]string
	registries, mountRoots []string
	maxComputers           int
}

// conf is the settings now: the start's until a reload.
func (c *computerService) conf() computerConf {
	if p := c.live.Load(); p != nil {
		return *p
	}
	return computerConf{images: c.images, registries: c.registries, mountRoots: c.mountRoots, maxComputers: c.maxComputers}
}

// reconfigure applies reloaded settings; machines already made keep theirs.
func (c *computerService) reconfigure(cc computerConf) { c.live.Store(&cc) }

func (c *computerService) now() time.Time            { return (*c.nowFn.Load())() }
func (c *computerService) setNow(f func() time.Time) { c.nowFn.Store(&f) }

// loadOwnerID returns this data directory's instance id (labels containers agentd.owner), creating it
// once. It is per data directory, not per process, so a restart adopts its own machines and two servers
// sharing one engine never reap each other's.
func loadOwnerID(home string) (string, error) {
	p := filepath.Join(home, "instance-id")
	if b, err := os.ReadFile(p); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	id := newID("agd")
	if err := os.WriteFile(p, []byte(id+"\n"), 0o600); err != nil {
		return "", errorf(codeConfig, "cannot write %s: %v", p, err).withHint("check that AGENT_HOME is writable")
	}
	return id, nil
}

// ---- providers and selection ----

func (c *computerService) providerByName(name string) provider {
	for _, p := range c.providers {
		if p.meta().name == name {
			return p
		}
	}
	return nil
}

// probe returns a provider's availability, cached for 30 s. A change is published on `providers`.
func (c *computerService) probe(ctx context.Context, p provider) probeResult {
	name := p.meta().name
	c.mu.Lock()
	pr, ok := c.probes[name]
	c.mu.Unlock()
	if ok && c.now().Sub(pr.at) < probeCacheTTL && c.now().Sub(pr.at) >= 0 {
		return pr
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	npr := p.probe(pctx)
	if !npr.available && pctx.Err() == context.DeadlineExceeded {
		npr.reason = fmt.Sprintf("%s did not answer within %s (%s)", name, probeTimeout, npr.reason)
	}
	cancel()
	npr.at = c.now()
	c.mu.Lock()
	c.probes[name] = npr
	c.mu.Unlock()
	if ok && pr.available != npr.available {
		c.hub.publish("providers", "provider_changed", map[string]any{
			"kind": "computer", "name": name, "available": npr.available, "reason": npr.reason})
	}
	return npr
}

// selectProvider picks the provider for a spec. `auto` takes the first by priority whose trial machine
// started and ran a command (computers_proof.go), waiting for a provider's first trial, never picking one
// whose trial failed. A named one is refused when its last trial failed; before its first trial ended,
// its probe decides (the create is a real start itself). Never a silent substitute.
func (c *computerService) selectProvider(ctx context.Context, name string) (provider, error) {
	if name == "" {
		name = c.provider
	}
	if name == "" || name == "auto" {
		var reasons []string
		for _, p := range c.providers {
			if namedOnly(p) {
				continue
			}
			r := c.awaitProof(ctx, p)
			if r.ok {
				return p, nil
			}
			reasons = append(reasons, p.meta().name+": "+r.reason)
		}
		return nil, errorf(codeProviderUnavailable, "no computer provider can run: %s", strings.Join(reasons, "; ")).
			withHint("install Docker, Podman or bubblewrap, or check GET /v1/doctor")
	}
	p := c.providerByName(name)
	if p == nil {
		return nil, errorf(codeProviderUnavailable, "unknown computer provider %q", name).
			withHint("use one of docker, podman, sandbox, local or auto")
	}
	unavailable := func(reason, hint string) error {
		return errorf(codeProviderUnavailable, "computer provider %q is unavailable: %s", name, reason).
			withHint(hint).withDetail("provider", name)
	}
	if r, _ := c.proofOf(p); !r.at.IsZero() && !r.ok {
		return nil, unavailable(r.reason, r.hint)
	}
	if pr := c.probe(ctx, p); !pr.available {
		return nil, unavailable(pr.reason, pr.hint)
	}
	return p, nil
}

// namedOnly: a provider `auto` never picks, because auto's default spec (network egress) is refused
// there (fly: a machine has Fly's full network); it is used when named.
func namedOnly(p provider) bool {
	fo, ok := p.(interface{ fullNetworkOnly() bool })
	return ok && fo.fullNetworkOnly()
}

// selected is the provider selectProvider would pick, from the trials' results alone (the doctor never
// waits): nil with the reason when none is proven yet or none can run.
func (c *computerService) selected() (provider, string) {
	cands := c.providers
	if c.provider != "" && c.provider != "auto" {
		cands = nil
		if p := c.providerByName(c.provider); p != nil {
			cands = []provider{p}
		}
	}
	var reasons []string
	for _, p := range cands {
		if namedOnly(p) && c.provider != p.meta().name {
			continue
		}
		r, _ := c.proofOf(p)
		switch {
		case r.ok:
			return p, ""
		case r.at.IsZero():
			return nil, fmt.Sprintf("%s is being checked: a trial machine is starting (GET /v1/doctor again in a moment)", p.meta().name)
		}
		reasons = append(reasons, p.meta().name+": "+r.reason)
	}
	if len(cands) == 0 {
		return nil, fmt.Sprintf("unknown computer provider %q (computerProvider)", c.provider)
	}
	return nil, "no computer provider can run: " + strings.Join(reasons, "; ")
}

// doctor reports the computer providers, the one `auto` would select (with its reason and isolation),
// and warnings (only a non-isolated provider available, orphaned containers).
func (c *computerService) doctor(ctx context.Context) (providers []doctorProvider, sel doctorSelection, images []doctorImage, warnings []string) {
	providers, images = []doctorProvider{}, []doctorImage{}
	for _, p := range c.providers {
		m := p.meta()
		pr, pending := c.proofOf(p) // the last trial's result: nothing here starts a machine or waits for one
		dp := doctorProvider{
			Name: m.name, Description: m.description, Priority: m.priority, Available: pr.ok,
			Isolated: m.isolated, IsolationKind: m.isolationKind, Version: pr.version, Reason: pr.reason, Hint: pr.hint,
		}
		switch {
		case pr.at.IsZero():
			dp.Reason, dp.Hint = "being checked: a trial machine is starting", "GET /v1/doctor again in a moment"
		case pr.ok:
			dp.Proof = fmt.Sprintf("a trial machine started and ran a command %s ago (in %s)", c.now().Sub(pr.at).Round(time.Second), pr.took.Round(time.Millisecond))
		}
		if pending && !pr.at.IsZero() {
			dp.Proof += " (a new trial is running)"
		}
		if _, host := p.(channelHost); host {
			dp.ExecChannel = &doctorExecChannel{Enabled: c.helper != "", Reason: c.helperNote}
			if sp, ok := p.(*sshProvider); ok { // computers_ssh_chan.go: the host may not run the helper
				if why := sp.channelOff(); c.helper != "" && why != "" {
					dp.ExecChannel = &doctorExecChannel{Reason: why + "; execs take one ssh session each"}
				}
			} else if c.helper == "" && pr.ok {
				// network.mode egress leaves through the proxy over the channel (computers_egress.go).
				dp.ExecChannel.Reason += "; without it, machines in network.mode egress have no network at all (they fail closed) and no ports: turn execChannel on, or use mode full"
			}
		}
		if k, ok := p.(*kubeProvider); ok && (pr.ok || k.netStarted()) { // the check may start before the trial ends
			var w string
			if dp.NetworkPolicies, w = k.netDoctor(); w != "" {
				warnings = append(warnings, w)
			}
		}
		if l, ok := p.(interface{ limitsNote() string }); ok && pr.ok {
			dp.Limits = l.limitsNote()
		}
		providers = append(providers, dp)
	}
	p, why := c.selected()
	switch {
	case p == nil:
		sel.ProviderReason = why
		if !strings.Contains(why, "being checked") {
			warnings = append(warnings, "no computer provider is available: "+why)
		}
	default:
		m := p.meta()
		sel.Provider, sel.Isolated = m.name, m.isolated
		if want := c.provider; want != "" && want != "auto" {
			sel.ProviderReason = fmt.Sprintf("%s is configured (computerProvider) and available", m.name)
		} else {
			sel.ProviderReason = fmt.Sprintf("%s is the highest-priority available provider", m.name)
		}
		if !m.isolated {
			warnings = append(warnings, fmt.Sprintf("only a non-isolated computer provider (%s) is available: commands run on this host, guarded but not isolated; install Docker, Podman or bubblewrap (the sandbox provider) for isolation", m.name))
		}
		if e, ok := p.(*engineProvider); ok {
			for _, flavor := range flavors {
				img := c.imageFor(ComputerSpec{Flavor: flavor})
				_, err := e.call(ctx, nil, "image", "inspect", "--format", "{{.Id}}", img)
				images = append(images, doctorImage{Flavor: flavor, Image: img, Provider: m.name, Present: err == nil})
				if err != nil && flavor == "base" {
					warnings = append(warnings, fmt.Sprintf("the base flavor's image %s is not on this machine: creating a machine will try to pull it; on a host with no registry, load or build one and set images: {base: <image>} in config.yaml, %s", img, takesEffect("images")))
				}
			}
		}
	}
	c.mu.Lock()
	orphans := make([]string, 0, len(c.orphans))
	for k := range c.orphans {
		orphans = append(orphans, k)
	}
	c.mu.Unlock()
	slices.Sort(orphans)
	for _, o := range orphans {
		warnings = append(warnings, fmt.Sprintf("orphaned container %s has no record; the reaper removes it", o))
	}
	return providers, sel, images, warnings
}

// ---- records ----

func (c *computerService) runtime(id string) *machineRT {
	c.mu.Lock()
	defer c.mu.Unlock()
	rt := c.rt[id]
	if rt == nil {
		rt = &machineRT{ports: map[int]*portForwarder{}}
		c.rt[id] = rt
	}
	return rt
}

// decorate fills the fields derived from the provider and memory.
func (c *computerService) decorate(m *ComputerInfo) *ComputerInfo {
	if p := c.providerByName(m.Provider); p != nil {
		meta := p.meta()
		m.Isolated, m.IsolationKind = meta.isolated, meta.isolationKind
		if d, ok := p.(interface{ diskNote(*ComputerInfo) string }); ok {
			m.Disk = d.diskNote(m)
		}
	}
	if m.Ports == nil {
		m.Ports = map[string]PortBinding{}
	}
	for key, b := range m.Ports { // reachable is now, not when the port was exposed
		if port, err := strconv.Atoi(key); err == nil {
			b.Reachable = m.State == stateRunning && c.reachable(m, port)
			m.Ports[key] = b
		}
	}
	c.mu.Lock()
	if rt := c.rt[m.ID]; rt != nil && !rt.lastUsed.IsZero() {
		if t := timestamp(rt.lastUsed); t > m.LastUsedAt {
			m.LastUsedAt = t
		}
	}
	c.mu.Unlock()
	return m
}

func notFound(idOrName string) *apiError {
	return errorf(codeComputerNotFound, "computer %q not found", idOrName).
		withHint("list computers with GET /v1/computers?all=true")
}

// Get resolves an id, or a name held by exactly one computer.
func (c *computerService) Get(ctx context.Context, idOrName string) (*ComputerInfo, error) {
	if idOrName == "" {
		return nil, notFound(idOrName)
	}
	m, err := c.store.GetComputer(ctx, idOrName)
	if err == nil && m.State != stateDestroyed && m.State != statePooled { // a pool machine is nobody's yet
		return c.decorate(&m), nil
	}
	if err != nil && !errors.Is(err, errNotFound) {
		return nil, err
	}
	all, err := c.store.ListComputers(ctx)
	if err != nil {
		return nil, err
	}
	var hits []ComputerInfo
	for _, m := range all {
		if m.Name == idOrName {
			hits = append(hits, m)
		}
	}
	switch len(hits) {
	case 0:
		return nil, notFound(idOrName)
	case 1:
		return c.decorate(&hits[0]), nil
	}
	return nil, errorf(codeComputerNotFound, "the name %q matches %d computers", idOrName, len(hits)).
		withHint("use the computer's id instead of its name")
}

// getLive is Get for operations that need the machine to be running (exec, files, ports).
func (c *computerService) getLive(ctx context.Context, idOrName string) (*ComputerInfo, provider, error) {
	m, err := c.Get(ctx, idOrName)
	if err != nil {
		return nil, nil, err
	}
	p := c.providerByName(m.Provider)
	if p == nil {
		return nil, nil, errorf(codeComputerFailed, "computer %s has an unknown provider %q", m.ID, m.Provider)
	}
	switch m.State {
	case stateRunning:
		return m, p, nil
	case stateStopped:
		return nil, nil, errorf(codeComputerFailed, "computer %s is stopped", m.ID).
			withHint(fmt.Sprintf("start it with POST /v1/computers/%s/start", m.ID))
	case stateCreating:
		return nil, nil, errorf(codeComputerFailed, "computer %s is still being created", m.ID).withHint("retry in a moment")
	}
	return nil, nil, errorf(codeComputerFailed, "computer %s is in state %s: %s", m.ID, m.State, m.Error).
		withHint("delete it and create a new one")
}

// save writes a record back.
func (c *computerService) save(ctx context.Context, m *ComputerInfo) error {
	return c.store.UpdateComputer(context.WithoutCancel(ctx), *m)
}

func (c *computerService) list(ctx context.Context, all bool) ([]ComputerInfo, error) {
	ms, err := c.store.ListComputers(ctx)
	if err != nil {
		return nil, err
	}
	out := []ComputerInfo{}
	for i := range ms {
		if ms[i].State == stateStopped && !all {
			continue
		}
		out = append(out, *c.decorate(&ms[i]))
	}
	return out, nil
}

// ---- lifecycle ----

// create makes a machine from a validated spec (defaults applied). Creation is not tied to the caller's
// context: a client that goes away mid-create leaves a consistent record, not a half machine. pol judges
// the spec's setup before anything exists (every creation passes here: the API, an agent's machine, a
// test case's, MCP's; the warm pool's machines have no setup and are taken only through here).
func (c *computerService) create(ctx context.Context, sp ComputerSpec, pol commandPolicy) (*ComputerInfo, error) {
	applyComputerDefaults(&sp)
	if err := checkEngineArgs(sp, c.imageFor(sp)); err != nil {
		return nil, err
	}
	if ae := setupRefused(sp.Setup, pol); ae != nil {
		return nil, ae
	}
	if err := c.checkHostLimits(sp); err != nil {
		return nil, err
	}
	p, err := c.selectProvider(ctx, sp.Provider)
	if err != nil {
		return nil, err
	}
	if err := checkHostCPUs(sp, p); err != nil {
		return nil, err
	}
	if err := p.supports(sp); err != nil {
		return nil, err
	}
	// Warm pool hook (computers_pool.go): a spec a pool machine satisfies takes it; else the cold path.
	if m, took, err := c.takeFromPool(ctx, p, sp); took || err != nil {
		return m, err
	}
	now := c.now()
	m := &ComputerInfo{
		ID: newID("cmp"), Name: sp.Name, Provider: p.meta().name, State: stateCreating,
		Workdir: sp.Workdir, CreatedAt: timestamp(now), LastUsedAt: timestamp(now), Spec: sp,
		Ports: map[string]PortBinding{},
	}
	if m.Name == "" {
		m.Name = m.ID
	}
	m.Image = c.machineImage(p, sp)
	if sp.MaxLifetimeSec > 0 {
		m.ExpiresAt = timestamp(now.Add(time.Duration(sp.MaxLifetimeSec) * time.Second))
	}

	c.creating.Lock()
	live, err := c.store.CountLiveComputers(ctx)
	if limit := c.conf().maxComputers; err == nil && live >= limit {
		c.creating.Unlock()
		return nil, errorf(codeQuota, "machine limit reached: %d of %d live machines", live, limit).
			withHint("delete or stop a computer, or raise maxComputers in config.yaml, "+takesEffect("maxComputers")).
			withDetail("live", live).withDetail("limit", limit)
	}
	if err == nil {
		err = c.store.InsertComputer(ctx, *m)
	}
	c.creating.Unlock()
	if err != nil {
		return nil, err
	}

	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), createTimeout)
	defer cancel()
	t0 := time.Now()
	rt := c.runtime(m.ID)
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if err := p.create(cctx, m); err != nil {
		c.destroyOrOrphan(cctx, p, m)
		m.State, m.Error = stateDestroyed, asAPIError(err).Message
		c.save(cctx, m)
		return nil, err
	}
	if msg, err := c.provision(cctx, p, m); err != nil {
		m.State, m.Error = stateError, msg
		c.save(cctx, m)
		c.hub.publish("computers", "computer_created", c.decorate(m))
		return nil, errorf(codeComputerFailed, "computer %s: %s", m.ID, msg).
			withHint("the computer is kept in state error for inspection; delete it when done").withDetail("computerId", m.ID)
	}
	m.State = stateRunning
	if err := c.save(cctx, m); err != nil {
		return nil, err
	}
	c.metrics.machineCreated(m.Provider, time.Since(t0))
	c.log.Info("computer created", "computer", m.ID, "name", m.Name, "provider", m.Provider, "image", m.Image)
	c.hub.publish("computers", "computer_created", c.decorate(m))
	return c.decorate(m), nil
}

// provision installs packages (as root) and runs setup (as the machine's user), once after create. The
// setup passed the command policy in create (setupRefused) before the machine existed.
func (c *computerService) provision(ctx context.Context, p provider, m *ComputerInfo) (string, error) {
	if len(m.Spec.Packages) > 0 {
		script := `set -e; export DEBIAN_FRONTEND=noninteractive
if command -v apt-get >/dev/null; then apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@"
elif command -v apk >/dev/null; then apk add --no-cache "$@"
elif command -v dnf >/dev/null; then dnf install -y "$@"
else echo "no known package manager in the image" >&2; exit 1; fi`
		argv := append([]string{"/bin/sh", "-c", script, "sh"}, m.Spec.Packages...)
		res, err := c.run(ctx, p, m, &procSpec{argv: argv, user: "0:0", cwd: "/"}, 900*time.Second)
		if err != nil {
			return "installing packages: " + asAPIError(err).Message, err
		}
		if res.ExitCode != 0 {
			return fmt.Sprintf("installing packages failed (exit %d): %s", res.ExitCode, lastLines(res.Stderr+res.Stdout, 20)), errors.New("packages")
		}
	}
	if strings.TrimSpace(m.Spec.Setup) != "" {
		res, err := c.run(ctx, p, m, &procSpec{argv: []string{"/bin/sh", "-c", m.Spec.Setup}}, 900*time.Second)
		if err != nil {
			return "setup: " + asAPIError(err).Message, err
		}
		if res.ExitCode != 0 {
			return fmt.Sprintf("setup failed (exit %d): %s", res.ExitCode, lastLines(res.Stderr+res.Stdout, 20)), errors.New("setup")
		}
	}
	return "", nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// stop stops a machine; its ports close. Stopping a stopped machine is a no-op.
func (c *computerService) stop(ctx context.Context, idOrName string) (*ComputerInfo, error) {
	m, p, rt, err := c.lockMachine(ctx, idOrName)
	if err != nil {
		return nil, err
	}
	defer rt.mu.Unlock()
	if m.State == stateStopped {
		return m, nil
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lifecycleTimout)
	defer cancel()
	c.closePorts(rt)
	c.closeBrowser(rt)
	c.closeChannel(rt)
	if err := p.stop(lctx, m); err != nil {
		return nil, err
	}
	m.State, m.Ports = stateStopped, map[string]PortBinding{}
	if err := c.save(lctx, m); err != nil {
		return nil, err
	}
	c.hub.publish("computers", "computer_stopped", c.decorate(m))
	return m, nil
}

// start starts a stopped machine. Starting a running machine is a no-op.
func (c *computerService) start(ctx context.Context, idOrName string) (*ComputerInfo, error) {
	m, p, rt, err := c.lockMachine(ctx, idOrName)
	if err != nil {
		return nil, err
	}
	defer rt.mu.Unlock()
	if m.State == stateRunning {
		return m, nil
	}
	if m.State != stateStopped {
		return nil, errorf(codeComputerFailed, "computer %s is in state %s and cannot be started", m.ID, m.State).
			withHint("delete it and create a new one")
	}
	if pr := c.probe(ctx, p); !pr.available {
		return nil, errorf(codeProviderUnavailable, "computer provider %q is unavailable: %s", m.Provider, pr.reason).withHint(pr.hint)
	}
	// The count holds until the machine is saved running: a start racing another start or a create
	// for the last slot would otherwise see this machine as stopped and pass too.
	if err := func() error {
		c.creating.Lock()
		defer c.creating.Unlock()
		live, err := c.store.CountLiveComputers(ctx)
		if err != nil {
			return err
		}
		if limit := c.conf().maxComputers; live >= limit {
			return errorf(codeQuota, "machine limit reached: %d of %d live machines", live, limit).
				withHint("delete or stop a computer, or raise maxComputers in config.yaml, "+takesEffect("maxComputers")).
				withDetail("live", live).withDetail("limit", limit)
		}
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lifecycleTimout)
		defer cancel()
		if err := p.start(lctx, m); err != nil {
			return err
		}
		m.State = stateRunning
		m.LastUsedAt = timestamp(c.now())
		return c.save(lctx, m)
	}(); err != nil {
		return nil, err
	}
	c.hub.publish("computers", "computer_started", c.decorate(m))
	return m, nil
}

// destroy removes a machine and marks its record destroyed. reason is "" for an API delete, else the
// reaper's reason.
func (c *computerService) destroy(ctx context.Context, idOrName, reason string) error {
	m, p, rt, err := c.lockMachine(ctx, idOrName)
	if err != nil {
		return err
	}
	defer rt.mu.Unlock()
	// The reaper decided before it held the lock: an exec, a stop or a destroy may have come in between.
	if reason != "" && reason != "orphan" && c.reapReason(m, c.now()) != reason {
		return errReapCancelled
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lifecycleTimout)
	defer cancel()
	c.closePorts(rt)
	c.closeBrowser(rt)
	c.closeChannel(rt)
	if p != nil {
		if err := p.destroy(lctx, m); err != nil {
			return err
		}
	}
	m.State, m.Ports = stateDestroyed, map[string]PortBinding{}
	if err := c.save(lctx, m); err != nil {
		return err
	}
	c.mu.Lock()
	delete(c.rt, m.ID)
	c.mu.Unlock()
	c.hub.publish("computers", "computer_destroyed", map[string]any{"id": m.ID, "computerId": m.ID, "name": m.Name, "reason": reason})
	if reason == "" {
		c.log.Info("computer destroyed", "computer", m.ID, "name", m.Name)
	} else {
		c.log.Info("computer reaped", "computer", m.ID, "name", m.Name, "reason", reason)
		c.hub.publish("reaper", "computer_reaped", map[string]any{"computerId": m.ID, "name": m.Name, "reason": reason})
	}
	return nil
}

// lockMachine resolves idOrName, takes the machine's lifecycle lock and reads the record again under it
// (a stop, start or destroy that held the lock meanwhile changed it). On success the caller owns the
// lock and must release it with rt.mu.Unlock.
func (c *computerService) lockMachine(ctx context.Context, idOrName string) (*ComputerInfo, provider, *machineRT, error) {
	m, err := c.Get(ctx, idOrName)
	if err != nil {
		return nil, nil, nil, err
	}
	rt := c.runtime(m.ID)
	rt.mu.Lock()
	if m, err = c.Get(ctx, m.ID); err != nil {
		rt.mu.Unlock()
		return nil, nil, nil, err
	}
	return m, c.providerByName(m.Provider), rt, nil
}

// markGone records that a machine vanished behind agentd's back: its record becomes destroyed and the
// caller gets E_COMPUTER_NOT_FOUND.
func (c *computerService) markGone(ctx context.Context, m *ComputerInfo) error {
	rt := c.runtime(m.ID)
	c.closePorts(rt)
	c.closeBrowser(rt)
	c.closeChannel(rt)
	m.State, m.Ports, m.Error = stateDestroyed, map[string]PortBinding{}, "the machine disappeared"
	c.save(ctx, m)
	c.hub.publish("computers", "computer_destroyed", map[string]any{"id": m.ID, "computerId": m.ID, "name": m.Name, "reason": "gone"})
	return errorf(codeComputerNotFound, "the machine of computer %s no longer exists", m.ID).
		withHint("create a new computer")
}

// EnsureForAgent returns the running computer named after the agent, creating it from spec if needed
// (its setup judged by pol, the agent's guardrails). Concurrent runs of one agent share it.
func (c *computerService) EnsureForAgent(ctx context.Context, agent string, spec ComputerSpec, pol commandPolicy) (*ComputerInfo, error) {
	defer c.agents.lock(agent)()

	all, err := c.store.ListComputers(ctx)
	if err != nil {
		return nil, err
	}
	for _, m := range all {
		if m.Name != agent {
			continue
		}
		switch m.State {
		case stateRunning:
			p := c.providerByName(m.Provider)
			if p == nil {
				c.destroy(ctx, m.ID, "")
				continue
			}
			st, err := p.status(ctx, &m)
			switch {
			case err != nil: // the engine hiccuped: do not throw the agent's machine away
				return nil, errorf(codeComputerFailed, "cannot check computer %s: %v", m.ID, err).withHint("check the engine and retry")
			case st == "running":
				return c.decorate(&m), nil
			case st == "stopped":
				m.State = stateStopped
				c.save(ctx, &m)
				return c.start(ctx, m.ID)
			}
			c.markGone(ctx, &m)
		case stateStopped:
			return c.start(ctx, m.ID)
		default:
			c.destroy(ctx, m.ID, "")
		}
	}
	spec.Name = agent
	spec.Enabled = nil
	return c.create(ctx, spec, pol)
}

// keyedMutex serialises callers per key (one agent's computer is ensured by one caller at a time). An
// entry lives only while someone holds or waits for it, so the map does not grow with every name seen.
type keyedMutex struct {
	mu      sync.Mutex
	entries map[string]*keyedEntry
}

type keyedEntry struct {
	sync.Mutex
	refs int // holders and waiters, guarded by keyedMutex.mu
}

// lock takes key's lock and returns the function that releases it.
func (k *keyedMutex) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.entries == nil {
		k.entries = map[string]*keyedEntry{}
	}
	e := k.entries[key]
	if e == nil {
		e = &keyedEntry{}
		k.entries[key] = e
	}
	e.refs++
	k.mu.Unlock()
	e.Lock()
	return func() {
		e.Unlock()
		k.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(k.entries, key)
		}
		k.mu.Unlock()
	}
}

// ---- reconciliation ----

// reconcile runs at start: records whose machine is gone become destroyed; live machines are adopted
// (state follows the engine); containers of this owner without a record are orphans. With skip nil it
// handles the providers that hold records and returns their names (before the server answers);
// otherwise it handles the rest in the background, where it only looks for orphans.
func (c *computerService) reconcile(ctx context.Context, skip map[string]bool) map[string]bool {
	handled := map[string]bool{}
	recs, err := c.store.ListComputers(ctx)
	if err != nil {
		c.log.Warn("computers: reconcile: list records", "err", err)
		return handled
	}
	for _, p := range c.providers {
		name := p.meta().name
		hasRecords := slices.ContainsFunc(recs, func(m ComputerInfo) bool { return m.Provider == name })
		if skip == nil && !hasRecords || skip != nil && skip[name] {
			continue
		}
		handled[name] = true
		if !c.probe(ctx, p).available {
			continue
		}
		trials := c.trialIDs() // before the listing: a trial that ends meanwhile is no orphan either
		live, err := p.owned(ctx)
		if err != nil {
			c.log.Warn("computers: reconcile", "provider", name, "err", err)
			continue
		}
		known := map[string]bool{}
		for i := range recs {
			m := &recs[i]
			if m.Provider != name {
				continue
			}
			known[m.ID] = true
			if skip != nil {
				// The background pass covers providers that held no record at start, so this record was
				// made by this process while the server answered: it is the API's, not the restart's, to
				// judge (judging it here destroyed machines being created and undid concurrent stops).
				continue
			}
			running, ok := live[m.ID]
			switch {
			case !ok:
				m.State, m.Ports = stateDestroyed, map[string]PortBinding{}
				m.Error = "the machine was gone when agentd started"
			case m.State == stateCreating:
				// Creation was interrupted by the restart: the machine is not trustworthy.
				p.destroy(ctx, m)
				m.State, m.Error = stateDestroyed, "creation was interrupted by a restart"
			case running && m.State != stateError:
				m.State = stateRunning
				if n := p.killLeftovers(ctx, m); n > 0 {
					c.log.Info("computers: killed processes left by the previous server", "computer", m.ID, "groups", n)
					c.hub.publish("reaper", "computer_reconciled", map[string]any{"computerId": m.ID, "killed": n})
				}
			case !running && m.State == stateRunning:
				m.State = stateStopped
			}
			m.Ports = map[string]PortBinding{} // forwarders died with the old process
			c.save(ctx, m)
		}
		// Judge orphans against the records as they are now: a machine created after recs was read
		// (the background pass runs while the server answers) already has its record, inserted before
		// the machine was made, and must not be reaped.
		now, err := c.store.ListComputers(ctx)
		if err != nil {
			continue
		}
		// Warm pool hook: a recorded pool machine is known too (the pool adopts or destroys it itself).
		pooled, err := c.store.ListPooledComputers(ctx)
		if err != nil {
			continue
		}
		for _, m := range append(now, pooled...) {
			known[m.ID] = known[m.ID] || m.State != stateDestroyed
		}
		c.mu.Lock()
		for id := range live {
			if !known[id] && !trials[id] && !c.isTrial(id) { // a trial machine (computers_proof.go) has no record
				c.orphans[name+"/"+id] = name
			}
		}
		c.mu.Unlock()
	}
	return handled
}

// ---- HTTP ----

func (s *server) handleListComputers(w http.ResponseWriter, r *http.Request) error {
	all := false
	if v := r.URL.Query().Get("all"); v != "" {
		all = v == "true" || v == "1"
	}
	list, err := s.computers.list(r.Context(), all)
	return reply(w, http.StatusOK, map[string]any{"computers": list}, err)
}

func (s *server) handleCreateComputer(w http.ResponseWriter, r *http.Request) error {
	b, err := readBody(r)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(b)) == 0 {
		b = []byte("{}") // an empty body means all defaults
	}
	// The one computer validator: the same rules, messages and paths as an agent spec's computer block.
	sp, issues := parseComputerCreateJSON(b)
	if len(issues) > 0 {
		return specIssuesError("computer spec", issues)
	}
	applyComputerDefaults(sp)
	m, err := s.computers.create(r.Context(), *sp, commandPolicy{})
	return reply(w, http.StatusCreated, m, err)
}

func (s *server) handleGetComputer(w http.ResponseWriter, r *http.Request) error {
	m, err := s.computers.Get(r.Context(), r.PathValue("id"))
	return reply(w, http.StatusOK, m, err)
}

func (s *server) handleDeleteComputer(w http.ResponseWriter, r *http.Request) error {
	return noContent(w, s.computers.destroy(r.Context(), r.PathValue("id"), ""))
}

func (s *server) handleStopComputer(w http.ResponseWriter, r *http.Request) error {
	m, err := s.computers.stop(r.Context(), r.PathValue("id"))
	return reply(w, http.StatusOK, m, err)
}

func (s *server) handleStartComputer(w http.ResponseWriter, r *http.Request) error {
	m, err := s.computers.start(r.Context(), r.PathValue("id"))
	return reply(w, http.StatusOK, m, err)
}
