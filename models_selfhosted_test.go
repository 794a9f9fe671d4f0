package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// selfHostedServer is an OpenAI-compatible server of the user's own (vLLM, llama.cpp): it serves one
// model the catalog does not know and records each request's path and Authorization header.
type selfHostedServer struct {
	*httptest.Server
	mu    sync.Mutex
	paths []string
	auths []string
}

func newSelfHosted(t *testing.T, model string) *selfHostedServer {
	s := &selfHostedServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.paths = append(s.paths, r.URL.Path)
		s.auths = append(s.auths, r.Header.Get("Authorization"))
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/models":
			fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model"}]}`, model)
		case "/v1/chat/completions":
			var req struct{ Stream bool }
			b, _ := io.ReadAll(r.Body)
			json.Unmarshal(b, &req)
			if req.Stream && bytes.Contains(b, []byte(`"fetch_url"`)) && !bytes.Contains(b, []byte(`"role":"tool"`)) {
				// An agent with the web tools: one step with a tool call first (refused: a loopback host).
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"tool_calls\":[{\"index\":0,\"id\":\"t1\",\"type\":\"function\",\"function\":{\"name\":\"fetch_url\",\"arguments\":\"{\\\"url\\\":\\\"http://127.0.0.1:1/\\\"}\"}}]},\"finish_reason\":null}]}\n\n", model)
				fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":4,\"total_tokens\":13}}\n\ndata: [DONE]\n\n", model)
				return
			}
			if req.Stream {
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"self-hosted says hi\"},\"finish_reason\":null}]}\n\n", model)
				fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":4,\"total_tokens\":13}}\n\ndata: [DONE]\n\n", model)
				return
			}
			fmt.Fprintf(w, `{"id":"c","object":"chat.completion","model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"self-hosted says hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":4,"total_tokens":13}}`, model)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *selfHostedServer) seen() ([]string, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.paths...), append([]string(nil), s.auths...)
}

// serverWithEnv starts the real server with exactly this model environment.
func serverWithEnv(t *testing.T, env map[string]string) *testServer {
	t.Helper()
	return newTestServer(t, func(c *testSetup) {
		c.ComputerProvider, c.getenv = "local", func(k string) string { return env[k] }
	})
}

func TestSelfHostedBaseURLAndNoKey(t *testing.T) {
	sh := newSelfHosted(t, "qwen2.5-coder-32b")
	for _, base := range []string{sh.URL, sh.URL + "/", sh.URL + "/v1", sh.URL + "/v1/"} {
		ts := serverWithEnv(t, map[string]string{"OPENAI_BASE_URL": base})
		res := ts.do("POST", "/v1/models/chat", map[string]any{"model": "openai/qwen2.5-coder-32b",
			"messages": []any{map[string]any{"role": "user", "content": "hi"}}})
		if res.status != 200 || res.json(t)["text"] != "self-hosted says hi" {
			t.Fatalf("base %q: %d %s", base, res.status, res.body)
		}
	}
	paths, auths := sh.seen()
	for i, p := range paths {
		if p != "/v1/chat/completions" && p != "/v1/models" {
			t.Fatalf("request %d went to %s", i, p)
		}
		if auths[i] != "" {
			t.Fatalf("a keyless server got an Authorization header: %q", auths[i])
		}
	}
}

