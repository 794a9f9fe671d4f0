package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/websocket"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func writeConfig(t *testing.T, home, text string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(home, "config.yaml"), []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestConfigPrecedence(t *testing.T) {
	home := t.TempDir()
	writeConfig(t, home, "port: 1111\nhost: 127.0.0.2\nmaxComputers: 3\ncorsOrigins: [https://a.example]\n")
	cases := []struct {
		name     string
		args     []string
		env      map[string]string
		wantPort int
		wantHost string
	}{
		{"config file over defaults", nil, map[string]string{"AGENT_HOME": home}, 1111, "127.0.0.2"},
		{"env over config file", nil, map[string]string{"AGENT_HOME": home, "AGENT_PORT": "2222", "AGENT_HOST": "127.0.0.3"}, 2222, "127.0.0.3"},
		{"flag over env", []string{"--port", "3333", "--host", "127.0.0.4"}, map[string]string{"AGENT_HOME": home, "AGENT_PORT": "2222", "AGENT_HOST": "127.0.0.3"}, 3333, "127.0.0.4"},
		{"port 0 flag", []string{"--port", "0"}, map[string]string{"AGENT_HOME": home, "AGENT_PORT": "2222"}, 0, "127.0.0.2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := loadConfig(tc.args, envOf(tc.env), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Port != tc.wantPort || cfg.Host != tc.wantHost || cfg.MaxComputers != 3 || cfg.CORSOrigins[0] != "https://a.example" {
				t.Fatalf("cfg %+v", cfg)
			}
		})
	}
	// Defaults with no file; --home beats AGENT_HOME; the data dir is created 0700 and firstRun set once.
	fresh := filepath.Join(t.TempDir(), "new-home")
	cfg, err := loadConfig([]string{"--home", fresh}, envOf(map[string]string{"AGENT_HOME": home}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := defaultConfig()
	if cfg.Home != fresh || cfg.Port != want.Port || cfg.Host != want.Host || cfg.MaxComputers != 8 || cfg.MaxCostUSD != 5 || !cfg.firstRun {
		t.Fatalf("defaults %+v", cfg)
	}
	if st, err := os.Stat(fresh); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("data dir: %v %v", st.Mode(), err)
	}
	if cfg, _ := loadConfig([]string{"--home", fresh}, envOf(nil), io.Discard); cfg.firstRun {
		t.Fatal("firstRun on the second start")
	}
	// HOME/.agentd when nothing names the data dir.
	userHome := t.TempDir()
	if cfg, err := loadConfig(nil, envOf(map[string]string{"HOME": userHome}), io.Discard); err != nil || cfg.Home != filepath.Join(userHome, ".agentd") {
		t.Fatalf("default home %q %v", cfg.Home, err)
	}
	// The token comes from the environment or --token-file.
	tf := filepath.Join(t.TempDir(), "tok")
	os.WriteFile(tf, []byte("from-file\n"), 0o600)
	if cfg, _ := loadConfig([]string{"--token-file", tf}, envOf(map[string]string{"AGENT_HOME": home, "AGENT_TOKEN": "env"}), io.Discard); cfg.Token != "from-file" {
		t.Fatalf("token %q", cfg.Token)
	}
	if cfg, _ := loadConfig(nil, envOf(map[string]string{"AGENT_HOME": home, "AGENT_TOKEN": "env"}), io.Discard); cfg.Token != "env" {
		t.Fatalf("token %q", cfg.Token)
	}
}

