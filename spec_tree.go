// spec_tree.go — the neutral value tree every spec becomes before validation, and its two readers: YAML
// (gopkg.in/yaml.v3) and JSON (a json.Decoder token walk that keeps key order and reports duplicate keys,
// which decoding into a map would lose).
//
// Rules: objects keep key order and report duplicate keys; numbers keep whether they are integral; YAML
// anchors and aliases are refused while the tree is built, so an alias bomb costs no more than its text;
// non-UTF-8 is refused; nesting depth and the number of values are bounded so memory stays bounded.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Values of the tree: nil, bool, string, specNum, []any, *specObj.
type specObj struct {
	keys []string // document order
	vals map[string]any
	dups []string // keys that appeared more than once
}

func (o *specObj) set(k string, v any) {
	if _, ok := o.vals[k]; ok {
		o.dups = append(o.dups, k)
	} else {
		o.keys = append(o.keys, k)
	}
	o.vals[k] = v
}

// specNum is a finite number; isInt when it is integral and within JavaScript's safe range, so a
// spec means the same to every client.
type specNum struct {
	f     float64
	isInt bool
	huge  string // the literal of a number past float64's range (f is ±Inf)
}

const maxSafeInt = 1<<53 - 1

func newSpecNum(f float64) specNum {
	return specNum{f: f, isInt: f == math.Trunc(f) && math.Abs(f) <= maxSafeInt}
}

// maxSpecDepth bounds nesting so a hostile document cannot exhaust the stack.
const maxSpecDepth = 200

// maxSpecNodes bounds the values of one document, so memory stays bounded for any body under the 32 MB
// cap: yaml.v3 spends ~270 bytes per node (a 2 MB flow list of a million numbers costs ~270 MB), so a YAML
// text is measured before it is parsed (yamlNodeBound) and a JSON one while it is walked. A real spec has
// a few hundred values; long text (knowledge, persona) is one value however long it is.
const maxSpecNodes = 100_000

func errTooManyNodes() error {
	return &specInputError{"", fmt.Sprintf("document has more than %d values; agentd does not check specs that large", maxSpecNodes)}
}

// yamlNodeBound counts the bytes that can introduce a YAML node (flow separators, block entries, key
// values, line breaks, tags, anchors, aliases). Every node but the root needs one of them, so the count
// bounds the node count from above without parsing anything.
func yamlNodeBound(text string) int {
	n := 0
	for i := 0; i < len(text); i++ {
		switch text[i] {
		case ',', '[', '{', '\n', '\r', '-', ':', '?', '!', '&', '*':
			n++
		}
	}
	return n
}

// specInputError is a document that could not become a tree; it is reported as one issue.
type specInputError struct{ path, msg string }

func (e *specInputError) Error() string { return issueLine(e.path, e.msg) }

