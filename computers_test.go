package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
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
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/net/websocket"
)

const testImage = "agentd-test:bookworm"

// testEnv is one agentd server on loopback with its own data directory.
type testEnv struct {
	t    *testing.T
	s    *server
	ts   *httptest.Server
	home string
	once *sync.Once
	keep bool // leave machines running at close (restart tests)
}

// with returns the same server bound to another (sub)test, so helpers fail the right test.
func (e *testEnv) with(t *testing.T) *testEnv {
	c := *e
	c.t = t
	return &c
}

func newTestEnv(t *testing.T, home string, mod func(*config)) *testEnv {
	t.Helper()
	if home == "" {
		home = t.TempDir()
	}
	// Owner ids carry this test process's pid, so the leak check sees only what this run created even
	// when another run shares the engine.
	if _, err := os.Stat(home + "/instance-id"); err != nil {
		os.WriteFile(home+"/instance-id", []byte(testOwnerPrefix()+randomChars(4)+"\n"), 0o600)
	}
	cfg := defaultConfig()
	cfg.Home = home
	cfg.getenv = os.Getenv
	cfg.ReaperIntervalSec = 3600 // tests sweep by hand
	cfg.Images = map[string]string{"base": testImage, "python": testImage, "node": testImage, "full": testImage}
	if mod != nil {
		mod(&cfg)
	}
	s, err := newServer(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Now)
	if err != nil {
		t.Fatalf("newServer: %v", err)
	}
	e := &testEnv{t: t, s: s, ts: httptest.NewServer(s), home: home, once: &sync.Once{}}
	t.Cleanup(e.close)
	return e
}

func (e *testEnv) close() {
	e.once.Do(func() {
		if !e.keep { // a failed test must not leak machines
			recs, _ := e.s.store.ListComputers(context.Background())
			for _, m := range recs {
				e.s.computers.destroy(context.Background(), m.ID, "")
			}
		}
		e.s.cancelStream()
		e.s.hub.Close()
		e.ts.Close()
		e.s.Close(context.Background())
	})
}

