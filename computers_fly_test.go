// computers_fly_test.go — the fly provider against fakeFly, a loopback server speaking the Fly Machines
// API's wire format (written from Fly's public API reference; answers replayed from testdata/fly/):
// requests checked field by field, errors (4xx and 5xx bodies), an exec that outlives its timeout, a
// machine that never starts (destroyed), adoption by metadata after a restart. The fake's exec runs the
// command the provider sent under bwrap, with a directory of its own as the machine's /work and /tmp,
// so the provider's wrapper and file scripts really run. Not verified against the real Fly service.
package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	flyTestApp   = "agentd-test"
	flyTestToken = "fly-test-token-8c1f2e" // what the fake accepts; must never show in an answer
)

// fakeFly is the Machines API on loopback.
type fakeFly struct {
	root string // the fake machines' directories (made before any handler runs: a handler may outlive its test)
	srv  *httptest.Server

	mu       sync.Mutex
	reqs     []fakeFlyReq
	machines map[string]map[string]any // fid → Machine object (from testdata/fly/machine.json)
	dirs     map[string]string         // fid → the machine's root (work/, tmp/)
	n        int

	k fakeFlyKnobs // guarded by mu: set them with set
}

// fakeFlyKnobs are what a test makes the fake do.
type fakeFlyKnobs struct {
	neverStarts bool   // wait for started answers 408 after its timeout
	createFail  string // a testdata file answered 422 to a create
	execHang    bool   // exec answers only when the client gives up
	execReplay  string // a testdata file answered 200 to an exec
	execStatus  int    // with execBody: the exec's error answer
	execBody    string
}

// set changes the knobs (requests of the proof's trial run beside the test's).
func (f *fakeFly) set(change func(k *fakeFlyKnobs)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(&f.k)
}

func (f *fakeFly) knobs() fakeFlyKnobs {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.k
}

type fakeFlyReq struct {
	method, path string
	query        map[string][]string
	body         map[string]any
	auth         string
}

