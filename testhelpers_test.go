package main

// The one test harness: a real server on a loopback listener over a temporary AGENT_HOME, options for
// what differs between tests (config, environment, clock, a scripted model), requests with one answer
// type, SSE streams, WebSockets and polling with a deadline. Domain helpers (create a computer, run an
// agent) live beside their tests as methods of testServer.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/websocket"
)

// testImage is the image the engine tests make machines from (scripts/test-image.sh builds it).
// AGENT_TEST_IMAGE names another one: CI points it at a missing tag to prove that a host without the
// image skips those tests (outside CI) instead of failing them.
var testImage = firstNonEmpty(os.Getenv("AGENT_TEST_IMAGE"), "agentd-test:bookworm")

// testServer is one agentd server on loopback (or, with only t and url, a client of one started elsewhere).
type testServer struct {
	t    testing.TB
	s    *server
	url  string
	comp *fakeComputer // withFakeModel: the temp-dir computer the runs' tools use
	keep bool          // leave machines running at close (restart tests; set it on the original)
	once *sync.Once
	stop func()
}

// testSetup is what the options edit before the server starts.
type testSetup struct {
	config
	now   func() time.Time
	model *fakeModel
	log   io.Writer // the server's log (text lines); nil discards it
}

type testOption func(*testSetup)

func withHome(dir string) testOption            { return func(c *testSetup) { c.Home = dir } }
func withClock(now func() time.Time) testOption { return func(c *testSetup) { c.now = now } }
func withLog(w io.Writer) testOption            { return func(c *testSetup) { c.log = w } }

// withFakeModel runs agents against m, with tools on a computer backed by a temp directory.
func withFakeModel(m *fakeModel) testOption { return func(c *testSetup) { c.model = m } }

// withEnv is the server's environment; the keyless model providers point at a closed port so that no
// test reaches a real ollama or LM Studio on this machine.
func withEnv(env map[string]string) testOption {
	return func(c *testSetup) {
		all := hermeticEnv(env)
		c.getenv = func(k string) string { return all[k] }
	}
}

// hermeticEnv is env with the keyless providers at a loopback port nothing listens on (refused at once).
func hermeticEnv(env map[string]string) map[string]string {
	all := map[string]string{"OLLAMA_BASE_URL": "http://127.0.0.1:1", "LMSTUDIO_BASE_URL": "http://127.0.0.1:1"}
	for k, v := range env {
		all[k] = v
	}
	return all
}

func testOwnerPrefix() string { return fmt.Sprintf("agdtest%d-", os.Getpid()) }

