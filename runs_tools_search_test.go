package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Loopback stand-ins for the two search APIs, each in its real wire format: Brave's GET
// /res/v1/web/search (X-Subscription-Token, q, count; hits in web.results, errors as ErrorResponse) and
// Tavily's POST /search (Authorization: Bearer, a JSON body with query and max_results; hits in results,
// errors as detail.error).
type fakeSearchAPIs struct {
	brave, tavily *httptest.Server
	mu            sync.Mutex
	braveFail     int // answer this status instead of results
	tavilyFail    int
	braveReq      *http.Request
	tavilyBody    map[string]any
	tavilyAuth    string
}

func newFakeSearchAPIs(t *testing.T) *fakeSearchAPIs {
	f := &fakeSearchAPIs{}
	f.brave = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.braveReq = r
		w.Header().Set("Content-Type", "application/json")
		if r.Method != http.MethodGet || r.URL.Path != "/res/v1/web/search" || r.Header.Get("Accept") != "application/json" {
			w.WriteHeader(404)
			w.Write([]byte(`{"type":"ErrorResponse","error":{"id":"x","status":404,"code":"RESOURCE_NOT_FOUND","detail":"Resource not found."}}`))
			return
		}
		if f.braveFail != 0 {
			w.WriteHeader(f.braveFail)
			w.Write([]byte(`{"type":"ErrorResponse","error":{"id":"b1e1","status":429,"code":"RATE_LIMITED","detail":"Request rate limit exceeded for plan.","meta":{"plan":"Free","rate_limit":1}},"time":1700000000}`))
			return
		}
		w.Write([]byte(`{"type":"search","query":{"original":"golang","more_results_available":true},
			"mixed":{"type":"mixed","main":[{"type":"web","index":0,"all":false}]},
			"web":{"type":"search","family_friendly":true,"results":[
			 {"title":"The Go Programming Language","url":"https://go.dev/","is_source_local":false,"is_source_both":false,
			  "description":"<strong>Go</strong> is an open source programming language.","language":"en","family_friendly":true,
			  "type":"search_result","profile":{"name":"Go","url":"https://go.dev/"},"extra_snippets":["Download Go"]},
			 {"title":"Go (programming language) - Wikipedia","url":"https://en.wikipedia.org/wiki/Go_(programming_language)",
			  "description":"Go is a statically typed language.","type":"search_result"}]}}`))
	}))
	f.tavily = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		f.tavilyAuth = r.Header.Get("Authorization")
		f.tavilyBody = nil
		json.NewDecoder(r.Body).Decode(&f.tavilyBody)
		if r.Method != http.MethodPost || r.URL.Path != "/search" || r.Header.Get("Content-Type") != "application/json" {
			w.WriteHeader(404)
			w.Write([]byte(`{"detail":"Not Found"}`))
			return
		}
		if f.tavilyFail != 0 {
			w.WriteHeader(f.tavilyFail)
			w.Write([]byte(`{"detail":{"error":"Unauthorized: missing or invalid API key."}}`))
			return
		}
		w.Write([]byte(`{"query":"golang","follow_up_questions":null,"answer":null,"images":[],"results":[
			{"url":"https://go.dev/doc/","title":"Documentation - The Go Programming Language","content":"The Go programming language is an open source project.","score":0.91,"raw_content":null},
			{"url":"https://go.dev/tour/","title":"A Tour of Go","content":"Welcome to a tour of Go.","score":0.85,"raw_content":null}],
			"response_time":1.09}`))
	}))
	t.Cleanup(f.brave.Close)
	t.Cleanup(f.tavily.Close)
	return f
}

func searchEnv(t *testing.T, env map[string]string) *toolEnv {
	t.Helper()
	te := newTestServer(t, withFakeModel(&fakeModel{script: scriptOf()}), withEnv(env))
	sp := testSpec("searcher", func(sp *AgentSpec) { sp.Tools = []string{"web"} })
	ar := newActiveRun(te.s.runs, sp, &runParams{Input: []ModelMessage{textMessage("user", "x")}, MaxSteps: 1}, nil)
	t.Cleanup(ar.stopTimer)
	if !slices.Contains(ar.tools, "web_search") {
		t.Fatalf("web_search not offered with %v", env)
	}
	return &toolEnv{ar: ar}
}

