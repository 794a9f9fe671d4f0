// sessions.go — transcripts: the Transcript shape, source detection, the importers' registry, reading a
// path the server may read, discovery of the sessions people already have, storage, and the
// /v1/sessions endpoints (discover, import, list, get, distill, distill/stream).
//
// Entry points: newSessionService (owned by the server), handleDiscoverSessions, handleImportSession,
// handleListSessions, handleGetSession, handleDistill, handleDistillStream. Each source has its own
// file: sessions_claude.go, sessions_codex.go, sessions_chatgpt.go, sessions_gemini.go, sessions_text.go
// (markdown and jsonl); distillation is sessions_distill.go.
//
// Rules (docs/API.md Sessions, docs/DESIGN.md §7/§7a): a transcript message's content is always a string;
// a tool call is an assistant message with toolName/toolInput, its result a `tool` message; sidechains,
// thinking and system noise are dropped. `source` omitted → detected from the content (then the path);
// an unknown source name → 422 naming the six; unreadable content → E_IMPORT_FAILED saying what was
// expected; a path that cannot be imported, for whatever reason, → one E_IMPORT_FAILED that tells nothing
// of the file (importPath: not its bytes, not whether it exists). A path must be a regular file the server may read: never under the data directory, never a
// device, FIFO or socket, at most maxImportBytes. Imports stream: a large export is read conversation by
// conversation, never held whole twice. Importing the same conversation again returns the stored
// transcript (same id), not a copy: each is keyed by its content hash.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// sessionSources are the allowed values of `source` (cursor: sessions_cursor.go).
var sessionSources = []string{"claude-code", "codex", "chatgpt", "gemini", "markdown", "jsonl", "cursor"}

const (
	maxImportBytes   = 1 << 30 // a file to import; a ChatGPT export of years is a few hundred MB
	maxTranscriptMsg = 200_000 // messages kept of one transcript
	maxMessageChars  = 1 << 20 // characters kept of one message's content
)

// Transcript is an imported conversation (docs/DESIGN.md §7).
type Transcript struct {
	ID        string              `json:"id"`
	Source    string              `json:"source"`
	Title     string              `json:"title"`
	CreatedAt string              `json:"createdAt,omitempty"`
	UpdatedAt string              `json:"updatedAt,omitempty"`
	Origin    *TranscriptOrigin   `json:"origin,omitempty"`
	Messages  []TranscriptMessage `json:"messages"`
	Meta      map[string]any      `json:"meta,omitempty"`
}

// TranscriptOrigin says where a transcript was read from.
type TranscriptOrigin struct {
	Path      string `json:"path,omitempty"`
	SessionID string `json:"sessionId,omitempty"`
}

// TranscriptMessage is one message: content is always a string; a tool call carries toolName/toolInput.
type TranscriptMessage struct {
	Role      string `json:"role"` // system, user, assistant, tool
	Content   string `json:"content"`
	TS        string `json:"ts,omitempty"`
	ToolName  string `json:"toolName,omitempty"`
	ToolInput any    `json:"toolInput,omitempty"`
}

// DiscoveredSession is one row of GET /v1/sessions/discover.
type DiscoveredSession struct {
	ID           string `json:"id"`
	Source       string `json:"source"`
	Title        string `json:"title"`
	MessageCount int    `json:"messageCount"`
	UpdatedAt    string `json:"updatedAt"`
	Path         string `json:"path"`
}

// importer reads one source: r is the whole input; emit is called once per conversation found (a
// ChatGPT export holds many). An importer never holds more than one conversation of its own.
type importer func(r io.Reader, emit func(*Transcript) error) error

func importerFor(source string) importer {
	switch source {
	case "claude-code":
		return importClaudeCode
	case "codex":
		return importCodex
	case "chatgpt":
		return importChatGPT
	case "gemini":
		return importGemini
	case "markdown":
		return importMarkdown
	case "jsonl":
		return importJSONL
	}
	return nil
}

func errUnknownSource(s string) error {
	return errorf(codeSpecInvalid, "source: Invalid enum value. Expected %s, received '%s'", quoteList(sessionSources), s).
		withHint("omit source to detect it from the content")
}