// do sends a request; body is JSON unless it is []byte.
func (e *testEnv) do(method, path string, body any) (int, []byte) {
	e.t.Helper()
	var rd io.Reader
	ct := "application/json"
	switch b := body.(type) {
	case nil:
	case []byte:
		rd, ct = bytes.NewReader(b), "application/octet-stream"
	case string:
		rd = strings.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, e.ts.URL+path, rd)
	req.Header.Set("Content-Type", ct)
	cl := &http.Client{Timeout: 120 * time.Second}
	resp, err := cl.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func (e *testEnv) json(method, path string, body any, want int, into any) {
	e.t.Helper()
	st, b := e.do(method, path, body)
	if st != want {
		e.t.Fatalf("%s %s: status %d, want %d: %s", method, path, st, want, b)
	}
	if into != nil {
		if err := json.Unmarshal(b, into); err != nil {
			e.t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
}

// wantError checks status and code of an error envelope and returns it.
func (e *testEnv) wantError(method, path string, body any, status int, code string) map[string]any {
	e.t.Helper()
	st, b := e.do(method, path, body)
	var env struct {
		Error map[string]any `json:"error"`
	}
	json.Unmarshal(b, &env)
	if st != status || env.Error["code"] != code {
		e.t.Fatalf("%s %s: got %d %s, want %d %s", method, path, st, b, status, code)
	}
	if _, ok := env.Error["hint"]; !ok {
		e.t.Fatalf("%s %s: envelope without hint: %s", method, path, b)
	}
	return env.Error
}

func (e *testEnv) create(spec map[string]any) ComputerInfo {
	e.t.Helper()
	var m ComputerInfo
	e.json("POST", "/v1/computers", spec, 201, &m)
	return m
}

func (e *testEnv) exec(id string, body map[string]any) ExecResult {
	e.t.Helper()
	var r ExecResult
	e.json("POST", "/v1/computers/"+id+"/exec", body, 200, &r)
	return r
}

// processes lists the command lines of the processes visible inside the machine.
func (e *testEnv) processes(id string) string {
	e.t.Helper()
	r := e.exec(id, map[string]any{"cmd": `for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < "$f" 2>/dev/null; echo; done`})
	return r.Stdout
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// engineAvailable reports whether a provider can run here; with AGENT_TEST_DOCKER=1 a missing engine
// fails the test instead of skipping it.
func requireProvider(t *testing.T, name string) {
	t.Helper()
	if name == "local" {
		return
	}
	e := newTestEnv(t, "", nil)
	pr := e.s.computers.probe(context.Background(), e.s.computers.providerByName(name))
	e.close()
	if !pr.available {
		if os.Getenv("AGENT_TEST_DOCKER") == "1" {
			t.Fatalf("provider %s is unavailable with AGENT_TEST_DOCKER=1: %s (%s)", name, pr.reason, pr.hint)
		}
		t.Skipf("provider %s unavailable: %s (set AGENT_TEST_DOCKER=1 to make this a failure)", name, pr.reason)
	}
	if out, err := exec.Command(name, "image", "inspect", testImage).CombinedOutput(); err != nil {
		t.Fatalf("provider %s: test image %s missing (run .ci/run to build it): %s", name, testImage, out)
	}
}

func tarGz(t *testing.T, entries []tar.Header, bodies map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, h := range entries {
		h := h
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(bodies[h.Name]))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(bodies[h.Name]))
		}
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

// TestComputerConformance is THE conformance suite, run against every provider.
func TestComputerConformance(t *testing.T) {
	for i, prov := range []string{"local", "docker", "podman"} {
		t.Run(prov, func(t *testing.T) {
			t.Parallel()
			requireProvider(t, prov)
			conformance(t, prov, 41000+i*10)
		})
	}
	t.Cleanup(func() { checkNoLeaks(t) })
}

func testOwnerPrefix() string { return fmt.Sprintf("agdtest%d-", os.Getpid()) }

// checkNoLeaks: the suite ends with no agentd container left on any engine.
func checkNoLeaks(t *testing.T) {
	for _, eng := range []string{"docker", "podman"} {
		if _, err := exec.LookPath(eng); err != nil {
			continue
		}
		format := `{{.Names}} {{.Label "agentd.owner"}}`
		if eng == "podman" {
			format = `{{.Names}} {{index .Labels "agentd.owner"}}`
		}
		out, err := exec.Command(eng, "ps", "-a", "--filter", "label=agentd.id", "--format", format).CombinedOutput()
		if err != nil {
			if eng == "docker" && exec.Command(eng, "info").Run() != nil {
				continue // daemon not running: nothing could leak
			}
			t.Errorf("%s ps: %v: %s", eng, err, out)
			continue
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if f := strings.Fields(line); len(f) == 2 && strings.HasPrefix(f[1], testOwnerPrefix()) {
				t.Errorf("%s: leaked container: %s", eng, line)
			}
		}
	}
}

func conformance(t *testing.T, prov string, portBase int) {
	e := newTestEnv(t, "", func(c *config) { c.MaxComputers = 4 })
	isLocal := prov == "local"
	m := e.create(map[string]any{"provider": prov, "name": "conf-" + prov, "idleTimeoutSec": 0, "env": map[string]string{"SPEC_VAR": "from-spec"}})
	id := m.ID
	t.Cleanup(func() { e.do("DELETE", "/v1/computers/"+id, nil) })
	if m.State != "running" || m.Provider != prov || m.Workdir != "/work" || !strings.HasPrefix(id, "cmp_") {
		t.Fatalf("created: %+v", m)
	}
	if m.Isolated == isLocal {
		t.Fatalf("isolated=%v for %s", m.Isolated, prov)
	}

	t.Run("lifecycle", func(t *testing.T) {
		e := e.with(t)
		var got ComputerInfo
		e.json("GET", "/v1/computers/conf-"+prov, nil, 200, &got) // by unique name
		if got.ID != id {
			t.Fatalf("by name: %+v", got)
		}
		sub, _ := e.s.hub.subscribe()
		defer e.s.hub.unsubscribe(sub)
		m2 := e.create(map[string]any{"provider": prov, "idleTimeoutSec": 0, "labels": map[string]string{"team": "a"}})
		var list struct{ Computers []ComputerInfo }
		e.json("POST", "/v1/computers/"+m2.ID+"/stop", nil, 200, &got)
		if got.State != "stopped" {
			t.Fatalf("stop: %+v", got)
		}
		e.json("GET", "/v1/computers", nil, 200, &list)
		if slices.ContainsFunc(list.Computers, func(c ComputerInfo) bool { return c.ID == m2.ID }) {
			t.Fatal("a stopped machine is listed without ?all=true")
		}
		e.json("GET", "/v1/computers?all=true", nil, 200, &list)
		if !slices.ContainsFunc(list.Computers, func(c ComputerInfo) bool { return c.ID == m2.ID }) {
			t.Fatal("a stopped machine is missing from ?all=true")
		}
		e.wantError("POST", "/v1/computers/"+m2.ID+"/exec", map[string]any{"cmd": "true"}, 500, codeComputerFailed)
		e.json("POST", "/v1/computers/"+m2.ID+"/start", nil, 200, &got)
		if got.State != "running" {
			t.Fatalf("start: %+v", got)
		}
		if r := e.exec(m2.ID, map[string]any{"cmd": "echo again"}); r.Stdout != "again\n" {
			t.Fatalf("exec after start: %+v", r)
		}
		// A restarted machine's user can still write its workspace and /tmp (Docker resets tmpfs modes).
		if r := e.exec(m2.ID, map[string]any{"cmd": "touch w && test -w /tmp && echo ok"}); r.Stdout != "ok\n" {
			t.Fatalf("write after start: %+v", r)
		}
		if st, b := e.do("DELETE", "/v1/computers/"+m2.ID, nil); st != 204 {
			t.Fatalf("delete: %d %s", st, b)
		}
		e.wantError("GET", "/v1/computers/"+m2.ID, nil, 404, codeComputerNotFound)
		var seen []string
		for len(seen) < 4 {
			select {
			case ev := <-sub.ch:
				if ev.Topic != "computers" {
					continue
				}
				var id string
				switch p := ev.Payload.(type) {
				case *ComputerInfo:
					id = p.ID
				case map[string]any:
					id, _ = p["computerId"].(string)
				}
				if id == m2.ID {
					seen = append(seen, ev.Type)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("computers events: %v", seen)
			}
		}
		if want := []string{"computer_created", "computer_stopped", "computer_started", "computer_destroyed"}; !slices.Equal(seen, want) {
			t.Fatalf("computers events %v, want %v", seen, want)
		}
		e.wantError("POST", "/v1/computers/"+m2.ID+"/exec", map[string]any{"cmd": "true"}, 404, codeComputerNotFound)
		e.wantError("DELETE", "/v1/computers/"+m2.ID, nil, 404, codeComputerNotFound)
		e.wantError("GET", "/v1/computers/cmp_nope", nil, 404, codeComputerNotFound)
	})

	t.Run("setup", func(t *testing.T) {
		t.Parallel()
		e := e.with(t)
		ok := e.create(map[string]any{"provider": prov, "setup": "echo provisioned > setup.txt"})
		if r := e.exec(ok.ID, map[string]any{"cmd": "cat setup.txt"}); r.Stdout != "provisioned\n" {
			t.Fatalf("setup: %+v", r)
		}
		e.json("DELETE", "/v1/computers/"+ok.ID, nil, 204, nil)
		env := e.wantError("POST", "/v1/computers", map[string]any{"provider": prov, "setup": "echo broken >&2; exit 3"}, 500, codeComputerFailed)
		d, _ := env["details"].(map[string]any)
		var bad ComputerInfo
		e.json("GET", "/v1/computers/"+fmt.Sprint(d["computerId"]), nil, 200, &bad)
		if bad.State != "error" || !strings.Contains(bad.Error, "broken") {
			t.Fatalf("failed setup: %+v", bad)
		}
		e.json("DELETE", "/v1/computers/"+bad.ID, nil, 204, nil)
		if isLocal {
			e.wantError("POST", "/v1/computers", map[string]any{"provider": prov, "packages": []string{"jq"}}, 501, codeNotImplemented)
			return
		}
		if os.Getenv("AGENT_TEST_PACKAGES") == "1" { // needs a Debian mirror reachable from the machine
			pk := e.create(map[string]any{"provider": prov, "packages": []string{"jq"}})
			if r := e.exec(pk.ID, map[string]any{"cmd": "echo '{\"a\":7}' | jq .a; id -u"}); r.Stdout != "7\n1000\n" {
				t.Fatalf("packages: %+v", r)
			}
			e.json("DELETE", "/v1/computers/"+pk.ID, nil, 204, nil)
		}
		// persist keeps /work across stop and start; without it /work is a tmpfs.
		p := e.create(map[string]any{"provider": prov, "persist": true, "workdir": "/work/proj"})
		e.exec(p.ID, map[string]any{"cmd": "pwd > where && echo kept > f"})
		e.json("POST", "/v1/computers/"+p.ID+"/stop", nil, 200, nil)
		e.json("POST", "/v1/computers/"+p.ID+"/start", nil, 200, nil)
		if r := e.exec(p.ID, map[string]any{"cmd": "cat f where"}); r.Stdout != "kept\n/work/proj\n" {
			t.Fatalf("persist: %+v", r)
		}
		e.json("DELETE", "/v1/computers/"+p.ID, nil, 204, nil)
		// The container's hardening is real.
		n := e.create(map[string]any{"provider": prov, "network": map[string]any{"mode": "none"}})
		r := e.exec(n.ID, map[string]any{"cmd": "id -u; touch /etc/x 2>/dev/null && echo root-writable; grep CapEff /proc/self/status"})
		if !strings.HasPrefix(r.Stdout, "1000\n") || strings.Contains(r.Stdout, "root-writable") || !strings.Contains(r.Stdout, "0000000000000000") {
			t.Fatalf("hardening: %+v", r)
		}
		env = e.wantError("POST", "/v1/computers/"+n.ID+"/ports", map[string]any{"port": 80}, 500, codeComputerFailed)
		if !strings.Contains(env["message"].(string), "network mode none") {
			t.Fatalf("ports with network none: %v", env)
		}
		e.json("DELETE", "/v1/computers/"+n.ID, nil, 204, nil)
	})

	t.Run("exec", func(t *testing.T) {
		e := e.with(t)
		if r := e.exec(id, map[string]any{"cmd": "echo out; echo err >&2; exit 3"}); r.ExitCode != 3 || r.Stdout != "out\n" || r.Stderr != "err\n" || r.TimedOut {
			t.Fatalf("non-zero exit: %+v", r)
		}
		if r := e.exec(id, map[string]any{"cmd": []string{"echo", "a b", "$HOME"}}); r.Stdout != "a b $HOME\n" {
			t.Fatalf("argv: %+v", r)
		}
		if r := e.exec(id, map[string]any{"cmd": []string{"no-such-program-x"}}); r.ExitCode != 127 {
			t.Fatalf("argv with a missing program: %+v", r)
		}
		if r := e.exec(id, map[string]any{"cmd": "cat", "stdin": "hello\nworld"}); r.Stdout != "hello\nworld" {
			t.Fatalf("stdin: %+v", r)
		}
		if r := e.exec(id, map[string]any{"cmd": "echo $FOO $SPEC_VAR", "env": map[string]string{"FOO": "bar baz"}}); r.Stdout != "bar baz from-spec\n" {
			t.Fatalf("env: %+v", r)
		}
		if r := e.exec(id, map[string]any{"cmd": "env"}); strings.Contains(r.Stdout, "AGENT_TOKEN") || strings.Contains(r.Stdout, "_API_KEY") {
			t.Fatalf("server environment leaked into the machine: %s", r.Stdout)
		}
		e.exec(id, map[string]any{"cmd": "mkdir -p sub/dir"})
		if r := e.exec(id, map[string]any{"cmd": "pwd", "cwd": "/work/sub/dir"}); !strings.HasSuffix(r.Stdout, "/work/sub/dir\n") {
			t.Fatalf("cwd: %+v", r)
		}
		if r := e.exec(id, map[string]any{"cmd": "pwd", "cwd": "sub"}); !strings.HasSuffix(r.Stdout, "/work/sub\n") {
			t.Fatalf("relative cwd: %+v", r)
		}
		// Timeout: partial output, timedOut, 124, and the tree is gone inside the machine.
		sleepN := fmt.Sprint(portBase + 31000000)
		r := e.exec(id, map[string]any{"cmd": "echo started; sleep " + sleepN + "; echo never", "timeoutSec": 1})
		if !r.TimedOut || r.ExitCode != 124 || r.Stdout != "started\n" {
			t.Fatalf("timeout: %+v", r)
		}
		eventually(t, "the timed-out tree to die", func() bool { return !strings.Contains(e.processes(id), "sleep "+sleepN) })
		// A background child holding stdout must not hold the exec; it keeps running.
		bgN := fmt.Sprint(portBase + 32000000)
		r = e.exec(id, map[string]any{"cmd": "sleep " + bgN + " & echo bg", "timeoutSec": 60})
		if r.TimedOut || r.ExitCode != 0 || r.Stdout != "bg\n" {
			t.Fatalf("background child: %+v", r)
		}
		if !strings.Contains(e.processes(id), "sleep "+bgN) {
			t.Fatal("the background child should keep running")
		}
		e.exec(id, map[string]any{"cmd": killScript("sleep", bgN)})
		// Truncation keeps head and tail.
		r = e.exec(id, map[string]any{"cmd": "printf 'HEAD'; head -c 100000 /dev/zero | tr '\\0' 'x'; printf 'TAIL'", "maxOutputBytes": 1000})
		if !r.Truncated || !strings.HasPrefix(r.Stdout, "HEADx") || !strings.HasSuffix(r.Stdout, "xTAIL") || len(r.Stdout) > 1100 || !strings.Contains(r.Stdout, "bytes elided") {
			t.Fatalf("truncation: truncated=%v len=%d", r.Truncated, len(r.Stdout))
		}
		// UTF-8 is never split, whatever the cap.
		for _, capN := range []int{7, 100, 101, 1001} {
			r = e.exec(id, map[string]any{"cmd": "i=0; while [ $i -lt 700 ]; do printf 'é€'; i=$((i+1)); done", "maxOutputBytes": capN})
			if !utf8.ValidString(r.Stdout) || strings.ContainsRune(r.Stdout, utf8.RuneError) || !r.Truncated {
				t.Fatalf("utf-8 with cap %d: %q", capN, r.Stdout)
			}
		}
		if isLocal {
			e.wantError("POST", "/v1/computers/"+id+"/exec", map[string]any{"cmd": "true", "tty": true}, 501, codeNotImplemented)
			e.wantError("POST", "/v1/computers/"+id+"/exec", map[string]any{"cmd": "true", "user": "root"}, 501, codeNotImplemented)
		} else {
			if r := e.exec(id, map[string]any{"cmd": "test -t 1 && echo tty; exit 4", "tty": true}); r.ExitCode != 4 || !strings.HasPrefix(r.Stdout, "tty") {
				t.Fatalf("tty: %+v", r)
			}
			if r := e.exec(id, map[string]any{"cmd": "id -u", "user": "0"}); r.Stdout != "0\n" {
				t.Fatalf("user: %+v", r)
			}
		}
		// The command policy.
		env := e.wantError("POST", "/v1/computers/"+id+"/exec", map[string]any{"cmd": "sudo ls"}, 403, codeExecDenied)
		if d, _ := env["details"].(map[string]any); d["rule"] != "sudo" {
			t.Fatalf("denied without details.rule: %v", env)
		}
		if r := e.exec(id, map[string]any{"cmd": "echo shutdown >> notes; grep -r shutdown notes"}); r.ExitCode != 0 {
			t.Fatalf("allowed command: %+v", r)
		}
	})

	t.Run("exec-stream", func(t *testing.T) {
		e := e.with(t)
		frames, _ := streamExec(t, e, id, map[string]any{"cmd": "echo out; echo err >&2; exit 2"}, nil)
		var sawOut, sawErr bool
		var exit map[string]any
		for _, f := range frames {
			switch f["type"] {
			case "stdout":
				sawOut = sawOut || strings.Contains(f["data"].(string), "out")
			case "stderr":
				sawErr = sawErr || strings.Contains(f["data"].(string), "err")
			case "exit":
				exit = f["result"].(map[string]any)
			}
		}
		if !sawOut || !sawErr || exit == nil || exit["exitCode"].(float64) != 2 {
			t.Fatalf("frames: %v", frames)
		}
		// A client disconnect kills the process tree inside the machine.
		n := fmt.Sprint(portBase + 33000000)
		streamExec(t, e, id, map[string]any{"cmd": "echo ready; sleep " + n}, func(f map[string]any) bool { return f["type"] == "stdout" })
		eventually(t, "the disconnected exec's tree to die", func() bool { return !strings.Contains(e.processes(id), "sleep "+n) })
		e.wantError("POST", "/v1/computers/"+id+"/exec/stream", map[string]any{"cmd": "sudo id"}, 403, codeExecDenied)
	})

	t.Run("files", func(t *testing.T) {
		e := e.with(t)
		bin := make([]byte, 256*4)
		for i := range bin {
			bin[i] = byte(i)
		}
		if st, b := e.do("PUT", "/v1/computers/"+id+"/fs/write?path=/work/dir/bin.dat", bin); st != 204 {
			t.Fatalf("write: %d %s", st, b)
		}
		st, got := e.do("GET", "/v1/computers/"+id+"/fs/read?path=dir/bin.dat", nil)
		if st != 200 || !bytes.Equal(got, bin) {
			t.Fatalf("binary round trip: %d len %d", st, len(got))
		}
		e.s.computers.readLimit = 100
		e.wantError("GET", "/v1/computers/"+id+"/fs/read?path=dir/bin.dat", nil, 429, codeQuota)
		e.s.computers.readLimit = 256 << 20
		if r := e.exec(id, map[string]any{"cmd": "wc -c < dir/bin.dat"}); strings.TrimSpace(r.Stdout) != "1024" {
			t.Fatalf("written file seen by exec: %+v", r)
		}
		e.json("PUT", "/v1/computers/"+id+"/fs/write?path=/tmp/t.json", `{"a":1}`, 204, nil)
		var ls struct{ Entries []DirEntry }
		e.json("GET", "/v1/computers/"+id+"/fs?path=/work/dir", nil, 200, &ls)
		if len(ls.Entries) != 1 || ls.Entries[0].Name != "bin.dat" || ls.Entries[0].Type != "file" || ls.Entries[0].Size != 1024 || ls.Entries[0].Path != "/work/dir/bin.dat" {
			t.Fatalf("list: %+v", ls.Entries)
		}
		e.json("PUT", "/v1/computers/"+id+"/fs/write?path=a-file", []byte("a"), 204, nil) // sorts before "dir"
		e.json("GET", "/v1/computers/"+id+"/fs?path=/work", nil, 200, &ls)
		if len(ls.Entries) < 2 || ls.Entries[0].Type != "dir" {
			t.Fatalf("directories first: %+v", ls.Entries)
		}
		// Escapes.
		for _, p := range []string{"../etc/passwd", "/etc/passwd", "/work/../etc/passwd", "/proc/self/environ", "/", "/var"} {
			e.wantError("GET", "/v1/computers/"+id+"/fs/read?path="+p, nil, 403, codeFSDenied)
		}
		e.exec(id, map[string]any{"cmd": "ln -sf /etc etc-link; ln -sf / root-link; ln -sf /etc/passwd pw"})
		for _, p := range []string{"/work/etc-link/passwd", "/work/pw", "/work/root-link/etc/hostname"} {
			env := e.wantError("GET", "/v1/computers/"+id+"/fs/read?path="+p, nil, 403, codeFSDenied)
			if !strings.Contains(env["message"].(string), "symlink") {
				t.Fatalf("%s: %v", p, env)
			}
		}
		e.wantError("GET", "/v1/computers/"+id+"/fs?path=/work/root-link", nil, 403, codeFSDenied)
		e.wantError("PUT", "/v1/computers/"+id+"/fs/write?path=/work/etc-link/evil", []byte("x"), 403, codeFSDenied)
		// Deleting the link itself is fine; its target is untouched.
		e.json("DELETE", "/v1/computers/"+id+"/fs?path=/work/pw", nil, 204, nil)
		for _, p := range []string{"/work", "/tmp", "/work/", "/work/.", "dir/.."} {
			env := e.wantError("DELETE", "/v1/computers/"+id+"/fs?path="+p+"&recursive=true", nil, 403, codeFSDenied)
			if !strings.Contains(env["message"].(string), "workspace root") {
				t.Fatalf("root delete %s: %v", p, env)
			}
		}
		e.wantError("DELETE", "/v1/computers/"+id+"/fs?path=/work/dir", nil, 403, codeFSDenied) // not empty
		e.json("DELETE", "/v1/computers/"+id+"/fs?path=/work/dir&recursive=true", nil, 204, nil)
		e.wantError("GET", "/v1/computers/"+id+"/fs/read?path=/work/dir/bin.dat", nil, 403, codeFSDenied)
		e.wantError("GET", "/v1/computers/"+id+"/fs/read", nil, 422, codeSpecInvalid)
		e.wantError("GET", "/v1/computers/"+id+"/fs/read?path=/work", nil, 403, codeFSDenied)
	})

	t.Run("upload-download", func(t *testing.T) {
		e := e.with(t)
		good := tarGz(t, []tar.Header{
			{Name: "proj/", Typeflag: tar.TypeDir, Mode: 0o755},
			{Name: "proj/a.txt", Typeflag: tar.TypeReg},
			{Name: "proj/link", Typeflag: tar.TypeSymlink, Linkname: "a.txt"},
		}, map[string]string{"proj/a.txt": "alpha"})
		var up map[string]any
		e.json("POST", "/v1/computers/"+id+"/fs/upload?path=/work/up", good, 200, &up)
		if up["path"] != "/work/up" || up["entries"].(float64) != 3 || up["bytes"].(float64) != float64(len(good)) {
			t.Fatalf("upload answer: %v", up)
		}
		if r := e.exec(id, map[string]any{"cmd": "cat up/proj/a.txt up/proj/link"}); r.Stdout != "alphaalpha" {
			t.Fatalf("uploaded: %+v", r)
		}
		bad := map[string][]tar.Header{
			"dotdot":   {{Name: "ok.txt", Typeflag: tar.TypeReg}, {Name: "../x", Typeflag: tar.TypeReg}},
			"absolute": {{Name: "ok.txt", Typeflag: tar.TypeReg}, {Name: "/tmp/abs", Typeflag: tar.TypeReg}},
			"symlink":  {{Name: "ok.txt", Typeflag: tar.TypeReg}, {Name: "etc", Typeflag: tar.TypeSymlink, Linkname: "/etc"}},
			"relative": {{Name: "ok.txt", Typeflag: tar.TypeReg}, {Name: "l", Typeflag: tar.TypeSymlink, Linkname: "../../.."}},
			"through":  {{Name: "ok.txt", Typeflag: tar.TypeReg}, {Name: "d", Typeflag: tar.TypeSymlink, Linkname: "."}, {Name: "d/x", Typeflag: tar.TypeReg}},
			"hardlink": {{Name: "ok.txt", Typeflag: tar.TypeReg}, {Name: "h", Typeflag: tar.TypeLink, Linkname: "../../etc/passwd"}},
			"device":   {{Name: "ok.txt", Typeflag: tar.TypeReg}, {Name: "dev", Typeflag: tar.TypeChar}},
		}
		for name, hs := range bad {
			dir := "/work/bad-" + name
			e.wantError("POST", "/v1/computers/"+id+"/fs/upload?path="+dir, tarGz(t, hs, map[string]string{"ok.txt": "x"}), 403, codeFSDenied)
			if r := e.exec(id, map[string]any{"cmd": "ls " + strings.TrimPrefix(dir, "/work/") + " x ../tmp/abs 2>/dev/null | wc -l"}); strings.TrimSpace(r.Stdout) != "0" {
				t.Fatalf("%s: something was written: %+v", name, r)
			}
		}
		// A link planted inside the machine does not redirect an upload.
		e.exec(id, map[string]any{"cmd": "mkdir -p trap && ln -sfn /etc trap/sub"})
		e.wantError("POST", "/v1/computers/"+id+"/fs/upload?path=/work/trap", tarGz(t, []tar.Header{{Name: "sub/evil", Typeflag: tar.TypeReg}}, nil), 403, codeFSDenied)
		// A hard link naming a target through that planted link would share an inode outside the jail.
		e.wantError("POST", "/v1/computers/"+id+"/fs/upload?path=/work/trap", tarGz(t, []tar.Header{{Name: "h", Typeflag: tar.TypeLink, Linkname: "sub/passwd"}}, nil), 403, codeFSDenied)
		if r := e.exec(id, map[string]any{"cmd": "ls trap/h 2>/dev/null | wc -l"}); strings.TrimSpace(r.Stdout) != "0" {
			t.Fatalf("hard link through a planted link was written: %+v", r)
		}
		// ... nor when the archive first adds its own (lexically inside) link to the planted one.
		e.wantError("POST", "/v1/computers/"+id+"/fs/upload?path=/work/trap", tarGz(t, []tar.Header{
			{Name: "x", Typeflag: tar.TypeSymlink, Linkname: "sub"},
			{Name: "h2", Typeflag: tar.TypeLink, Linkname: "x/passwd"},
		}, nil), 403, codeFSDenied)
		if r := e.exec(id, map[string]any{"cmd": "ls trap/h2 trap/x 2>/dev/null | wc -l"}); strings.TrimSpace(r.Stdout) != "0" {
			t.Fatalf("hard link through an archive link was written: %+v", r)
		}
		e.wantError("POST", "/v1/computers/"+id+"/fs/upload?path=/work/x", []byte("not a tarball"), 422, codeSpecInvalid)
		// A decompression bomb is stopped without writing anything.
		e.s.computers.uploadLimit = 4 << 20
		var bomb bytes.Buffer
		zw := gzip.NewWriter(&bomb)
		tw := tar.NewWriter(zw)
		tw.WriteHeader(&tar.Header{Name: "zeros", Typeflag: tar.TypeReg, Size: 64 << 20, Mode: 0o644})
		tw.Write(make([]byte, 64<<20))
		tw.Close()
		zw.Close()
		env := e.wantError("POST", "/v1/computers/"+id+"/fs/upload?path=/work/bomb", bomb.Bytes(), 429, codeQuota)
		if d, _ := env["details"].(map[string]any); d["limit"] == nil {
			t.Fatalf("bomb: %v", env)
		}
		if r := e.exec(id, map[string]any{"cmd": "ls bomb 2>/dev/null | wc -l"}); strings.TrimSpace(r.Stdout) != "0" {
			t.Fatal("bomb: something was written")
		}
		// Download: entries relative to the parent of path.
		st, b := e.do("GET", "/v1/computers/"+id+"/fs/download?path=/work/up/proj", nil)
		if st != 200 {
			t.Fatalf("download: %d %s", st, b)
		}
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(zr)
		files := map[string]string{}
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			c, _ := io.ReadAll(tr)
			files[h.Name] = string(c)
		}
		if files["proj/a.txt"] != "alpha" {
			t.Fatalf("download content: %v", files)
		}
		e.s.computers.downloadLimit = 10
		env = e.wantError("GET", "/v1/computers/"+id+"/fs/download?path=/work/up", nil, 429, codeQuota)
		if d, _ := env["details"].(map[string]any); d["limit"].(float64) != 10 || d["bytes"].(float64) <= 10 {
			t.Fatalf("download limit: %v", env)
		}
		e.s.computers.downloadLimit = 256 << 20
		e.wantError("GET", "/v1/computers/"+id+"/fs/download?path=/etc", nil, 403, codeFSDenied)
	})

	t.Run("ports", func(t *testing.T) {
		e := e.with(t)
		if _, err := exec.LookPath("python3"); isLocal && err != nil {
			t.Skip("the local port test serves with python3, which this host lacks")
		}
		port := portBase + 1
		if !isLocal {
			port = 8000
		}
		e.exec(id, map[string]any{"cmd": fmt.Sprintf("mkdir -p www && echo served-%s > www/index.html && cd www && nohup python3 -m http.server %d --bind 0.0.0.0 >/dev/null 2>&1 &", prov, port)})
		var b PortBinding
		e.json("POST", "/v1/computers/"+id+"/ports", map[string]any{"port": port}, 200, &b)
		if b.HostPort == 0 || b.URL == "" {
			t.Fatalf("binding: %+v", b)
		}
		var body string
		eventually(t, "the port to answer through its binding", func() bool {
			resp, err := http.Get(b.URL + "/index.html")
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			x, _ := io.ReadAll(resp.Body)
			body = string(x)
			return resp.StatusCode == 200
		})
		if strings.TrimSpace(body) != "served-"+prov {
			t.Fatalf("served: %q", body)
		}
		var b2 PortBinding
		e.json("POST", "/v1/computers/"+id+"/ports", map[string]any{"port": port}, 200, &b2)
		if b2.HostPort != b.HostPort || !b2.Reachable {
			t.Fatalf("not idempotent: %+v vs %+v", b, b2)
		}
		var got ComputerInfo
		e.json("GET", "/v1/computers/"+id, nil, 200, &got)
		if got.Ports[fmt.Sprint(port)].HostPort != b.HostPort || !got.Ports[fmt.Sprint(port)].Reachable {
			t.Fatalf("ports in info: %+v", got.Ports)
		}
		for _, bad := range []any{0, 65536, -1, "80", 1.5} {
			e.wantError("POST", "/v1/computers/"+id+"/ports", map[string]any{"port": bad}, 422, codeSpecInvalid)
		}
		e.wantError("POST", "/v1/computers/"+id+"/ports", map[string]any{}, 422, codeSpecInvalid)
		e.exec(id, map[string]any{"cmd": killScript("http.server", fmt.Sprint(port))})
		// reachable is checked when the info is read (cached for a second), not frozen at expose time.
		eventually(t, "the stopped server to show as unreachable", func() bool {
			var now ComputerInfo
			e.json("GET", "/v1/computers/"+id, nil, 200, &now)
			return !now.Ports[fmt.Sprint(port)].Reachable
		})
	})

	t.Run("terminal", func(t *testing.T) {
		e := e.with(t)
		// The 101 is written on the hijacked connection; it too carries the version header.
		req, _ := http.NewRequest("GET", e.ts.URL+"/v1/computers/"+id+"/terminal", nil)
		for k, v := range map[string]string{"Upgrade": "websocket", "Connection": "Upgrade",
			"Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version": "13"} {
			req.Header.Set(k, v)
		}
		if res, err := http.DefaultClient.Do(req); err != nil {
			t.Fatal(err)
		} else {
			res.Body.Close()
			if res.StatusCode != http.StatusSwitchingProtocols || res.Header.Get(versionHeader) != version {
				t.Fatalf("terminal upgrade: %d, %s=%q", res.StatusCode, versionHeader, res.Header.Get(versionHeader))
			}
		}
		wsURL := "ws" + strings.TrimPrefix(e.ts.URL, "http") + "/v1/computers/" + id + "/terminal"
		conn, err := websocket.Dial(wsURL, "", e.ts.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		recv := func() map[string]any {
			conn.SetReadDeadline(time.Now().Add(60 * time.Second))
			var f map[string]any
			if err := websocket.JSON.Receive(conn, &f); err != nil {
				t.Fatalf("terminal receive: %v", err)
			}
			return f
		}
		if f := recv(); f["type"] != "ready" || f["computerId"] != id || f["workdir"] != "/work" {
			t.Fatalf("ready: %v", f)
		}
		websocket.Message.Send(conn, `{"type":"resize","cols":80,"rows":24}`)
		websocket.Message.Send(conn, "echo from-terminal; exit 5")
		var out string
		for {
			f := recv()
			if f["type"] == "stdout" {
				out += f["data"].(string)
			}
			if f["type"] == "exit" {
				if f["exitCode"].(float64) != 5 {
					t.Fatalf("exit: %v", f)
				}
				break
			}
		}
		if out != "from-terminal\n" {
			t.Fatalf("terminal stdout %q", out)
		}
		websocket.Message.Send(conn, `{"type":"exec","cmd":"sudo reboot"}`)
		if f := recv(); f["type"] != "error" {
			t.Fatalf("denied in terminal: %v", f)
		}
		websocket.Message.Send(conn, `{"type":"exec","cmd":["echo","argv"]}`)
		if f := recv(); f["type"] != "stdout" || f["data"] != "argv\n" {
			t.Fatalf("argv frame: %v", f)
		}
	})

	t.Run("bad-input", func(t *testing.T) {
		e := e.with(t)
		x := "/v1/computers/" + id + "/exec"
		for _, body := range []any{
			map[string]any{"cmd": "true", "bogus": 1},
			map[string]any{"cmd": 5},
			map[string]any{"cmd": ""},
			map[string]any{"cmd": "  "},
			map[string]any{"cmd": []string{}},
			map[string]any{"cmd": []any{1}},
			map[string]any{},
			map[string]any{"cmd": "true", "timeoutSec": 3601},
			map[string]any{"cmd": "true", "timeoutSec": 0},
			map[string]any{"cmd": "true", "timeoutSec": "5"},
			map[string]any{"cmd": "true", "maxOutputBytes": 16<<20 + 1},
			map[string]any{"cmd": "true", "env": map[string]any{"A": 1}},
			map[string]any{"cmd": "true", "tty": "yes"},
			"not json",
		} {
			e.wantError("POST", x, body, 422, codeSpecInvalid)
		}
		for _, body := range []any{
			map[string]any{"provider": prov, "bogus": true},
			map[string]any{"provider": prov, "cpus": 0},
			map[string]any{"provider": prov, "cpus": 65},
			map[string]any{"provider": prov, "memoryMb": 131073},
			map[string]any{"provider": prov, "memoryMb": 1.5},
			map[string]any{"provider": prov, "flavor": "huge"},
			map[string]any{"provider": prov, "idleTimeoutSec": -1},
			map[string]any{"provider": prov, "network": map[string]any{"mode": "all"}},
			map[string]any{"provider": prov, "network": map[string]any{"mode": "none", "extra": 1}},
			map[string]any{"provider": prov, "mounts": []any{map[string]any{"target": "/x"}}},
			map[string]any{"provider": prov, "name": "bad name!"},
			map[string]any{"provider": prov, "image": "--privileged"},
			map[string]any{"provider": prov, "workdir": "relative"},
		} {
			e.wantError("POST", "/v1/computers", body, 422, codeSpecInvalid)
		}
		e.wantError("POST", "/v1/computers", map[string]any{"provider": "nope"}, 503, codeProviderUnavailable)
		e.wantError("GET", "/v1/computers/"+id+"/fs?path=", nil, 422, codeSpecInvalid)
		e.wantError("GET", "/v1/computers/"+id+"/terminal", nil, 422, codeSpecInvalid)
		e.wantError("DELETE", "/v1/computers/"+id+"/fs?path=/work/x&recursive=maybe", nil, 422, codeSpecInvalid)
		e.wantError("POST", "/v1/computers/"+id+"/exec", map[string]any{"cmd": "pwd", "cwd": "/work/does/not/exist"}, 500, codeExecFailed)
	})

	t.Run("quota", func(t *testing.T) {
		t.Parallel()
		q := newTestEnv(t, "", func(c *config) { c.MaxComputers = 2 })
		a := q.create(map[string]any{"provider": prov})
		b := q.create(map[string]any{"provider": prov})
		env := q.wantError("POST", "/v1/computers", map[string]any{"provider": prov}, 429, codeQuota)
		if d, _ := env["details"].(map[string]any); d["limit"].(float64) != 2 {
			t.Fatalf("quota details: %v", env)
		}
		q.json("POST", "/v1/computers/"+b.ID+"/stop", nil, 200, nil) // stopped machines do not count
		c := q.create(map[string]any{"provider": prov})
		q.wantError("POST", "/v1/computers/"+b.ID+"/start", nil, 429, codeQuota)
		for _, m := range []ComputerInfo{a, b, c} {
			q.json("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
		}
	})

	t.Run("reaper", func(t *testing.T) {
		t.Parallel()
		r := newTestEnv(t, "", nil)
		idle := r.create(map[string]any{"provider": prov, "idleTimeoutSec": 5})
		life := r.create(map[string]any{"provider": prov, "idleTimeoutSec": 0, "maxLifetimeSec": 30})
		keep := r.create(map[string]any{"provider": prov, "idleTimeoutSec": 0})
		sub, _ := r.s.hub.subscribe()
		defer r.s.hub.unsubscribe(sub)
		base := time.Now()
		cs := r.s.computers
		cs.setNow(func() time.Time { return base.Add(10 * time.Second) })
		if got := cs.sweep(context.Background()); got[idle.ID] != "idle" || len(got) != 1 {
			t.Fatalf("first sweep: %v", got)
		}
		cs.setNow(func() time.Time { return base.Add(31 * time.Second) })
		if got := cs.sweep(context.Background()); got[life.ID] != "lifetime" || len(got) != 1 {
			t.Fatalf("second sweep: %v", got)
		}
		r.wantError("GET", "/v1/computers/"+idle.ID, nil, 404, codeComputerNotFound)
		r.wantError("GET", "/v1/computers/"+life.ID, nil, 404, codeComputerNotFound)
		reasons := map[string]string{}
		for len(reasons) < 2 {
			select {
			case ev := <-sub.ch:
				if ev.Topic == "reaper" {
					p := ev.Payload.(map[string]any)
					reasons[p["computerId"].(string)] = p["reason"].(string)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("reaper events: %v", reasons)
			}
		}
		if reasons[idle.ID] != "idle" || reasons[life.ID] != "lifetime" {
			t.Fatalf("reaper events: %v", reasons)
		}
		// A running exec counts as activity.
		busy := r.create(map[string]any{"provider": prov, "idleTimeoutSec": 5})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			cs.Exec(ctx, busy.ID, ExecRequest{Cmd: execCommand{Shell: "sleep 600"}}, nil)
		}()
		eventually(t, "the exec to start", func() bool {
			cs.mu.Lock()
			defer cs.mu.Unlock()
			return cs.rt[busy.ID] != nil && cs.rt[busy.ID].active == 1
		})
		cs.setNow(func() time.Time { return base.Add(time.Hour) })
		if got := cs.sweep(context.Background()); got[busy.ID] != "" {
			t.Fatalf("a machine with a running exec was reaped: %v", got)
		}
		cancel()
		<-done
		cs.setNow(func() time.Time { return base.Add(time.Hour + 6*time.Second) }) // idle since the exec ended
		if got := cs.sweep(context.Background()); got[busy.ID] != "idle" {
			t.Fatalf("idle after the exec: %v", got)
		}
		r.json("DELETE", "/v1/computers/"+keep.ID, nil, 204, nil)
	})

	t.Run("restart", func(t *testing.T) {
		t.Parallel()
		home := t.TempDir()
		a := newTestEnv(t, home, nil)
		a.keep = true
		live := a.create(map[string]any{"provider": prov, "idleTimeoutSec": 0})
		gone := a.create(map[string]any{"provider": prov, "idleTimeoutSec": 0})
		a.exec(live.ID, map[string]any{"cmd": "echo kept > note"})
		a.close()
		// The machine of `gone` disappears while agentd is down.
		p := a.s.computers.providerByName(prov)
		p.destroy(context.Background(), &gone)
		// An unrecorded container of this owner appears (an orphan).
		var orphan ComputerInfo
		if !isLocal {
			orphan = ComputerInfo{ID: "cmp_orphan" + strings.ToLower(randomChars(4)), Image: testImage, Provider: prov, Workdir: "/work"}
			orphan.Spec = ComputerSpec{}
			applyComputerDefaults(&orphan.Spec)
			if err := p.create(context.Background(), &orphan); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.destroy(context.Background(), &orphan) })
		}
		b := newTestEnv(t, home, nil)
		var got ComputerInfo
		b.json("GET", "/v1/computers/"+live.ID, nil, 200, &got)
		if got.State != "running" {
			t.Fatalf("adopted: %+v", got)
		}
		if r := b.exec(live.ID, map[string]any{"cmd": "cat note"}); r.Stdout != "kept\n" {
			t.Fatalf("after restart: %+v", r)
		}
		b.wantError("GET", "/v1/computers/"+gone.ID, nil, 404, codeComputerNotFound)
		if !isLocal { // a machine removed behind agentd's back while it runs
			vanish := b.create(map[string]any{"provider": prov})
			p.destroy(context.Background(), &vanish)
			b.wantError("POST", "/v1/computers/"+vanish.ID+"/exec", map[string]any{"cmd": "true"}, 404, codeComputerNotFound)
			b.wantError("GET", "/v1/computers/"+vanish.ID, nil, 404, codeComputerNotFound)
		}
		if !isLocal {
			eventually(t, "the orphan in the doctor's warnings", func() bool {
				_, _, _, warnings := b.s.computers.doctor(context.Background())
				return slices.ContainsFunc(warnings, func(w string) bool { return strings.Contains(w, orphan.ID) })
			})
			if got := b.s.computers.sweep(context.Background()); got[orphan.ID] != "orphan" {
				t.Fatalf("orphan not reaped: %v", got)
			}
			if st, _ := p.status(context.Background(), &orphan); st != "missing" {
				t.Fatalf("orphan still there: %s", st)
			}
		}
		b.json("DELETE", "/v1/computers/"+live.ID, nil, 204, nil)
	})
}

// killScript kills the processes whose command line contains "<word> <arg>", without matching itself.
func killScript(word, arg string) string {
	return `W='` + word + `'; A='` + arg + `'; for f in /proc/[0-9]*; do if tr '\0' ' ' < $f/cmdline 2>/dev/null | grep -qF "$W $A"; then kill ${f#/proc/} 2>/dev/null; fi; done; true`
}

// streamExec runs exec/stream and returns its data frames. With stopAt, it disconnects as soon as a
// frame satisfies it.
func streamExec(t *testing.T, e *testEnv, id string, body map[string]any, stopAt func(map[string]any) bool) ([]map[string]any, bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	j, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, "POST", e.ts.URL+"/v1/computers/"+id+"/exec/stream", bytes.NewReader(j))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("stream: %d %s", resp.StatusCode, b)
	}
	var frames []map[string]any
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	done := false
	for sc.Scan() {
		line := sc.Text()
		if line == "event: done" {
			done = true
		}
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			var f map[string]any
			if json.Unmarshal([]byte(d), &f) == nil && f["type"] != nil {
				if stopAt == nil {
					frames = append(frames, f)
				} else if stopAt(f) {
					return frames, false
				}
			}
		}
	}
	return frames, done
}

