package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// openaiFake answers the model list and chat calls (streamed or not) from testdata.
func openaiFake(t *testing.T) *fakeUpstream {
	return newFake(t, func(w http.ResponseWriter, n int, r recorded) {
		switch {
		case r.Method == http.MethodGet && r.Path == "/v1/models":
			replay(t, w, 200, "openai", "models.json")
		case strings.Contains(string(r.Body), `"stream":true`):
			replay(t, w, 200, "openai", "chat_stream.sse")
		default:
			replay(t, w, 200, "openai", "chat_plain.json")
		}
	})
}

func TestChatEndpoint(t *testing.T) {
	f := openaiFake(t)
	ts := newModelServer(t, openaiEnv(f))
	var cr ChatResponse
	ts.call("POST", "/v1/models/chat", `{"model":"openai/gpt-4o","messages":[{"role":"user","content":"capital of France?"}],"maxTokens":100}`, 200, &cr)
	if cr.Text != "The capital of France is Paris." || cr.Model != "openai/gpt-4o" || cr.Usage.CostUSD <= 0 || cr.ToolCalls == nil || cr.FinishReason != "stop" {
		t.Fatalf("%+v", cr)
	}
}

func TestChatEndpointValidation(t *testing.T) {
	f := openaiFake(t)
	ts := newModelServer(t, openaiEnv(f))
	for _, body := range []string{
		`{"model":"openai/gpt-4o","messages":[]}`,
		`{"model":"openai/gpt-4o"}`,
		`{"model":"openai/gpt-4o","messages":[{"role":"user","content":"x"}],"bogus":1}`,
		`{"model":"openai/gpt-4o","messages":[{"role":"user","content":"x"}],"temperature":3}`,
		`{"model":"openai/gpt-4o","messages":[{"role":"user","content":"x"}],"topP":-1}`,
		`{"model":"openai/gpt-4o","messages":[{"role":"user","content":"x"}],"maxTokens":-5}`,
		`{"model":"openai/gpt-4o","messages":[{"role":"robot","content":"x"}]}`,
		`{"model":"openai/gpt-4o","messages":[{"role":"user","content":7}]}`,
		`{"model":"openai/gpt-4o","messages":[{"role":"user","content":[{"type":"video"}]}]}`,
		`{"model":"openai/gpt-4o","messages":[{"role":"user","content":[{"type":"image","data":"x"}]}]}`,
		`not json`,
		`{"model":"openai/gpt-4o","messages":[{"role":"user","content":"x"}],"stop":["END"," "]}`,
		`{"model":"openai/gpt-4o","messages":[{"role":"user","content":"x"}],"tools":[{"name":"ls","description":"a"},{"name":"ls","description":"b"}]}`,
	} {
		for _, path := range []string{"/v1/models/chat", "/v1/models/chat/stream"} {
			r := ts.do("POST", path, body)
			var e struct{ Error apiError }
			r.decode(t, &e)
			if r.status != 422 || e.Error.Code != codeSpecInvalid || e.Error.Message == "" {
				t.Errorf("%s %s: %d %+v", path, body, r.status, e)
			}
		}
	}
	if n := len(f.chatRequests()); n != 0 {
		t.Fatalf("invalid bodies reached the provider %d times", n)
	}
}

func TestChatEndpointConfigCeilingBeforeUpstream(t *testing.T) {
	f := openaiFake(t)
	ts := newModelServer(t, openaiEnv(f), func(c *testSetup) { c.MaxCostUSD = 0.001 })
	body := `{"model":"openai/gpt-4o","messages":[{"role":"user","content":"hi"}],"maxTokens":100000}`
	for _, path := range []string{"/v1/models/chat", "/v1/models/chat/stream"} {
		r := ts.do("POST", path, body)
		if r.status != 429 || r.errCode(t) != codeBudgetExceeded || r.header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s: %d %s", path, r.status, r.body)
		}
	}
	if n := len(f.requests()); n != 0 {
		t.Fatalf("refused call reached the provider %d times", n)
	}
}

