package sqlite_test

// BenchmarkCatchUpWritten: catch-up on a journal written through the store
// (Journal.Write) and read at once, with no ANALYZE:
//
//	ANNALS_BENCH_EVENTS=5000000 go test -run '^$' -bench 'CatchUpWritten$' -benchtime 2x -timeout 2h ./store/sqlite/
//
// See the benchmark's comment for what it measures.

import (
	"context"
	"database/sql"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/store/sqlite"
)

// The written journal, as in the PostgreSQL benchmark: writtenIDs ids of
// type "Bench", each written in atomic writes of 100 events (write k is id
// k mod writtenIDs's events 100·⌊k/writtenIDs⌋+1 …), every event tagged
// with one of writtenTags tags (by id), in calls of writesPerCall atomic
// writes from writers goroutines.
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
	// benchmark makes.
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

// written is a journal written through the store, and a raw connection to
// its file.
type written struct {
	s         *sqlite.Store
	raw       *sql.DB
	events    int
	tag       string // the tag the by-tag reads follow
	tagEvents int
	typeEnd   query.Offset // the offset before the last pageWindow events of the type
	tagEnd    query.Offset // the same for the tag
	idsPage   int          // the ids a page of ids reads
	idsEnd    string       // the id before the last idsPage ids
	allSQL    string       // raw: every event of the type, in order
	tagSQL    string       // raw: every event of the tag, in order
}

