package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkLoopStep measures the loop's own cost per step: a zero-latency model that always asks for one
// no-op tool call (computer_info on an in-memory computer), with events recorded to SQLite as usual.
func BenchmarkLoopStep(b *testing.B) {
	const steps = 100
	m := &fakeModel{script: func(ctx context.Context, n int, req ChatRequest) (*ChatResponse, error) {
		return toolResp(call(fmt.Sprint("c", n), "computer_info", map[string]any{"n": n})), nil
	}}
	te := newTestServer(b, withFakeModel(m))
	sp := testSpec("bench", func(sp *AgentSpec) { sp.Limits.MaxSteps = steps })
	b.ResetTimer()
	start := time.Now()
	total := 0
	for i := 0; i < b.N; i++ {
		ar, err := te.s.runs.start(sp, &runParams{Input: []ModelMessage{textMessage("user", "x")}, MaxSteps: steps, MaxCostUSD: 1, ApprovalMode: "auto"}, nil)
		if err != nil {
			b.Fatal(err)
		}
		r := ar.wait()
		if r.StopReason != "step_limit" || r.Steps != steps {
			b.Fatalf("run ended %s after %d steps", r.StopReason, r.Steps)
		}
		total += r.Steps
	}
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(total), "ns/step")
}

// BenchmarkConcurrentStreamingRuns runs 200 streaming runs at once over HTTP: every run streams 10 steps
// (text deltas, a no-op tool, usage); all 200 are held in flight together at step 5 to measure the heap per
// run; every event streamed is checked against the stored events (none lost).
func BenchmarkConcurrentStreamingRuns(b *testing.B) {
	const runs, steps = 200, 10
	for i := 0; i < b.N; i++ {
		var arrived atomic.Int64
		release := make(chan struct{})
		m := &fakeModel{script: func(ctx context.Context, n int, req ChatRequest) (*ChatResponse, error) {
			turns := 0
			for _, msg := range req.Messages {
				if msg.Role == "assistant" {
					turns++
				}
			}
			if turns == 5 {
				if arrived.Add(1) == runs {
					close(release)
				}
				<-release
			}
			r := toolResp(call(fmt.Sprint("c", turns), "computer_info", map[string]any{"n": turns}))
			r.Text = "thinking about step " + fmt.Sprint(turns)
			return r, nil
		}}
		te := newTestServer(b, withFakeModel(m))
		te.putAgent(testSpec("many", func(sp *AgentSpec) { sp.Limits.MaxSteps = steps }))
		runtime.GC()
		var before, during runtime.MemStats
		runtime.ReadMemStats(&before)

		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: runs, MaxConnsPerHost: 0}}
		var wg sync.WaitGroup
		var events atomic.Int64
		ids := make([]string, runs)
		counts := make([]int, runs)
		t0 := time.Now()
		for r := 0; r < runs; r++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequest("POST", te.url+"/v1/agents/many/run/stream", strings.NewReader(`{"input":"go"}`))
				resp, err := client.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				defer resp.Body.Close()
				sc := bufio.NewScanner(resp.Body)
				sc.Buffer(make([]byte, 0, 64<<10), 8<<20)
				for sc.Scan() {
					line := sc.Bytes()
					if !bytes.HasPrefix(line, []byte("data: {\"type\"")) {
						continue
					}
					counts[r]++
					events.Add(1)
					if ids[r] == "" {
						var ev struct{ RunID string }
						json.Unmarshal(line[6:], &ev)
						ids[r] = ev.RunID
					}
				}
			}()
		}
		<-release
		runtime.ReadMemStats(&during)
		wg.Wait()
		elapsed := time.Since(t0)
		for r := 0; r < runs; r++ {
			stored, err := te.s.store.RunEvents(context.Background(), ids[r])
			if err != nil || len(stored) != counts[r] || counts[r] == 0 {
				b.Fatalf("run %d (%s): streamed %d events, stored %d (%v)", r, ids[r], counts[r], len(stored), err)
			}
		}
		b.ReportMetric(float64(during.HeapAlloc-before.HeapAlloc)/runs/1024, "KiB-heap/run")
		b.ReportMetric(float64(events.Load())/elapsed.Seconds(), "events/s")
		b.ReportMetric(float64(events.Load())/runs, "events/run")
		b.ReportMetric(0, "lost-events")
	}
}

