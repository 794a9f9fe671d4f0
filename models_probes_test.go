package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// blackHole accepts TCP connections (the kernel completes the handshake) and never answers.
func blackHole(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return "http://" + ln.Addr().String()
}

// slowServer answers after 10 seconds, or gives up when the client leaves.
func slowServer(t testing.TB) string {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(10 * time.Second):
			w.Write([]byte(`{"data":[]}`))
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(ts.Close)
	return ts.URL
}

func TestProbesDeadProvidersDoNotStallListing(t *testing.T) {
	env := map[string]string{
		"ANTHROPIC_API_KEY": "sk-ant-x-1234567890", "ANTHROPIC_BASE_URL": blackHole(t),
		"OPENAI_API_KEY": "sk-x-1234567890", "OPENAI_BASE_URL": slowServer(t),
		"GROQ_API_KEY": "gsk_x1234567890", "GROQ_BASE_URL": blackHole(t),
	}
	ts := newModelServer(t, env)
	ts.s.models.probeTimeout = 300 * time.Millisecond
	// The listing must not wait for the slow endpoint's 10 s.
	start := time.Now()
	var out struct {
		Providers []providerView `json:"providers"`
	}
	ts.call("GET", "/v1/models", nil, 200, &out)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("GET /v1/models waited %s on a dead provider", d)
	}
	for _, p := range out.Providers {
		switch p.ID {
		case "anthropic", "openai", "groq":
			if p.Available || !strings.Contains(p.Reason, "did not answer within") {
				t.Errorf("%s: %+v", p.ID, p)
			}
		}
	}
}

// countingTransport measures agentd's own concurrency: a request counts from RoundTrip until its
// answer's body is closed (or the round trip fails).
type countingTransport struct {
	next                  http.RoundTripper
	inflight, peak, total atomic.Int32
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	n := c.inflight.Add(1)
	c.total.Add(1)
	for {
		p := c.peak.Load()
		if n <= p || c.peak.CompareAndSwap(p, n) {
			break
		}
	}
	resp, err := c.next.RoundTrip(r)
	if err != nil {
		c.inflight.Add(-1)
		return nil, err
	}
	resp.Body = &countedBody{ReadCloser: resp.Body, done: func() { c.inflight.Add(-1) }}
	return resp, nil
}

type countedBody struct {
	io.ReadCloser
	once sync.Once
	done func()
}

func (b *countedBody) Close() error { b.once.Do(b.done); return b.ReadCloser.Close() }

func TestProbesFourAtATime(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // hold the slot until the probe times out
	}))
	t.Cleanup(ts.Close)
	env := map[string]string{}
	for _, p := range providerTable {
		if p.keyed() {
			env[p.EnvKeys[0]] = "key-1234567890"
		}
		env[p.BaseEnv] = ts.URL
	}
	m, _ := newTestModels(t, env, nil)
	ct := &countingTransport{next: m.client.Transport}
	m.client = &http.Client{Transport: ct}
	m.probeTimeout = 100 * time.Millisecond
	m.statuses(context.Background()) // returns after about one timeout; the round goes on
	deadline := time.Now().Add(10 * time.Second)
	for {
		m.mu.Lock()
		running := m.inflight != nil
		m.mu.Unlock()
		if !running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("probe round never finished")
		}
		time.Sleep(10 * time.Millisecond)
	}
	st := m.statuses(context.Background())
	if ct.peak.Load() > probeParallel || ct.total.Load() != int32(len(providerTable)) {
		t.Fatalf("peak %d concurrent probes (max %d), %d probes for %d providers", ct.peak.Load(), probeParallel, ct.total.Load(), len(providerTable))
	}
	for _, p := range providerTable {
		if st[p.ID].Available {
			t.Fatalf("%s available after a timeout", p.ID)
		}
	}
}

