// sessions_codex.go — Codex CLI rollouts: ~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl.
//
// Entry point: importCodex (an importer, sessions.go).
//
// Rules (docs/DESIGN.md §7a): `response_item` lines are the record — messages, function calls and their
// outputs, custom tool calls (apply_patch), local shell calls, web searches; the `event_msg` lines repeat
// them for the TUI and are ignored, as are reasoning items (often encrypted), the developer prompt and
// the context Codex injects as user messages (<environment_context>, AGENTS.md instructions). A
// rollout that ends mid-turn imports up to where it ends.
package main

import (
	"bufio"
	"encoding/json"
	"io"
	"strings"
)

type codexLine struct {
	Timestamp string          `json:"timestamp"`
	Type      string          `json:"type"`
	Payload   json.RawMessage `json:"payload"`
}

type codexItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   []codexContent  `json:"content"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Input     string          `json:"input"`
	CallID    string          `json:"call_id"`
	Output    json.RawMessage `json:"output"`
	Action    any             `json:"action"`
	// session_meta
	ID  string `json:"id"`
	Cwd string `json:"cwd"`
}

type codexContent struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

func importCodex(r io.Reader, emit func(*Transcript) error) error {
	t := &Transcript{Meta: map[string]any{}}
	names := map[string]string{} // call_id → tool name
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	seen := false
	for sc.Scan() {
		var l codexLine
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			continue
		}
		var it codexItem
		if json.Unmarshal(l.Payload, &it) != nil {
			continue
		}
		switch l.Type {
		case "session_meta":
			seen = true
			if it.ID != "" {
				t.Origin = &TranscriptOrigin{SessionID: it.ID}
			}
			continue
		case "response_item":
			seen = true
		default:
			continue
		}
		switch it.Type {
		case "message":
			var text []string
			for _, c := range it.Content {
				if c.Type == "input_text" || c.Type == "output_text" || c.Type == "text" {
					text = append(text, c.Text)
				}
			}
			s := strings.Join(text, "\n")
			if it.Role == "developer" || it.Role == "system" || (it.Role == "user" && codexInjected(s)) {
				continue
			}
			appendMsg(t, TranscriptMessage{Role: it.Role, Content: s, TS: l.Timestamp})
		case "function_call":
			names[it.CallID] = it.Name
			var args any
			if json.Unmarshal([]byte(it.Arguments), &args) != nil {
				args = it.Arguments
			}
			appendMsg(t, TranscriptMessage{Role: "assistant", ToolName: it.Name, ToolInput: args, TS: l.Timestamp})
		case "custom_tool_call":
			names[it.CallID] = it.Name
			appendMsg(t, TranscriptMessage{Role: "assistant", ToolName: it.Name, ToolInput: map[string]any{"input": it.Input}, TS: l.Timestamp})
		case "local_shell_call":
			names[it.CallID] = "shell"
			appendMsg(t, TranscriptMessage{Role: "assistant", ToolName: "shell", ToolInput: it.Action, TS: l.Timestamp})
		case "web_search_call":
			appendMsg(t, TranscriptMessage{Role: "assistant", ToolName: "web_search", ToolInput: it.Action, TS: l.Timestamp})
		case "function_call_output", "custom_tool_call_output", "local_shell_call_output":
			appendMsg(t, TranscriptMessage{Role: "tool", ToolName: names[it.CallID], Content: codexOutput(it.Output), TS: l.Timestamp})
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if !seen {
		return errImport("no Codex rollout lines (session_meta, response_item) found")
	}
	return emit(t)
}

// codexOutput is a call's output: a string that is often JSON {"output": ..., "metadata": ...}.
func codexOutput(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		var obj struct{ Output string }
		if json.Unmarshal(raw, &obj) == nil && obj.Output != "" {
			return obj.Output
		}
		return string(raw)
	}
	var obj struct {
		Output *string `json:"output"`
	}
	if strings.HasPrefix(strings.TrimSpace(s), "{") && json.Unmarshal([]byte(s), &obj) == nil && obj.Output != nil {
		return *obj.Output
	}
	return s
}

// codexInjected: the context Codex sends as user messages, not typed by the user.
func codexInjected(s string) bool {
	return hasAnyPrefix(strings.TrimSpace(s), "<environment_context>", "<user_instructions>", "# AGENTS.md instructions",
		"<permissions instructions>", "<turn_aborted>")
}
