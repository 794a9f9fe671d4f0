package main

// Tests of spec warnings (issue 26 item 6): unknown tools and unreachable models pass validation as
// warnings — never issues — on POST /v1/agents/validate, `agentd validate` and `agentd apply`.

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestValidateWarnsOnUnknownToolsAndModels(t *testing.T) {
	ts := newTestServer(t, withEnv(map[string]string{"OPENAI_API_KEY": e2eKey}))
	check := func(spec map[string]any, want ...string) {
		t.Helper()
		var got struct {
			OK       bool
			Issues   []string
			Warnings []string
		}
		ts.call("POST", "/v1/agents/validate", map[string]any{"spec": spec}, 200, &got)
		if !got.OK || len(got.Issues) != 0 || !slices.Equal(got.Warnings, want) {
			t.Fatalf("validate %v: %+v, want warnings %q", spec, got, want)
		}
	}
	check(map[string]any{"name": "a", "model": "openai/gpt-4o-mini", "tools": []string{"computer", "flie", "shel"}},
		"tools.1: flie: unknown tool (it is dropped); did you mean files?",
		"tools.2: shel: unknown tool (it is dropped); did you mean shell?")
	check(map[string]any{"name": "a", "model": "openai/gpt-4o-mini", "tools": []string{"computer", "zzzzzzzz", "mcp:nowhere"}},
		"tools.1: zzzzzzzz: unknown tool (it is dropped)",
		`tools.2: mcp:nowhere: no MCP server "nowhere" in config.yaml's mcpServers`)
	// A clean spec answers exactly the contract's shape.
	if res := ts.do("POST", "/v1/agents/validate", map[string]any{"spec": map[string]any{"name": "a", "model": "openai/gpt-4o-mini", "tools": []string{"files", "read_file"}}}); string(res.body) != "{\"ok\":true}\n" {
		t.Fatalf("clean spec: %s", res.body)
	}
	// A misspelt model, and one whose provider has no key here.
	var got struct{ Warnings []string }
	ts.call("POST", "/v1/agents/validate", map[string]any{"spec": map[string]any{"name": "a", "model": "sonet",
		"fallbackModels": []string{"anthropic/claude-sonnet-4-5", "openai/gpt-4o"}}}, 200, &got)
	if len(got.Warnings) != 2 || !strings.HasPrefix(got.Warnings[0], "model: sonet: no model provider this server reaches serves it (E_MODEL_UNAVAILABLE") ||
		!strings.HasSuffix(got.Warnings[0], "; did you mean sonnet?") ||
		!strings.HasPrefix(got.Warnings[1], "fallbackModels.0: anthropic/claude-sonnet-4-5: no model provider this server reaches serves it (") {
		t.Fatalf("model warnings: %q", got.Warnings)
	}
	// Warnings never make a spec invalid: it is stored.
	ts.call("POST", "/v1/agents", map[string]any{"spec": map[string]any{"name": "stored", "tools": []string{"flie"}, "model": "sonet"}}, 201, nil)
}

func TestValidateCLIWarns(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "a.yaml")
	os.WriteFile(f, []byte("name: a\nmodel: sonet\ntools: [computer, flie, shel]\n"), 0o600)
	var out strings.Builder
	if err := run(context.Background(), []string{"validate", f}, envOf(nil), &out, io.Discard); err != nil {
		t.Fatalf("warnings made validate fail: %v\n%s", err, out.String())
	}
	want := f + ": ok\n" +
		f + ": warning: tools.1: flie: unknown tool (it is dropped); did you mean files?\n" +
		f + ": warning: tools.2: shel: unknown tool (it is dropped); did you mean shell?\n" +
		f + ": warning: model: sonet: not a model, alias or strategy agentd knows; did you mean sonnet?\n"
	if out.String() != want {
		t.Fatalf("validate output:\n%s\nwant:\n%s", out.String(), want)
	}
	out.Reset()
	run(context.Background(), []string{"validate", "--json", f}, envOf(nil), &out, io.Discard)
	if !strings.Contains(out.String(), `"warnings": [`) || !strings.Contains(out.String(), `"ok": true`) {
		t.Fatalf("validate --json: %s", out.String())
	}

	// apply says the server's warnings on stderr and still applies.
	te := newE2E(t, cliModel(t), "")
	r := te.agentdOK("apply", f)
	if r.stdout != "created a\n" || !strings.Contains(r.stderr, f+": warning: tools.1: flie: unknown tool (it is dropped); did you mean files?\n") ||
		!strings.Contains(r.stderr, f+": warning: model: sonet: no model provider this server reaches serves it") {
		t.Fatalf("apply: %s", r)
	}
}