// TestComputerProviderSelection: a named unavailable provider is 503 with reason and hint, never a
// substitute; the doctor reports every provider.
func TestComputerProviderSelection(t *testing.T) {
	e := newTestEnv(t, "", nil)
	c := e.s.computers
	c.mu.Lock()
	c.probes["docker"] = probeResult{reason: "the docker daemon is not reachable", hint: "start dockerd", at: time.Now()}
	c.probes["podman"] = probeResult{reason: "the podman CLI is not installed", hint: "install podman", at: time.Now()}
	c.mu.Unlock()
	env := e.wantError("POST", "/v1/computers", map[string]any{"provider": "docker"}, 503, codeProviderUnavailable)
	if !strings.Contains(env["message"].(string), "not reachable") || env["hint"] != "start dockerd" {
		t.Fatalf("unavailable: %v", env)
	}
	providers, sel, _, warnings := c.doctor(context.Background())
	if len(providers) != 3 || providers[0].Name != "docker" || providers[0].Available || providers[0].Reason == "" || providers[0].Hint == "" {
		t.Fatalf("providers: %+v", providers)
	}
	if sel.Provider != "local" || sel.Isolated || sel.ProviderReason == "" {
		t.Fatalf("selection: %+v", sel)
	}
	if len(warnings) == 0 || !strings.Contains(warnings[0], "non-isolated") {
		t.Fatalf("warnings: %v", warnings)
	}
	m := e.create(map[string]any{}) // auto → local
	if m.Provider != "local" || m.IsolationKind != "guardrails" {
		t.Fatalf("auto: %+v", m)
	}
	e.json("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
}

// TestEnsureForAgent: one computer per agent, shared by concurrent callers, restarted when stopped.
func TestEnsureForAgent(t *testing.T) {
	e := newTestEnv(t, "", func(c *config) { c.ComputerProvider = "local" })
	c := e.s.computers
	var wg sync.WaitGroup
	ids := make([]string, 5)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := c.EnsureForAgent(context.Background(), "helper-agent", ComputerSpec{Flavor: "base", IdleTimeoutSec: 900})
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = m.ID
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("not shared: %v", ids)
		}
	}
	if n := len(c.agents.entries); n != 0 {
		t.Fatalf("the per-agent lock kept %d entries after its callers left", n)
	}
	if _, err := c.stop(context.Background(), ids[0]); err != nil {
		t.Fatal(err)
	}
	m, err := c.EnsureForAgent(context.Background(), "helper-agent", ComputerSpec{})
	if err != nil || m.ID != ids[0] || m.State != "running" {
		t.Fatalf("restart: %+v %v", m, err)
	}
	got, err := c.Get(context.Background(), "helper-agent")
	if err != nil || got.ID != m.ID {
		t.Fatalf("get by name: %v", err)
	}
	if err := c.WriteFile(context.Background(), m.ID, "notes/a.txt", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if b, err := c.ReadFile(context.Background(), m.ID, "/work/notes/a.txt"); err != nil || string(b) != "hi" {
		t.Fatalf("read: %q %v", b, err)
	}
	if ents, err := c.ListDir(context.Background(), m.ID, "/work"); err != nil || len(ents) != 1 || ents[0].Type != "dir" {
		t.Fatalf("list: %+v %v", ents, err)
	}
	var chunks []string
	res, err := c.Exec(context.Background(), m.ID, ExecRequest{Cmd: execCommand{Shell: "echo a; echo b >&2"}}, func(s, d string) { chunks = append(chunks, s+":"+d) })
	if err != nil || res.ExitCode != 0 || len(chunks) == 0 {
		t.Fatalf("exec: %+v %v %v", res, err, chunks)
	}
	_, err = c.Exec(context.Background(), m.ID, ExecRequest{Cmd: execCommand{Shell: "curl x"}, Policy: commandPolicy{Deny: []string{"curl"}}}, nil)
	if ae := asAPIError(err); ae.Code != codeExecDenied {
		t.Fatalf("agent deny: %v", err)
	}
	if err := c.DeletePath(context.Background(), m.ID, "/work/notes", true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ExposePort(context.Background(), m.ID, 0); asAPIError(err).Code != codeSpecInvalid {
		t.Fatalf("port 0: %v", err)
	}
	if err := c.destroy(context.Background(), m.ID, ""); err != nil {
		t.Fatal(err)
	}
}

// TestComputerLocalKillOnDestroy: destroying a local machine kills its background processes.
func TestComputerLocalKillOnDestroy(t *testing.T) {
	e := newTestEnv(t, "", nil)
	m := e.create(map[string]any{"provider": "local"})
	e.exec(m.ID, map[string]any{"cmd": "sleep 41999 &"})
	hasSleep := func() bool {
		out, _ := exec.Command("sh", "-c", "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '").Output()
		return strings.Contains(string(out), "sleep 41999")
	}
	if !hasSleep() {
		t.Fatal("background process not running")
	}
	e.json("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
	eventually(t, "the local machine's processes to die", func() bool { return !hasSleep() })
}

func TestHeadTailUTF8(t *testing.T) {
	for _, max := range []int{1, 2, 3, 5, 8, 13, 64} {
		h := newHeadTail(max)
		s := strings.Repeat("aé€😀", 50)
		for i := 0; i < len(s); i += 7 {
			h.write([]byte(s[i:min(i+7, len(s))]))
		}
		out, tr := h.String()
		if !tr || !utf8.ValidString(out) {
			t.Fatalf("max %d: %q %v", max, out, tr)
		}
	}
	h := newHeadTail(100)
	h.write([]byte("short"))
	if out, tr := h.String(); out != "short" || tr {
		t.Fatalf("%q %v", out, tr)
	}
}

func TestOutputSinkMarker(t *testing.T) {
	m := &endMarkers{need: 1, done: make(chan struct{})}
	var got strings.Builder
	s := newOutputSink("stdout", 1<<20, func(_, d string) { got.WriteString(d) }, true, "tok", m)
	full := "hello \x1e world" + markerPrefix("tok") + "007\x1e" + "after"
	for i := 0; i < len(full); i++ { // byte by byte: the marker spans writes
		s.Write([]byte{full[i]})
	}
	s.flush()
	if !m.complete() || m.code != 7 || got.String() != "hello \x1e world" {
		t.Fatalf("marker: %v %d %q", m.complete(), m.code, got.String())
	}
}

// The per-agent lock excludes per key, lets different keys run together, and forgets a key once no one
// holds or waits for it.
func TestKeyedMutexExcludesAndPrunes(t *testing.T) {
	var k keyedMutex
	keys := []string{"a", "b", "c", "d"}
	inside := make([]atomic.Int32, len(keys))
	var overlap atomic.Int32 // times two keys were held at once: different keys must not exclude each other
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				ki := (g + i) % len(keys)
				unlock := k.lock(keys[ki])
				if n := inside[ki].Add(1); n != 1 {
					t.Errorf("key %s held by %d callers at once", keys[ki], n)
				}
				for j := range inside {
					if j != ki && inside[j].Load() > 0 {
						overlap.Add(1)
					}
				}
				runtime.Gosched()
				inside[ki].Add(-1)
				unlock()
			}
		}()
	}
	wg.Wait()
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.entries) != 0 {
		t.Fatalf("%d entries left after every caller unlocked: the map grows with every key ever seen", len(k.entries))
	}
	if overlap.Load() == 0 {
		t.Fatal("different keys never held together: the lock is global, not per key")
	}
}

