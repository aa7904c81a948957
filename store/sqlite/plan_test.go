package sqlite

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"iter"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
)

// TestPagePlansAreOrderedIndexScans: every ordering-ordered page query
// (by slices, by tag, by type) is planned as a search of an index in
// ordering order, bounded by the page's orderings, never with a temporary
// B-tree for its ORDER BY: on a file written through the store and read at
// once (no statistics), and again after ANALYZE. A page then costs the
// same at the end of a journal as at its start.
func TestPagePlansAreOrderedIndexScans(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "plans.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Enough rows of several types and tags that a sort would be visible,
	// written through the store.
	var writes []journal.AtomicWrite
	for i := range 60 {
		pid := fmt.Sprintf("Plan%d|p-%d", i%3, i)
		w := journal.AtomicWrite{PersistenceID: pid}
		for seq := range int64(50) {
			w.Events = append(w.Events, journal.Repr{PersistenceID: pid, SequenceNr: seq + 1, Payload: []byte("x"), SerializerID: 4, Tags: []string{fmt.Sprintf("t%d", i%4)}})
		}
		writes = append(writes, w)
	}
	if res, err := s.Journal().Write(ctx, writes); err != nil || res != nil {
		t.Fatal(res, err)
	}
	pages := []struct {
		name, sql string
		args      []any
		want      string // the search the plan must make, in ordering order
	}{
		{"bySlices", bySlicesSQL, []any{"Plan0", 0, 511, 0, 1 << 40, queryPage}, "SEARCH e USING INDEX event_journal_type_ordering_idx (entity_type=? AND ordering>? AND ordering<?)"},
		{"byTag", byTagSQL, []any{"t1", 0, 1 << 40, queryPage}, "SEARCH t USING PRIMARY KEY (tag=? AND ordering>? AND ordering<?)"},
		{"byType", newIDsSQL, []any{"Plan1", 0, 1 << 40, queryPage}, "SEARCH e USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)"},
	}
	for _, stats := range []string{"no statistics", "analyzed"} {
		if stats == "analyzed" {
			if _, err := s.writer.ExecContext(ctx, `ANALYZE`); err != nil {
				t.Fatal(err)
			}
		}
		for _, p := range pages {
			plan := explainQueryPlan(t, ctx, s, p.sql, p.args)
			if !contains(plan, p.want) || strings.Contains(strings.Join(plan, "\n"), "TEMP B-TREE") {
				t.Errorf("%s, %s: plan\n\t%s\nwant %q and no temporary B-tree", p.name, stats, strings.Join(plan, "\n\t"), p.want)
			}
		}
	}
}

// explainQueryPlan returns the detail lines of sql's query plan, as the
// reader pool's connections plan it.
func explainQueryPlan(t *testing.T, ctx context.Context, s *Store, sql string, args []any) []string {
	t.Helper()
	rows, err := s.reader.QueryContext(ctx, `EXPLAIN QUERY PLAN `+sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan
}

func contains(lines []string, s string) bool {
	for _, l := range lines {
		if l == s {
			return true
		}
	}
	return false
}

// CurrentEventsByType reads the events of one entity type (every type when
// empty) in ordering order with the statement live PersistenceIDs follows,
// which no current query reaches; for the benchmarks.
func (q *Queries) CurrentEventsByType(ctx context.Context, entityType string, after query.Offset) iter.Seq2[query.Envelope, error] {
	return q.scan(ctx, after, newIDsSQL, entityType)
}

// TestPersistenceIDsPlanProbesTheKey: a page of persistence ids is a
// recursive walk of the journal's primary key, one index search per id,
// with no scan of the journal and no OR (whose plan sorted every row of
// the journal for each id).
func TestPersistenceIDsPlanProbesTheKey(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "ids.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, args := range [][]any{
		{"", "\U0010FFFF", 1000, "", ""},           // every type
		{"Plan|", "Plan}", 1000, "Plan", "Plan|x"}, // one type, after an id
	} {
		plan := explainQueryPlan(t, ctx, s, persistenceIDsSQL, args)
		all := strings.Join(plan, "\n")
		if !contains(plan, "SEARCH j USING COVERING INDEX sqlite_autoindex_event_journal_1 (persistence_id>? AND persistence_id<?)") ||
			strings.Contains(all, "MULTI-INDEX OR") || strings.Contains(all, "SCAN event_journal") || strings.Contains(all, "SCAN j") {
			t.Errorf("ids page %v: plan\n\t%s\nwant one primary-key search per id, no scan and no OR", args, strings.Join(plan, "\n\t"))
		}
	}
}

