package projection_test

// Benchmarks of projections on SQLite (WAL, synchronous=FULL):
//
//	go test -run '^$' -bench . -benchtime 1x ./projection/
//
// BenchmarkExactlyOnceThroughput/projection handles 20,000 stored events
// exactly once, in groups of 1,000, into a table of the same database;
// /raw is a loop that reads the journal table in pages of 1,000 and writes
// the same rows and its offset in one transaction per page. Compare
// events/s. BenchmarkLiveLag measures, in one process, the time from a
// write's acknowledgement to the projection handler seeing the event.

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/projection"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/store/sqlite"
)

const benchEvents = 20_000

func filledStore(b *testing.B) *sqlite.Store {
	s, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	payload := make([]byte, 100)
	var ws []journal.AtomicWrite
	for i := range 100 {
		pid := fmt.Sprintf("B|%03d", i)
		w := journal.AtomicWrite{PersistenceID: pid}
		for seq := int64(1); seq <= benchEvents/100; seq++ {
			w.Events = append(w.Events, journal.Repr{PersistenceID: pid, SequenceNr: seq, Payload: payload})
		}
		ws = append(ws, w)
	}
	if res, err := s.Journal().Write(b.Context(), ws); err != nil || res != nil {
		b.Fatal(res, err)
	}
	if err := s.Projections().InTx(b.Context(), func(tx *sql.Tx) error {
		_, err := tx.Exec(`CREATE TABLE model (pid TEXT NOT NULL, seq INTEGER NOT NULL, ordering INTEGER NOT NULL, PRIMARY KEY (pid, seq))`)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	return s
}

func BenchmarkExactlyOnceThroughput(b *testing.B) {
	b.Run("projection", func(b *testing.B) {
		s := filledStore(b)
		cfg := quiet
		cfg.GroupSize, cfg.GroupWithin = 1000, 10*time.Millisecond
		round, groups := 0, 0
		for b.Loop() {
			round++
			var n int
			done := make(chan struct{})
			p, err := projection.ExactlyOnceGrouped(projection.ID{Name: fmt.Sprint("bench-", round)}, allSlices(s.Queries(), "B"), s.Projections(),
				func(ctx context.Context, tx *sql.Tx, envs []query.Envelope) error {
					stmt, err := tx.PrepareContext(ctx, `INSERT OR REPLACE INTO model VALUES (?, ?, ?)`)
					if err != nil {
						return err
					}
					defer stmt.Close()
					for _, e := range envs {
						if _, err := stmt.ExecContext(ctx, e.PersistenceID, e.SequenceNr, e.Offset.Sequence); err != nil {
							return err
						}
					}
					groups++
					if n += len(envs); n == benchEvents {
						close(done)
					}
					return nil
				}, cfg)
			if err != nil {
				b.Fatal(err)
			}
			stop := run(b, p)
			<-done
			stop()
		}
		b.ReportMetric(float64(b.N*benchEvents)/b.Elapsed().Seconds(), "events/s")
		b.ReportMetric(float64(b.N*benchEvents)/float64(groups), "events/commit")
	})
	b.Run("raw", func(b *testing.B) {
		s := filledStore(b)
		path := s.Path()
		db, err := sql.Open("sqlite3", "file:"+path+"?_journal_mode=WAL&_synchronous=FULL&_busy_timeout=5000&_txlock=immediate")
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		db.SetMaxOpenConns(2)
		for b.Loop() {
			var after int64
			for {
				rows, err := db.Query(`SELECT ordering, persistence_id, sequence_nr, timestamp, payload, serializer_id, manifest, writer, tags, metadata, slice, entity_type
					FROM event_journal WHERE entity_type = 'B' AND ordering > ? ORDER BY ordering LIMIT 1000`, after)
				if err != nil {
					b.Fatal(err)
				}
				var page []journal.Repr
				for rows.Next() {
					var r journal.Repr
					var ts int64
					var tags sql.NullString
					if err := rows.Scan(&r.Ordering, &r.PersistenceID, &r.SequenceNr, &ts, &r.Payload, &r.SerializerID, &r.Manifest, &r.WriterID, &tags, &r.Metadata, &r.Slice, &r.EntityType); err != nil {
						b.Fatal(err)
					}
					page = append(page, r)
				}
				rows.Close()
				if len(page) == 0 {
					break
				}
				tx, err := db.Begin()
				if err != nil {
					b.Fatal(err)
				}
				stmt, _ := tx.Prepare(`INSERT OR REPLACE INTO model VALUES (?, ?, ?)`)
				for _, r := range page {
					if _, err := stmt.Exec(r.PersistenceID, r.SequenceNr, r.Ordering); err != nil {
						b.Fatal(err)
					}
				}
				after = page[len(page)-1].Ordering
				if _, err := tx.Exec(`INSERT OR REPLACE INTO projection_offset VALUES ('raw', '', ?, 0)`, fmt.Sprintf(`{"seq":%d}`, after)); err != nil {
					b.Fatal(err)
				}
				if err := tx.Commit(); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.N*benchEvents)/b.Elapsed().Seconds(), "events/s")
	})
}

// BenchmarkLiveLag writes events one at a time through the journal front
// while an exactly-once projection follows them live, and reports the
// 50th and 99th percentile of the time from the write's acknowledgement to
// the handler.
func BenchmarkLiveLag(b *testing.B) {
	s, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "lag.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	front, err := engine.NewFront(s.Journal(), engine.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer front.Close()
	handled := make(chan time.Time, 1)
	p, err := projection.ExactlyOnce(projection.ID{Name: "lag"}, allSlices(s.Queries(), "L"), s.Projections(),
		func(_ context.Context, _ *sql.Tx, env query.Envelope) error {
			handled <- time.Now()
			return nil
		}, quiet)
	if err != nil {
		b.Fatal(err)
	}
	stop := run(b, p)
	defer stop()
	seq := int64(0)
	var lags []time.Duration
	for b.Loop() {
		seq++
		w := journal.AtomicWrite{PersistenceID: "L|1", Events: []journal.Repr{{PersistenceID: "L|1", SequenceNr: seq, Payload: []byte("x")}}}
		if err := front.Persist(b.Context(), w); err != nil {
			b.Fatal(err)
		}
		acked := time.Now()
		// A handler that ran before Persist returned saw the event with no lag.
		lags = append(lags, max(0, (<-handled).Sub(acked)))
	}
	slices.Sort(lags)
	pct := func(q float64) float64 { return float64(lags[int(q*float64(len(lags)-1))].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}
