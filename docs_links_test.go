package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocsLinks checks every relative link of README.md and docs/*.md (the reference pages): the file
// exists, and a #fragment names a heading of it (GitHub's anchors: lower case, punctuation dropped,
// spaces to dashes). The README stays a front page: at most 400 lines, with a link to every page.
func TestDocsLinks(t *testing.T) {
	files, _ := filepath.Glob("docs/*.md")
	files = append(files, "README.md")
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		a := map[string]bool{}
		b, _ := os.ReadFile(path)
		inCode := false
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "```") {
				inCode = !inCode
			}
			if inCode || !strings.HasPrefix(line, "#") {
				continue
			}
			a[githubAnchor(strings.TrimLeft(line, "# "))] = true
		}
		anchors[path] = a
		return a
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			if path == "" {
				path = f
			} else {
				path = filepath.Join(filepath.Dir(f), path)
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s: link %s: no such file %s", f, target, path)
				continue
			}
			if frag != "" && strings.HasSuffix(path, ".md") && !anchorsOf(path)[frag] {
				t.Errorf("%s: link %s: %s has no heading #%s", f, target, path, frag)
			}
		}
	}
	readme, _ := os.ReadFile("README.md")
	if n := strings.Count(string(readme), "\n"); n > 400 {
		t.Errorf("README.md is %d lines; the front page stays at 400 or fewer (the reference is in docs/)", n)
	}
	pages, _ := filepath.Glob("docs/*.md")
	for _, p := range pages {
		if !strings.Contains(string(readme), "("+filepath.ToSlash(p)) {
			t.Errorf("README.md does not link %s", p)
		}
	}
}

// githubAnchor is the fragment GitHub gives a heading.
func githubAnchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}