func newFakeFly(t *testing.T) *fakeFly {
	f := &fakeFly{root: t.TempDir(), machines: map[string]map[string]any{}, dirs: map[string]string{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeFly) reply(w http.ResponseWriter, status int, file string) {
	w.Header().Set("Content-Type", "application/json")
	if strings.HasSuffix(file, ".html") {
		w.Header().Set("Content-Type", "text/html")
	}
	b, err := os.ReadFile(filepath.Join("testdata", "fly", file))
	if err != nil {
		http.Error(w, err.Error(), 500)
		return
	}
	w.WriteHeader(status)
	w.Write(b)
}

func (f *fakeFly) replyJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// fidOf is the Fly machine id of agentd's computer id (from the metadata the create sent).
func (f *fakeFly) fidOf(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for fid, m := range f.machines {
		if md, _ := m["config"].(map[string]any)["metadata"].(map[string]any); md["agentd_id"] == id {
			return fid
		}
	}
	return ""
}

// requests returns the recorded requests whose method and path end match.
func (f *fakeFly) requests(method, pathSuffix string) []fakeFlyReq {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fakeFlyReq
	for _, r := range f.reqs {
		if r.method == method && strings.HasSuffix(r.path, pathSuffix) {
			out = append(out, r)
		}
	}
	return out
}

func (f *fakeFly) serve(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	if r.Body != nil {
		json.NewDecoder(r.Body).Decode(&body)
	}
	f.mu.Lock()
	f.reqs = append(f.reqs, fakeFlyReq{method: r.Method, path: r.URL.Path, query: r.URL.Query(), body: body, auth: r.Header.Get("Authorization")})
	f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+flyTestToken {
		f.reply(w, 401, "unauthorized.json")
		return
	}
	base := "/v1/apps/" + flyTestApp
	rest, ok := strings.CutPrefix(r.URL.Path, base)
	if !ok {
		f.reply(w, 404, "not_found.json")
		return
	}
	parts := strings.Split(strings.TrimPrefix(rest, "/machines"), "/")
	switch {
	case rest == "" && r.Method == "GET":
		f.reply(w, 200, "app.json")
	case rest == "/machines" && r.Method == "GET":
		f.mu.Lock()
		list := []map[string]any{}
		for _, m := range f.machines {
			if m["state"] != "destroyed" {
				list = append(list, m)
			}
		}
		out, _ := json.Marshal(list) // under the lock: other handlers change the machines' state
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write(out)
	case rest == "/machines" && r.Method == "POST":
		f.create(w, body)
	case len(parts) >= 2:
		f.machine(w, r, parts[1], strings.Join(parts[2:], "/"), body)
	default:
		f.reply(w, 404, "not_found.json")
	}
}

// addMachine puts a Machine object (testdata/fly/machine.json) in the fake, state started.
func (f *fakeFly) addMachine(name string, metadata map[string]any, cfg map[string]any) map[string]any {
	var m map[string]any
	b, _ := os.ReadFile(filepath.Join("testdata", "fly", "machine.json"))
	json.Unmarshal(b, &m)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	fid := fmt.Sprintf("3d8d413b29d%03d", f.n)
	m["id"], m["name"], m["instance_id"] = fid, name, fmt.Sprintf("01H3JK6Y4ZMZT2B9XK7ZT1X%03d", f.n)
	c := m["config"].(map[string]any)
	for k, v := range cfg {
		c[k] = v
	}
	c["metadata"] = metadata
	f.machines[fid] = m
	dir := filepath.Join(f.root, fid)
	os.Mkdir(dir, 0o755)
	os.Mkdir(filepath.Join(dir, "work"), 0o755)
	os.Mkdir(filepath.Join(dir, "tmp"), 0o1777)
	f.dirs[fid] = dir
	return m
}

func (f *fakeFly) create(w http.ResponseWriter, body map[string]any) {
	if k := f.knobs(); k.createFail != "" {
		f.reply(w, 422, k.createFail)
		return
	}
	cfg, _ := body["config"].(map[string]any)
	md, _ := cfg["metadata"].(map[string]any)
	name, _ := body["name"].(string)
	m := f.addMachine(name, md, cfg)
	f.mu.Lock()
	m["state"] = "created"
	out, _ := json.Marshal(m)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Write(out)
}

func (f *fakeFly) machine(w http.ResponseWriter, r *http.Request, fid, action string, body map[string]any) {
	f.mu.Lock()
	m, ok := f.machines[fid]
	if ok && m["state"] == "destroyed" {
		ok = false
	}
	f.mu.Unlock()
	if !ok {
		f.reply(w, 404, "not_found.json")
		return
	}
	setState := func(s string) { f.mu.Lock(); m["state"] = s; f.mu.Unlock() }
	switch {
	case action == "" && r.Method == "GET":
		f.mu.Lock()
		out, _ := json.Marshal(m)
		f.mu.Unlock()
		w.Write(out)
	case action == "" && r.Method == "DELETE":
		setState("destroyed")
		f.reply(w, 200, "wait_ok.json")
	case action == "wait":
		state := r.URL.Query().Get("state")
		if state == "started" && f.knobs().neverStarts {
			secs, _ := strconv.Atoi(r.URL.Query().Get("timeout"))
			select { // the API blocks up to timeout seconds, then answers 408
			case <-time.After(time.Duration(min(max(secs, 1), 2)) * time.Second):
			case <-r.Context().Done():
			}
			f.reply(w, 408, "wait_timeout.json")
			return
		}
		setState(state)
		f.reply(w, 200, "wait_ok.json")
	case action == "start":
		setState("started")
		f.reply(w, 200, "wait_ok.json")
	case action == "stop":
		setState("stopped")
		f.reply(w, 200, "wait_ok.json")
	case action == "exec":
		f.exec(w, r, fid, body)
	default:
		f.reply(w, 404, "not_found.json")
	}
}

// exec runs the command under bwrap with the machine's own /work and /tmp, or answers as told.
func (f *fakeFly) exec(w http.ResponseWriter, r *http.Request, fid string, body map[string]any) {
	switch k := f.knobs(); {
	case k.execStatus != 0:
		f.reply(w, k.execStatus, k.execBody)
		return
	case k.execHang:
		<-r.Context().Done()
		return
	case k.execReplay != "":
		f.reply(w, 200, k.execReplay)
		return
	}
	var argv []string
	for _, a := range body["command"].([]any) {
		argv = append(argv, a.(string))
	}
	stdin, _ := body["stdin"].(string)
	secs, _ := body["timeout"].(float64)
	ctx, cancel := context.WithTimeout(r.Context(), time.Duration(max(secs, 1))*time.Second)
	defer cancel()
	f.mu.Lock()
	dir := f.dirs[fid]
	f.mu.Unlock()
	cmd := exec.CommandContext(ctx, "bwrap", append(fakeFlyBwrap(dir), argv...)...)
	cmd.WaitDelay = time.Second // a background child holding the pipes must not hold the answer (or the fake's Close)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := map[string]any{"exit_code": cmd.ProcessState.ExitCode(), "stdout": stdout.String(), "stderr": stderr.String()}
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() < 0 {
		res["exit_code"], res["exit_signal"] = 0, 9
	}
	f.replyJSON(w, res)
}

// fakeFlyBwrap is bwrap's arguments for a fake machine rooted at dir: the host's /usr and /etc read-only,
// dir/work as /work and dir/tmp as /tmp.
func fakeFlyBwrap(dir string) []string {
	return []string{"--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
		"--symlink", "usr/lib64", "/lib64", "--symlink", "usr/sbin", "/sbin", "--ro-bind", "/etc", "/etc",
		"--proc", "/proc", "--dev", "/dev", "--bind", filepath.Join(dir, "work"), "/work",
		"--bind", filepath.Join(dir, "tmp"), "/tmp", "--chdir", "/", "--"}
}

// requireBwrapForFly skips a test whose fake machine cannot run (a failure with AGENT_TEST_SANDBOX=1).
func requireBwrapForFly(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "work"), 0o755)
	os.Mkdir(filepath.Join(dir, "tmp"), 0o755)
	out, err := exec.Command("bwrap", append(fakeFlyBwrap(dir), "/bin/true")...).CombinedOutput()
	switch {
	case err == nil:
	case os.Getenv("AGENT_TEST_SANDBOX") == "1":
		t.Fatalf("the fake Fly machine runs its commands under bwrap, which cannot run here: %v %s", err, out)
	default:
		t.Skipf("the fake Fly machine runs its commands under bwrap, which cannot run here: %v %s (AGENT_TEST_SANDBOX=1 makes this a failure)", err, out)
	}
}

