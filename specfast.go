// specfast.go — a fast path for the YAML of hand-written specs, in front of gopkg.in/yaml.v3.
//
// yaml.v3 spends ~80 % of a spec's validation time building its node tree. Specs are almost always
// block mappings and sequences of plain or quoted one-line scalars, one-line flow lists and `|` blocks;
// yamlFastTree reads exactly that shape straight into the neutral tree. Rule: it answers only when it is
// sure, and says "not sure" (ok=false) for anything else — anchors, tags, multi-line plain or quoted
// scalars, folded blocks, complex keys, tabs, CR, document markers, odd indentation, errors — so the caller
// falls back to yaml.v3, which then decides. Plain scalars are resolved by yaml.v3's own rules (a Node's
// ShortTag), and FuzzParseSpecYAML checks that both paths give the same tree for every input.
package main

import (
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

type fastYAML struct {
	lines []string
	i     int
	nodes int
}

// yamlFastTree parses text when it has the common shape; ok=false means "use yaml.v3".
func yamlFastTree(text string) (v any, ok bool) {
	if !fastChars(text) {
		return nil, false
	}
	p := &fastYAML{lines: strings.Split(text, "\n")}
	for _, l := range p.lines {
		if strings.HasPrefix(l, "---") || strings.HasPrefix(l, "...") || strings.HasPrefix(l, "%") {
			return nil, false
		}
	}
	p.skipBlank()
	if p.i == len(p.lines) {
		return nil, false // empty documents are rare; let yaml.v3 say what they are
	}
	root, ok := p.block(indentOf(p.lines[p.i]), 0)
	if !ok {
		return nil, false
	}
	p.skipBlank()
	if p.i != len(p.lines) {
		return nil, false
	}
	return root, true
}

// fastChars: only printable text and '\n' (yaml.v3 refuses control characters, and treats tabs, CR, NEL
// and the Unicode line separators specially).
func fastChars(text string) bool {
	for i := 0; i < len(text); {
		c := text[i]
		if c < utf8.RuneSelf {
			if c < 0x20 && c != '\n' || c == 0x7f {
				return false
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(text[i:])
		if r == utf8.RuneError || r <= 0x9f || r == 0x2028 || r == 0x2029 || r == 0xfeff || r >= 0xfffe && r <= 0xffff {
			return false
		}
		i += size
	}
	return true
}

func indentOf(l string) int {
	n := 0
	for n < len(l) && l[n] == ' ' {
		n++
	}
	return n
}

// skipBlank moves past empty and comment-only lines.
func (p *fastYAML) skipBlank() {
	for p.i < len(p.lines) {
		t := strings.TrimLeft(p.lines[p.i], " ")
		if t != "" && t[0] != '#' {
			return
		}
		p.i++
	}
}

func isSeqEntry(rest string) bool { return rest == "-" || strings.HasPrefix(rest, "- ") }

// block parses the collection whose first line is the current line, at exactly indent.
func (p *fastYAML) block(indent, depth int) (any, bool) {
	if depth > maxSpecDepth {
		return nil, false
	}
	if isSeqEntry(p.lines[p.i][indent:]) {
		return p.seq(indent, depth)
	}
	return p.mapping(indent, "", false, depth)
}

// mapping parses `key: value` lines at indent; first, when set, is the first entry's text (the rest of a
// `- key: value` sequence entry).
func (p *fastYAML) mapping(indent int, first string, hasFirst bool, depth int) (any, bool) {
	o := &specObj{vals: map[string]any{}}
	for {
		var rest string
		if hasFirst {
			rest, hasFirst = first, false
		} else {
			p.skipBlank()
			if p.i == len(p.lines) {
				break
			}
			l := p.lines[p.i]
			ind := indentOf(l)
			if ind < indent {
				break
			}
			if ind > indent {
				return nil, false
			}
			rest = l[ind:]
			if isSeqEntry(rest) {
				break // the end of a mapping whose parent is a sequence at this indent
			}
			p.i++
		}
		key, after, ok := splitKey(rest)
		if !ok {
			return nil, false
		}
		v, ok := p.value(after, indent, true, depth)
		if !ok {
			return nil, false
		}
		o.set(key, v)
	}
	if len(o.keys) == 0 {
		return nil, false
	}
	return o, p.count()
}

func (p *fastYAML) count() bool {
	p.nodes++
	return p.nodes <= maxSpecNodes
}

// splitKey splits `key: rest` or `key:`; only plain keys that cannot mean anything else are accepted.
func splitKey(line string) (key, after string, ok bool) {
	idx := strings.Index(line, ": ")
	if idx < 0 {
		if !strings.HasSuffix(line, ":") {
			return "", "", false
		}
		idx = len(line) - 1
	}
	key = line[:idx]
	if key == "" || strings.IndexByte("-?:,[]{}#&*!|>'\"%@`~ ", key[0]) >= 0 || strings.HasSuffix(key, " ") ||
		strings.Contains(key, " #") || strings.Contains(key, ": ") {
		return "", "", false
	}
	return key, line[idx+1:], true
}

func (p *fastYAML) seq(indent, depth int) (any, bool) {
	out := []any{}
	for {
		p.skipBlank()
		if p.i == len(p.lines) {
			break
		}
		l := p.lines[p.i]
		ind := indentOf(l)
		if ind < indent {
			break
		}
		if ind > indent {
			return nil, false
		}
		rest := l[ind:]
		if !isSeqEntry(rest) {
			break
		}
		p.i++
		after := rest[1:]
		t := strings.TrimLeft(after, " ")
		var v any
		var ok bool
		switch {
		case t == "" || t[0] == '#':
			v, ok = p.value("", ind, false, depth)
		case isSeqEntry(t):
			return nil, false
		case isCompactKey(t):
			v, ok = p.mapping(ind+1+len(after)-len(t), t, true, depth+1)
		default:
			v, ok = p.value(t, ind, false, depth)
		}
		if !ok {
			return nil, false
		}
		out = append(out, v)
	}
	return out, p.count()
}

// isCompactKey: the text after `- ` starts a mapping (`- key: value`).
func isCompactKey(t string) bool {
	if t[0] == '"' || t[0] == '\'' || t[0] == '[' || t[0] == '{' || t[0] == '|' {
		return false
	}
	_, _, ok := splitKey(t)
	return ok
}

// value parses what follows `key:` or `- `: nothing (a nested block, or null), a `|` block, a quoted or
// plain one-line scalar, or a one-line flow collection. indent is the owner's indentation.
func (p *fastYAML) value(after string, indent int, inMapping bool, depth int) (any, bool) {
	t := strings.TrimLeft(after, " ")
	if t != "" && t[0] != '#' && len(after) > 0 && after[0] != ' ' && inMapping {
		return nil, false // `key:value` is not a key in YAML
	}
	if t == "" || t[0] == '#' {
		p.skipBlank()
		if p.i < len(p.lines) {
			l := p.lines[p.i]
			ind := indentOf(l)
			if ind > indent {
				return p.block(ind, depth+1)
			}
			if inMapping && ind == indent && isSeqEntry(l[ind:]) {
				return p.seq(indent, depth+1)
			}
		}
		return nil, p.count()
	}
	var v any
	var rest string
	switch t[0] {
	case '"':
		s, r, ok := doubleQuoted(t)
		if !ok {
			return nil, false
		}
		v, rest = s, r
	case '\'':
		s, r, ok := singleQuoted(t)
		if !ok {
			return nil, false
		}
		v, rest = s, r
	case '[', '{':
		f, r, ok := flow(t)
		if !ok {
			return nil, false
		}
		v, rest = f, r
	case '|':
		return p.literal(t, indent)
	default:
		plain, _, _ := strings.Cut(t, " #")
		plain = strings.TrimRight(plain, " ")
		s, ok := plainScalar(plain)
		if !ok {
			return nil, false
		}
		v = s
	}
	if r := strings.TrimLeft(rest, " "); r != "" && (r[0] != '#' || rest[0] != ' ') {
		return nil, false
	}
	// A more indented line after a one-line scalar would continue it (or be an error): yaml.v3 decides.
	p.skipBlank()
	if p.i < len(p.lines) && indentOf(p.lines[p.i]) > indent {
		return nil, false
	}
	return v, p.count()
}

// plainScalar resolves a one-line plain scalar exactly as yaml.v3 would (through Node.ShortTag).
func plainScalar(s string) (any, bool) {
	if s == "" || strings.IndexByte("-?:,[]{}#&*!|>'\"%@`", s[0]) >= 0 && !(s[0] == '-' && len(s) > 1 && s[1] != ' ') {
		return nil, false
	}
	if strings.Contains(s, ": ") || strings.HasSuffix(s, ":") || strings.Contains(s, " #") {
		return nil, false
	}
	// yaml.v3 resolves a plain scalar only when its first byte hints a number, a bool or null (its
	// resolveTable: sign, digit, '.', '~', and y n t f o in either case); everything else is a string.
	if s == "<<" {
		return nil, false // yaml.v3 resolves it as the merge key's tag, even as a value
	}
	if strings.IndexByte("+-.0123456789~yYnNtTfFoO", s[0]) < 0 {
		return s, true
	}
	switch s {
	case "true", "True", "TRUE":
		return true, true
	case "false", "False", "FALSE":
		return false, true
	case "null", "Null", "NULL", "~":
		return nil, true
	}
	if c := s[0]; c >= 'A' {
		return s, true // a letter hint that is none of the words above
	}
	v, err := yamlScalar(&yaml.Node{Kind: yaml.ScalarNode, Value: s}, "")
	return v, err == nil
}

// doubleQuoted reads a one-line "..." scalar with the common escapes; anything rarer is yaml.v3's.
func doubleQuoted(t string) (s, rest string, ok bool) {
	var b strings.Builder
	for i := 1; i < len(t); i++ {
		switch c := t[i]; c {
		case '"':
			return b.String(), t[i+1:], true
		case '\\':
			if i+1 == len(t) {
				return "", "", false
			}
			i++
			switch t[i] {
			case '\\', '"': // not '/': yaml.v3 refuses "\/" as an unknown escape
				b.WriteByte(t[i])
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			default:
				return "", "", false
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", "", false
}

func singleQuoted(t string) (s, rest string, ok bool) {
	var b strings.Builder
	for i := 1; i < len(t); i++ {
		if t[i] == '\'' {
			if i+1 < len(t) && t[i+1] == '\'' {
				b.WriteByte('\'')
				i++
				continue
			}
			return b.String(), t[i+1:], true
		}
		b.WriteByte(t[i])
	}
	return "", "", false
}

// flow reads a one-line [a, b] or {k: v} whose items are scalars.
func flow(t string) (v any, rest string, ok bool) {
	open, closer := t[0], byte(']')
	if open == '{' {
		closer = '}'
	}
	var items []string
	start, i := 1, 1
	for ; i < len(t); i++ {
		switch c := t[i]; {
		case c == '"' || c == '\'':
			var r string
			var qok bool
			if c == '"' {
				_, r, qok = doubleQuoted(t[i:])
			} else {
				_, r, qok = singleQuoted(t[i:])
			}
			if !qok {
				return nil, "", false
			}
			i = len(t) - len(r) - 1
		case c == '[' || c == '{' || c == ']' && open == '{' || c == '}' && open == '[' || c == '#':
			return nil, "", false
		case c == ',' || c == closer:
			items = append(items, strings.TrimSpace(t[start:i]))
			start = i + 1
			if c == closer {
				goto done
			}
		}
	}
	return nil, "", false
done:
	if len(items) == 1 && items[0] == "" {
		items = nil
	}
	if open == '[' {
		list := make([]any, 0, len(items))
		for _, it := range items {
			x, ok := flowScalar(it)
			if !ok {
				return nil, "", false
			}
			list = append(list, x)
		}
		return list, t[i+1:], true
	}
	o := &specObj{vals: map[string]any{}}
	for _, it := range items {
		k, val, ok := strings.Cut(it, ": ")
		if !ok {
			return nil, "", false
		}
		k, val = strings.TrimSpace(k), strings.TrimSpace(val)
		if key, _, kok := splitKey(k + ":"); !kok || key != k || strings.ContainsAny(k, ",:") {
			return nil, "", false
		}
		x, ok := flowScalar(val)
		if !ok {
			return nil, "", false
		}
		o.set(k, x)
	}
	return o, t[i+1:], true
}

func flowScalar(it string) (any, bool) {
	if it == "" {
		return nil, false
	}
	switch it[0] {
	case '"':
		s, r, ok := doubleQuoted(it)
		return s, ok && r == ""
	case '\'':
		s, r, ok := singleQuoted(it)
		return s, ok && r == ""
	}
	if strings.ContainsAny(it, ":#") {
		return nil, false
	}
	return plainScalar(it)
}

// literal reads a `|` or `|-` block whose lines are indented more than indent.
func (p *fastYAML) literal(header string, indent int) (any, bool) {
	h, _, _ := strings.Cut(header, " #")
	h = strings.TrimRight(h, " ")
	keep := false
	switch h {
	case "|":
		keep = true // clip: one final newline
	case "|-":
	default:
		return nil, false
	}
	// The block's indentation is that of its first line, which must not be blank.
	if p.i == len(p.lines) {
		return nil, false
	}
	blockIndent := indentOf(p.lines[p.i])
	if blockIndent <= indent || blockIndent == len(p.lines[p.i]) {
		return nil, false
	}
	var b strings.Builder
	blanks := 0
	for p.i < len(p.lines) {
		l := p.lines[p.i]
		ind := indentOf(l)
		if ind == len(l) { // blank (spaces only)
			if ind > blockIndent {
				return nil, false // a blank line carrying spaces: yaml.v3 keeps them
			}
			blanks++
			p.i++
			continue
		}
		if ind < blockIndent {
			break
		}
		for ; blanks > 0; blanks-- {
			b.WriteByte('\n')
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(l[blockIndent:])
		p.i++
	}
	if p.i == len(p.lines) && blanks == 0 {
		return nil, false // the text's own final line break (or its absence) matters here: yaml.v3 decides
	}
	if blanks > 0 && p.i == len(p.lines) {
		blanks-- // the empty string after the text's final newline is not a line
	}
	_ = blanks // trailing blank lines are dropped by both clip and strip
	s := b.String()
	if keep && s != "" {
		s += "\n"
	}
	if p.i < len(p.lines) && indentOf(p.lines[p.i]) > indent && strings.TrimSpace(p.lines[p.i]) != "" {
		return nil, false
	}
	return s, p.count()
}