func TestChatStreamEndpoint(t *testing.T) {
	f := openaiFake(t)
	ts := newModelServer(t, openaiEnv(f))
	s := ts.sse("POST", "/v1/models/chat/stream", `{"model":"openai/gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`)
	var types []string
	for fr, ok := s.frame(); ok; fr, ok = s.frame() {
		if fr.event != "" {
			types = append(types, "event:"+fr.event)
			continue
		}
		var ev StreamEvent
		if err := json.Unmarshal([]byte(fr.data), &ev); err != nil {
			t.Fatal(err)
		}
		types = append(types, ev.Type)
		if ev.Type == "done" && (ev.Response == nil || ev.Response.Text != "Hello there!" || ev.Response.Usage.CostUSD <= 0) {
			t.Fatalf("done: %+v", ev.Response)
		}
	}
	if got := strings.Join(types, ","); got != "start,text_delta,text_delta,usage,done,event:done" {
		t.Fatalf("frames: %s", got)
	}
}

func TestChatStreamEndpointErrorAfterOutput(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, n int, r recorded) { resetAfter(w, wireSpecs[0].before+wireSpecs[0].output) })
	s := newModelServer(t, openaiEnv(f)).sse("POST", "/v1/models/chat/stream", `{"model":"openai/gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`)
	var frames []sseFrame
	for fr, ok := s.frame(); ok; fr, ok = s.frame() {
		frames = append(frames, fr)
	}
	n := len(frames)
	if n < 3 || frames[n-2].event != "error" || frames[n-1].event != "done" || !strings.Contains(frames[n-2].data, codeModelError) {
		t.Fatalf("frames: %+v", frames)
	}
}

func TestChatStreamClientDisconnectCancelsUpstream(t *testing.T) {
	cancelled := make(chan struct{})
	f := newFake(t, func(w http.ResponseWriter, n int, r recorded) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.Write([]byte(wireSpecs[0].before + wireSpecs[0].output))
		w.(http.Flusher).Flush()
		<-r.Ctx.Done()
		close(cancelled)
	})
	s := newModelServer(t, openaiEnv(f)).sse("POST", "/v1/models/chat/stream", `{"model":"openai/gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`)
	s.until(t, "text_delta") // the first text delta arrived: hang up
	s.close()
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream request was not cancelled after the client left")
	}
}

func TestListModelsEndpoint(t *testing.T) {
	f := openaiFake(t)
	var out struct {
		Models    []ModelInfo    `json:"models"`
		Providers []providerView `json:"providers"`
	}
	newModelServer(t, openaiEnv(f)).do("GET", "/v1/models", nil).decode(t, &out)
	if len(out.Providers) != len(providerTable) {
		t.Fatalf("providers: %+v", out.Providers)
	}
	byID := map[string]providerView{}
	for _, p := range out.Providers {
		byID[p.ID] = p
	}
	if !byID["openai"].Available || byID["anthropic"].Available || !strings.Contains(byID["anthropic"].Reason, "ANTHROPIC_API_KEY") || byID["ollama"].Available {
		t.Fatalf("providers: %+v", out.Providers)
	}
	ids := map[string]ModelInfo{}
	for _, mi := range out.Models {
		ids[mi.ID] = mi
	}
	mi, ok := ids["openai/gpt-4o"]
	if !ok || mi.Pricing == nil || mi.Pricing.InputPerMTok != 2.5 || mi.ContextWindow != 128000 || !mi.SupportsTools {
		t.Fatalf("gpt-4o: %+v", mi)
	}
	if _, ok := ids["openai/ft:gpt-4o-mini:acme::abc123"]; !ok {
		t.Fatalf("live fine-tune missing: %v", ids)
	}
	if _, ok := ids["openai/text-embedding-3-small"]; ok {
		t.Fatal("embedding model listed as a chat model")
	}
	if _, ok := ids["openai/gpt-5"]; ok {
		t.Fatal("a catalog model the provider does not list must not be offered")
	}
}

// A stream request that no candidate can serve before any upstream call (here: no key) is refused with
// the same status and JSON envelope as the non-streamed endpoint, not a 200 stream carrying an error.
func TestChatStreamEndpointPreflightRefusalIsPlainError(t *testing.T) {
	f := openaiFake(t)
	ts := newModelServer(t, openaiEnv(f))
	body := `{"model":"anthropic/claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}`
	for _, path := range []string{"/v1/models/chat", "/v1/models/chat/stream"} {
		r := ts.do("POST", path, body)
		if r.status != 401 || r.errCode(t) != codeNoCredentials || r.header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s: %d %s %s", path, r.status, r.header.Get("Content-Type"), r.body)
		}
	}
	if n := len(f.chatRequests()); n != 0 {
		t.Fatalf("%d upstream calls", n)
	}
}