// newFlyServer is a server whose fly provider talks to fake (the token in its environment).
func newFlyServer(t *testing.T, fake *fakeFly, opts ...testOption) *testServer {
	return newTestServer(t, append([]testOption{func(c *testSetup) {
		c.Fly = &flyConfig{App: flyTestApp, Region: "ord", Ports: []int{8080}, Endpoint: fake.srv.URL}
		c.getenv = func(k string) string {
			if k == "FLY_API_TOKEN" {
				return flyTestToken
			}
			return ""
		}
	}}, opts...)...)
}

var flySpec = map[string]any{"provider": "fly", "network": map[string]any{"mode": "full"}, "cpus": 1.5, "memoryMb": 700,
	"env": map[string]string{"SPEC_VAR": "from-spec"}}

// TestFlyLifecycleWireFormat: create, exec, stop, start and delete, each request checked field by field.
func TestFlyLifecycleWireFormat(t *testing.T) {
	requireBwrapForFly(t)
	fake := newFakeFly(t)
	e := newFlyServer(t, fake)
	m := e.create(flySpec)
	if m.State != "running" || m.Provider != "fly" || m.IsolationKind != "vm" || !m.Isolated {
		t.Fatalf("created: %+v", m)
	}
	var creates []fakeFlyReq // the proof's trial machine is created too
	for _, r := range fake.requests("POST", "/apps/"+flyTestApp+"/machines") {
		if r.body["name"] == "agentd-"+m.ID {
			creates = append(creates, r)
		}
	}
	if len(creates) != 1 {
		t.Fatalf("%d creates", len(creates))
	}
	fid := fake.fidOf(m.ID)
	b := creates[0].body
	cfg := b["config"].(map[string]any)
	guest := cfg["guest"].(map[string]any)
	md := cfg["metadata"].(map[string]any)
	svc := cfg["services"].([]any)[0].(map[string]any)
	switch {
	case creates[0].auth != "Bearer "+flyTestToken:
		t.Errorf("authorization %q", creates[0].auth)
	case b["name"] != "agentd-"+m.ID || b["region"] != "ord":
		t.Errorf("name/region: %v", b)
	case cfg["image"] != testImage:
		t.Errorf("image %v", cfg["image"])
	case guest["cpu_kind"] != "shared" || guest["cpus"] != 2.0 || guest["memory_mb"] != 768.0: // 1.5 cpus → 2; 700 MB → 768
		t.Errorf("guest %v", guest)
	case md["agentd_id"] != m.ID || md["agentd_owner"] != e.s.computers.owner:
		t.Errorf("metadata %v", md)
	case cfg["env"].(map[string]any)["SPEC_VAR"] != "from-spec":
		t.Errorf("env %v", cfg["env"])
	case fmt.Sprint(cfg["init"]) != "map[exec:[/bin/sleep inf]]" || cfg["auto_destroy"] != false:
		t.Errorf("init %v auto_destroy %v", cfg["init"], cfg["auto_destroy"])
	case svc["internal_port"] != 8080.0 || svc["protocol"] != "tcp" || fmt.Sprint(svc["ports"]) != "[map[port:8080]]":
		t.Errorf("services %v", cfg["services"])
	}
	waits := fake.requests("GET", fid+"/wait")
	if len(waits) != 1 || waits[0].query["state"][0] != "started" || waits[0].query["instance_id"][0] == "" || waits[0].query["timeout"][0] != "60" {
		t.Fatalf("wait: %+v", waits)
	}

	// exec: the output, the exit code, stdin (bytes that are not text), cwd and env.
	r := e.exec(m.ID, map[string]any{"cmd": `echo "hi $SPEC_VAR $REQ_VAR"; pwd; echo err >&2; exit 3`, "env": map[string]string{"REQ_VAR": "from-req"}})
	if r.Stdout != "hi from-spec from-req\n/work\n" || r.Stderr != "err\n" || r.ExitCode != 3 {
		t.Fatalf("exec: %+v", r)
	}
	in := "line one\n\x01\x02 tail"
	if r := e.exec(m.ID, map[string]any{"cmd": []string{"cat"}, "stdin": in}); r.Stdout != in || r.ExitCode != 0 {
		t.Fatalf("stdin: %+v", r)
	}
	x := fake.requests("POST", fid+"/exec") // this machine's: the proof's trial machine execs beside the test
	last := x[len(x)-1].body
	if cmd := last["command"].([]any); cmd[0] != "/bin/sh" || cmd[len(cmd)-1] != "cat" || last["stdin"] == nil || last["timeout"].(float64) < 100 {
		t.Fatalf("exec request: %v", last)
	}

	// files go over the same exec: a binary round trip and a listing.
	bin := make([]byte, 1024)
	for i := range bin {
		bin[i] = byte(i)
	}
	fs := "/v1/computers/" + m.ID + "/fs"
	e.call("PUT", fs+"/write?path=/work/dir/bin.dat", bin, 204, nil)
	if got := e.do("GET", fs+"/read?path=dir/bin.dat", nil); got.status != 200 || string(got.body) != string(bin) {
		t.Fatalf("read back: %d %d bytes", got.status, len(got.body))
	}
	var ls struct{ Entries []DirEntry }
	if e.call("GET", fs+"?path=/work/dir", nil, 200, &ls); len(ls.Entries) != 1 || ls.Entries[0].Size != 1024 {
		t.Fatalf("list: %+v", ls.Entries)
	}

	e.call("POST", "/v1/computers/"+m.ID+"/stop", nil, 200, nil)
	if s := fake.requests("POST", fid+"/stop"); len(s) != 1 {
		t.Fatalf("stop calls: %d", len(s))
	}
	if w := fake.requests("GET", fid+"/wait"); w[len(w)-1].query["state"][0] != "stopped" {
		t.Fatalf("stop did not wait for stopped: %+v", w[len(w)-1])
	}
	e.call("POST", "/v1/computers/"+m.ID+"/start", nil, 200, nil)
	if s := fake.requests("POST", fid+"/start"); len(s) != 1 {
		t.Fatalf("start calls: %d", len(s))
	}
	e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
	d := fake.requests("DELETE", "/machines/"+fid)
	if len(d) != 1 || d[0].query["force"][0] != "true" {
		t.Fatalf("destroy: %+v", d)
	}
}

