package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is an injected clock for TTL tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestStatusOfEveryCode(t *testing.T) {
	want := map[string]int{
		"E_PROVIDER_UNAVAILABLE": 503, "E_COMPUTER_NOT_FOUND": 404, "E_COMPUTER_FAILED": 500,
		"E_EXEC_FAILED": 500, "E_EXEC_TIMEOUT": 504, "E_EXEC_DENIED": 403, "E_FS_DENIED": 403,
		"E_QUOTA": 429, "E_MODEL_UNAVAILABLE": 503, "E_MODEL_ERROR": 500, "E_NO_CREDENTIALS": 401,
		"E_SPEC_INVALID": 422, "E_IMPORT_FAILED": 500, "E_TOOL_ERROR": 500, "E_BUDGET_EXCEEDED": 429,
		"E_STEP_LIMIT": 500, "E_ABORTED": 500, "E_NOT_IMPLEMENTED": 501, "E_CONFIG": 500,
		"E_INTERNAL": 500, "E_AGENT_NOT_FOUND": 404, "E_RUN_NOT_FOUND": 404, "E_APPROVAL_NOT_FOUND": 404,
		"E_TRANSCRIPT_NOT_FOUND": 404, "E_ROUTE_NOT_FOUND": 404,
	}
	if len(statusOf) != 25 || len(want) != 25 {
		t.Fatalf("%d codes declared, the contract has 25", len(statusOf))
	}
	for code, st := range want {
		if got, ok := statusOf[code]; !ok || got != st {
			t.Errorf("statusOf[%s] = %d (declared %v), want %d", code, got, ok, st)
		}
		// Through the real writer: the envelope with that status.
		rec := httptest.NewRecorder()
		writeError(rec, errorf(code, "m").withHint("h"))
		if rec.Code != st || !strings.Contains(rec.Body.String(), `"code":"`+code+`"`) || !strings.Contains(rec.Body.String(), `"hint":"h"`) {
			t.Errorf("writeError(%s): %d %s", code, rec.Code, rec.Body)
		}
	}
}

func TestVersionHeaderAndRouting(t *testing.T) {
	ts := newTestServer(t)
	cases := []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "/health", 200, ""},
		{"GET", "/v1/nope", 404, codeRouteNotFound},
		{"GET", "/v1", 404, codeRouteNotFound},
		{"DELETE", "/health", 404, codeRouteNotFound},
		{"POST", "/health", 404, codeRouteNotFound},
		{"PATCH", "/v1/agents", 404, codeRouteNotFound},
		{"DELETE", "/v1/agents", 404, codeRouteNotFound},
		{"POST", "/v1/agents/x", 404, codeRouteNotFound},
		{"GET", "/v1/agents/validate/more", 404, codeRouteNotFound},
		{"PUT", "/v1/doctor", 404, codeRouteNotFound},
		{"POST", "/not-v1", 404, codeRouteNotFound},
		{"GET", "/v1/agents/missing", 404, codeAgentNotFound},
		{"GET", "/v1/agents", 200, ""},
		{"POST", "/v1/agents/validate", 422, codeSpecInvalid},
		{"GET", "/v1/computers/x/terminal/extra", 404, codeRouteNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			res := ts.do(tc.method, tc.path, nil)
			if res.status != tc.status {
				t.Fatalf("status %d, want %d: %s", res.status, tc.status, res.body)
			}
			if res.header.Get("X-Agent-Version") != version {
				t.Fatalf("X-Agent-Version = %q", res.header.Get("X-Agent-Version"))
			}
			if res.status == 405 || res.header.Get("Allow") != "" {
				t.Fatalf("a 405-style answer leaked")
			}
			if tc.code != "" {
				if got := res.errCode(t); got != tc.code {
					t.Fatalf("code %s, want %s", got, tc.code)
				}
			}
		})
	}
	res := ts.do("GET", "/health", nil)
	m := res.json(t)
	if m["ok"] != true || m["version"] != version {
		t.Fatalf("health %s", res.body)
	}
	if _, ok := m["uptimeSec"].(float64); !ok {
		t.Fatalf("health lacks uptimeSec: %s", res.body)
	}
}

