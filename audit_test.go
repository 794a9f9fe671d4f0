package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestAuditMapIsTrue keeps the audit map at the top of main.go true: every function it names
// (written file.go:Func or file.go:(*T).Method) is declared in that file, and each stop's stated line
// total ("[N lines]") and the map's total ("about N lines") are within 15% of what those functions
// measure today. Moving or deleting a listed function, or growing a stop, fails here.
func TestAuditMapIsTrue(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	text := string(src)
	start, end := strings.Index(text, "# Audit map"), strings.Index(text, "This file holds")
	if start < 0 || end < start {
		t.Fatal("main.go has no audit map")
	}
	amap := strings.ReplaceAll(text[start:end], "\n//", "\n")

	fset := token.NewFileSet()
	funcs := map[string]map[string]int{} // file → name → lines
	declared := func(file string) map[string]int {
		if m, ok := funcs[file]; ok {
			return m
		}
		m := map[string]int{}
		funcs[file] = m
		af, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Errorf("audit map names %s: %v", file, err)
			return m
		}
		for _, d := range af.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			name := fd.Name.Name
			if fd.Recv != nil {
				typ, star := fd.Recv.List[0].Type, ""
				if s, ok := typ.(*ast.StarExpr); ok {
					typ, star = s.X, "*"
				}
				if ix, ok := typ.(*ast.IndexExpr); ok {
					typ = ix.X
				}
				name = fmt.Sprintf("(%s%s).%s", star, typ.(*ast.Ident).Name, name)
			}
			m[name] = fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
		}
		return m
	}

	ref := regexp.MustCompile(`([a-z0-9_]+\.go):(\(\*?[A-Za-z0-9_]+\)\.[A-Za-z0-9_]+|[A-Za-z0-9_]+)`)
	stated := regexp.MustCompile(`\[(\d[\d,]*) lines\]`)
	near := func(got, want int) bool {
		return float64(got) >= 0.85*float64(want) && float64(got) <= 1.15*float64(want)
	}
	stops := regexp.MustCompile(`(?m)^\s+\d+\. `).Split(amap, -1)[1:]
	if len(stops) < 10 {
		t.Fatalf("the audit map has %d stops; it lists every crossing (issue 27)", len(stops))
	}
	total := 0
	for i, stop := range stops {
		refs := ref.FindAllStringSubmatch(stop, -1)
		if len(refs) == 0 {
			t.Errorf("stop %d names no file.go:Func", i+1)
		}
		lines, seen := 0, map[string]bool{}
		for _, r := range refs {
			n, ok := declared(r[1])[r[2]]
			if !ok {
				t.Errorf("stop %d: %s:%s is not declared in %s", i+1, r[1], r[2], r[1])
				continue
			}
			if !seen[r[0]] {
				seen[r[0]] = true
				lines += n
			}
		}
		total += lines
		m := stated.FindStringSubmatch(stop)
		if m == nil {
			t.Errorf("stop %d states no [N lines] (measured %d)", i+1, lines)
			continue
		}
		if want, _ := strconv.Atoi(strings.ReplaceAll(m[1], ",", "")); !near(lines, want) {
			t.Errorf("stop %d says [%s lines]; its functions measure %d", i+1, m[1], lines)
		}
	}
	m := regexp.MustCompile(`about (\d[\d,]*) lines`).FindStringSubmatch(amap)
	if m == nil {
		t.Fatalf("the audit map states no total (measured %d)", total)
	}
	if want, _ := strconv.Atoi(strings.ReplaceAll(m[1], ",", "")); !near(total, want) {
		t.Errorf("the audit map says about %s lines; its functions measure %d", m[1], total)
	}
	t.Logf("audit map: %d stops, %d lines", len(stops), total)
}
