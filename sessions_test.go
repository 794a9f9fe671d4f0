package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// importFile runs detection and the importer over a file the way POST /v1/sessions/import does.
func importFile(t *testing.T, ts *testServer, path string) map[string]any {
	t.Helper()
	abs, _ := filepath.Abs(path)
	res := ts.do("POST", "/v1/sessions/import", map[string]any{"path": abs})
	if res.status != 200 {
		t.Fatalf("import %s: %d %s", path, res.status, res.body)
	}
	return res.json(t)["transcript"].(map[string]any)
}

// shape summarises a transcript: roles in order (a tool call as "call:<name>"), for exact assertions.
func shape(tr map[string]any) []string {
	var out []string
	for _, x := range tr["messages"].([]any) {
		m := x.(map[string]any)
		if name, _ := m["toolName"].(string); name != "" && m["role"] == "assistant" {
			out = append(out, "call:"+name)
			continue
		}
		out = append(out, m["role"].(string))
	}
	return out
}

func TestImportFixtures(t *testing.T) {
	ts := newTestServer(t)
	for _, tc := range []struct {
		file, source, title string
		shape               []string
		created, updated    string
	}{
		{"claude-code.jsonl", "claude-code", "Fix the failing date test",
			[]string{"user", "assistant", "call:Bash", "call:Read", "tool", "tool", "call:Edit", "tool", "assistant"},
			"2026-11-20T10:00:00.000Z", "2026-11-20T10:00:08.000Z"},
		{"codex.jsonl", "codex", "Which Go version does go.mod require?",
			[]string{"user", "call:shell", "tool", "call:apply_patch", "tool", "assistant"}, "2026-11-20T11:00:01.000Z", "2026-11-20T11:00:07.000Z"},
		{"gemini.jsonl", "gemini", "Add a line to notes.txt",
			[]string{"user", "assistant", "call:read_file", "tool", "assistant", "call:write_file", "tool"}, "2026-11-20T12:00:01.000Z", "2026-11-20T12:00:03.000Z"},
		{"chatgpt.json", "chatgpt", "Convert CSV to JSON",
			[]string{"user", "call:python", "tool", "assistant"}, "2026-11-18T11:06:40.500Z", "2026-11-18T11:06:45.000Z"},
		{"transcript.md", "markdown", "Renaming photos by date", []string{"user", "assistant", "user", "assistant"}, "", ""},
		{"messages.jsonl", "jsonl", "What is 2+2?", []string{"system", "user", "call:calculator", "tool", "assistant"}, "", ""},
	} {
		tr := importFile(t, ts, "testdata/sessions/"+tc.file)
		if tr["source"] != tc.source || tr["title"] != tc.title || fmt.Sprint(shape(tr)) != fmt.Sprint(tc.shape) ||
			!strings.HasPrefix(tr["id"].(string), "trn_") || fmt.Sprint(tr["createdAt"]) != firstNonEmpty(tc.created, "<nil>") ||
			fmt.Sprint(tr["updatedAt"]) != firstNonEmpty(tc.updated, "<nil>") {
			t.Errorf("%s: source %v title %q shape %v created %v updated %v", tc.file, tr["source"], tr["title"], shape(tr), tr["createdAt"], tr["updatedAt"])
		}
		for _, x := range tr["messages"].([]any) {
			if _, ok := x.(map[string]any)["content"].(string); !ok {
				t.Errorf("%s: a message's content is not a string: %v", tc.file, x)
			}
		}
	}
	// Details: the tool result names its call and carries the text; thinking, sidechains, the abandoned
	// branch and injected context are gone; the ChatGPT export saved both conversations.
	tr := importFile(t, ts, "testdata/sessions/claude-code.jsonl")
	body, _ := json.Marshal(tr)
	for _, gone := range []string{"Let me look.", "Warmup", "abandoned edit", "noise"} {
		if strings.Contains(string(body), gone) {
			t.Errorf("claude-code kept %q", gone)
		}
	}
	msgs := tr["messages"].([]any)
	if r := msgs[5].(map[string]any); r["toolName"] != "Bash" || r["content"] != "1 failed: expected 2026-01-01" {
		t.Errorf("tool result %v", r)
	}
	if c := msgs[2].(map[string]any)["toolInput"].(map[string]any); c["command"] != "python -m pytest -q dates_test.py" {
		t.Errorf("tool input %v", c)
	}
	codex, _ := json.Marshal(importFile(t, ts, "testdata/sessions/codex.jsonl"))
	if strings.Contains(string(codex), "environment_context") || strings.Contains(string(codex), "You are Codex") || strings.Count(string(codex), "go.mod requires Go 1.26") != 1 {
		t.Errorf("codex kept noise or a duplicate: %s", codex)
	}
	list := ts.do("GET", "/v1/sessions", nil).json(t)["sessions"].([]any)
	titles := fmt.Sprint(list)
	if !strings.Contains(titles, "Second conversation") || !strings.Contains(titles, "Convert CSV to JSON") {
		t.Errorf("the export's second conversation was not saved: %s", titles)
	}
	id := tr["id"].(string)
	if got := ts.do("GET", "/v1/sessions/"+id, nil).json(t)["transcript"].(map[string]any); got["title"] != tr["title"] || len(got["messages"].([]any)) != len(msgs) {
		t.Errorf("read back: %v", got["title"])
	}
	if res := ts.do("GET", "/v1/sessions/trn_nope", nil); res.status != 404 || res.errCode(t) != codeTranscriptNotFound {
		t.Errorf("unknown transcript: %d %s", res.status, res.body)
	}
}