func errImport(format string, a ...any) *apiError {
	return errorf(codeImportFailed, format, a...).
		withHint("import a Claude Code session (.jsonl), a Codex rollout (.jsonl), a ChatGPT conversations.json, a Gemini CLI chat (.json or .jsonl), a Cursor state.vscdb (by path), a markdown transcript (## User / ## Assistant) or JSONL of {role, content}")
}

// detectSource names the source of some input from its first bytes (then its path).
func detectSource(head []byte, path string) string {
	t := bytes.TrimLeft(head, " \t\r\n\ufeff")
	switch {
	case len(t) == 0:
	case t[0] == '[':
		if bytes.Contains(t, []byte(`"mapping"`)) {
			return "chatgpt"
		}
		return ""
	case t[0] == '{':
		// The first line's keys (a first line can be longer than the head: Codex's session_meta carries the
		// whole system prompt, so this reads keys, not JSON).
		line, _, _ := bytes.Cut(t, []byte("\n"))
		has := func(k string) bool { return bytes.Contains(line, []byte(k)) }
		typ := func(v string) bool { return hasKeyValue(line, "type", `"`+v+`"`) }
		switch {
		case typ("session_meta") || typ("response_item") || typ("turn_context"):
			return "codex"
		case has(`"parentUuid"`) || has(`"leafUuid"`) || typ("file-history-snapshot") || has(`"uuid"`) && has(`"sessionId"`):
			return "claude-code"
		case bytes.Contains(t, []byte(`"sessionId"`)) && bytes.Contains(t, []byte(`"projectHash"`)):
			return "gemini" // a .jsonl header line, or a pretty-printed .json chat
		case bytes.Contains(t, []byte(`"mapping"`)) && bytes.Contains(t, []byte(`"current_node"`)):
			return "chatgpt"
		case has(`"role"`) || has(`"messages"`):
			return "jsonl"
		}
	default:
		if looksMarkdownTranscript(string(t)) {
			return "markdown"
		}
	}
	switch p := filepath.ToSlash(path); {
	case strings.Contains(p, "/.claude/projects/"):
		return "claude-code"
	case strings.Contains(p, "/.codex/sessions/") || strings.HasPrefix(filepath.Base(p), "rollout-"):
		return "codex"
	case strings.Contains(p, "/.gemini/"):
		return "gemini"
	case filepath.Base(p) == "conversations.json":
		return "chatgpt"
	case strings.HasSuffix(p, ".md"):
		return "markdown"
	}
	return ""
}

// ---- reading a path ----

// openImportPath opens a path the server may read for an import or a discovery: a regular file (or, for
// discovery, a directory) outside the data directory, no device, FIFO or socket, and not too large.
func (ss *sessionService) checkPath(p string, allowDir bool) (string, fs.FileInfo, error) {
	p, err := ss.expandPath(p)
	if err != nil {
		return "", nil, err
	}
	real, err := filepath.EvalSymlinks(filepath.Clean(p))
	if err != nil {
		return "", nil, errImport("cannot read %s: %v", p, unwrapPathError(err))
	}
	if dataDir, derr := filepath.EvalSymlinks(ss.dataDir); derr == nil && (real == dataDir || strings.HasPrefix(real, dataDir+string(filepath.Separator))) {
		return "", nil, errorf(codeImportFailed, "path %s is inside agentd's data directory, which sessions cannot read", p).
			withHint("import a transcript from elsewhere")
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", nil, errImport("cannot read %s: %v", p, unwrapPathError(err))
	}
	switch {
	case fi.IsDir() && allowDir:
	case fi.IsDir():
		return "", nil, errImport("%s is a directory: import takes one file (GET /v1/sessions/discover?path= lists a directory)", p)
	case !fi.Mode().IsRegular():
		return "", nil, errImport("%s is not a regular file (a device, FIFO or socket is never read)", p)
	case fi.Size() > maxImportBytes:
		return "", nil, errImport("%s is %d MB, more than the %d MB an import reads", p, fi.Size()>>20, maxImportBytes>>20)
	}
	return real, fi, nil
}

