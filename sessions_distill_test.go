package main

// Issue 26 item 5: importing the same content again returns the stored transcript (content hash), a
// distilled spec names a model this server reaches with a note saying which and why, and `agentd
// sessions` lists what is stored.

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

func TestImportSameContentReturnsTheStoredTranscript(t *testing.T) {
	ts := newTestServer(t)
	listed := func() int {
		var out struct{ Sessions []TranscriptSummary }
		ts.call("GET", "/v1/sessions", nil, 200, &out)
		return len(out.Sessions)
	}
	first := importFile(t, ts, "testdata/sessions/claude-code.jsonl")
	for i := 0; i < 3; i++ {
		if again := importFile(t, ts, "testdata/sessions/claude-code.jsonl"); again["id"] != first["id"] {
			t.Fatalf("import %d of the same file: %v, first %v", i+2, again["id"], first["id"])
		}
	}
	// The same content sent as content (no path) is the same transcript too.
	abs, _ := filepath.Abs("testdata/sessions/claude-code.jsonl")
	var byContent struct{ Transcript map[string]any }
	ts.call("POST", "/v1/sessions/import", map[string]any{"content": mustReadFile(t, abs)}, 200, &byContent)
	if byContent.Transcript["id"] != first["id"] {
		t.Fatalf("import by content: %v, by path %v", byContent.Transcript["id"], first["id"])
	}
	if n := listed(); n != 1 {
		t.Fatalf("%d stored transcripts after 5 imports of one conversation", n)
	}
	// An export of several conversations stores each once, however often it is imported.
	importFile(t, ts, "testdata/sessions/chatgpt.json")
	n := listed()
	importFile(t, ts, "testdata/sessions/chatgpt.json")
	if listed() != n || n < 2 {
		t.Fatalf("chatgpt export: %d stored, then %d", n, listed())
	}
	// Different content is a different transcript.
	if other := importFile(t, ts, "testdata/sessions/codex.jsonl"); other["id"] == first["id"] {
		t.Fatal("a different transcript got the same id")
	}
}

func TestDistilledModelIsOneTheServerReaches(t *testing.T) {
	for _, tc := range []struct {
		name, model, note string
		env               map[string]string
	}{
		{"self-hosted only", "auto", "model: auto, not the claude-code transcript's sonnet: no model provider this server reaches serves it (",
			map[string]string{"OPENAI_API_KEY": distillEnvKey, "OPENAI_BASE_URL": "http://127.0.0.1:1/v1"}},
		{"anthropic key", "sonnet", "model: sonnet, the claude-code transcript's model, which this server reaches",
			map[string]string{"ANTHROPIC_API_KEY": "sk-ant-test-0123456789"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestServer(t, withEnv(tc.env))
			tr := importFile(t, ts, "testdata/sessions/claude-code.jsonl")
			out := ts.call("POST", "/v1/sessions/distill", map[string]any{"transcriptId": tr["id"]}, 200, nil).json(t)
			spec, d, yaml := out["spec"].(map[string]any), out["distilled"].(map[string]any), out["yaml"].(string)
			if spec["model"] != tc.model || d["suggestedModel"] != tc.model || !strings.Contains(fmt.Sprint(d["notes"]), tc.note) {
				t.Fatalf("model %v, suggested %v, notes %v", spec["model"], d["suggestedModel"], d["notes"])
			}
			if !strings.Contains(yaml, "\nmodel: "+tc.model+" # "+tc.note) {
				t.Fatalf("the YAML does not say which model and why:\n%s", yaml)
			}
			// The commented YAML is still a spec, with that model.
			var v struct {
				OK     bool
				Issues []string
			}
			ts.call("POST", "/v1/agents/validate", map[string]any{"yaml": yaml}, 200, &v)
			created := ts.call("POST", "/v1/agents", map[string]any{"yaml": yaml}, 201, nil).json(t)
			if !v.OK || created["model"] != tc.model {
				t.Fatalf("validate %+v, created %v", v, created)
			}
		})
	}
	// A transcript that names no model gets auto, and says so.
	ts := newTestServer(t)
	tr := importFile(t, ts, "testdata/sessions/transcript.md")
	out := ts.call("POST", "/v1/sessions/distill", map[string]any{"transcriptId": tr["id"]}, 200, nil).json(t)
	if out["spec"].(map[string]any)["model"] != "auto" || !strings.Contains(fmt.Sprint(out["distilled"].(map[string]any)["notes"]), "model: auto (the markdown transcript names no model)") {
		t.Fatalf("markdown: %v", out["distilled"])
	}
}

func TestCLISessions(t *testing.T) {
	te := newE2E(t, cliModel(t), "")
	if r := te.agentdOK("sessions"); strings.TrimSpace(r.stdout) != "ID  SOURCE  MESSAGES  IMPORTED  TITLE" {
		t.Fatalf("sessions with none: %q", r.stdout)
	}
	a := importFile(t, te, "testdata/sessions/claude-code.jsonl")
	b := importFile(t, te, "testdata/sessions/codex.jsonl")
	r := te.agentdOK("sessions")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], b["id"].(string)+"  codex ") || !strings.HasPrefix(lines[2], a["id"].(string)+"  claude-code ") ||
		!strings.Contains(lines[2], a["title"].(string)) {
		t.Fatalf("sessions: %s", r)
	}
	if r := te.agentdOK("sessions", "-q"); r.stdout != b["id"].(string)+"\n"+a["id"].(string)+"\n" {
		t.Fatalf("sessions -q: %s", r)
	}
	var out struct{ Sessions []TranscriptSummary }
	mustJSON(t, te.agentdOK("sessions", "--json", "--limit", "1").stdout, &out)
	if len(out.Sessions) != 1 || out.Sessions[0].ID != b["id"] {
		t.Fatalf("sessions --json --limit 1: %+v", out)
	}
}
