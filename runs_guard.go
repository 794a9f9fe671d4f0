// runs_guard.go — the run guardrails: secret redaction, the dangerous-tool list, and the approval-mode rules.
//
// Entry points: newRedactor(getenv) → redactor.redact(text) for whole strings and newStreamRedactor for
// chunked output (tool_delta), isDangerous(tool), effectiveApprovalMode(spec, body).
// Rules (DESIGN §6): when redactSecrets is on, provider API keys, GitHub/Slack/npm/AWS key ids, bearer and
// basic authorization values and PEM private keys are replaced in tool results, tool deltas, tool
// arguments shown in events, warnings and errors; the model's own text is never altered. Streams are
// redacted a line at a time so a secret split across two chunks is still caught.
package main

import (
	"regexp"
	"slices"
	"strings"
)

const redactedMark = "[REDACTED]"

// secretPattern matches a credential by shape. Group 1, when present, is a prefix that is kept. The
// regular expression runs only when one of the hints occurs in the text (a cheap substring test; an
// ASCII case-insensitive one when fold is set, for scheme words such as Bearer that any case spells).
type secretPattern struct {
	re    *regexp.Regexp
	hints []string
	fold  bool
}

func sp(expr string, hints ...string) secretPattern {
	return secretPattern{re: regexp.MustCompile(expr), hints: hints}
}

func spFold(expr string, hints ...string) secretPattern {
	p := sp(expr, hints...)
	p.fold = true
	return p
}

var secretPatterns = []secretPattern{
	sp(`sk-ant-[A-Za-z0-9_\-]{16,}`, "sk-ant-"),                              // Anthropic
	sp(`sk-(?:proj-|svcacct-|admin-|or-v1-)?[A-Za-z0-9_\-]{20,}`, "sk-"),     // OpenAI, OpenRouter, DeepSeek
	sp(`AIza[0-9A-Za-z_\-]{35}`, "AIza"),                                     // Google
	sp(`gsk_[A-Za-z0-9]{20,}`, "gsk_"),                                       // Groq
	sp(`xai-[A-Za-z0-9]{20,}`, "xai-"),                                       // xAI
	sp(`csk-[A-Za-z0-9]{20,}`, "csk-"),                                       // Cerebras
	sp(`gh[pousr]_[A-Za-z0-9]{30,}`, "ghp_", "gho_", "ghu_", "ghs_", "ghr_"), // GitHub tokens
	sp(`github_pat_[A-Za-z0-9_]{22,}`, "github_pat_"),                        // GitHub fine-grained
	sp(`xox[abposr]-[A-Za-z0-9\-]{10,}`, "xox"),                              // Slack
	sp(`npm_[A-Za-z0-9]{36}`, "npm_"),                                        // npm
	sp(`\b(?:AKIA|ASIA)[0-9A-Z]{16}\b`, "AKIA", "ASIA"),                      // AWS access key ids
	spFold(`(?i)(\bbearer\s+)[A-Za-z0-9._~+/\-]{8,}=*`, "bearer"),            // bearer values, any case
	spFold(`(?i)(\bbasic\s+)[A-Za-z0-9+/]{8,}=*`, "basic"),                   // basic auth values, any case
}

// urlPassword matches the password of a user:password@host URL; the user and the @ are kept.
var urlPassword = regexp.MustCompile(`(://[^/\s:@]+:)[^/\s@]{3,}@`)

var (
	pemBlock = regexp.MustCompile(`-----BEGIN[A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END[A-Z ]*PRIVATE KEY-----|\z)`)
	pemBegin = regexp.MustCompile(`-----BEGIN[A-Z ]*PRIVATE KEY-----`)
	pemEnd   = regexp.MustCompile(`-----END[A-Z ]*PRIVATE KEY-----`)
)

// secretEnvKeys are the environment variables whose exact values are redacted even when their shape is
// unusual (a self-hosted gateway key, say).
var secretEnvKeys = []string{
	"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "GROQ_API_KEY",
	"DEEPSEEK_API_KEY", "CEREBRAS_API_KEY", "MISTRAL_API_KEY", "TOGETHER_API_KEY", "OPENROUTER_API_KEY",
	"BRAVE_API_KEY", "TAVILY_API_KEY", "AGENT_TOKEN", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY",
}