func FuzzCheckArchive(f *testing.F) {
	f.Add([]byte("not gzip"))
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	tw := tar.NewWriter(zw)
	tw.WriteHeader(&tar.Header{Name: "a/../../x", Typeflag: tar.TypeReg, Mode: 0o644})
	tw.Close()
	zw.Close()
	f.Add(b.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		ca, err := checkArchive(data, 1<<20)
		if err != nil {
			return
		}
		for _, n := range ca.names {
			if strings.HasPrefix(n, "/") || n == ".." || strings.HasPrefix(n, "../") {
				t.Fatalf("escaping entry accepted: %q", n)
			}
		}
	})
}

var _ = net.Dial

// TestExecRefusesUnusableCwdAndUser: a NUL or newline in cwd or user, or a user read as an engine flag,
// is the caller's mistake (422), not a failure of the mechanism (500).
func TestExecRefusesUnusableCwdAndUser(t *testing.T) {
	e := newTestEnv(t, "", nil)
	defer e.close()
	m := e.create(map[string]any{"provider": "local"})
	for _, b := range []map[string]any{
		{"cmd": "true", "cwd": "/work/a\x00b"},
		{"cmd": "true", "cwd": "/work/a\nb"},
		{"cmd": "true", "user": "-x"},
		{"cmd": "true", "user": "1000\x00"},
		{"cmd": "true", "user": "root\n"},
	} {
		e.wantError("POST", "/v1/computers/"+m.ID+"/exec", b, 422, codeSpecInvalid)
	}
}

