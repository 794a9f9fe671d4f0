package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Each prompt-extraction case of DESIGN §7, sent to a real server through an http trigger and an unsigned
// webhook: the echo model answers with the prompt it was given, so the run's input is checked exactly.
func TestTriggerPrompt(t *testing.T) {
	so := echoModel(t)
	te := newE2E(t, so, "")
	te.createAgent(noComputer(map[string]any{"name": "echo", "triggers": []any{
		map[string]any{"type": "http"}, map[string]any{"type": "webhook", "path": "/hook"}}}))
	for _, tc := range []struct{ query, body, want, err string }{
		{"?input=from+query", `{"input":"from body"}`, "from query", ""},
		{"?text=t", "", "t", ""},
		{"?q=search", "", "search", ""},
		{"?input=+", "plain words", "plain words", ""}, // a blank query value does not count
		{"", "plain text body", "plain text body", ""},
		{"", "  padded body \n", "padded body", ""},
		{"", `{"input":"i","text":"t"}`, "i", ""},
		{"", `{"text":"t","message":"m"}`, "t", ""},
		{"", `{"message":"m"}`, "m", ""},
		{"", `{"prompt":"p"}`, "p", ""},
		{"", `{"content":"c"}`, "c", ""},
		{"", `{"query":"q"}`, "q", ""},
		{"", `{"input":42,"prompt":"p"}`, "p", ""},                                   // a non-string key is skipped
		{"", `{"input":"  ","query":"q"}`, "q", ""},                                  // so is a blank one
		{"", `{"action":"opened","number":7}`, `{"action":"opened","number":7}`, ""}, // the JSON body itself
		{"", `"a JSON string"`, "a JSON string", ""},
		{"", `[1,2]`, `[1,2]`, ""},
		{"", "", "", "no prompt found in the request"},
		{"", "   \n", "", "no prompt found in the request"},
		{"", "\xff\xfe bad", "", "not valid UTF-8"},
	} {
		for _, mount := range []string{"/v1/t/echo", "/v1/w/echo/hook"} {
			method := "POST"
			var body any = tc.body
			if tc.body == "" && tc.query != "" && strings.HasPrefix(mount, "/v1/t/") {
				method, body = "GET", nil
			}
			before := len(so.requests())
			r := te.do(method, mount+tc.query, body)
			if tc.err != "" {
				if r.status != 422 || r.errCode(t) != codeSpecInvalid || !strings.Contains(r.errMessage(t), tc.err) || len(so.requests()) != before {
					t.Errorf("%s %s%s %q: %d %s, want 422 %q and no run", method, mount, tc.query, tc.body, r.status, r.body, tc.err)
				}
				continue
			}
			reqs := so.requests()
			if r.status != 200 || r.json(t)["text"] != "echo: "+tc.want || len(reqs) != before+1 || reqs[len(reqs)-1].lastUser() != tc.want {
				t.Errorf("%s %s%s %q: %d %s, want the prompt %q", method, mount, tc.query, tc.body, r.status, r.body, tc.want)
			}
		}
	}
}

func hubSig(secret, body string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(body))
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