// redactor replaces secrets in text. A nil *redactor (redaction off) returns text unchanged.
type redactor struct {
	literals []string // exact secret values known from the environment, longest first
}

func newRedactor(getenv func(string) string) *redactor {
	r := &redactor{}
	if getenv != nil {
		for _, k := range secretEnvKeys {
			// The bearer token is redacted whatever its length; other values only when long enough
			// not to be an ordinary word.
			if v := strings.TrimSpace(getenv(k)); len(v) >= 8 || (k == "AGENT_TOKEN" && v != "") {
				r.literals = append(r.literals, v)
			}
		}
	}
	slices.SortFunc(r.literals, func(a, b string) int { return len(b) - len(a) })
	return r
}

var (
	homePath = regexp.MustCompile(`(?:/home|/Users)/[^/\s"'\x60:;,)]+`)
	email    = regexp.MustCompile(`[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}`)
)

// redactPersonal is redact plus what identifies a person (distilled specs leave the machine they were
// made on): home directories become ~ and e-mail addresses [EMAIL].
func (r *redactor) redactPersonal(s string) string {
	s = r.redact(s)
	if strings.Contains(s, "@") {
		s = email.ReplaceAllString(s, "[EMAIL]")
	}
	if strings.Contains(s, "/home/") || strings.Contains(s, "/Users/") {
		s = homePath.ReplaceAllString(s, "~")
	}
	return s
}

// redact returns s with every recognised secret replaced by [REDACTED].
func (r *redactor) redact(s string) string {
	if r == nil || s == "" {
		return s
	}
	for _, lit := range r.literals {
		if strings.Contains(s, lit) {
			s = strings.ReplaceAll(s, lit, redactedMark)
		}
	}
	if strings.Contains(s, "PRIVATE KEY-----") {
		s = pemBlock.ReplaceAllString(s, redactedMark)
	}
	for _, p := range secretPatterns {
		if !p.fold && !containsAny(s, p.hints) || p.fold && !containsAnyFold(s, p.hints) {
			continue
		}
		re := p.re
		if re.NumSubexp() > 0 {
			s = re.ReplaceAllString(s, "${1}"+redactedMark)
			continue
		}
		s = re.ReplaceAllString(s, redactedMark)
	}
	if strings.Contains(s, "://") {
		s = urlPassword.ReplaceAllString(s, "${1}"+redactedMark+"@")
	}
	return s
}

func containsAny(s string, subs []string) bool {
	return slices.ContainsFunc(subs, func(sub string) bool { return strings.Contains(s, sub) })
}

// containsAnyFold is containsAny ignoring ASCII case, without allocating a lowered copy of s.
func containsAnyFold(s string, subs []string) bool {
	for _, sub := range subs {
		for i := 0; i+len(sub) <= len(s); i++ {
			if s[i]|0x20 == sub[0]|0x20 && strings.EqualFold(s[i:i+len(sub)], sub) {
				return true
			}
		}
	}
	return false
}

// redactArgs returns a copy of tool arguments with every string value redacted (for events).
func (r *redactor) redactArgs(args map[string]any) map[string]any {
	if r == nil || args == nil {
		return args
	}
	out := make(map[string]any, len(args))
	for k, v := range args {
		out[k] = r.redactValue(v)
	}
	return out
}

func (r *redactor) redactValue(v any) any {
	switch x := v.(type) {
	case string:
		return r.redact(x)
	case map[string]any:
		return r.redactArgs(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = r.redactValue(e)
		}
		return out
	}
	return v
}

// streamRedactor redacts chunked output a line at a time, so secrets split across chunks are caught,
// and hides every line inside a PEM private key block. Not safe for concurrent use.
type streamRedactor struct {
	r      *redactor
	buf    strings.Builder
	inPEM  bool
	maxBuf int
}

func newStreamRedactor(r *redactor) *streamRedactor { return &streamRedactor{r: r, maxBuf: 8 << 10} }

// write takes a chunk and returns the redacted complete lines it can release now.
func (s *streamRedactor) write(chunk string) string {
	if s.r == nil {
		return chunk
	}
	s.buf.WriteString(chunk)
	text := s.buf.String()
	cut := strings.LastIndexByte(text, '\n')
	if cut < 0 {
		if len(text) < s.maxBuf {
			return ""
		}
		// A very long line: release it rather than hold output forever, but only up to a point no
		// secret crosses, so a key straddling the cut is not let out in two unrecognisable halves.
		cut = safeCut(text)
	}
	ready, rest := text[:cut+1], text[cut+1:]
	s.buf.Reset()
	s.buf.WriteString(rest)
	return s.lines(ready)
}