func TestProbesFindLocalProvidersOnTheirPorts(t *testing.T) {
	lm := newFake(t, func(w http.ResponseWriter, n int, r recorded) {
		if r.Path == "/v1/models" {
			w.Write([]byte(`{"object":"list","data":[{"id":"qwen2.5-7b-instruct","object":"model","owned_by":"organization_owner"}]}`))
			return
		}
		w.WriteHeader(404)
	})
	ol := newFake(t, func(w http.ResponseWriter, n int, r recorded) {
		switch r.Path {
		case "/api/tags":
			replay(t, w, 200, "ollama", "tags.json")
		case "/api/show":
			replay(t, w, 200, "ollama", "show_llama3.2.json")
		default:
			w.WriteHeader(404)
		}
	})
	host := func(u string) string { return strings.TrimPrefix(u, "http://") }
	m, _ := newTestModels(t, nil, nil)
	env := map[string]string{"LMSTUDIO_HOST": host(lm.URL), "OLLAMA_HOST": host(ol.URL)}
	m.getenv = func(k string) string { return env[k] }
	st := m.statuses(context.Background())
	if !st["lmstudio"].Available || strings.Join(st["lmstudio"].Models, ",") != "qwen2.5-7b-instruct" {
		t.Fatalf("lmstudio: %+v", st["lmstudio"])
	}
	if !st["ollama"].Available || strings.Join(st["ollama"].Models, ",") != "llama3.2:latest,qwen3:8b" {
		t.Fatalf("ollama: %+v", st["ollama"])
	}
	// The built-in alias finds the pulled model by family.
	if ids, err := m.resolve(context.Background(), "llama"); err != nil || ids[0] != "ollama/llama3.2:latest" {
		t.Fatalf("llama alias: %v %v", ids, err)
	}
	providers, model, reason, warnings := m.doctor(context.Background())
	if model != "lmstudio/qwen2.5-7b-instruct" && model != "ollama/llama3.2:latest" || reason == "" || len(warnings) != 0 {
		t.Fatalf("doctor selection: %q %q %v", model, reason, warnings)
	}
	for _, p := range providers {
		switch p.ID {
		case "ollama":
			if p.EnvKey != "OLLAMA_HOST" || len(p.Models) != 2 || !p.Available {
				t.Fatalf("doctor ollama: %+v", p)
			}
		case "anthropic":
			if p.EnvKey != "ANTHROPIC_API_KEY" || len(p.Models) != 0 || p.Available || p.Hint == "" {
				t.Fatalf("doctor anthropic (no key: not asked for models): %+v", p)
			}
		}
	}
}

func TestProbesCachedAndFlipPublishesEvent(t *testing.T) {
	var up atomic.Bool
	var calls atomic.Int32
	ol := newFake(t, func(w http.ResponseWriter, n int, r recorded) {
		if r.Path == "/api/tags" {
			calls.Add(1)
			if !up.Load() {
				w.WriteHeader(500)
				return
			}
			replay(t, w, 200, "ollama", "tags.json")
			return
		}
		w.WriteHeader(404)
	})
	m, _ := newTestModels(t, map[string]string{"OLLAMA_BASE_URL": ol.URL}, nil)
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

	if m.statuses(context.Background())["ollama"].Available {
		t.Fatal("ollama should start unavailable")
	}
	up.Store(true)
	m.statuses(context.Background())
	if calls.Load() != 1 {
		t.Fatalf("cached result not reused: %d probes", calls.Load())
	}
	advance(m.probeTTL + time.Second)
	if m.statuses(context.Background())["ollama"].Available {
		t.Fatal("past the TTL the stale result is served while the refresh runs")
	}
	deadline := time.Now().Add(10 * time.Second)
	for !m.statuses(context.Background())["ollama"].Available {
		if time.Now().After(deadline) {
			t.Fatal("the background refresh never landed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if calls.Load() != 2 {
		t.Fatalf("re-probe after the TTL: %d probes, want 2", calls.Load())
	}
	advance(probeStaleMax + time.Second)
	up.Store(false)
	if m.statuses(context.Background())["ollama"].Available {
		t.Fatal("results older than probeStaleMax must not be served")
	}
	h := m.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	var flips []*event
	for _, ev := range h.ring {
		if ev.Topic == "providers" && ev.Type == "provider_changed" {
			flips = append(flips, ev)
		}
	}
	if len(flips) != 2 || flips[0].Payload.(map[string]any)["name"] != "ollama" || flips[0].Payload.(map[string]any)["available"] != true ||
		flips[1].Payload.(map[string]any)["available"] != false {
		t.Fatalf("flip events: %+v", flips)
	}
}
