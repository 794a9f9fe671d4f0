package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// twoProviders runs an OpenAI fake and an Anthropic fake with their replies.
func twoProviders(t *testing.T, oa, an func(w http.ResponseWriter, n int, r recorded)) (*modelService, *sleepRecorder, *fakeUpstream, *fakeUpstream) {
	fo := newFake(t, oa)
	fa := newFake(t, an)
	env := map[string]string{"OPENAI_API_KEY": "sk-test-key-1234567890", "OPENAI_BASE_URL": fo.URL,
		"ANTHROPIC_API_KEY": "sk-ant-test-key-1234567890", "ANTHROPIC_BASE_URL": fa.URL}
	m, rec := newTestModels(t, env, nil)
	return m, rec, fo, fa
}

func TestRouterNoRetryOn400And422EndsWalk(t *testing.T) {
	for _, st := range []int{400, 422} {
		t.Run(fmt.Sprint(st), func(t *testing.T) {
			m, rec, fo, fa := twoProviders(t,
				func(w http.ResponseWriter, n int, r recorded) { replay(t, w, st, "openai", "error_400.json") },
				func(w http.ResponseWriter, n int, r recorded) { replay(t, w, 200, "anthropic", "message_plain.json") })
			_, err := m.Chat(context.Background(), ChatRequest{Model: "openai/gpt-4o", Messages: []ModelMessage{userMsg("x")}},
				chatOptions{MaxCostUSD: -1, Fallbacks: []string{"anthropic/claude-sonnet-4-5"}})
			if apiCode(err) != codeModelError || len(fo.chatRequests()) != 1 || len(fa.chatRequests()) != 0 || len(rec.get()) != 0 {
				t.Fatalf("err %v; openai %d calls, anthropic %d calls, sleeps %v", err, len(fo.chatRequests()), len(fa.chatRequests()), rec.get())
			}
		})
	}
}

func TestRouter401MovesToNextCandidateWithFallbackWarning(t *testing.T) {
	m, rec, fo, fa := twoProviders(t,
		func(w http.ResponseWriter, n int, r recorded) { replay(t, w, 401, "openai", "error_401.json") },
		func(w http.ResponseWriter, n int, r recorded) { replay(t, w, 200, "anthropic", "stream_text.sse") })
	var col collector
	resp, err := m.Stream(context.Background(), ChatRequest{Model: "openai/gpt-4o", Messages: []ModelMessage{userMsg("x")}},
		chatOptions{MaxCostUSD: -1, Fallbacks: []string{"sonnet"}}, col.emit)
	if err != nil {
		t.Fatal(err)
	}
	if len(fo.chatRequests()) != 1 || len(fa.chatRequests()) != 1 || len(rec.get()) != 0 {
		t.Fatalf("openai %d calls (want 1, never retried), anthropic %d, sleeps %v", len(fo.chatRequests()), len(fa.chatRequests()), rec.get())
	}
	if resp.Model != "anthropic/claude-sonnet-4-5" || resp.Text != "Hello!" || len(resp.Warnings) != 1 {
		t.Fatalf("resp: %+v", resp)
	}
	if got := strings.Join(col.types(), ","); got != "warning,start,text_delta,text_delta,usage,done" {
		t.Fatalf("events: %s", got)
	}
	w := col.ofType("warning")[0]
	if w.Code != "fallback" || !strings.Contains(w.Message, codeNoCredentials) || strings.Contains(w.Message, "sk-test-key") {
		t.Fatalf("warning: %+v", w)
	}
}

func TestRouterStreamFailingBeforeOutputSwitchesCandidate(t *testing.T) {
	m, rec, fo, fa := twoProviders(t,
		func(w http.ResponseWriter, n int, r recorded) { resetAfter(w, wireSpecs[0].before) },
		func(w http.ResponseWriter, n int, r recorded) { replay(t, w, 200, "anthropic", "stream_text.sse") })
	var col collector
	resp, err := m.Stream(context.Background(), ChatRequest{Model: "openai/gpt-4o", Messages: []ModelMessage{userMsg("x")}},
		chatOptions{MaxCostUSD: -1, Fallbacks: []string{"anthropic/claude-sonnet-4-5"}}, col.emit)
	if err != nil {
		t.Fatal(err)
	}
	if len(fo.chatRequests()) != 3 || len(fa.chatRequests()) != 1 || len(rec.get()) != 2 || resp.Model != "anthropic/claude-sonnet-4-5" {
		t.Fatalf("openai %d calls, anthropic %d, sleeps %v, model %s", len(fo.chatRequests()), len(fa.chatRequests()), rec.get(), resp.Model)
	}
	if got := strings.Join(col.types(), ","); got != "warning,start,text_delta,text_delta,usage,done" {
		t.Fatalf("events: %s", got)
	}
}