func TestBodyCap(t *testing.T) {
	ts := newTestServer(t)
	body := make([]byte, 33<<20)
	copy(body, `{"yaml":"`)
	for i := 9; i < len(body)-2; i++ {
		body[i] = 'a'
	}
	copy(body[len(body)-2:], `"}`)
	res := ts.do("POST", "/v1/agents/validate", body)
	if res.status != 422 || res.errCode(t) != codeSpecInvalid || !strings.Contains(res.errMessage(t), "32 MB") {
		t.Fatalf("33 MB body: %d %s", res.status, res.body)
	}
	if res.header.Get("X-Agent-Version") == "" {
		t.Fatal("no version header on the cap error")
	}
	// Without a declared length (chunked), the cap still holds while reading.
	res = ts.do("POST", "/v1/agents/validate", io.MultiReader(bytes.NewReader(body)))
	if res.status != 422 || !strings.Contains(res.errMessage(t), "32 MB") {
		t.Fatalf("33 MB chunked body: %d %s", res.status, res.body)
	}
	// Just under the cap is read whole (and fails only as a spec).
	under := bytes.Repeat([]byte(" "), 32<<20-64)
	copy(under, `{"yaml":"name: a"}`)
	if res := ts.do("POST", "/v1/agents/validate", under); res.status != 200 || res.json(t)["ok"] != true {
		t.Fatalf("under the cap: %d %s", res.status, res.body)
	}
	if res := ts.do("GET", "/health", nil); res.status != 200 {
		t.Fatal("server stopped serving")
	}
}

func TestStrictJSON(t *testing.T) {
	ts := newTestServer(t)
	random := make([]byte, 256)
	rand.Read(random)
	cases := []struct {
		name, body, msg string
	}{
		{"malformed", `{"yaml": "a",}`, "malformed JSON"},
		{"truncated", `{"yaml": "a"`, "malformed JSON"},
		{"trailing data", `{"yaml": "name: a"} {}`, "data after the JSON value"},
		{"trailing brace", `{"yaml": "name: a"}}`, "data after the JSON value"},
		{"unknown key", `{"yaml": "name: a", "extra": 1}`, "Unrecognized key(s) in object: 'extra'"},
		{"wrong type", `{"yaml": ["name: a"]}`, "yaml: Expected string, received array"},
		{"not an object", `[1,2]`, "(root): Expected object, received array"},
		{"empty", ``, "empty"},
		{"whitespace", "  \n", "empty"},
		{"non-UTF-8", "{\"yaml\": \"\xc3\x28\"}", "UTF-8"},
		{"random bytes", string(random), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := ts.do("POST", "/v1/agents", tc.body)
			if res.status != 422 || res.errCode(t) != codeSpecInvalid || !strings.Contains(res.errMessage(t), tc.msg) {
				t.Fatalf("%d %s", res.status, res.body)
			}
		})
	}
	if res := ts.do("GET", "/v1/agents", nil); res.status != 200 || string(res.body) != "{\"agents\":[]}\n" {
		t.Fatalf("bad input changed state: %s", res.body)
	}
}

func TestCORS(t *testing.T) {
	off := newTestServer(t)
	on := newTestServer(t, func(c *testSetup) { c.CORSOrigins = []string{"https://app.example"} })
	preflight := []string{"Origin", "https://app.example", "Access-Control-Request-Method", "POST",
		"Access-Control-Request-Headers", "content-type"}

	// Off by default: no CORS headers, a preflight is not answered as one.
	res := off.do("GET", "/v1/agents", nil, "Origin", "https://app.example")
	if res.header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatal("CORS header with CORS off")
	}
	res = off.do("OPTIONS", "/v1/agents", nil, preflight...)
	if res.status != 404 || res.header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("preflight with CORS off: %d %v", res.status, res.header)
	}

	// On: the listed origin gets the headers; the preflight is a 204 naming methods and headers.
	res = on.do("OPTIONS", "/v1/agents", nil, preflight...)
	h := res.header
	if res.status != 204 || h.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		!strings.Contains(h.Get("Access-Control-Allow-Methods"), "POST") ||
		!strings.Contains(h.Get("Access-Control-Allow-Headers"), "Authorization") ||
		h.Get("X-Agent-Version") != version {
		t.Fatalf("preflight: %d %v", res.status, h)
	}
	res = on.do("GET", "/v1/agents", nil, "Origin", "https://app.example")
	if res.status != 200 || res.header.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		!strings.Contains(res.header.Get("Access-Control-Expose-Headers"), "X-Agent-Version") {
		t.Fatalf("simple request: %v", res.header)
	}
	// Another origin gets nothing.
	res = on.do("GET", "/v1/agents", nil, "Origin", "https://evil.example")
	if res.header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatal("unlisted origin allowed")
	}
	res = on.do("OPTIONS", "/v1/agents", nil, "Origin", "https://evil.example", "Access-Control-Request-Method", "POST")
	if res.status == 204 || res.header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("preflight from unlisted origin answered: %d", res.status)
	}
	// Preflight needs no token (browsers never send one on it).
	tok := newTestServer(t, func(c *testSetup) { c.CORSOrigins = []string{"*"}; c.Token = "secret" })
	if res := tok.do("OPTIONS", "/v1/agents", nil, preflight...); res.status != 204 {
		t.Fatalf("preflight with token configured: %d", res.status)
	}
}

