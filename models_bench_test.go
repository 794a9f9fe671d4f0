package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"
)

// zeroLatencyOpenAI answers every chat call at once from memory: a plain answer, or a stream of n deltas.
func zeroLatencyOpenAI(tb testing.TB, deltas int) *httptest.Server {
	plain := readTestdata(tb, "openai", "chat_plain.json")
	var sse bytes.Buffer
	for i := 0; i < deltas; i++ {
		fmt.Fprintf(&sse, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok%d \"},\"finish_reason\":null}]}\n\n", i)
	}
	sse.WriteString("data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n")
	sse.WriteString("data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":100}}\n\ndata: [DONE]\n\n")
	stream := sse.Bytes()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if bytes.Contains(b, []byte(`"stream":true`)) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Write(stream)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(plain)
	}))
	tb.Cleanup(ts.Close)
	return ts
}

// percentiles reports p50 and p99 of per-call durations as benchmark metrics.
func percentiles(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	b.ReportMetric(float64(d[len(d)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(d[len(d)*99/100].Microseconds()), "p99-µs")
}

var benchBody = `{"model":"openai/gpt-4o","messages":[{"role":"user","content":"capital of France?"}],"maxTokens":100}`

// BenchmarkDirectUpstream is the baseline: the same POST straight to the zero-latency fake.
func BenchmarkDirectUpstream(b *testing.B) {
	ts := zeroLatencyOpenAI(b, 0)
	client := &http.Client{}
	body := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"capital of France?"}],"max_completion_tokens":100}`)
	d := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		resp, err := client.Post(ts.URL+"/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		d = append(d, time.Since(t0))
	}
	percentiles(b, d)
}

// BenchmarkRouterChat is modelService.Chat in process (what the run loop pays) against the same fake.
func BenchmarkRouterChat(b *testing.B) {
	ts := zeroLatencyOpenAI(b, 0)
	m, _ := newTestModels(b, map[string]string{"OPENAI_API_KEY": "sk-bench-1234567890", "OPENAI_BASE_URL": ts.URL}, nil)
	req := ChatRequest{Model: "openai/gpt-4o", Messages: []ModelMessage{userMsg("capital of France?")}, MaxTokens: 100}
	d := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := m.Chat(context.Background(), req, chatOptions{MaxCostUSD: 5}); err != nil {
			b.Fatal(err)
		}
		d = append(d, time.Since(t0))
	}
	percentiles(b, d)
}

// BenchmarkChatEndpoint is POST /v1/models/chat through the whole server (auth, idempotency, decode,
// validation, router, adapter, encode) against the same fake.
func BenchmarkChatEndpoint(b *testing.B) {
	ts := zeroLatencyOpenAI(b, 0)
	api := newModelServer(b, map[string]string{"OPENAI_API_KEY": "sk-bench-1234567890", "OPENAI_BASE_URL": ts.URL})
	d := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		api.call("POST", "/v1/models/chat", benchBody, 200, nil)
		d = append(d, time.Since(t0))
	}
	percentiles(b, d)
}

// BenchmarkChatStreamPerEvent streams 1000 deltas through POST /v1/models/chat/stream and reports the
// time per event (upstream parse, router, SSE encode and flush, client read — an upper bound on the
// server's share).
func BenchmarkChatStreamPerEvent(b *testing.B) {
	const deltas = 1000
	ts := zeroLatencyOpenAI(b, deltas)
	api := newModelServer(b, map[string]string{"OPENAI_API_KEY": "sk-bench-1234567890", "OPENAI_BASE_URL": ts.URL})
	body := `{"model":"openai/gpt-4o","messages":[{"role":"user","content":"count"}]}`
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if n := len(api.do("POST", "/v1/models/chat/stream", body).body); n < deltas*50 {
			b.Fatalf("short stream: %d bytes", n)
		}
	}
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N*deltas)/1000, "µs/event")
}

// BenchmarkListModelsBlackHoles lists models with three black-hole providers configured and the cache
// expired before every call, at the default 2 s probe timeout.
func BenchmarkListModelsBlackHoles(b *testing.B) {
	hole := func() string { return blackHole(b) }
	env := map[string]string{
		"ANTHROPIC_API_KEY": "k-1234567890", "ANTHROPIC_BASE_URL": hole(),
		"OPENAI_API_KEY": "k-1234567890", "OPENAI_BASE_URL": hole(),
		"GROQ_API_KEY": "k-1234567890", "GROQ_BASE_URL": hole(),
	}
	api := newModelServer(b, env)
	s := api.s
	s.models.probeTimeout = 2 * time.Second
	d := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.models.mu.Lock()
		s.models.probedAt = time.Time{}
		s.models.mu.Unlock()
		t0 := time.Now()
		api.do("GET", "/v1/models", nil)
		d = append(d, time.Since(t0))
	}
	percentiles(b, d)
}

// BenchmarkListModelsCached is the same listing served from the probe cache.
func BenchmarkListModelsCached(b *testing.B) {
	env := map[string]string{"OPENAI_API_KEY": "k-1234567890", "OPENAI_BASE_URL": blackHole(b)}
	api := newModelServer(b, env)
	s := api.s
	s.models.probeTimeout = 50 * time.Millisecond
	s.models.statuses(context.Background())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		api.do("GET", "/v1/models", nil)
	}
}

// memTransport answers every upstream request from memory: no sockets, so a benchmark measures agentd.
type memTransport struct{ body []byte }

func (t memTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(bytes.NewReader(t.body)), Request: r}, nil
}

// BenchmarkStreamServerPerEvent is the server's own time per streamed event: the upstream stream comes
// from memory and the SSE frames go to an in-memory recorder, so what is left is parsing the provider's
// chunk, the router, encoding the StreamEvent and writing + flushing its frame.
func BenchmarkStreamServerPerEvent(b *testing.B) {
	const deltas = 1000
	var sse bytes.Buffer
	for i := 0; i < deltas; i++ {
		fmt.Fprintf(&sse, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok%d \"},\"finish_reason\":null}]}\n\n", i)
	}
	sse.WriteString("data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	s := newModelServer(b, map[string]string{"OPENAI_API_KEY": "sk-bench-1234567890", "OPENAI_BASE_URL": "http://upstream.invalid/v1"}).s
	s.models.client = &http.Client{Transport: memTransport{body: sse.Bytes()}}
	body := `{"model":"openai/gpt-4o","messages":[{"role":"user","content":"count"}]}`
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/v1/models/chat/stream", strings.NewReader(body))
		s.handleChatStream(w, r)
		if w.Body.Len() < deltas*50 {
			b.Fatalf("short stream: %d bytes", w.Body.Len())
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*deltas)/1000, "µs/event")
}
