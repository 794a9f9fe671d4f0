// sessions_claude.go — Claude Code sessions: ~/.claude/projects/<project>/<session>.jsonl.
//
// Entry point: importClaudeCode (an importer, sessions.go).
//
// Rules (docs/DESIGN.md §7a): one JSON object per line; the thread is rebuilt by walking parentUuid back
// from the last non-sidechain line, so abandoned edit branches drop out. Parallel tool calls branch the
// chain (each tool_use is a line, each result points at its own call), so the calls of an assistant
// message on the thread and their results are kept too. /compact writes a compact_boundary line whose
// parentUuid is null and whose logicalParentUuid is the last line before it: the walk follows it, so the
// turns before a compaction are kept, and the isCompactSummary message after it (the tool's own summary of
// those turns, not the user's words) is dropped. summary lines give the title; file-history-snapshot,
// progress and system lines, sidechains (subagents), thinking, meta messages and interruption notices are
// dropped. A file of sidechains only is not a session (E_IMPORT_FAILED).
package main

import (
	"bufio"
	"encoding/json"
	"io"
	"strings"
)

type claudeLine struct {
	Type        string          `json:"type"`
	UUID        string          `json:"uuid"`
	ParentUUID  *string         `json:"parentUuid"`
	LogicalUUID string          `json:"logicalParentUuid"` // a compact_boundary's link across the break
	IsSummary   bool            `json:"isCompactSummary"`
	IsSidechain bool            `json:"isSidechain"`
	IsMeta      bool            `json:"isMeta"`
	SessionID   string          `json:"sessionId"`
	Timestamp   string          `json:"timestamp"`
	Summary     string          `json:"summary"`
	LeafUUID    string          `json:"leafUuid"`
	Message     json.RawMessage `json:"message"`

	role, msgID   string   // decoded once at scan time, for the thread walk
	uses, results []string // tool_use ids called, tool_use ids answered
}

