//go:build unix

package main

import (
	"encoding/json"
	"net/http/httptest"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// BenchmarkParseSpecYAML validates the full spec of testdata/full-spec.yaml (every block, seven triggers).
func BenchmarkParseSpecYAML(b *testing.B) {
	text := mustReadFile(b, "testdata/full-spec.yaml")
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	cpu := startCPUClock()
	for b.Loop() {
		if _, issues := parseSpecYAML(text); len(issues) > 0 {
			b.Fatal(issues)
		}
	}
	cpu.report(b)
}

// BenchmarkParseSpecJSON validates the same spec sent as JSON.
func BenchmarkParseSpecJSON(b *testing.B) {
	spec, _ := parseSpecYAML(mustReadFile(b, "testdata/full-spec.yaml"))
	raw, _ := json.Marshal(spec)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	cpu := startCPUClock()
	for b.Loop() {
		if _, issues := parseSpecJSON(raw); len(issues) > 0 {
			b.Fatal(issues)
		}
	}
	cpu.report(b)
}

// cpuClock measures the CPU time the process spent (user + system, GC included). On a machine shared with
// other work, wall time per op grows with the load; CPU time per op does not, so both are reported.
type cpuClock struct{ start time.Duration }

func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func startCPUClock() cpuClock { return cpuClock{processCPU()} }

func (c cpuClock) report(b *testing.B) {
	if b.N > 0 {
		b.ReportMetric(float64(processCPU()-c.start)/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkListAgents100 is GET /v1/agents with 100 stored agents, through the real handler and store.
func BenchmarkListAgents100(b *testing.B) {
	ts := newTestServer(b)
	for i := 0; i < 100; i++ {
		res := ts.do("POST", "/v1/agents", map[string]any{"yaml": "name: agent-" + strconv.Itoa(i) + "\ntriggers:\n  - type: http\n"})
		if res.status != 201 {
			b.Fatal(res.status)
		}
	}
	h := ts.s.handler
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/agents", nil))
		if rec.Code != 200 {
			b.Fatal(rec.Code)
		}
	}
}