func stdSig(key []byte, id, ts, body string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + ts + "." + body))
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// Webhook signatures against a real server: a Standard Webhooks trigger with a whsec_ secret, one with a
// raw secret, and a GitHub-style one; each refusal is 403 E_EXEC_DENIED saying why and never runs the
// agent, and each good signature runs it.
func TestVerifyWebhook(t *testing.T) {
	so := echoModel(t)
	te := newE2E(t, so, "")
	raw := "a-raw-secret-not-base64!"
	whKey := []byte("0123456789abcdef0123456789abcdef")
	whsec := "whsec_" + base64.StdEncoding.EncodeToString(whKey)
	te.createAgent(noComputer(map[string]any{"name": "hooks", "triggers": []any{
		map[string]any{"type": "webhook", "path": "/whsec", "secret": whsec},
		map[string]any{"type": "webhook", "path": "/raw", "secret": raw},
		map[string]any{"type": "webhook", "path": "/gh", "secret": "s3cret"},
		map[string]any{"type": "webhook", "path": "/open"}}}))
	body := `{"action":"opened","text":"issue opened"}`
	now := time.Now().Unix()
	ts := strconv.FormatInt(now, 10)
	stale, future := strconv.FormatInt(now-400, 10), strconv.FormatInt(now+400, 10)
	std := func(id, ts, sig string) []string {
		return []string{"webhook-id", id, "webhook-timestamp", ts, "webhook-signature", sig}
	}
	for _, tc := range []struct {
		name, path string
		headers    []string
		want       string // "" = accepted and run
	}{
		{"whsec right", "/whsec", std("m1", ts, stdSig(whKey, "m1", ts, body)), ""},
		{"raw right", "/raw", std("m2", ts, stdSig([]byte(raw), "m2", ts, body)), ""},
		{"whsec wrong key", "/whsec", std("m3", ts, stdSig([]byte("other"), "m3", ts, body)), "webhook-signature does not match"},
		{"whsec secret used raw", "/whsec", std("m4", ts, stdSig([]byte(whsec), "m4", ts, body)), "webhook-signature does not match"},
		{"raw secret base64-decoded", "/raw", std("m5", ts, stdSig(whKey, "m5", ts, body)), "webhook-signature does not match"},
		{"signed for another body", "/whsec", std("m6", ts, stdSig(whKey, "m6", ts, body+" ")), "webhook-signature does not match"},
		{"signed for another id", "/whsec", std("m7", ts, stdSig(whKey, "m1", ts, body)), "webhook-signature does not match"},
		{"stale", "/whsec", std("m8", stale, stdSig(whKey, "m8", stale, body)), "webhook-timestamp is stale"},
		{"future", "/raw", std("m9", future, stdSig([]byte(raw), "m9", future, body)), "webhook-timestamp is stale"},
		{"timestamp not a number", "/whsec", std("m10", "soon", stdSig(whKey, "m10", "soon", body)), "not a Unix time"},
		{"no webhook-id", "/whsec", []string{"webhook-timestamp", ts, "webhook-signature", stdSig(whKey, "", ts, body)}, "needs webhook-id"},
		{"no signature", "/whsec", []string{"webhook-id", "m11", "webhook-timestamp", ts}, "signature missing"},
		{"several, one right", "/whsec", std("m12", ts, "v1,Zm9v "+stdSig([]byte("x"), "m12", ts, body)+" "+stdSig(whKey, "m12", ts, body)), ""},
		{"several, raw, last right", "/raw", std("m13", ts, stdSig(whKey, "m13", ts, body)+" v1,!!! "+stdSig([]byte(raw), "m13", ts, body)), ""},
		{"several, none right", "/whsec", std("m14", ts, "v1,Zm9v "+stdSig([]byte("x"), "m14", ts, body)), "webhook-signature does not match"},
		{"v2 scheme ignored", "/whsec", std("m15", ts, "v2,"+strings.TrimPrefix(stdSig(whKey, "m15", ts, body), "v1,")), "webhook-signature does not match"},
		{"github right", "/gh", []string{"X-Hub-Signature-256", hubSig("s3cret", body)}, ""},
		{"github no sha256= prefix", "/gh", []string{"X-Hub-Signature-256", strings.TrimPrefix(hubSig("s3cret", body), "sha256=")}, "sha256=<hex>"},
		{"github not hex", "/gh", []string{"X-Agent-Signature", "sha256=zz"}, "webhook signature does not match"},
	} {
		before := len(so.requests())
		r := te.do("POST", "/v1/w/hooks"+tc.path, body, tc.headers...)
		if strings.Contains(string(r.body), "s3cret") || strings.Contains(string(r.body), raw) || strings.Contains(string(r.body), whsec) {
			t.Errorf("%s: a secret leaked into the answer: %s", tc.name, r.body)
		}
		if tc.want == "" {
			if r.status != 200 || r.json(t)["text"] != "echo: issue opened" || len(so.requests()) != before+1 {
				t.Errorf("%s: %d %s, want the agent to run", tc.name, r.status, r.body)
			}
			continue
		}
		if r.status != 403 || r.errCode(t) != codeExecDenied || !strings.Contains(r.errMessage(t), tc.want) || len(so.requests()) != before {
			t.Errorf("%s: %d %s, want 403 %s %q and no run", tc.name, r.status, r.body, codeExecDenied, tc.want)
		}
	}

	// Bodies no webhook may have: each a clear envelope, never a 500, and the agent never runs.
	bad := "\xff\xfe{\"text\":\"x\"}"
	big := strings.Repeat("x", maxBodyBytes+1)
	for _, tc := range []struct {
		name, path string
		body       any
		headers    []string
		status     int
		code, msg  string
	}{
		{"non-UTF-8, unsigned", "/open", bad, nil, 422, codeSpecInvalid, "not valid UTF-8"},
		{"non-UTF-8, signed right", "/whsec", bad, std("b1", ts, stdSig(whKey, "b1", ts, bad)), 422, codeSpecInvalid, "not valid UTF-8"},
		{"non-UTF-8, signed wrong", "/gh", bad, []string{"X-Hub-Signature-256", hubSig("other", bad)}, 403, codeExecDenied, "does not match"},
		{"oversize, unsigned", "/open", big, nil, 422, codeSpecInvalid, "exceeds the 32 MB cap"},
		{"oversize, signed", "/raw", big, std("b2", ts, stdSig([]byte(raw), "b2", ts, big)), 422, codeSpecInvalid, "exceeds the 32 MB cap"},
		{"oversize, chunked", "/open", struct{ io.Reader }{strings.NewReader(big)}, nil, 422, codeSpecInvalid, "exceeds the 32 MB cap"},
	} {
		before := len(so.requests())
		r := te.do("POST", "/v1/w/hooks"+tc.path, tc.body, tc.headers...)
		if r.status != tc.status || r.errCode(t) != tc.code || !strings.Contains(r.errMessage(t), tc.msg) || len(so.requests()) != before {
			t.Errorf("%s: %d %s, want %d %s %q", tc.name, r.status, clip(string(r.body), 300), tc.status, tc.code, tc.msg)
		}
	}
}