// expandPath checks a path's spelling (nothing is read): not empty, no NUL, absolute after ~/.
func (ss *sessionService) expandPath(p string) (string, error) {
	if p == "" || strings.ContainsRune(p, 0) {
		return "", errImport("path is empty or not a path")
	}
	if strings.HasPrefix(p, "~/") {
		p = filepath.Join(ss.home(), p[2:])
	}
	if !filepath.IsAbs(p) {
		return "", errImport("path %q is not absolute", p).withHint("send an absolute path on the server's machine, or the file's content as content")
	}
	return p, nil
}

// importPath imports the file at p. Past the path's spelling, whatever goes wrong (missing, unreadable,
// not a regular file, too large, in the data directory, not a transcript, no messages) is one answer,
// errImportPath: an import never tells of a file it cannot import its bytes, nor whether it exists.
func (ss *sessionService) importPath(ctx context.Context, p, source string) (*Transcript, error) {
	if _, err := ss.expandPath(p); err != nil {
		return nil, err
	}
	file, composerID := splitCursorPath(p)
	real, _, err := ss.checkPath(file, false)
	if err != nil {
		return nil, errImportPath(p)
	}
	if source == "cursor" || isSQLiteFile(real) {
		t, err := ss.importCursor(ctx, real, composerID)
		if err != nil && asAPIError(err).Code == codeImportFailed {
			return nil, errImportPath(p)
		}
		return t, err
	}
	f, err := os.Open(real)
	if err != nil {
		return nil, errImportPath(p)
	}
	defer f.Close()
	t, err := ss.importReader(ctx, f, source, real)
	if err != nil && asAPIError(err).Code == codeImportFailed {
		return nil, errImportPath(p)
	}
	return t, err
}

func errImportPath(p string) *apiError {
	return errImport("cannot import %s: no transcript agentd may read is there (the file is missing or unreadable, "+
		"not a regular file, over %d MB, inside agentd's data directory, or not a session in one of the seven formats — "+
		"a subagent's sidechain file is not one); nothing more is said of a file that cannot be imported", p, maxImportBytes>>20)
}

func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// ---- the service ----

type sessionDeps struct {
	store   *store
	models  *modelService
	log     *slog.Logger
	now     func() time.Time
	getenv  func(string) string
	dataDir string
	maxCost func() float64 // the direct-chat cost ceiling now (config maxCostUsd, reloadable); nil: none
	red     *redactor
}

// sessionService imports, stores, discovers and distils transcripts.
type sessionService struct {
	sessionDeps
	mu    sync.Mutex
	cache map[string]discoverEntry // discovery rows by path, valid while size and mtime hold
}

type discoverEntry struct {
	size  int64
	mtime time.Time
	row   DiscoveredSession
	ok    bool
}

// costCeiling is the direct-chat cost ceiling now.
func (ss *sessionService) costCeiling() float64 {
	if ss.maxCost == nil {
		return 0
	}
	return ss.maxCost()
}

func newSessionService(d sessionDeps) *sessionService {
	return &sessionService{sessionDeps: d, cache: map[string]discoverEntry{}}
}

func (ss *sessionService) home() string {
	if h := ss.getenv("HOME"); h != "" {
		return h
	}
	h, _ := os.UserHomeDir()
	return h
}

// importReader runs one importer over r, saving every conversation; it returns the first.
func (ss *sessionService) importReader(ctx context.Context, r io.Reader, source, path string) (*Transcript, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	head, _ := br.Peek(16 << 10)
	if source == "" {
		if source = detectSource(head, path); source == "" {
			return nil, errImport("could not tell what this is: not a transcript format agentd reads")
		}
	}
	if source == "cursor" {
		return nil, errImport("a Cursor database is imported by its path (a state.vscdb on the server's machine), not as content").
			withHint("send path; GET /v1/sessions/discover?source=cursor lists Cursor's conversations")
	}
	imp := importerFor(source)
	if imp == nil {
		return nil, errUnknownSource(source)
	}
	emit, done := ss.saver(ctx, source, path)
	return done(imp(br, emit))
}