// Every key config.yaml accepts is documented in docs/configuration.md's table.
func TestConfigFileAcceptsEveryDocumentedKey(t *testing.T) {
	home := t.TempDir()
	writeConfig(t, home, "logFormat: json\nlogLevel: debug\nallowedRegistries: [registry.example:5000]\nreaperIntervalSec: 7\n")
	cfg, err := loadConfig(nil, envOf(map[string]string{"AGENT_HOME": home}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.LogFormat != "json" || cfg.LogLevel != "debug" || len(cfg.AllowedRegistries) != 1 || cfg.ReaperIntervalSec != 7 {
		t.Fatalf("cfg %+v", cfg)
	}
	doc, _ := os.ReadFile("docs/configuration.md")
	for _, k := range configKeys() {
		if !strings.Contains(string(doc), "`"+k+"`") {
			t.Errorf("config key %s is not documented in docs/configuration.md", k)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		name, file string
		args       []string
		env        map[string]string
		code, msg  string
		hint       []string
	}{
		{"unknown key", "port: 1\ncolour: red\n", nil, nil, codeConfig, `unknown key "colour"`, []string{"corsOrigins"}},
		{"token in file", "token: abc\n", nil, nil, codeConfig, "never read from the config file", []string{"AGENT_TOKEN"}},
		{"bad type", "port: lots\n", nil, nil, codeConfig, "config.yaml", nil},
		{"not a mapping", "- a\n", nil, nil, codeConfig, "mapping", nil},
		{"bad yaml", "port: [\n", nil, nil, codeConfig, "config.yaml", nil},
		{"bad env port", "", nil, map[string]string{"AGENT_PORT": "x"}, codeConfig, "AGENT_PORT", nil},
		{"port range", "", []string{"--port", "70000"}, nil, codeConfig, "out of range", nil},
		{"negative port flag", "", []string{"--port", "-5"}, nil, codeConfig, "out of range", nil},
		{"non-loopback without token", "", []string{"--host", "0.0.0.0"}, nil, codeConfig, "the API can execute shell commands", []string{"AGENT_TOKEN", "127.0.0.1"}},
		{"non-loopback from config file", "host: 192.168.1.10\n", nil, nil, codeConfig, "shell commands", []string{"AGENT_TOKEN", "127.0.0.1"}},
		{"empty host", "host: ''\n", nil, nil, codeConfig, "shell commands", []string{"AGENT_TOKEN", "127.0.0.1"}},
		{"reaper interval", "reaperIntervalSec: 0\n", nil, nil, codeConfig, "reaperIntervalSec is 0", nil},
		{"negative machines", "maxComputers: -1\n", nil, nil, codeConfig, "maxComputers", nil},
		{"negative cost", "maxCostUsd: -2\n", nil, nil, codeConfig, "maxCostUsd", nil},
		{"unknown provider", "computerProvider: vmware\n", nil, nil, codeConfig, "one of auto, docker, podman, kubernetes, sandbox, local, ssh, fly", nil},
		{"fly without its block", "computerProvider: fly\n", nil, nil, codeConfig, "set only with a fly: block", nil},
		{"fly without an app", "fly: {region: ord}\n", nil, nil, codeConfig, "fly.app", nil},
		{"fly cpu kind", "fly: {app: a, cpuKind: gpu}\n", nil, nil, codeConfig, "shared or performance", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			home := t.TempDir()
			if tc.file != "" {
				writeConfig(t, home, tc.file)
			}
			env := map[string]string{"AGENT_HOME": home}
			for k, v := range tc.env {
				env[k] = v
			}
			err := run(context.Background(), append([]string{"serve"}, tc.args...), envOf(env), io.Discard, io.Discard)
			var ae *apiError
			if !errors.As(err, &ae) || ae.Code != tc.code || !strings.Contains(ae.Message, tc.msg) {
				t.Fatalf("err %v, want %s containing %q", err, tc.code, tc.msg)
			}
			for _, h := range tc.hint {
				if !strings.Contains(ae.Hint, h) {
					t.Fatalf("hint %q lacks %q", ae.Hint, h)
				}
			}
		})
	}
	// Loopback names and a token make non-default binds acceptable.
	for _, ok := range []struct {
		host, token string
	}{{"localhost", ""}, {"::1", ""}, {"127.0.0.5", ""}, {"0.0.0.0", "a-token-of-sixteen-chars"}} {
		if _, err := loadConfig([]string{"--host", ok.host}, envOf(map[string]string{"AGENT_HOME": t.TempDir(), "AGENT_TOKEN": ok.token}), io.Discard); err != nil {
			t.Fatalf("%s: %v", ok.host, err)
		}
	}
	// Usage errors.
	var ue usageError
	for _, args := range [][]string{{"bogus"}, {"serve", "--nope"}, {"serve", "extra"}} {
		if err := run(context.Background(), args, envOf(map[string]string{"AGENT_HOME": t.TempDir()}), io.Discard, io.Discard); !errors.As(err, &ue) {
			t.Fatalf("%v: %v is not a usage error", args, err)
		}
	}
	// No command prints the overview and succeeds (DESIGN §8).
	var out strings.Builder
	if err := run(context.Background(), nil, envOf(nil), &out, io.Discard); err != nil || !strings.Contains(out.String(), "usage: agentd COMMAND") {
		t.Fatalf("no command: %v %q", err, out.String())
	}
	// Log settings are checked.
	for _, args := range [][]string{{"--log-format", "xml"}, {"--log-level", "loud"}} {
		if _, err := loadConfig(args, envOf(map[string]string{"AGENT_HOME": t.TempDir()}), io.Discard); err == nil || asAPIError(err).Code != codeConfig {
			t.Fatalf("%v: %v", args, err)
		}
	}
}

func TestBusyPortNamesThePort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	err = run(context.Background(), []string{"serve", "--port", port}, envOf(map[string]string{"AGENT_HOME": t.TempDir()}), io.Discard, io.Discard)
	var ae *apiError
	if !errors.As(err, &ae) || !strings.Contains(ae.Message, port) || !strings.Contains(ae.Hint, port) {
		t.Fatalf("busy port: %v (hint %q)", err, ae.Hint)
	}
}

func TestVersionCommand(t *testing.T) {
	var out strings.Builder
	if err := run(context.Background(), []string{"version"}, envOf(nil), &out, io.Discard); err != nil || !strings.HasPrefix(out.String(), "agentd "+version+" go") {
		t.Fatalf("%q %v", out.String(), err)
	}
}

// addrWatcher is a stderr that reports the address of the "listening on" line.
type addrWatcher struct {
	mu   sync.Mutex
	buf  strings.Builder
	addr chan string
	sent bool
}

func newAddrWatcher() *addrWatcher { return &addrWatcher{addr: make(chan string, 1)} }

func (w *addrWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.sent {
		if addr, ok := listeningAddr(w.buf.String()); ok {
			w.addr <- addr
			w.sent = true
		}
	}
	return len(p), nil
}

func (w *addrWatcher) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// listeningAddr finds `listening on http://H:P` in the server's stderr.
func listeningAddr(s string) (string, bool) {
	_, rest, ok := strings.Cut(s, " listening on http://")
	if !ok {
		return "", false
	}
	addr, _, ok := strings.Cut(rest, "\n")
	return addr, ok
}

// startServe runs `agentd serve` in-process on port 0 and returns its base URL and a stop function that
// cancels ctx and returns run's error.
func startServe(t *testing.T, home string, env map[string]string) (string, func() error) {
	t.Helper()
	base, stop, _ := startServeWith(t, home, env)
	return base, stop
}

// startServeWith is startServe with extra serve flags; it also returns the server's stderr (its log).
func startServeWith(t *testing.T, home string, env map[string]string, flags ...string) (string, func() error, *addrWatcher) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stderr := newAddrWatcher()
	e := map[string]string{"AGENT_HOME": home}
	for k, v := range env {
		e[k] = v
	}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"serve", "--port", "0"}, flags...), envOf(e), io.Discard, stderr)
	}()
	var addr string
	select {
	case addr = <-stderr.addr:
	case err := <-done:
		cancel()
		t.Fatalf("serve ended early: %v\n%s", err, stderr)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatalf("serve did not start:\n%s", stderr)
	}
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			t.Fatalf("serve did not shut down:\n%s", stderr)
			return nil
		}
	}
	t.Cleanup(func() { stop() })
	return "http://" + addr, stop, stderr
}