// ---- against the real server ----

// echoModel answers every request with "echo: <last user message>".
func echoModel(t testing.TB) *scriptedOpenAI {
	return newScriptedOpenAI(t, func(r scriptReq) scriptReply { return scriptReply{text: "echo: " + r.lastUser()} })
}

func noComputer(spec map[string]any) map[string]any {
	spec["computer"] = map[string]any{"enabled": false}
	spec["tools"] = []any{}
	return spec
}

func TestHTTPTrigger(t *testing.T) {
	te := newE2E(t, echoModel(t), "")
	te.createAgent(noComputer(map[string]any{"name": "helper", "triggers": []any{
		map[string]any{"type": "http"}, map[string]any{"type": "http", "path": "/deep/er"}}}))

	for _, path := range []string{"/v1/t/helper?input=hello", "/v1/t/helper/?input=hello"} {
		if out := te.call("GET", path, nil, 200, nil).json(t); out["text"] != "echo: hello" || out["stopReason"] != "complete" || !strings.HasPrefix(fmt.Sprint(out["runId"]), "run_") || out["usage"] == nil {
			t.Fatalf("GET %s: %v", path, out)
		}
	}
	if out := te.call("PUT", "/v1/t/helper/deep/er", `{"message":"from json"}`, 200, nil).json(t); out["text"] != "echo: from json" {
		t.Fatalf("PUT deep: %v", out)
	}
	// The run is an ordinary recorded run that names its trigger.
	list := te.do("GET", "/v1/runs?agent=helper", nil).json(t)
	if runs := list["runs"].([]any); len(runs) != 3 || runs[0].(map[string]any)["trigger"] != "http:/deep/er" ||
		runs[2].(map[string]any)["trigger"] != "http:/" {
		t.Fatalf("runs %v", list)
	}
	// Streamed: by Accept or ?stream=true.
	for _, hdr := range [][]string{{"Accept", "text/event-stream"}, {}} {
		path := "/v1/t/helper?input=streamed"
		if len(hdr) == 0 {
			path += "&stream=true"
		}
		if evs := te.sse("POST", path, nil, hdr...).all(); len(evs) < 3 || evs[0]["type"] != "run_start" || evs[len(evs)-1]["type"] != "run_end" {
			t.Fatalf("stream %v: %+v", hdr, evs)
		}
	}
	// Errors: unknown path, unknown agent, no prompt, a body that is not UTF-8.
	for _, tc := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"GET", "/v1/t/helper/nope?input=x", "", 404, codeAgentNotFound},
		{"GET", "/v1/t/helper/deep?input=x", "", 404, codeAgentNotFound}, // no prefix match
		{"GET", "/v1/t/nobody?input=x", "", 404, codeAgentNotFound},
		{"POST", "/v1/t/helper", "", 422, codeSpecInvalid},
		{"POST", "/v1/t/helper", "\xff\xfe", 422, codeSpecInvalid},
		{"POST", "/v1/t/helper", strings.Repeat("x", maxBodyBytes+1), 422, codeSpecInvalid},
	} {
		if r := te.do(tc.method, tc.path, tc.body); r.status != tc.status || r.errCode(t) != tc.code {
			t.Errorf("%s %s: %d %s", tc.method, tc.path, r.status, r.body)
		}
	}
}

