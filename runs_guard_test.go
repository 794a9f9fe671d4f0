package main

import (
	"context"
	"strings"
	"testing"
)

// Planted credentials; none is real.
var planted = map[string]string{
	"anthropic": "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
	"openai":    "sk-proj-AbCdEfGhIjKlMnOpQrStUvWx",
	"google":    "AIzaSyA1234567890abcdefghijklmnopqrstuv",
	"github":    "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
	"slack":     "xoxb-1234567890-abcdefghij",
	"npm":       "npm_abcdefghijklmnopqrstuvwxyz0123456789",
	"aws":       "AKIAIOSFODNN7EXAMPLE",
}

func TestRedactShapes(t *testing.T) {
	r := newRedactor(func(k string) string {
		if k == "OPENAI_API_KEY" {
			return "custom-gateway-key-123"
		}
		return ""
	})
	for name, secret := range planted {
		out := r.redact("token=" + secret + " end")
		if strings.Contains(out, secret) || !strings.Contains(out, redactedMark) || !strings.HasSuffix(out, " end") {
			t.Errorf("%s: %q", name, out)
		}
	}
	cases := map[string]string{
		"Authorization: Bearer abc.def-ghi_jkl":                                            "Authorization: Bearer " + redactedMark,
		"authorization: Basic dXNlcjpwYXNzd29yZA==":                                        "authorization: Basic " + redactedMark,
		"Authorization: BeArEr abc.def-ghi_jkl":                                            "Authorization: BeArEr " + redactedMark,
		"auth: bAsIc dXNlcjpwYXNzd29yZA==":                                                 "auth: bAsIc " + redactedMark,
		"git clone https://bob:hunter22@example.com/x":                                     "git clone https://bob:" + redactedMark + "@example.com/x",
		"uses custom-gateway-key-123 here":                                                 "uses " + redactedMark + " here",
		"-----BEGIN RSA PRIVATE KEY-----\nMIIE\nabc\n-----END RSA PRIVATE KEY-----\nafter": redactedMark + "\nafter",
		"grep -r sudo . && echo fine":                                                      "grep -r sudo . && echo fine",
	}
	for in, want := range cases {
		if got := r.redact(in); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
	var off *redactor
	if off.redact(planted["openai"]) != planted["openai"] {
		t.Error("nil redactor changed text")
	}
}

func TestStreamRedactorSplitSecretAndPEM(t *testing.T) {
	sr := newStreamRedactor(newRedactor(nil))
	key := planted["anthropic"]
	var out strings.Builder
	out.WriteString(sr.write("key: " + key[:10]))
	out.WriteString(sr.write(key[10:] + "\nnext line\n-----BEGIN PRIVATE KEY-----\nMIIEv"))
	out.WriteString(sr.write("AbCd\n-----END PRIVATE KEY-----\ntail"))
	out.WriteString(sr.flush())
	got := out.String()
	if strings.Contains(got, key[:12]) || strings.Contains(got, "MIIEv") || !strings.Contains(got, "next line\n") || !strings.HasSuffix(got, "tail") {
		t.Fatalf("stream redaction: %q", got)
	}
}

func TestEffectiveApprovalMode(t *testing.T) {
	for _, c := range []struct{ spec, body, want string }{
		{"auto", "", "auto"}, {"auto", "ask", "ask"}, {"ask", "auto", "ask"}, {"readonly", "ask", "readonly"},
		{"ask", "readonly", "readonly"}, {"weird", "", "ask"},
	} {
		if got, _ := effectiveApprovalMode(c.spec, c.body); got != c.want {
			t.Errorf("%s+%s = %s, want %s", c.spec, c.body, got, c.want)
		}
	}
	if !isDangerous("shell") || !isDangerous("something_new") || isDangerous("read_file") {
		t.Error("dangerous list")
	}
}

func TestPlantedKeyRedactedInToolOutputAndStoredEvents(t *testing.T) {
	key := planted["anthropic"]
	m := &fakeModel{script: scriptOf(toolResp(call("k", "shell", map[string]any{"command": "echo leaked " + key})))}
	te := newTestServer(t, withFakeModel(m))
	te.putAgent(testSpec("leaky", nil))
	evs := te.stream("leaky", map[string]any{"input": "x"}).all()
	id := evs[0]["runId"].(string)
	var sawEnd bool
	for _, e := range evs {
		if e["type"] == "tool_end" {
			sawEnd = true
			if out := e["output"].(string); !strings.Contains(out, "leaked "+redactedMark) {
				t.Fatalf("tool_end output %q", out)
			}
		}
	}
	if !sawEnd {
		t.Fatal("no tool_end")
	}
	stored, _ := te.s.store.RunEvents(context.Background(), id)
	for _, ev := range stored {
		if strings.Contains(string(ev), key) || strings.Contains(string(ev), key[:16]) {
			t.Fatalf("stored event holds the key: %s", ev)
		}
	}
	_, sum, res, _ := te.s.store.GetRun(context.Background(), id)
	if strings.Contains(string(sum)+string(res), key) {
		t.Fatal("run record holds the key")
	}
	if tr := lastToolResult(m); strings.Contains(tr.Content, key) {
		t.Fatalf("the model saw the key: %q", tr.Content)
	}
	// With redaction off the output is left alone.
	te.putAgent(testSpec("open", func(sp *AgentSpec) { sp.Guardrails.RedactSecrets = false }))
	m.mu.Lock()
	m.calls = 0
	m.mu.Unlock()
	res2 := te.run("open", map[string]any{"input": "x"})
	if !strings.Contains(strings.Join(msgTexts(res2), " "), key) {
		t.Fatal("redaction off still redacted")
	}
}

func msgTexts(res map[string]any) []string {
	var out []string
	for _, m := range res["messages"].([]any) {
		if s, ok := m.(map[string]any)["content"].(string); ok {
			out = append(out, s)
			continue
		}
		for _, p := range m.(map[string]any)["content"].([]any) {
			pm := p.(map[string]any)
			if s, ok := pm["content"].(string); ok {
				out = append(out, s)
			}
			if s, ok := pm["text"].(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

// A line longer than the stream buffer is released in pieces; a secret straddling the piece boundary
// is still caught (a one-line JSON answer from an API, say).
func TestStreamRedactorLongLineSecretAtTheCut(t *testing.T) {
	for name, key := range map[string]string{"key": planted["openai"], "bearer": "Bearer abcdefghijklmnopqrstuvwxyz012345"} {
		for off := 1; off < len(key); off += 3 {
			sr := newStreamRedactor(newRedactor(nil))
			pad := strings.Repeat("x ", (sr.maxBuf-off)/2)
			var out strings.Builder
			out.WriteString(sr.write(pad + `{"token": "` + key[:off]))
			out.WriteString(sr.write(key[off:] + `"} more`))
			out.WriteString(sr.flush())
			got := out.String()
			tail := key[len(key)-8:]
			if strings.Contains(got, tail) || !strings.HasSuffix(got, `"} more`) || !strings.HasPrefix(got, "x x") {
				t.Fatalf("%s split at %d leaked: …%q", name, off, got[max(0, len(got)-120):])
			}
		}
	}
}

// Bounding an over-long result keeps head and tail; a secret (or a bearer credential) cut by either
// edge is dropped whole rather than kept in halves the redactor cannot recognise.
func TestBoundOutputDoesNotHalveSecrets(t *testing.T) {
	r := newRedactor(nil)
	const max, tail = 3000, 1500 // the head cut is at 1500, the tail cut 1500 from the end
	for name, key := range map[string]string{"key": planted["openai"], "bearer": "Authorization: Bearer abcdefghijklmnopqrstuvwxyz012345"} {
		for pos := max - tail - 200; pos < max-tail+100; pos++ { // around the head cut
			s := strings.Repeat("a ", pos/2) + key + " " + strings.Repeat("b ", 4000)
			if got := r.redact(boundOutput(s, max)); leaksPart(got, key) {
				t.Fatalf("%s at %d (head cut) leaked", name, pos)
			}
		}
		for pos := 1 + 8000 - tail - 60; pos < 8000-tail+60; pos++ { // around the tail cut
			s := strings.Repeat("a", pos) + " " + key + " " + strings.Repeat("b", 8000-pos-len(key)-2)
			if got := r.redact(boundOutput(s, max)); leaksPart(got, key) {
				t.Fatalf("%s at %d (tail cut) leaked", name, pos)
			}
		}
	}
}

// leaksPart reports whether any 6 characters of the secret value (after a scheme word) appear in out.
func leaksPart(out, secret string) bool {
	if i := strings.LastIndex(secret, " "); i >= 0 {
		secret = secret[i+1:]
	}
	for i := 0; i+6 <= len(secret); i++ {
		if strings.Contains(out, secret[i:i+6]) {
			return true
		}
	}
	return false
}