// After /compact Claude Code starts a new chain: a compact_boundary line (parentUuid null,
// logicalParentUuid the last line before it), then its own summary of the earlier turns as a user message
// (isCompactSummary). The turns before the compaction are kept; the summary is neither a message nor the
// title. A file that starts at the boundary (the earlier turns are elsewhere) keeps what it has, and is
// titled, imported or discovered, by the user's own words.
func TestImportClaudeCompact(t *testing.T) {
	home := t.TempDir()
	ts := newTestServer(t, withEnv(map[string]string{"HOME": home}))
	const fixture = "testdata/sessions/claude-code-compact.jsonl"
	noSummary := func(what string, tr map[string]any) {
		t.Helper()
		if b, _ := json.Marshal(tr); strings.Contains(string(b), "being continued") || strings.Contains(string(b), "ompacted") {
			t.Errorf("%s kept the compaction's summary or notices: %s", what, b)
		}
	}
	tr := importFile(t, ts, fixture)
	msgs := tr["messages"].([]any)
	if want := "[user call:Read tool assistant user call:Edit tool assistant]"; tr["source"] != "claude-code" || fmt.Sprint(shape(tr)) != want ||
		tr["title"] != "Add a --dry-run flag to import.py" || tr["createdAt"] != "2026-11-21T09:00:00.000Z" || tr["updatedAt"] != "2026-11-21T09:31:05.000Z" ||
		!strings.HasPrefix(msgs[3].(map[string]any)["content"].(string), "import.py reads sys.argv") ||
		msgs[4].(map[string]any)["content"] != "Now make --dry-run print each row it would import" {
		t.Fatalf("compacted session: source %v title %q shape %v created %v updated %v", tr["source"], tr["title"], shape(tr), tr["createdAt"], tr["updatedAt"])
	}
	noSummary("the import", tr)
	// From the boundary on only.
	b, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	tail := strings.Join(strings.SplitAfter(string(b), "\n")[4:], "")
	if first, _, _ := strings.Cut(tail, "\n"); !strings.Contains(first, `"subtype":"compact_boundary"`) {
		t.Fatalf("the fixture changed: %s", first)
	}
	res := ts.do("POST", "/v1/sessions/import", map[string]any{"content": tail})
	if res.status != 200 {
		t.Fatalf("import from the boundary: %d %s", res.status, res.body)
	}
	tr = res.json(t)["transcript"].(map[string]any)
	if fmt.Sprint(shape(tr)) != "[user call:Edit tool assistant]" || tr["title"] != "Now make --dry-run print each row it would import" {
		t.Errorf("from the boundary: title %q shape %v", tr["title"], shape(tr))
	}
	noSummary("the import from the boundary", tr)
	p := filepath.Join(home, ".claude", "projects", "-home-ben-shop", "s-2222.jsonl")
	os.MkdirAll(filepath.Dir(p), 0o755)
	os.WriteFile(p, []byte(tail), 0o644)
	rows := ts.do("GET", "/v1/sessions/discover", nil).json(t)["sessions"].([]any)
	if len(rows) != 1 || rows[0].(map[string]any)["title"] != "Now make --dry-run print each row it would import" {
		t.Errorf("discovered %v", rows)
	}
}