func TestEndToEnd(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home") // created by the server: a first run
	base, stop := startServe(t, home, map[string]string{"AGENT_TOKEN": "e2e-token"})
	ts := &testServer{t: t, url: base}
	auth := []string{"Authorization", "Bearer e2e-token"}

	if res := ts.do("GET", "/health", nil); res.status != 200 || res.header.Get("X-Agent-Version") != version {
		t.Fatalf("health %d", res.status)
	}
	if res := ts.do("GET", "/v1/agents", nil); res.status != 401 {
		t.Fatalf("no token: %d", res.status)
	}

	// The socket, authenticated by query token, subscribed to triggers.
	ws := ts.dial("/v1/events?token=e2e-token", "")
	if f := frame(t, ws); f["type"] != "hello" {
		t.Fatalf("hello %v", f)
	}
	sendFrame(t, ws, map[string]any{"type": "subscribe", "topics": []string{"triggers"}})
	if f := frame(t, ws); f["type"] != "subscribed" {
		t.Fatalf("subscribed %v", f)
	}

	if res := ts.do("POST", "/v1/agents/validate", map[string]any{"yaml": "name: e2e\nlimits: {maxSteps: 0}\n"}, auth...); res.status != 200 || res.json(t)["ok"] != false {
		t.Fatalf("validate %d %s", res.status, res.body)
	}
	if res := ts.do("POST", "/v1/agents", map[string]any{"yaml": "name: e2e\n"}, auth...); res.status != 201 {
		t.Fatalf("create %d %s", res.status, res.body)
	}
	if f := frame(t, ws); f["type"] != "agent_created" || f["topic"] != "triggers" {
		t.Fatalf("event %v", f)
	}
	if res := ts.do("GET", "/v1/doctor", nil, auth...); res.status != 200 || res.json(t)["firstRun"] != true {
		t.Fatalf("doctor %d %s", res.status, res.body)
	}

	// Clean shutdown with the socket open: run returns nil and the socket is closed.
	if err := stop(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	var b []byte
	var err error
	for err == nil { // frames already sent before the shutdown may still be read
		err = websocket.Message.Receive(ws, &b)
	}
	if strings.Contains(err.Error(), "timeout") {
		t.Fatalf("socket still open after shutdown: %v", err)
	}
	if _, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), time.Second); err == nil {
		t.Fatal("the port still accepts connections after shutdown")
	}

	// Restart on the same data directory: the agent survived, and it is no longer a first run.
	base2, stop2 := startServe(t, home, map[string]string{"AGENT_TOKEN": "e2e-token"})
	ts2 := &testServer{t: t, url: base2}
	if res := ts2.do("GET", "/v1/agents/e2e", nil, auth...); res.status != 200 || res.json(t)["yaml"] != "name: e2e\n" {
		t.Fatalf("after restart: %d %s", res.status, res.body)
	}
	if res := ts2.do("GET", "/v1/doctor", nil, auth...); res.json(t)["firstRun"] != false {
		t.Fatal("firstRun after a restart")
	}
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
}

