package main

import (
	"encoding/json"
	"testing"
)

// BenchmarkParseSpecYAML validates the full spec of testdata/full-spec.yaml (every block, seven triggers).
func BenchmarkParseSpecYAML(b *testing.B) {
	text := mustReadFile(b, "testdata/full-spec.yaml")
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		if _, issues := parseSpecYAML(text); len(issues) > 0 {
			b.Fatal(issues)
		}
	}
}

// BenchmarkParseSpecJSON validates the same spec sent as JSON.
func BenchmarkParseSpecJSON(b *testing.B) {
	spec, _ := parseSpecYAML(mustReadFile(b, "testdata/full-spec.yaml"))
	raw, _ := json.Marshal(spec)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if _, issues := parseSpecJSON(raw); len(issues) > 0 {
			b.Fatal(issues)
		}
	}
}
