package main

// docs/tutorial.md is checked against this program, so the page cannot
// drift from code that compiles and runs:
//
//   - Every ```go block of the page is an excerpt of one of this
//     directory's non-test .go files: consecutive lines of the file, each
//     with the same leading tabs removed (a block may start inside a
//     function, de-indented). Nothing is elided or rewritten: change the
//     code here, then copy the lines into the page.
//   - The page's one ```text block is the program's output on a new
//     store; the program runs on SQLite in t.TempDir() and on PostgreSQL
//     (in a schema of its own) and must print exactly that.

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/annals-go/annals/store/postgres/pgtest"
)

const page = "../../docs/tutorial.md"

// blocks returns the fenced blocks of the page whose fence names lang
// (```go: "go"), each as its lines.
func blocks(t *testing.T, lang string) [][]string {
	t.Helper()
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]string
	var cur []string
	fence, in := "", false
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSuffix(line, "\n")
		switch {
		case !in && strings.HasPrefix(line, "```"):
			fence, in, cur = strings.TrimPrefix(line, "```"), true, nil
		case in && line == "```":
			if fence == lang {
				out = append(out, cur)
			}
			in = false
		case in:
			cur = append(cur, line)
		}
	}
	if in {
		t.Fatalf("%s: a ```%s block is not closed", page, fence)
	}
	return out
}

// excerptOf reports whether block is consecutive lines of src with one
// indentation removed.
func excerptOf(block, src []string) bool {
	for i := range src {
		if len(src)-i < len(block) {
			return false
		}
		indent, ok := strings.CutSuffix(src[i], block[0])
		if !ok || strings.Trim(indent, "\t") != "" {
			continue
		}
		match := true
		for j, line := range block {
			if s := src[i+j]; s != indent+line && !(line == "" && s == "") {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

// TestPageQuotesTheProgram: every Go block of docs/tutorial.md is an
// excerpt of the program.
func TestPageQuotesTheProgram(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	sources := map[string][]string{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		sources[name] = strings.Split(string(b), "\n")
	}
	gos := blocks(t, "go")
	if len(gos) == 0 {
		t.Fatalf("%s has no ```go blocks", page)
	}
	for n, block := range gos {
		if len(block) == 0 {
			t.Errorf("%s: Go block %d is empty", page, n+1)
			continue
		}
		found := false
		for _, src := range sources {
			if excerptOf(block, src) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("%s: Go block %d, which starts %q, is not an excerpt of examples/tutorial (copy it from the source, lines unchanged but for their common indentation)", page, n+1, block[0])
		}
	}
}

// wantOutput is the page's ```text block.
func wantOutput(t *testing.T) string {
	t.Helper()
	texts := blocks(t, "text")
	if len(texts) != 1 {
		t.Fatalf("%s has %d ```text blocks; want one, the program's output", page, len(texts))
	}
	return strings.Join(texts[0], "\n") + "\n"
}

// TestRunsOnSQLite: the program on a new SQLite file prints the page's
// output.
func TestRunsOnSQLite(t *testing.T) {
	want := wantOutput(t)
	var out bytes.Buffer
	if err := run(t.Context(), &out, "sqlite:"+filepath.Join(t.TempDir(), "todo.db")); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if out.String() != want {
		t.Errorf("output:\n%s\nthe page shows:\n%s", out.String(), want)
	}
}

// TestRunsOnPostgres: the program in a new PostgreSQL schema prints the
// page's output (skipped without a server, unless ANNALS_TEST_REQUIRE
// lists postgres).
func TestRunsOnPostgres(t *testing.T) {
	want := wantOutput(t)
	dsn, _ := pgtest.Schema(t)
	var out bytes.Buffer
	if err := run(t.Context(), &out, dsn); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if out.String() != want {
		t.Errorf("output:\n%s\nthe page shows:\n%s", out.String(), want)
	}
}
