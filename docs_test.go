package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// docs/API.md and docs/DESIGN.md are copies of the shared contract (../shared is the source): they must
// not drift. Without the shared folder (a clone elsewhere) there is nothing to compare with.
func TestDocsEqualTheSharedContract(t *testing.T) {
	for _, name := range []string{"API.md", "DESIGN.md"} {
		shared, err := os.ReadFile(filepath.Join("..", "shared", name))
		if err != nil {
			t.Skipf("../shared/%s is not here: %v", name, err)
		}
		ours, err := os.ReadFile(filepath.Join("docs", name))
		if err != nil {
			t.Fatalf("docs/%s is missing: %v", name, err)
		}
		if !bytes.Equal(ours, shared) {
			t.Errorf("docs/%s differs from ../shared/%s: cp ../shared/%s docs/%s", name, name, name, name)
		}
	}
}
