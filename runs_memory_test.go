package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMemoryAcrossTwoRuns(t *testing.T) {
	for _, backend := range []string{"sqlite", "file", "memory"} {
		t.Run(backend, func(t *testing.T) {
			m := &fakeModel{}
			m.script = func(ctx context.Context, n int, req ChatRequest) (*ChatResponse, error) {
				return textResp(fmt.Sprintf("answer %d", n)), nil
			}
			te := newTestServer(t, withFakeModel(m))
			te.putAgent(testSpec("rememberer", func(sp *AgentSpec) {
				sp.Memory = MemorySpec{Enabled: true, Backend: backend, WindowTurns: 20, Summarise: false}
			}))
			te.run("rememberer", map[string]any{"input": "my name is Ada"})
			te.run("rememberer", map[string]any{"input": "what is my name?", "history": []any{
				map[string]any{"role": "user", "content": "caller history"}, map[string]any{"role": "assistant", "content": "ok"}}})
			var got []string
			for _, msg := range m.requests()[1].Messages {
				got = append(got, msg.Content[0].Text)
			}
			want := "my name is Ada|answer 0|caller history|ok|what is my name?"
			if strings.Join(got, "|") != want {
				t.Fatalf("second run saw %v", got)
			}
			if backend == "file" {
				if _, err := os.Stat(filepath.Join(te.s.cfg.Home, "memory", "rememberer.jsonl")); err != nil {
					t.Fatal(err)
				}
			}
			// A third run: the body's history of run two was not remembered.
			te.run("rememberer", map[string]any{"input": "third"})
			all := fmt.Sprint(m.requests()[2].Messages)
			if strings.Contains(all, "caller history") || !strings.Contains(all, "what is my name?") {
				t.Fatalf("third run saw %s", all)
			}
		})
	}
}

func TestMemoryOffStoresNothing(t *testing.T) {
	m := &fakeModel{script: scriptOf(textResp("a"), textResp("b"))}
	te := newTestServer(t, withFakeModel(m))
	te.putAgent(testSpec("forgetful", nil))
	te.run("forgetful", map[string]any{"input": "one"})
	te.run("forgetful", map[string]any{"input": "two"})
	if n := len(m.requests()[1].Messages); n != 1 {
		t.Fatalf("second run got %d messages", n)
	}
}

func turnsOf(n int) []ModelMessage {
	var msgs []ModelMessage
	for i := 0; i < n; i++ {
		msgs = append(msgs, textMessage("user", fmt.Sprint("q", i)),
			ModelMessage{Role: "assistant", Content: []ContentPart{{Type: "tool_call", ID: fmt.Sprint("c", i), Name: "shell"}}},
			toolResultMessage(fmt.Sprint("c", i), fmt.Sprint("r", i), false),
			textMessage("assistant", fmt.Sprint("a", i)))
	}
	return msgs
}

func TestWindowKeepsFirstUserAndLastTurns(t *testing.T) {
	msgs := turnsOf(6)
	out := windowMessages(msgs, 2, "")
	// first user message, marker, then turns 4 and 5 whole (tool call and result together).
	if out[0].Content[0].Text != "q0" || !strings.Contains(out[1].Content[0].Text, "elided") || out[1].Role != "assistant" {
		t.Fatalf("head %v", out[:2])
	}
	rest := out[2:]
	if len(rest) != 8 || rest[0].Content[0].Text != "q4" || rest[2].Content[0].ToolCallID != "c4" {
		t.Fatalf("tail %v", rest)
	}
	if len(windowMessages(turnsOf(3), 2, "")) != 12 {
		t.Fatal("window cut when everything fits")
	}
	if s := windowMessages(msgs, 2, "they talked"); !strings.Contains(s[1].Content[0].Text, "they talked") {
		t.Fatalf("summary not used: %v", s[1])
	}
}

func TestWindowSummarisedByModel(t *testing.T) {
	m := &fakeModel{}
	m.script = func(ctx context.Context, n int, req ChatRequest) (*ChatResponse, error) {
		if strings.HasPrefix(req.System, "Summarise") {
			return textResp("SUMMARY-OF-MIDDLE"), nil
		}
		return textResp("ok"), nil
	}
	te := newTestServer(t, withFakeModel(m))
	te.putAgent(testSpec("windowed", func(sp *AgentSpec) {
		sp.Memory = MemorySpec{Enabled: true, Backend: "memory", WindowTurns: 2, Summarise: true}
	}))
	for i := 0; i < 5; i++ {
		te.run("windowed", map[string]any{"input": fmt.Sprint("turn ", i)})
	}
	reqs := m.requests()
	last := reqs[len(reqs)-1]
	if strings.HasPrefix(last.System, "Summarise") {
		t.Fatal("last call is the summariser")
	}
	var texts []string
	for _, msg := range last.Messages {
		texts = append(texts, msg.Content[0].Text)
	}
	got := strings.Join(texts, "|")
	if !strings.HasPrefix(got, "turn 0|") || !strings.Contains(got, "SUMMARY-OF-MIDDLE") || strings.Contains(got, "turn 1|") || !strings.HasSuffix(got, "turn 4") {
		t.Fatalf("windowed request: %s", got)
	}
}