// TestExposePortAfterConcurrentStop: an expose that waited for a stop to finish must see the stopped
// machine, not save its stale running record back (which resurrected the computer as running).
func TestExposePortAfterConcurrentStop(t *testing.T) {
	e := newTestEnv(t, "", nil)
	defer e.close()
	m := e.create(map[string]any{"provider": "local"})
	c := e.s.computers
	rt := c.runtime(m.ID)
	rt.mu.Lock()
	done := make(chan error, 1)
	go func() { _, err := c.ExposePort(context.Background(), m.ID, 4555); done <- err }()
	eventually(t, "ExposePort to wait for the machine's lifecycle lock", func() bool {
		buf := make([]byte, 1<<20)
		st := string(buf[:runtime.Stack(buf, true)])
		for _, g := range strings.Split(st, "\n\n") {
			if strings.Contains(g, ".ExposePort(") && strings.Contains(g, "sync.(*Mutex).Lock") {
				return true
			}
		}
		return false
	})
	// What a stop holding the lock does to the record.
	cur, err := c.Get(context.Background(), m.ID)
	if err != nil {
		t.Fatal(err)
	}
	cur.State = stateStopped
	if err := c.save(context.Background(), cur); err != nil {
		t.Fatal(err)
	}
	rt.mu.Unlock()
	if err := <-done; err == nil {
		t.Fatal("ExposePort on a machine stopped while it waited succeeded")
	}
	if got, _ := c.Get(context.Background(), m.ID); got.State != stateStopped {
		t.Fatalf("state after the expose: %s, want stopped", got.State)
	}
}