// TestRecoveryPlansSearchTheKeys: a recovery's two statements search the
// keys of one id (the journal's, journal_metadata's and snapshot's), scan
// no table and sort nothing, so a recovery costs the same in any journal.
func TestRecoveryPlansSearchTheKeys(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "recovery.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, p := range []struct {
		name, sql string
		args      []any
		want      []string
	}{
		{"head", recoveryHeadSQL, []any{"R|1", true, 0, 1 << 40, 0, 1 << 40}, []string{
			"SEARCH event_journal USING COVERING INDEX sqlite_autoindex_event_journal_1 (persistence_id=?)",
			"SEARCH journal_metadata USING PRIMARY KEY (persistence_id=?)",
			"SEARCH snapshot USING PRIMARY KEY (persistence_id=? AND sequence_nr>? AND sequence_nr<?)",
		}},
		{"events", replaySQL, []any{"R|1", 1, 1 << 40, 1000}, []string{
			"SEARCH event_journal USING INDEX sqlite_autoindex_event_journal_1 (persistence_id=? AND sequence_nr>? AND sequence_nr<?)",
		}},
	} {
		plan := explainQueryPlan(t, ctx, s, p.sql, p.args)
		all := strings.Join(plan, "\n")
		for _, w := range p.want {
			if !contains(plan, w) {
				t.Errorf("%s: plan\n\t%s\nwant %q", p.name, strings.Join(plan, "\n\t"), w)
			}
		}
		if strings.Contains(all, "TEMP B-TREE") || strings.Contains(all, "SCAN event_journal") || strings.Contains(all, "SCAN snapshot") {
			t.Errorf("%s: plan\n\t%s\nwant no scan and no temporary B-tree", p.name, strings.Join(plan, "\n\t"))
		}
	}
}

// TestNoBareLimitParameter: no statement of the store binds its LIMIT as
// a bare parameter (LIMIT ? or LIMIT ?N), which SQLite compiles again at
// every new binding (see readerStmtCache); LIMIT +? keeps it compiled. It
// reads every string literal of the package's source files, except the
// statements in compiledPerBinding.
func TestNoBareLimitParameter(t *testing.T) {
	t.Parallel()
	// compiledPerBinding are the statements whose plan needs the limit's
	// value, with why.
	compiledPerBinding := map[string]bool{
		// A page of ids (up to a thousand ids, one probe each): with the
		// limit unknown SQLite reads journal_metadata through an OR of
		// two index searches (TestPersistenceIDsPlanProbesTheKey).
		"persistenceIDsSQL": true,
	}
	bare := regexp.MustCompile(`(?i)\bLIMIT\s+\?`)
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked, excepted := 0, 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if spec, ok := n.(*ast.ValueSpec); ok && len(spec.Names) == 1 && compiledPerBinding[spec.Names[0].Name] {
				excepted++
				return false
			}
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			if strings.Contains(strings.ToUpper(lit.Value), "LIMIT") {
				checked++
			}
			if loc := bare.FindStringIndex(lit.Value); loc != nil {
				t.Errorf("%s: %q binds its LIMIT bare; write LIMIT +?", fset.Position(lit.Pos()), lit.Value[loc[0]:loc[1]])
			}
			return true
		})
	}
	if checked == 0 || excepted != len(compiledPerBinding) {
		t.Fatalf("%d statements with a LIMIT found, %d of %d exceptions: the test reads the wrong files", checked, excepted, len(compiledPerBinding))
	}
}