// TestFlyGuestRounding: cpus and memory become a size Fly accepts, or a clear refusal.
func TestFlyGuestRounding(t *testing.T) {
	for _, c := range []struct {
		kind         string
		cpus         float64
		mem          int
		wantC, wantM int
		wantRefused  bool
	}{
		{"shared", 1, 256, 1, 256, false},
		{"shared", 0.5, 100, 1, 256, false},
		{"shared", 1.5, 700, 2, 768, false},
		{"shared", 1, 4096, 2, 4096, false}, // 2048 MB a shared CPU: more memory takes more CPUs
		{"shared", 3, 512, 4, 1024, false},  // at least 256 MB a CPU
		{"shared", 8, 16384, 8, 16384, false},
		{"shared", 9, 1024, 0, 0, true},
		{"shared", 1, 20000, 0, 0, true},
		{"performance", 1, 1024, 1, 2048, false},
		{"performance", 16, 1024, 16, 32768, false},
	} {
		gc, gm, err := flyGuest(c.kind, c.cpus, c.mem)
		if (err != nil) != c.wantRefused || gc != c.wantC || gm != c.wantM {
			t.Errorf("flyGuest(%s, %g, %d) = %d, %d, %v; want %d, %d (refused %v)", c.kind, c.cpus, c.mem, gc, gm, err, c.wantC, c.wantM, c.wantRefused)
		}
	}
	e := newFlyServer(t, newFakeFly(t))
	spec := map[string]any{"provider": "fly", "network": map[string]any{"mode": "full"}, "cpus": 9}
	e.wantError("POST", "/v1/computers", spec, 422, codeSpecInvalid)
}