// A model only the provider lists is what `auto` picks from a self-hosted server. A keyless self-hosted
// server is the user's own: its models are listed free and a run on one does not warn that it is
// unpriced (issue 26 item 9); behind a key (a paid proxy) an uncatalogued model is unpriced, said once a run.
func TestAutoUsesAProviderListedModel(t *testing.T) {
	sh := newSelfHosted(t, "qwen2.5-coder-32b")
	unpricedWarnings := func(ts *testServer, agent string, tools []any) (map[string]any, int) {
		t.Helper()
		if res := ts.do("POST", "/v1/agents", map[string]any{"spec": map[string]any{"name": agent, "model": "auto",
			"computer": map[string]any{"enabled": false}, "tools": tools}}); res.status != 201 {
			t.Fatalf("create: %d %s", res.status, res.body)
		}
		res := ts.do("POST", "/v1/agents/"+agent+"/run", map[string]any{"input": "fetch something"})
		out := res.json(t)
		if res.status != 200 || out["stopReason"] != "complete" || out["model"] != "openai/qwen2.5-coder-32b" || out["text"] != "self-hosted says hi" {
			t.Fatalf("run: %d %s", res.status, res.body)
		}
		run := ts.do("GET", "/v1/runs/"+out["runId"].(string), nil).json(t)
		n := 0
		for _, ev := range run["events"].([]any) {
			if e := ev.(map[string]any); e["type"] == "warning" && e["code"] == "unpriced" && strings.Contains(e["message"].(string), "counted as $0") {
				n++
			}
		}
		if out["usage"].(map[string]any)["costUsd"] != float64(0) {
			t.Fatalf("a cost: %v", out)
		}
		return out, n
	}
	listed := func(ts *testServer) map[string]any {
		for _, m := range ts.do("GET", "/v1/models", nil).json(t)["models"].([]any) {
			if mi := m.(map[string]any); mi["id"] == "openai/qwen2.5-coder-32b" {
				return mi
			}
		}
		t.Fatal("the self-hosted model is not listed")
		return nil
	}

	own := serverWithEnv(t, map[string]string{"OPENAI_BASE_URL": sh.URL})
	if out, n := unpricedWarnings(own, "lan", []any{"web"}); n != 0 || out["steps"] != float64(2) {
		t.Fatalf("a %v-step run on the user's own server warned %d times that the model is unpriced", out["steps"], n)
	}
	if mi := listed(own); mi["free"] != true {
		t.Fatalf("the user's own model is not listed free: %v", mi)
	}

	proxy := serverWithEnv(t, map[string]string{"OPENAI_BASE_URL": sh.URL, "OPENAI_API_KEY": "sk-proxy-0123456789abcdef"})
	if out, n := unpricedWarnings(proxy, "lan-web", []any{"web"}); n != 1 {
		t.Fatalf("a %v-step run through a keyed proxy warned %d times that the model is unpriced, want once", out["steps"], n)
	}
	if mi := listed(proxy); mi["pricing"] != nil || mi["free"] != false {
		t.Fatalf("a listed-only model behind a key has a price or is free: %v", mi)
	}
}

// The doctor in each state: nothing reachable, only a keyless self-hosted server, a keyed provider.
// It never says a provider is available and that none is reachable in one report.
func TestDoctorModelStatesDoNotContradict(t *testing.T) {
	sh := newSelfHosted(t, "llama-3.1-8b-instruct")
	keyed := newSelfHosted(t, "gpt-4o-mini")
	for name, tc := range map[string]struct {
		env       map[string]string
		available string // the available model provider, "" for none
		model     string
	}{
		"nothing":     {map[string]string{}, "", ""},
		"self-hosted": {map[string]string{"OPENAI_BASE_URL": sh.URL}, "openai", "openai/llama-3.1-8b-instruct"},
		"keyed":       {map[string]string{"OPENAI_API_KEY": "sk-doctor-1234567890abcdef", "OPENAI_BASE_URL": keyed.URL + "/v1"}, "openai", "openai/gpt-4o-mini"},
	} {
		ts := serverWithEnv(t, tc.env)
		rep := ts.do("GET", "/v1/doctor", nil).json(t)
		var avail []string
		for _, m := range rep["models"].([]any) {
			if mp := m.(map[string]any); mp["available"] == true {
				avail = append(avail, mp["id"].(string))
			}
		}
		warnings := fmt.Sprint(rep["warnings"])
		sel := rep["selection"].(map[string]any)
		switch {
		case tc.available == "" && (len(avail) != 0 || !strings.Contains(warnings, "no model provider is reachable") || !strings.Contains(warnings, "OPENAI_BASE_URL")):
			t.Errorf("%s: available %v, warnings %s", name, avail, warnings)
		case tc.available != "" && (len(avail) != 1 || avail[0] != tc.available || strings.Contains(warnings, "no model provider is reachable") || sel["model"] != tc.model):
			t.Errorf("%s: available %v, model %v, warnings %s", name, avail, sel["model"], warnings)
		}
		for _, m := range rep["models"].([]any) { // every unavailable provider's hint names a variable
			mp := m.(map[string]any)
			if mp["available"] != true && !strings.Contains(fmt.Sprint(mp["hint"]), "_") {
				t.Errorf("%s: %v has no hint naming a variable: %v", name, mp["id"], mp["hint"])
			}
		}
	}
}