// saver is how an import stores what its importer finds: emit saves each conversation with messages;
// done turns the importer's error and what was saved into the import's answer (the first one).
func (ss *sessionService) saver(ctx context.Context, source, path string) (emit func(*Transcript) error, done func(error) (*Transcript, error)) {
	var first *Transcript
	count := 0
	emit = func(t *Transcript) error {
		if len(t.Messages) == 0 {
			return nil
		}
		ss.finish(t, source, path)
		stored, err := ss.store.SaveTranscript(ctx, t, contentHash(t))
		if err != nil {
			return err
		}
		count++
		if first == nil {
			first = stored
		}
		return nil
	}
	return emit, func(err error) (*Transcript, error) { return ss.saved(source, first, count, err) }
}

func (ss *sessionService) saved(source string, first *Transcript, count int, err error) (*Transcript, error) {
	if err != nil {
		var ae *apiError
		if errors.As(err, &ae) {
			return nil, ae
		}
		return nil, errImport("this is not a readable %s transcript: %v", source, err)
	}
	if first == nil {
		return nil, errImport("no messages found in this %s input", source)
	}
	if count > 1 {
		ss.log.Info("transcripts imported", "source", source, "count", count)
	}
	return first, nil
}

// contentHash identifies a conversation by what it says — source, title, session id and messages — not by
// where it was read from, so importing the same content again (by path or by content) finds the stored one.
func contentHash(t *Transcript) string {
	sid := ""
	if t.Origin != nil {
		sid = t.Origin.SessionID
	}
	b, _ := json.Marshal(struct {
		Source, Title, SessionID string
		Messages                 []TranscriptMessage
	}{t.Source, t.Title, sid, t.Messages})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// finish fills what every transcript has: an id, the source, a title, and times.
func (ss *sessionService) finish(t *Transcript, source, path string) {
	t.ID, t.Source = newID("trn"), source
	if path != "" {
		if t.Origin == nil {
			t.Origin = &TranscriptOrigin{}
		}
		t.Origin.Path = path
	}
	if strings.TrimSpace(t.Title) == "" {
		t.Title = titleFrom(t.Messages)
	}
	t.Title = clip(oneLine(t.Title), 120)
	for _, m := range t.Messages {
		if m.TS != "" && (t.CreatedAt == "" || m.TS < t.CreatedAt) {
			t.CreatedAt = m.TS
		}
		if m.TS > t.UpdatedAt {
			t.UpdatedAt = m.TS
		}
	}
}

// titleFrom is the first user message that is not a tool result, on one line.
func titleFrom(msgs []TranscriptMessage) string {
	for _, m := range msgs {
		if m.Role == "user" && strings.TrimSpace(m.Content) != "" {
			return clip(oneLine(m.Content), 80)
		}
	}
	return "untitled session"
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func hasAnyPrefix(s string, prefixes ...string) bool {
	return slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(s, p) })
}

// clip cuts s to at most n runes, marking the cut.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// textOf keeps a message's text bounded and valid.
func textOf(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "�")
	}
	if len(s) > maxMessageChars {
		s = s[:maxMessageChars] + "\n[… truncated by agentd …]"
		s = strings.ToValidUTF8(s, "")
	}
	return s
}

// appendMsg adds a message, dropping empty ones and keeping the count bounded.
func appendMsg(t *Transcript, m TranscriptMessage) {
	if m.ToolName == "" && strings.TrimSpace(m.Content) == "" {
		return
	}
	if len(t.Messages) >= maxTranscriptMsg {
		return
	}
	m.Content = textOf(m.Content)
	t.Messages = append(t.Messages, m)
}

// ---- discovery ----

// defaultSessionDirs are where the tools keep their sessions under a home directory. Claude Code's are
// under each directory of $CLAUDE_CONFIG_DIR (`:`-separated), ~/.config/claude and ~/.claude. (Cursor's
// databases: cursorDBPaths.)
func defaultSessionDirs(home string, getenv func(string) string) map[string][]string {
	var claude []string
	for _, d := range append(filepath.SplitList(getenv("CLAUDE_CONFIG_DIR")), filepath.Join(home, ".config", "claude"), filepath.Join(home, ".claude")) {
		if p := filepath.Join(d, "projects"); d != "" && filepath.IsAbs(d) && !slices.Contains(claude, p) {
			claude = append(claude, p)
		}
	}
	return map[string][]string{
		"claude-code": claude,
		"codex":       {filepath.Join(home, ".codex", "sessions")},
		"gemini":      {filepath.Join(home, ".gemini", "tmp")},
	}
}