func TestBearerAuth(t *testing.T) {
	const token = "s3cret-token"
	ts := newTestServer(t, func(c *testSetup) { c.Token = token })
	open := newTestServer(t)
	cases := []struct {
		name    string
		path    string
		headers []string
		status  int
	}{
		{"health needs nothing", "/health", nil, 200},
		{"missing", "/v1/agents", nil, 401},
		{"wrong", "/v1/agents", []string{"Authorization", "Bearer nope"}, 401},
		{"prefix of the token", "/v1/agents", []string{"Authorization", "Bearer s3cret"}, 401},
		{"empty bearer", "/v1/agents", []string{"Authorization", "Bearer "}, 401},
		{"basic scheme", "/v1/agents", []string{"Authorization", "Basic " + token}, 401},
		{"right", "/v1/agents", []string{"Authorization", "Bearer " + token}, 200},
		{"scheme case-insensitive", "/v1/agents", []string{"Authorization", "bearer " + token}, 200},
		{"unknown route still 401", "/v1/nope", nil, 401},
		{"query token on plain request", "/v1/agents?token=" + token, nil, 401},
		{"access_token on plain request", "/v1/agents?access_token=" + token, nil, 401},
		{"query token with SSE accept on a plain route", "/v1/agents?token=" + token, []string{"Accept", "text/event-stream"}, 401},
		{"query token on a stream route", "/v1/runs/run_nope/events?token=" + token, []string{"Accept", "text/event-stream"}, 404},
		{"access_token on a stream route", "/v1/runs/run_nope/events?access_token=" + token, []string{"Accept", "text/event-stream"}, 404},
		{"wrong query token on a stream route", "/v1/runs/run_nope/events?token=x", []string{"Accept", "text/event-stream"}, 401},
		{"query token with an upgrade on a plain route", "/v1/agents?token=" + token, []string{"Upgrade", "websocket"}, 401},
		{"X-Forwarded-For is not trusted", "/v1/agents", []string{"X-Forwarded-For", "127.0.0.1", "X-Real-IP", "127.0.0.1"}, 401},
		{"the dashboard page is public (DESIGN §9)", "/", nil, 200},
		{"a dashboard deep link is public", "/runs/run_x", nil, 200},
		{"/v1 with Accept: text/html still needs the token", "/v1", []string{"Accept", "text/html"}, 401},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := ts.do("GET", tc.path, nil, tc.headers...)
			if res.status != tc.status {
				t.Fatalf("status %d, want %d: %s", res.status, tc.status, res.body)
			}
			if res.header.Get("X-Agent-Version") != version {
				t.Fatal("no version header")
			}
			if tc.status == 401 {
				if res.errCode(t) != codeNoCredentials {
					t.Fatalf("code %s", res.errCode(t))
				}
				if strings.Contains(string(res.body), token) {
					t.Fatal("the token leaked into an answer")
				}
			}
		})
	}
	// The query token works for a WebSocket upgrade.
	// Only a GET of a stream or socket route takes ?token=: a DELETE that merely says it wants a stream
	// does not (it went through before).
	if res := ts.do("DELETE", "/v1/runs/run_nope/events?token="+token, nil, "Accept", "text/event-stream"); res.status != 401 {
		t.Fatalf("DELETE with a query token: %d", res.status)
	}
	ts.dial("/v1/events?token="+token, "").Close()
	if _, err := ts.tryDial("/v1/events?token=wrong", ""); err == nil {
		t.Fatal("WebSocket with a wrong query token was accepted")
	}
	// With no token configured every request passes.
	if res := open.do("GET", "/v1/agents", nil); res.status != 200 {
		t.Fatalf("token-less server: %d", res.status)
	}
}

func TestTokenEqual(t *testing.T) {
	for _, tc := range []struct {
		got, want string
		ok        bool
	}{{"a", "a", true}, {"a", "b", false}, {"", "", false}, {"ab", "a", false}, {"a", "ab", false}} {
		if tokenEqual(tc.got, tc.want) != tc.ok {
			t.Errorf("tokenEqual(%q, %q) != %v", tc.got, tc.want, tc.ok)
		}
	}
}

