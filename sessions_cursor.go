// sessions_cursor.go — Cursor's chats: the SQLite key-value store state.vscdb that Cursor (a VS Code
// fork) keeps under its user directory.
//
// Entry points: importCursorDB (an import of a path whose file is a SQLite database; a path ending in
// `#<composerId>` imports that one conversation), discoverCursor (one discovery row per conversation in
// the default locations), cursorDBPaths (those locations).
// Schema (reverse-engineered by Cursor's users; both tables are `(key TEXT UNIQUE ON CONFLICT REPLACE,
// value BLOB)`): table cursorDiskKV, key `composerData:<composerId>` = the conversation (name, createdAt
// and lastUpdatedAt in ms, and either fullConversationHeadersOnly [{bubbleId, type}] with each message at
// `bubbleId:<composerId>:<bubbleId>`, or an inline `conversation` array); a message ("bubble") has type
// 1 (user) or 2 (assistant), text, and for a tool call toolFormerData {name, rawArgs, result}. Older
// Cursor kept its chat panel in ItemTable under `workbench.panel.aichat.view.aichat.chatdata` ({tabs:
// [{tabId, chatTitle, bubbles: [{type: user|ai, text}]}]}); both are read.
// Rules: the database is opened read-only (Cursor may have it open); thinking and empty bubbles are
// dropped; a conversation with no message is skipped; values are bounded like every import.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
)

// sqliteMagic opens every SQLite database file.
const sqliteMagic = "SQLite format 3\x00"

// cursorDBPaths are the state.vscdb files Cursor keeps its conversations in, on this OS: the global
// one (composer and agent chats) and each workspace's (older chat panels).
func cursorDBPaths(home string, getenv func(string) string) []string {
	var users []string
	switch runtime.GOOS {
	case "darwin":
		users = []string{filepath.Join(home, "Library", "Application Support", "Cursor", "User")}
	case "windows":
		if a := getenv("APPDATA"); a != "" {
			users = []string{filepath.Join(a, "Cursor", "User")}
		}
	default:
		cfg := getenv("XDG_CONFIG_HOME")
		if cfg == "" {
			cfg = filepath.Join(home, ".config")
		}
		users = []string{filepath.Join(cfg, "Cursor", "User")}
	}
	var out []string
	for _, u := range users {
		out = append(out, filepath.Join(u, "globalStorage", "state.vscdb"))
		ws, _ := filepath.Glob(filepath.Join(u, "workspaceStorage", "*", "state.vscdb"))
		out = append(out, ws...)
	}
	return out
}

// openCursorDB opens a state.vscdb read-only.
func openCursorDB(path string) (*sql.DB, error) {
	q := url.Values{"mode": {"ro"}}
	q.Add("_pragma", "busy_timeout(2000)")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	return db, nil
}

// cursorBubble is one Cursor message.
type cursorBubble struct {
	BubbleID       string `json:"bubbleId"`
	Type           int    `json:"type"` // 1 user, 2 assistant
	Text           string `json:"text"`
	CreatedAt      any    `json:"createdAt"`
	ToolFormerData *struct {
		Name    string `json:"name"`
		RawArgs string `json:"rawArgs"`
		Result  string `json:"result"`
	} `json:"toolFormerData"`
}

type cursorComposer struct {
	ComposerID    string         `json:"composerId"`
	Name          string         `json:"name"`
	Subtitle      string         `json:"subtitle"`
	CreatedAt     int64          `json:"createdAt"`
	LastUpdatedAt int64          `json:"lastUpdatedAt"`
	Headers       []cursorBubble `json:"fullConversationHeadersOnly"`
	Conversation  []cursorBubble `json:"conversation"`
}

// cursorConversations reads every conversation of the database (only composerID's when it is set),
// calling emit for each in order of last update, newest first.
func cursorConversations(ctx context.Context, path, composerID string, emit func(*Transcript) error) error {
	db, err := openCursorDB(path)
	if err != nil {
		return err
	}
	defer db.Close()
	var ts []*Transcript
	if hasTable(ctx, db, "cursorDiskKV") {
		q, arg := `SELECT value FROM cursorDiskKV WHERE key LIKE 'composerData:%' AND key > ?`, ""
		if composerID != "" {
			q, arg = `SELECT value FROM cursorDiskKV WHERE key = ?`, "composerData:"+composerID
		}
		rows, err := db.QueryContext(ctx, q, arg)
		if err != nil {
			return err
		}
		var comps []cursorComposer
		for rows.Next() {
			var v []byte
			var c cursorComposer
			if rows.Scan(&v) == nil && json.Unmarshal(v, &c) == nil && c.ComposerID != "" {
				comps = append(comps, c)
			}
		}
		rows.Close()
		for _, c := range comps {
			if t := cursorComposerTranscript(ctx, db, c); t != nil {
				ts = append(ts, t)
			}
		}
	}
	if composerID == "" && hasTable(ctx, db, "ItemTable") {
		ts = append(ts, cursorChatPanel(ctx, db)...)
	}
	sort.SliceStable(ts, func(i, j int) bool { return ts[i].UpdatedAt > ts[j].UpdatedAt })
	for _, t := range ts {
		if err := emit(t); err != nil {
			return err
		}
	}
	return nil
}

func hasTable(ctx context.Context, db *sql.DB, name string) bool {
	var n int
	db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, name).Scan(&n)
	return n == 1
}

