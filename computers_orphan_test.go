// computers_orphan_test.go — a machine that no record keeps and whose removal failed is the reaper's to
// retry (destroyOrOrphan), never left behind: found by CI under load, where a warm-pool test leaked a
// podman container.
package main

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
)

// stubbornProvider is a real provider whose create fails after making its machine and whose destroy
// fails the first `fails` times: what a loaded engine can answer.
type stubbornProvider struct {
	provider
	mu    sync.Mutex
	fails int
}

func (s *stubbornProvider) create(ctx context.Context, m *ComputerInfo) error {
	if err := s.provider.create(ctx, m); err != nil {
		return err
	}
	return errorf(codeComputerFailed, "the engine gave up after making the machine")
}

func (s *stubbornProvider) destroy(ctx context.Context, m *ComputerInfo) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fails > 0 {
		s.fails--
		return errors.New("rm: container state improper")
	}
	return s.provider.destroy(ctx, m)
}

// serverWithStubbornLocal is a server long up (its start's scan, which would also find the machine, and
// the local provider's proof are over) whose local provider is a stubbornProvider failing one destroy.
func serverWithStubbornLocal(t *testing.T) (*testServer, *stubbornProvider) {
	ts := newTestServer(t, withHostEnv, func(c *testSetup) { c.ComputerProvider = "local" })
	c := ts.s.computers
	<-c.scanned
	eventually(t, "the local provider's proof (its trial machine made and removed)", func() bool {
		r, _ := c.proofOf(c.providerByName("local"))
		return r.ok
	})
	i := slices.IndexFunc(c.providers, func(p provider) bool { return p.meta().name == "local" })
	stub := &stubbornProvider{provider: c.providers[i], fails: 1}
	c.providers[i] = stub
	return ts, stub
}

func TestFailedCreateLeavesNoMachine(t *testing.T) {
	ts, stub := serverWithStubbornLocal(t)
	c := ts.s.computers
	ts.wantError("POST", "/v1/computers", map[string]any{"name": "doomed"}, 500, codeComputerFailed)
	var orphans []string
	c.mu.Lock()
	for k := range c.orphans {
		orphans = append(orphans, k)
	}
	c.mu.Unlock()
	if len(orphans) != 1 {
		t.Fatalf("the machine whose removal failed is not the reaper's: orphans %v", orphans)
	}
	orphan := orphans[0]
	id, ok := strings.CutPrefix(orphan, "local/")
	if !ok {
		t.Fatalf("the machine whose removal failed is not the reaper's: orphans %v", orphan)
	}
	if st, _ := stub.provider.status(context.Background(), &ComputerInfo{ID: id}); st == "missing" {
		t.Fatalf("the stub's first destroy was meant to fail (the machine is %s)", st)
	}
	if got := c.sweep(context.Background()); got[id] != "orphan" {
		t.Fatalf("the reaper took %v, want %s as an orphan", got, id)
	}
	if st, _ := stub.provider.status(context.Background(), &ComputerInfo{ID: id}); st != "missing" {
		t.Fatalf("after the reaper the machine is %s", st)
	}
}

// gatedProvider is a real provider whose create waits for the test's gate, telling the test its context.
type gatedProvider struct {
	provider
	got  chan *ComputerInfo
	ctxs chan context.Context
	gate chan struct{}
}

func (g *gatedProvider) create(ctx context.Context, m *ComputerInfo) error {
	g.got <- m
	g.ctxs <- ctx
	<-g.gate
	return g.provider.create(ctx, m)
}

// TestTrialCreateOutlivesClose: a server closing while its proof's trial machine is being made does not
// kill the create half-way (docker's daemon then finishes a container nobody removes; CI saw podman's
// left running); the create ends, and the machine is removed.
func TestTrialCreateOutlivesClose(t *testing.T) {
	ts := newTestServer(t, withHostEnv, func(c *testSetup) { c.ComputerProvider = "local" })
	c := ts.s.computers
	g := &gatedProvider{provider: c.providerByName("local"), got: make(chan *ComputerInfo, 1),
		ctxs: make(chan context.Context, 1), gate: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan proofResult, 1)
	go func() { res <- c.trial(ctx, g) }()
	m, cctx := <-g.got, <-g.ctxs
	cancel() // what Close does to the trial's context
	if cctx.Err() != nil {
		close(g.gate)
		<-res
		t.Fatal("the trial's create was cancelled with the server: an engine's run killed half-way")
	}
	close(g.gate)
	if r := <-res; r.ok {
		t.Fatalf("a trial whose server closed was proven: %+v", r)
	}
	if st, _ := g.provider.status(context.Background(), m); st != "missing" {
		t.Fatalf("the trial machine is %s after the trial", st)
	}
}

// TestCloseRemovesOrphans: a machine whose removal failed is removed at the server's Close when the
// reaper has not retried it yet (CI saw a podman machine of a closed test server left running).
func TestCloseRemovesOrphans(t *testing.T) {
	ts, stub := serverWithStubbornLocal(t)
	c := ts.s.computers
	ts.wantError("POST", "/v1/computers", map[string]any{"name": "doomed"}, 500, codeComputerFailed)
	c.mu.Lock()
	var id string
	for k := range c.orphans {
		id, _ = strings.CutPrefix(k, "local/")
	}
	c.mu.Unlock()
	if id == "" {
		t.Fatal("the machine whose removal failed is not an orphan")
	}
	ts.close()
	if st, _ := stub.provider.status(context.Background(), &ComputerInfo{ID: id}); st != "missing" {
		t.Fatalf("after Close the orphan is %s", st)
	}
}