func TestWebhookTrigger(t *testing.T) {
	gate := make(chan struct{})
	var calls sync.WaitGroup
	var mu sync.Mutex
	n := 0
	so := newScriptedOpenAI(t, func(r scriptReq) scriptReply {
		mu.Lock()
		n++
		mu.Unlock()
		if strings.Contains(r.lastUser(), "slow") {
			calls.Done()
			<-gate
		}
		return scriptReply{text: "handled: " + r.lastUser()}
	})
	modelCalls := func() int { mu.Lock(); defer mu.Unlock(); return n }
	te := newE2E(t, so, "")
	te.createAgent(noComputer(map[string]any{"name": "triage", "triggers": []any{
		map[string]any{"type": "webhook", "path": "/open"},
		map[string]any{"type": "webhook", "path": "/github", "secret": "s3cret"}}}))

	// Unsigned.
	if out := te.call("POST", "/v1/w/triage/open", `{"text":"issue 1"}`, 200, nil).json(t); out["text"] != "handled: issue 1" {
		t.Fatalf("unsigned: %v", out)
	}
	// Signed: missing, wrong and right signatures on the raw body.
	body := `{"action":"opened","issue":{"title":"crash"}}`
	for _, tc := range []struct {
		headers []string
		status  int
		msg     string
	}{
		{nil, 403, "signature missing"},
		{[]string{"X-Hub-Signature-256", hubSig("wrong", body)}, 403, "does not match"},
		{[]string{"X-Agent-Signature", hubSig("wrong", body)}, 403, "does not match"},
		{[]string{"X-Hub-Signature-256", hubSig("s3cret", body)}, 200, ""},
		{[]string{"X-Agent-Signature", hubSig("s3cret", body)}, 403, "a replay"}, // the same body again
	} {
		r := te.do("POST", "/v1/w/triage/github", body, tc.headers...)
		if r.status != tc.status || !strings.Contains(string(r.body), tc.msg) || (r.status == 403 && r.errCode(t) != codeExecDenied) {
			t.Fatalf("signed %v: %d %s", tc.headers, r.status, r.body)
		}
		if r.status == 200 && r.json(t)["text"] != "handled: "+body {
			t.Fatalf("signed answer %s", r.body)
		}
		if strings.Contains(string(r.body), "s3cret") {
			t.Fatal("the secret leaked into an answer")
		}
	}
	// A GET is not a webhook, and a wrong method never runs the agent.
	before := modelCalls()
	if r := te.do("GET", "/v1/w/triage/open?input=x", nil); r.status != 404 || r.errCode(t) != codeRouteNotFound || modelCalls() != before {
		t.Fatalf("GET webhook: %d %s", r.status, r.body)
	}
	// A retried delivery is answered from the first one: same run, one model call.
	body = `{"action":"opened","issue":{"title":"crash again"}}`
	sig := hubSig("s3cret", body)
	first := te.do("POST", "/v1/w/triage/github", body, "X-Hub-Signature-256", sig, "X-GitHub-Delivery", "d-1").json(t)
	calls0 := modelCalls()
	again := te.do("POST", "/v1/w/triage/github", body, "X-Hub-Signature-256", sig, "X-GitHub-Delivery", "d-1")
	if again.status != 200 || again.json(t)["runId"] != first["runId"] || modelCalls() != calls0 || again.header.Get("X-Agent-Replayed") != "true" {
		t.Fatalf("replay: %d %s vs %v (model calls %d → %d)", again.status, again.body, first, calls0, modelCalls())
	}
	// A refused delivery (bad signature) does not block the valid one with the same id.
	body = `{"action":"closed","issue":{"title":"crash again"}}`
	sig = hubSig("s3cret", body)
	te.do("POST", "/v1/w/triage/github", body, "X-Hub-Signature-256", hubSig("x", body), "X-GitHub-Delivery", "d-2")
	if r := te.do("POST", "/v1/w/triage/github", body, "X-Hub-Signature-256", sig, "X-GitHub-Delivery", "d-2"); r.status != 200 || r.json(t)["runId"] == first["runId"] {
		t.Fatalf("after a refused delivery: %d %s", r.status, r.body)
	}
	// A retry that arrives while the first delivery's run is still going waits for it: one model call.
	slow := `{"text":"slow one"}`
	calls.Add(1)
	answers := make(chan response, 2)
	go func() { answers <- te.do("POST", "/v1/w/triage/open", slow, "webhook-id", "msg-slow") }()
	calls.Wait() // the first delivery's run is at the model
	before = modelCalls()
	go func() { answers <- te.do("POST", "/v1/w/triage/open", slow, "webhook-id", "msg-slow") }()
	eventually(t, "the retry to wait for the first delivery", func() bool {
		b := te.s.triggers.deliveries
		b.mu.Lock()
		defer b.mu.Unlock()
		d := b.entries["triage/open\x00msg-slow"]
		return d != nil && d.v.retries.Load() == 1
	})
	close(gate)
	a1, a2 := (<-answers).json(t), (<-answers).json(t)
	if a1["runId"] == nil || a1["runId"] != a2["runId"] || a1["text"] != "handled: slow one" || modelCalls() != before {
		t.Fatalf("concurrent retry: %v / %v, model calls %d → %d", a1, a2, before, modelCalls())
	}
}