func TestIdempotency(t *testing.T) {
	clock := newFakeClock()
	ts := newTestServer(t, withClock(clock.now))
	create := func(name, key string) response {
		return ts.do("POST", "/v1/agents", map[string]any{"yaml": "name: " + name + "\n"}, "Idempotency-Key", key)
	}

	first := create("a", "k1")
	if first.status != 201 || first.header.Get("Idempotency-Replayed") != "" {
		t.Fatalf("first: %d %v", first.status, first.header)
	}
	replay := create("a", "k1")
	if replay.status != 201 || replay.header.Get("Idempotency-Replayed") != "true" ||
		!bytes.Equal(replay.body, first.body) || replay.header.Get("X-Agent-Version") != version {
		t.Fatalf("replay: %d %v %s", replay.status, replay.header, replay.body)
	}
	// Another key runs the handler: the duplicate is refused.
	if res := create("a", "k2"); res.status != 422 {
		t.Fatalf("new key: %d", res.status)
	}
	// Keyed on the method and URL too.
	if res := ts.do("PUT", "/v1/agents/a", map[string]any{"yaml": "name: a\n"}, "Idempotency-Key", "k1"); res.status != 200 || res.header.Get("Idempotency-Replayed") != "" {
		t.Fatalf("same key, other method: %d %v", res.status, res.header)
	}

	// Only answers below 400 are recorded: a failed attempt can be retried with the same key.
	if res := ts.do("POST", "/v1/agents", map[string]any{"yaml": "name: B\n"}, "Idempotency-Key", "k3"); res.status != 422 {
		t.Fatalf("invalid: %d", res.status)
	}
	if res := create("b", "k3"); res.status != 201 || res.header.Get("Idempotency-Replayed") != "" {
		t.Fatalf("retry after a failure: %d %v", res.status, res.header)
	}

	// GET is never cached.
	g1 := ts.do("GET", "/v1/agents", nil, "Idempotency-Key", "g")
	ts.do("DELETE", "/v1/agents/b", nil)
	g2 := ts.do("GET", "/v1/agents", nil, "Idempotency-Key", "g")
	if g2.header.Get("Idempotency-Replayed") != "" || bytes.Equal(g1.body, g2.body) {
		t.Fatal("GET was replayed")
	}

	// DELETE replays its 204.
	create("d", "kd0")
	if res := ts.do("DELETE", "/v1/agents/d", nil, "Idempotency-Key", "kd"); res.status != 204 {
		t.Fatalf("delete: %d", res.status)
	}
	if res := ts.do("DELETE", "/v1/agents/d", nil, "Idempotency-Key", "kd"); res.status != 204 || res.header.Get("Idempotency-Replayed") != "true" {
		t.Fatalf("delete replay: %d %v", res.status, res.header)
	}

	// Entries live 15 minutes.
	clock.advance(14 * time.Minute)
	if res := create("a", "k1"); res.header.Get("Idempotency-Replayed") != "true" {
		t.Fatal("entry expired before 15 minutes")
	}
	clock.advance(2 * time.Minute)
	if res := create("a", "k1"); res.status != 422 || res.header.Get("Idempotency-Replayed") != "" {
		t.Fatalf("entry outlived its TTL: %d %v", res.status, res.header)
	}
}

func TestIdempotencySoftCap(t *testing.T) {
	clock := newFakeClock()
	c := newIdempotencyCache(clock.now)
	var calls int
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		fmt.Fprint(w, calls)
	})
	post := func(key string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "/v1/x", nil)
		r.Header.Set("Idempotency-Key", key)
		c.serve(rec, r, h)
		return rec
	}
	for i := 0; i < idemSoftCap+200; i++ {
		post(fmt.Sprint("k", i))
		clock.advance(time.Millisecond)
	}
	c.mu.Lock()
	n := len(c.entries)
	c.mu.Unlock()
	if n > idemSoftCap {
		t.Fatalf("%d entries, soft cap %d", n, idemSoftCap)
	}
	// The oldest were evicted, the newest kept.
	if rec := post("k0"); rec.Header().Get("Idempotency-Replayed") != "" {
		t.Fatal("oldest entry survived past the cap")
	}
	if rec := post(fmt.Sprint("k", idemSoftCap+199)); rec.Header().Get("Idempotency-Replayed") != "true" {
		t.Fatal("newest entry was evicted")
	}
}

func TestIdempotencyConcurrentSameKey(t *testing.T) {
	c := newIdempotencyCache(time.Now)
	release := make(chan struct{})
	var mu sync.Mutex
	calls := 0
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		mu.Unlock()
		<-release
		w.WriteHeader(201)
		io.WriteString(w, "made")
	})
	var wg sync.WaitGroup
	recs := make([]*httptest.ResponseRecorder, 5)
	for i := range recs {
		recs[i] = httptest.NewRecorder()
		wg.Add(1)
		go func(rec *httptest.ResponseRecorder) {
			defer wg.Done()
			r := httptest.NewRequest("POST", "/v1/x", nil)
			r.Header.Set("Idempotency-Key", "same")
			c.serve(rec, r, h)
		}(recs[i])
	}
	// Let the first through once every request is either running it or waiting on it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := calls
		mu.Unlock()
		if n == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	if calls != 1 {
		t.Fatalf("handler ran %d times", calls)
	}
	for _, rec := range recs {
		if rec.Code != 201 || rec.Body.String() != "made" {
			t.Fatalf("answer %d %q", rec.Code, rec.Body)
		}
	}
}

