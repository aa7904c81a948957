package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

// planNode is a node of EXPLAIN (FORMAT JSON).
type planNode struct {
	NodeType  string     `json:"Node Type"`
	IndexName string     `json:"Index Name"`
	Plans     []planNode `json:"Plans"`
}

// walk calls f for n and every node below it.
func (n planNode) walk(f func(planNode)) {
	f(n)
	for _, c := range n.Plans {
		c.walk(f)
	}
}

// TestPagePlansAreOrderedIndexScans: every offset-ordered page query is
// planned as an ordered scan of the index that gives its order, never a
// sort of the remaining rows, whether the plan is custom or generic, on a
// table that has no statistics (written and read at once): a page then
// costs the same at the end of a journal as at its start.
func TestPagePlansAreOrderedIndexScans(t *testing.T) {
	t.Parallel()
	dsn, _ := pgtest.Schema(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s, err := postgres.Open(ctx, dsn, postgres.WithMigrate(true))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Enough rows that a sort would be visible, written through the store.
	var writes []journal.AtomicWrite
	for i := range 40 {
		pid := fmt.Sprintf("Plan%d|p-%d", i%2, i)
		var evs []journal.Repr
		for seq := range int64(50) {
			evs = append(evs, journal.Repr{PersistenceID: pid, SequenceNr: seq + 1, Payload: []byte("x"), SerializerID: 4, Tags: []string{"t"}})
		}
		writes = append(writes, journal.AtomicWrite{Events: evs})
	}
	if _, err := s.Journal().Write(ctx, writes); err != nil {
		t.Fatal(err)
	}
	args := map[string][]any{
		"bySlices":  {"Plan0", 0, 511, time.Unix(0, 0), -1, "", time.Now().Add(time.Hour), 1000},
		"byTag":     {"t", time.Unix(0, 0), -1, "", time.Now().Add(time.Hour), 1000},
		"byType":    {"Plan1", time.Unix(0, 0), -1, "", time.Now().Add(time.Hour), 1000},
		"byAnyType": {time.Unix(0, 0), -1, "", time.Now().Add(time.Hour), 1000},
	}
	wantIndex := map[string]string{
		"bySlices":  "event_journal_entity_type_idx",
		"byTag":     "event_tag_pkey",
		"byType":    "event_journal_entity_type_idx",
		"byAnyType": "event_journal_entity_type_idx",
	}
	for name, sql := range postgres.OrderedQueries(s) {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			t.Run(name+"/"+mode, func(t *testing.T) {
				plan := explain(t, ctx, s, mode, sql, args[name])
				var sorts, scans []string
				used := false
				plan.walk(func(n planNode) {
					switch {
					case n.NodeType == "Sort" || n.NodeType == "Incremental Sort":
						sorts = append(sorts, n.NodeType)
					case n.NodeType == "Seq Scan" || strings.HasPrefix(n.NodeType, "Bitmap"):
						scans = append(scans, n.NodeType)
					}
					if n.IndexName == wantIndex[name] {
						used = true
					}
				})
				// byAnyType merges one page per entity type: its one sort
				// is of those pages, bounded by types × page size.
				if name == "byAnyType" && len(sorts) == 1 {
					sorts = nil
				}
				if len(sorts) > 0 || len(scans) > 0 || !used {
					t.Errorf("plan has sorts %v and scans %v, uses %s: %v; want an ordered scan of it: %+v", sorts, scans, wantIndex[name], used, plan)
				}
			})
		}
	}
}

// explain returns the plan of sql with args under the store's page
// settings and the given plan_cache_mode, as the store would run it.
func explain(t *testing.T, ctx context.Context, s *postgres.Store, mode, sql string, args []any) planNode {
	t.Helper()
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, postgres.OrderedPlan); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT set_config('plan_cache_mode', $1, true)`, mode); err != nil {
		t.Fatal(err)
	}
	name := pgx.Identifier{"plan_" + strings.ReplaceAll(mode, "_", "")}.Sanitize()
	if _, err := tx.Exec(ctx, `PREPARE `+name+` AS `+sql); err != nil {
		t.Fatal(err)
	}
	defer tx.Exec(ctx, `DEALLOCATE `+name)
	// EXECUTE takes no bind parameters: the values go in as literals.
	params := make([]string, len(args))
	for i, a := range args {
		switch a := a.(type) {
		case string:
			params[i] = "'" + strings.ReplaceAll(a, "'", "''") + "'"
		case time.Time:
			params[i] = "'" + a.UTC().Format(time.RFC3339Nano) + "'::timestamptz"
		default:
			params[i] = fmt.Sprint(a)
		}
	}
	var raw []byte
	if err := tx.QueryRow(ctx, `EXPLAIN (FORMAT JSON) EXECUTE `+name+`(`+strings.Join(params, ", ")+`)`).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var out []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || len(out) != 1 {
		t.Fatalf("EXPLAIN: %v (%s)", err, raw)
	}
	return out[0].Plan
}
