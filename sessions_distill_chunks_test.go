package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// Distill with a model reads the whole transcript, not its first ~60k characters: a long one in parts,
// the model keeping notes from part to part, then writing the agent from the notes; under a cost ceiling
// that does not cover every part it reads as many as fit and says how much. Against a loopback model
// server in OpenAI's wire format.
func TestDistillReadsLongTranscriptsInParts(t *testing.T) {
	var mu sync.Mutex
	var parts []string // what each part's request carried
	partNo := regexp.MustCompile(`Part (\d+) of (\d+)`)
	answer := `{"name":"log-analyst","description":"Reads logs","persona":"You read the logs and report.","knowledge":[],"examples":[]}`
	so := newScriptedOpenAI(t, func(r scriptReq) scriptReply {
		all := r.all()
		if m := partNo.FindStringSubmatch(all); m != nil && strings.Contains(all, "one part at a time") {
			mu.Lock()
			parts = append(parts, all)
			mu.Unlock()
			return scriptReply{text: "NOTES after part " + m[1]}
		}
		return scriptReply{text: answer}
	})
	home := t.TempDir()
	te := newE2E(t, so, home, withEnv(map[string]string{"OPENAI_API_KEY": distillEnvKey, "OPENAI_BASE_URL": so.URL, "HOME": home}))
	var jsonl strings.Builder
	for i := range 150 {
		role := []string{"user", "assistant"}[i%2]
		line, _ := json.Marshal(map[string]string{"role": role, "content": fmt.Sprintf("MSG-%03d %s", i, strings.Repeat("log line text ", 100))})
		jsonl.Write(append(line, '\n'))
	}
	out := te.call("POST", "/v1/sessions/import", map[string]any{"content": jsonl.String(), "source": "jsonl"}, 200, nil).json(t)
	id := out["transcript"].(map[string]any)["id"].(string)
	distill := func() Distilled {
		var res struct{ Distilled Distilled }
		te.call("POST", "/v1/sessions/distill", map[string]any{"transcriptId": id, "useModel": true, "model": "openai/gpt-4o-mini"}, 200, &res)
		return res.Distilled
	}
	stored, err := te.s.store.GetTranscript(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	chunks := distillChunks(te.s.sessions.transcriptLines(stored))
	if len(chunks) < 3 {
		t.Fatalf("the fixture is %d parts; it must be long enough for several", len(chunks))
	}

	// The whole transcript, part by part: every message reached the model once, the notes carried along.
	d := distill()
	reqs := so.requests()
	final := reqs[len(reqs)-1].all()
	if len(parts) != len(chunks) || len(reqs) != len(chunks)+1 || d.Name != "log-analyst" ||
		!strings.Contains(final, fmt.Sprintf("NOTES after part %d", len(chunks))) || strings.Contains(final, "MSG-") {
		t.Fatalf("parts %d of %d, requests %d, distilled %+v", len(parts), len(chunks), len(reqs), d)
	}
	for i := range 150 {
		n := 0
		for _, p := range parts {
			n += strings.Count(p, fmt.Sprintf("MSG-%03d", i))
		}
		if n != 1 {
			t.Fatalf("message %d reached the model %d times", i, n)
		}
	}
	if !strings.Contains(parts[1], "NOTES after part 1") {
		t.Fatalf("part 2 did not carry part 1's notes")
	}
	if r := d.Read; r == nil || !r.Complete || r.Messages != 150 || r.TotalMessages != 150 || r.ChunksRead != len(chunks) || r.Chars != r.TotalChars ||
		!strings.Contains(strings.Join(d.Notes, "\n"), "the model read the whole transcript: 150 messages") {
		t.Fatalf("read: %+v %v", d.Read, d.Notes)
	}

	// A ceiling that covers two parts and the final call, not a third: two parts are read, and it says so.
	est := func(req ChatRequest) float64 {
		_, usd, err := te.s.models.EstimateCost(req)
		if err != nil {
			t.Fatal(err)
		}
		return usd
	}
	const model = "openai/gpt-4o-mini"
	e0 := est(distillChunkRequest(model, 0, len(chunks), "", chunks[0].text))
	e1 := est(distillChunkRequest(model, 1, len(chunks), "NOTES after part 1", chunks[1].text))
	eF := est(distillFinalRequest(model, strings.Repeat("x", distillNotesChars)))
	cfg := *te.s.conf()
	cfg.MaxCostUSD = e0 + e1 + eF + e0/2
	te.s.live.Store(&cfg)
	mu.Lock()
	parts = nil
	mu.Unlock()
	d = distill()
	want := chunks[0].messages + chunks[1].messages
	if r := d.Read; r == nil || r.Complete || r.ChunksRead != 2 || r.Messages != want || len(parts) != 2 ||
		!strings.Contains(strings.Join(d.Notes, "\n"), fmt.Sprintf("the model read %d of 150 messages", want)) {
		t.Fatalf("under a ceiling: read %+v, parts %d, notes %v", d.Read, len(parts), d.Notes)
	}
}
