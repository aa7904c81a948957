package postgres_test

// BenchmarkCatchUpWritten: catch-up on a journal written through the store
// (Journal.Write, not COPY) and read at once, with no ANALYZE or VACUUM:
// autovacuum is off for the benchmark's tables, so the planner has no
// statistics at all (ANNALS_BENCH_AUTOVACUUM=on leaves the server's
// autovacuum to analyze them as it would):
//
//	ANNALS_BENCH_EVENTS=5000000 go test -run '^$' -bench 'CatchUpWritten$' -benchtime 2x -timeout 2h ./store/postgres/
//
// See the benchmark's comment for what it measures.

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

// The written journal: writtenIDs ids of type "Bench", each written in
// atomic writes of 100 events (write k is id k mod writtenIDs's events
// 100·⌊k/writtenIDs⌋+1 …), every event tagged with one of writtenTags tags
// (by id), in calls of writesPerCall atomic writes from writers goroutines.
const (
	writtenIDs      = 5000
	writtenPerWrite = 100
	writesPerCall   = 20
	writers         = 2
	writtenTags     = 4
	// pageWindow is how many events the page-cost reads take, at the start
	// and at the end of the journal.
	pageWindow = 10_000
	// pageReps is how many start and end reads one iteration of a page
	// benchmark makes: a read takes milliseconds, a full catch-up seconds,
	// and one -benchtime serves both.
	pageReps = 5
)

// benchEvents is the journal's size: ANNALS_BENCH_EVENTS, default
// 1,000,000, a multiple of 100.
func benchEvents(b *testing.B) int {
	n := 1_000_000
	if v := os.Getenv("ANNALS_BENCH_EVENTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n%writtenPerWrite != 0 || n <= 4*pageWindow {
			b.Fatalf("ANNALS_BENCH_EVENTS=%q: want a multiple of %d, more than %d", v, writtenPerWrite, 4*pageWindow)
		}
	}
	return n
}

func writtenID(i int) string  { return fmt.Sprintf("Bench|w-%05d", i) }
func writtenTag(i int) string { return fmt.Sprintf("tag-%d", i%writtenTags) }

// written is a journal written through the store.
type written struct {
	dsn          string
	s            *postgres.Store
	events       int
	tbl, tagTbl  string
	tag          string // the tag the by-tag reads follow
	tagEvents    int
	sliceEnd     query.Offset // the offset before the last pageWindow events of the type
	tagEnd       query.Offset // the same for the tag
	typeEndKey   []any        // (db_timestamp, seq_nr, persistence_id) of the event sliceEnd names
	idsPage      int          // the ids a page of ids reads: 1,000, fewer when there are fewer than 2,000
	idsEndAfter  string       // the id before the last idsPage ids
	allSQL       string       // raw: every event of the type, in order
	tagSQL       string       // raw: every event of the tag, in order
	upper        time.Time    // after every event
	firstReadAll time.Duration
}