func TestStreamingNotRecorded(t *testing.T) {
	c := newIdempotencyCache(time.Now)
	calls := 0
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		sse := newSSE(w, time.Hour)
		sse.send(map[string]any{"n": calls})
		sse.close()
	})
	for i := 0; i < 2; i++ {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "/v1/s", nil)
		r.Header.Set("Idempotency-Key", "s")
		c.serve(rec, r, h)
		if rec.Header().Get("Idempotency-Replayed") != "" {
			t.Fatal("a streaming answer was replayed")
		}
		if !strings.Contains(rec.Body.String(), "event: done") {
			t.Fatalf("stream %q", rec.Body)
		}
	}
	if calls != 2 {
		t.Fatalf("streaming handler ran %d times, want 2", calls)
	}
}

func TestPanicIsAnEnvelope(t *testing.T) {
	ts := newTestServer(t)
	ts.s.handler = http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") })
	res := ts.do("GET", "/v1/agents", nil)
	if res.status != 500 || res.errCode(t) != codeInternal || strings.Contains(string(res.body), "boom") {
		t.Fatalf("panic: %d %s", res.status, res.body)
	}
}

// A handler that panics is answered 500 by the recovery, and its key stays free: the retry runs afresh.
func TestIdempotencyPanicNotRecorded(t *testing.T) {
	ts := newTestServer(t)
	calls := 0
	ts.s.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if calls == 1 {
			panic("first attempt breaks")
		}
		w.WriteHeader(201)
	})
	if res := ts.do("POST", "/v1/x", "{}", "Idempotency-Key", "p"); res.status != 500 {
		t.Fatalf("first: %d", res.status)
	}
	res := ts.do("POST", "/v1/x", "{}", "Idempotency-Key", "p")
	if res.status != 201 || res.header.Get("Idempotency-Replayed") != "" || calls != 2 {
		t.Fatalf("retry: %d %v calls=%d", res.status, res.header, calls)
	}
}

