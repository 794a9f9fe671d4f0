// computers_kubernetes_watch.go — the kubernetes provider notices a machine's pod deleted (or ended)
// behind agentd's back without waiting for the machine's next use.
//
// Entry points: kubeProvider.ensureWatch (create, start, owned: the first time this server has anything in
// the cluster), kubeProvider.stopWatch (the provider's close, from the service's Close), and
// kubeProvider.sweepPods, which the reaper's goroutine runs (computers_reaper.go).
//
// How: one `kubectl get pods -l agentd.owner=<owner> -w --output-watch-events -o json` per server, read as
// a stream of events, whose only consumer is the reaper's pod sweep: each start of the watch, and each
// pod DELETED or ended by itself (phase Failed or Succeeded without a deletion: evicted, its node lost),
// wakes it (kickPods). The sweep lists the owner's pods once and judges every running or pooled
// kubernetes machine whose pod does not run there: its record is read again under its lifecycle lock
// and its pod asked for afresh (status), which marks a running machine stopped with a `computer_stopped`
// event (reason pod_deleted / pod_ended); a pool machine's pod is evicted from the pool. A stop, start or
// destroy in flight holds the lock, so its own deletions are never taken for foreign ones. The watch ends
// when the API server closes it (its request timeout, a restart): it is started again after a backoff,
// and the sweep at its start catches a deletion while no watch ran.
//
// Trade-off against a list in every timed sweep: the watch notices within about a second and costs the
// API server one watch and agentd one long-lived kubectl process (~100 MB with the test cluster's
// all-in-one binary as kubectl, BENCHMARKS.md); a list per sweep would notice only at the next sweep and
// parse every pod's JSON each time. The watch starts lazily: a server that never uses the cluster runs
// no kubectl at all.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"
)

const (
	kubeWatchBackoffMin = time.Second
	kubeWatchBackoffMax = 30 * time.Second
	kubeEndedReason     = "pod_ended"
)

// kubeWatcher is the watch goroutine's state; the kubeProvider owns it (stopWatch cancels and waits).
type kubeWatcher struct {
	mu      sync.Mutex
	started bool
	closed  bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// ensureWatch starts the watch once; after stopWatch it does nothing.
func (k *kubeProvider) ensureWatch() {
	w := &k.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started || w.closed {
		return
	}
	ctx, cancel := context.WithCancel(k.c.ctx)
	w.started, w.cancel, w.done = true, cancel, make(chan struct{})
	go func() {
		defer close(w.done)
		k.watchLoop(ctx)
	}()
}

// watching says the watch runs: this server has (had) something in the cluster.
func (k *kubeProvider) watching() bool {
	k.watch.mu.Lock()
	defer k.watch.mu.Unlock()
	return k.watch.started && !k.watch.closed
}

func (k *kubeProvider) stopWatch() {
	w := &k.watch
	w.mu.Lock()
	w.closed = true
	cancel, done := w.cancel, w.done
	w.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

func (k *kubeProvider) watchLoop(ctx context.Context) {
	backoff := kubeWatchBackoffMin
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for ctx.Err() == nil {
		t0 := time.Now()
		err := k.watchOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(t0) > time.Minute { // a watch that ran a while ended normally: start again soon
			backoff = kubeWatchBackoffMin
		}
		if err != nil {
			k.c.log.Warn("computers: kubernetes pod watch ended", "err", err, "retryIn", backoff)
		}
		timer.Reset(backoff)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		backoff = min(2*backoff, kubeWatchBackoffMax)
	}
}

// kubeWatchEvent is one line of `kubectl get -w --output-watch-events -o json`.
type kubeWatchEvent struct {
	Type   string  `json:"type"`
	Object kubePod `json:"object"`
}

// watchOnce runs one watch until kubectl exits (or ctx ends), waking the pod sweep at its start and at
// each machine's pod gone.
func (k *kubeProvider) watchOnce(ctx context.Context) error {
	cmd := k.cli(ctx, "get", "pods", "-l", "agentd.owner="+k.c.owner, "-w", "--output-watch-events", "-o", "json")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &limitedBuffer{b: &stderr, max: 2048}
	if err := cmd.Start(); err != nil {
		return err
	}
	k.c.kickPods() // after the watch started: what was deleted while none ran
	dec := json.NewDecoder(bufio.NewReaderSize(stdout, 64<<10))
	for {
		var ev kubeWatchEvent
		if err := dec.Decode(&ev); err != nil {
			break
		}
		if ev.Object.Metadata.Labels["agentd.id"] != "" && kubeGone(ev) {
			k.c.kickPods()
		}
	}
	if err := cmd.Wait(); err != nil && ctx.Err() == nil {
		return &engineError{args: cmd.Args[1:], err: err, stderr: strings.TrimSpace(stderr.String())}
	}
	return nil
}

// kubeGone says an event shows a machine's pod gone: deleted, or ended by itself (a pod agentd deletes
// passes through Failed with its deletion timestamp set, which is not an end of its own).
func kubeGone(ev kubeWatchEvent) bool {
	p := ev.Object
	ended := (p.Status.Phase == "Failed" || p.Status.Phase == "Succeeded") && p.Metadata.DeletionTimestamp == ""
	return ev.Type == "DELETED" || ended
}

// sweepPods judges every running or pooled kubernetes machine that the owner's list of pods does not show
// running. A running machine's record is read again under its lifecycle lock, so an agentd stop, start
// or destroy in flight is waited for and then seen as such.
func (k *kubeProvider) sweepPods(ctx context.Context) {
	out, err := k.call(ctx, nil, "get", "pods", "-l", "agentd.owner="+k.c.owner, "-o", "json")
	var list struct{ Items []kubePod }
	if err != nil || json.Unmarshal([]byte(out), &list) != nil {
		return // the next watch start tries again; a machine's next use still notices
	}
	live := map[string]bool{}
	for _, p := range list.Items {
		live[p.Metadata.Labels["agentd.id"]] = p.Status.Phase == "Running" && p.Metadata.DeletionTimestamp == ""
	}
	recs, err := k.c.store.ListComputers(ctx)
	if err != nil {
		return
	}
	pooled, _ := k.c.store.ListPooledComputers(ctx)
	for _, m := range append(recs, pooled...) {
		if m.Provider != "kubernetes" || live[m.ID] {
			continue
		}
		switch m.State {
		case statePooled:
			if p, err := k.getPod(ctx, &m); err == nil && (p == nil || p.Status.Phase != "Running") {
				k.c.poolEvict(ctx, m.ID, "its pod was deleted outside agentd")
			}
		case stateRunning: // status marks it stopped, with its event, when the pod is gone or ended
			rt := k.c.runtime(m.ID)
			rt.mu.Lock()
			if cur, err := k.c.store.GetComputer(ctx, m.ID); err == nil && cur.State == stateRunning {
				k.status(ctx, &cur)
			}
			rt.mu.Unlock()
		}
	}
}