// gatedLocal is the local provider with a start that waits for the test.
type gatedLocal struct {
	*localProvider
	entered chan string
	release chan struct{}
}

func (g *gatedLocal) start(ctx context.Context, m *ComputerInfo) error {
	g.entered <- m.ID
	<-g.release
	return g.localProvider.start(ctx, m)
}

// TestComputerStartQuotaIsAtomic: two starts racing for the last live slot cannot both pass the
// maxComputers count (the first was still stopped in the record when the second counted).
func TestComputerStartQuotaIsAtomic(t *testing.T) {
	e := newTestEnv(t, "", func(c *config) { c.MaxComputers = 1 })
	defer e.close()
	c := e.s.computers
	a := e.create(map[string]any{"provider": "local"})
	e.json("POST", "/v1/computers/"+a.ID+"/stop", nil, 200, nil)
	b := e.create(map[string]any{"provider": "local"})
	e.json("POST", "/v1/computers/"+b.ID+"/stop", nil, 200, nil)
	quiesce(c)
	var g *gatedLocal
	for i, p := range c.providers {
		if lp, ok := p.(*localProvider); ok {
			g = &gatedLocal{localProvider: lp, entered: make(chan string, 2), release: make(chan struct{})}
			c.providers[i] = g
		}
	}
	errs := make(chan error, 2)
	go func() { _, err := c.start(context.Background(), a.ID); errs <- err }()
	select { // a is starting and counted as stopped until it is saved running
	case <-g.entered:
	case err := <-errs:
		t.Fatalf("start a: %v", err)
	}
	go func() { _, err := c.start(context.Background(), b.ID); errs <- err }()
	eventually(t, "the second start to count or wait for the count", func() bool {
		if len(g.entered) > 0 {
			return true
		}
		buf := make([]byte, 1<<20)
		for _, gr := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(gr, "(*computerService).start(") && strings.Contains(gr, "sync.(*Mutex).Lock") {
				return true
			}
		}
		return false
	})
	close(g.release)
	ok := 0
	for range 2 {
		if err := <-errs; err == nil {
			ok++
		} else if asAPIError(err).Code != codeQuota {
			t.Fatalf("start: %v", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d starts succeeded with maxComputers 1", ok)
	}
}

// TestComputerLocalWorkdirDotDot: a workdir climbing out of /work with `..` is not mapped onto the host
// (it created directories anywhere the server could write).
func TestComputerLocalWorkdirDotDot(t *testing.T) {
	e := newTestEnv(t, "", nil)
	defer e.close()
	outside := filepath.Join(t.TempDir(), "escaped")
	wd := "/work/" + strings.Repeat("../", 30) + strings.TrimPrefix(outside, "/")
	st, body := e.do("POST", "/v1/computers", map[string]any{"provider": "local", "workdir": wd})
	if _, err := os.Stat(outside); err == nil {
		t.Fatalf("workdir %s created %s on the host (answer %d %s)", wd, outside, st, body)
	}
	// It is judged where it lands: here inside the guest /tmp, mapped under the machine's directory.
	if st != 201 || strings.Contains(string(body), "..") {
		t.Fatalf("create with workdir %s: %d %s, want the cleaned workdir", wd, st, body)
	}
}

// racingLocal creates a machine between reconcile's read of the records and its listing of machines,
// as a create right after startup does while the background reconcile probes a slow engine.
type racingLocal struct {
	*localProvider
	once    sync.Once
	created *ComputerInfo
}

func (r *racingLocal) owned(ctx context.Context) (map[string]bool, error) {
	r.once.Do(func() {
		m, err := r.c.create(ctx, ComputerSpec{Provider: "local"})
		if err != nil {
			panic(err)
		}
		r.created = m
	})
	return r.localProvider.owned(ctx)
}

// TestReconcileDoesNotOrphanFreshMachines: a machine created while reconcile runs is not taken for an
// orphan and reaped by the next sweep.
func TestReconcileDoesNotOrphanFreshMachines(t *testing.T) {
	e := newTestEnv(t, "", nil)
	defer e.close()
	c := e.s.computers
	quiesce(c)
	var r *racingLocal
	for _, p := range c.providers {
		if lp, ok := p.(*localProvider); ok {
			r = &racingLocal{localProvider: lp}
		}
	}
	c.providers = []provider{r}
	c.reconcile(context.Background(), map[string]bool{})
	if r.created == nil {
		t.Fatal("the racing create did not run")
	}
	if got := c.sweep(context.Background()); len(got) != 0 {
		t.Fatalf("sweep reaped %v; the machine %s was created while reconcile ran", got, r.created.ID)
	}
	if m, err := c.Get(context.Background(), r.created.ID); err != nil || m.State != stateRunning {
		t.Fatalf("machine after the sweep: %+v %v", m, err)
	}
}

// TestCheckEngineArgsMountTargets: a mount over a directory agentd itself mounts (the engine refuses a
// duplicate mount point, a 500 from the engine) or over the root is the caller's mistake: 422.
func TestCheckEngineArgsMountTargets(t *testing.T) {
	for _, target := range []string{"/", "/work", "/tmp/", "/run", "/work/../tmp", "//work"} {
		sp := ComputerSpec{Workdir: "/work", Mounts: []Mount{{Source: "/srv/data", Target: target}}}
		err := checkEngineArgs(sp, "")
		if err == nil || asAPIError(err).Code != codeSpecInvalid {
			t.Errorf("target %q: %v, want E_SPEC_INVALID", target, err)
		}
	}
	for _, target := range []string{"/data", "/work/data", "/opt/x"} {
		sp := ComputerSpec{Workdir: "/work", Mounts: []Mount{{Source: "/srv/data", Target: target}}}
		if err := checkEngineArgs(sp, ""); err != nil {
			t.Errorf("target %q: %v, want accepted", target, err)
		}
	}
}

// TestReaperSparesMachineUsedWhileWaiting: an exec that starts while the reaper waits for the machine's
// lifecycle lock keeps an idle machine alive.
func TestReaperSparesMachineUsedWhileWaiting(t *testing.T) {
	e := newTestEnv(t, "", nil)
	defer e.close()
	c := e.s.computers
	m := e.create(map[string]any{"provider": "local", "idleTimeoutSec": 5})
	base := time.Now()
	c.setNow(func() time.Time { return base.Add(10 * time.Second) })
	rt := c.runtime(m.ID)
	rt.mu.Lock()
	got := make(chan map[string]string, 1)
	go func() { got <- c.sweep(context.Background()) }()
	eventually(t, "the sweep to wait for the machine's lifecycle lock", func() bool {
		buf := make([]byte, 1<<20)
		for _, gr := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(gr, "(*computerService).destroy(") && strings.Contains(gr, "sync.(*Mutex).Lock") {
				return true
			}
		}
		return false
	})
	c.beginUse(m.ID) // an exec starts
	rt.mu.Unlock()
	if r := <-got; len(r) != 0 {
		t.Fatalf("reaped %v while an exec was running", r)
	}
	c.endUse(m.ID)
	if cur, err := c.Get(context.Background(), m.ID); err != nil || cur.State != stateRunning {
		t.Fatalf("machine after the sweep: %+v %v", cur, err)
	}
}