// loadWritten writes the journal through Journal.Write and prepares the
// offsets of the page-cost reads with raw selects. It runs no ANALYZE and
// no VACUUM; a first raw read of every row sets the rows' hint bits, so
// that neither side of a timed comparison pays for it.
func loadWritten(b *testing.B) *written {
	b.Helper()
	ctx := b.Context()
	dsn, schema := pgtest.Schema(b)
	s, err := postgres.Open(ctx, dsn, postgres.WithMigrate(true))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	w := &written{dsn: dsn, s: s, events: benchEvents(b), tag: writtenTag(0),
		tbl: pgx.Identifier{schema, "event_journal"}.Sanitize(), tagTbl: pgx.Identifier{schema, "event_tag"}.Sanitize()}
	autovacuum := os.Getenv("ANNALS_BENCH_AUTOVACUUM") == "on"
	if !autovacuum {
		for _, t := range []string{w.tbl, w.tagTbl} {
			if _, err := s.Pool().Exec(ctx, `ALTER TABLE `+t+` SET (autovacuum_enabled = false)`); err != nil {
				b.Fatal(err)
			}
		}
	}

	pids := make([]string, writtenIDs)
	for i := range pids {
		pids[i] = writtenID(i)
	}
	totalWrites := w.events / writtenPerWrite
	calls := (totalWrites + writesPerCall - 1) / writesPerCall
	var next atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for {
				c := int(next.Add(1) - 1)
				if c >= calls || b.Failed() {
					return
				}
				var writes []journal.AtomicWrite
				for k := c * writesPerCall; k < min((c+1)*writesPerCall, totalWrites); k++ {
					id := k % writtenIDs
					pid, from := pids[id], int64(k/writtenIDs*writtenPerWrite)
					aw := journal.AtomicWrite{PersistenceID: pid, Events: make([]journal.Repr, writtenPerWrite)}
					for e := range aw.Events {
						aw.Events[e] = benchEvent(pid, from+int64(e)+1)
						aw.Events[e].Tags = []string{writtenTag(id)}
					}
					writes = append(writes, aw)
				}
				if res, err := s.Journal().Write(ctx, writes); err != nil || res != nil {
					b.Errorf("write: %v %v", res, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	took := time.Since(start)
	b.Logf("wrote %d events (%d ids, atomic writes of %d, %d per call, %d writers, every event tagged) through Journal.Write in %v: %.0f events/s",
		w.events, writtenIDs, writtenPerWrite, writesPerCall, writers, took.Round(time.Millisecond), float64(w.events)/took.Seconds())
	w.upper = time.Now().Add(time.Hour)

	w.allSQL = `SELECT ` + benchColumns + ` FROM ` + w.tbl + ` e WHERE e.entity_type = $1
		ORDER BY e.db_timestamp, e.seq_nr, e.persistence_id`
	w.tagSQL = `SELECT ` + benchColumns + ` FROM ` + w.tagTbl + ` t JOIN ` + w.tbl + ` e ON e.persistence_id = t.persistence_id AND e.seq_nr = t.seq_nr
		WHERE t.tag = $1 ORDER BY t.db_timestamp, t.seq_nr, t.persistence_id`
	for _, q := range []struct{ sql, arg string }{{w.allSQL, "Bench"}, {w.tagSQL, w.tag}} {
		b.Logf("raw plan: %s", explainText(b, s, q.sql, q.arg))
	}
	start = time.Now()
	n, err := rawStream(ctx, s, w.allSQL, "Bench")
	if err != nil || n != w.events {
		b.Fatalf("raw read: %d events, %v", n, err)
	}
	w.firstReadAll = time.Since(start)
	if w.tagEvents, err = rawStream(ctx, s, w.tagSQL, w.tag); err != nil {
		b.Fatal(err)
	}
	b.Logf("first raw read of all %d events (sets hint bits) in %v; %d events have tag %s", w.events, w.firstReadAll.Round(time.Millisecond), w.tagEvents, w.tag)

	// The offsets before the last pageWindow events, of the type and of
	// the tag.
	var ts time.Time
	var seq int64
	var pid string
	if err := s.Pool().QueryRow(ctx, `SELECT db_timestamp, seq_nr, persistence_id FROM `+w.tbl+` WHERE entity_type = $1
		ORDER BY db_timestamp DESC, seq_nr DESC, persistence_id DESC OFFSET $2 LIMIT 1`, "Bench", pageWindow).Scan(&ts, &seq, &pid); err != nil {
		b.Fatal(err)
	}
	w.sliceEnd = query.TimestampOffset(ts, map[string]int64{pid: seq})
	w.typeEndKey = []any{ts, seq, pid}
	if err := s.Pool().QueryRow(ctx, `SELECT db_timestamp, seq_nr, persistence_id FROM `+w.tagTbl+` WHERE tag = $1
		ORDER BY db_timestamp DESC, seq_nr DESC, persistence_id DESC OFFSET $2 LIMIT 1`, w.tag, pageWindow).Scan(&ts, &seq, &pid); err != nil {
		b.Fatal(err)
	}
	w.tagEnd = query.TimestampOffset(ts, map[string]int64{pid: seq})
	w.idsPage = min(1000, min(writtenIDs, totalWrites)/2)
	if err := s.Pool().QueryRow(ctx, `SELECT persistence_id FROM (SELECT DISTINCT persistence_id FROM `+w.tbl+`) ids
		ORDER BY persistence_id DESC OFFSET $1 LIMIT 1`, w.idsPage).Scan(&w.idsEndAfter); err != nil {
		b.Fatal(err)
	}
	b.Logf("statistics: %s", statsOf(b, s, w.tbl))
	return w
}

// explainText returns the plan of sql (one text parameter) under the
// store's page settings, on one line.
func explainText(b *testing.B, s *postgres.Store, sql, arg string) string {
	ctx := b.Context()
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, postgres.OrderedPlan); err != nil {
		b.Fatal(err)
	}
	rows, err := tx.Query(ctx, `EXPLAIN `+sql, arg)
	if err != nil {
		b.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		b.Fatal(err)
	}
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	return strings.Join(lines, " | ")
}

// statsOf describes what the planner knows of tbl.
func statsOf(b *testing.B, s *postgres.Store, tbl string) string {
	var reltuples float64
	var analyzed bool
	if err := s.Pool().QueryRow(b.Context(), `SELECT c.reltuples, COALESCE(st.last_analyze, st.last_autoanalyze) IS NOT NULL
		FROM pg_class c LEFT JOIN pg_stat_user_tables st ON st.relid = c.oid WHERE c.oid = $1::regclass`, tbl).Scan(&reltuples, &analyzed); err != nil {
		b.Fatal(err)
	}
	return fmt.Sprintf("%s reltuples=%.0f analyzed=%v", tbl, reltuples, analyzed)
}

// rawStream runs sql as one streamed select and scans every row as the
// store does. It runs under the store's page settings (postgres.OrderedPlan:
// no sorts, no bitmap scans), in the same implicit transaction: with no
// statistics the planner would otherwise sort every row (a bitmap scan of
// the type, then a sort), which is not the fastest way to read them in
// order, and the baseline would flatter the store.
func rawStream(ctx context.Context, s *postgres.Store, sql string, args ...any) (int, error) {
	bt := &pgx.Batch{}
	bt.Queue(postgres.OrderedPlan)
	bt.Queue(sql, args...)
	br := s.Pool().SendBatch(ctx, bt)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return 0, err
	}
	rows, err := br.Query()
	if err != nil {
		return 0, err
	}
	return scanRaw(rows, nil)
}

// count reads events until it has limit of them (every one when limit is
// 0) and returns how many it read.
func count(events func(yield func(query.Envelope, error) bool), limit int) (int, error) {
	n := 0
	for _, err := range events {
		if err != nil {
			return n, err
		}
		if n++; n == limit {
			break
		}
	}
	return n, nil
}

// takeTurns runs the two sides of a comparison once each, the first side
// first on even turns, and adds their times.
func takeTurns(b *testing.B, i int, times *[2]time.Duration, sides [2]func() error) {
	b.Helper()
	for k := range 2 {
		side := (k + i) % 2
		start := time.Now()
		if err := sides[side](); err != nil {
			b.Fatal(err)
		}
		times[side] += time.Since(start)
	}
}

// BenchmarkCatchUpWritten: catch-up on a journal of ANNALS_BENCH_EVENTS
// events written through the store just before (see loadWritten: 5,000
// ids of one type, atomic writes of 100 events, one of four tags on every
// event; no statistics), each Annals figure beside its baseline in the same
// benchmark, the two sides taking turns:
//
//   - slices/instances=1: CurrentEventsBySlices over slices 0–1023 from
//     NoOffset, beside a raw select of the same rows (one streamed query,
//     no paging) in (db_timestamp, seq_nr, persistence_id) order, scanning
//     the same columns;
//   - slices/instances=4: four CurrentEventsBySlices over the four slice
//     ranges, in parallel, beside the same raw select of every row;
//   - tag: CurrentEventsByTag of one tag (a quarter of the events) beside a
//     raw select of the tag's rows joined to their events, in the same
//     order.
//
// They report events/s (Annals), raw-events/s and annals/raw. The raw
// selects run under the store's page settings (see rawStream).
//
// The page/… benchmarks compare the cost of a page at the start of the
// journal and at its end: the first pageWindow events from NoOffset
// against the last pageWindow events from the timestamp offset of the event
// before them, read through a store whose page size is pageWindow (one page
// each, the read stopping at pageWindow events), pageReps of each per
// iteration. They report start-events/s, end-events/s and end/start.
// page/type runs the store's by-type page statement (what live
// PersistenceIDs reads; no current query reaches it) as the store runs it,
// one page of pageWindow rows from the start key and from the key before
// the last pageWindow rows; page/ids is CurrentPersistenceIDs, a page of
// 1,000 ids from the first and before the last 1,000 (start-ids/s,
// end-ids/s).
//
// Plans: cold runs each start and end pair on a new store (a new pool, so
// each statement's first executions on a connection: custom plans, as
// right after a start); warm on one store whose connection ran each
// statement at least eight times before timing (PostgreSQL plans a
// prepared statement generically from the sixth execution when the generic
// plan looks no worse); the benchmark logs the custom and generic plan
// counts of the warm store's prepared page statements. The full catch-ups
// run hundreds of pages per connection, so they run on generic plans from
// their sixth page on, whenever the planner takes them.
func BenchmarkCatchUpWritten(b *testing.B) {
	w := loadWritten(b)
	ranges4, err := annals.SliceRanges(4)
	if err != nil {
		b.Fatal(err)
	}
	compare := func(name string, want int, annalsSide func(ctx context.Context) (int, error), rawSide func(ctx context.Context) (int, error)) {
		b.Run(name, func(b *testing.B) {
			var times [2]time.Duration
			i := 0
			for b.Loop() {
				takeTurns(b, i, &times, [2]func() error{
					func() error { return wantCount(annalsSide(b.Context()))(want) },
					func() error { return wantCount(rawSide(b.Context()))(want) },
				})
				i++
			}
			events := float64(want * i)
			b.ReportMetric(events/times[0].Seconds(), "events/s")
			b.ReportMetric(events/times[1].Seconds(), "raw-events/s")
			b.ReportMetric(times[1].Seconds()/times[0].Seconds(), "annals/raw")
		})
	}
	rawAll := func(ctx context.Context) (int, error) { return rawStream(ctx, w.s, w.allSQL, "Bench") }
	compare("slices/instances=1", w.events, func(ctx context.Context) (int, error) {
		return count(w.s.Queries().CurrentEventsBySlices(ctx, "Bench", 0, annals.NumberOfSlices-1, query.NoOffset()), 0)
	}, rawAll)
	compare("slices/instances=4", w.events, func(ctx context.Context) (int, error) {
		var total atomic.Int64
		errs := make([]error, len(ranges4))
		var wg sync.WaitGroup
		for k, r := range ranges4 {
			wg.Go(func() {
				n, err := count(w.s.Queries().CurrentEventsBySlices(ctx, "Bench", r.Min, r.Max, query.NoOffset()), 0)
				total.Add(int64(n))
				errs[k] = err
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return 0, err
			}
		}
		return int(total.Load()), nil
	}, rawAll)
	compare("tag", w.tagEvents, func(ctx context.Context) (int, error) {
		return count(w.s.Queries().CurrentEventsByTag(ctx, w.tag, query.NoOffset()), 0)
	}, func(ctx context.Context) (int, error) { return rawStream(ctx, w.s, w.tagSQL, w.tag) })

	// Page costs at the start and at the end.
	queries := postgres.OrderedQueries(w.s)
	typePage := func(s *postgres.Store, key []any) func(ctx context.Context) (int, error) {
		return func(ctx context.Context) (int, error) {
			return rawStream(ctx, s, queries["byType"], append([]any{"Bench"}, append(key, w.upper, pageWindow)...)...)
		}
	}
	type page struct {
		name, unit string
		want       int
		start, end func(s *postgres.Store) func(ctx context.Context) (int, error)
	}
	pages := []page{
		{"slices", "events", pageWindow,
			func(s *postgres.Store) func(ctx context.Context) (int, error) {
				return func(ctx context.Context) (int, error) {
					return count(s.Queries().CurrentEventsBySlices(ctx, "Bench", 0, annals.NumberOfSlices-1, query.NoOffset()), pageWindow)
				}
			},
			func(s *postgres.Store) func(ctx context.Context) (int, error) {
				return func(ctx context.Context) (int, error) {
					return count(s.Queries().CurrentEventsBySlices(ctx, "Bench", 0, annals.NumberOfSlices-1, w.sliceEnd), pageWindow)
				}
			}},
		{"tag", "events", pageWindow,
			func(s *postgres.Store) func(ctx context.Context) (int, error) {
				return func(ctx context.Context) (int, error) {
					return count(s.Queries().CurrentEventsByTag(ctx, w.tag, query.NoOffset()), pageWindow)
				}
			},
			func(s *postgres.Store) func(ctx context.Context) (int, error) {
				return func(ctx context.Context) (int, error) {
					return count(s.Queries().CurrentEventsByTag(ctx, w.tag, w.tagEnd), pageWindow)
				}
			}},
		{"type", "events", pageWindow,
			func(s *postgres.Store) func(ctx context.Context) (int, error) {
				return typePage(s, []any{time.Unix(0, 0), int64(-1), ""})
			},
			func(s *postgres.Store) func(ctx context.Context) (int, error) { return typePage(s, w.typeEndKey) }},
		{"ids", "ids", w.idsPage,
			func(s *postgres.Store) func(ctx context.Context) (int, error) {
				return func(ctx context.Context) (int, error) {
					ids, err := s.Queries().CurrentPersistenceIDs(ctx, "Bench", "", w.idsPage)
					return len(ids), err
				}
			},
			func(s *postgres.Store) func(ctx context.Context) (int, error) {
				return func(ctx context.Context) (int, error) {
					ids, err := s.Queries().CurrentPersistenceIDs(ctx, "Bench", w.idsEndAfter, w.idsPage)
					return len(ids), err
				}
			}},
	}
	openPaged := func(b *testing.B) *postgres.Store {
		s, err := postgres.Open(b.Context(), w.dsn, postgres.WithPageSize(pageWindow))
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	report := func(b *testing.B, p page, times [2]time.Duration, n int) {
		b.ReportMetric(float64(p.want*n)/times[0].Seconds(), "start-"+p.unit+"/s")
		b.ReportMetric(float64(p.want*n)/times[1].Seconds(), "end-"+p.unit+"/s")
		b.ReportMetric(times[0].Seconds()/times[1].Seconds(), "end/start")
	}
	for _, p := range pages {
		b.Run("page/"+p.name+"/cold", func(b *testing.B) {
			var times [2]time.Duration
			i := 0
			for b.Loop() {
				for range pageReps {
					s := openPaged(b)
					takeTurns(b, i, &times, [2]func() error{
						func() error { return wantCount(p.start(s)(b.Context()))(p.want) },
						func() error { return wantCount(p.end(s)(b.Context()))(p.want) },
					})
					s.Close()
					i++
				}
			}
			report(b, p, times, i)
		})
	}
	for _, p := range pages {
		b.Run("page/"+p.name+"/warm", func(b *testing.B) {
			s := openPaged(b)
			defer s.Close()
			start, end := p.start(s), p.end(s)
			for range 8 {
				for _, read := range []func(context.Context) (int, error){start, end} {
					if err := wantCount(read(b.Context()))(p.want); err != nil {
						b.Fatal(err)
					}
				}
			}
			var times [2]time.Duration
			i := 0
			for b.Loop() {
				for range pageReps {
					takeTurns(b, i, &times, [2]func() error{
						func() error { return wantCount(start(b.Context()))(p.want) },
						func() error { return wantCount(end(b.Context()))(p.want) },
					})
					i++
				}
			}
			report(b, p, times, i)
			b.Logf("warm plans: %s", planCounts(b, s))
		})
	}
}

// wantCount turns a read's (count, error) into an error when the count is
// not want.
func wantCount(n int, err error) func(want int) error {
	return func(want int) error {
		if err == nil && n != want {
			err = fmt.Errorf("read %d, want %d", n, want)
		}
		return err
	}
}

// planCounts lists, for each idle connection of s's pool, how many custom
// and generic plans its prepared statements that read in timestamp order
// or list ids ran.
func planCounts(b *testing.B, s *postgres.Store) string {
	ctx := b.Context()
	var out []string
	for _, c := range s.Pool().AcquireAllIdle(ctx) {
		rows, err := c.Query(ctx, `SELECT left(regexp_replace(statement, '\s+', ' ', 'g'), 60), custom_plans, generic_plans FROM pg_prepared_statements
			WHERE (statement LIKE '%ORDER BY%db_timestamp%LIMIT%' OR statement LIKE '%DISTINCT persistence_id%') AND statement NOT LIKE '%pg_prepared_statements%'`)
		if err == nil {
			for rows.Next() {
				var st string
				var custom, generic int64
				if err = rows.Scan(&st, &custom, &generic); err != nil {
					break
				}
				out = append(out, fmt.Sprintf("[%s…: %d custom, %d generic]", st, custom, generic))
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		c.Release()
		if err != nil {
			b.Fatal(err)
		}
	}
	return strings.Join(out, " ")
}