// TestSignedWebhookPromptAndReplay (issue 25 item 1): on a signed webhook nothing outside what the
// signature covers changes what the agent is asked (?input, ?text, ?q are refused, whatever the scheme),
// and under the GitHub scheme, which has no timestamp, a captured delivery cannot be replayed: a
// repeated body is refused without or with another X-GitHub-Delivery, and only the first one's id (a
// sender's retry) is answered, from the first run.
func TestSignedWebhookPromptAndReplay(t *testing.T) {
	so := echoModel(t)
	te := newE2E(t, so, "")
	whKey := []byte("0123456789abcdef0123456789abcdef")
	te.createAgent(noComputer(map[string]any{"name": "hooks", "triggers": []any{
		map[string]any{"type": "webhook", "path": "/gh", "secret": "s3cret"},
		map[string]any{"type": "webhook", "path": "/std", "secret": "whsec_" + base64.StdEncoding.EncodeToString(whKey)},
		map[string]any{"type": "webhook", "path": "/open"}}}))
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	for i, k := range []string{"input", "text", "q"} {
		body := fmt.Sprintf(`{"action":"opened","n":%d}`, i)
		for _, hdr := range [][]string{{"X-Hub-Signature-256", hubSig("s3cret", body)}, {"X-Agent-Signature", hubSig("s3cret", body)}} {
			before := len(so.requests())
			r := te.do("POST", "/v1/w/hooks/gh?"+k+"=INJECTED", body, hdr...)
			if r.status != 403 || r.errCode(t) != codeExecDenied || !strings.Contains(r.errMessage(t), "not signed") || len(so.requests()) != before {
				t.Fatalf("?%s= on a signed webhook (%s): %d %s", k, hdr[0], r.status, r.body)
			}
		}
		id := fmt.Sprintf("q%d", i)
		r := te.do("POST", "/v1/w/hooks/std?"+k+"=INJECTED", body, "webhook-id", id, "webhook-timestamp", ts, "webhook-signature", stdSig(whKey, id, ts, body))
		if r.status != 403 || r.errCode(t) != codeExecDenied {
			t.Fatalf("?%s= on a Standard Webhooks trigger: %d %s", k, r.status, r.body)
		}
		// Unsigned, the query string still names the prompt (the http trigger's order).
		if out := te.call("POST", "/v1/w/hooks/open?"+k+"=hello", body, 200, nil).json(t); out["text"] != "echo: hello" {
			t.Fatalf("?%s= on an unsigned webhook: %v", k, out)
		}
	}

	body := `{"action":"opened","text":"issue opened"}`
	sig := hubSig("s3cret", body)
	first := te.do("POST", "/v1/w/hooks/gh", body, "X-Hub-Signature-256", sig).json(t)
	if first["text"] != "echo: issue opened" {
		t.Fatalf("first delivery: %v", first)
	}
	runs := len(so.requests())
	for _, hdr := range [][]string{{"X-Hub-Signature-256", sig}, {"X-Agent-Signature", sig},
		{"X-Hub-Signature-256", sig, "X-GitHub-Delivery", "another-id"}} {
		r := te.do("POST", "/v1/w/hooks/gh", body, hdr...)
		if r.status != 403 || r.errCode(t) != codeExecDenied || !strings.Contains(r.errMessage(t), "replay") || len(so.requests()) != runs {
			t.Fatalf("a replayed body %v: %d %s", hdr, r.status, r.body)
		}
	}
	// With a delivery id: its retry is answered from the first run; the same body under another id is not.
	body2 := `{"action":"opened","text":"issue two"}`
	sig2 := hubSig("s3cret", body2)
	one := te.do("POST", "/v1/w/hooks/gh", body2, "X-Hub-Signature-256", sig2, "X-GitHub-Delivery", "d-1").json(t)
	runs = len(so.requests())
	retry := te.do("POST", "/v1/w/hooks/gh", body2, "X-Hub-Signature-256", sig2, "X-GitHub-Delivery", "d-1")
	if retry.status != 200 || retry.json(t)["runId"] != one["runId"] || retry.header.Get("X-Agent-Replayed") != "true" || len(so.requests()) != runs {
		t.Fatalf("a retry of d-1: %d %s", retry.status, retry.body)
	}
	if r := te.do("POST", "/v1/w/hooks/gh", body2, "X-Hub-Signature-256", sig2, "X-GitHub-Delivery", "d-2"); r.status != 403 || len(so.requests()) != runs {
		t.Fatalf("d-1's body as d-2: %d %s", r.status, r.body)
	}
	if r := te.do("POST", "/v1/w/hooks/gh", body2, "X-Hub-Signature-256", sig2, "X-GitHub-Delivery", "body:"+fmt.Sprintf("%x", sha256.Sum256([]byte(body2)))); r.status != 403 {
		t.Fatalf("a delivery id spelled as the body's key: %d %s", r.status, r.body)
	}
	// Past the window the body is new again (the README says so).
	b := te.s.triggers.deliveries
	b.mu.Lock()
	b.now = func() time.Time { return time.Now().Add(deliveryTTL + time.Minute) }
	b.mu.Unlock()
	if r := te.do("POST", "/v1/w/hooks/gh", body, "X-Hub-Signature-256", sig); r.status != 200 {
		t.Fatalf("the body after the window: %d %s", r.status, r.body)
	}
}

