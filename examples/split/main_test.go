package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSplitRuns builds the example and runs it small: two worker processes
// on one SQLite file, every account verified, no conflicts.
func TestSplitRuns(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "split")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.CommandContext(t.Context(), bin, "-db", filepath.Join(dir, "bank.db"), "-accounts", "200", "-deposits", "5").CombinedOutput()
	if err != nil {
		t.Fatalf("split: %v\n%s", err, out)
	}
	for _, want := range []string{"worker 0-511:", "worker 512-1023:", "0 conflicts", "verified 200 accounts: each holds 5 cents"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
