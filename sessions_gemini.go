// sessions_gemini.go — Gemini CLI chats: ~/.gemini/tmp/<project>/chats/session-*.json (older) and
// session-*.jsonl (current).
//
// Entry point: importGemini (an importer, sessions.go).
//
// Rules (docs/DESIGN.md §7a): the .json form is one object {sessionId, startTime, messages: [...]}; the
// .jsonl form is a header line, then one record per line, with `$set` lines updating the header and a
// record repeated under one id as it grows (the last one wins, at the place of the first). A `gemini`
// record is the assistant: its text, then each of its toolCalls as a call and a tool result; thoughts
// and `info` records (update notices, cancellations) are dropped.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"strings"
)

type geminiRecord struct {
	ID        string           `json:"id"`
	Timestamp string           `json:"timestamp"`
	Type      string           `json:"type"`
	Content   json.RawMessage  `json:"content"`
	ToolCalls []geminiToolCall `json:"toolCalls"`
}

type geminiToolCall struct {
	Name          string          `json:"name"`
	Args          any             `json:"args"`
	Result        json.RawMessage `json:"result"`
	ResultDisplay any             `json:"resultDisplay"`
	Status        string          `json:"status"`
	Timestamp     string          `json:"timestamp"`
}

type geminiHeader struct {
	SessionID string         `json:"sessionId"`
	StartTime string         `json:"startTime"`
	Messages  []geminiRecord `json:"messages"`
}

func importGemini(r io.Reader, emit func(*Transcript) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	head, _ := br.Peek(4096)
	var records []geminiRecord
	var hdr geminiHeader
	if isJSONL(head) {
		at := map[string]int{}
		sc := bufio.NewScanner(br)
		sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
		for sc.Scan() {
			line := sc.Bytes()
			var rec geminiRecord
			if json.Unmarshal(line, &rec) != nil {
				continue
			}
			if rec.Type == "" { // the header, or a $set
				if hdr.SessionID == "" {
					json.Unmarshal(line, &hdr)
				}
				continue
			}
			if i, ok := at[rec.ID]; ok && rec.ID != "" {
				records[i] = rec // the record grew: the last copy is the whole one
				continue
			}
			at[rec.ID] = len(records)
			records = append(records, rec)
		}
		if err := sc.Err(); err != nil {
			return err
		}
		if len(records) == 0 { // a .json chat written on one line
			records = hdr.Messages
		}
	} else {
		if err := json.NewDecoder(br).Decode(&hdr); err != nil {
			return errImport("not a Gemini CLI chat: %v", err)
		}
		records = hdr.Messages
	}
	if hdr.SessionID == "" && len(records) == 0 {
		return errImport("no Gemini CLI chat found (a sessionId and messages)")
	}
	t := &Transcript{Meta: map[string]any{}}
	if hdr.SessionID != "" {
		t.Origin = &TranscriptOrigin{SessionID: hdr.SessionID}
	}
	for _, rec := range records {
		switch rec.Type {
		case "user":
			appendMsg(t, TranscriptMessage{Role: "user", Content: partsText(rec.Content), TS: rec.Timestamp})
		case "gemini":
			appendMsg(t, TranscriptMessage{Role: "assistant", Content: partsText(rec.Content), TS: rec.Timestamp})
			for _, tc := range rec.ToolCalls {
				ts := firstNonEmpty(tc.Timestamp, rec.Timestamp)
				appendMsg(t, TranscriptMessage{Role: "assistant", ToolName: tc.Name, ToolInput: tc.Args, TS: ts})
				appendMsg(t, TranscriptMessage{Role: "tool", ToolName: tc.Name, Content: geminiResult(tc), TS: ts})
			}
		}
	}
	return emit(t)
}

// isJSONL: the first line is a whole JSON object (the .json form starts with a lone "{" line).
func isJSONL(head []byte) bool {
	line, _, _ := bytes.Cut(bytes.TrimLeft(head, " \t\r\n\ufeff"), []byte("\n"))
	return json.Valid(bytes.TrimSpace(line)) && len(bytes.TrimSpace(line)) > 2
}

// partsText is a content value (a Gemini record's, a JSONL message's): a string, or the text of a list
// of {text} parts.
func partsText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	json.Unmarshal(raw, &parts)
	var out []string
	for _, p := range parts {
		if p.Text != "" {
			out = append(out, p.Text)
		}
	}
	return strings.Join(out, "\n")
}

// geminiResult is what a tool call returned: the function response's output or error, else its display.
func geminiResult(tc geminiToolCall) string {
	var resp []struct {
		FunctionResponse struct {
			Response map[string]any `json:"response"`
		} `json:"functionResponse"`
	}
	if json.Unmarshal(tc.Result, &resp) == nil {
		var out []string
		for _, r := range resp {
			for _, k := range []string{"output", "error"} {
				if v, ok := r.FunctionResponse.Response[k].(string); ok && v != "" {
					out = append(out, v)
				}
			}
		}
		if len(out) > 0 {
			return strings.Join(out, "\n")
		}
	}
	if s, ok := tc.ResultDisplay.(string); ok && s != "" {
		return s
	}
	if tc.Status != "" {
		return tc.Status
	}
	return string(tc.Result)
}
