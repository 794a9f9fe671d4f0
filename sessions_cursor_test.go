package main

import (
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
)

// cursorTestDB builds a state.vscdb in Cursor's schema: both key-value tables, a modern composer whose
// messages are separate bubbles (one with a tool call), a legacy composer with an inline conversation,
// an empty composer, and (in the workspace database) the old chat panel's tabs.
func cursorTestDB(t *testing.T, path string, kv, items map[string]any) {
	t.Helper()
	os.MkdirAll(filepath.Dir(path), 0o755)
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		`CREATE TABLE ItemTable (key TEXT UNIQUE ON CONFLICT REPLACE, value BLOB)`,
		`CREATE TABLE cursorDiskKV (key TEXT UNIQUE ON CONFLICT REPLACE, value BLOB)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	for table, m := range map[string]map[string]any{"cursorDiskKV": kv, "ItemTable": items} {
		for k, v := range m {
			b, _ := json.Marshal(v)
			if _, err := db.Exec(`INSERT INTO `+table+` (key, value) VALUES (?, ?)`, k, b); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func cursorGlobalFixture() map[string]any {
	return map[string]any{
		"composerData:c-modern": map[string]any{"_v": 10, "composerId": "c-modern", "name": "Fix the parser",
			"createdAt": 1764000000000, "lastUpdatedAt": 1764000600000, "status": "completed", "conversationMap": map[string]any{},
			"fullConversationHeadersOnly": []any{
				map[string]any{"bubbleId": "b1", "type": 1},
				map[string]any{"bubbleId": "b2", "type": 2, "serverBubbleId": "s2"},
				map[string]any{"bubbleId": "b3", "type": 2},
				map[string]any{"bubbleId": "b4", "type": 2}}},
		"bubbleId:c-modern:b1": map[string]any{"_v": 3, "type": 1, "bubbleId": "b1", "text": "Fix the failing test in parser.go", "richText": "{}"},
		"bubbleId:c-modern:b2": map[string]any{"_v": 3, "type": 2, "bubbleId": "b2", "text": "Let me read the file.",
			"thinking":       map[string]any{"text": "private reasoning"},
			"toolFormerData": map[string]any{"name": "read_file", "rawArgs": `{"target_file":"parser.go"}`, "result": `{"contents":"package parser"}`, "status": "completed"}},
		"bubbleId:c-modern:b3": map[string]any{"_v": 3, "type": 2, "bubbleId": "b3", "text": ""},
		"bubbleId:c-modern:b4": map[string]any{"_v": 3, "type": 2, "bubbleId": "b4", "text": "Fixed: the tokenizer skipped a quote."},
		"composerData:c-legacy": map[string]any{"composerId": "c-legacy", "createdAt": 1763000000000, "subtitle": "Greeting",
			"conversation": []any{map[string]any{"type": 1, "bubbleId": "x1", "text": "hello"}, map[string]any{"type": 2, "bubbleId": "x2", "text": "hi there"}}},
		"composerData:c-empty":    map[string]any{"composerId": "c-empty", "createdAt": 1765000000000, "fullConversationHeadersOnly": []any{}},
		"checkpointId:c-modern:z": map[string]any{"files": []any{}},
	}
}

func TestCursorSessions(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the fixture sits in Linux's default location")
	}
	home := t.TempDir()
	user := filepath.Join(home, ".config", "Cursor", "User")
	global := filepath.Join(user, "globalStorage", "state.vscdb")
	cursorTestDB(t, global, cursorGlobalFixture(), map[string]any{"some.setting": true})
	cursorTestDB(t, filepath.Join(user, "workspaceStorage", "9f2c", "state.vscdb"), nil, map[string]any{
		"workbench.panel.aichat.view.aichat.chatdata": map[string]any{"tabs": []any{map[string]any{"tabId": "tab-1", "chatTitle": "Old panel chat",
			"lastSendTime": 1762000000000, "bubbles": []any{map[string]any{"type": "user", "text": "what does main do?"}, map[string]any{"type": "ai", "text": "It starts the server."}}}}},
	})
	ts := newTestServer(t, withEnv(map[string]string{"HOME": home}))

	// Discovery in Cursor's default locations: one row per conversation, newest first; the empty one is left out.
	var disc struct{ Sessions []DiscoveredSession }
	ts.call("GET", "/v1/sessions/discover?source=cursor", nil, 200, &disc)
	var got []string
	for _, r := range disc.Sessions {
		got = append(got, r.Title+"|"+r.ID+"|"+strings.TrimPrefix(r.Path, home))
	}
	want := []string{"Fix the parser|c-modern|/.config/Cursor/User/globalStorage/state.vscdb#c-modern",
		"Greeting|c-legacy|/.config/Cursor/User/globalStorage/state.vscdb#c-legacy",
		"Old panel chat|tab-1|/.config/Cursor/User/workspaceStorage/9f2c/state.vscdb"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") || disc.Sessions[0].MessageCount != 5 || disc.Sessions[0].Source != "cursor" {
		t.Fatalf("discovered:\n%s\n%+v", strings.Join(got, "\n"), disc.Sessions)
	}
	// Import one conversation by its row's path: the thread in order, the tool call and its result, no thinking.
	var imp struct{ Transcript Transcript }
	ts.call("POST", "/v1/sessions/import", map[string]any{"path": disc.Sessions[0].Path}, 200, &imp)
	tr := imp.Transcript
	var lines []string
	for _, m := range tr.Messages {
		in, _ := json.Marshal(m.ToolInput)
		lines = append(lines, m.Role+":"+m.ToolName+":"+m.Content+":"+string(in))
	}
	wantMsgs := []string{"user::Fix the failing test in parser.go:null", "assistant::Let me read the file.:null",
		`assistant:read_file::{"target_file":"parser.go"}`, `tool:read_file:{"contents":"package parser"}:null`,
		"assistant::Fixed: the tokenizer skipped a quote.:null"}
	if tr.Source != "cursor" || tr.Title != "Fix the parser" || strings.Join(lines, "\n") != strings.Join(wantMsgs, "\n") ||
		tr.Origin == nil || tr.Origin.SessionID != "c-modern" || tr.Origin.Path != global || strings.Contains(string(mustMarshal(tr)), "private reasoning") {
		t.Fatalf("imported:\n%s\n%+v", strings.Join(lines, "\n"), tr)
	}
	// The whole database: every conversation saved, the newest returned; the same import again is the same transcript.
	ts.call("POST", "/v1/sessions/import", map[string]any{"path": global}, 200, &imp)
	if imp.Transcript.Title != "Fix the parser" || imp.Transcript.ID != tr.ID {
		t.Fatalf("whole db: %+v (first import %s)", imp.Transcript, tr.ID)
	}
	var list struct{ Sessions []map[string]any }
	ts.call("GET", "/v1/sessions", nil, 200, &list)
	if len(list.Sessions) != 2 {
		t.Fatalf("stored: %+v", list.Sessions)
	}
	// A Cursor database is imported by path; as content it is refused with a clear error.
	ts.wantError("POST", "/v1/sessions/import", map[string]any{"content": "x", "source": "cursor"}, 500, codeImportFailed)
	// Not a Cursor database: the one path error that tells nothing.
	other := filepath.Join(t.TempDir(), "other.db")
	db, _ := sql.Open("sqlite", "file:"+other)
	db.Exec(`CREATE TABLE t (x)`)
	db.Close()
	ts.wantError("POST", "/v1/sessions/import", map[string]any{"path": other}, 500, codeImportFailed)
}

// Claude Code keeps its sessions under $CLAUDE_CONFIG_DIR (a `:`-separated list) or ~/.config/claude as
// well as ~/.claude: discovery looks in each.
func TestClaudeConfigDirs(t *testing.T) {
	home, a, b := t.TempDir(), t.TempDir(), t.TempDir()
	fixture, _ := os.ReadFile("testdata/sessions/claude-code.jsonl")
	put := func(p string) {
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, fixture, 0o644)
	}
	put(filepath.Join(b, "projects", "-work-x", "s-from-env.jsonl"))
	put(filepath.Join(home, ".config", "claude", "projects", "-work-y", "s-from-xdg.jsonl"))
	put(filepath.Join(home, ".claude", "projects", "-work-z", "s-from-dot.jsonl"))
	ts := newTestServer(t, withEnv(map[string]string{"HOME": home, "CLAUDE_CONFIG_DIR": a + ":" + b + "::relative"}))
	var disc struct{ Sessions []DiscoveredSession }
	ts.call("GET", "/v1/sessions/discover?source=claude-code", nil, 200, &disc)
	var ids []string
	for _, r := range disc.Sessions {
		ids = append(ids, r.ID)
	}
	sort.Strings(ids)
	if strings.Join(ids, ",") != "s-from-dot,s-from-env,s-from-xdg" {
		t.Fatalf("discovered %v", ids)
	}
}