// A duplicate of a request whose answer is a stream runs at once: streams are never recorded, so waiting
// for the first stream to end would only delay a retry that runs the work again anyway.
func TestIdempotencyStreamingDuplicateDoesNotWait(t *testing.T) {
	c := newIdempotencyCache(time.Now)
	release := make(chan struct{})
	streaming := make(chan struct{})
	var calls atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sse := newSSE(w, time.Hour)
		defer sse.close()
		if calls.Add(1) == 1 {
			close(streaming)
			<-release // the first stream is still going
		}
	})
	serve := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "/v1/s", nil)
		r.Header.Set("Idempotency-Key", "s")
		c.serve(rec, r, h)
		return rec
	}
	first := make(chan struct{})
	go func() { defer close(first); serve() }()
	<-streaming
	second := make(chan *httptest.ResponseRecorder)
	go func() { second <- serve() }()
	select {
	case rec := <-second:
		if !strings.Contains(rec.Body.String(), "event: done") || rec.Header().Get("Idempotency-Replayed") != "" {
			t.Fatalf("duplicate: %q", rec.Body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the duplicate of a streaming request waited for the first stream to end")
	}
	close(release)
	<-first
}

// A cross-origin write from a browser page (a "simple" text/plain POST needs no preflight) is refused on a
// token-less server unless the origin is the server's own or listed; CLIs send no Origin and pass.
func TestForeignOriginWriteRefused(t *testing.T) {
	ts := newTestServer(t, func(c *testSetup) { c.CORSOrigins = []string{"https://app.example"} })
	spec := `{"yaml":"name: csrf\n"}`
	r := ts.do("POST", "/v1/agents", spec, "Origin", "https://evil.example", "Content-Type", "text/plain")
	if r.status != 403 || r.errCode(t) != codeExecDenied || r.header.Get(versionHeader) == "" {
		t.Fatalf("foreign origin write: %d %s", r.status, r.body)
	}
	if g := ts.do("GET", "/v1/agents/csrf", nil); g.status != 404 {
		t.Fatalf("the refused write happened: %d", g.status)
	}
	for _, origin := range []string{"", "https://app.example", ts.url} {
		name := fmt.Sprintf("ok%d", len(origin))
		if r := ts.do("POST", "/v1/agents", `{"yaml":"name: `+name+`\n"}`, "Origin", origin); r.status != 201 {
			t.Fatalf("origin %q: %d %s", origin, r.status, r.body)
		}
	}
	// Reads stay open to any origin (the browser hides the answer without CORS headers).
	if r := ts.do("GET", "/v1/agents", nil, "Origin", "https://evil.example"); r.status != 200 {
		t.Fatalf("foreign origin read: %d", r.status)
	}
}

// A token-less server answers only to loopback names, so a DNS-rebound page (Host: evil.example) cannot
// use it; with a token the Host is not checked (the token is the defence), and /health always answers.
func TestTokenlessServerRefusesForeignHost(t *testing.T) {
	ts := newTestServer(t)
	get := func(ts *testServer, host, path string) int {
		res := ts.do("GET", path, nil, "Host", host, "Authorization", "Bearer sekret")
		if res.header.Get(versionHeader) == "" {
			t.Fatalf("no %s", versionHeader)
		}
		return res.status
	}
	for host, want := range map[string]int{"evil.example:7377": 403, "evil.example": 403, "127.0.0.1:7377": 200,
		"localhost:7377": 200, "LOCALHOST": 200, "app.localhost:1": 200, "[::1]:7377": 200, "127.1.2.3": 200} {
		if got := get(ts, host, "/v1/agents"); got != want {
			t.Errorf("Host %s: %d, want %d", host, got, want)
		}
	}
	if got := get(ts, "evil.example", "/health"); got != 200 {
		t.Errorf("/health: %d", got)
	}
	withToken := newTestServer(t, func(c *testSetup) { c.Token = "sekret" })
	if got := get(withToken, "agentd.internal:7377", "/v1/agents"); got != 200 {
		t.Errorf("token server, other host: %d", got)
	}
}

// encoding/json folds key case; a strict body does not: "YAML" is not "yaml".
func TestStrictJSONKeysAreCaseSensitive(t *testing.T) {
	ts := newTestServer(t)
	r := ts.do("POST", "/v1/agents/validate", `{"YAML":"name: a\n"}`)
	if r.status != 422 || r.errCode(t) != codeSpecInvalid || !strings.Contains(r.errMessage(t), "'YAML'") {
		t.Fatalf("wrong-case key: %d %s", r.status, r.body)
	}
	if r := ts.do("POST", "/v1/agents/validate", `{"yaml":"name: a\n"}`); r.status != 200 {
		t.Fatalf("exact key: %d %s", r.status, r.body)
	}
	// Embedded structs' keys count; untagged or self-decoding types are left to encoding/json.
	type inner struct {
		A string `json:"a"`
	}
	var v struct {
		inner
		B int `json:"b,omitempty"`
		c int
	}
	if err := decodeBytes([]byte(`{"a":"x","b":1}`), &v); err != nil {
		t.Fatal(err)
	}
	if err := decodeBytes([]byte(`{"A":"x"}`), &v); err == nil {
		t.Fatal("wrong case accepted through an embedded struct")
	}
	var loose struct{ Name string }
	if err := decodeBytes([]byte(`{"name":"x"}`), &loose); err != nil || loose.Name != "x" {
		t.Fatalf("untagged field: %v", err)
	}
}

// An unclassified error is logged with its detail and answered only as "internal error" with the
// request id; every answer carries X-Request-Id, and a caller's sane id is reused.
func TestInternalErrorHidesDetail(t *testing.T) {
	ts := newTestServer(t)
	var logged bytes.Buffer
	ts.s.log = slog.New(slog.NewTextHandler(&logged, nil))
	h := ts.s.api(func(w http.ResponseWriter, r *http.Request) error {
		return errors.New("open /secret/path: sql detail")
	})
	req := httptest.NewRequest("GET", "/x", nil)
	req = req.WithContext(context.WithValue(req.Context(), requestIDKey{}, "req_abc"))
	rec := httptest.NewRecorder()
	h(rec, req)
	body := rec.Body.String()
	if rec.Code != 500 || !strings.Contains(body, `"code":"E_INTERNAL"`) || !strings.Contains(body, "internal error (request req_abc)") ||
		strings.Contains(body, "secret") {
		t.Fatalf("answer: %d %s", rec.Code, body)
	}
	if !strings.Contains(logged.String(), "/secret/path: sql detail") || !strings.Contains(logged.String(), "req_abc") {
		t.Fatalf("log lacks the detail or the id: %s", logged.String())
	}

	res := ts.do("GET", "/health", nil)
	if id := res.header.Get("X-Request-Id"); !strings.HasPrefix(id, "req_") {
		t.Fatalf("no request id: %q", id)
	}
	if res := ts.do("GET", "/health", nil, "X-Request-Id", "trace-42.a_b"); res.header.Get("X-Request-Id") != "trace-42.a_b" {
		t.Fatalf("a sane caller id is not reused: %q", res.header.Get("X-Request-Id"))
	}
	if res := ts.do("GET", "/health", nil, "X-Request-Id", "bad id\twith junk"); !strings.HasPrefix(res.header.Get("X-Request-Id"), "req_") {
		t.Fatalf("a junk caller id is echoed: %q", res.header.Get("X-Request-Id"))
	}
}

// An Idempotency-Key is bound to its body: the same key with another body is 422 naming the key, also when
// the two arrive together; the same body replays.
func TestIdempotencyKeyBoundToBody(t *testing.T) {
	ts := newTestServer(t)
	create := func(desc string) response {
		return ts.do("POST", "/v1/agents", map[string]any{"yaml": "name: idem\ndescription: " + desc + "\n"}, "Idempotency-Key", "k-1")
	}
	if res := create("first"); res.status != 201 {
		t.Fatalf("first: %d %s", res.status, res.body)
	}
	if res := create("first"); res.status != 201 || res.header.Get("Idempotency-Replayed") != "true" {
		t.Fatalf("replay: %d %v", res.status, res.header)
	}
	res := create("second")
	if res.status != 422 || res.errCode(t) != codeSpecInvalid || !strings.Contains(res.errMessage(t), `"k-1"`) {
		t.Fatalf("other body: %d %s", res.status, res.body)
	}
	// Concurrent: one key, different bodies: one success, the rest refused.
	var wg sync.WaitGroup
	codes := make(chan int, 6)
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes <- ts.do("POST", "/v1/agents", map[string]any{"yaml": fmt.Sprintf("name: race%d\n", i)}, "Idempotency-Key", "k-race").status
		}()
	}
	wg.Wait()
	close(codes)
	ok, refused := 0, 0
	for c := range codes {
		switch c {
		case 201:
			ok++
		case 422:
			refused++
		}
	}
	if ok != 1 || refused != 5 {
		t.Fatalf("concurrent: %d created, %d refused", ok, refused)
	}
}