// TestFlyErrors: Fly's error answers reach the caller as the contract's errors, with Fly's message and
// never the token; refusals of what a Fly machine cannot honour.
func TestFlyErrors(t *testing.T) {
	requireBwrapForFly(t)
	fake := newFakeFly(t)
	e := newFlyServer(t, fake)
	noToken := func(b []byte) {
		t.Helper()
		if strings.Contains(string(b), flyTestToken) {
			t.Fatalf("the token leaked: %s", b)
		}
	}

	m := e.create(flySpec)
	eventually(t, "the proof's trial to pass (a failed create must not be the trial's)", func() bool {
		r, _ := e.s.computers.proofOf(e.s.computers.providerByName("fly"))
		return r.ok
	})
	fake.set(func(k *fakeFlyKnobs) { k.createFail = "create_invalid.json" })
	r := e.do("POST", "/v1/computers", flySpec)
	if r.status != 500 || r.errCode(t) != codeComputerFailed || !strings.Contains(string(r.body), "not a multiple of 256") || !strings.Contains(string(r.body), "422") {
		t.Fatalf("create refused by Fly: %d %s", r.status, r.body)
	}
	noToken(r.body)
	fake.set(func(k *fakeFlyKnobs) { k.createFail = "" })

	fake.set(func(k *fakeFlyKnobs) { k.execStatus, k.execBody = 502, "server_error.html" })
	r = e.do("POST", "/v1/computers/"+m.ID+"/exec", map[string]any{"cmd": "true"})
	if r.status != 500 || r.errCode(t) != codeExecFailed || !strings.Contains(string(r.body), "502") {
		t.Fatalf("exec answered 502: %d %s", r.status, r.body)
	}
	noToken(r.body)
	fake.set(func(k *fakeFlyKnobs) { k.execStatus = 0 })

	fake.set(func(k *fakeFlyKnobs) { k.execReplay = "exec_killed.json" }) // killed by SIGKILL: 128+9, as on the other providers
	if res := e.exec(m.ID, map[string]any{"cmd": "sleep 100"}); res.ExitCode != 137 {
		t.Fatalf("killed: %+v", res)
	}
	fake.set(func(k *fakeFlyKnobs) { k.execReplay = "" })

	e.wantError("POST", "/v1/computers", map[string]any{"provider": "fly"}, 501, codeNotImplemented) // egress by default: not enforceable
	e.wantError("POST", "/v1/computers/"+m.ID+"/exec", map[string]any{"cmd": "true", "tty": true}, 501, codeNotImplemented)
	e.wantError("POST", "/v1/computers/"+m.ID+"/ports", map[string]any{"port": 9999}, 501, codeNotImplemented)

	// A token Fly refuses: the doctor says so, and no request carried another token.
	bad := newTestServer(t, func(c *testSetup) {
		c.Fly = &flyConfig{App: flyTestApp, Endpoint: fake.srv.URL}
		c.getenv = func(k string) string {
			if k == "FLY_API_TOKEN" {
				return "wrong-token"
			}
			return ""
		}
	})
	pr := bad.s.computers.probe(context.Background(), bad.s.computers.providerByName("fly"))
	if pr.available || !strings.Contains(pr.reason, "refused FLY_API_TOKEN") || strings.Contains(pr.reason, "wrong-token") {
		t.Fatalf("probe with a refused token: %+v", pr)
	}
	e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
}

