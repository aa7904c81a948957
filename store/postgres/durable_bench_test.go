package postgres_test

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/durable"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

// benchStates is the number of durable-state objects of
// BenchmarkDurableChangesCatchUp: ANNALS_BENCH_STATES, default 200,000.
func benchStates(b *testing.B) int {
	if v := os.Getenv("ANNALS_BENCH_STATES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1000 {
			b.Fatalf("ANNALS_BENCH_STATES=%q: want a number of at least 1000", v)
		}
		return n
	}
	return 200_000
}

// BenchmarkDurableChangesCatchUp: a current change query by slices over
// every object of a type (all 1,024 slices), on durable state written
// through the store (Apply in batches of 1,000 from two writers, then
// every tenth object updated once more) and read at once, with no ANALYZE,
// on both layouts:
//
//	ANNALS_BENCH_STATES=1000000 go test -run '^$' -bench DurableChangesCatchUp -benchtime 2x -timeout 1h ./store/postgres/
//
// The baseline ("raw-states/s") is one streamed select of the same rows in
// the same order. "first-page-ms" and "last-page-ms" time a page of the
// query at the start and at the end of the table: about equal when a
// page's cost does not grow with the table. The r2dbc layout has only the
// plugin's indexes, whose slice-first order a page over a slice range
// must sort; with the index docs/performance.md (Durable state) gives, it is Annals' layout.
func BenchmarkDurableChangesCatchUp(b *testing.B) {
	n := benchStates(b)
	layouts := []struct {
		name string
		opts []postgres.Option
	}{
		{"annals", nil},
		{"r2dbc", []postgres.Option{postgres.WithLayout(postgres.LayoutR2DBC)}},
	}
	payload := make([]byte, 100)
	for _, l := range layouts {
		b.Run("layout="+l.name, func(b *testing.B) {
			dsn, schema := pgtest.Schema(b)
			s, err := postgres.Open(b.Context(), dsn, append([]postgres.Option{postgres.WithMigrate(true)}, l.opts...)...)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := b.Context()
			d := s.DurableState()
			if _, err := s.Pool().Exec(ctx, `ALTER TABLE `+pgx.Identifier{schema, "durable_state"}.Sanitize()+` SET (autovacuum_enabled = off)`); err != nil {
				b.Fatal(err)
			}
			write := func(from, to int, rev int64, step int) {
				var wg sync.WaitGroup
				for w := range 2 {
					wg.Go(func() {
						var batch []durable.Change
						for i := from + w*step; i < to; i += 2 * step {
							batch = append(batch, durable.Change{Object: durable.Object{PersistenceID: fmt.Sprintf("Bench|%08d", i), Revision: rev, Payload: payload, SerializerID: 4, Manifest: "m"}})
							if len(batch) == 1000 || i+2*step >= to {
								errs, err := d.Apply(ctx, batch)
								if err == nil && errs != nil {
									err = fmt.Errorf("%v", errs)
								}
								if err != nil {
									b.Error(err)
									return
								}
								batch = batch[:0]
							}
						}
					})
				}
				wg.Wait()
			}
			write(0, n, 1, 1)
			write(0, n, 2, 10) // every tenth object changed again: its row moves to the end
			if b.Failed() {
				return
			}
			all := annals.SliceRange{Min: 0, Max: annals.NumberOfSlices - 1}
			page := func(after query.Offset) (time.Duration, query.Offset) {
				start := time.Now()
				var last query.Offset
				k := 0
				for env, err := range d.CurrentChangesBySlices(ctx, "Bench", all.Min, all.Max, after) {
					if err != nil {
						b.Fatal(err)
					}
					last = env.Offset
					if k++; k == 1000 {
						break
					}
				}
				return time.Since(start), last
			}
			raw := `SELECT persistence_id, revision, db_timestamp, state_ser_id, state_ser_manifest, state_payload, tags FROM ` + pgx.Identifier{schema, "durable_state"}.Sanitize() +
				` WHERE entity_type = 'Bench' ORDER BY db_timestamp, revision, persistence_id`
			var annalsTime, rawTime, firstPage, lastPage time.Duration
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				read, k := 0, 0
				var nearEnd query.Offset
				for env, err := range d.CurrentChangesBySlices(ctx, "Bench", all.Min, all.Max, query.NoOffset()) {
					if err != nil {
						b.Fatal(err)
					}
					if read++; read == n-1000 {
						nearEnd = env.Offset
					}
					k += len(env.Payload)
				}
				annalsTime += time.Since(start)
				if read != n {
					b.Fatalf("read %d changes, want %d", read, n)
				}
				start = time.Now()
				rows, err := s.Pool().Query(ctx, raw)
				if err != nil {
					b.Fatal(err)
				}
				got := 0
				for rows.Next() {
					var pid, manifest string
					var rev int64
					var ts time.Time
					var ser int32
					var p []byte
					var tags []string
					if err := rows.Scan(&pid, &rev, &ts, &ser, &manifest, &p, &tags); err != nil {
						rows.Close()
						b.Fatal(err)
					}
					got++
				}
				if rows.Err() != nil || got != n {
					b.Fatalf("raw read %d rows (%v), want %d", got, rows.Err(), n)
				}
				rawTime += time.Since(start)
				t, _ := page(query.NoOffset())
				firstPage += t
				t, _ = page(nearEnd)
				lastPage += t
			}
			b.StopTimer()
			total := float64(n * b.N)
			b.ReportMetric(total/annalsTime.Seconds(), "states/s")
			b.ReportMetric(total/rawTime.Seconds(), "raw-states/s")
			b.ReportMetric(rawTime.Seconds()/annalsTime.Seconds(), "annals/raw")
			b.ReportMetric(float64(firstPage.Microseconds())/1000/float64(b.N), "first-page-ms")
			b.ReportMetric(float64(lastPage.Microseconds())/1000/float64(b.N), "last-page-ms")
		})
	}
}