// discover lists sessions newest first. Only each file's head is read (title, source), plus a count of
// its messages by lines (keys matched however the JSON is spaced; where none match, the importer reads
// the file, so a session import reads is never left out); rows are cached while a file's size and mtime
// do not change.
func (ss *sessionService) discover(ctx context.Context, source, root string) ([]DiscoveredSession, error) {
	var roots []string
	if root != "" {
		real, _, err := ss.checkPath(root, true)
		if err != nil {
			return nil, err
		}
		roots = []string{real}
	} else {
		for src, dirs := range defaultSessionDirs(ss.home(), ss.getenv) {
			if source == "" || source == src {
				roots = append(roots, dirs...)
			}
		}
		if source == "" || source == "cursor" {
			roots = append(roots, cursorDBPaths(ss.home(), ss.getenv)...)
		}
	}
	out := []DiscoveredSession{}
	for _, r := range roots {
		filepath.WalkDir(r, func(p string, d fs.DirEntry, err error) error {
			if err != nil || ctx.Err() != nil {
				if d != nil && d.IsDir() && err != nil {
					return filepath.SkipDir
				}
				return nil
			}
			if d.IsDir() {
				return nil
			}
			ext := filepath.Ext(p)
			if ext == ".vscdb" && (source == "" || source == "cursor") {
				out = append(out, discoverCursor(ctx, p)...)
				return nil
			}
			if ext != ".jsonl" && ext != ".json" && ext != ".md" {
				return nil
			}
			if row, ok := ss.discoverFile(p, d); ok && (source == "" || row.Source == source) {
				out = append(out, row)
			}
			return nil
		})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].UpdatedAt > out[j].UpdatedAt })
	return out, nil
}

func (ss *sessionService) discoverFile(p string, d fs.DirEntry) (DiscoveredSession, bool) {
	fi, err := d.Info()
	if err != nil || !fi.Mode().IsRegular() {
		return DiscoveredSession{}, false
	}
	ss.mu.Lock()
	e, hit := ss.cache[p]
	ss.mu.Unlock()
	if hit && e.size == fi.Size() && e.mtime.Equal(fi.ModTime()) {
		return e.row, e.ok
	}
	row, ok := scanSessionFile(p, fi)
	ss.mu.Lock()
	ss.cache[p] = discoverEntry{size: fi.Size(), mtime: fi.ModTime(), row: row, ok: ok}
	ss.mu.Unlock()
	return row, ok
}

// scanSessionFile reads a file's head for its source and title and counts its message lines.
func scanSessionFile(p string, fi fs.FileInfo) (DiscoveredSession, bool) {
	f, err := os.Open(p)
	if err != nil {
		return DiscoveredSession{}, false
	}
	defer f.Close()
	head := make([]byte, 32<<10)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	source := detectSource(head, p)
	if source == "" || source == "chatgpt" { // an export is imported by path, not listed
		return DiscoveredSession{}, false
	}
	row := DiscoveredSession{ID: strings.TrimSuffix(filepath.Base(p), filepath.Ext(p)), Source: source, Path: p,
		UpdatedAt: timestamp(fi.ModTime())}
	if source == "claude-code" && strings.HasPrefix(row.ID, "agent-") {
		return DiscoveredSession{}, false // a subagent's sidechain, not a session
	}
	switch {
	case !strings.HasSuffix(p, ".jsonl"): // a .json chat or a markdown file: read it whole (bounded)
		if t := quickImport(p, source); t != nil {
			row.Title, row.MessageCount = firstNonEmpty(t.Title, titleFrom(t.Messages)), len(t.Messages)
		}
	default: // a line format: the title from its head (cut at a line, it is a shorter valid session), and
		// the message lines counted without decoding them — an estimate (a Gemini record written twice,
		// Codex's injected context count too) that keeps 2,000 sessions listing in well under a second
		row.Title = headTitle(head, source)
		f.Seek(0, io.SeekStart)
		row.MessageCount = countMessageLines(f, source)
		if row.MessageCount == 0 { // before dropping the file, the importer has the last word: discovery
			// never leaves out a session that import reads
			if t := quickImport(p, source); t != nil {
				row.Title, row.MessageCount = firstNonEmpty(row.Title, t.Title, titleFrom(t.Messages)), len(t.Messages)
			}
		}
	}
	if row.Title == "" {
		row.Title = "untitled session"
	}
	return row, row.MessageCount > 0
}