// TestFlyExecTimeout: an exec the API does not answer in time ends timedOut, as on every provider.
func TestFlyExecTimeout(t *testing.T) {
	requireBwrapForFly(t)
	fake := newFakeFly(t)
	e := newFlyServer(t, fake)
	m := e.create(flySpec)
	fake.set(func(k *fakeFlyKnobs) { k.execHang = true })
	res := e.exec(m.ID, map[string]any{"cmd": "sleep 30", "timeoutSec": 1})
	if !res.TimedOut || res.ExitCode != execTimedOutCode {
		t.Fatalf("timeout: %+v", res)
	}
	x := fake.requests("POST", fake.fidOf(m.ID)+"/exec")
	if secs := x[len(x)-1].body["timeout"].(float64); secs < 1 || secs > 2 {
		t.Fatalf("the exec's own timeout was %v s, not the request's 1 s", secs)
	}
	fake.set(func(k *fakeFlyKnobs) { k.execHang = false })
	e.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
}

// TestFlyNeverStarts: a machine that does not reach started is destroyed, and the create fails.
func TestFlyNeverStarts(t *testing.T) {
	fake := newFakeFly(t)
	fake.set(func(k *fakeFlyKnobs) { k.neverStarts = true })
	e := newFlyServer(t, fake, func(c *testSetup) { c.Fly.startTimeout = 2 * time.Second })
	r := e.do("POST", "/v1/computers", flySpec)
	if r.status != 500 || r.errCode(t) != codeComputerFailed || !strings.Contains(string(r.body), "did not start") {
		t.Fatalf("never started: %d %s", r.status, r.body)
	}
	d := fake.requests("DELETE", "")
	if len(d) == 0 || d[0].query["force"][0] != "true" {
		t.Fatalf("the machine was not destroyed: %+v", d)
	}
	eventually(t, "every machine destroyed (the proof's trial too)", func() bool {
		fake.mu.Lock()
		defer fake.mu.Unlock()
		for _, m := range fake.machines {
			if m["state"] != "destroyed" {
				return false
			}
		}
		return true
	})
}

// TestFlyAdoptsByMetadata: a restarted server finds its machine by metadata, not by memory, and leaves
// another server's machine in the same app alone.
func TestFlyAdoptsByMetadata(t *testing.T) {
	requireBwrapForFly(t)
	fake := newFakeFly(t)
	foreign := fake.addMachine("agentd-cmp_other", map[string]any{"agentd_owner": "someone-else", "agentd_id": "cmp_other"}, nil)
	home := t.TempDir()
	e := newFlyServer(t, fake, withHome(home))
	e.keep = true
	m := e.create(flySpec)
	e.close()

	e2 := newFlyServer(t, fake, withHome(home))
	lists := len(fake.requests("GET", "/apps/"+flyTestApp+"/machines"))
	if r := e2.exec(m.ID, map[string]any{"cmd": "echo adopted"}); r.Stdout != "adopted\n" {
		t.Fatalf("exec after restart: %+v", r)
	}
	if len(fake.requests("GET", "/apps/"+flyTestApp+"/machines")) == lists && lists == 0 {
		t.Fatal("the restarted server never listed the app's machines")
	}
	e2.call("DELETE", "/v1/computers/"+m.ID, nil, 204, nil)
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if foreign["state"] == "destroyed" {
		t.Fatal("another server's machine was destroyed")
	}
}

// FuzzFlyStdout: any exec answer's stdout decodes without a panic, and what the wrapper's base64 (with
// its line breaks) encodes comes back byte for byte.
func FuzzFlyStdout(f *testing.F) {
	f.Add([]byte("hi\n"), "")
	f.Add([]byte{0, 1, 2, 255}, "not base64 at all")
	f.Fuzz(func(t *testing.T, b []byte, raw string) {
		flyStdout(raw)
		enc := base64.StdEncoding.EncodeToString(b)
		var wrapped strings.Builder // base64(1) wraps at 76 columns
		for i := 0; i < len(enc); i += 76 {
			wrapped.WriteString(enc[i:min(i+76, len(enc))] + "\n")
		}
		if got := flyStdout(wrapped.String()); string(got) != string(b) {
			t.Fatalf("%q came back as %q", b, got)
		}
	})
}