// TestHelperProcess is not a test: it is the child process of the crash tests (see helperCommand).
func TestHelperProcess(t *testing.T) {
	switch os.Getenv("AGENTD_TEST_CHILD") {
	case "serve":
		err := run(context.Background(), []string{"serve", "--port", "0"}, os.Getenv, os.Stdout, os.Stderr)
		fmt.Fprintln(os.Stderr, "serve returned:", err)
		os.Exit(3)
	case "main":
		os.Args = append([]string{"agentd"}, strings.Fields(os.Getenv("AGENTD_TEST_ARGS"))...)
		main()
		os.Exit(0)
	case "engine-child": // an engine CLI call in flight, through the one engine helper
		e := &engineProvider{name: "sleep"}
		cmd := e.cli(context.Background(), "300")
		if err := cmd.Start(); err != nil {
			os.Exit(4)
		}
		fmt.Println(cmd.Process.Pid)
		select {}
	}
}

// helperCommand re-executes the test binary as a child running one of TestHelperProcess's roles.
func helperCommand(t *testing.T, role string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), append([]string{"AGENTD_TEST_CHILD=" + role}, env...)...)
	return cmd
}

func TestMainRefusesNonLoopbackWithoutToken(t *testing.T) {
	cmd := helperCommand(t, "main", "AGENTD_TEST_ARGS=serve --host 0.0.0.0", "AGENT_HOME="+t.TempDir(), "AGENT_TOKEN=")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("exit: %v\n%s", err, out)
	}
	for _, want := range []string{"E_CONFIG", "shell commands", "AGENT_TOKEN", "127.0.0.1"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("stderr lacks %q:\n%s", want, out)
		}
	}
	cmd = helperCommand(t, "main", "AGENTD_TEST_ARGS=frobnicate", "AGENT_HOME="+t.TempDir())
	if err := cmd.Run(); !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("usage exit: %v", err)
	}
}

// startServeChild starts `agentd serve` on home as a child process (helperCommand) and waits until it
// listens; at cleanup it is stopped as a user stops it (SIGTERM: its machines' trials and channels close;
// SIGKILL only if it has not ended within a minute). Crash tests kill it themselves (SIGKILL) and start
// another.
func startServeChild(t *testing.T, home string) (*exec.Cmd, *testServer) {
	t.Helper()
	cmd := helperCommand(t, "serve", "AGENT_HOME="+home, "AGENT_TOKEN=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopGently(cmd) })
	addrCh := make(chan string, 1)
	var said strings.Builder // what the child printed before it listened (guarded by the channel)
	go func() {
		defer close(addrCh)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if addr, ok := listeningAddr(sc.Text() + "\n"); ok {
				addrCh <- addr
				io.Copy(io.Discard, stderr)
				return
			}
			said.WriteString(sc.Text() + "\n")
		}
	}()
	select {
	case addr, ok := <-addrCh:
		if !ok {
			t.Fatalf("agentd exited before listening:\n%s", said.String())
		}
		return cmd, &testServer{t: t, url: "http://" + addr}
	case <-time.After(120 * time.Second):
		t.Fatal("agentd did not start")
	}
	return nil, nil
}