// The session files written by the real tools (../shared/transcripts, published by other projects)
// import with the right roles, tool calls and thread, the tricky ones included.
func TestImportRealTranscripts(t *testing.T) {
	dir := filepath.Join("..", "shared", "transcripts")
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("no real transcripts here (%v)", err)
	}
	ts := newTestServer(t)
	count := func(tr map[string]any, role string) int {
		n := 0
		for _, s := range shape(tr) {
			if s == role || (role == "call" && strings.HasPrefix(s, "call:")) {
				n++
			}
		}
		return n
	}
	for _, tc := range []struct {
		file                       string
		source                     string
		users, calls, tools, total int
		first, last                string // the first user message and the last message start like this
	}{
		{"claude-code/codemie-4c2ddfdc-main-write-read-edit-bash.jsonl", "claude-code", 3, 6, 6, 19, "create hello.py, md and js", "Done! I've deleted hello.js."},
		{"claude-code/codemie-session-9eda1058-interrupt-summaries-task.jsonl", "claude-code", 3, 3, 3, 14, "show tools and store response in file", "Excellent! Here's what I discovered"},
		{"claude-code/entire-9b3838281539-hello-geese-write-delete.jsonl", "claude-code", 3, 3, 3, 12, "hello", "Done - `docs/geese.md` has been deleted."},
		{"claude-code/entire-dc49cb8a2a42-parallel-bash-task.jsonl", "claude-code", 1, 4, 4, 12, "can you review the changes", "## Review Summary from Two Agents"},
		{"codex/codemie-rollout-2026-01-02T18-39-45-019b7f94-midturn.jsonl", "codex", 1, 3, 3, 7, "what is current repository about?", "# AI/Run CodeMie CLI"},
		{"codex/codemie-rollout-2026-05-11T11-26-55-019e1625-tui-0.125-two-turns.jsonl", "codex", 2, 105, 102, 222, "show tools", "Implemented the default context compact"},
		{"codex/vibecodingtracker-rollout-01996135-ide-go-version.jsonl", "codex", 1, 18, 18, 46, "# Context from my IDE setup", "Here’s what I changed"},
		{"gemini/codemie-session-2026-01-16T11-01-37b7abef-file-ops.json", "gemini", 5, 14, 14, 38, "show tools", "I have removed the 2nd and 3rd lines"},
		{"gemini/entire-12cbfeaa512b-session-faff42ab-ask-for-text.json", "gemini", 2, 2, 2, 8, "add new text to test-gemini.txt", "I have added the text"},
		{"gemini/entire-ab2b9748b105-session-f7633853-color-file-shell.json", "gemini", 1, 9, 9, 29, "run an agent that creates a color file", "Staged `docs/color.md`."},
		{"gemini/vibecodingtracker-session-0ab84937-init-gemini-md.jsonl", "gemini", 3, 12, 12, 29, "You are an AI agent that brings the power", "Successfully modified file"},
		{"chatgpt/chatgpt2graph-conversations-average-distance-code-interpreter.json", "chatgpt", 8, 11, 11, 42, "given two random independent variables", "Here's the updated graph with the mean"},
	} {
		tr := importFile(t, ts, filepath.Join(dir, tc.file))
		msgs := tr["messages"].([]any)
		var firstUser string
		for _, x := range msgs {
			if m := x.(map[string]any); m["role"] == "user" {
				firstUser = m["content"].(string)
				break
			}
		}
		last, _ := msgs[len(msgs)-1].(map[string]any)["content"].(string)
		if tr["source"] != tc.source || count(tr, "user") != tc.users || count(tr, "call") != tc.calls || count(tr, "tool") != tc.tools ||
			len(msgs) != tc.total || !strings.HasPrefix(strings.TrimSpace(firstUser), tc.first) || !strings.HasPrefix(strings.TrimSpace(last), tc.last) {
			t.Errorf("%s: source %v users %d calls %d tools %d total %d first %q last %q", tc.file, tr["source"],
				count(tr, "user"), count(tr, "call"), count(tr, "tool"), len(msgs), clip(firstUser, 50), clip(last, 50))
		}
	}
	// Parallel tool calls: both calls and both results are on the thread, and each result names its call.
	tr := importFile(t, ts, filepath.Join(dir, "claude-code/entire-dc49cb8a2a42-parallel-bash-task.jsonl"))
	if s := fmt.Sprint(shape(tr)); !strings.Contains(s, "call:Bash call:Bash tool tool") || !strings.Contains(s, "call:Task call:Task tool tool") {
		t.Errorf("parallel calls: %s", s)
	}
	// Gemini records repeated under one id: the last copy wins, once.
	g := importFile(t, ts, filepath.Join(dir, "gemini/vibecodingtracker-session-0ab84937-init-gemini-md.jsonl"))
	if n := strings.Count(fmt.Sprint(shape(g)), "call:update_topic"); n != 3 {
		t.Errorf("gemini repeated records: %d update_topic calls, want 3: %v", n, shape(g))
	}
	// A sidechain-only file is not a session.
	abs, _ := filepath.Abs(filepath.Join(dir, "claude-code/codemie-4c2ddfdc-agent-50243ee8-sidechain.jsonl"))
	if res := ts.do("POST", "/v1/sessions/import", map[string]any{"path": abs}); res.status != 500 || res.errCode(t) != codeImportFailed ||
		!strings.Contains(res.errMessage(t), "sidechain file is not one") {
		t.Errorf("sidechain file: %d %s", res.status, res.body)
	}
}

