// sessions_text.go — the two plain formats: markdown transcripts and JSONL messages.
//
// Entry points: importMarkdown, importJSONL (importers, sessions.go), looksMarkdownTranscript.
//
// Rules (docs/DESIGN.md §7/§7a): markdown turns start with a `## User` / `## Assistant` heading, a
// `**User:**` / `**Assistant:**` lead or a `User:` / `Assistant:` line (also System and Tool); text before
// the first turn is dropped. JSONL is one {role, content} per line (content a string or OpenAI-style
// parts, tool_calls and role tool understood) or one {"messages": [...]} conversation per line, each
// emitted as its own transcript.
package main

import (
	"bufio"
	"encoding/json"
	"io"
	"regexp"
	"strings"
)

var markdownTurn = regexp.MustCompile(`(?i)^(?:#{1,6}\s*(user|human|you|assistant|ai|model|system|tool)\s*:?\s*$|\*\*(user|human|you|assistant|ai|model|system|tool)\s*:?\*\*\s*:?\s?(.*)$|(user|human|assistant|ai|system|tool)\s*:\s?(.*)$)`)

func markdownRole(name string) string {
	switch strings.ToLower(name) {
	case "user", "human", "you":
		return "user"
	case "assistant", "ai", "model":
		return "assistant"
	case "system":
		return "system"
	}
	return "tool"
}

// looksMarkdownTranscript: at least two turns, one of them the user's.
func looksMarkdownTranscript(text string) bool {
	users, turns := 0, 0
	for _, line := range strings.Split(text, "\n") {
		if m := markdownTurn.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
			turns++
			if markdownRole(m[1]+m[2]+m[4]) == "user" {
				users++
			}
		}
	}
	return turns >= 2 && users >= 1
}

func importMarkdown(r io.Reader, emit func(*Transcript) error) error {
	t := &Transcript{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	var cur *TranscriptMessage
	var body []string
	inFence := false
	flush := func() {
		if cur != nil {
			cur.Content = strings.TrimSpace(strings.Join(body, "\n"))
			appendMsg(t, *cur)
		}
		cur, body = nil, nil
	}
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
		}
		if !inFence {
			if m := markdownTurn.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
				flush()
				cur = &TranscriptMessage{Role: markdownRole(m[1] + m[2] + m[4])}
				if rest := m[3] + m[5]; rest != "" {
					body = append(body, rest)
				}
				continue
			}
			if t.Title == "" && cur == nil && strings.HasPrefix(line, "# ") {
				t.Title = strings.TrimPrefix(line, "# ")
			}
		}
		if cur != nil {
			body = append(body, line)
		}
	}
	flush()
	if err := sc.Err(); err != nil {
		return err
	}
	if len(t.Messages) == 0 {
		return errImport("no markdown turns found (## User / ## Assistant, **User:** or User: lines)")
	}
	return emit(t)
}

// jsonlMessage is one message of the JSONL format, OpenAI's chat shape included.
type jsonlMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	Name       string          `json:"name"`
	ToolCallID string          `json:"tool_call_id"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
	Timestamp string `json:"timestamp"`
	Ts        string `json:"ts"`
}

func importJSONL(r io.Reader, emit func(*Transcript) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	flat := &Transcript{}
	read := 0
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var conv struct {
			Messages []jsonlMessage `json:"messages"`
			Title    string         `json:"title"`
		}
		if json.Unmarshal([]byte(line), &conv) == nil && conv.Messages != nil {
			read++
			t := &Transcript{Title: conv.Title}
			addJSONL(t, conv.Messages)
			if err := emit(t); err != nil {
				return err
			}
			continue
		}
		var m jsonlMessage
		if json.Unmarshal([]byte(line), &m) != nil || m.Role == "" {
			continue // a line of another shape
		}
		read++
		addJSONL(flat, []jsonlMessage{m})
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if read == 0 {
		return errImport("no JSONL messages found: expected one {\"role\", \"content\"} per line, or one {\"messages\": [...]} per line")
	}
	if len(flat.Messages) > 0 {
		return emit(flat)
	}
	return nil
}

func addJSONL(t *Transcript, msgs []jsonlMessage) {
	names := map[string]string{}
	for _, m := range msgs {
		ts := firstNonEmpty(m.Timestamp, m.Ts)
		role := m.Role
		switch role {
		case "human":
			role = "user"
		case "ai", "model", "bot":
			role = "assistant"
		case "function":
			role = "tool"
		case "developer":
			role = "system"
		}
		if role != "user" && role != "assistant" && role != "system" && role != "tool" {
			continue
		}
		text := partsText(m.Content)
		if role == "tool" {
			appendMsg(t, TranscriptMessage{Role: "tool", ToolName: firstNonEmpty(names[m.ToolCallID], m.Name), Content: text, TS: ts})
			continue
		}
		appendMsg(t, TranscriptMessage{Role: role, Content: text, TS: ts})
		for _, tc := range m.ToolCalls {
			names[tc.ID] = tc.Function.Name
			var args any
			if json.Unmarshal([]byte(tc.Function.Arguments), &args) != nil {
				args = tc.Function.Arguments
			}
			appendMsg(t, TranscriptMessage{Role: "assistant", ToolName: tc.Function.Name, ToolInput: args, TS: ts})
		}
	}
}