func TestTriggerListingFollowsAgents(t *testing.T) {
	te := newE2E(t, echoModel(t), "")
	listing := func() ([]any, []any) {
		out := te.do("GET", "/v1/triggers", nil).json(t)
		return out["triggers"].([]any), out["cron"].([]any)
	}
	if tr, cr := listing(); len(tr) != 0 || len(cr) != 0 {
		t.Fatalf("empty: %v %v", tr, cr)
	}
	spec := noComputer(map[string]any{"name": "ops", "triggers": []any{
		map[string]any{"type": "http", "path": "/ask"},
		map[string]any{"type": "webhook", "path": "/hook", "secret": "topsecret"},
		map[string]any{"type": "webhook", "path": "/open"},
		map[string]any{"type": "cron", "schedule": "CRON_TZ=UTC */5 * * * *", "prompt": "report"},
		map[string]any{"type": "discord"}, map[string]any{"type": "cli"}}})
	before := time.Now() // the job's next firing is after this, and at most 5 minutes after the listing
	te.createAgent(spec)
	tr, cr := listing()
	listed := time.Now()
	b, _ := json.Marshal(map[string]any{"t": tr, "c": cr})
	if len(tr) != 3 || strings.Contains(string(b), "topsecret") || strings.Contains(string(b), "discord") {
		t.Fatalf("mounted: %s", b)
	}
	want := map[string]string{"/v1/t/ops/ask": "http", "/v1/w/ops/hook": "hmac-sha256 required", "/v1/w/ops/open": "UNSIGNED: set secret on the trigger"}
	for _, x := range tr {
		m := x.(map[string]any)
		if m["agent"] != "ops" || !strings.Contains(m["type"].(string)+" "+m["detail"].(string), want[m["at"].(string)]) {
			t.Fatalf("trigger %v", m)
		}
	}
	c := cr[0].(map[string]any)
	next, err := time.Parse(time.RFC3339, c["nextAt"].(string))
	if len(cr) != 1 || c["schedule"] != "CRON_TZ=UTC */5 * * * *" || c["prompt"] != "report" || c["agent"] != "ops" ||
		!strings.HasPrefix(c["jobId"].(string), "cron_") || err != nil || !next.After(before) || next.After(listed.Add(5*time.Minute)) || next.Minute()%5 != 0 ||
		!strings.HasSuffix(c["nextAt"].(string), "Z") {
		t.Fatalf("cron %v", c)
	}
	// Update: the triggers change without a restart.
	spec["triggers"] = []any{map[string]any{"type": "http", "path": "/other"}}
	te.call("PUT", "/v1/agents/ops", map[string]any{"spec": spec}, 200, nil)
	if tr, cr := listing(); len(tr) != 1 || tr[0].(map[string]any)["at"] != "/v1/t/ops/other" || len(cr) != 0 {
		t.Fatalf("after update: %v %v", tr, cr)
	}
	te.call("POST", "/v1/w/ops/open", "x", 404, nil)
	te.do("DELETE", "/v1/agents/ops", nil)
	if tr, cr := listing(); len(tr) != 0 || len(cr) != 0 {
		t.Fatalf("after delete: %v %v", tr, cr)
	}
}

func TestTriggerSpecValidation(t *testing.T) {
	te := newE2E(t, echoModel(t), "")
	for spec, want := range map[string]string{
		"name: a\ntriggers:\n  - type: cron\n    schedule: '61 * * * *'\n    prompt: p\n":        `triggers.0.schedule: minute field "61"`,
		"name: a\ntriggers:\n  - type: cron\n    schedule: '* * *'\n    prompt: p\n":             "triggers.0.schedule: expected 5 fields",
		"name: a\ntriggers:\n  - type: pager\n":                                                  "triggers.0.type: Invalid discriminator value",
		"name: a\ntriggers:\n  - type: webhook\n    path: hook\n":                                "triggers.0.path: must start with /",
		"name: a\ntriggers:\n  - type: http\n  - type: http\n    path: /\n":                      "triggers.1.path: http trigger path / is already used by triggers.0",
		"name: a\ntriggers:\n  - type: webhook\n    path: /x\n  - type: webhook\n    path: /x\n": "triggers.1.path",
	} {
		out := te.do("POST", "/v1/agents/validate", map[string]any{"yaml": spec}).json(t)
		if out["ok"] != false || !strings.Contains(fmt.Sprint(out["issues"]), want) {
			t.Errorf("%q: %v, want %q", spec, out, want)
		}
	}
}

// A cron trigger fires a real run through the server's own scheduler: once the job is scheduled, the
// server's clock is set a little before its first firing (a minute boundary), so it comes within about a
// second. (Set before the setup, the clock could pass the boundary while the server starts and the agent
// is created on a loaded host: the job, scheduled from then, would fire a minute later.)
func TestCronTriggerFiresARun(t *testing.T) {
	var offset atomic.Int64 // the server's clock is time.Now()+offset
	te := newE2E(t, echoModel(t), "", withClock(func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }),
		func(c *testSetup) { c.ComputerProvider = "local" })
	s := te.s
	sub, _ := s.hub.subscribe()
	defer s.hub.unsubscribe(sub)
	te.createAgent(noComputer(map[string]any{"name": "reporter", "triggers": []any{
		map[string]any{"type": "cron", "schedule": "* * * * *", "prompt": "daily report"}}}))
	first := s.triggers.cron.earliest()
	if first.IsZero() {
		t.Fatal("the cron job is not scheduled")
	}
	offset.Store(int64(max(first.Add(-700*time.Millisecond).Sub(time.Now()), 0)))
	select { // the scheduler's timer was set by the old clock: it sets it again on a wake
	case s.triggers.cron.wake <- struct{}{}:
	default:
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-sub.ch:
			if ev.Type != "cron_fired" {
				continue
			}
			p := ev.Payload.(map[string]any)
			runID := p["runId"].(string)
			eventually(t, "the cron run to end", func() bool {
				out := te.do("GET", "/v1/runs/"+runID, nil).json(t)
				return out["result"].(map[string]any)["stopReason"] == "complete"
			})
			out := te.do("GET", "/v1/runs/"+runID, nil).json(t)
			if r := out["result"].(map[string]any); r["text"] != "echo: daily report" {
				t.Fatalf("cron run %v", r)
			}
			list := te.do("GET", "/v1/runs?agent=reporter", nil).json(t)
			if sum := list["runs"].([]any)[0].(map[string]any); sum["trigger"] != "cron:"+p["jobId"].(string) {
				t.Fatalf("summary %v", sum)
			}
			return
		case <-deadline:
			t.Fatal("the cron trigger did not fire")
		}
	}
}