// safeCut returns the index of the last byte of text that can be released without splitting a
// secret: the last byte that no secret shape contains, moved before a `bearer`/`basic` scheme word
// whose value would follow it. With no such byte, all of text.
func safeCut(text string) int {
	i := len(text) - 1
	for ; i >= 0; i-- {
		if !secretByte(text[i]) {
			break
		}
	}
	if i < 0 {
		return len(text) - 1
	}
	head := strings.TrimRight(text[:i+1], " \t")
	lower := strings.ToLower(head)
	for _, scheme := range []string{"bearer", "basic"} {
		if strings.HasSuffix(lower, scheme) {
			if j := len(head) - len(scheme) - 1; j >= 0 {
				return j
			}
		}
	}
	return i
}

// tailAfterSecret moves a tail cut at start forward past the second half of a secret, and past a
// credential whose `bearer`/`basic` scheme word falls in the elided part; it returns the tail's length.
func tailAfterSecret(s string, start int) int {
	skipWord := func() {
		for start < len(s) && secretByte(s[start]) {
			start++
		}
	}
	if start > 0 && start < len(s) && secretByte(s[start-1]) && secretByte(s[start]) {
		skipWord()
	}
	before := strings.ToLower(strings.TrimRight(s[:start], " \t"))
	if strings.HasSuffix(before, "bearer") || strings.HasSuffix(before, "basic") {
		for start < len(s) && (s[start] == ' ' || s[start] == '\t') {
			start++
		}
		skipWord()
	}
	return len(s) - start
}

// secretByte reports whether b can be part of a secret the patterns recognise.
func secretByte(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' ||
		strings.IndexByte("_-+/=.~:@", b) >= 0
}

// flush releases whatever is buffered.
func (s *streamRedactor) flush() string {
	if s.r == nil {
		return ""
	}
	text := s.buf.String()
	s.buf.Reset()
	return s.lines(text)
}

func (s *streamRedactor) lines(text string) string {
	if text == "" {
		return ""
	}
	var out strings.Builder
	for _, line := range strings.SplitAfter(text, "\n") {
		if line == "" {
			continue
		}
		switch {
		case s.inPEM:
			if pemEnd.MatchString(line) {
				s.inPEM = false
			}
			continue
		case pemBegin.MatchString(line) && !pemEnd.MatchString(line):
			s.inPEM = true
			out.WriteString(redactedMark + "\n")
			continue
		}
		out.WriteString(s.r.redact(line))
	}
	return out.String()
}

// dangerousTools need approval in `ask` mode and are refused in `readonly` (DESIGN §6).
var dangerousTools = []string{"shell", "expose_port", "write_file", "edit_file", "move", "delete", "http_request",
	"browser_click", "browser_type", "browser_select", "browser_navigate"}

// safeTools are known not to change anything. Anything that is in neither list is treated as dangerous:
// approvals fail closed.
var safeTools = []string{"read_file", "list_dir", "search_files", "computer_info", "fetch_url", "web_search",
	"browse", "browser_goto", "browser_snapshot", "browser_screenshot", "browser_wait_for", "browser_scroll",
	"browser_hover", "browser_tabs", "browser_status"}

func isDangerous(tool string) bool {
	return slices.Contains(dangerousTools, tool) || !slices.Contains(safeTools, tool)
}

// approvalStrictness orders the modes; a run body may tighten the spec's mode, never loosen it.
var approvalStrictness = map[string]int{"auto": 0, "ask": 1, "readonly": 2}

// effectiveApprovalMode is the stricter of the spec's mode and the body's request, and reports whether
// the body asked for a looser mode (which is ignored).
func effectiveApprovalMode(spec, body string) (mode string, loosened bool) {
	if _, ok := approvalStrictness[spec]; !ok {
		spec = "ask" // unknown stored value: fail closed
	}
	if body == "" {
		return spec, false
	}
	if approvalStrictness[body] > approvalStrictness[spec] {
		return body, false
	}
	return spec, approvalStrictness[body] < approvalStrictness[spec]
}
