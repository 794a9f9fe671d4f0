package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// testServer is a real server on a loopback httptest listener over a temp AGENT_HOME.
type testServer struct {
	t   testing.TB
	s   *server
	ts  *httptest.Server
	url string
}

func newTestServer(t testing.TB, mods ...func(*config)) *testServer {
	t.Helper()
	cfg := defaultConfig()
	cfg.Home = t.TempDir()
	cfg.firstRun = true
	cfg.getenv = func(string) string { return "" }
	for _, m := range mods {
		m(&cfg)
	}
	return newTestServerWith(t, cfg, time.Now)
}

func newTestServerWith(t testing.TB, cfg config, now func() time.Time) *testServer {
	t.Helper()
	s, err := newServer(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), now)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(s)
	ts.Config.BaseContext = func(net.Listener) context.Context { return s.streamCtx }
	ts.Start()
	t.Cleanup(func() {
		s.cancelStream()
		s.hub.Close()
		ts.Close()
		s.Close(context.Background())
	})
	return &testServer{t: t, s: s, ts: ts, url: ts.URL}
}

// response is a read answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body is not a JSON object (%v): %s", err, r.body)
	}
	return m
}

// errCode returns error.code of an envelope, failing when the body is not one.
func (r response) errCode(t testing.TB) string {
	t.Helper()
	e, ok := r.json(t)["error"].(map[string]any)
	if !ok {
		t.Fatalf("not an error envelope: %s", r.body)
	}
	for _, k := range []string{"code", "message", "hint"} {
		if _, ok := e[k].(string); !ok {
			t.Fatalf("envelope lacks %s: %s", k, r.body)
		}
	}
	return e["code"].(string)
}

func (r response) errMessage(t testing.TB) string {
	t.Helper()
	r.errCode(t)
	return r.json(t)["error"].(map[string]any)["message"].(string)
}

func (ts *testServer) do(method, path string, body any, headers ...string) response {
	ts.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	case io.Reader:
		rd = b
	default:
		j, err := json.Marshal(b)
		if err != nil {
			ts.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, ts.url+path, rd)
	if err != nil {
		ts.t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		ts.t.Fatal(err)
	}
	return response{status: res.StatusCode, header: res.Header, body: b}
}