// headTitle finds a session's title in its first lines by decoding only the lines that can hold it: a
// Claude Code summary, else the first message the user typed.
func headTitle(head []byte, source string) string {
	for _, line := range bytes.Split(head, []byte("\n")) {
		var l struct {
			Type        string `json:"type"`
			Summary     string `json:"summary"`
			IsSidechain bool   `json:"isSidechain"`
			IsMeta      bool   `json:"isMeta"`
			IsSummary   bool   `json:"isCompactSummary"` // Claude Code's own summary after /compact
			Role        string `json:"role"`
			Content     json.RawMessage
			Message     struct {
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content"`
			} `json:"message"`
			Payload struct {
				Type    string         `json:"type"`
				Role    string         `json:"role"`
				Content []codexContent `json:"content"`
			} `json:"payload"`
		}
		if !bytes.Contains(line, []byte(`user`)) && !bytes.Contains(line, []byte(`summary`)) || json.Unmarshal(line, &l) != nil {
			continue
		}
		text := ""
		switch source {
		case "claude-code":
			if l.Type == "summary" && l.Summary != "" {
				return l.Summary
			}
			if l.Type == "user" && !l.IsSidechain && !l.IsMeta && !l.IsSummary {
				if err := json.Unmarshal(l.Message.Content, &text); err != nil {
					text = claudeResultText(l.Message.Content)
				}
				if claudeNoise(text) {
					text = ""
				}
			}
		case "codex":
			if l.Payload.Type == "message" && l.Payload.Role == "user" && len(l.Payload.Content) > 0 {
				if text = l.Payload.Content[0].Text; codexInjected(text) {
					text = ""
				}
			}
		case "gemini":
			if l.Type == "user" {
				text = partsText(l.Content)
			}
		default:
			if l.Role == "user" {
				text = partsText(l.Content)
			}
		}
		if strings.TrimSpace(text) != "" {
			return clip(oneLine(text), 80)
		}
	}
	return ""
}

// quickImport reads a file whole when it is small.
func quickImport(p, source string) *Transcript {
	f, err := os.Open(p)
	if err != nil {
		return nil
	}
	defer f.Close()
	var first *Transcript
	importerFor(source)(io.LimitReader(f, 8<<20), func(t *Transcript) error {
		if first == nil {
			first = t
		}
		return nil
	})
	return first
}

