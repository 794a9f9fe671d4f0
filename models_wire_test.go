package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// wireSpec describes one wire format for the shared failure table.
type wireSpec struct {
	dir, model string
	env        func(url string) map[string]string
	malformed  string
	status401  int    // the status the provider really uses for a bad key
	before     string // a stream prefix that carries no output yet
	output     string // a stream prefix that carries output ("Hi")
}

var wireSpecs = []wireSpec{
	{dir: "openai", model: "openai/gpt-4o-mini", malformed: "stream_malformed.sse", status401: 401,
		env: func(u string) map[string]string {
			return map[string]string{"OPENAI_API_KEY": "sk-test-key-1234567890", "OPENAI_BASE_URL": u}
		},
		before: "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
		output: "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n"},
	{dir: "anthropic", model: "anthropic/claude-haiku-4-5", malformed: "stream_malformed.sse", status401: 401,
		env: func(u string) map[string]string {
			return map[string]string{"ANTHROPIC_API_KEY": "sk-ant-test-key-1234567890", "ANTHROPIC_BASE_URL": u}
		},
		before: "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3}}}\n\n",
		output: "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n"},
	{dir: "gemini", model: "google/gemini-2.5-flash", malformed: "stream_malformed.sse", status401: 400,
		env: func(u string) map[string]string {
			return map[string]string{"GEMINI_API_KEY": "AIzaTestKey1234567890abcdefghijklmnop", "GEMINI_BASE_URL": u}
		},
		before: "data: {\"candidates\":[{\"content\":{\"parts\":[],\"role\":\"model\"},\"index\":0}]}\n\n",
		output: "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hi\"}],\"role\":\"model\"},\"index\":0}]}\n\n"},
	{dir: "ollama", model: "ollama/llama3.2", malformed: "stream_malformed.ndjson", status401: 401,
		env: func(u string) map[string]string {
			return map[string]string{"OLLAMA_BASE_URL": u}
		},
		before: "{\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done\":false}\n",
		output: "{\"message\":{\"role\":\"assistant\",\"content\":\"Hi\"},\"done\":false}\n"},
}

// resetAfter writes a stream prefix, then kills the connection without ending the chunked body.
func resetAfter(w http.ResponseWriter, prefix string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	w.Write([]byte(prefix))
	w.(http.Flusher).Flush()
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		conn.Close()
	}
}

func TestWireFailures(t *testing.T) {
	type tc struct {
		name      string
		reply     func(t *testing.T, spec wireSpec, w http.ResponseWriter)
		code      string
		calls     int
		sleeps    []time.Duration
		events    string // event types seen by emit
		afterText bool
	}
	errFile := func(status int, file string) func(t *testing.T, spec wireSpec, w http.ResponseWriter) {
		return func(t *testing.T, spec wireSpec, w http.ResponseWriter) {
			st := status
			if file == "error_401.json" {
				st = spec.status401
			}
			if status == 429 {
				w.Header().Set("Retry-After", "7")
			}
			replay(t, w, st, spec.dir, file)
		}
	}
	cases := []tc{
		{name: "400", reply: errFile(400, "error_400.json"), code: codeModelError, calls: 1, events: "error"},
		{name: "401", reply: errFile(401, "error_401.json"), code: codeNoCredentials, calls: 1, events: "error"},
		{name: "404", reply: errFile(404, "error_404.json"), code: codeModelUnavailable, calls: 1, events: "error"},
		{name: "429 Retry-After", reply: errFile(429, "error_429.json"), code: codeQuota, calls: 3, sleeps: []time.Duration{7 * time.Second, 7 * time.Second}, events: "error"},
		{name: "500", reply: errFile(500, "error_500.json"), code: codeModelError, calls: 3, sleeps: []time.Duration{500 * time.Millisecond, time.Second}, events: "error"},
		{name: "malformed stream", reply: func(t *testing.T, spec wireSpec, w http.ResponseWriter) { replay(t, w, 200, spec.dir, spec.malformed) },
			code: codeModelError, calls: 3, sleeps: []time.Duration{500 * time.Millisecond, time.Second}},
		{name: "reset before output", reply: func(t *testing.T, spec wireSpec, w http.ResponseWriter) { resetAfter(w, spec.before) },
			code: codeModelError, calls: 3, sleeps: []time.Duration{500 * time.Millisecond, time.Second}, events: "error"},
		{name: "reset after output", reply: func(t *testing.T, spec wireSpec, w http.ResponseWriter) { resetAfter(w, spec.before+spec.output) },
			code: codeModelError, calls: 1, events: "start,text_delta,error", afterText: true},
	}
	for _, spec := range wireSpecs {
		for _, c := range cases {
			t.Run(spec.dir+"/"+c.name, func(t *testing.T) {
				f := newFake(t, func(w http.ResponseWriter, n int, r recorded) { c.reply(t, spec, w) })
				env := spec.env(f.URL)
				m, rec := newTestModels(t, env, nil)
				var col collector
				_, err := m.Stream(context.Background(), ChatRequest{Model: spec.model, Messages: []ModelMessage{userMsg("hi")}}, chatOptions{MaxCostUSD: -1}, col.emit)
				if apiCode(err) != c.code {
					t.Fatalf("code %s, want %s (%v)", apiCode(err), c.code, err)
				}
				if n := len(f.chatRequests()); n != c.calls {
					t.Fatalf("%d upstream calls, want %d", n, c.calls)
				}
				if got := rec.get(); fmt.Sprint(got) != fmt.Sprint(c.sleeps) {
					t.Fatalf("sleeps %v, want %v", got, c.sleeps)
				}
				if c.events != "" {
					if got := strings.Join(col.types(), ","); got != c.events {
						t.Fatalf("events %s, want %s", got, c.events)
					}
				}
				evs := col.ofType("error")
				if len(evs) != 1 || evs[0].Error.Code != c.code {
					t.Fatalf("want one error event with %s, got %+v", c.code, evs)
				}
				if c.afterText && evs[0].Error.Details["afterOutput"] != true {
					t.Fatalf("error after output not marked: %+v", evs[0].Error)
				}
				for k, v := range env {
					if strings.HasSuffix(k, "_KEY") && strings.Contains(err.Error(), v) {
						t.Fatalf("key leaked into %v", err)
					}
				}
			})
		}
	}
}

