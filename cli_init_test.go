package main

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// `agentd init DIR` (the binary, no server): a starter agent that validates, a config.yaml that changes
// nothing as written and names every key with a value that loads when uncommented, the next command last;
// a second init refuses to overwrite without --force.
func TestCLIInit(t *testing.T) {
	te := newTestServer(t)
	dir := filepath.Join(t.TempDir(), "proj")
	r := te.agentd("", []string{"AGENT_URL=http://127.0.0.1:1"}, "init", dir)
	agentPath := filepath.Join(dir, "agents", "helper.yaml")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || lines[len(lines)-1] != `next: agentd run `+agentPath+` "what is in /work?"` {
		t.Fatalf("init: %s", r)
	}
	b, err := os.ReadFile(agentPath)
	if err != nil {
		t.Fatal(err)
	}
	if spec, issues := parseSpecYAML(string(b)); len(issues) > 0 || spec.Name != "helper" {
		t.Fatalf("the starter agent: %v", issues)
	}
	if r := te.agentd("", nil, "validate", agentPath); r.code != 0 {
		t.Fatalf("validate: %s", r)
	}
	conf, _ := os.ReadFile(filepath.Join(dir, "config.yaml"))
	var cfg config
	if err := parseConfigFile(conf, &cfg); err != nil || cfg.Port != 0 || cfg.Host != "" {
		t.Fatalf("config.yaml as written must set nothing: %v %+v", err, cfg)
	}
	for _, k := range configKeys() {
		if !strings.Contains(string(conf), "\n# "+k+": ") {
			t.Errorf("config.yaml does not name %s", k)
		}
	}
	// Uncommented, every value loads and checks.
	home := t.TempDir()
	uncommented := regexp.MustCompile(`(?m)^# ([a-zA-Z]+: )`).ReplaceAllString(string(conf), "$1")
	os.WriteFile(filepath.Join(home, "config.yaml"), []byte(uncommented), 0o600)
	loaded, err := loadConfig(nil, envOf(map[string]string{"AGENT_HOME": home}), io.Discard)
	if err != nil {
		t.Fatalf("uncommented config.yaml: %v\n%s", err, uncommented)
	}
	if d := defaultConfig(); loaded.Port != d.Port || loaded.MaxComputers != d.MaxComputers || loaded.BodyLimitBytes != d.BodyLimitBytes ||
		!loaded.triggersOn() || loaded.Images["python"] != "python:3.12-slim" {
		t.Fatalf("uncommented values are not the defaults: %+v", loaded)
	}
	// Again: refused, nothing changed; --force overwrites.
	os.WriteFile(agentPath, []byte("name: mine\n"), 0o644)
	if r := te.agentd("", nil, "init", dir); r.code != 1 || !strings.Contains(r.stderr, "exists") {
		t.Fatalf("init over existing files: %s", r)
	}
	if b, _ := os.ReadFile(agentPath); string(b) != "name: mine\n" {
		t.Fatalf("overwritten without --force: %q", b)
	}
	if r := te.agentd("", nil, "init", "--force", dir); r.code != 0 {
		t.Fatalf("init --force: %s", r)
	}
}