// TestKill9LosesNoAcknowledgedWrite starts agentd as a child, creates agents from several clients at
// once, kills it with SIGKILL in the middle of the burst, then checks every agent that was answered 201
// is in the database, which is intact.
func TestKill9LosesNoAcknowledgedWrite(t *testing.T) {
	home := t.TempDir()
	cmd, ts := startServeChild(t, home)

	var mu sync.Mutex
	var acked []string
	var wg sync.WaitGroup
	const writers = 8
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				name := fmt.Sprintf("w%d-%d", w, i)
				body := strings.NewReader(`{"yaml":"name: ` + name + `\n"}`)
				res, err := httpClientPost(ts.url+"/v1/agents", body)
				if err != nil {
					return // the server is gone
				}
				if res == 201 {
					mu.Lock()
					acked = append(acked, name)
					mu.Unlock()
				}
			}
		}(w)
	}
	eventually(t, "a burst of acknowledged writes", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= 300
	})
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	wg.Wait()
	cmd.Wait()

	st, err := openStore(filepath.Join(home, "agentd.db"), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var check string
	if err := st.db.QueryRow("PRAGMA integrity_check").Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check: %q %v", check, err)
	}
	rows, err := st.ListAgents(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, r := range rows {
		have[r.Name] = true
	}
	for _, name := range acked {
		if !have[name] {
			t.Fatalf("acknowledged agent %s was lost (%d acknowledged, %d stored)", name, len(acked), len(rows))
		}
	}
	t.Logf("%d acknowledged writes, %d stored, none lost", len(acked), len(rows))

	// And the server starts again on that data.
	base, stop := startServe(t, home, nil)
	res := (&testServer{t: t, url: base}).do("GET", "/v1/agents/"+acked[0], nil)
	if res.status != 200 {
		t.Fatalf("after the crash: %d %s", res.status, res.body)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func httpClientPost(url string, body io.Reader) (int, error) {
	res, err := crashClient.Post(url, "application/json", body)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode, nil
}

var crashClient = &http.Client{Timeout: 30 * time.Second}

// TestSIGTERMShutsDownCleanly runs the real main in a child, holds a WebSocket open, sends SIGTERM and
// expects exit code 0 after the shutdown sequence, with the socket closed.
func TestSIGTERMShutsDownCleanly(t *testing.T) {
	home := t.TempDir()
	cmd := helperCommand(t, "main", "AGENTD_TEST_ARGS=serve --port 0", "AGENT_HOME="+home, "AGENT_TOKEN=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	addrCh := make(chan string, 1)
	var logMu sync.Mutex
	var log strings.Builder
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logMu.Lock()
			log.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			if addr, ok := listeningAddr(sc.Text() + "\n"); ok {
				addrCh <- addr
			}
		}
	}()
	var addr string
	select {
	case addr = <-addrCh:
	case <-time.After(60 * time.Second):
		t.Fatal("child did not start")
	}
	base := "http://" + addr
	ws := (&testServer{t: t, url: base}).dial("/v1/events", "")
	frame(t, ws)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-scanned
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, log.String())
	}
	if !strings.Contains(log.String(), "agentd stopped") {
		t.Fatalf("no shutdown line:\n%s", log.String())
	}
	ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	var b []byte
	if err := websocket.Message.Receive(ws, &b); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("socket open after shutdown: %v", err)
	}
}