// Every JSON body refuses a repeated key (encoding/json would keep the last one silently, where the YAML
// reader refuses): the path of the repeat is named.
func TestDuplicateJSONKeysRefused(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":1,"b":2}`: "", `{"a":1,"a":2}`: "a", `{"a":{"b":1,"b":2}}`: "a.b", `{"a":[{"x":1},{"x":1,"x":2}]}`: "a.1.x",
		`[{"k":1},{"k":2}]`: "", `{"a":[1,2,{"b":{"c":1}}],"a":3}`: "a", `{"a":{},"b":{"a":1}}`: "",
	} {
		if got := duplicateKey([]byte(in)); got != want {
			t.Errorf("%s: %q, want %q", in, got, want)
		}
	}
	ts := newTestServer(t)
	for path, body := range map[string]string{
		"/v1/agents/validate":       `{"yaml":"name: a","yaml":"name: b"}`,
		"/v1/agents":                `{"spec":{"name":"a","name":"b"}}`,
		"/v1/agents/x/run":          `{"input":"a","input":"b"}`,
		"/v1/models/chat":           `{"model":"auto","model":"free","messages":[{"role":"user","content":"x"}]}`,
		"/v1/sessions/import":       `{"content":"x","content":"y"}`,
		"/v1/computers/cmp_x/ports": `{"port":1,"port":2}`,
	} {
		res := ts.do("POST", path, body)
		if res.status != 422 || res.errCode(t) != codeSpecInvalid || !strings.Contains(res.errMessage(t), "duplicate key") {
			t.Errorf("%s: %d %s", path, res.status, res.body)
		}
	}
	// Validation reports every issue at once, an out-of-range number among them.
	res := ts.do("POST", "/v1/agents/validate", `{"spec":{"name":"Bad","limits":{"maxSteps":1e400,"timeoutSec":-1}}}`)
	if issues := fmt.Sprint(res.json(t)["issues"]); !strings.Contains(issues, "name must be lowercase") ||
		!strings.Contains(issues, "limits.maxSteps: number 1e400 is out of range") || !strings.Contains(issues, "limits.timeoutSec") {
		t.Errorf("issues: %s", issues)
	}
}

