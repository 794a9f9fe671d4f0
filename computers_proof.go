// computers_proof.go — the proof behind "available" (issue 24): a computer provider is available only
// when a real machine was started on it here and ran a command; anything else is shown with its reason
// and its fix. Before, the doctor and `auto` trusted a probe (the engine answers, bwrap runs /bin/true),
// and a sandbox whose every create failed (the README's cgo build as root) was reported available and
// picked.
//
// Entry points: computerService.proofOf (the cached result: the doctor and selection read it, never
// waiting), awaitProof (`auto` waits for a candidate's first trial, bounded by the request), requestProof
// and requestProofs (ask for a trial in the background), proveLoop (the owned goroutine that runs them).
//
// Rules: a trial is what a user's first machine does: the provider's probe, then its create with the
// defaults (base flavor, network egress, no mounts), then `echo` through the same exec path as a user's
// exec, then destroy. One goroutine, owned by the computer service (Close cancels and waits), runs the
// trials one at a time: each is a machine, and several at once on a small host would be their own load.
// A result is kept: a success for proofTTL, a failure for proofRetry; a read after that asks for a new
// trial and keeps answering with the old result until it ends (so nothing on a request path waits but
// `auto`'s first selection of a provider never tried). `serve` asks for every provider at start;
// otherwise the first doctor or selection does. Trial machines have no record: their ids are in trials,
// which the reconciler counts as known, before its listing and after (one left by a crash is an orphan
// at the next start, and reaped).
package main

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"
)

const (
	proofTTL     = 10 * time.Minute // how long a successful trial stands
	proofRetry   = time.Minute      // how long a failed one stands before the next read asks again
	proofTimeout = 5 * time.Minute  // one trial, all of it (a first image pull, a pod being scheduled)
	proofWord    = "agentd-trial-ok"
)

// proofResult is a provider's last trial.
type proofResult struct {
	ok           bool
	version      string // the provider's version, from its probe
	reason, hint string // why it is not available, and the fix
	at           time.Time
	took         time.Duration
}

// proofs is the computer service's trial state.
type proofs struct {
	mu      sync.Mutex
	results map[string]proofResult
	pending map[string]chan struct{} // a trial asked for or running, by provider; closed when it ends
	queue   chan string
	trials  map[string]bool // ids of the trial machines that exist now
}

func newProofs(providers int) proofs {
	return proofs{results: map[string]proofResult{}, pending: map[string]chan struct{}{},
		queue: make(chan string, providers), trials: map[string]bool{}}
}

// stale: no result, or one past its time.
func (r proofResult) stale(now time.Time) bool {
	ttl := proofTTL
	if !r.ok {
		ttl = proofRetry
	}
	return r.at.IsZero() || now.Sub(r.at) >= ttl || now.Before(r.at)
}

// proofOf is the provider's last trial (zero: none ended yet) and whether one is pending; a stale result
// asks for a new trial in the background and is answered meanwhile.
func (c *computerService) proofOf(p provider) (proofResult, bool) {
	name := p.meta().name
	c.proof.mu.Lock()
	r := c.proof.results[name]
	c.proof.mu.Unlock()
	if r.stale(c.now()) {
		c.requestProof(name)
	}
	c.proof.mu.Lock()
	_, pending := c.proof.pending[name]
	c.proof.mu.Unlock()
	return r, pending
}

// requestProof asks for a trial of the named provider unless one is pending; it returns its end.
func (c *computerService) requestProof(name string) <-chan struct{} {
	c.proof.mu.Lock()
	defer c.proof.mu.Unlock()
	if done, ok := c.proof.pending[name]; ok {
		return done
	}
	done := make(chan struct{})
	c.proof.pending[name] = done
	c.proof.queue <- name // never blocks: one slot per provider, and a provider is pending at most once
	return done
}

// requestProofs asks for a trial of every provider whose result is missing or stale.
func (c *computerService) requestProofs() {
	for _, p := range c.providers {
		c.proofOf(p)
	}
}

// awaitProof is proofOf that waits for the provider's first trial (never for a refresh of a result it
// has), until ctx ends.
func (c *computerService) awaitProof(ctx context.Context, p provider) proofResult {
	r, _ := c.proofOf(p)
	if !r.at.IsZero() {
		return r
	}
	select {
	case <-c.requestProof(p.meta().name):
	case <-ctx.Done():
	case <-c.ctx.Done():
	}
	r, _ = c.proofOf(p)
	if r.at.IsZero() {
		return proofResult{reason: p.meta().name + " is being checked: a trial machine is starting", hint: "retry in a moment; GET /v1/doctor shows the result"}
	}
	return r
}

