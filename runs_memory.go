// runs_memory.go — an agent's conversation memory across runs: three backends and the context window.
//
// Entry points: memoryService.load / append (per agent, chosen backend), windowMessages (the trim applied
// before every model call when memory is enabled).
// Rules (DESIGN §6): `memory.enabled` is the only gate — when off nothing is loaded, stored or trimmed.
// Backends: sqlite (the `memory` table), file ($AGENT_HOME/memory/<agent>.jsonl), memory (this process
// only). Memory is loaded before the body's `history`. The window keeps the first user message and the last
// `windowTurns` turns; the middle is summarised by the model (`summarise`) or elided with a marker; a turn
// starts at a user message, so a tool call and its result are never split.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// memoryLoadCap bounds how many stored messages a run loads; the window trims further.
const memoryLoadCap = 2000

type memoryService struct {
	store *store
	dir   string // $AGENT_HOME/memory

	mu    sync.Mutex
	procs map[string][]ModelMessage // backend "memory"
	files keyedMutex                // per agent: serialises the reads and appends of its jsonl file
}

func newMemoryService(st *store, home string) *memoryService {
	return &memoryService{store: st, dir: filepath.Join(home, "memory"), procs: map[string][]ModelMessage{}}
}

func (m *memoryService) load(ctx context.Context, agent string, spec MemorySpec) ([]ModelMessage, error) {
	if !spec.Enabled {
		return nil, nil
	}
	msgs, err := m.loadRaw(ctx, agent, spec)
	return fromTurnStart(msgs), err
}

// fromTurnStart drops what precedes the first whole turn: the load cap can cut the stored history
// inside a turn, and a tool result without its call (or a conversation opening on the assistant) is
// refused by providers — on every later run of the agent.
func fromTurnStart(msgs []ModelMessage) []ModelMessage {
	if starts := turnStarts(msgs); len(starts) > 0 {
		return msgs[starts[0]:]
	}
	for len(msgs) > 0 && (msgs[0].Role != "user" || isToolResultMessage(msgs[0])) {
		msgs = msgs[1:]
	}
	return msgs
}

func (m *memoryService) loadRaw(ctx context.Context, agent string, spec MemorySpec) ([]ModelMessage, error) {
	switch spec.Backend {
	case "memory":
		m.mu.Lock()
		defer m.mu.Unlock()
		return slices.Clone(lastN(m.procs[agent], memoryLoadCap)), nil
	case "file":
		return m.loadFile(agent)
	default:
		return m.store.LoadMemory(ctx, agent, memoryLoadCap)
	}
}

// lastN is the last n messages (all when there are fewer).
func lastN(msgs []ModelMessage, n int) []ModelMessage { return msgs[max(len(msgs)-n, 0):] }

func (m *memoryService) append(ctx context.Context, agent string, spec MemorySpec, msgs []ModelMessage) error {
	if !spec.Enabled || len(msgs) == 0 {
		return nil
	}
	switch spec.Backend {
	case "memory":
		m.mu.Lock()
		defer m.mu.Unlock()
		all := append(m.procs[agent], msgs...)
		if len(all) > memoryLoadCap {
			// Only the last memoryLoadCap messages are ever loaded: keep no more, or a long-lived
			// process grows without bound.
			all = append([]ModelMessage(nil), all[len(all)-memoryLoadCap:]...)
		}
		m.procs[agent] = all
		return nil
	case "file":
		return m.appendFile(agent, msgs)
	default:
		return m.store.AppendMemory(ctx, agent, msgs)
	}
}

func (m *memoryService) filePath(agent string) string {
	return filepath.Join(m.dir, filepath.Base(agent)+".jsonl")
}

func (m *memoryService) loadFile(agent string) ([]ModelMessage, error) {
	defer m.files.lock(agent)()
	b, err := os.ReadFile(m.filePath(agent))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read memory of %s: %w", agent, err)
	}
	var out []ModelMessage
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 32<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		msg, err := parseMessage(line)
		if err != nil {
			continue // a torn last line after a crash loses one message, not the memory
		}
		out = append(out, msg)
	}
	return lastN(out, memoryLoadCap), nil
}

func (m *memoryService) appendFile(agent string, msgs []ModelMessage) error {
	defer m.files.lock(agent)()
	if err := os.MkdirAll(m.dir, 0o700); err != nil {
		return err
	}
	var buf bytes.Buffer
	for _, msg := range msgs {
		b, err := json.Marshal(msg)
		if err != nil {
			return err
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	f, err := os.OpenFile(m.filePath(agent), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(buf.Bytes()); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// turnStarts returns the indexes of messages that open a turn: user messages that are not tool results.
func turnStarts(msgs []ModelMessage) []int {
	var idx []int
	for i, m := range msgs {
		if m.Role == "user" && !isToolResultMessage(m) {
			idx = append(idx, i)
		}
	}
	return idx
}

func isToolResultMessage(m ModelMessage) bool { return m.Role == "tool" || hasResults(m) }

// windowCut finds the middle to drop: the first user message is kept, and the last windowTurns turns.
// It returns ok=false when everything fits.
func windowCut(msgs []ModelMessage, windowTurns int) (firstEnd, keepFrom int, ok bool) {
	starts := turnStarts(msgs)
	if windowTurns <= 0 || len(starts) <= windowTurns+1 {
		return 0, 0, false
	}
	firstEnd = starts[0] + 1 // keep everything up to and including the first user message
	keepFrom = starts[len(starts)-windowTurns]
	if keepFrom <= firstEnd {
		return 0, 0, false
	}
	return firstEnd, keepFrom, true
}

// windowMessages applies the window: head, a summary (or marker) as an assistant message, tail.
func windowMessages(msgs []ModelMessage, windowTurns int, summary string) []ModelMessage {
	firstEnd, keepFrom, ok := windowCut(msgs, windowTurns)
	if !ok {
		return msgs
	}
	out := make([]ModelMessage, 0, firstEnd+1+len(msgs)-keepFrom)
	out = append(out, msgs[:firstEnd]...)
	note := fmt.Sprintf("[%d earlier messages elided to fit the memory window]", keepFrom-firstEnd)
	if summary != "" {
		note = "[Summary of the earlier conversation]\n" + summary
	}
	out = append(out, textMessage("assistant", note))
	return append(out, msgs[keepFrom:]...)
}

// transcriptText renders messages as plain text for the summariser.
func transcriptText(msgs []ModelMessage, maxBytes int) string {
	var b strings.Builder
	for _, m := range msgs {
		for _, p := range m.Content {
			switch p.Type {
			case "text":
				fmt.Fprintf(&b, "%s: %s\n", m.Role, p.Text)
			case "tool_call":
				a, _ := json.Marshal(p.Args)
				fmt.Fprintf(&b, "%s called %s %s\n", m.Role, p.Name, a)
			case "tool_result":
				fmt.Fprintf(&b, "tool result: %s\n", p.Content)
			}
		}
		if b.Len() > maxBytes {
			break
		}
	}
	s := b.String()
	if len(s) > maxBytes {
		s = s[:maxBytes]
	}
	return s
}

func textMessage(role, text string) ModelMessage {
	return ModelMessage{Role: role, Content: []ContentPart{{Type: "text", Text: text}}}
}
