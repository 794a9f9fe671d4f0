package main

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// Issue 26 item 3: config.yaml is re-read on SIGHUP. In-process: the reload goes through the server's
// reloads channel (where runServe routes SIGHUP); live keys change at once, the others are named in the
// log and keep their running value; a broken file changes nothing.
func TestConfigReloadOnHUP(t *testing.T) {
	ts := newTestServer(t)
	s := ts.s
	var logs syncBuffer
	s.log = slog.New(slog.NewTextHandler(&logs, nil))
	reload := func() {
		t.Helper()
		before := strings.Count(logs.String(), "config.yaml")
		s.reloads <- syscall.SIGHUP
		eventually(t, "the reload's log line", func() bool { return strings.Count(logs.String(), "config.yaml") > before })
	}
	startPort := s.conf().Port
	writeConfig(t, s.cfg.Home, "port: 4242\nmaxComputers: 2\nmaxCostUsd: 0.25\nimages: {base: example.org/reloaded:1}\n"+
		"modelAliases: {house: openai/gpt-4o-mini}\ncorsOrigins: [https://reloaded.example]\nallowedMounts: [/srv/reloaded]\n")
	reload()
	if got := s.computers.imageFor(ComputerSpec{Flavor: "base"}); got != "example.org/reloaded:1" {
		t.Errorf("images after the reload: base is %s", got)
	}
	if cc := s.computers.conf(); cc.maxComputers != 2 || !slices.Equal(cc.mountRoots, []string{"/srv/reloaded"}) {
		t.Errorf("computers after the reload: %+v", cc)
	}
	if got, err := s.models.resolve(context.Background(), "house"); err != nil || !slices.Equal(got, []string{"openai/gpt-4o-mini"}) {
		t.Errorf("modelAliases after the reload: %v %v", got, err)
	}
	if c := s.conf(); c.MaxCostUSD != 0.25 || !slices.Equal(c.CORSOrigins, []string{"https://reloaded.example"}) || c.Port != startPort {
		t.Errorf("server settings after the reload: maxCost %v cors %v port %d (start %d)", c.MaxCostUSD, c.CORSOrigins, c.Port, startPort)
	}
	// Two lines (what was applied, what needs a restart), written one after the other: reload() saw the first.
	eventually(t, "the reload's log lines: images applied, port needing a restart", func() bool {
		l := logs.String()
		return regexp.MustCompile(`config.yaml reloaded.*applied=\S*images`).MatchString(l) &&
			regexp.MustCompile(`take effect only after a restart.*restart=\S*port`).MatchString(l)
	})
	// The quota follows the reloaded limit.
	ts.call("POST", "/v1/computers", map[string]any{"provider": "local"}, 201, nil)
	ts.call("POST", "/v1/computers", map[string]any{"provider": "local"}, 201, nil)
	if r := ts.do("POST", "/v1/computers", map[string]any{"provider": "local"}); r.status != 429 || !strings.Contains(string(r.body), "2 of 2") || !strings.Contains(string(r.body), "kill -HUP") {
		t.Errorf("third machine over the reloaded limit: %d %s", r.status, r.body)
	}
	// A file that does not check changes nothing and says why.
	writeConfig(t, s.cfg.Home, "maxComputers: -1\nimages: {base: example.org/other:2}\n")
	reload()
	if got := s.computers.imageFor(ComputerSpec{Flavor: "base"}); got != "example.org/reloaded:1" || !strings.Contains(logs.String(), "config.yaml not reloaded") {
		t.Errorf("a broken file was applied: base %s\n%s", got, logs.String())
	}
}

// The real signal: `agentd serve` reloads config.yaml on SIGHUP and logs what changed, also when the
// token file it started with was removed since.
func TestConfigReloadServeSIGHUP(t *testing.T) {
	home := t.TempDir()
	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte("a-token-of-enough-characters\n"), 0o600)
	cmd := exec.Command(cliBinary(t), "serve", "--port", "0", "--home", home, "--token-file", tokenFile)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home}
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() })
	var mu sync.Mutex
	var log bytes.Buffer
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			mu.Lock()
			log.WriteString(sc.Text() + "\n")
			mu.Unlock()
		}
	}()
	seen := func(re string) bool {
		mu.Lock()
		defer mu.Unlock()
		return regexp.MustCompile(re).MatchString(log.String())
	}
	eventually(t, "the server to listen", func() bool { return seen("listening on http://") })
	os.Remove(tokenFile)
	os.WriteFile(filepath.Join(home, "config.yaml"), []byte("images: {base: example.org/hup:1}\nport: 1\n"), 0o600)
	cmd.Process.Signal(syscall.SIGHUP)
	eventually(t, "the reload in the log", func() bool {
		return seen(`config.yaml reloaded.*applied=images`) && seen(`take effect only after a restart.*restart=port`)
	})
	if !seen("listening on http://") || cmd.ProcessState != nil {
		t.Fatal("the server did not survive SIGHUP")
	}
}

// Every hint that sends a user to config.yaml says how the change takes effect.
func TestConfigHintsSayHowTheyTakeEffect(t *testing.T) {
	files, _ := os.ReadDir(".")
	hint := regexp.MustCompile(`(withHint\(|hint:\s*|hint = |Hint: )`)
	for _, f := range files {
		if !strings.HasSuffix(f.Name(), ".go") || strings.HasSuffix(f.Name(), "_test.go") {
			continue
		}
		b, _ := os.ReadFile(f.Name())
		for i, line := range strings.Split(string(b), "\n") {
			loc := hint.FindStringIndex(line)
			if loc == nil || !strings.Contains(line[loc[0]:], "config.yaml") { // the hint's text, not the message's
				continue
			}
			if !strings.Contains(line[loc[0]:], "takesEffect(") {
				t.Errorf("%s:%d: a hint sends users to config.yaml without saying how it takes effect: %s", f.Name(), i+1, strings.TrimSpace(line))
			}
		}
	}
	if got := takesEffect("images"); !strings.Contains(got, "kill -HUP") {
		t.Errorf("images: %q", got)
	}
	if got := takesEffect("port"); !strings.Contains(got, "restart") || strings.Contains(got, "HUP") {
		t.Errorf("port: %q", got)
	}
}
