// sessions_chatgpt.go — ChatGPT's data export: conversations.json, an array of conversations whose
// messages form a tree (`mapping`), the shown thread ending at `current_node`.
//
// Entry point: importChatGPT (an importer, sessions.go).
//
// Rules (docs/DESIGN.md §7a): every conversation of the export is emitted (and saved), one at a time as
// the array is read, so a 200 MB export never sits in memory whole; the thread is walked from
// current_node up through `parent`; system messages and hidden ones are dropped, non-string parts
// (images) skipped; code-interpreter calls (content_type code, recipient python) become tool calls and
// their execution output tool results; createdAt comes from create_time.
package main

import (
	"encoding/json"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

type chatgptConversation struct {
	ID          string                 `json:"id"`
	Title       string                 `json:"title"`
	CreateTime  float64                `json:"create_time"`
	UpdateTime  float64                `json:"update_time"`
	CurrentNode string                 `json:"current_node"`
	Mapping     map[string]chatgptNode `json:"mapping"`
}

type chatgptNode struct {
	Parent  string          `json:"parent"`
	Message *chatgptMessage `json:"message"`
}

type chatgptMessage struct {
	Author struct {
		Role string `json:"role"`
		Name string `json:"name"`
	} `json:"author"`
	CreateTime *float64 `json:"create_time"`
	Content    struct {
		ContentType string `json:"content_type"`
		Parts       []any  `json:"parts"`
		Text        string `json:"text"`
		Language    string `json:"language"`
	} `json:"content"`
	Recipient string         `json:"recipient"`
	Metadata  map[string]any `json:"metadata"`
}

func importChatGPT(r io.Reader, emit func(*Transcript) error) error {
	dec := json.NewDecoder(r)
	tok, err := dec.Token()
	if err != nil {
		return errImport("not a ChatGPT export: %v", err)
	}
	switch tok {
	case json.Delim('['):
		for dec.More() {
			var c chatgptConversation
			if err := dec.Decode(&c); err != nil {
				return errImport("not a ChatGPT export: a conversation does not decode: %v", err)
			}
			if err := emit(chatgptTranscript(&c)); err != nil {
				return err
			}
		}
		return nil
	case json.Delim('{'): // one conversation on its own
		var c chatgptConversation
		if err := decodeRestOfObject(dec, &c); err != nil {
			return errImport("not a ChatGPT conversation: %v", err)
		}
		return emit(chatgptTranscript(&c))
	}
	return errImport("not a ChatGPT export: it starts with %v, not an array of conversations", tok)
}

// decodeRestOfObject decodes an object whose `{` the decoder has already read.
func decodeRestOfObject(dec *json.Decoder, v *chatgptConversation) error {
	raw := map[string]json.RawMessage{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return err
		}
		k, _ := kt.(string)
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return err
		}
		raw[k] = val
	}
	b, _ := json.Marshal(raw)
	return json.Unmarshal(b, v)
}

func chatgptTranscript(c *chatgptConversation) *Transcript {
	t := &Transcript{Title: c.Title, Origin: &TranscriptOrigin{SessionID: c.ID}}
	if c.CreateTime > 0 {
		t.CreatedAt = timestamp(unixFloat(c.CreateTime))
	}
	var chain []*chatgptMessage
	seen := map[string]bool{}
	for id := c.CurrentNode; id != "" && !seen[id]; {
		seen[id] = true
		n, ok := c.Mapping[id]
		if !ok {
			break
		}
		if n.Message != nil {
			chain = append(chain, n.Message)
		}
		id = n.Parent
	}
	slices.Reverse(chain)
	for _, m := range chain {
		if m.Metadata["is_visually_hidden_from_conversation"] == true {
			continue
		}
		ts := ""
		if m.CreateTime != nil && *m.CreateTime > 0 {
			ts = timestamp(unixFloat(*m.CreateTime))
		}
		role := m.Author.Role
		switch {
		case role == "system":
			continue
		case m.Content.ContentType == "code" && role == "assistant":
			tool := firstNonEmpty(m.Recipient, "python")
			appendMsg(t, TranscriptMessage{Role: "assistant", ToolName: tool, ToolInput: map[string]any{"code": m.Content.Text}, TS: ts})
		case role == "tool":
			text := m.Content.Text
			if text == "" {
				text = chatgptParts(m.Content.Parts)
			}
			appendMsg(t, TranscriptMessage{Role: "tool", ToolName: m.Author.Name, Content: text, TS: ts})
		case role == "user" || role == "assistant":
			if m.Recipient != "" && m.Recipient != "all" && role == "assistant" { // a call to a plugin or browser
				appendMsg(t, TranscriptMessage{Role: "assistant", ToolName: m.Recipient, ToolInput: map[string]any{"input": chatgptParts(m.Content.Parts) + m.Content.Text}, TS: ts})
				continue
			}
			appendMsg(t, TranscriptMessage{Role: role, Content: firstNonEmpty(chatgptParts(m.Content.Parts), m.Content.Text), TS: ts})
		}
	}
	return t
}

// chatgptParts joins the string parts; images and other objects are skipped.
func chatgptParts(parts []any) string {
	var out []string
	for _, p := range parts {
		if s, ok := p.(string); ok && s != "" {
			out = append(out, s)
		}
	}
	return strings.Join(out, "\n")
}

func unixFloat(f float64) time.Time {
	if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f > 1e11 {
		return time.Unix(0, 0)
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9)).UTC()
}