func TestRouterStreamFailingAfterOutputEndsInError(t *testing.T) {
	m, rec, fo, fa := twoProviders(t,
		func(w http.ResponseWriter, n int, r recorded) { resetAfter(w, wireSpecs[0].before+wireSpecs[0].output) },
		func(w http.ResponseWriter, n int, r recorded) { replay(t, w, 200, "anthropic", "stream_text.sse") })
	var col collector
	_, err := m.Stream(context.Background(), ChatRequest{Model: "openai/gpt-4o", Messages: []ModelMessage{userMsg("x")}},
		chatOptions{MaxCostUSD: -1, Fallbacks: []string{"anthropic/claude-sonnet-4-5"}}, col.emit)
	if apiCode(err) != codeModelError || len(fo.chatRequests()) != 1 || len(fa.chatRequests()) != 0 || len(rec.get()) != 0 {
		t.Fatalf("err %v; openai %d, anthropic %d, sleeps %v", err, len(fo.chatRequests()), len(fa.chatRequests()), rec.get())
	}
	if got := strings.Join(col.types(), ","); got != "start,text_delta,error" {
		t.Fatalf("events: %s", got)
	}
}

func TestRouter429OnEveryCandidateIsQuota(t *testing.T) {
	m, rec, fo, fa := twoProviders(t,
		func(w http.ResponseWriter, n int, r recorded) { replay(t, w, 429, "openai", "error_429.json") },
		func(w http.ResponseWriter, n int, r recorded) { replay(t, w, 429, "anthropic", "error_429.json") })
	_, err := m.Chat(context.Background(), ChatRequest{Model: "openai/gpt-4o", Messages: []ModelMessage{userMsg("x")}},
		chatOptions{MaxCostUSD: -1, Fallbacks: []string{"anthropic/claude-sonnet-4-5"}})
	if apiCode(err) != codeQuota || len(fo.chatRequests()) != 3 || len(fa.chatRequests()) != 3 || len(rec.get()) != 4 {
		t.Fatalf("err %v; openai %d, anthropic %d, sleeps %v", err, len(fo.chatRequests()), len(fa.chatRequests()), rec.get())
	}
	for _, d := range rec.get() {
		if d > backoffCap {
			t.Fatalf("backoff %v above the cap", d)
		}
	}
}

func TestRouterRetryThenSucceed(t *testing.T) {
	var calls atomic.Int32
	f := newFake(t, func(w http.ResponseWriter, n int, r recorded) {
		if calls.Add(1) < 3 {
			replay(t, w, 503, "openai", "error_500.json")
			return
		}
		replay(t, w, 200, "openai", "chat_plain.json")
	})
	m, rec := newTestModels(t, openaiEnv(f), nil)
	resp, err := m.Chat(context.Background(), ChatRequest{Model: "openai/gpt-4o", Messages: []ModelMessage{userMsg("x")}}, chatOptions{MaxCostUSD: -1})
	if err != nil || resp.Text == "" || calls.Load() != 3 {
		t.Fatalf("err %v, calls %d", err, calls.Load())
	}
	if d := rec.get(); len(d) != 2 || d[0] != backoffBase || d[1] != 2*backoffBase {
		t.Fatalf("sleeps %v (full jitter windows 0.5 s then 1 s)", d)
	}
}

func TestRouterBackoffWindowIsCapped(t *testing.T) {
	m, _ := newTestModels(t, nil, nil)
	for attempt := 1; attempt < 12; attempt++ {
		if d := m.backoff(attempt, &upstreamError{status: 500}); d > backoffCap || d <= 0 {
			t.Fatalf("attempt %d: window %v", attempt, d)
		}
	}
	if d := m.backoff(1, &upstreamError{status: 429, retryAfter: 90 * time.Second}); d != backoffCap {
		t.Fatalf("Retry-After 90 s must be capped at 8 s, got %v", d)
	}
	m.jitter = func(max time.Duration) time.Duration { return 0 }
	if d := m.backoff(3, &upstreamError{status: 500}); d != 0 {
		t.Fatalf("full jitter draws from [0, window], got %v", d)
	}
}