func TestValidateCommand(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	js := filepath.Join(dir, "agent.json")
	os.WriteFile(good, []byte("name: good\n"), 0o600)
	os.WriteFile(bad, []byte("name: Bad\nlimits: {maxSteps: 0}\n"), 0o600)
	os.WriteFile(js, []byte(`{"name":"j"}`), 0o600)

	var out strings.Builder
	if err := run(context.Background(), []string{"validate", good, js}, envOf(nil), &out, io.Discard); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if out.String() != good+": ok\n"+js+": ok\n" {
		t.Fatalf("output %q", out.String())
	}
	out.Reset()
	err := run(context.Background(), []string{"validate", good, bad, filepath.Join(dir, "missing.yaml")}, envOf(nil), &out, io.Discard)
	var ae *apiError
	if !errors.As(err, &ae) || ae.Code != codeSpecInvalid || !strings.Contains(ae.Message, "2 of 3") {
		t.Fatalf("err %v", err)
	}
	for _, want := range []string{bad + ": name: " + nameRuleMessage, bad + ": limits.maxSteps: Number must be greater than or equal to 1", "missing.yaml: (root): "} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	run(context.Background(), []string{"validate", "--json", bad}, envOf(nil), &out, io.Discard)
	if !strings.Contains(out.String(), `"ok": false`) || !strings.Contains(out.String(), `"issues": [`) {
		t.Fatalf("json output %s", out.String())
	}
	var ue usageError
	if err := run(context.Background(), []string{"validate"}, envOf(nil), io.Discard, io.Discard); !errors.As(err, &ue) {
		t.Fatalf("no files: %v", err)
	}
}

// The server says what it does — a line per request, per run start and end, per machine — as text or
// JSON, and never logs a secret: provider keys, the bearer token (also when sent as ?token=), or a
// secret-bearing spec value.
func TestServerLogHasRequestsRunsMachinesAndNoSecrets(t *testing.T) {
	const (
		key   = "sk-proj-LOGSECRET0123456789abcdefghijklmnopqrstuvwx"
		token = "agentd-token-LOGSECRET-4242"
	)
	so := newScriptedOpenAI(t, func(r scriptReq) scriptReply { return scriptReply{text: "fine"} })
	home := t.TempDir()
	base, stop, logw := startServeWith(t, home, map[string]string{"OPENAI_API_KEY": key, "OPENAI_BASE_URL": so.URL,
		"AGENT_TOKEN": token, "HOME": home}, "--log-format", "json")
	ts := &testServer{t: t, url: base}
	auth := []string{"Authorization", "Bearer " + token}
	if res := ts.do("POST", "/v1/agents", map[string]any{"spec": map[string]any{"name": "logged", "model": "openai/gpt-4o-mini",
		"computer": map[string]any{"provider": "local", "env": map[string]any{"API_KEY": "spec-value-LOGSECRET"}}}}, auth...); res.status != 201 {
		t.Fatalf("create: %d %s", res.status, res.body)
	}
	if res := ts.do("POST", "/v1/agents/logged/run", map[string]any{"input": "hello"}, auth...); res.status != 200 {
		t.Fatalf("run: %d %s", res.status, res.body)
	}
	if res := ts.do("POST", "/v1/computers", map[string]any{"provider": "local", "name": "logbox"}, auth...); res.status != 201 {
		t.Fatalf("create computer: %d %s", res.status, res.body)
	}
	ts.do("GET", "/v1/runs?token="+token, nil, "Accept", "text/event-stream") // the token in a query string
	ts.do("GET", "/v1/agents", nil, "Authorization", "Bearer wrong-"+token)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	log := logw.String()
	for _, secret := range []string{key, token, "spec-value-LOGSECRET", "LOGSECRET"} {
		if strings.Contains(log, secret) {
			t.Fatalf("the log holds a secret %q:\n%s", secret, log)
		}
	}
	var requests, runStarts, runEnds, machines int
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		if strings.HasPrefix(line, "agentd ") { // the "listening on" line is for people
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not a JSON log line: %q", line)
		}
		switch rec["msg"] {
		case "request":
			requests++
			if rec["method"] == nil || rec["path"] == nil || rec["status"] == nil || rec["bytes"] == nil || rec["ms"] == nil ||
				!strings.HasPrefix(fmt.Sprint(rec["requestId"]), "req_") {
				t.Fatalf("request line lacks a field: %v", rec)
			}
		case "run started":
			runStarts++
		case "run finished":
			runEnds++
			if rec["stop"] != "complete" || rec["agent"] != "logged" {
				t.Fatalf("run line: %v", rec)
			}
		case "computer created":
			machines++
		}
	}
	if requests < 5 || runStarts != 1 || runEnds != 1 || machines != 1 {
		t.Fatalf("requests %d, run starts %d, run ends %d, machines %d:\n%s", requests, runStarts, runEnds, machines, log)
	}
}