// loadWritten writes the journal through Journal.Write and finds the
// offsets of the page-cost reads with raw selects. It runs no ANALYZE.
func loadWritten(b *testing.B) *written {
	b.Helper()
	ctx := b.Context()
	path := filepath.Join(b.TempDir(), "catchup.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	w := &written{s: s, events: benchEvents(b), tag: writtenTag(0)}

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

	// The baseline's connection: read-only, on the same file.
	if w.raw, err = sql.Open("sqlite3", "file:"+path+"?mode=ro&_query_only=1"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = w.raw.Close() })
	const columns = `e.ordering, e.persistence_id, e.sequence_nr, e.timestamp, e.payload, e.serializer_id, e.manifest, e.writer, e.tags, e.metadata, e.slice, e.entity_type`
	w.allSQL = `SELECT ` + columns + ` FROM event_journal e WHERE e.entity_type = ? ORDER BY e.ordering`
	w.tagSQL = `SELECT ` + columns + ` FROM event_tag t JOIN event_journal e ON e.ordering = t.ordering WHERE t.tag = ? ORDER BY t.ordering`
	for _, q := range []struct{ text, arg string }{{w.allSQL, "Bench"}, {w.tagSQL, w.tag}} {
		b.Logf("raw plan: %s", queryPlan(b, w.raw, q.text, q.arg))
	}
	start = time.Now()
	n, err := rawScan(ctx, w.raw, w.allSQL, "Bench")
	if err != nil || n != w.events {
		b.Fatalf("raw read: %d events, %v", n, err)
	}
	if w.tagEvents, err = rawScan(ctx, w.raw, w.tagSQL, w.tag); err != nil {
		b.Fatal(err)
	}
	b.Logf("first raw read of all %d events in %v; %d events have tag %s", w.events, time.Since(start).Round(time.Millisecond), w.tagEvents, w.tag)

	var ordering int64
	if err := w.raw.QueryRowContext(ctx, `SELECT ordering FROM event_journal WHERE entity_type = ? ORDER BY ordering DESC LIMIT 1 OFFSET ?`, "Bench", pageWindow).Scan(&ordering); err != nil {
		b.Fatal(err)
	}
	w.typeEnd = query.SequenceOffset(ordering)
	if err := w.raw.QueryRowContext(ctx, `SELECT ordering FROM event_tag WHERE tag = ? ORDER BY ordering DESC LIMIT 1 OFFSET ?`, w.tag, pageWindow).Scan(&ordering); err != nil {
		b.Fatal(err)
	}
	w.tagEnd = query.SequenceOffset(ordering)
	w.idsPage = min(1000, min(writtenIDs, totalWrites)/2)
	if err := w.raw.QueryRowContext(ctx, `SELECT DISTINCT persistence_id FROM event_journal ORDER BY persistence_id DESC LIMIT 1 OFFSET ?`, w.idsPage).Scan(&w.idsEnd); err != nil {
		b.Fatal(err)
	}
	var stats int
	if err := w.raw.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE name = 'sqlite_stat1'`).Scan(&stats); err != nil {
		b.Fatal(err)
	}
	b.Logf("statistics: sqlite_stat1 tables %d", stats)
	return w
}

// queryPlan returns the plan of text (one parameter) on one line.
func queryPlan(b *testing.B, db *sql.DB, text string, arg any) string {
	rows, err := db.QueryContext(b.Context(), `EXPLAIN QUERY PLAN `+text, arg)
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			b.Fatal(err)
		}
		plan = append(plan, detail)
	}
	return strings.Join(plan, " | ")
}

// rawScan runs text as one streamed select and scans every row into the
// fields the store fills. Like the store, it runs the query on a context
// without cancellation (the driver watches a cancellable one with a
// goroutine per row).
func rawScan(ctx context.Context, db *sql.DB, text string, args ...any) (int, error) {
	rows, err := db.QueryContext(context.WithoutCancel(ctx), text, args...)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var e journal.Repr
		var ts int64
		var tags sql.NullString
		if err := rows.Scan(&e.Ordering, &e.PersistenceID, &e.SequenceNr, &ts, &e.Payload, &e.SerializerID, &e.Manifest, &e.WriterID, &tags, &e.Metadata, &e.Slice, &e.EntityType); err != nil {
			return n, err
		}
		n++
	}
	return n, rows.Err()
}

// count reads events until it has limit of them (every one when limit is
// 0) and returns how many it read.
func count(events iter.Seq2[query.Envelope, error], limit int) (int, error) {
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

// BenchmarkCatchUpWritten: catch-up on a journal of ANNALS_BENCH_EVENTS
// events written through the store just before (see loadWritten: 5,000
// ids of one type, atomic writes of 100 events, one of four tags on every
// event; no ANALYZE), each Annals figure beside its baseline in the same
// benchmark, the two sides taking turns:
//
//   - slices/instances=1: CurrentEventsBySlices over slices 0–1023 from
//     NoOffset, beside a raw select of the same rows (one streamed query
//     with the raw driver on a read-only connection, no paging) in
//     ordering order, scanning the same columns;
//   - slices/instances=4: four CurrentEventsBySlices over the four slice
//     ranges, in parallel, beside the same raw select of every row;
//   - tag: CurrentEventsByTag of one tag (a quarter of the events) beside a
//     raw select of the tag's rows joined to their events, in the same
//     order.
//
// They report events/s (Annals), raw-events/s and annals/raw.
//
// The page/… benchmarks compare the cost of pages at the start of the
// journal and at its end: the first pageWindow events from NoOffset
// against the last pageWindow events from the offset of the event before
// them (ten pages of 1,000 each), pageReps of each per iteration, by
// slices, by tag, and by type (the statement live PersistenceIDs follows,
// which no current query reaches); page/ids is CurrentPersistenceIDs, a
// page of 1,000 ids from the first and before the last 1,000. They report
// start-events/s (start-ids/s), end-events/s (end-ids/s) and end/start.
// SQLite plans a statement when it prepares it, from the statistics then
// (none here), so there is no cold and warm plan as in PostgreSQL;
// TestPagePlansAreOrderedIndexScans checks the plans with and without
// statistics.
func BenchmarkCatchUpWritten(b *testing.B) {
	w := loadWritten(b)
	ranges4, err := annals.SliceRanges(4)
	if err != nil {
		b.Fatal(err)
	}
	q := w.s.Queries()
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
	rawAll := func(ctx context.Context) (int, error) { return rawScan(ctx, w.raw, w.allSQL, "Bench") }
	compare("slices/instances=1", w.events, func(ctx context.Context) (int, error) {
		return count(q.CurrentEventsBySlices(ctx, "Bench", 0, annals.NumberOfSlices-1, query.NoOffset()), 0)
	}, rawAll)
	compare("slices/instances=4", w.events, func(ctx context.Context) (int, error) {
		var total atomic.Int64
		errs := make([]error, len(ranges4))
		var wg sync.WaitGroup
		for k, r := range ranges4 {
			wg.Go(func() {
				n, err := count(q.CurrentEventsBySlices(ctx, "Bench", r.Min, r.Max, query.NoOffset()), 0)
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
		return count(q.CurrentEventsByTag(ctx, w.tag, query.NoOffset()), 0)
	}, func(ctx context.Context) (int, error) { return rawScan(ctx, w.raw, w.tagSQL, w.tag) })

	type page struct {
		name, unit string
		want       int
		start, end func(ctx context.Context) (int, error)
	}
	events := func(read func(ctx context.Context, after query.Offset) iter.Seq2[query.Envelope, error], after query.Offset) func(ctx context.Context) (int, error) {
		return func(ctx context.Context) (int, error) { return count(read(ctx, after), pageWindow) }
	}
	bySlices := func(ctx context.Context, after query.Offset) iter.Seq2[query.Envelope, error] {
		return q.CurrentEventsBySlices(ctx, "Bench", 0, annals.NumberOfSlices-1, after)
	}
	byTag := func(ctx context.Context, after query.Offset) iter.Seq2[query.Envelope, error] {
		return q.CurrentEventsByTag(ctx, w.tag, after)
	}
	byType := func(ctx context.Context, after query.Offset) iter.Seq2[query.Envelope, error] {
		return q.CurrentEventsByType(ctx, "Bench", after)
	}
	ids := func(after string) func(ctx context.Context) (int, error) {
		return func(ctx context.Context) (int, error) {
			ids, err := q.CurrentPersistenceIDs(ctx, "Bench", after, w.idsPage)
			return len(ids), err
		}
	}
	for _, p := range []page{
		{"slices", "events", pageWindow, events(bySlices, query.NoOffset()), events(bySlices, w.typeEnd)},
		{"tag", "events", pageWindow, events(byTag, query.NoOffset()), events(byTag, w.tagEnd)},
		{"type", "events", pageWindow, events(byType, query.NoOffset()), events(byType, w.typeEnd)},
		{"ids", "ids", w.idsPage, ids(""), ids(w.idsEnd)},
	} {
		b.Run("page/"+p.name, func(b *testing.B) {
			var times [2]time.Duration
			i := 0
			for b.Loop() {
				for range pageReps {
					takeTurns(b, i, &times, [2]func() error{
						func() error { return wantCount(p.start(b.Context()))(p.want) },
						func() error { return wantCount(p.end(b.Context()))(p.want) },
					})
					i++
				}
			}
			b.ReportMetric(float64(p.want*i)/times[0].Seconds(), "start-"+p.unit+"/s")
			b.ReportMetric(float64(p.want*i)/times[1].Seconds(), "end-"+p.unit+"/s")
			b.ReportMetric(times[0].Seconds()/times[1].Seconds(), "end/start")
		})
	}
}
