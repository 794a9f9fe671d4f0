package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// checkParse asserts the parser's contract on any input: a spec xor issues, every issue a
// `<path>: <message>` line, and a valid spec renders to YAML that parses back to the same spec.
func checkParse(t *testing.T, spec *AgentSpec, issues []string) {
	if (spec == nil) == (len(issues) == 0) {
		t.Fatalf("spec %v with issues %q", spec != nil, issues)
	}
	for _, is := range issues {
		if path, msg, ok := strings.Cut(is, ": "); !ok || path == "" || msg == "" {
			t.Fatalf("malformed issue line %q", is)
		}
	}
	if spec == nil {
		return
	}
	want, _ := json.Marshal(spec)
	back, issues := parseSpecYAML(renderSpecYAML(spec))
	if len(issues) > 0 {
		t.Fatalf("rendered spec does not parse: %q\n%s", issues, renderSpecYAML(spec))
	}
	got, _ := json.Marshal(back)
	if string(got) != string(want) {
		t.Fatalf("render round trip changed the spec:\n%s\n%s", want, got)
	}
}

func specSeeds(f *testing.F) []string {
	paths, _ := filepath.Glob("testdata/specs/*.yaml")
	paths = append(paths, "testdata/full-spec.yaml")
	var out []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, string(b))
	}
	return append(out, "name: a\n", "", "name: &a x\nb: *a\n", billionLaughs())
}

func FuzzParseSpecYAML(f *testing.F) {
	for _, s := range specSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		spec, issues := parseSpecYAML(text)
		checkParse(t, spec, issues)
	})
}

func FuzzParseSpecJSON(f *testing.F) {
	for _, s := range specSeeds(f) {
		if spec, _ := parseSpecYAML(s); spec != nil {
			b, _ := json.Marshal(spec)
			f.Add(b)
		}
	}
	f.Add([]byte(`{"name":"a","name":"b"}`))
	f.Add([]byte(`{"name":"a","limits":{"maxSteps":1e3,"maxCostUsd":-0}}`))
	f.Add([]byte(`[[[[{}]]]]`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		spec, issues := parseSpecJSON(raw)
		checkParse(t, spec, issues)
	})
}
