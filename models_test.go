package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// ---- helpers shared by the model tests ----

// sleepRecorder replaces the retry sleep: it records the delays and returns at once.
type sleepRecorder struct {
	mu     sync.Mutex
	delays []time.Duration
}

func (r *sleepRecorder) sleep(ctx context.Context, d time.Duration) error {
	r.mu.Lock()
	r.delays = append(r.delays, d)
	r.mu.Unlock()
	return ctx.Err()
}

func (r *sleepRecorder) get() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.delays...)
}

// newTestModels builds a model service over a bare server with the given environment and config.
func newTestModels(t testing.TB, env map[string]string, edit func(*config)) (*modelService, *sleepRecorder) {
	t.Helper()
	env = hermeticEnv(env)
	cfg := defaultConfig()
	cfg.getenv = func(k string) string { return env[k] }
	if edit != nil {
		edit(&cfg)
	}
	m, err := newModelService(modelDeps{hub: newHub(time.Now), log: testLogger(), getenv: cfg.getenv, aliases: cfg.ModelAliases})
	if err != nil {
		t.Fatal(err)
	}
	rec := &sleepRecorder{}
	m.sleep = rec.sleep
	m.jitter = func(max time.Duration) time.Duration { return max } // deterministic: the window itself
	m.probeTimeout = 500 * time.Millisecond
	t.Cleanup(m.Close)
	return m, rec
}

// newModelServer is a test server whose model providers see env; retries do not sleep and a probe gives
// up after 0.5 s.
func newModelServer(t testing.TB, env map[string]string, opts ...testOption) *testServer {
	t.Helper()
	ts := newTestServer(t, append(opts, withEnv(env))...)
	ts.s.models.sleep = (&sleepRecorder{}).sleep
	ts.s.models.probeTimeout = 500 * time.Millisecond
	return ts
}

// recorded is one request the fake upstream saw.
type recorded struct {
	Method, Path, RawQuery string
	Header                 http.Header
	Body                   []byte
	Ctx                    context.Context // ends when the client hangs up
}

// fakeUpstream is a loopback provider: it records every request and answers with reply(n, req).
type fakeUpstream struct {
	*httptest.Server
	mu    sync.Mutex
	reqs  []recorded
	reply func(w http.ResponseWriter, n int, r recorded)
}

func newFake(t testing.TB, reply func(w http.ResponseWriter, n int, r recorded)) *fakeUpstream {
	f := &fakeUpstream{reply: reply}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rec := recorded{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Header: r.Header.Clone(), Body: b, Ctx: r.Context()}
		f.mu.Lock()
		f.reqs = append(f.reqs, rec)
		n := len(f.reqs)
		f.mu.Unlock()
		f.reply(w, n, rec)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeUpstream) requests() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.reqs...)
}

// chatRequests counts requests that were chat calls (not model listings).
func (f *fakeUpstream) chatRequests() []recorded {
	var out []recorded
	for _, r := range f.requests() {
		if r.Method == http.MethodPost {
			out = append(out, r)
		}
	}
	return out
}

func readTestdata(t testing.TB, parts ...string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(append([]string{"testdata", "models"}, parts...)...))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// replay writes a testdata file with a status; .sse files as an event stream, .ndjson as NDJSON.
func replay(t testing.TB, w http.ResponseWriter, status int, parts ...string) {
	b := readTestdata(t, parts...)
	name := parts[len(parts)-1]
	switch {
	case strings.HasSuffix(name, ".sse"):
		w.Header().Set("Content-Type", "text/event-stream")
	case strings.HasSuffix(name, ".ndjson"):
		w.Header().Set("Content-Type", "application/x-ndjson")
	default:
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(status)
	w.Write(b)
}

// assertJSONEqual compares two JSON documents structurally.
func assertJSONEqual(t testing.TB, got, want []byte) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("got is not JSON: %v\n%s", err, got)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("want is not JSON: %v\n%s", err, want)
	}
	if !reflect.DeepEqual(g, w) {
		gm, ok1 := g.(map[string]any)
		wm, ok2 := w.(map[string]any)
		if ok1 && ok2 {
			var diffs []string
			for k := range gm {
				if !reflect.DeepEqual(gm[k], wm[k]) {
					gk, _ := json.Marshal(gm[k])
					wk, _ := json.Marshal(wm[k])
					diffs = append(diffs, fmt.Sprintf("%s:\n  got:  %s\n  want: %s", k, gk, wk))
				}
			}
			for k := range wm {
				if _, ok := gm[k]; !ok {
					wk, _ := json.Marshal(wm[k])
					diffs = append(diffs, fmt.Sprintf("%s: missing, want %s", k, wk))
				}
			}
			t.Fatalf("request body differs:\n%s", strings.Join(diffs, "\n"))
		}
		t.Fatalf("request body differs\n got: %s\nwant: %s", got, want)
	}
}

// collect gathers stream events.
type collector struct {
	mu  sync.Mutex
	evs []StreamEvent
}

func (c *collector) emit(ev StreamEvent) { c.mu.Lock(); c.evs = append(c.evs, ev); c.mu.Unlock() }

func (c *collector) types() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, len(c.evs))
	for i, e := range c.evs {
		out[i] = e.Type
	}
	return out
}

func (c *collector) ofType(typ string) []StreamEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []StreamEvent
	for _, e := range c.evs {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

func userMsg(text string) ModelMessage {
	return ModelMessage{Role: "user", Content: []ContentPart{{Type: "text", Text: text}}}
}

func apiCode(err error) string {
	if err == nil {
		return ""
	}
	return asAPIError(err).Code
}

// ---- ModelMessage JSON ----

func TestModelMessageJSONAcceptsStringOrParts(t *testing.T) {
	var m ModelMessage
	if err := json.Unmarshal([]byte(`{"role":"user","content":"hi"}`), &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Content) != 1 || m.Content[0].Type != "text" || m.Content[0].Text != "hi" {
		t.Fatalf("string content: %+v", m)
	}
	b, _ := json.Marshal(m)
	if string(b) != `{"role":"user","content":"hi"}` {
		t.Fatalf("one text part must marshal as a string, got %s", b)
	}
	in := `{"role":"assistant","content":[{"type":"text","text":"ok"},{"type":"tool_call","id":"c1","name":"ls","args":{"path":"."}}]}`
	if err := json.Unmarshal([]byte(in), &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Content) != 2 || m.Content[1].Name != "ls" || m.Content[1].Args["path"] != "." {
		t.Fatalf("parts: %+v", m)
	}
	b, _ = json.Marshal(m)
	var back ModelMessage
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, m) {
		t.Fatalf("round trip: %s → %+v (%v)", b, back, err)
	}
	for _, bad := range []string{`{"role":"user","content":42}`, `{"role":"user","content":"x","extra":1}`, `{"role":"user","content":[{"type":"text","bogus":1}]}`} {
		if err := json.Unmarshal([]byte(bad), &m); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}
