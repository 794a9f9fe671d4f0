package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// allowedRequires are the only direct dependencies the design card allows.
var allowedRequires = map[string]bool{
	"golang.org/x/net": true, "golang.org/x/sync": true, "gopkg.in/yaml.v3": true, "modernc.org/sqlite": true,
}

// directRequires lists the modules go.mod requires without an `// indirect` marker.
func directRequires(gomod string) []string {
	var out []string
	inBlock := false
	for _, line := range strings.Split(gomod, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "require ("):
			inBlock = true
			continue
		case inBlock && line == ")":
			inBlock = false
			continue
		case strings.HasPrefix(line, "require "):
			line = strings.TrimPrefix(line, "require ")
		case !inBlock:
			continue
		}
		if line == "" || strings.HasPrefix(line, "//") || strings.Contains(line, "// indirect") {
			continue
		}
		out = append(out, strings.Fields(line)[0])
	}
	return out
}

func TestOnlyAllowedDirectDependencies(t *testing.T) {
	b, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	reqs := directRequires(string(b))
	if len(reqs) == 0 {
		t.Fatal("no direct requires found; the go.mod parser is broken")
	}
	for _, m := range reqs {
		if !allowedRequires[m] {
			t.Errorf("go.mod requires %s directly; only %v are allowed (put tooling in a sub-module)", m, allowedRequires)
		}
	}
	// The parser itself sees a forbidden module in both require forms.
	for _, mod := range []string{"require github.com/evil/x v1.0.0\n", "require (\n\tgithub.com/evil/x v1.0.0\n\tgolang.org/x/sys v0.1.0 // indirect\n)\n"} {
		if got := directRequires(mod); len(got) != 1 || got[0] != "github.com/evil/x" {
			t.Fatalf("directRequires(%q) = %v", mod, got)
		}
	}
}

// TestNoGoFilesInSubfolders: one flat package; Go code below the root lives only in testdata/ or in a
// folder with its own go.mod (a separate module for tooling).
func TestNoGoFilesInSubfolders(t *testing.T) {
	filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != "." && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); p != "." && err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") && filepath.Dir(p) != "." {
			t.Errorf("%s: Go files belong in the root package, testdata/, or a sub-module", p)
		}
		return nil
	})
}
