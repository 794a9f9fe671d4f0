package main

import (
	"io"
	"strings"
	"testing"
)

// config.yaml's model, triggers and bodyLimitBytes (issue 30): read and checked from the file, then
// obeyed by a real server: an agent naming no model runs on config's model (one naming a model, or a run
// body naming one, keeps it), triggers: false mounts nothing and runs no cron, and the body cap is the
// configured one.
func TestConfigModelTriggersBodyLimit(t *testing.T) {
	home := t.TempDir()
	writeConfig(t, home, "model: openai/gpt-4o\ntriggers: false\nbodyLimitBytes: 4096\n")
	cfg, err := loadConfig(nil, envOf(map[string]string{"AGENT_HOME": home}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Model != "openai/gpt-4o" || cfg.triggersOn() || cfg.BodyLimitBytes != 4096 {
		t.Fatalf("cfg: model %q triggers %v limit %d", cfg.Model, cfg.triggersOn(), cfg.BodyLimitBytes)
	}
	if d := defaultConfig(); !d.triggersOn() || d.BodyLimitBytes != 32<<20 || d.Model != "" {
		t.Fatalf("defaults: %+v", d)
	}
	for bad, want := range map[string]string{"bodyLimitBytes: 10\n": "bodyLimitBytes", "model: 'two words'\n": "model", "triggers: maybe\n": "line 1"} {
		writeConfig(t, home, bad)
		if _, err := loadConfig(nil, envOf(map[string]string{"AGENT_HOME": home}), io.Discard); err == nil || asAPIError(err).Code != codeConfig ||
			!strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v", bad, err)
		}
	}

	so := cliModel(t)
	off := false
	te := newE2E(t, so, "", func(c *testSetup) { c.Model, c.Triggers, c.BodyLimitBytes = "openai/gpt-4o", &off, 4096 })
	lastModel := func() string { r := so.requests(); return r[len(r)-1].Model }
	te.createAgent(map[string]any{"name": "plain", "model": "auto", "tools": []string{}, "computer": map[string]any{"enabled": false},
		"triggers": []map[string]any{{"type": "http"}, {"type": "cron", "schedule": "* * * * *", "prompt": "tick"}}})
	te.call("POST", "/v1/agents/plain/run", map[string]any{"input": "hi"}, 200, nil)
	if m := lastModel(); m != "gpt-4o" {
		t.Fatalf("an agent naming no model ran on %q, want config's gpt-4o", m)
	}
	te.call("POST", "/v1/agents/plain/run", map[string]any{"input": "hi", "model": "openai/gpt-4o-mini"}, 200, nil)
	if m := lastModel(); m != "gpt-4o-mini" {
		t.Fatalf("a run body's model was overridden: %q", m)
	}
	te.createAgent(map[string]any{"name": "named", "model": "openai/gpt-4o-mini", "tools": []string{}, "computer": map[string]any{"enabled": false}})
	te.call("POST", "/v1/agents/named/run", map[string]any{"input": "hi"}, 200, nil)
	if m := lastModel(); m != "gpt-4o-mini" {
		t.Fatalf("an agent naming a model ran on %q", m)
	}

	// triggers: false — nothing listed, no cron job, the route says why.
	var listing struct {
		Triggers []MountedTrigger `json:"triggers"`
		Cron     []any            `json:"cron"`
	}
	te.call("GET", "/v1/triggers", nil, 200, &listing)
	if len(listing.Triggers) != 0 || len(listing.Cron) != 0 {
		t.Fatalf("triggers off but listed: %+v", listing)
	}
	if e := te.wantError("POST", "/v1/t/plain", map[string]any{"input": "x"}, 404, codeRouteNotFound); !strings.Contains(e["message"].(string), "triggers: false") {
		t.Fatalf("trigger route: %v", e)
	}

	// bodyLimitBytes: a body over the configured cap is refused, naming it.
	e := te.wantError("POST", "/v1/agents", map[string]any{"spec": map[string]any{"name": "big", "description": strings.Repeat("x", 5000)}}, 422, codeSpecInvalid)
	if !strings.Contains(e["message"].(string), "4096-byte cap") {
		t.Fatalf("body cap: %v", e)
	}
}