// A client cannot hold a connection with a trickled body (408 and closed), and a request without the
// token is answered 401 from its headers without its body being waited for.
func TestSlowClientsDoNotHoldConnections(t *testing.T) {
	ts := newTestServer(t, func(c *testSetup) { c.Token = "a-long-enough-token-1234" })
	ts.s.bodyWindowFor = 300 * time.Millisecond
	addr := strings.TrimPrefix(ts.url, "http://")
	raw := func(head string) (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.Write([]byte(head))
		return c, bufio.NewReader(c)
	}
	// Unauthenticated, a large body declared and never sent: 401 at once, then the connection closes.
	c, br := raw("POST /v1/agents HTTP/1.1\r\nHost: " + addr + "\r\nContent-Length: 1000000\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 401 {
		t.Fatalf("unauthenticated: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("the connection stayed open after the 401")
	}
	// Authenticated, the body trickled at 10 bytes a tick: 408, closed.
	c, br = raw("POST /v1/agents/validate HTTP/1.1\r\nHost: " + addr + "\r\nAuthorization: Bearer a-long-enough-token-1234\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
	start := time.Now()
	go func() {
		for i := 0; i < 100; i++ {
			if _, err := c.Write([]byte(`          `)); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond) // the trickle being tested, not a wait for a result
		}
	}()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err = http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 408 {
		t.Fatalf("trickled body: %v %v", resp, err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("cut off only after %s", took)
	}
	// A whole body at once is fine.
	if res := ts.do("POST", "/v1/agents/validate", map[string]any{"yaml": "name: ok\n"}, "Authorization", "Bearer a-long-enough-token-1234"); res.status != 200 {
		t.Fatalf("normal body: %d %s", res.status, res.body)
	}
}

// Past the connection cap the server still answers /health (on the reserve) and refuses the rest with
// 503 (past the reserve it sheds a connection that serves nobody: TestConnectionShedOrder).
func TestConnectionCapKeepsHealth(t *testing.T) {
	ts := newTestServer(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := newConnLimiter(ln, 3)
	hs := &http.Server{Handler: ts.s, ConnContext: connContext, ConnState: lim.connState, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(lim)
	t.Cleanup(func() { hs.Close() })
	addr := ln.Addr().String()
	var slow []net.Conn
	for range 3 { // three slow clients: headers begun, never finished
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("GET /v1/agents HTTP/1.1\r\nHost: 127.0.0.1\r\n"))
		slow = append(slow, c)
		defer c.Close()
	}
	eventually(t, "the slow clients to be counted", func() bool { lim.mu.Lock(); defer lim.mu.Unlock(); return lim.open == 3 })
	get := func(path string) int {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get("/health"); code != 200 {
		t.Fatalf("/health past the cap: %d", code)
	}
	if code := get("/v1/agents"); code != 503 {
		t.Fatalf("/v1/agents past the cap: %d", code)
	}
	for _, c := range slow {
		c.Close()
	}
	eventually(t, "the slots to free", func() bool { lim.mu.Lock(); defer lim.mu.Unlock(); return lim.open == 0 })
	if code := get("/v1/agents"); code != 200 {
		t.Fatalf("/v1/agents after the slow clients left: %d", code)
	}
}

// FuzzRequestDecoders sends arbitrary bytes as the body of every route that decodes one (agents, exec,
// ports, chat, approvals, runs, distill): whatever the bytes, the answer is a JSON envelope with a 4xx or
// a success, never a 500 or a panic.
func FuzzRequestDecoders(f *testing.F) {
	for _, s := range []string{
		`{"spec":{"name":"a","model":"auto"}}`, `{"yaml":"name: a\nmodel: auto\n"}`, `{"cmd":"ls","timeoutSec":5}`,
		`{"cmd":["ls","-la"],"cwd":"/work","env":{"A":"1"}}`, `{"port":8000}`, `{"approve":true,"remember":true}`,
		`{"messages":[{"role":"user","content":"hi"}],"model":"auto"}`, `{"input":"hi","maxSteps":3}`,
		`{"transcript":{"messages":[{"role":"user","content":"x"}]}}`, `{"a":1,"a":2}`, `{"cmd":1e400}`, "\xff", `[]`, ``,
	} {
		for route := range 7 {
			f.Add(uint8(route), []byte(s))
		}
	}
	ts := newTestServer(f)
	routes := []string{
		"/v1/agents/validate", "/v1/computers/cmp_nosuch/exec", "/v1/computers/cmp_nosuch/ports", "/v1/models/chat",
		"/v1/approvals/apr_nosuch", "/v1/agents/nosuch/run", "/v1/sessions/distill",
	}
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		path := routes[int(route)%len(routes)]
		req := httptest.NewRequest("POST", path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		ts.s.ServeHTTP(rec, req)
		if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("POST %s %q: %d %s", path, body, rec.Code, rec.Body)
		}
		if rec.Code >= 400 && !strings.Contains(rec.Body.String(), `"code":"E_`) {
			t.Fatalf("POST %s %q: %d without the envelope: %s", path, body, rec.Code, rec.Body)
		}
	})
}

// A first request that outlives the key's TTL, was replaced by a newer request with the same key, and then
// fails, must not delete the newer request's recorded answer: a third request replays the second's answer
// instead of running the work once more. (Before, record deleted whatever entry the key held.)
func TestIdempotencyLateFailureKeepsNewerEntry(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_700_000_000, 0)
	c := newIdempotencyCache(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	release, inFirst := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			close(inFirst)
			<-release
			w.WriteHeader(500)
			return
		}
		w.WriteHeader(201)
		io.WriteString(w, "second")
	})
	post := func() *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/v1/x", strings.NewReader("{}"))
		r.Header.Set("Idempotency-Key", "late")
		w := httptest.NewRecorder()
		c.serve(w, r, h)
		return w
	}
	first := make(chan *httptest.ResponseRecorder)
	go func() { first <- post() }()
	<-inFirst
	mu.Lock()
	now = now.Add(idemTTL + time.Second)
	mu.Unlock()
	if w := post(); w.Code != 201 {
		t.Fatalf("second: %d", w.Code)
	}
	close(release)
	if w := <-first; w.Code != 500 {
		t.Fatalf("first: %d", w.Code)
	}
	w := post()
	if w.Code != 201 || w.Header().Get("Idempotency-Replayed") != "true" || calls.Load() != 2 {
		t.Fatalf("third: %d %v calls=%d (the late failure deleted the newer entry)", w.Code, w.Header(), calls.Load())
	}
}
