package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
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
		checkFastPath(t, text)
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

// treesEqual compares two neutral trees exactly: key order, duplicates, value kinds and numbers.
func treesEqual(a, b any) bool {
	switch x := a.(type) {
	case *specObj:
		y, ok := b.(*specObj)
		if !ok || len(x.keys) != len(y.keys) || len(x.dups) != len(y.dups) {
			return false
		}
		for i, k := range x.keys {
			if y.keys[i] != k || !treesEqual(x.vals[k], y.vals[k]) {
				return false
			}
		}
		for i := range x.dups {
			if x.dups[i] != y.dups[i] {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !treesEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	return a == b
}

// checkFastPath: whenever the fast YAML path answers, yaml.v3 accepts the text and builds the same tree.
func checkFastPath(t *testing.T, text string) {
	if !utf8.ValidString(text) || yamlNodeBound(text) > 2*maxSpecNodes {
		return // refused before either path runs
	}
	fast, ok := yamlFastTree(text)
	if !ok {
		return
	}
	slow, err := yamlSlowTree(text)
	if err != nil {
		t.Fatalf("fast path accepted what yaml.v3 refuses (%v):\n%q", err, text)
	}
	if !treesEqual(fast, slow) {
		fj, _ := json.Marshal(plainValue(fast))
		sj, _ := json.Marshal(plainValue(slow))
		t.Fatalf("fast path disagrees with yaml.v3 on %q:\nfast %s\nslow %s", text, fj, sj)
	}
}
