package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// seedFiles adds every recorded exchange of a provider directory to a fuzz corpus.
func seedFiles(f *testing.F, dir string) {
	files, _ := filepath.Glob(filepath.Join("testdata", "models", dir, "*"))
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
}

func FuzzModelMessageJSON(f *testing.F) {
	f.Add([]byte(`{"role":"user","content":"hi"}`))
	f.Add([]byte(`{"role":"assistant","content":[{"type":"tool_call","id":"c","name":"n","args":{"a":1}}]}`))
	f.Add([]byte(`{"role":"tool","content":[{"type":"tool_result","toolCallId":"c","content":"x","isError":true}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m ModelMessage
		if json.Unmarshal(b, &m) != nil {
			return
		}
		out, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var back ModelMessage
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("re-read of %s: %v", out, err)
		}
		for i := range m.Content { // an empty args object is omitted on the wire
			if len(m.Content[i].Args) == 0 {
				m.Content[i].Args = nil
			}
		}
		if len(m.Content) == 0 {
			m.Content = nil
			if len(back.Content) == 1 && back.Content[0].Text == "" {
				back.Content = nil
			}
		}
		if !reflect.DeepEqual(m, back) {
			a, _ := json.Marshal(back)
			t.Fatalf("round trip changed the message: %s → %s", out, a)
		}
	})
}

// The stream readers take arbitrary bytes from the network: they must never panic and must either
// return an answer or an error.
func FuzzOpenAIStream(f *testing.F) {
	seedFiles(f, "openai")
	m := &modelService{}
	f.Fuzz(func(t *testing.T, b []byte) {
		m.openaiReadStream(context.Background(), "fuzz", bytes.NewReader(b), func(StreamEvent) {})
	})
}

func FuzzAnthropicStream(f *testing.F) {
	seedFiles(f, "anthropic")
	m := &modelService{}
	f.Fuzz(func(t *testing.T, b []byte) {
		m.anthropicReadStream(context.Background(), "fuzz", bytes.NewReader(b), func(StreamEvent) {})
	})
}

func FuzzUpstreamMessage(f *testing.F) {
	for _, d := range []string{"openai", "anthropic", "gemini", "ollama"} {
		seedFiles(f, d)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if upstreamMessage(b, "500 Internal Server Error") == "" {
			t.Fatal("empty message")
		}
	})
}