func TestImportBadInput(t *testing.T) {
	ts := newTestServer(t)
	os.WriteFile(filepath.Join(ts.s.cfg.Home, "inside.jsonl"), []byte(`{"role":"user","content":"x"}`), 0o600)
	garbage := filepath.Join(t.TempDir(), "garbage.bin")
	os.WriteFile(garbage, []byte{0, 1, 2, 0xff, 0xfe, 'x'}, 0o644)
	truncated := filepath.Join(t.TempDir(), "conversations.json")
	os.WriteFile(truncated, []byte(`[{"title":"x","mapping":{"a":{"message":{"author":{"role":"us`), 0o644)
	for _, tc := range []struct {
		body   any
		status int
		code   string
		msg    string
	}{
		{map[string]any{}, 500, codeImportFailed, "needs path or content"},
		{map[string]any{"path": ""}, 500, codeImportFailed, "needs path or content"},
		{map[string]any{"content": "x", "source": "slack"}, 422, codeSpecInvalid, "'claude-code' | 'codex' | 'chatgpt' | 'gemini' | 'markdown' | 'jsonl'"},
		{map[string]any{"path": "/no/such/file.jsonl"}, 500, codeImportFailed, "cannot import /no/such/file.jsonl: no transcript"},
		{map[string]any{"path": "relative.jsonl"}, 500, codeImportFailed, "is not absolute"},
		{map[string]any{"path": filepath.Join(ts.s.cfg.Home, "inside.jsonl")}, 500, codeImportFailed, "no transcript agentd may read"},
		{map[string]any{"path": filepath.Join(ts.s.cfg.Home, "agentd.db")}, 500, codeImportFailed, "no transcript agentd may read"},
		{map[string]any{"path": "/dev/null"}, 500, codeImportFailed, "no transcript agentd may read"},
		{map[string]any{"path": t.TempDir()}, 500, codeImportFailed, "no transcript agentd may read"},
		{map[string]any{"path": garbage}, 500, codeImportFailed, "no transcript agentd may read"},
		{map[string]any{"path": truncated}, 500, codeImportFailed, "no transcript agentd may read"},
		{map[string]any{"content": "just some words"}, 500, codeImportFailed, "could not tell"},
		{map[string]any{"content": "{\"role\":\"user\"", "source": "jsonl"}, 500, codeImportFailed, "no JSONL messages"},
		{map[string]any{"content": "[1,2", "source": "chatgpt"}, 500, codeImportFailed, "ChatGPT"},
		{map[string]any{"path": 42}, 422, codeSpecInvalid, "path"},
	} {
		res := ts.do("POST", "/v1/sessions/import", tc.body)
		if res.status != tc.status || res.errCode(t) != tc.code || !strings.Contains(res.errMessage(t), tc.msg) {
			t.Errorf("%v: %d %s", tc.body, res.status, res.body)
		}
	}
	for _, q := range []string{"?source=slack", "?path=/no/such/dir", "?path=" + ts.s.cfg.Home} {
		if res := ts.do("GET", "/v1/sessions/discover"+q, nil); res.status == 200 || res.status >= 500 && res.errCode(t) != codeImportFailed {
			t.Errorf("discover %s: %d %s", q, res.status, res.body)
		}
	}
	for _, body := range []any{map[string]any{}, map[string]any{"transcript": map[string]any{"messages": []any{}}}} {
		if res := ts.do("POST", "/v1/sessions/distill", body); res.status != 500 || res.errCode(t) != codeImportFailed {
			t.Errorf("distill %v: %d %s", body, res.status, res.body)
		}
	}
	if res := ts.do("POST", "/v1/sessions/distill", map[string]any{"transcriptId": "trn_nope"}); res.status != 404 || res.errCode(t) != codeTranscriptNotFound {
		t.Errorf("distill unknown: %d %s", res.status, res.body)
	}
}

// TestImportPathRevealsNothing (issue 25 item 7): a path that cannot be imported — missing, unreadable,
// a secret file read as some source, broken JSON, a directory, a device, the data directory — gets one
// message, the same for all but the path: nothing of the file's bytes, nor whether it exists.
func TestImportPathRevealsNothing(t *testing.T) {
	ts := newTestServer(t)
	dir := t.TempDir()
	shadow := filepath.Join(dir, "shadow")
	os.WriteFile(shadow, []byte("root:$y$j9T$Qx7secret:19000:0:99999:7:::\n"), 0o600)
	broken := filepath.Join(dir, "broken.jsonl")
	os.WriteFile(broken, []byte(`{"sessionId":"s","projectHash":"p"}`+"\n"+`{"type":"user","content":[zz]}`+"\n"), 0o644)
	bodies := []map[string]any{
		{"path": shadow, "source": "gemini"}, {"path": shadow, "source": "jsonl"}, {"path": shadow, "source": "chatgpt"},
		{"path": shadow, "source": "codex"}, {"path": shadow, "source": "claude-code"}, {"path": shadow},
		{"path": filepath.Join(dir, "missing"), "source": "gemini"}, {"path": broken}, {"path": broken, "source": "gemini"},
		{"path": dir}, {"path": "/dev/null", "source": "gemini"}, {"path": filepath.Join(ts.s.cfg.Home, "agentd.db"), "source": "gemini"},
		{"path": filepath.Join(ts.s.cfg.Home, "nothing-here"), "source": "gemini"},
	}
	if os.Geteuid() != 0 { // root reads a file of mode 000
		unreadable := filepath.Join(dir, "unreadable.jsonl")
		os.WriteFile(unreadable, []byte(`{"role":"user","content":"x"}`), 0o000)
		bodies = append(bodies, map[string]any{"path": unreadable})
	}
	var want string
	for _, body := range bodies {
		res := ts.do("POST", "/v1/sessions/import", body)
		p := body["path"].(string)
		msg := strings.ReplaceAll(res.errMessage(t)+" "+fmt.Sprint(res.json(t)["error"].(map[string]any)["hint"]), p, "PATH")
		if res.status != 500 || res.errCode(t) != codeImportFailed {
			t.Fatalf("%v: %d %s", body, res.status, res.body)
		}
		for _, leak := range []string{"'r'", "root", "secret", "invalid character", "no such file", "permission denied", "is a directory"} {
			if strings.Contains(strings.ToLower(msg), leak) {
				t.Errorf("%v: the answer tells of the file (%q): %s", body, leak, msg)
			}
		}
		if want == "" {
			want = msg
		} else if msg != want {
			t.Errorf("%v answers\n%s\nanother path answers\n%s", body, msg, want)
		}
	}
}

