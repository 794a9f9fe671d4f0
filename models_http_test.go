package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
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

func postJSON(t *testing.T, url, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func decodeResp(t *testing.T, resp *http.Response, v any) {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}

// sseFrame is one parsed frame of a response stream.
type sseFrame struct {
	event string
	data  string
}

func readFrames(t *testing.T, r io.Reader) []sseFrame {
	var out []sseFrame
	sc := bufio.NewScanner(r)
	var cur sseFrame
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.event != "" || cur.data != "" {
				out = append(out, cur)
			}
			cur = sseFrame{}
		case strings.HasPrefix(line, "event: "):
			cur.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data = strings.TrimPrefix(line, "data: ")
		}
	}
	return out
}

func TestChatEndpoint(t *testing.T) {
	f := openaiFake(t)
	_, ts := newTestAPI(t, openaiEnv(f), nil)
	resp := postJSON(t, ts.URL+"/v1/models/chat", `{"model":"openai/gpt-4o","messages":[{"role":"user","content":"capital of France?"}],"maxTokens":100}`)
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	var cr ChatResponse
	decodeResp(t, resp, &cr)
	if cr.Text != "The capital of France is Paris." || cr.Model != "openai/gpt-4o" || cr.Usage.CostUSD <= 0 || cr.ToolCalls == nil || cr.FinishReason != "stop" {
		t.Fatalf("%+v", cr)
	}
}

func TestChatEndpointValidation(t *testing.T) {
	f := openaiFake(t)
	_, ts := newTestAPI(t, openaiEnv(f), nil)
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
			resp := postJSON(t, ts.URL+path, body)
			var e struct{ Error apiError }
			decodeResp(t, resp, &e)
			if resp.StatusCode != 422 || e.Error.Code != codeSpecInvalid || e.Error.Message == "" {
				t.Errorf("%s %s: %d %+v", path, body, resp.StatusCode, e)
			}
		}
	}
	if n := len(f.chatRequests()); n != 0 {
		t.Fatalf("invalid bodies reached the provider %d times", n)
	}
}

func TestChatEndpointConfigCeilingBeforeUpstream(t *testing.T) {
	f := openaiFake(t)
	_, ts := newTestAPI(t, openaiEnv(f), func(c *config) { c.MaxCostUSD = 0.001 })
	body := `{"model":"openai/gpt-4o","messages":[{"role":"user","content":"hi"}],"maxTokens":100000}`
	for _, path := range []string{"/v1/models/chat", "/v1/models/chat/stream"} {
		resp := postJSON(t, ts.URL+path, body)
		var e struct{ Error apiError }
		decodeResp(t, resp, &e)
		if resp.StatusCode != 429 || e.Error.Code != codeBudgetExceeded || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s: %d %+v", path, resp.StatusCode, e)
		}
	}
	if n := len(f.requests()); n != 0 {
		t.Fatalf("refused call reached the provider %d times", n)
	}
}

func TestChatStreamEndpoint(t *testing.T) {
	f := openaiFake(t)
	_, ts := newTestAPI(t, openaiEnv(f), nil)
	resp := postJSON(t, ts.URL+"/v1/models/chat/stream", `{"model":"openai/gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`)
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %v", resp.StatusCode, resp.Header)
	}
	frames := readFrames(t, resp.Body)
	var types []string
	for _, fr := range frames {
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
	_, ts := newTestAPI(t, openaiEnv(f), nil)
	resp := postJSON(t, ts.URL+"/v1/models/chat/stream", `{"model":"openai/gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`)
	defer resp.Body.Close()
	frames := readFrames(t, resp.Body)
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
	_, ts := newTestAPI(t, openaiEnv(f), nil)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/models/chat/stream",
		strings.NewReader(`{"model":"openai/gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for { // read until the first text delta arrived, then hang up
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(line, "text_delta") {
			break
		}
	}
	cancel()
	resp.Body.Close()
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream request was not cancelled after the client left")
	}
}

func TestListModelsEndpoint(t *testing.T) {
	f := openaiFake(t)
	_, ts := newTestAPI(t, openaiEnv(f), nil)
	resp, err := http.Get(ts.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Models    []ModelInfo    `json:"models"`
		Providers []providerView `json:"providers"`
	}
	decodeResp(t, resp, &out)
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
	_, ts := newTestAPI(t, openaiEnv(f), nil)
	body := `{"model":"anthropic/claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}`
	for _, path := range []string{"/v1/models/chat", "/v1/models/chat/stream"} {
		resp := postJSON(t, ts.URL+path, body)
		var e struct{ Error apiError }
		decodeResp(t, resp, &e)
		if resp.StatusCode != 401 || e.Error.Code != codeNoCredentials || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s: %d %s %+v", path, resp.StatusCode, resp.Header.Get("Content-Type"), e)
		}
	}
	if n := len(f.chatRequests()); n != 0 {
		t.Fatalf("%d upstream calls", n)
	}
}