type claudeMessage struct {
	ID      string          `json:"id"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type claudePart struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     any             `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

func importClaudeCode(r io.Reader, emit func(*Transcript) error) error {
	byUUID := map[string]*claudeLine{}
	var order []*claudeLine
	summaries := map[string]string{} // leafUuid → summary
	sidechains, lines := 0, 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		raw := sc.Bytes()
		if len(strings.TrimSpace(string(raw))) == 0 {
			continue
		}
		var l claudeLine
		if json.Unmarshal(raw, &l) != nil {
			continue // a torn last line, or a line of another shape
		}
		lines++
		switch {
		case l.Type == "summary":
			summaries[l.LeafUUID] = l.Summary
			continue
		case l.UUID == "":
			continue
		case l.IsSidechain:
			sidechains++
			continue
		}
		var head struct { // the thread walk needs ids only; the text is decoded once, at the end
			ID      string `json:"id"`
			Role    string `json:"role"`
			Content []struct {
				Type      string `json:"type"`
				ID        string `json:"id"`
				ToolUseID string `json:"tool_use_id"`
			} `json:"content"`
		}
		json.Unmarshal(l.Message, &head)
		l.role, l.msgID = firstNonEmpty(head.Role, l.Type), head.ID
		for _, p := range head.Content {
			switch p.Type {
			case "tool_use":
				l.uses = append(l.uses, p.ID)
			case "tool_result":
				l.results = append(l.results, p.ToolUseID)
			}
		}
		byUUID[l.UUID] = &l
		order = append(order, &l)
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(order) == 0 {
		if sidechains > 0 {
			return errImport("this Claude Code file holds only a subagent's sidechain (agent-*.jsonl), not a session; import the session file beside it")
		}
		if lines == 0 {
			return errImport("no Claude Code lines found")
		}
		return nil
	}
	// The thread: back from the last line along parentUuid.
	keep := map[string]bool{}
	for l := order[len(order)-1]; l != nil; {
		if keep[l.UUID] {
			break // a cycle in a damaged file
		}
		keep[l.UUID] = true
		switch {
		case l.ParentUUID != nil:
			l = byUUID[*l.ParentUUID]
		case l.LogicalUUID != "":
			l = byUUID[l.LogicalUUID] // nil when the turns before the compaction are in another file
		default:
			l = nil
		}
	}
	// Parallel tool calls: the other lines of an assistant message on the thread, and the results of
	// every kept call.
	msgIDs, callIDs := map[string]bool{}, map[string]bool{}
	for changed := true; changed; {
		changed = false
		for _, l := range order {
			if keep[l.UUID] {
				if l.role == "assistant" && l.msgID != "" {
					msgIDs[l.msgID] = true
				}
				for _, id := range l.uses {
					callIDs[id] = true
				}
				continue
			}
			if l.ParentUUID == nil || !keep[*l.ParentUUID] {
				continue
			}
			add := l.role == "assistant" && l.msgID != "" && msgIDs[l.msgID]
			for _, id := range l.results {
				add = add || callIDs[id]
			}
			if add {
				keep[l.UUID], changed = true, true
			}
		}
	}
	t := &Transcript{Meta: map[string]any{}}
	names := map[string]string{} // tool_use id → tool name
	for i, l := range order {
		order[i] = nil // a line is read once more, then let go: a long session is not held twice
		if !keep[l.UUID] {
			continue
		}
		if s := summaries[l.UUID]; s != "" {
			t.Title = s
		}
		if l.SessionID != "" && t.Origin == nil {
			t.Origin = &TranscriptOrigin{SessionID: l.SessionID}
		}
		if (l.Type != "user" && l.Type != "assistant") || l.IsMeta || l.IsSummary {
			continue
		}
		m, parts := claudeParts(l)
		if parts == nil { // a plain string
			var s string
			json.Unmarshal(m.Content, &s)
			if !claudeNoise(s) {
				appendMsg(t, TranscriptMessage{Role: m.Role, Content: s, TS: l.Timestamp})
			}
			continue
		}
		var text []string
		flush := func() {
			if len(text) > 0 {
				appendMsg(t, TranscriptMessage{Role: m.Role, Content: strings.Join(text, "\n"), TS: l.Timestamp})
				text = nil
			}
		}
		for _, p := range parts {
			switch p.Type {
			case "text":
				if !claudeNoise(p.Text) {
					text = append(text, p.Text)
				}
			case "tool_use":
				flush()
				names[p.ID] = p.Name
				appendMsg(t, TranscriptMessage{Role: "assistant", ToolName: p.Name, ToolInput: p.Input, TS: l.Timestamp})
			case "tool_result":
				flush()
				appendMsg(t, TranscriptMessage{Role: "tool", ToolName: names[p.ToolUseID], Content: claudeResultText(p.Content), TS: l.Timestamp})
			}
		}
		flush()
	}
	return emit(t)
}

// claudeParts decodes a line's message; parts is nil when the content is a plain string.
func claudeParts(l *claudeLine) (claudeMessage, []claudePart) {
	var m claudeMessage
	if len(l.Message) == 0 || json.Unmarshal(l.Message, &m) != nil {
		return m, []claudePart{}
	}
	if m.Role == "" {
		m.Role = l.Type
	}
	var parts []claudePart
	if json.Unmarshal(m.Content, &parts) != nil {
		return m, nil
	}
	if parts == nil {
		parts = []claudePart{}
	}
	return m, parts
}

// claudeResultText is a tool result's content: a string, or text parts.
func claudeResultText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []claudePart
	json.Unmarshal(raw, &parts)
	var out []string
	for _, p := range parts {
		if p.Type == "text" {
			out = append(out, p.Text)
		}
	}
	return strings.Join(out, "\n")
}

// claudeNoise: messages Claude Code writes into the thread that are not the conversation.
func claudeNoise(s string) bool {
	return hasAnyPrefix(strings.TrimSpace(s), "[Request interrupted by user", "<local-command-", "<command-name>",
		"<command-message>", "Caveat: The messages below were generated")
}