// BenchmarkTimeToRunStart measures POST /run/stream until the run_start frame is read.
func BenchmarkTimeToRunStart(b *testing.B) {
	m := &fakeModel{script: scriptOf()}
	te := newTestServer(b, withFakeModel(m))
	te.putAgent(testSpec("quick", nil))
	var total time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		s := te.stream("quick", map[string]any{"input": "hi"})
		s.until(b, "run_start")
		total += time.Since(t0)
		s.all() // drain the rest so runs do not pile up
		s.close()
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N), "µs-to-run_start")
}

// TestAgentRunToolTimeReport measures an 11-step agent run (write, shell, edit, read, search, move,
// list, delete: the calls of TestE2EMultiStepShellAndFiles) on docker, with the exec channel on and off:
// the tools' own time (sum of tool_end durationMs) and the run's wall time, on a machine already made.
//
//	AGENT_BENCH=1 AGENT_TEST_DOCKER=1 go test -run TestAgentRunToolTimeReport -v -count=1 .
func TestAgentRunToolTimeReport(t *testing.T) {
	if os.Getenv("AGENT_BENCH") != "1" || os.Getenv("AGENT_TEST_DOCKER") != "1" {
		t.Skip("set AGENT_BENCH=1 and AGENT_TEST_DOCKER=1 to measure")
	}
	script := func() func(r scriptReq) scriptReply {
		return stepwise(
			scriptReply{calls: []ToolCall{tc("c1", "write_file", map[string]any{"path": "hello.txt", "content": "one\ntwo\nthree\n"})}},
			scriptReply{calls: []ToolCall{tc("c2", "shell", map[string]any{"command": "wc -l < hello.txt && echo from-shell"})}},
			scriptReply{calls: []ToolCall{tc("c3", "edit_file", map[string]any{"path": "hello.txt", "old_string": "two", "new_string": "TWO"})}},
			scriptReply{calls: []ToolCall{tc("c4", "read_file", map[string]any{"path": "hello.txt"})}},
			scriptReply{calls: []ToolCall{tc("c5", "search_files", map[string]any{"pattern": "T[W]O"})}},
			scriptReply{calls: []ToolCall{tc("c6", "move", map[string]any{"from": "hello.txt", "to": "sub/dir/hello2.txt"})}},
			scriptReply{calls: []ToolCall{tc("c7", "list_dir", map[string]any{"recursive": true})}},
			scriptReply{calls: []ToolCall{tc("c8", "move", map[string]any{"from": "sub", "to": "moved"})}},
			scriptReply{calls: []ToolCall{tc("c9", "shell", map[string]any{"command": "ls -la moved/dir"})}},
			scriptReply{calls: []ToolCall{tc("c10", "delete", map[string]any{"path": "moved", "recursive": true})}},
			scriptReply{calls: []ToolCall{tc("c11", "list_dir", map[string]any{})}},
			scriptReply{text: "done"},
		)
	}
	for _, on := range []bool{true, false} {
		opts := []testOption{}
		if !on {
			opts = append(opts, func(c *testSetup) { c.ExecChannel, c.helperBinary = new(bool), "" })
		}
		te := newE2E(t, newScriptedOpenAI(t, script()), "", opts...)
		te.createAgent(map[string]any{"name": "bench-tools", "tools": []string{"computer", "files"}})
		var tools, walls []time.Duration
		for i := 0; i < 6; i++ {
			start := time.Now()
			evs := te.stream("bench-tools", map[string]any{"input": "go"}).all()
			wall := time.Since(start)
			var sum time.Duration
			n := 0
			for _, e := range evs {
				if e["type"] == "tool_end" {
					if e["isError"] == true {
						t.Fatalf("tool failed: %v", e)
					}
					sum += time.Duration(e["durationMs"].(float64)) * time.Millisecond
					n++
				}
			}
			if n != 11 {
				t.Fatalf("%d tool calls", n)
			}
			if i > 0 { // the first run makes the machine
				tools, walls = append(tools, sum), append(walls, wall)
			}
		}
		t.Logf("exec channel %v: 11 tool calls take %s of tool time (p50 of 5 runs), run wall %s",
			map[bool]string{true: "on", false: "off"}[on], pct(tools, 0.5), pct(walls, 0.5))
	}
}