func TestUpstreamErrorScrubsKeys(t *testing.T) {
	key := "sk-proj-SECRETSECRETSECRET1234"
	f := newFake(t, func(w http.ResponseWriter, n int, r recorded) {
		w.WriteHeader(401)
		fmt.Fprintf(w, `{"error":{"message":"bad key %s; header was Bearer %s; other AIzaSyA1234567890abcdefghijklmnopqrstuv"}}`, key, key)
	})
	m, _ := newTestModels(t, map[string]string{"OPENAI_API_KEY": key, "OPENAI_BASE_URL": f.URL}, nil)
	var col collector
	_, err := m.Stream(context.Background(), ChatRequest{Model: "openai/gpt-4o", Messages: []ModelMessage{userMsg("x")}}, chatOptions{MaxCostUSD: -1}, col.emit)
	if err == nil {
		t.Fatal("want an error")
	}
	for _, s := range []string{err.Error(), col.ofType("error")[0].Error.Message} {
		if strings.Contains(s, "SECRET") || strings.Contains(s, "AIzaSy") {
			t.Fatalf("key not scrubbed: %s", s)
		}
		if !strings.Contains(s, redactedMark) {
			t.Fatalf("expected a redaction marker: %s", s)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := http.Header{}
	h.Set("Retry-After", "3")
	if d := parseRetryAfter(h, now); d != 3*time.Second {
		t.Fatal(d)
	}
	h.Set("Retry-After", now.Add(20*time.Second).Format(http.TimeFormat))
	if d := parseRetryAfter(h, now); d != 20*time.Second {
		t.Fatal(d)
	}
	h.Set("Retry-After-Ms", "250")
	if d := parseRetryAfter(h, now); d != 250*time.Millisecond {
		t.Fatal(d)
	}
	// Absurd values mean "as long as you may", not an overflowed negative wait that is ignored.
	for _, v := range []string{"99999999999", "1e400"} {
		h := http.Header{}
		h.Set("Retry-After", v)
		if d := parseRetryAfter(h, now); d != time.Hour {
			t.Fatalf("Retry-After %s: %v", v, d)
		}
		h = http.Header{}
		h.Set("Retry-After-Ms", v+"0000")
		if d := parseRetryAfter(h, now); d != time.Hour {
			t.Fatalf("Retry-After-Ms %s: %v", v, d)
		}
	}
}

func TestSSEReader(t *testing.T) {
	rd := newSSEReader(strings.NewReader(": comment\nevent: a\ndata: 1\ndata: 2\n\ndata: x\n\n"), maxStreamLine)
	ev, data, err := rd.next()
	if err != nil || ev != "a" || string(data) != "1\n2" {
		t.Fatalf("%q %q %v", ev, data, err)
	}
	ev, data, err = rd.next()
	if err != nil || ev != "" || string(data) != "x" {
		t.Fatalf("%q %q %v", ev, data, err)
	}
	if _, _, err := rd.next(); err == nil {
		t.Fatal("want EOF")
	}
}

func TestStalledStreamIsAbandoned(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, n int, r recorded) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.Write([]byte(wireSpecs[0].before))
		w.(http.Flusher).Flush()
		<-r.Ctx.Done() // then silence until agentd gives up
	})
	m, rec := newTestModels(t, openaiEnv(f), nil)
	m.streamIdle = 50 * time.Millisecond
	_, err := m.Stream(context.Background(), ChatRequest{Model: "openai/gpt-4o", Messages: []ModelMessage{userMsg("x")}}, chatOptions{MaxCostUSD: -1}, func(StreamEvent) {})
	if apiCode(err) != codeModelError || !strings.Contains(err.Error(), "stalled") || len(f.chatRequests()) != 3 || len(rec.get()) != 2 {
		t.Fatalf("err %v, %d calls, sleeps %v", err, len(f.chatRequests()), rec.get())
	}
}

// endless is an upstream body that never ends.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}

// A non-streamed answer that never ends is cut at maxAnswerBytes and reported, not read into memory forever.
func TestReadAnswerIsBounded(t *testing.T) {
	_, err := readAnswer(context.Background(), "OpenAI", endless{})
	if err == nil || !strings.Contains(err.Error(), "answer larger than 64 MB") {
		t.Fatalf("endless answer: %v", err)
	}
	if b, err := readAnswer(context.Background(), "OpenAI", strings.NewReader(`{"ok":true}`)); err != nil || string(b) != `{"ok":true}` {
		t.Fatalf("small answer: %q %v", b, err)
	}
}