func issueLine(path, msg string) string {
	if path == "" {
		path = "(root)"
	}
	return path + ": " + msg
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// yamlTree parses one YAML document into the neutral tree.
func yamlTree(text string) (v any, err error) {
	if !utf8.ValidString(text) {
		return nil, &specInputError{"", "YAML text is not valid UTF-8"}
	}
	if yamlNodeBound(text) > 2*maxSpecNodes {
		return nil, &specInputError{"", fmt.Sprintf("YAML text is too large to check safely: more than %d values or line breaks; send very long text (knowledge) in a JSON spec, where a string is one value", 2*maxSpecNodes)}
	}
	return yamlParse(text)
}

// yamlParse parses with yaml.v3, which must never take the server down.
func yamlParse(text string) (v any, err error) {
	defer func() {
		if p := recover(); p != nil { // the YAML library must never take the server down
			v, err = nil, &specInputError{"", fmt.Sprintf("Invalid YAML: %v", p)}
		}
	}()
	dec := yaml.NewDecoder(strings.NewReader(text))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, &specInputError{"", "Invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	var second yaml.Node
	if err := dec.Decode(&second); err == nil {
		return nil, &specInputError{"", "YAML text holds more than one document; send one spec"}
	} else if !errors.Is(err, io.EOF) {
		return nil, &specInputError{"", "Invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	if doc.Anchor != "" {
		return nil, errYAMLAlias("")
	}
	return yamlValue(doc.Content[0], 0)
}

func errYAMLAlias(path string) error {
	return &specInputError{path, "YAML anchors and aliases are not supported; write the value out"}
}

// underPath prefixes a tree-building error with the key or index it happened under. Paths are built
// only on the error path, so a valid document pays nothing for them.
func underPath(err error, seg string) error {
	var ie *specInputError
	if errors.As(err, &ie) {
		if ie.path == "" {
			ie.path = seg
		} else {
			ie.path = seg + "." + ie.path
		}
	}
	return err
}

func yamlValue(n *yaml.Node, depth int) (any, error) {
	if depth > maxSpecDepth {
		return nil, &specInputError{"", fmt.Sprintf("document nests deeper than %d levels", maxSpecDepth)}
	}
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		return nil, errYAMLAlias("")
	}
	switch n.Kind {
	case yaml.MappingNode:
		o := &specObj{keys: make([]string, 0, len(n.Content)/2), vals: make(map[string]any, len(n.Content)/2)}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			if k.Kind == yaml.AliasNode || k.Anchor != "" {
				return nil, errYAMLAlias("")
			}
			if k.Kind != yaml.ScalarNode {
				return nil, &specInputError{"", "object keys must be plain strings"}
			}
			child, err := yamlValue(val, depth+1)
			if err != nil {
				return nil, underPath(err, k.Value)
			}
			o.set(k.Value, child)
		}
		return o, nil
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for i, c := range n.Content {
			child, err := yamlValue(c, depth+1)
			if err != nil {
				return nil, underPath(err, strconv.Itoa(i))
			}
			out = append(out, child)
		}
		return out, nil
	case yaml.ScalarNode:
		return yamlScalar(n, "")
	}
	return nil, &specInputError{"", "unsupported YAML node"}
}

func yamlScalar(n *yaml.Node, path string) (any, error) {
	switch tag := n.ShortTag(); tag {
	case "!!str", "!!timestamp", "!!binary":
		// A date-looking value (importedAt: 2026-11-22) is kept as the text the author wrote.
		return n.Value, nil
	case "!!null":
		return nil, nil
	case "!!bool":
		switch strings.ToLower(n.Value) {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
		var b bool
		if err := n.Decode(&b); err != nil {
			return nil, &specInputError{path, fmt.Sprintf("invalid boolean %q", n.Value)}
		}
		return b, nil
	case "!!int", "!!float":
		plain := strings.ReplaceAll(n.Value, "_", "")
		if i, err := strconv.ParseInt(plain, 0, 64); err == nil {
			return newSpecNum(float64(i)), nil
		}
		f, err := strconv.ParseFloat(plain, 64)
		if err != nil {
			var x any
			if derr := n.Decode(&x); derr != nil {
				return nil, &specInputError{path, fmt.Sprintf("invalid number %q", n.Value)}
			}
			switch t := x.(type) {
			case int:
				f = float64(t)
			case int64:
				f = float64(t)
			case uint64:
				f = float64(t)
			case float64:
				f = t
			default:
				return nil, &specInputError{path, fmt.Sprintf("invalid number %q", n.Value)}
			}
		}
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, &specInputError{path, fmt.Sprintf("number %q is not finite", n.Value)}
		}
		return newSpecNum(f), nil
	default:
		return nil, &specInputError{path, fmt.Sprintf("unsupported YAML tag %q", tag)}
	}
}

// jsonTree parses one JSON value into the neutral tree, keeping key order and catching duplicate keys
// (encoding/json would silently keep the last one). The input is checked by json.Valid first (which also
// bounds nesting), so the token walk below only meets well-formed JSON.
func jsonTree(raw []byte) (any, error) {
	if !utf8.Valid(raw) {
		return nil, &specInputError{"", "JSON is not valid UTF-8"}
	}
	if !json.Valid(raw) {
		var x any
		err := json.Unmarshal(raw, &x)
		msg := "Invalid JSON"
		if err != nil {
			msg += ": " + strings.TrimPrefix(err.Error(), "json: ")
		}
		return nil, &specInputError{"", msg}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	nodes := 0
	return jsonValue(dec, &nodes, 0)
}

// jsonValue reads the next value of dec into the tree; objects are walked token by token so their key
// order and duplicate keys survive.
func jsonValue(dec *json.Decoder, nodes *int, depth int) (any, error) {
	if *nodes++; *nodes > maxSpecNodes {
		return nil, errTooManyNodes()
	}
	if depth > maxSpecDepth {
		return nil, &specInputError{"", fmt.Sprintf("document nests deeper than %d levels", maxSpecDepth)}
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, &specInputError{"", "Invalid JSON: " + err.Error()}
	}
	switch t := tok.(type) {
	case json.Delim:
		if t == '{' {
			o := &specObj{vals: map[string]any{}}
			for dec.More() {
				k, _ := dec.Token() // a key: the input is valid JSON
				v, err := jsonValue(dec, nodes, depth+1)
				if err != nil {
					return nil, underPath(err, k.(string))
				}
				o.set(k.(string), v)
			}
			dec.Token() // '}'
			return o, nil
		}
		out := []any{}
		for dec.More() {
			v, err := jsonValue(dec, nodes, depth+1)
			if err != nil {
				return nil, underPath(err, strconv.Itoa(len(out)))
			}
			out = append(out, v)
		}
		dec.Token() // ']'
		return out, nil
	case json.Number:
		f, err := strconv.ParseFloat(string(t), 64)
		if math.IsInf(f, 0) { // a value validation reports at its path, beside every other issue
			return specNum{f: f, huge: string(t)}, nil
		}
		if err != nil {
			return nil, &specInputError{"", fmt.Sprintf("number %s is not a number", t)}
		}
		return newSpecNum(f), nil
	}
	return tok, nil // string, bool or nil
}

// plainValue turns a tree value into ordinary Go values (for metadata, carried through untouched).
func plainValue(v any) any {
	switch t := v.(type) {
	case *specObj:
		m := make(map[string]any, len(t.keys))
		for _, k := range t.keys {
			m[k] = plainValue(t.vals[k])
		}
		return m
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = plainValue(x)
		}
		return out
	case specNum:
		if t.huge != "" { // past float64: carried as its literal, which JSON still reads as a number
			return json.Number(t.huge)
		}
		if t.isInt {
			return int64(t.f)
		}
		return t.f
	}
	return v
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case specNum:
		return "number"
	case []any:
		return "array"
	case *specObj:
		return "object"
	}
	return "unknown"
}