func TestRouterMissingKeyIsNoCredentialsWithoutCall(t *testing.T) {
	m, _ := newTestModels(t, nil, nil)
	_, err := m.Chat(context.Background(), ChatRequest{Model: "anthropic/claude-sonnet-4-5", Messages: []ModelMessage{userMsg("x")}}, chatOptions{MaxCostUSD: -1})
	if apiCode(err) != codeNoCredentials || statusOf[apiCode(err)] != 401 || !strings.Contains(asAPIError(err).Hint, "ANTHROPIC_API_KEY") {
		t.Fatalf("got %v", err)
	}
	_, err = m.Chat(context.Background(), ChatRequest{Model: "nonsense-model", Messages: []ModelMessage{userMsg("x")}}, chatOptions{MaxCostUSD: -1})
	if apiCode(err) != codeModelUnavailable {
		t.Fatalf("unknown model: %v", err)
	}
}

func TestRouterAliases(t *testing.T) {
	m, _ := newTestModels(t, map[string]string{"OPENAI_API_KEY": "sk-x-1234567890abcdef", "ANTHROPIC_API_KEY": "sk-ant-x-1234567890"}, func(c *config) {
		c.ModelAliases = map[string]string{"fast": "cheap", "cheap": "openai/gpt-4o-mini", "smart": "sonnet"}
	})
	for name, want := range map[string]string{"fast": "openai/gpt-4o-mini", "smart": "anthropic/claude-sonnet-4-5",
		"gpt": "openai/gpt-5", "gpt-4.1": "openai/gpt-4.1", "openrouter/x/y": "openrouter/x/y"} {
		ids, err := m.resolve(context.Background(), name)
		if err != nil || len(ids) != 1 || ids[0] != want {
			t.Errorf("%s → %v %v, want %s", name, ids, err, want)
		}
	}
	// llama has no configured provider here: no reachable model matches.
	if _, err := m.resolve(context.Background(), "llama"); apiCode(err) != codeModelUnavailable {
		t.Errorf("llama: %v", err)
	}
}

func TestRouterAliasLoopIsConfigError(t *testing.T) {
	loop := map[string]string{"a": "b", "b": "c", "c": "a"}
	if _, err := newModelService(modelDeps{aliases: loop}); apiCode(err) != codeConfig || !strings.Contains(err.Error(), "loop") {
		t.Fatalf("construction: %v", err)
	}
	m, _ := newTestModels(t, nil, nil)
	m.aliases = map[string]string{"x": "y", "y": "x"}
	_, err := m.Chat(context.Background(), ChatRequest{Model: "x", Messages: []ModelMessage{userMsg("x")}}, chatOptions{MaxCostUSD: -1})
	if apiCode(err) != codeConfig {
		t.Fatalf("chat: %v", err)
	}
	chain := map[string]string{}
	for i := 0; i < 12; i++ {
		chain[fmt.Sprintf("h%d", i)] = fmt.Sprintf("h%d", i+1)
	}
	chain["h12"] = "openai/gpt-4o"
	m.aliases = chain
	if _, err := m.resolve(context.Background(), "h0"); apiCode(err) != codeConfig {
		t.Fatalf("a 13-hop chain must be refused (≤ 8 hops): %v", err)
	}
}

func TestRouterStrategyOrdering(t *testing.T) {
	m, _ := newTestModels(t, nil, nil)
	st := map[string]providerStatus{
		"anthropic":  {Available: true},
		"openai":     {Available: true},
		"groq":       {Available: true},
		"openrouter": {Available: true},
		"ollama":     {Available: true, Models: []string{"llama3.2:latest"}},
		"lmstudio":   {Available: true, Models: []string{"qwen2.5-7b-instruct"}},
	}
	cases := map[string]string{
		"auto":  "anthropic/claude-opus-4-5,openrouter/anthropic/claude-sonnet-4.5,openai/gpt-5",
		"free":  "openrouter/deepseek/deepseek-chat-v3-0324:free,lmstudio/qwen2.5-7b-instruct,ollama/llama3.2:latest",
		"local": "lmstudio/qwen2.5-7b-instruct,ollama/llama3.2:latest",
	}
	for strategy, want := range cases {
		ids, err := m.autoCandidates(st, strategy)
		if err != nil || strings.Join(ids, ",") != want {
			t.Errorf("%s: %v %v\n want %s", strategy, ids, err, want)
		}
	}
	// Only paid remote models: free falls back to the cheapest.
	ids, _ := m.autoCandidates(map[string]providerStatus{"openai": {Available: true}, "anthropic": {Available: true}}, "free")
	if len(ids) == 0 || ids[0] != "openai/gpt-5-nano" {
		t.Errorf("free without free models: %v", ids)
	}
	if _, err := m.autoCandidates(map[string]providerStatus{"openai": {Available: true}}, "local"); apiCode(err) != codeModelUnavailable {
		t.Errorf("local without local providers: %v", err)
	}
	// A live list restricts auto to what the provider serves.
	ids, _ = m.autoCandidates(map[string]providerStatus{"anthropic": {Available: true, Models: []string{"claude-haiku-4-5"}}}, "auto")
	if strings.Join(ids, ",") != "anthropic/claude-haiku-4-5" {
		t.Errorf("live list: %v", ids)
	}
}