// With --port 0 the doctor names the port the server really bound, not 0.
func TestDoctorShowsTheBoundPort(t *testing.T) {
	base, _ := startServe(t, t.TempDir(), nil)
	ts := &testServer{t: t, url: base}
	port := base[strings.LastIndex(base, ":")+1:]
	w := fmt.Sprint(ts.do("GET", "/v1/doctor", nil).json(t)["warnings"])
	if !strings.Contains(w, "127.0.0.1:"+port) || strings.Contains(w, "127.0.0.1:0 ") {
		t.Fatalf("bound port %s not in the warnings: %s", port, w)
	}
}

// An engine CLI child (a docker exec in flight) dies with the server, even a server killed with -9.
func TestEngineChildDiesWithTheServer(t *testing.T) {
	cmd := helperCommand(t, "engine-child")
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	if _, err := fmt.Fscan(out, &pid); err != nil || pid <= 0 {
		cmd.Process.Kill()
		t.Fatalf("no child pid: %v", err)
	}
	if !processAlive(pid) {
		t.Fatalf("the child %d is not running", pid)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	eventually(t, "the engine child to die with its parent", func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		return err != nil || strings.Contains(string(b), ") Z ") // gone, or a zombie awaiting init
	})
}

// agentd.db and its WAL and SHM files are readable by their owner only; a short token is refused on a
// non-loopback bind, warned about on loopback, and redacted whatever its length.
func TestDatabaseModeAndShortTokens(t *testing.T) {
	ts := newTestServer(t)
	ts.do("POST", "/v1/agents", map[string]any{"yaml": "name: x\n"})
	for _, f := range []string{"agentd.db", "agentd.db-wal", "agentd.db-shm"} {
		fi, err := os.Stat(filepath.Join(ts.s.cfg.Home, f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", f, fi.Mode().Perm(), err)
		}
	}
	env := map[string]string{"AGENT_HOME": t.TempDir(), "AGENT_TOKEN": "short-token"}
	if _, err := loadConfig([]string{"--host", "0.0.0.0"}, envOf(env), io.Discard); err == nil || !strings.Contains(err.Error(), "11-character token") {
		t.Fatalf("short token on 0.0.0.0: %v", err)
	}
	env["AGENT_TOKEN"] = "a-long-enough-token-of-32-chars!"
	if _, err := loadConfig([]string{"--host", "0.0.0.0"}, envOf(env), io.Discard); err != nil {
		t.Fatalf("long token on 0.0.0.0: %v", err)
	}
	short := newTestServer(t, func(c *testSetup) { c.Token = "abc" })
	if w := fmt.Sprint(short.do("GET", "/v1/doctor", nil, "Authorization", "Bearer abc").json(t)["warnings"]); !strings.Contains(w, "AGENT_TOKEN has 3 characters") {
		t.Fatalf("no warning: %s", w)
	}
	if got := newRedactor(envOf(map[string]string{"AGENT_TOKEN": "abc"})).redact("token=abc here"); strings.Contains(got, "abc") {
		t.Fatalf("a short token was not redacted: %q", got)
	}
}

// TestOneProcessPerDataDirectory: while a server holds a data directory, a second server and the
// in-process `agentd mcp` refuse it, naming the holder's pid and the way out; once it stops, the
// directory is free again.
func TestOneProcessPerDataDirectory(t *testing.T) {
	home := t.TempDir()
	_, stop := startServe(t, home, nil)
	env := envOf(map[string]string{"AGENT_HOME": home})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // a server that started anyway ends, and fails below
	defer cancel()
	err := run(ctx, []string{"serve", "--port", "0"}, env, io.Discard, io.Discard)
	if e := asAPIError(err); err == nil || e.Code != codeConfig || !strings.Contains(e.Message, fmt.Sprintf("pid %d", os.Getpid())) ||
		!strings.Contains(e.Message, home) || !strings.Contains(e.Hint, "AGENT_HOME") {
		t.Fatalf("a second serve on the same home: %v", err)
	}
	err = run(ctx, []string{"mcp"}, env, io.Discard, io.Discard)
	if e := asAPIError(err); err == nil || e.Code != codeConfig || !strings.Contains(e.Hint, "AGENT_URL") {
		t.Fatalf("agentd mcp beside a server on the same home: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	_, stop2 := startServe(t, home, nil)
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
}