// ---- following and detaching runs ----

// sseEvent is a data frame with its id.
type sseEvent struct {
	id   int
	data map[string]any
}

// events reads a stream's data frames until `event: done` or its end; with stopAt, it stops after the
// first event that satisfies it.
func events(s *sseStream, stopAt func(sseEvent) bool) []sseEvent {
	var out []sseEvent
	for f, ok := s.frame(); ok && f.event != "done"; f, ok = s.frame() {
		ev := sseEvent{id: f.id}
		if json.Unmarshal([]byte(f.data), &ev.data) == nil && ev.data != nil {
			out = append(out, ev)
			if stopAt != nil && stopAt(ev) {
				break
			}
		}
	}
	return out
}

func TestFollowAndDetachedRun(t *testing.T) {
	gate := make(chan struct{})
	so := newScriptedOpenAI(t, func(r scriptReq) scriptReply {
		switch len(r.toolResults()) {
		case 0:
			return scriptReply{text: "first step", calls: []ToolCall{tc("c1", "no_such_tool", map[string]any{"a": 1})}}
		case 1:
			<-gate // the run waits here until the test lets it go on
			return scriptReply{text: "second step", calls: []ToolCall{tc("c2", "no_such_tool", map[string]any{"a": 2})}}
		}
		return scriptReply{text: "all done"}
	})
	te := newE2E(t, so, "")
	te.createAgent(noComputer(map[string]any{"name": "long"}))

	// Detached: 202 with the id at once, while the run is still going.
	r := te.do("POST", "/v1/agents/long/run?detach=true", `{"input":"go"}`)
	var started map[string]string
	r.decode(t, &started)
	runID := started["runId"]
	if r.status != 202 || !strings.HasPrefix(runID, "run_") || r.header.Get("Location") != "/v1/runs/"+runID {
		t.Fatalf("detach: %d %v %s", r.status, started, r.header.Get("Location"))
	}

	// A follower reads until the first tool_end, then disconnects.
	follow := te.sse("GET", "/v1/runs/"+runID+"/events", nil)
	seen := events(follow, func(ev sseEvent) bool { return ev.data["type"] == "tool_end" })
	follow.close()
	if len(seen) == 0 || seen[len(seen)-1].data["type"] != "tool_end" {
		t.Fatalf("follow: %v", seen)
	}
	lastID := seen[len(seen)-1].id

	// The disconnect did not touch the run.
	out := te.do("GET", "/v1/runs/"+runID, nil).json(t)
	if out["result"].(map[string]any)["status"] != "running" {
		t.Fatalf("the run stopped with its follower: %v", out["result"])
	}

	// Reconnect with the last id; let the run go on; read to the end.
	follow = te.sse("GET", "/v1/runs/"+runID+"/events", nil, "Last-Event-ID", strconv.Itoa(lastID))
	close(gate)
	all := append(seen, events(follow, nil)...)

	// Every event exactly once, ids strictly increasing, the same as the stored run.
	out = te.do("GET", "/v1/runs/"+runID, nil).json(t)
	stored := out["events"].([]any)
	if len(all) != len(stored) {
		t.Fatalf("followed %d events, the run has %d", len(all), len(stored))
	}
	for i, ev := range all {
		if ev.id != i+1 || ev.data["type"] != stored[i].(map[string]any)["type"] {
			t.Fatalf("event %d: id %d type %v, stored %v", i, ev.id, ev.data["type"], stored[i])
		}
	}
	if all[len(all)-1].data["type"] != "run_end" || out["result"].(map[string]any)["stopReason"] != "complete" {
		t.Fatalf("end: %v / %v", all[len(all)-1], out["result"])
	}
	// The detached run is listed with its result.
	list := te.do("GET", "/v1/runs?agent=long", nil).json(t)
	if sum := list["runs"].([]any)[0].(map[string]any); sum["runId"] != runID || sum["status"] != "complete" || sum["preview"] != "all done" {
		t.Fatalf("listed %v", sum)
	}
	// A finished run replays everything, or what is after ?after=N; unknown runs are 404; bad ids 422.
	if evs := events(te.sse("GET", "/v1/runs/"+runID+"/events?after=3", nil), nil); len(evs) != len(stored)-3 || evs[0].id != 4 {
		t.Fatalf("after=3: %d events from %v", len(evs), evs[0].id)
	}
	te.wantError("GET", "/v1/runs/run_nope/events", nil, 404, codeRunNotFound)
	if r := te.do("GET", "/v1/runs/"+runID+"/events", nil, "Last-Event-ID", "x"); r.status != 422 || r.errCode(t) != codeSpecInvalid {
		t.Fatalf("bad id: %d %s", r.status, r.body)
	}
	// The original stream's ids are the same sequence numbers.
	for i, ev := range events(te.stream("long", map[string]any{"input": "again"}), nil) {
		if ev.id != i+1 {
			t.Fatalf("run stream ids: %d at %d", ev.id, i)
		}
	}
}

