package main

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestTriggerPrompt(t *testing.T) {
	for _, tc := range []struct{ url, body, want, err string }{
		{"/x?input=from+query", `{"input":"from body"}`, "from query", ""},
		{"/x?text=t", "", "t", ""},
		{"/x?q=search", "", "search", ""},
		{"/x?input=+", "plain words", "plain words", ""}, // a blank query value does not count
		{"/x", "plain text body", "plain text body", ""},
		{"/x", `{"input":"i","text":"t"}`, "i", ""},
		{"/x", `{"text":"t","message":"m"}`, "t", ""},
		{"/x", `{"message":"m"}`, "m", ""},
		{"/x", `{"prompt":"p"}`, "p", ""},
		{"/x", `{"content":"c"}`, "c", ""},
		{"/x", `{"query":"q"}`, "q", ""},
		{"/x", `{"input":42,"prompt":"p"}`, "p", ""},                                   // a non-string key is skipped
		{"/x", `{"action":"opened","number":7}`, `{"action":"opened","number":7}`, ""}, // the JSON body itself
		{"/x", `"a JSON string"`, "a JSON string", ""},
		{"/x", `[1,2]`, `[1,2]`, ""},
		{"/x", "", "", "no prompt found in the request"},
		{"/x", "   \n", "", "no prompt found in the request"},
		{"/x", "\xff\xfe bad", "", "not valid UTF-8"},
	} {
		r := httptest.NewRequest("POST", tc.url, nil)
		got, err := triggerPrompt(r, []byte(tc.body))
		if tc.err != "" {
			if err == nil || asAPIError(err).Code != codeSpecInvalid || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s %q: %v, want %q", tc.url, tc.body, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s %q: %q %v, want %q", tc.url, tc.body, got, err, tc.want)
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

func TestVerifyWebhook(t *testing.T) {
	now := time.Unix(1795000000, 0)
	ts := strconv.FormatInt(now.Unix(), 10)
	body := `{"action":"opened"}`
	raw := []byte("whsec-like-raw-secret")
	whKey := []byte("0123456789abcdef0123456789abcdef")
	whsec := "whsec_" + base64.StdEncoding.EncodeToString(whKey)
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	for _, tc := range []struct {
		name, secret string
		h            http.Header
		want         string // "" = accepted
	}{
		{"github right", "s3cret", h("X-Hub-Signature-256", hubSig("s3cret", body)), ""},
		{"agent header right", "s3cret", h("X-Agent-Signature", hubSig("s3cret", body)), ""},
		{"github wrong", "s3cret", h("X-Hub-Signature-256", hubSig("other", body)), "does not match"},
		{"agent header wrong", "s3cret", h("X-Agent-Signature", hubSig("other", body)), "does not match"},
		{"no sha256= prefix", "s3cret", h("X-Hub-Signature-256", strings.TrimPrefix(hubSig("s3cret", body), "sha256=")), "sha256=<hex>"},
		{"not hex", "s3cret", h("X-Hub-Signature-256", "sha256=zz"), "does not match"},
		{"missing", "s3cret", h(), "signature missing"},
		{"standard whsec right", whsec, h("webhook-id", "msg_1", "webhook-timestamp", ts, "webhook-signature", stdSig(whKey, "msg_1", ts, body)), ""},
		{"standard raw right", string(raw), h("webhook-id", "msg_1", "webhook-timestamp", ts, "webhook-signature", stdSig(raw, "msg_1", ts, body)), ""},
		{"standard whsec used raw is wrong", whsec, h("webhook-id", "msg_1", "webhook-timestamp", ts, "webhook-signature", stdSig([]byte(whsec), "msg_1", ts, body)), "does not match"},
		{"standard several, one right", whsec, h("webhook-id", "msg_1", "webhook-timestamp", ts, "webhook-signature",
			"v1,Zm9v "+stdSig([]byte("x"), "msg_1", ts, body)+" "+stdSig(whKey, "msg_1", ts, body)), ""},
		{"standard v2 ignored", whsec, h("webhook-id", "msg_1", "webhook-timestamp", ts, "webhook-signature", "v2,"+strings.TrimPrefix(stdSig(whKey, "msg_1", ts, body), "v1,")), "does not match"},
		{"standard wrong id", whsec, h("webhook-id", "msg_2", "webhook-timestamp", ts, "webhook-signature", stdSig(whKey, "msg_1", ts, body)), "does not match"},
		{"standard stale", whsec, h("webhook-id", "msg_1", "webhook-timestamp", strconv.FormatInt(now.Unix()-301, 10), "webhook-signature",
			stdSig(whKey, "msg_1", strconv.FormatInt(now.Unix()-301, 10), body)), "stale"},
		{"standard future", whsec, h("webhook-id", "msg_1", "webhook-timestamp", strconv.FormatInt(now.Unix()+301, 10), "webhook-signature",
			stdSig(whKey, "msg_1", strconv.FormatInt(now.Unix()+301, 10), body)), "stale"},
		{"standard no id", whsec, h("webhook-timestamp", ts, "webhook-signature", stdSig(whKey, "", ts, body)), "needs webhook-id"},
		{"standard bad timestamp", whsec, h("webhook-id", "msg_1", "webhook-timestamp", "soon", "webhook-signature", "v1,x"), "not a Unix time"},
	} {
		err := verifyWebhook(tc.secret, tc.h, []byte(body), now)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want != "" && (err == nil || asAPIError(err).Code != codeExecDenied || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want 403 %q", tc.name, err, tc.want)
		}
	}
}

// ---- against the real server ----

// trig sends a raw request to the test server.
func (te *runEnv) trig(method, path, body string, headers ...string) (int, http.Header, map[string]any) {
	te.t.Helper()
	req, _ := http.NewRequest(method, te.ts.URL+path, strings.NewReader(body))
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		te.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	json.Unmarshal(raw, &out)
	if out == nil {
		out = map[string]any{"raw": string(raw)}
	}
	return resp.StatusCode, resp.Header, out
}

func errCodeOf(m map[string]any) string {
	if e, ok := m["error"].(map[string]any); ok {
		code, _ := e["code"].(string)
		return code
	}
	return ""
}

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
		code, _, out := te.trig("GET", path, "")
		if code != 200 || out["text"] != "echo: hello" || out["stopReason"] != "complete" || !strings.HasPrefix(fmt.Sprint(out["runId"]), "run_") || out["usage"] == nil {
			t.Fatalf("GET %s: %d %v", path, code, out)
		}
	}
	code, _, out := te.trig("PUT", "/v1/t/helper/deep/er", `{"message":"from json"}`, "Content-Type", "application/json")
	if code != 200 || out["text"] != "echo: from json" {
		t.Fatalf("PUT deep: %d %v", code, out)
	}
	// The run is an ordinary recorded run that names its trigger.
	_, list := te.do("GET", "/v1/runs?agent=helper", nil)
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
		req, _ := http.NewRequest("POST", te.ts.URL+path, nil)
		if len(hdr) == 2 {
			req.Header.Set(hdr[0], hdr[1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		evs := readSSE(t, resp.Body)
		resp.Body.Close()
		if resp.Header.Get("Content-Type") != "text/event-stream" || len(evs) < 3 || evs[0].data["type"] != "run_start" ||
			evs[len(evs)-1].data["type"] != "run_end" {
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
		code, _, out := te.trig(tc.method, tc.path, tc.body)
		if code != tc.status || errCodeOf(out) != tc.code {
			t.Errorf("%s %s: %d %v", tc.method, tc.path, code, out)
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
	code, _, out := te.trig("POST", "/v1/w/triage/open", `{"text":"issue 1"}`)
	if code != 200 || out["text"] != "handled: issue 1" {
		t.Fatalf("unsigned: %d %v", code, out)
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
		{[]string{"X-Agent-Signature", hubSig("s3cret", body)}, 200, ""},
	} {
		code, _, out := te.trig("POST", "/v1/w/triage/github", body, tc.headers...)
		if code != tc.status || (tc.msg != "" && !strings.Contains(fmt.Sprint(out), tc.msg)) || (code == 403 && errCodeOf(out) != codeExecDenied) {
			t.Fatalf("signed %v: %d %v", tc.headers, code, out)
		}
		if code == 200 && out["text"] != "handled: "+body {
			t.Fatalf("signed answer %v", out)
		}
	}
	if strings.Contains(fmt.Sprint(out), "s3cret") {
		t.Fatal("the secret leaked into an answer")
	}
	// A GET is not a webhook, and a wrong method never runs the agent.
	before := modelCalls()
	if code, _, out := te.trig("GET", "/v1/w/triage/open?input=x", ""); code != 404 || errCodeOf(out) != codeRouteNotFound || modelCalls() != before {
		t.Fatalf("GET webhook: %d %v", code, out)
	}
	// A retried delivery is answered from the first one: same run, one model call.
	sig := hubSig("s3cret", body)
	_, _, first := te.trig("POST", "/v1/w/triage/github", body, "X-Hub-Signature-256", sig, "X-GitHub-Delivery", "d-1")
	calls0 := modelCalls()
	code, hdr, again := te.trig("POST", "/v1/w/triage/github", body, "X-Hub-Signature-256", sig, "X-GitHub-Delivery", "d-1")
	if code != 200 || again["runId"] != first["runId"] || modelCalls() != calls0 || hdr.Get("X-Agent-Replayed") != "true" {
		t.Fatalf("replay: %d %v vs %v (model calls %d → %d)", code, again, first, calls0, modelCalls())
	}
	// A refused delivery (bad signature) does not block the valid one with the same id.
	te.trig("POST", "/v1/w/triage/github", body, "X-Hub-Signature-256", hubSig("x", body), "X-GitHub-Delivery", "d-2")
	if code, _, out := te.trig("POST", "/v1/w/triage/github", body, "X-Hub-Signature-256", sig, "X-GitHub-Delivery", "d-2"); code != 200 || out["runId"] == first["runId"] {
		t.Fatalf("after a refused delivery: %d %v", code, out)
	}
	// A retry that arrives while the first delivery's run is still going waits for it: one model call.
	slow := `{"text":"slow one"}`
	calls.Add(1)
	answers := make(chan map[string]any, 2)
	go func() { _, _, a := te.trig("POST", "/v1/w/triage/open", slow, "webhook-id", "msg-slow"); answers <- a }()
	calls.Wait() // the first delivery's run is at the model
	before = modelCalls()
	go func() { _, _, a := te.trig("POST", "/v1/w/triage/open", slow, "webhook-id", "msg-slow"); answers <- a }()
	pollUntil(t, "the retry to wait for the first delivery", func() bool {
		b := te.s.triggers.deliveries
		b.mu.Lock()
		defer b.mu.Unlock()
		d := b.byID["triage/open\x00msg-slow"]
		return d != nil && d.retries.Load() == 1
	})
	close(gate)
	a1, a2 := <-answers, <-answers
	if a1["runId"] == nil || a1["runId"] != a2["runId"] || a1["text"] != "handled: slow one" || modelCalls() != before {
		t.Fatalf("concurrent retry: %v / %v, model calls %d → %d", a1, a2, before, modelCalls())
	}
}

func TestTriggerListingFollowsAgents(t *testing.T) {
	te := newE2E(t, echoModel(t), "")
	listing := func() ([]any, []any) {
		_, out := te.do("GET", "/v1/triggers", nil)
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
	te.createAgent(spec)
	tr, cr := listing()
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
		!strings.HasPrefix(c["jobId"].(string), "cron_") || err != nil || !next.After(time.Now()) || next.Minute()%5 != 0 ||
		!strings.HasSuffix(c["nextAt"].(string), "Z") {
		t.Fatalf("cron %v", c)
	}
	// Update: the triggers change without a restart.
	spec["triggers"] = []any{map[string]any{"type": "http", "path": "/other"}}
	if code, out := te.do("PUT", "/v1/agents/ops", map[string]any{"spec": spec}); code != 200 {
		t.Fatalf("put %d %v", code, out)
	}
	if tr, cr := listing(); len(tr) != 1 || tr[0].(map[string]any)["at"] != "/v1/t/ops/other" || len(cr) != 0 {
		t.Fatalf("after update: %v %v", tr, cr)
	}
	if code, _, _ := te.trig("POST", "/v1/w/ops/open", "x"); code != 404 {
		t.Fatalf("a removed webhook still answers: %d", code)
	}
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
		_, out := te.do("POST", "/v1/agents/validate", map[string]any{"yaml": spec})
		if out["ok"] != false || !strings.Contains(fmt.Sprint(out["issues"]), want) {
			t.Errorf("%q: %v, want %q", spec, out, want)
		}
	}
}

// A cron trigger fires a real run through the server's own scheduler: the server's clock is set a
// little before a minute boundary, so the first firing comes within about a second.
func TestCronTriggerFiresARun(t *testing.T) {
	so := echoModel(t)
	home := t.TempDir()
	real := time.Now()
	offset := real.Truncate(time.Minute).Add(time.Minute - 700*time.Millisecond).Sub(real)
	env := map[string]string{"OPENAI_API_KEY": e2eKey, "OPENAI_BASE_URL": so.URL, "HOME": home}
	cfg := defaultConfig()
	cfg.Home, cfg.getenv, cfg.ComputerProvider = home, func(k string) string { return env[k] }, "local"
	s, err := newServer(cfg, testLogger(), func() time.Time { return time.Now().Add(offset) })
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(func() { s.cancelStream(); ts.Close(); s.Close(context.Background()) })
	te := &runEnv{t: t, s: s, ts: ts, home: home}
	sub, _ := s.hub.subscribe()
	defer s.hub.unsubscribe(sub)
	te.createAgent(noComputer(map[string]any{"name": "reporter", "triggers": []any{
		map[string]any{"type": "cron", "schedule": "* * * * *", "prompt": "daily report"}}}))
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-sub.ch:
			if ev.Type != "cron_fired" {
				continue
			}
			p := ev.Payload.(map[string]any)
			runID := p["runId"].(string)
			pollUntil(t, "the cron run to end", func() bool {
				_, out := te.do("GET", "/v1/runs/"+runID, nil)
				return out["result"].(map[string]any)["stopReason"] == "complete"
			})
			_, out := te.do("GET", "/v1/runs/"+runID, nil)
			if r := out["result"].(map[string]any); r["text"] != "echo: daily report" {
				t.Fatalf("cron run %v", r)
			}
			_, list := te.do("GET", "/v1/runs?agent=reporter", nil)
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

type sseEvent struct {
	id    int
	event string
	data  map[string]any
}

// readSSE reads a whole stream (until `event: done` or EOF).
func readSSE(t testing.TB, r io.Reader) []sseEvent {
	var out []sseEvent
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 8<<20)
	cur := sseEvent{id: -1}
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			cur.id, _ = strconv.Atoi(strings.TrimPrefix(line, "id: "))
		case strings.HasPrefix(line, "event: "):
			cur.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.data)
		case line == "":
			if cur.event == "done" {
				return out
			}
			if cur.data != nil {
				out = append(out, cur)
			}
			cur = sseEvent{id: -1}
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
	req, _ := http.NewRequest("POST", te.ts.URL+"/v1/agents/long/run?detach=true", strings.NewReader(`{"input":"go"}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var started map[string]string
	json.NewDecoder(resp.Body).Decode(&started)
	resp.Body.Close()
	runID := started["runId"]
	if resp.StatusCode != 202 || !strings.HasPrefix(runID, "run_") || resp.Header.Get("Location") != "/v1/runs/"+runID {
		t.Fatalf("detach: %d %v %s", resp.StatusCode, started, resp.Header.Get("Location"))
	}

	// A follower reads until the first tool_end, then disconnects.
	ctx, cancel := context.WithCancel(context.Background())
	freq, _ := http.NewRequestWithContext(ctx, "GET", te.ts.URL+"/v1/runs/"+runID+"/events", nil)
	fresp, err := http.DefaultClient.Do(freq)
	if err != nil || fresp.StatusCode != 200 {
		t.Fatalf("follow: %v %v", err, fresp)
	}
	var seen []sseEvent
	sc := bufio.NewScanner(fresp.Body)
	cur := sseEvent{id: -1}
	for sc.Scan() && !(len(seen) > 0 && seen[len(seen)-1].data["type"] == "tool_end") {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			cur.id, _ = strconv.Atoi(strings.TrimPrefix(line, "id: "))
		case strings.HasPrefix(line, "data: "):
			json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.data)
			seen = append(seen, cur)
			cur = sseEvent{id: -1}
		}
	}
	cancel()
	fresp.Body.Close()
	lastID := seen[len(seen)-1].id

	// The disconnect did not touch the run.
	_, out := te.do("GET", "/v1/runs/"+runID, nil)
	if out["result"].(map[string]any)["status"] != "running" {
		t.Fatalf("the run stopped with its follower: %v", out["result"])
	}

	// Reconnect with the last id; let the run go on; read to the end.
	freq, _ = http.NewRequest("GET", te.ts.URL+"/v1/runs/"+runID+"/events", nil)
	freq.Header.Set("Last-Event-ID", strconv.Itoa(lastID))
	fresp, err = http.DefaultClient.Do(freq)
	if err != nil {
		t.Fatal(err)
	}
	close(gate)
	rest := readSSE(t, fresp.Body)
	fresp.Body.Close()
	all := append(seen, rest...)

	// Every event exactly once, ids strictly increasing, the same as the stored run.
	_, out = te.do("GET", "/v1/runs/"+runID, nil)
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
	_, list := te.do("GET", "/v1/runs?agent=long", nil)
	if sum := list["runs"].([]any)[0].(map[string]any); sum["runId"] != runID || sum["status"] != "complete" || sum["preview"] != "all done" {
		t.Fatalf("listed %v", sum)
	}
	// A finished run replays everything, or what is after ?after=N; unknown runs are 404; bad ids 422.
	resp, _ = http.Get(te.ts.URL + "/v1/runs/" + runID + "/events?after=3")
	if evs := readSSE(t, resp.Body); len(evs) != len(stored)-3 || evs[0].id != 4 {
		t.Fatalf("after=3: %d events from %v", len(evs), evs[0].id)
	}
	resp.Body.Close()
	if code, _, out := te.trig("GET", "/v1/runs/run_nope/events", ""); code != 404 || errCodeOf(out) != codeRunNotFound {
		t.Fatalf("unknown run: %d %v", code, out)
	}
	if code, _, out := te.trig("GET", "/v1/runs/"+runID+"/events", "", "Last-Event-ID", "x"); code != 422 || errCodeOf(out) != codeSpecInvalid {
		t.Fatalf("bad id: %d %v", code, out)
	}
	// The original stream's ids are the same sequence numbers.
	req, _ = http.NewRequest("POST", te.ts.URL+"/v1/agents/long/run/stream", strings.NewReader(`{"input":"again"}`))
	resp, _ = http.DefaultClient.Do(req)
	evs := readSSE(t, resp.Body)
	resp.Body.Close()
	for i, ev := range evs {
		if ev.id != i+1 {
			t.Fatalf("run stream ids: %d at %d", ev.id, i)
		}
	}
}