// quiesce stops the service's own goroutines (background reconcile, reaper) so a test may swap its
// providers without racing them.
func quiesce(c *computerService) {
	c.cancel()
	c.wg.Wait()
}

// TestComputerBackgroundReconcileLeavesNewRecordsAlone: the background reconcile pass (providers that
// held no record at start) runs while the server answers, so every record it sees was made by this
// process. It must neither destroy a machine being created nor undo a stop made meanwhile.
func TestComputerBackgroundReconcileLeavesNewRecordsAlone(t *testing.T) {
	e := newTestEnv(t, "", nil)
	defer e.close()
	c := e.s.computers
	quiesce(c)
	stopped := e.create(map[string]any{"provider": "local"})
	e.json("POST", "/v1/computers/"+stopped.ID+"/stop", nil, 200, nil)
	// A record inserted by a create whose machine does not exist yet.
	now := timestamp(time.Now())
	creating := ComputerInfo{ID: "cmp_beingcreated0001", Name: "new", Provider: "local", State: stateCreating,
		Workdir: "/work", CreatedAt: now, LastUsedAt: now, Ports: map[string]PortBinding{}}
	if err := e.s.store.InsertComputer(context.Background(), creating); err != nil {
		t.Fatal(err)
	}
	c.reconcile(context.Background(), map[string]bool{"docker": true, "podman": true})
	for id, want := range map[string]string{stopped.ID: stateStopped, creating.ID: stateCreating} {
		got, err := e.s.store.GetComputer(context.Background(), id)
		if err != nil || got.State != want {
			t.Errorf("%s after the background pass: %q %v, want %s", id, got.State, err, want)
		}
	}
}