// countMessageLines counts the lines that hold a conversation message, by their type key (however the
// JSON is spaced: a session re-serialised by Python's json.dumps has `"type": "user"`).
func countMessageLines(r io.Reader, source string) int {
	var types []string
	switch source {
	case "claude-code":
		types = []string{`"user"`, `"assistant"`}
	case "codex":
		types = []string{`"message"`, `"function_call"`, `"custom_tool_call"`}
	case "gemini":
		types = []string{`"user"`, `"gemini"`}
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	n := 0
	for sc.Scan() {
		line := sc.Bytes()
		if hasKeyValue(line, "isSidechain", "true") {
			continue
		}
		if types == nil {
			if bytes.Contains(line, []byte(`"role"`)) {
				n++
			}
			continue
		}
		for _, v := range types {
			if hasKeyValue(line, "type", v) {
				n++
				break
			}
		}
	}
	return n
}

// hasKeyValue: the JSON text holds "key" followed, past any whitespace and the colon, by the literal
// value (a quoted string or a bare token), as encoders write it compact or spaced. It reads keys, not
// JSON: a key inside a string value can match, which a count that is an estimate allows.
func hasKeyValue(b []byte, key, value string) bool {
	k := []byte(`"` + key + `"`)
	for {
		i := bytes.Index(b, k)
		if i < 0 {
			return false
		}
		b = b[i+len(k):]
		rest := bytes.TrimLeft(b, " \t\r\n")
		if len(rest) == 0 || rest[0] != ':' {
			continue
		}
		rest = bytes.TrimLeft(rest[1:], " \t\r\n")
		if bytes.HasPrefix(rest, []byte(value)) {
			return true
		}
	}
}

// ---- endpoints ----

func (s *server) handleDiscoverSessions(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	source := q.Get("source")
	if source != "" && !slices.Contains(sessionSources, source) {
		return errUnknownSource(source)
	}
	rows, err := s.sessions.discover(r.Context(), source, q.Get("path"))
	return reply(w, http.StatusOK, map[string]any{"sessions": rows}, err)
}

func (s *server) handleImportSession(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Path    *string `json:"path"`
		Content *string `json:"content"`
		Source  string  `json:"source"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	if body.Source != "" && !slices.Contains(sessionSources, body.Source) {
		return errUnknownSource(body.Source)
	}
	var t *Transcript
	var err error
	switch {
	case body.Content != nil && *body.Content != "":
		path := ""
		if body.Path != nil {
			path = *body.Path // a name for detection only; nothing is read from it
		}
		t, err = s.sessions.importReader(r.Context(), strings.NewReader(*body.Content), body.Source, path)
	case body.Path != nil && *body.Path != "":
		t, err = s.sessions.importPath(r.Context(), *body.Path, body.Source)
	default:
		return errImport("import needs path or content")
	}
	return reply(w, http.StatusOK, map[string]any{"transcript": t}, err)
}

// handleListSessions lists stored transcripts, newest first (an addition the contract leaves room for).
func (s *server) handleListSessions(w http.ResponseWriter, r *http.Request) error {
	limit := 100
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return errorf(codeSpecInvalid, "limit: expected an integer, received %q", v).withHint("send limit between 1 and 500")
		}
		limit = min(max(n, 1), 500)
	}
	rows, err := s.store.ListTranscripts(r.Context(), limit)
	return reply(w, http.StatusOK, map[string]any{"sessions": rows}, err)
}

func (s *server) handleGetSession(w http.ResponseWriter, r *http.Request) error {
	t, err := s.store.GetTranscript(r.Context(), r.PathValue("id"))
	return reply(w, http.StatusOK, map[string]any{"transcript": t}, err)
}

func errTranscriptNotFound(id string) *apiError {
	return errorf(codeTranscriptNotFound, "transcript %q not found", id).withHint("list stored transcripts with GET /v1/sessions")
}

// distillBody is the body of distill and distill/stream. useModel counts only when it is exactly true.
type distillBody struct {
	TranscriptID string          `json:"transcriptId"`
	Transcript   *Transcript     `json:"transcript"`
	UseModel     json.RawMessage `json:"useModel"`
	Model        string          `json:"model"`
}

func (s *server) readDistill(r *http.Request) (*Transcript, bool, string, error) {
	var b distillBody
	if err := decode(r, &b); err != nil {
		return nil, false, "", err
	}
	useModel := string(bytes.TrimSpace(b.UseModel)) == "true"
	switch {
	case b.Transcript != nil:
		if len(b.Transcript.Messages) == 0 {
			return nil, false, "", errImport("the transcript has no messages")
		}
		return b.Transcript, useModel, b.Model, nil
	case b.TranscriptID != "":
		t, err := s.store.GetTranscript(r.Context(), b.TranscriptID)
		return t, useModel, b.Model, err
	}
	return nil, false, "", errImport("distill needs transcriptId or transcript")
}

func (s *server) handleDistill(w http.ResponseWriter, r *http.Request) error {
	t, useModel, model, err := s.readDistill(r)
	if err != nil {
		return err
	}
	res := s.sessions.distill(r.Context(), t, useModel, model, nil)
	writeJSON(w, http.StatusOK, map[string]any{"distilled": res.Distilled, "spec": res.Spec, "yaml": res.YAML})
	return nil
}

func (s *server) handleDistillStream(w http.ResponseWriter, r *http.Request) error {
	t, useModel, model, err := s.readDistill(r)
	if err != nil {
		return err
	}
	sse := newSSE(w, ssePingEvery)
	defer sse.close()
	res := s.sessions.distill(r.Context(), t, useModel, model, func(stage string, pct float64) {
		sse.send(map[string]any{"type": "progress", "stage": stage, "pct": pct})
	})
	sse.send(map[string]any{"type": "done", "spec": res.Spec, "distilled": res.Distilled, "yaml": res.YAML})
	return nil
}