// FuzzWebhookSignature drives the signature paths of a signed webhook with arbitrary secrets, bodies,
// headers and query strings. Never a panic; a refusal is always 403 E_EXEC_DENIED, and what it says does
// not depend on the secret; nothing is accepted that is not a true HMAC of the body (GitHub style) or of
// id.timestamp.body within 5 minutes (Standard Webhooks); a request signed right is accepted; and the
// query parameters that would replace the signed prompt are refused exactly when present.
func FuzzWebhookSignature(f *testing.F) {
	body := `{"action":"opened"}`
	key := []byte("0123456789abcdef0123456789abcdef")
	whsec := "whsec_" + base64.StdEncoding.EncodeToString(key)
	f.Add("s3cret", []byte(body), hubSig("s3cret", body), "", "", "", "", "input=INJECTED")
	f.Add("s3cret", []byte(body), "", hubSig("s3cret", body), "", "", "", "q=x&text=y")
	f.Add("s3cret", []byte(body), "sha256=zz", hubSig("s3cret", body), "", "", "", "")
	f.Add(whsec, []byte(body), "", "", "m1", "0", stdSig(key, "m1", "0", body), "stream=true")
	f.Add(whsec, []byte(body), "", "", "m1", "0", "v1,Zm9v "+stdSig(key, "m1", "0", body), "%zz&input")
	f.Add("raw", []byte("\xff"), "", "", "m2", "-1", "v1,!!! v2,x", "")
	now := time.Unix(0, 0).Add(time.Minute)
	f.Fuzz(func(t *testing.T, secret string, body []byte, hub, agentSig, id, ts, std, query string) {
		h := http.Header{}
		for k, v := range map[string]string{"X-Hub-Signature-256": hub, "X-Agent-Signature": agentSig,
			"webhook-id": id, "webhook-timestamp": ts, "webhook-signature": std} {
			if v != "" && !strings.ContainsAny(v, "\r\n") {
				h.Set(k, v)
			}
		}
		err := verifyWebhook(secret, h, body, now)
		if err != nil {
			ae := asAPIError(err)
			if ae == nil || ae.Code != codeExecDenied {
				t.Fatalf("refusal %v", err)
			}
			// What a refusal says does not depend on the secret (nothing of it is echoed).
			if other := verifyWebhook("\x00"+secret, h, body, now); other != nil && (other.Error() != err.Error() || asAPIError(other).Hint != ae.Hint) {
				t.Fatalf("the refusal depends on the secret: %v / %v", err, other)
			}
		} else {
			if !webhookTrulySigned(secret, h, body, now) {
				t.Fatalf("accepted without a true signature: %v", h)
			}
		}
		// Signed right, it is accepted (the GitHub scheme, and Standard Webhooks at the present time).
		right := http.Header{"X-Hub-Signature-256": {hubSig(secret, string(body))}}
		if err := verifyWebhook(secret, right, body, now); err != nil {
			t.Fatalf("a right GitHub signature refused: %v", err)
		}
		if id != "" && !strings.ContainsAny(id, "\r\n") {
			right = http.Header{"Webhook-Id": {id}, "Webhook-Timestamp": {strconv.FormatInt(now.Unix(), 10)}}
			right.Set("webhook-signature", stdSig(webhookKey(secret), right.Get("webhook-id"), right.Get("webhook-timestamp"), string(body)))
			if err := verifyWebhook(secret, right, body, now); err != nil {
				t.Fatalf("a right Standard Webhooks signature refused: %v", err)
			}
		}
		r := &http.Request{URL: &url.URL{RawQuery: query}}
		q := r.URL.Query()
		if want := q.Has("input") || q.Has("text") || q.Has("q"); (signedPromptOnly(r) != nil) != want {
			t.Fatalf("?%s: refused %v, want %v", query, signedPromptOnly(r), want)
		}
	})
}

// webhookKey is the Standard Webhooks key of a secret, as the README says: whsec_<base64> decoded.
func webhookKey(secret string) []byte {
	if b64, ok := strings.CutPrefix(secret, "whsec_"); ok {
		if k, err := base64.StdEncoding.DecodeString(b64); err == nil {
			return k
		}
	}
	return []byte(secret)
}

// webhookTrulySigned is the oracle: a GitHub-style header equal to the body's HMAC, or (with neither
// GitHub header) a v1 signature equal to the HMAC of id.timestamp.body with the timestamp within 5 minutes.
func webhookTrulySigned(secret string, h http.Header, body []byte, now time.Time) bool {
	if hexSigned(h) {
		want := hubSig(secret, string(body))
		for _, s := range []string{h.Get("X-Hub-Signature-256"), h.Get("X-Agent-Signature")} {
			if strings.EqualFold(strings.TrimSpace(s), want) {
				return true
			}
		}
		return false
	}
	id, ts := h.Get("webhook-id"), h.Get("webhook-timestamp")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || id == "" || now.Sub(time.Unix(sec, 0)).Abs() > webhookTolerance {
		return false
	}
	want := stdSig(webhookKey(secret), id, ts, string(body))
	return slices.Contains(strings.Fields(h.Get("webhook-signature")), want)
}