func TestWebSearchBraveAndTavily(t *testing.T) {
	f := newFakeSearchAPIs(t)
	brave := map[string]string{"BRAVE_API_KEY": "brave-secret-key-123", "BRAVE_BASE_URL": f.brave.URL + "/res/v1"}
	tavily := map[string]string{"TAVILY_API_KEY": "tvly-secret-key-456", "TAVILY_BASE_URL": f.tavily.URL}
	both := map[string]string{}
	for _, m := range []map[string]string{brave, tavily} {
		for k, v := range m {
			both[k] = v
		}
	}

	// Brave: the query, the limit and the key in Brave's places; snippets as text.
	out, err := runTool(t, searchEnv(t, brave), "web_search", map[string]any{"query": "golang", "limit": 2})
	q := f.braveReq.URL.Query()
	if err != nil || q.Get("q") != "golang" || q.Get("count") != "2" || f.braveReq.Header.Get("X-Subscription-Token") != "brave-secret-key-123" ||
		!strings.Contains(out, "1. The Go Programming Language\n   https://go.dev/\n   Go is an open source programming language.") ||
		!strings.Contains(out, "2. Go (programming language) - Wikipedia") {
		t.Fatalf("brave: %q %v (query %v)", out, err, q)
	}
	// Tavily alone: POST with a bearer key and max_results.
	out, err = runTool(t, searchEnv(t, tavily), "web_search", map[string]any{"query": "golang", "limit": 1})
	if err != nil || f.tavilyAuth != "Bearer tvly-secret-key-456" || f.tavilyBody["query"] != "golang" || f.tavilyBody["max_results"] != 1.0 ||
		out != "1. Documentation - The Go Programming Language\n   https://go.dev/doc/\n   The Go programming language is an open source project.\n" {
		t.Fatalf("tavily: %q %v (body %v)", out, err, f.tavilyBody)
	}
	// count is still accepted; limit is 1-20.
	if _, err := runTool(t, searchEnv(t, tavily), "web_search", map[string]any{"query": "golang", "count": 20}); err != nil || f.tavilyBody["max_results"] != 20.0 {
		t.Fatalf("count 20: %v %v", err, f.tavilyBody)
	}
	for _, bad := range []int{0, 21} {
		if _, err := runTool(t, searchEnv(t, both), "web_search", map[string]any{"query": "golang", "limit": bad}); err == nil || asAPIError(err).Code != codeToolError {
			t.Fatalf("limit %d: %v", bad, err)
		}
	}
	// Both: Brave first; when Brave is rate limited, Tavily answers.
	f.mu.Lock()
	f.braveFail = 429
	f.mu.Unlock()
	if out, err := runTool(t, searchEnv(t, both), "web_search", map[string]any{"query": "golang"}); err != nil || !strings.Contains(out, "A Tour of Go") {
		t.Fatalf("fallback to tavily: %q %v", out, err)
	}
	// Both failing: one error naming each failure and the APIs' own messages, and neither key.
	f.mu.Lock()
	f.tavilyFail = 401
	f.mu.Unlock()
	_, err = runTool(t, searchEnv(t, both), "web_search", map[string]any{"query": "golang"})
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if !strings.Contains(msg, "brave: answered 429 Too Many Requests: Request rate limit exceeded for plan.") ||
		!strings.Contains(msg, "tavily: answered 401 Unauthorized: Unauthorized: missing or invalid API key.") ||
		strings.Contains(msg, "secret-key") {
		t.Fatalf("both failing: %v", err)
	}
	// Neither key: web_search is not offered.
	if got := resolveTools(testSpec("t", func(sp *AgentSpec) { sp.Tools = []string{"web"} }), func(string) string { return "" }); slices.Contains(got, "web_search") {
		t.Fatalf("offered without a key: %v", got)
	}
}