// newTestServer starts a server with the defaults, the test image for every flavour, the reaper left to
// the test, and an owner id carrying this process's pid (the leak check sees only what this run made).
// At cleanup its machines are destroyed, unless keep is set, and it shuts down.
func newTestServer(t testing.TB, opts ...testOption) *testServer {
	t.Helper()
	c := testSetup{config: defaultConfig(), now: time.Now}
	c.Home, c.firstRun = t.TempDir(), true
	c.getenv = func(string) string { return "" }
	c.ReaperIntervalSec = 3600
	c.Images = map[string]string{"base": testImage, "python": testImage, "node": testImage, "full": testImage}
	// The test binary cannot be the machines' helper (it is not agentd's main); the agentd binary the
	// tests run is (cliBinary: the README's build, or the one CI names in AGENT_TEST_AGENTD), exactly what
	// that binary's own server would mount. AGENT_TEST_CHANNEL=0 runs every engine test over the
	// per-call path instead.
	if os.Getenv("AGENT_TEST_CHANNEL") == "0" {
		c.ExecChannel = new(bool)
	} else {
		c.helperBinary = cliBinary(t)
	}
	if os.Getenv("AGENT_TEST_K8S") == "1" { // the kubernetes provider exists only when configured
		c.Kubernetes = &kubeConfig{Kubeconfig: os.Getenv("KUBECONFIG")}
	}
	for _, o := range opts {
		o(&c)
	}
	if _, err := os.Stat(c.Home + "/instance-id"); err != nil {
		os.WriteFile(c.Home+"/instance-id", []byte(testOwnerPrefix()+randomChars(4)+"\n"), 0o600)
	}
	warns := &syncBuffer{} // the server's warnings: the leak check names where a leaked machine came from
	logger := slog.New(slog.NewTextHandler(warns, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if c.log != nil {
		logger = slog.New(slog.NewTextHandler(c.log, nil))
	}
	if owner, err := os.ReadFile(c.Home + "/instance-id"); err == nil {
		testServers.Store(strings.TrimSpace(string(owner)), testServerOrigin{test: t.Name(), warns: warns})
	}
	s, err := newServer(c.config, logger, c.now)
	if err != nil {
		t.Fatalf("newServer: %v", err)
	}
	ts := &testServer{t: t, s: s, once: &sync.Once{}}
	if c.model != nil {
		s.runs.Close()
		ts.comp = newFakeComputer(t)
		s.runs = newRunService(runDeps{store: s.store, hub: s.hub, models: c.model, computers: ts.comp,
			now: c.now, log: s.log, getenv: c.getenv, home: c.Home, metrics: s.metrics})
	}
	hs := httptest.NewUnstartedServer(s)
	hs.Config.BaseContext = func(net.Listener) context.Context { return s.streamCtx }
	hs.Start()
	ts.url = hs.URL
	ts.stop = func() {
		if !ts.keep { // a failed test must not leak machines
			recs, _ := s.store.ListComputers(context.Background())
			for _, m := range recs {
				s.computers.destroy(context.Background(), m.ID, "")
			}
			s.computers.drainPool(context.Background()) // pool machines are in no listing
		}
		s.cancelStream()
		s.hub.Close()
		hs.Close()
		s.Close(context.Background())
	}
	t.Cleanup(ts.close)
	return ts
}

// testServers maps each test server's owner id to where it came from, for checkNoLeaks: a leaked
// machine carries only its owner, and the test that made it has long ended when the leak is found.
var testServers sync.Map // owner → testServerOrigin

type testServerOrigin struct {
	test  string
	warns *syncBuffer // the server's warnings (a failed removal says why)
}

// origin says which test's server owns a machine, and what that server warned of.
func origin(owner string) string {
	v, ok := testServers.Load(owner)
	if !ok {
		return "made by no test server of this process"
	}
	o := v.(testServerOrigin)
	return fmt.Sprintf("made by %s's server, which warned:\n%s", o.test, lastLines(o.warns.String(), 20))
}

// close shuts the server down now (it is also done at cleanup).
func (ts *testServer) close() { ts.once.Do(ts.stop) }

// with returns the same server bound to another (sub)test, so helpers fail the right test.
func (ts *testServer) with(t testing.TB) *testServer {
	c := *ts
	c.t = t
	return &c
}

// response is an answer read whole.
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

func (r response) decode(t testing.TB, into any) {
	t.Helper()
	if err := json.Unmarshal(r.body, into); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
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

// request builds a request: body is marshalled to JSON unless it is a string, []byte or io.Reader (sent
// as is); a body's Content-Type is application/json. headers are name, value pairs applied after, in
// order ("" removes one, "Host" sets the request's host).
func (ts *testServer) request(ctx context.Context, method, path string, body any, headers []string) *http.Request {
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
	req, err := http.NewRequestWithContext(ctx, method, ts.url+path, rd)
	if err != nil {
		ts.t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		switch k, v := headers[i], headers[i+1]; {
		case k == "Host":
			req.Host = v
		case v == "":
			req.Header.Del(k)
		default:
			req.Header.Set(k, v)
		}
	}
	return req
}

// do sends a request and reads its answer (a 101's connection is closed unread).
func (ts *testServer) do(method, path string, body any, headers ...string) response {
	ts.t.Helper()
	res, err := (&http.Client{Timeout: 2 * time.Minute}).Do(ts.request(context.Background(), method, path, body, headers))
	if err != nil {
		ts.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	var b []byte
	if res.StatusCode != http.StatusSwitchingProtocols {
		if b, err = io.ReadAll(res.Body); err != nil {
			ts.t.Fatal(err)
		}
	}
	return response{status: res.StatusCode, header: res.Header, body: b}
}

// call is do failing the test unless the status is want; a non-nil into receives the decoded body.
func (ts *testServer) call(method, path string, body any, want int, into any) response {
	ts.t.Helper()
	r := ts.do(method, path, body)
	if r.status != want {
		ts.t.Fatalf("%s %s: status %d, want %d: %s", method, path, r.status, want, r.body)
	}
	if into != nil {
		r.decode(ts.t, into)
	}
	return r
}

// wantError fails the test unless the answer is an envelope with this status and code; it returns the
// envelope's error object.
func (ts *testServer) wantError(method, path string, body any, status int, code string) map[string]any {
	ts.t.Helper()
	r := ts.do(method, path, body)
	if r.status != status || r.errCode(ts.t) != code {
		ts.t.Fatalf("%s %s: got %d %s, want %d %s", method, path, r.status, r.body, status, code)
	}
	return r.json(ts.t)["error"].(map[string]any)
}

// sseStream reads an event stream frame by frame.
type sseStream struct {
	resp   *http.Response
	sc     *bufio.Scanner
	cancel context.CancelFunc // hangs up
	done   bool               // `event: done` was read
}

// sseFrame is one frame: its id (0 when it has none), event name ("" for plain data) and data.
type sseFrame struct {
	id          int
	event, data string
}

// sse sends a request whose answer must be an event stream (200, text/event-stream); it is closed at
// cleanup.
func (ts *testServer) sse(method, path string, body any, headers ...string) *sseStream {
	ts.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := http.DefaultClient.Do(ts.request(ctx, method, path, body, headers))
	if err != nil {
		cancel()
		ts.t.Fatal(err)
	}
	ts.t.Cleanup(func() { cancel(); resp.Body.Close() })
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		ts.t.Fatalf("stream %s: %d %s %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	return &sseStream{resp: resp, sc: sc, cancel: cancel}
}

// frame returns the next frame; ok is false at the end of the stream.
func (s *sseStream) frame() (f sseFrame, ok bool) {
	for s.sc.Scan() {
		line := s.sc.Text()
		if v, ok := strings.CutPrefix(line, "id: "); ok {
			f.id, _ = strconv.Atoi(v)
		} else if v, ok := strings.CutPrefix(line, "event: "); ok {
			f.event = v
			s.done = s.done || v == "done"
		} else if v, ok := strings.CutPrefix(line, "data: "); ok {
			f.data = v
		} else if line == "" && f != (sseFrame{}) {
			return f, true
		}
	}
	return f, false
}

// next returns the next data event, with type "stream_error" for an error frame, or nil at `event: done`
// and at the end of the stream.
func (s *sseStream) next() map[string]any {
	for f, ok := s.frame(); ok && f.event != "done"; f, ok = s.frame() {
		var m map[string]any
		if json.Unmarshal([]byte(f.data), &m) != nil {
			continue
		}
		if f.event == "error" {
			m["type"] = "stream_error"
		}
		return m
	}
	return nil
}

// until reads events until one of type typ, returning it (fails at the end of the stream).
func (s *sseStream) until(t testing.TB, typ string) map[string]any {
	t.Helper()
	for {
		ev := s.next()
		if ev == nil {
			t.Fatalf("stream ended before %s", typ)
		}
		if ev["type"] == typ {
			return ev
		}
	}
}

func (s *sseStream) all() []map[string]any {
	var out []map[string]any
	for ev := s.next(); ev != nil; ev = s.next() {
		out = append(out, ev)
	}
	return out
}

// close hangs up.
func (s *sseStream) close() {
	s.cancel()
	s.resp.Body.Close()
}

// upgradeHeaders are a WebSocket handshake's, for do: a refused upgrade is an ordinary answer.
func upgradeHeaders() []string {
	return []string{"Upgrade", "websocket", "Connection", "Upgrade", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==",
		"Sec-WebSocket-Version", "13"}
}

// tryDial opens a WebSocket to path; origin "" means the server's own.
func (ts *testServer) tryDial(path, origin string) (*websocket.Conn, error) {
	return websocket.Dial("ws"+strings.TrimPrefix(ts.url, "http")+path, "", firstNonEmpty(origin, ts.url))
}

// dial is tryDial failing the test; the socket is closed at cleanup.
func (ts *testServer) dial(path, origin string) *websocket.Conn {
	ts.t.Helper()
	c, err := ts.tryDial(path, origin)
	if err != nil {
		ts.t.Fatalf("dial %s: %v", path, err)
	}
	ts.t.Cleanup(func() { c.Close() })
	return c
}

// frame reads one JSON frame with a deadline.
func frame(t testing.TB, c *websocket.Conn) map[string]any {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(60 * time.Second))
	var m map[string]any
	if err := websocket.JSON.Receive(c, &m); err != nil {
		t.Fatalf("read frame: %v", err)
	}
	return m
}

func sendFrame(t testing.TB, c *websocket.Conn, v any) {
	t.Helper()
	if err := websocket.JSON.Send(c, v); err != nil {
		t.Fatalf("send frame: %v", err)
	}
}

// eventually polls cond, ever less often, until it holds; it fails the test after 90 s (generous: CI's
// 2-core host runs docker, podman and sandbox suites side by side, at load averages above 15).
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for d := time.Millisecond; !cond(); d = min(2*d, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(d)
	}
}

// serveBinary runs bin (an agentd build) as `agentd serve --port 0` over home, whose config.yaml is cfg
// (an instance id carrying this run's owner prefix is written first), with env added to this process's
// environment. The answer talks to it over HTTP (its s is nil); at cleanup the server is stopped with
// SIGTERM (so it removes what it made on the host) and killed if it does not end.
func serveBinary(t testing.TB, bin, home, cfg string, env ...string) (*testServer, *exec.Cmd) {
	t.Helper()
	os.WriteFile(home+"/instance-id", []byte(testOwnerPrefix()+randomChars(4)+"\n"), 0o600)
	if err := os.WriteFile(home+"/config.yaml", []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--port", "0")
	cmd.Env = append(append(os.Environ(), "AGENT_HOME="+home, "AGENT_TOKEN="), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var log syncBuffer
	sc := bufio.NewScanner(stderr)
	addr := ""
	for addr == "" && sc.Scan() {
		log.Write([]byte(sc.Text() + "\n"))
		addr, _ = listeningAddr(sc.Text() + "\n")
	}
	copied := make(chan struct{})
	go func() { defer close(copied); io.Copy(&log, stderr) }()
	stop := func() {
		stopGently(cmd)
		<-copied
		if t.Failed() {
			t.Logf("%s serve's log:\n%s", bin, log.String())
		}
	}
	if addr == "" {
		stop()
		t.Fatalf("%s serve did not start:\n%s", bin, log.String())
	}
	ts := &testServer{t: t, url: "http://" + addr, once: &sync.Once{}, stop: stop}
	t.Cleanup(ts.close)
	return ts, cmd
}

// stopGently stops an agentd process as a user does (SIGTERM: its trials, channels and machines' streams
// close) and waits; SIGKILL only if it has not ended within a minute. A process already waited for returns
// at once.
func stopGently(cmd *exec.Cmd) {
	cmd.Process.Signal(syscall.SIGTERM)
	ended := make(chan struct{})
	go func() { cmd.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		<-ended
	}
}
