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

// TestSpecFastPathTricky: inputs near the fast path's edges (scalar types, escapes, merge keys) agree with yaml.v3.
func TestSpecFastPathTricky(t *testing.T) {
	cases := []string{
		"a: yes\n", "a: no\n", "a: on\n", "a: off\n", "a: 0o17\n", "a: 017\n", "a: 0x1F\n", "a: .inf\n", "a: -.inf\n", "a: .nan\n", "a: .NaN\n",
		"a: ~\n", "a: 2001-12-14\n", "a: 2001-12-14t21:59:43.10-05:00\n", "\"a\": 1\n", "'a': 1\n", "a: 1\na: 2\n", "a: 1 # c\n", "a: 1#c\n",
		"a: 1\r\n", "\ufeffa: 1\n", "a: b\n---\nc: d\n", "a:\n- 1\n- 2\n", "a:\n  - 1\n  -  2\n", "a: [1, 2,]\n", "a: [1,2]\n", "a: {b: 1, c: 2}\n",
		"a: {b: 1, b: 2}\n", "a: [a b, c]\n", "a: 1_000\n", "a: +1\n", "a: -0\n", "a: 0.\n", "a: 1e3\n", "a: 1E3\n", "a: 0b101\n", "a: +.inf\n", "a: 1:20\n",
		"a: '#x'\n", "a: \"x\" \n", "a: 'it''s'\n", "a: |\n  x\n  y\n", "a: |-\n  x\n\n  y\nb: 1\n", "a: |\n  x\n\n\nb: 1\n", "a: |\n   x\n  y\n",
		"a: x\n  y\n", "- a\n- b\n", "- a: 1\n  b: 2\n- c\n", "a:\n  b:\n    c: 1\n", "a: -\n", "a: - b\n", "a: b c\n", "a: 'b' c\n", "a: null\n", "a: Null\n", "a: NULL\n", "a: nUll\n",
		"a: True\n", "a: tRue\n", "a: Yes\n", "a: Y\n", "a: n\n", "a: 12:30:00\n", "a: 0x\n", "a: 00\n", "a: 09\n", "a: 0_1\n", "a: .5\n", "a: -.5\n", "a: 1.\n", "a: ..\n", "a: .\n",
		"a b: 1\n", "a: [\"x\", 'y']\n", "a: {\"b\": 1}\n", "a: [b: 1]\n", "a: [-1, -a]\n", "a: [~]\n", "a: []\n", "a: {}\n", "a: [ ]\n", "a: [,]\n",
		"a: 1\n b: 2\n", "a:\n  - b\n  c: 1\n", "a: \"\\u00e9\"\n", "a: \"\\x41\"\n", "a: \"\\t\"\n", "a: \"a\\/b\"\n", "key:\n", "a:\n\n", "a: 1\n# c\n", "  a: 1\n  b: 2\n", "a: 9223372036854775808\n", "a: 1e400\n", "a: -9223372036854775809\n", "a: 0x8000000000000000\n", "a: 0o777777777777777777777777\n",
		"a: <<\n", "<<: 1\n", "a: =\n", "=: 1\n", "a: !x\n", "a: x!\n", "a: x&y\n", "a: x*y\n", "a: @x\n", "a: x@y\n", "a: %x\n", "a: `x\n",
		"a: [a,b]x\n", "a: [a] # c\n", "a: [a]#c\n", "a: \"x\"#c\n", "a:  1\n", "a:    \n  - 1\n", "- - 1\n", "-\n  a: 1\n", "- |\n  x\n", "a: |+\n  x\n\n", "a: |2\n   x\n",
		"a: {b: [1]}\n", "a: {b: c: d}\n", "a: [a: b]\n", "a: x # c\n  # d\n", "a: 0.1e+2\n", "a: 1e+\n", "a: -\n", "a: ---\n", "a: ...\n", "a: [---]\n",
	}
	for _, c := range cases {
		checkFastPath(t, c)
	}
}