// Discover lists the sessions under a home's default places (or a given path), newest first, and skips
// what it cannot read.
func TestDiscoverSessions(t *testing.T) {
	home := t.TempDir()
	ts := newTestServer(t, withEnv(map[string]string{"HOME": home}))
	if res := ts.do("GET", "/v1/sessions/discover", nil); res.status != 200 || len(res.json(t)["sessions"].([]any)) != 0 {
		t.Fatalf("empty home: %d %s", res.status, res.body)
	}
	put := func(rel, fixture string, age time.Duration) string {
		p := filepath.Join(home, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		b, _ := os.ReadFile("testdata/sessions/" + fixture)
		os.WriteFile(p, b, 0o644)
		mt := time.Now().Add(-age)
		os.Chtimes(p, mt, mt)
		return p
	}
	put(".claude/projects/-home-ana-proj/s-1111.jsonl", "claude-code.jsonl", 3*time.Hour)
	put(".codex/sessions/2026/11/20/rollout-2026-11-20T11-00-00-0199aaaa.jsonl", "codex.jsonl", time.Hour)
	put(".gemini/tmp/9da8b3/chats/session-2026-11-20T12-00-7633853a.jsonl", "gemini.jsonl", 2*time.Hour)
	os.WriteFile(filepath.Join(home, ".claude/projects/-home-ana-proj/broken.jsonl"), []byte("{not json\n"), 0o644)
	os.WriteFile(filepath.Join(home, ".claude/projects/-home-ana-proj/agent-1.jsonl"), []byte(`{"parentUuid":null,"isSidechain":true,"uuid":"a","type":"user","message":{"role":"user","content":"Warmup"}}`+"\n"), 0o644)
	rows := ts.do("GET", "/v1/sessions/discover", nil).json(t)["sessions"].([]any)
	var got []string
	for _, x := range rows {
		r := x.(map[string]any)
		got = append(got, fmt.Sprintf("%s:%v:%v", r["source"], r["messageCount"], r["title"]))
		if _, err := time.Parse(time.RFC3339, r["updatedAt"].(string)); err != nil || !strings.HasPrefix(r["path"].(string), home) {
			t.Errorf("row %v", r)
		}
	}
	want := []string{"codex:6:Which Go version does go.mod require?", "gemini:4:Add a line to notes.txt", "claude-code:11:Fix the failing date test"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("discovered %v, want %v", got, want)
	}
	if rows := ts.do("GET", "/v1/sessions/discover?source=gemini", nil).json(t)["sessions"].([]any); len(rows) != 1 {
		t.Errorf("source filter: %v", rows)
	}
	if rows := ts.do("GET", "/v1/sessions/discover?path="+filepath.Join(home, ".codex"), nil).json(t)["sessions"].([]any); len(rows) != 1 {
		t.Errorf("path: %v", rows)
	}
}

// pySpaced re-serialises compact JSON the way Python's json.dumps writes it: a space after every ':' and
// ',' outside strings (the same values; only the spacing differs).
func pySpaced(b []byte) []byte {
	var out []byte
	in, esc := false, false
	for _, c := range b {
		out = append(out, c)
		switch {
		case esc:
			esc = false
		case in && c == '\\':
			esc = true
		case c == '"':
			in = !in
		case !in && (c == ':' || c == ','):
			out = append(out, ' ')
		}
	}
	return out
}

func TestHasKeyValue(t *testing.T) {
	for line, want := range map[string]bool{
		`{"type":"user"}`: true, `{"type": "user"}`: true, `{"type" :` + "\t" + `"user"}`: true, `{"a":"type","type": "user"}`: true,
		`{"type":"users"}`:  true, // a prefix of the value: the callers' values end with their closing quote
		`{"type":"gemini"}`: false, `{"subtype":"user"}`: false, `{"type"}`: false, `{"type":`: false, ``: false,
	} {
		if hasKeyValue([]byte(line), "type", `"user`) != want {
			t.Errorf("%s: want %v", line, want)
		}
	}
	if !hasKeyValue([]byte(`{"isSidechain": true}`), "isSidechain", "true") || hasKeyValue([]byte(`{"isSidechain": false}`), "isSidechain", "true") {
		t.Error("a bare value")
	}
}

// TestDiscoverSpacedSessions (issue 25 item 8): sessions written with spaces after ':' (valid JSON, as
// Python's json.dumps writes it) are discovered as their compact twins are — same source, title and
// count — and import reads the same messages; a session only the importer understands is not dropped.
func TestDiscoverSpacedSessions(t *testing.T) {
	compactHome, spacedHome := t.TempDir(), t.TempDir()
	rels := map[string]string{
		"claude-code.jsonl": ".claude/projects/-home-ana-proj/s-1111.jsonl",
		"codex.jsonl":       ".codex/sessions/2026/11/20/rollout-2026-11-20T11-00-00-0199aaaa.jsonl",
		"gemini.jsonl":      ".gemini/tmp/9da8b3/chats/session-2026-11-20T12-00-7633853a.jsonl",
	}
	for fixture, rel := range rels {
		b, err := os.ReadFile("testdata/sessions/" + fixture)
		if err != nil {
			t.Fatal(err)
		}
		spaced := pySpaced(b)
		if bytes.Equal(spaced, b) || !json.Valid(bytes.SplitN(spaced, []byte("\n"), 2)[0]) {
			t.Fatalf("%s: the spaced copy is not a spaced JSON twin", fixture)
		}
		for home, data := range map[string][]byte{compactHome: b, spacedHome: spaced} {
			os.MkdirAll(filepath.Dir(filepath.Join(home, rel)), 0o755)
			os.WriteFile(filepath.Join(home, rel), data, 0o644)
		}
	}
	rows := func(home string) map[string]string {
		ts := newTestServer(t, withEnv(map[string]string{"HOME": home}))
		out := map[string]string{}
		for _, x := range ts.do("GET", "/v1/sessions/discover", nil).json(t)["sessions"].([]any) {
			r := x.(map[string]any)
			out[r["id"].(string)] = fmt.Sprintf("%s:%v:%v", r["source"], r["messageCount"], r["title"])
		}
		for _, rel := range rels {
			tr := importFile(t, ts, filepath.Join(home, rel))
			out["import "+rel] = fmt.Sprintf("%s:%d:%v", tr["source"], len(tr["messages"].([]any)), tr["title"])
		}
		return out
	}
	compact, spaced := rows(compactHome), rows(spacedHome)
	if len(compact) != 6 || fmt.Sprint(compact) != fmt.Sprint(spaced) {
		t.Fatalf("spaced sessions:\n%v\ncompact twins:\n%v", spaced, compact)
	}
	// A line format whose keys no count recognises (an escaped key: valid JSON) is still listed when the
	// importer reads messages in it.
	odd := filepath.Join(spacedHome, ".gemini/tmp/odd/chats/session-odd.jsonl")
	os.MkdirAll(filepath.Dir(odd), 0o755)
	os.WriteFile(odd, []byte(`{"sessionId":"s","projectHash":"p","startTime":"2026-11-20T12:00:00Z"}`+"\n"+
		`{"id":"1","timestamp":"2026-11-20T12:00:01Z","\u0074ype":"user","content":"escaped key"}`+"\n"), 0o644)
	ts := newTestServer(t, withEnv(map[string]string{"HOME": spacedHome}))
	imported := importFile(t, ts, odd)
	found := false
	for _, x := range ts.do("GET", "/v1/sessions/discover?source=gemini", nil).json(t)["sessions"].([]any) {
		if r := x.(map[string]any); r["path"] == odd {
			found = r["messageCount"] == float64(len(imported["messages"].([]any)))
		}
	}
	if !found {
		t.Fatalf("a session import reads (%v) is not discovered with its count", imported["messages"])
	}
}

// distillEnvKey is the provider key the distill tests give the server. testdata/sessions/claude-code.jsonl's
// first user message holds it, with a GitHub token and an AWS key id: the key has a shape no pattern knows,
// so only the lookup of the server's environment catches it.
const distillEnvKey = "gw-7Qm2Lx9Vb4Tn8Rk1Hc6Jd3Pz5"

// leaks returns what identifies a person or grants access that s holds, in any case: the fixtures'
// e-mail and home path and the planted secrets, each by its first characters, so a secret cut short (and
// no longer matching its pattern) or lowercased still counts.
func leaks(s string) []string {
	var out []string
	for _, l := range []string{"ana@example.com", "/home/", "ghp_R8x2Kq7L", "AKIAQX4TJ2", distillEnvKey[:12]} {
		if strings.Contains(strings.ToLower(s), strings.ToLower(l)) {
			out = append(out, l)
		}
	}
	return out
}

// Every fixture distils to a spec POST /v1/agents/validate accepts, with no secret, home path or e-mail.
func TestDistillFixtures(t *testing.T) {
	ts := newTestServer(t, withEnv(map[string]string{"OPENAI_API_KEY": distillEnvKey}))
	files, _ := filepath.Glob("testdata/sessions/*")
	for _, f := range files {
		tr := importFile(t, ts, f)
		res := ts.do("POST", "/v1/sessions/distill", map[string]any{"transcriptId": tr["id"], "useModel": "true"})
		if res.status != 200 {
			t.Fatalf("%s: %d %s", f, res.status, res.body)
		}
		out := res.json(t)
		d := out["distilled"].(map[string]any)
		yaml := out["yaml"].(string)
		if v := ts.do("POST", "/v1/agents/validate", map[string]any{"yaml": yaml}).json(t); v["ok"] != true {
			t.Errorf("%s: the distilled spec does not validate: %v\n%s", f, v["issues"], yaml)
		}
		specJSON, _ := json.Marshal(out["spec"])
		for what, text := range map[string]string{"spec": string(specJSON), "yaml": yaml, "answer": string(res.body)} {
			if l := leaks(text); l != nil {
				t.Errorf("%s: %v reached the %s", f, l, what)
			}
		}
		spec := out["spec"].(map[string]any)
		origin := spec["origin"].(map[string]any)
		if spec["name"] != d["name"] || origin["transcriptId"] != tr["id"] || origin["source"] != tr["source"] ||
			origin["messageCount"] != float64(len(tr["messages"].([]any))) || d["notes"] == nil ||
			d["confidence"].(float64) < 0 || d["confidence"].(float64) > 1 {
			t.Errorf("%s: distilled %v spec %v", f, d, spec)
		}
	}
	// What the claude-code session did: shell and files, so a computer with the python flavor.
	tr := importFile(t, ts, "testdata/sessions/claude-code.jsonl")
	out := ts.do("POST", "/v1/sessions/distill", map[string]any{"transcriptId": tr["id"]}).json(t)
	d, spec := out["distilled"].(map[string]any), out["spec"].(map[string]any)
	if d["needsComputer"] != true || fmt.Sprint(d["suggestedTools"]) != "[computer files]" ||
		spec["computer"].(map[string]any)["flavor"] != "python" || !strings.Contains(d["persona"].(string), "Always run pytest after a change") ||
		len(d["examples"].([]any)) == 0 || spec["model"] != "auto" { // sonnet needs a key this server lacks (issue 26)
		t.Errorf("claude-code distilled: %v\n%v", d, spec)
	}
	// The planted secrets are in the imported transcript (the import keeps the user's words), so their
	// absence above is the redaction's doing.
	if l := leaks(fmt.Sprint(tr["messages"])); len(l) != 5 {
		t.Fatalf("the fixture lost its planted secrets: only %v", l)
	}
	// The stream's frames do not carry them either.
	st := ts.sse("POST", "/v1/sessions/distill/stream", map[string]any{"transcriptId": tr["id"]})
	for ev := st.next(); ev != nil; ev = st.next() {
		if b, _ := json.Marshal(ev); leaks(string(b)) != nil {
			t.Errorf("stream frame %s leaks %v", b, leaks(string(b)))
		}
	}
	// Secrets are caught before anything is cut or lowercased: an AWS key id across the persona's
	// 400-character cut, and a line said twice (quoted back in the persona) holding the provider key.
	said := "Use the gateway key " + distillEnvKey + " for every call"
	res := ts.do("POST", "/v1/sessions/distill", map[string]any{"transcript": map[string]any{"source": "jsonl", "messages": []any{
		map[string]any{"role": "user", "content": strings.Repeat("context ", 48) + "AKIAQX4TJ2N7VR5LKW3M\n" + said},
		map[string]any{"role": "assistant", "content": "Noted."},
		map[string]any{"role": "user", "content": said},
		map[string]any{"role": "assistant", "content": "Will do."}}}})
	if l := leaks(string(res.body)); res.status != 200 || l != nil {
		t.Errorf("cut or lowercased secrets: %d, %v in %s", res.status, l, res.body)
	}
	// An inline transcript works too.
	if res := ts.do("POST", "/v1/sessions/distill", map[string]any{"transcript": map[string]any{"source": "jsonl",
		"messages": []any{map[string]any{"role": "user", "content": "Summarise my inbox every morning"}}}}); res.status != 200 {
		t.Errorf("inline transcript: %d %s", res.status, res.body)
	}
}

// The stream's frames are exactly API.md's: progress scanning 0.1, extracting 0.4, merging 0.8, then
// done with spec, distilled and yaml, then `event: done`.
func TestDistillStreamFrames(t *testing.T) {
	ts := newTestServer(t)
	tr := importFile(t, ts, "testdata/sessions/codex.jsonl")
	st := ts.sse("POST", "/v1/sessions/distill/stream", map[string]any{"transcriptId": tr["id"]})
	evs := st.all()
	if len(evs) != 4 || !st.done {
		t.Fatalf("frames: %v (event: done read: %v)", evs, st.done)
	}
	for i, want := range []struct {
		stage string
		pct   float64
	}{{"scanning", 0.1}, {"extracting", 0.4}, {"merging", 0.8}} {
		if f := evs[i]; f["type"] != "progress" || f["stage"] != want.stage || f["pct"] != want.pct || len(f) != 3 {
			t.Errorf("frame %d: %v", i, f)
		}
	}
	if f := evs[3]; f["type"] != "done" || f["spec"] == nil || f["distilled"] == nil || f["yaml"] == nil || len(f) != 4 {
		t.Errorf("done frame: %v", f)
	}
}

// useModel: exactly true calls the model (a loopback server) and its fields are used; any other value does
// not; a model that answers badly falls back to the heuristic with a note.
func TestDistillUseModel(t *testing.T) {
	var calls int
	answer := `{"name":"date-fixer","description":"Fixes date bugs","persona":"You fix date bugs and run pytest.","knowledge":[],"examples":[{"user":"fix it","assistant":"done"}]}`
	so := newScriptedOpenAI(t, func(r scriptReq) scriptReply {
		calls++
		return scriptReply{text: answer}
	})
	home := t.TempDir()
	te := newE2E(t, so, home, withEnv(map[string]string{"OPENAI_API_KEY": distillEnvKey, "OPENAI_BASE_URL": so.URL, "HOME": home}))
	out := te.call("POST", "/v1/sessions/import", map[string]any{"content": mustReadFile(t, "testdata/sessions/claude-code.jsonl")}, 200, nil).json(t)
	id := out["transcript"].(map[string]any)["id"]
	for _, v := range []any{"true", 1, false, nil} {
		te.do("POST", "/v1/sessions/distill", map[string]any{"transcriptId": id, "useModel": v})
	}
	if calls != 0 {
		t.Fatalf("the model was called %d times without useModel: true", calls)
	}
	res := te.do("POST", "/v1/sessions/distill", map[string]any{"transcriptId": id, "useModel": true, "model": "openai/gpt-4o-mini"}).json(t)
	d := res["distilled"].(map[string]any)
	if calls != 1 || d["name"] != "date-fixer" || d["persona"] != "You fix date bugs and run pytest." || res["spec"].(map[string]any)["name"] != "date-fixer" ||
		res["spec"].(map[string]any)["model"] != "openai/gpt-4o-mini" || !strings.Contains(fmt.Sprint(d["notes"]), "model: openai/gpt-4o-mini, the distill request's model, which this server reaches") {
		t.Fatalf("useModel: calls %d, %v", calls, d)
	}
	// What the model was sent holds the conversation (the model's request reached the fake server with
	// the transcript in it) but none of the planted secrets, the e-mail or the home path.
	reqs := so.requests()
	if len(reqs) != 1 || !strings.Contains(reqs[0].all(), "Always run pytest after a change") || leaks(reqs[0].all()) != nil {
		t.Fatalf("the model's request leaks %v: %s", leaks(reqs[0].all()), reqs[0].all())
	}
	// A model that writes a secret back into its fields does not get it into the spec.
	answer = `{"name":"date-fixer","description":"Fixes date bugs","persona":"You fix date bugs. Push with ghp_R8x2Kq7LmN4vT9wZ3bY6cF1hJ5sD0gA2eU7i and ` + distillEnvKey + `.","knowledge":[{"title":"AWS","content":"AKIAQX4TJ2N7VR5LKW3M"}],"examples":[]}`
	raw := te.do("POST", "/v1/sessions/distill", map[string]any{"transcriptId": id, "useModel": true, "model": "openai/gpt-4o-mini"})
	if d := raw.json(t)["distilled"].(map[string]any); !strings.HasPrefix(d["persona"].(string), "You fix date bugs.") || leaks(string(raw.body)) != nil {
		t.Fatalf("the model's secrets reached the spec: %v in %s", leaks(string(raw.body)), raw.body)
	}
	answer = "not JSON at all"
	res = te.do("POST", "/v1/sessions/distill", map[string]any{"transcriptId": id, "useModel": true, "model": "openai/gpt-4o-mini"}).json(t)
	if d := res["distilled"].(map[string]any); d["name"] == "date-fixer" || !strings.Contains(fmt.Sprint(d["notes"]), "free heuristic") {
		t.Fatalf("fallback: %v", d)
	}
}

func TestRedactPersonal(t *testing.T) {
	r := newRedactor(func(string) string { return "" })
	in := "mail ana.b+x@example.co.uk, path /home/ana/proj/x.py and /Users/Bob/y, key sk-ant-api03-abcdefghijklmnopqrstuvwxyz"
	out := r.redactPersonal(in)
	for _, leak := range []string{"ana.b+x@example.co.uk", "/home/ana", "/Users/Bob", "sk-ant-api03"} {
		if strings.Contains(out, leak) {
			t.Fatalf("%q kept %q", out, leak)
		}
	}
	if !strings.Contains(out, "~/proj/x.py") || !strings.Contains(out, "[EMAIL]") {
		t.Fatalf("redacted: %q", out)
	}
}

func fuzzImporter(f *testing.F, source string, seeds ...string) {
	for _, s := range seeds {
		if b, err := os.ReadFile("testdata/sessions/" + s); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("{}"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		n := 0
		importerFor(source)(bytes.NewReader(data), func(tr *Transcript) error {
			n++
			if len(tr.Messages) > maxTranscriptMsg {
				t.Fatalf("%d messages kept", len(tr.Messages))
			}
			return nil
		})
		detectSource(data, "")
		if n > len(data)+1 {
			t.Fatalf("%d transcripts from %d bytes", n, len(data))
		}
	})
}

func FuzzImportClaudeCode(f *testing.F) {
	fuzzImporter(f, "claude-code", "claude-code.jsonl", "claude-code-compact.jsonl")
}
func FuzzImportCodex(f *testing.F)    { fuzzImporter(f, "codex", "codex.jsonl") }
func FuzzImportChatGPT(f *testing.F)  { fuzzImporter(f, "chatgpt", "chatgpt.json") }
func FuzzImportGemini(f *testing.F)   { fuzzImporter(f, "gemini", "gemini.jsonl") }
func FuzzImportMarkdown(f *testing.F) { fuzzImporter(f, "markdown", "transcript.md") }
func FuzzImportJSONL(f *testing.F)    { fuzzImporter(f, "jsonl", "messages.jsonl") }
