package sqlite_test

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/durable"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/store/sqlite"
)

// BenchmarkDurableChangesCatchUp: a current change query by slices over
// every object of a type (all 1,024 slices), on durable state written
// through the store (Apply in batches of 1,000, then every tenth object
// changed again) and read at once, ANNALS_BENCH_STATES objects (default
// 200,000):
//
//	ANNALS_BENCH_STATES=1000000 go test -run '^$' -bench DurableChangesCatchUp -benchtime 2x ./store/sqlite/
//
// The baseline ("raw-states/s") is one select of the same rows in the
// same order through the raw driver (database/sql) on the same file.
// "first-page-ms" and "last-page-ms" time a page of 1,000 at the start
// and near the end of the table: about equal when a page's cost does not
// grow with the table.
func BenchmarkDurableChangesCatchUp(b *testing.B) {
	n := 200_000
	if v := os.Getenv("ANNALS_BENCH_STATES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 2000 {
			b.Fatalf("ANNALS_BENCH_STATES=%q: want a number of at least 2000", v)
		}
	}
	path := filepath.Join(b.TempDir(), "states.db")
	s, err := sqlite.Open(b.Context(), path)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := b.Context()
	d := s.DurableState()
	payload := make([]byte, 100)
	write := func(rev int64, step int) {
		var batch []durable.Change
		for i := 0; i < n; i += step {
			batch = append(batch, durable.Change{Object: durable.Object{PersistenceID: fmt.Sprintf("Bench|%08d", i), Revision: rev, Payload: payload, SerializerID: 4, Manifest: "m"}})
			if len(batch) == 1000 || i+step >= n {
				if errs, err := d.Apply(ctx, batch); err != nil || errs != nil {
					b.Fatal(err, errs)
				}
				batch = batch[:0]
			}
		}
	}
	write(1, 1)
	write(2, 10)
	raw, err := sql.Open("sqlite3", "file:"+path+"?mode=ro&_journal_mode=WAL")
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	const rawSQL = `SELECT ordering, persistence_id, revision, timestamp, payload, serializer_id, manifest, tag, slice, entity_type
		FROM durable_state WHERE entity_type = ? ORDER BY ordering`
	page := func(after query.Offset) time.Duration {
		start := time.Now()
		k := 0
		for _, err := range d.CurrentChangesBySlices(ctx, "Bench", 0, annals.NumberOfSlices-1, after) {
			if err != nil {
				b.Fatal(err)
			}
			if k++; k == 1000 {
				break
			}
		}
		return time.Since(start)
	}
	var annalsTime, rawTime, firstPage, lastPage time.Duration
	iters := 0
	for b.Loop() {
		iters++
		start := time.Now()
		read := 0
		var nearEnd query.Offset
		for env, err := range d.CurrentChangesBySlices(ctx, "Bench", 0, annals.NumberOfSlices-1, query.NoOffset()) {
			if err != nil {
				b.Fatal(err)
			}
			if read++; read == n-1000 {
				nearEnd = env.Offset
			}
		}
		annalsTime += time.Since(start)
		if read != n {
			b.Fatalf("read %d changes, want %d", read, n)
		}
		start = time.Now()
		rows, err := raw.QueryContext(ctx, rawSQL, "Bench")
		if err != nil {
			b.Fatal(err)
		}
		got := 0
		for rows.Next() {
			var ordering, rev, ts, slice int64
			var ser int32
			var pid, manifest, et string
			var tag sql.NullString
			var p []byte
			if err := rows.Scan(&ordering, &pid, &rev, &ts, &p, &ser, &manifest, &tag, &slice, &et); err != nil {
				rows.Close()
				b.Fatal(err)
			}
			got++
		}
		if err := rows.Err(); err != nil || got != n {
			b.Fatalf("raw read %d rows (%v), want %d", got, err, n)
		}
		rows.Close()
		rawTime += time.Since(start)
		firstPage += page(query.NoOffset())
		lastPage += page(nearEnd)
	}
	total := float64(n * iters)
	b.ReportMetric(total/annalsTime.Seconds(), "states/s")
	b.ReportMetric(total/rawTime.Seconds(), "raw-states/s")
	b.ReportMetric(rawTime.Seconds()/annalsTime.Seconds(), "annals/raw")
	b.ReportMetric(float64(firstPage.Microseconds())/1000/float64(iters), "first-page-ms")
	b.ReportMetric(float64(lastPage.Microseconds())/1000/float64(iters), "last-page-ms")
}
