// computers_reaper.go — the periodic sweep that never lets a machine leak.
//
// Entry points: reaperLoop (owned by computerService; Close cancels and waits) and sweep(ctx), which a
// test may call directly with an injected clock (computerService.now); kickPods, by which kubernetes'
// pod watch (computers_kubernetes_watch.go) asks for the pod sweep (kubeProvider.sweepPods) now.
//
// Rules (DESIGN §4): every reaperIntervalSec the stored records of every provider are checked: a running
// machine idle for idleTimeoutSec (no exec; a running exec counts as activity; 0 = never) or older than
// maxLifetimeSec (regardless of activity; 0 = never) is destroyed with a `reaper` event
// {computerId, name, reason: idle|lifetime|orphan}. Containers of this owner without a record (found at
// start, or whose removal failed: destroyOrOrphan) are removed on the next sweep, and once more by Close
// (reapOrphans), so a server that is not started again leaves none running. The pod sweep runs in the
// same goroutine, whenever the pod watch saw a machine's pod go or (re)started: it is the watch's only
// consumer.
package main

import (
	"context"
	"errors"
	"time"
)

func (c *computerService) reaperLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.reapInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
			c.sweep(c.ctx)
		case <-c.podsGone:
			if k, ok := c.providerByName("kubernetes").(*kubeProvider); ok {
				k.sweepPods(c.ctx)
			}
		}
	}
}

// kickPods asks the reaper for a pod sweep now; it never blocks (a sweep already asked for covers this).
func (c *computerService) kickPods() {
	select {
	case c.podsGone <- struct{}{}:
	default:
	}
}

// sweep makes one pass and returns what it reaped (computer id → reason).
func (c *computerService) sweep(ctx context.Context) map[string]string {
	reaped := map[string]string{}
	recs, err := c.store.ListComputers(ctx)
	if err != nil {
		c.log.Warn("reaper: list records", "err", err)
		return reaped
	}
	now := c.now()
	for i := range recs {
		m := &recs[i]
		c.flushLastUsed(ctx, m.ID)
		reason := c.reapReason(m, now)
		if reason == "" {
			continue
		}
		if err := c.destroy(ctx, m.ID, reason); err != nil {
			if errors.Is(err, errReapCancelled) {
				continue
			}
			c.log.Warn("reaper: destroy", "computer", m.ID, "reason", reason, "err", err)
			continue
		}
		reaped[m.ID] = reason
	}
	c.reapOrphans(ctx, reaped)
	return reaped
}

// reapOrphans removes the machines of this owner that no record keeps (found at reconcile, or whose
// removal failed: destroyOrOrphan), adding each to reaped; one that fails again stays for the next try.
func (c *computerService) reapOrphans(ctx context.Context, reaped map[string]string) {
	c.mu.Lock()
	orphans := c.orphans
	c.orphans = map[string]string{}
	c.mu.Unlock()
	for key, prov := range orphans {
		p := c.providerByName(prov)
		id := key[len(prov)+1:]
		m := &ComputerInfo{ID: id, Provider: prov, Spec: ComputerSpec{Persist: true}}
		if err := p.destroy(ctx, m); err != nil {
			c.log.Warn("reaper: orphan", "container", key, "err", err)
			c.mu.Lock()
			c.orphans[key] = prov
			c.mu.Unlock()
			continue
		}
		reaped[id] = "orphan"
		c.log.Info("computer reaped", "computer", id, "reason", "orphan")
		c.hub.publish("reaper", "computer_reaped", map[string]any{"computerId": id, "name": "", "reason": "orphan"})
	}
}

// destroyOrOrphan removes a machine that no record will keep (a failed create, a proof's trial), with a
// context of its own so that the failure that brought it here (an expired or cancelled create) cannot
// also fail the removal; what still cannot be removed is the reaper's to retry as an orphan, never left.
func (c *computerService) destroyOrOrphan(ctx context.Context, p provider, m *ComputerInfo) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lifecycleTimout)
	defer cancel()
	if err := p.destroy(dctx, m); err != nil {
		c.log.Warn("computers: a machine could not be removed; the reaper retries", "computer", m.ID, "err", err)
		c.mu.Lock()
		c.orphans[p.meta().name+"/"+m.ID] = p.meta().name
		c.mu.Unlock()
	}
}

// errReapCancelled: the machine was used, stopped or destroyed while the reaper waited for it.
var errReapCancelled = errors.New("the machine no longer qualifies for reaping")

// reapReason says why a running machine is due for reaping at now ("idle", "lifetime"), or "".
func (c *computerService) reapReason(m *ComputerInfo, now time.Time) string {
	if m.State != stateRunning {
		return ""
	}
	c.mu.Lock()
	active, lastUsed := 0, time.Time{}
	if rt := c.rt[m.ID]; rt != nil {
		active, lastUsed = rt.active, rt.lastUsed
	}
	c.mu.Unlock()
	if t, err := time.Parse(time.RFC3339Nano, m.LastUsedAt); err == nil && t.After(lastUsed) {
		lastUsed = t
	}
	created, _ := time.Parse(time.RFC3339Nano, m.CreatedAt)
	switch {
	case m.Spec.MaxLifetimeSec > 0 && now.Sub(created) >= time.Duration(m.Spec.MaxLifetimeSec)*time.Second:
		return "lifetime"
	case m.Spec.IdleTimeoutSec > 0 && active == 0 && now.Sub(lastUsed) >= time.Duration(m.Spec.IdleTimeoutSec)*time.Second:
		return "idle"
	}
	return ""
}

// flushLastUsed writes the in-memory last use of a machine to its record.
func (c *computerService) flushLastUsed(ctx context.Context, id string) {
	c.mu.Lock()
	var t time.Time
	if rt := c.rt[id]; rt != nil {
		t = rt.lastUsed
	}
	c.mu.Unlock()
	if !t.IsZero() {
		c.store.TouchComputer(ctx, id, timestamp(t))
	}
}