func cursorMillis(ms int64) string {
	if ms <= 0 {
		return ""
	}
	return timestamp(time.UnixMilli(ms))
}

// cursorComposerTranscript builds one composer's transcript from its headers' bubbles (or its inline
// conversation).
func cursorComposerTranscript(ctx context.Context, db *sql.DB, c cursorComposer) *Transcript {
	t := &Transcript{Title: firstNonEmpty(c.Name, c.Subtitle), CreatedAt: cursorMillis(c.CreatedAt),
		UpdatedAt: cursorMillis(max(c.LastUpdatedAt, c.CreatedAt)), Origin: &TranscriptOrigin{SessionID: c.ComposerID},
		Meta: map[string]any{"cursorComposerId": c.ComposerID}}
	bubbles := c.Conversation
	if len(c.Headers) > 0 {
		bubbles = nil
		for _, h := range c.Headers {
			var v []byte
			if db.QueryRowContext(ctx, `SELECT value FROM cursorDiskKV WHERE key = ?`, "bubbleId:"+c.ComposerID+":"+h.BubbleID).Scan(&v) != nil {
				continue
			}
			var b cursorBubble
			if json.Unmarshal(v, &b) == nil {
				if b.Type == 0 {
					b.Type = h.Type
				}
				bubbles = append(bubbles, b)
			}
		}
	}
	for _, b := range bubbles {
		addCursorBubble(t, b)
	}
	if len(t.Messages) == 0 {
		return nil
	}
	return t
}

func addCursorBubble(t *Transcript, b cursorBubble) {
	switch b.Type {
	case 1:
		appendMsg(t, TranscriptMessage{Role: "user", Content: b.Text})
	case 2:
		appendMsg(t, TranscriptMessage{Role: "assistant", Content: b.Text})
		if tf := b.ToolFormerData; tf != nil && tf.Name != "" {
			var input any
			if json.Unmarshal([]byte(tf.RawArgs), &input) != nil && tf.RawArgs != "" {
				input = tf.RawArgs
			}
			appendMsg(t, TranscriptMessage{Role: "assistant", ToolName: tf.Name, ToolInput: input})
			if tf.Result != "" {
				appendMsg(t, TranscriptMessage{Role: "tool", ToolName: tf.Name, Content: tf.Result})
			}
		}
	}
}

// cursorChatPanel reads the older chat panel's tabs from ItemTable.
func cursorChatPanel(ctx context.Context, db *sql.DB) []*Transcript {
	var v []byte
	if db.QueryRowContext(ctx, `SELECT value FROM ItemTable WHERE key = 'workbench.panel.aichat.view.aichat.chatdata'`).Scan(&v) != nil {
		return nil
	}
	var data struct {
		Tabs []struct {
			TabID        string `json:"tabId"`
			ChatTitle    string `json:"chatTitle"`
			LastSendTime int64  `json:"lastSendTime"`
			Bubbles      []struct {
				Type string `json:"type"` // user or ai
				Text string `json:"text"`
			} `json:"bubbles"`
		} `json:"tabs"`
	}
	if json.Unmarshal(v, &data) != nil {
		return nil
	}
	var out []*Transcript
	for _, tab := range data.Tabs {
		t := &Transcript{Title: tab.ChatTitle, UpdatedAt: cursorMillis(tab.LastSendTime), Origin: &TranscriptOrigin{SessionID: tab.TabID}}
		for _, b := range tab.Bubbles {
			role := "assistant"
			if b.Type == "user" {
				role = "user"
			}
			appendMsg(t, TranscriptMessage{Role: role, Content: b.Text})
		}
		if len(t.Messages) > 0 {
			out = append(out, t)
		}
	}
	return out
}

// isSQLiteFile reports whether the file at p is a SQLite database.
func isSQLiteFile(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, len(sqliteMagic))
	n, _ := f.Read(head)
	return string(head[:n]) == sqliteMagic
}

// splitCursorPath separates a `<db>#<composerId>` path (a discovery row's) into the file and the id.
func splitCursorPath(p string) (file, composerID string) {
	if i := strings.LastIndex(p, ".vscdb#"); i >= 0 {
		return p[:i+len(".vscdb")], p[i+len(".vscdb#"):]
	}
	return p, ""
}

// discoverCursor lists each conversation of a Cursor database as a discovery row whose path names it.
func discoverCursor(ctx context.Context, dbPath string) []DiscoveredSession {
	var out []DiscoveredSession
	cursorConversations(ctx, dbPath, "", func(t *Transcript) error {
		row := DiscoveredSession{ID: t.Origin.SessionID, Source: "cursor", Title: firstNonEmpty(t.Title, titleFrom(t.Messages)),
			MessageCount: len(t.Messages), UpdatedAt: t.UpdatedAt, Path: dbPath}
		if _, isComposer := t.Meta["cursorComposerId"]; isComposer {
			row.Path = dbPath + "#" + t.Origin.SessionID
		}
		out = append(out, row)
		return nil
	})
	return out
}

// importCursor imports the conversations of a Cursor database (one, with composerID), saving each; it
// returns the first (the most recently updated).
func (ss *sessionService) importCursor(ctx context.Context, real, composerID string) (*Transcript, error) {
	emit, done := ss.saver(ctx, "cursor", real)
	err := cursorConversations(ctx, real, composerID, emit)
	if err != nil {
		if _, isAPI := err.(*apiError); !isAPI {
			err = errImport("this is not a Cursor database agentd can read: %v", err)
		}
	}
	return done(err)
}