func TestRouterBudgetSkipsExpensiveCandidate(t *testing.T) {
	m, _, fo, fa := twoProviders(t,
		func(w http.ResponseWriter, n int, r recorded) { replay(t, w, 200, "openai", "chat_stream.sse") },
		func(w http.ResponseWriter, n int, r recorded) { replay(t, w, 200, "anthropic", "stream_text.sse") })
	req := ChatRequest{Model: "anthropic/claude-opus-4-1", Messages: []ModelMessage{userMsg("hello")}, MaxTokens: 1000}
	var col collector
	resp, err := m.Stream(context.Background(), req, chatOptions{MaxCostUSD: 0.01, Fallbacks: []string{"openai/gpt-4o-mini"}}, col.emit)
	if err != nil || resp.Model != "openai/gpt-4o-mini" || len(fa.chatRequests()) != 0 || len(fo.chatRequests()) != 1 {
		t.Fatalf("resp %+v err %v", resp, err)
	}
	if w := col.ofType("warning"); len(w) != 1 || !strings.Contains(w[0].Message, "exceeds the ceiling") || w[0].Code != "fallback" {
		t.Fatalf("warnings %+v", w)
	}
}

func TestRouterCapabilityMismatchSkipsCandidate(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, n int, r recorded) { replay(t, w, 200, "openai", "chat_plain.json") })
	m, _ := newTestModels(t, map[string]string{"GROQ_API_KEY": "gsk_1234567890abcdefghij", "GROQ_BASE_URL": f.URL,
		"OPENAI_API_KEY": "sk-test-key-1234567890", "OPENAI_BASE_URL": f.URL}, nil)
	img := ModelMessage{Role: "user", Content: []ContentPart{{Type: "text", Text: "what is this"}, {Type: "image", MimeType: "image/png", Data: "iVBORw0KGgo="}}}
	_, err := m.Chat(context.Background(), ChatRequest{Model: "groq/llama-3.3-70b-versatile", Messages: []ModelMessage{img}}, chatOptions{MaxCostUSD: -1})
	if apiCode(err) != codeProviderUnavailable || len(f.requests()) != 0 {
		t.Fatalf("err %v, %d calls", err, len(f.requests()))
	}
	resp, err := m.Chat(context.Background(), ChatRequest{Model: "groq/llama-3.3-70b-versatile", Messages: []ModelMessage{img}},
		chatOptions{MaxCostUSD: -1, Fallbacks: []string{"openai/gpt-4o"}})
	if err != nil || resp.Model != "openai/gpt-4o" || len(f.requests()) != 1 {
		t.Fatalf("fallback to a vision model: %+v %v", resp, err)
	}
}

func TestRouterAutoEndToEnd(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, n int, r recorded) {
		if r.Method == http.MethodGet {
			replay(t, w, 200, "openai", "models.json")
			return
		}
		replay(t, w, 200, "openai", "chat_plain.json")
	})
	m, _ := newTestModels(t, openaiEnv(f), nil)
	resp, err := m.Chat(context.Background(), ChatRequest{Messages: []ModelMessage{userMsg("x")}}, chatOptions{MaxCostUSD: -1})
	if err != nil {
		t.Fatal(err)
	}
	// The live list has gpt-4o, gpt-4o-mini and gpt-4.1: auto takes the best of those by quality.
	if resp.Model != "openai/gpt-4.1" || !strings.Contains(string(f.chatRequests()[0].Body), `"model":"gpt-4.1"`) {
		t.Fatalf("auto chose %s", resp.Model)
	}
	model, usd, err := m.EstimateCost(ChatRequest{Model: "auto", Messages: []ModelMessage{userMsg("x")}})
	if err != nil || model != "openai/gpt-4.1" || usd <= 0 {
		t.Fatalf("estimate: %s %v %v", model, usd, err)
	}
}