// proveLoop runs the trials asked for, one at a time, until the service closes.
func (c *computerService) proveLoop() {
	defer c.wg.Done()
	for {
		var name string
		select {
		case <-c.ctx.Done():
			return
		case name = <-c.proof.queue:
		}
		p := c.providerByName(name)
		t0 := time.Now()
		r := c.trial(c.ctx, p)
		if c.ctx.Err() != nil {
			return // cancelled mid-trial: no result (pending stays: nobody reads it any more)
		}
		r.at, r.took = c.now(), time.Since(t0)
		c.proof.mu.Lock()
		old := c.proof.results[name]
		c.proof.results[name] = r
		done := c.proof.pending[name]
		delete(c.proof.pending, name)
		c.proof.mu.Unlock()
		close(done)
		if r.ok {
			c.log.Info("computers: provider proven", "provider", name, "ms", r.took.Milliseconds())
		} else {
			c.log.Warn("computers: provider unavailable", "provider", name, "reason", r.reason)
		}
		if !old.at.IsZero() && old.ok != r.ok {
			c.hub.publish("providers", "provider_changed", map[string]any{
				"kind": "computer", "name": name, "available": r.ok, "reason": r.reason})
		}
	}
}

// trial starts a machine on p with the defaults, runs a command in it and destroys it.
func (c *computerService) trial(ctx context.Context, p provider) proofResult {
	pr := c.probe(ctx, p)
	if !pr.available {
		return proofResult{version: pr.version, reason: pr.reason, hint: pr.hint}
	}
	failed := func(what string, err error) proofResult {
		ae := asAPIError(err)
		hint := ae.Hint
		if hint == "" || strings.Contains(hint, "GET /v1/doctor") {
			hint = "fix what the reason names; a new trial runs within " + proofRetry.String() + " of the next look (GET /v1/doctor)"
		}
		return proofResult{version: pr.version, reason: fmt.Sprintf("%s answers, but a trial machine %s: %s", p.meta().name, what, ae.Message), hint: hint}
	}
	sp := ComputerSpec{Name: "agentd-trial"} // a user's first machine: every default
	if p.meta().isolationKind == "machine" {
		sp.Network.Mode = "full" // ssh: the one mode it can honour, which its users must ask for (computers_ssh.go)
	}
	applyComputerDefaults(&sp)
	if namedOnly(p) {
		sp.Network.Mode = "full" // what every machine there must ask for (fly): the rest is refused, never widened
	}
	if err := p.supports(sp); err != nil {
		return failed("is refused", err)
	}
	now := c.now()
	m := &ComputerInfo{ID: newID("cmp"), Name: sp.Name, Provider: p.meta().name, State: stateCreating, Workdir: sp.Workdir,
		CreatedAt: timestamp(now), LastUsedAt: timestamp(now), Spec: sp, Ports: map[string]PortBinding{}}
	m.Image = c.machineImage(p, sp)
	c.proof.mu.Lock()
	c.proof.trials[m.ID] = true
	c.proof.mu.Unlock()
	defer func() {
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), lifecycleTimout)
		defer dcancel()
		c.mu.Lock()
		rt := c.rt[m.ID]
		delete(c.rt, m.ID)
		c.mu.Unlock()
		if rt != nil {
			c.closePorts(rt)
			c.closeChannel(rt)
		}
		c.destroyOrOrphan(dctx, p, m)
		c.proof.mu.Lock()
		delete(c.proof.trials, m.ID)
		c.proof.mu.Unlock()
	}()
	// Not cut short by Close, like the pool's: an engine's `run` killed half-way leaves a container the
	// removal can miss (docker's daemon finishes a create its client no longer waits for; podman dies
	// holding the container's lock). Close waits for the run instead.
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), proofTimeout)
	defer ccancel()
	if err := p.create(cctx, m); err != nil {
		return failed("could not start", err)
	}
	m.State = stateRunning
	// The echo is not cut short by Close either: an engine's exec killed half-way can hold the machine
	// (podman's lock) while the removal right after it runs, and the machine is left.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer rcancel()
	res, err := c.run(rctx, p, m, &procSpec{argv: []string{"/bin/sh", "-c", "echo " + proofWord}}, time.Minute)
	switch {
	case ctx.Err() != nil:
		return failed("was interrupted", errorf(codeComputerFailed, "the server is closing"))
	case err != nil:
		return failed("started but could not run a command", err)
	case res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != proofWord:
		return failed("started but a command in it failed", fmt.Errorf("`echo %s` exited %d with %q %q", proofWord, res.ExitCode, lastLines(res.Stdout, 3), lastLines(res.Stderr, 3)))
	}
	return proofResult{ok: true, version: pr.version}
}

// trialIDs are the trial machines of this server now (a copy).
func (c *computerService) trialIDs() map[string]bool {
	c.proof.mu.Lock()
	defer c.proof.mu.Unlock()
	return maps.Clone(c.proof.trials)
}

// isTrial: id is a trial machine of this server (the reconciler leaves it alone).
func (c *computerService) isTrial(id string) bool {
	c.proof.mu.Lock()
	defer c.proof.mu.Unlock()
	return c.proof.trials[id]
}