// The window's summarising call spends from the same budget: the step's model call that follows is
// checked against the cost ceiling with that spend counted.
func TestWindowSummaryCountsTowardsTheCostCeiling(t *testing.T) {
	m := &fakeModel{cost: 0.3}
	m.script = func(ctx context.Context, n int, req ChatRequest) (*ChatResponse, error) {
		if strings.HasPrefix(req.System, "Summarise") {
			return textResp("SUMMARY"), nil
		}
		return textResp("ok"), nil
	}
	te := newTestServer(t, withFakeModel(m))
	te.putAgent(testSpec("summing", func(sp *AgentSpec) {
		sp.Limits.MaxCostUSD = 0.5
		sp.Memory = MemorySpec{Enabled: true, Backend: "memory", WindowTurns: 1, Summarise: true}
	}))
	hist := []map[string]any{}
	for i := 0; i < 4; i++ {
		hist = append(hist, map[string]any{"role": "user", "content": fmt.Sprint("q", i)},
			map[string]any{"role": "assistant", "content": fmt.Sprint("a", i)})
	}
	res := te.run("summing", map[string]any{"input": "now", "history": hist})
	reqs := m.requests()
	if len(reqs) != 1 || !strings.HasPrefix(reqs[0].System, "Summarise") {
		t.Fatalf("%d model calls; the step's call should have been refused after the $0.3 summary", len(reqs))
	}
	if res["stopReason"] != "budget" || res["usage"].(map[string]any)["costUsd"].(float64) > 0.5 {
		t.Fatalf("result %v", res)
	}
}

// Past the load cap the stored history is cut; what is loaded starts at a whole turn, never on a tool
// result whose call was cut away.
func TestMemoryLoadCapStartsAtATurn(t *testing.T) {
	for _, backend := range []string{"sqlite", "file", "memory"} {
		t.Run(backend, func(t *testing.T) {
			te := newTestServer(t, withFakeModel(&fakeModel{}))
			ms := te.s.runs.memory
			spec := MemorySpec{Enabled: true, Backend: backend, WindowTurns: 20}
			var msgs []ModelMessage
			for len(msgs) < memoryLoadCap+2 { // user, assistant tool call, tool result, assistant text
				c := ContentPart{Type: "tool_call", ID: "c", Name: "shell", Args: map[string]any{"command": "ls"}}
				msgs = append(msgs, textMessage("user", "q"), ModelMessage{Role: "assistant", Content: []ContentPart{c}},
					toolResultMessage("c", "out", false), textMessage("assistant", "a"))
			}
			msgs = msgs[:memoryLoadCap+2] // the cap keeps the last 2000: the first starts after the user message, at the call's result
			if err := ms.append(context.Background(), "capped", spec, msgs); err != nil {
				t.Fatal(err)
			}
			got, err := ms.load(context.Background(), "capped", spec)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 0 || got[0].Role != "user" || isToolResultMessage(got[0]) {
				t.Fatalf("loaded memory opens with %s %+v", got[0].Role, got[0].Content)
			}
		})
	}
}

// The process-only backend keeps no more than a run can load.
func TestMemoryBackendMemoryIsBounded(t *testing.T) {
	ms := newMemoryService(nil, t.TempDir())
	spec := MemorySpec{Enabled: true, Backend: "memory", WindowTurns: 20}
	for i := 0; i < 3; i++ {
		batch := make([]ModelMessage, memoryLoadCap)
		for j := range batch {
			batch[j] = textMessage("user", fmt.Sprint(i, "-", j))
		}
		if err := ms.append(context.Background(), "chatty", spec, batch); err != nil {
			t.Fatal(err)
		}
	}
	ms.mu.Lock()
	n := len(ms.procs["chatty"])
	ms.mu.Unlock()
	if n > memoryLoadCap {
		t.Fatalf("%d messages kept in process for a load cap of %d", n, memoryLoadCap)
	}
	got, _ := ms.load(context.Background(), "chatty", spec)
	if len(got) != memoryLoadCap || got[len(got)-1].Content[0].Text != fmt.Sprint(2, "-", memoryLoadCap-1) {
		t.Fatalf("loaded %d, last %+v", len(got), got[len(got)-1])
	}
}
