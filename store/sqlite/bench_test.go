package sqlite_test

// Benchmarks of the SQLite store, each beside a baseline that does the same
// work with the raw driver (mattn/go-sqlite3 through database/sql) on a file
// with the same schema and the same durability (WAL, synchronous=FULL):
//
//	go test -run '^$' -bench . -benchtime 2s ./store/sqlite/
//
// Compare the events/s of each annals/raw pair.

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/engine/enginetest"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/sqlite"
)

var benchPayload = make([]byte, 100)

func benchEvent(pid string, seq int64) journal.Repr {
	return journal.Repr{PersistenceID: pid, SequenceNr: seq, Payload: benchPayload, SerializerID: 4, Manifest: "m", WriterID: "w"}
}

// rawDB creates an Annals schema in a new file, then opens it with the raw
// driver and the same pragmas the store uses.
func rawDB(b *testing.B) *sql.DB {
	b.Helper()
	path := filepath.Join(b.TempDir(), "raw.db")
	s, err := sqlite.Open(b.Context(), path)
	if err != nil {
		b.Fatal(err)
	}
	_ = s.Close()
	db, err := sql.Open("sqlite3", "file:"+path+"?_journal_mode=WAL&_synchronous=FULL&_busy_timeout=5000&_txlock=immediate")
	if err != nil {
		b.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	b.Cleanup(func() { _ = db.Close() })
	return db
}

const rawInsert = `INSERT INTO event_journal (persistence_id, sequence_nr, timestamp, payload, serializer_id, manifest, writer, tags, metadata, slice, entity_type) VALUES (?, ?, ?, ?, ?, ?, ?, NULL, NULL, ?, ?)`

// rawTx inserts rows (pid, seq) in one transaction with a prepared statement.
func rawTx(b *testing.B, db *sql.DB, stmt *sql.Stmt, pids []string, seqs []int64) {
	tx, err := db.Begin()
	if err != nil {
		b.Fatal(err)
	}
	st := tx.Stmt(stmt)
	now := time.Now().UnixNano()
	for i, pid := range pids {
		if _, err := st.Exec(pid, seqs[i], now, benchPayload, 4, "m", "w", annals.Slice(pid), annals.EntityType(pid)); err != nil {
			b.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
}

func reportRate(b *testing.B, events int) {
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}

// (a) one id persisting one event at a time: one transaction per event.
func BenchmarkWriteOneAtATime(b *testing.B) {
	b.Run("annals", func(b *testing.B) {
		f := newFront(b, openTemp(b))
		ctx := b.Context()
		seq := int64(0)
		for b.Loop() {
			seq++
			if err := f.Persist(ctx, journal.AtomicWrite{PersistenceID: "Bench|one", Events: []journal.Repr{benchEvent("Bench|one", seq)}}); err != nil {
				b.Fatal(err)
			}
		}
		reportRate(b, int(seq))
	})
	b.Run("raw", func(b *testing.B) {
		db := rawDB(b)
		stmt, _ := db.Prepare(rawInsert)
		seq := int64(0)
		for b.Loop() {
			seq++
			rawTx(b, db, stmt, []string{"Bench|one"}, []int64{seq})
		}
		reportRate(b, int(seq))
	})
}

// (b) 1,000 ids persisting concurrently through the journal front: 1,000
// goroutines, each persisting its own id's events one at a time (b.N events
// in all). The baseline inserts the same rows in transactions of 1,000.
func BenchmarkWrite1000IDsConcurrently(b *testing.B) {
	const ids = 1000
	pids := make([]string, ids)
	for i := range pids {
		pids[i] = fmt.Sprintf("Bench|id-%d", i)
	}
	b.Run("annals", func(b *testing.B) {
		f := newFront(b, openTemp(b))
		ctx := b.Context()
		perID := (b.N + ids - 1) / ids
		b.ResetTimer()
		var wg sync.WaitGroup
		for _, pid := range pids {
			wg.Go(func() {
				for seq := range int64(perID) {
					if err := f.Persist(ctx, journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{benchEvent(pid, seq+1)}}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		reportRate(b, perID*ids)
	})
	b.Run("raw", func(b *testing.B) {
		db := rawDB(b)
		stmt, _ := db.Prepare(rawInsert)
		perID := (b.N + ids - 1) / ids
		seqs := make([]int64, ids)
		b.ResetTimer()
		for seq := range int64(perID) {
			for i := range seqs {
				seqs[i] = seq + 1
			}
			rawTx(b, db, stmt, pids, seqs)
		}
		reportRate(b, perID*ids)
	})
}

// (c) atomic writes of 100 events of one id.
func BenchmarkWriteAtomic100(b *testing.B) {
	const n = 100
	b.Run("annals", func(b *testing.B) {
		f := newFront(b, openTemp(b))
		ctx := b.Context()
		seq := int64(0)
		for b.Loop() {
			w := journal.AtomicWrite{PersistenceID: "Bench|atomic", Events: make([]journal.Repr, n)}
			for k := range w.Events {
				seq++
				w.Events[k] = benchEvent("Bench|atomic", seq)
			}
			if err := f.Persist(ctx, w); err != nil {
				b.Fatal(err)
			}
		}
		reportRate(b, int(seq))
	})
	b.Run("raw", func(b *testing.B) {
		db := rawDB(b)
		stmt, _ := db.Prepare(rawInsert)
		pids, seqs := make([]string, n), make([]int64, n)
		seq := int64(0)
		for b.Loop() {
			for k := range n {
				seq++
				pids[k], seqs[k] = "Bench|atomic", seq
			}
			rawTx(b, db, stmt, pids, seqs)
		}
		reportRate(b, int(seq))
	})
}

// (d) replay of 10,000 events of one id; the baseline runs the same ordered
// select and scans the same columns.
func BenchmarkReplay10000(b *testing.B) {
	const n = 10_000
	fill := func(b *testing.B, j journal.Journal) {
		for from := int64(1); from <= n; from += 1000 {
			w := journal.AtomicWrite{PersistenceID: "Bench|replay"}
			for s := from; s < from+1000; s++ {
				w.Events = append(w.Events, benchEvent("Bench|replay", s))
			}
			if res, err := j.Write(b.Context(), []journal.AtomicWrite{w}); err != nil || res != nil {
				b.Fatal(res, err)
			}
		}
	}
	b.Run("annals", func(b *testing.B) {
		s := openTemp(b)
		fill(b, s.Journal())
		ctx := b.Context()
		for b.Loop() {
			count := 0
			for _, err := range s.Journal().Replay(ctx, "Bench|replay", 1, n, n) {
				if err != nil {
					b.Fatal(err)
				}
				count++
			}
			if count != n {
				b.Fatalf("replayed %d", count)
			}
		}
		reportRate(b, b.N*n)
	})
	b.Run("raw", func(b *testing.B) {
		path := filepath.Join(b.TempDir(), "raw.db")
		s, err := sqlite.Open(b.Context(), path)
		if err != nil {
			b.Fatal(err)
		}
		fill(b, s.Journal())
		_ = s.Close()
		db, err := sql.Open("sqlite3", "file:"+path+"?mode=ro&_query_only=1")
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		stmt, err := db.Prepare(`SELECT ordering, sequence_nr, timestamp, payload, serializer_id, manifest, writer, tags, metadata, slice, entity_type FROM event_journal WHERE persistence_id = ? AND sequence_nr BETWEEN ? AND ? ORDER BY sequence_nr LIMIT ?`)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			rows, err := stmt.Query("Bench|replay", 1, n, n)
			if err != nil {
				b.Fatal(err)
			}
			count := 0
			for rows.Next() {
				var e journal.Repr
				var ts int64
				var tags sql.NullString
				if err := rows.Scan(&e.Ordering, &e.SequenceNr, &ts, &e.Payload, &e.SerializerID, &e.Manifest, &e.WriterID, &tags, &e.Metadata, &e.Slice, &e.EntityType); err != nil {
					b.Fatal(err)
				}
				count++
			}
			_ = rows.Close()
			if count != n {
				b.Fatalf("scanned %d", count)
			}
		}
		reportRate(b, b.N*n)
	})
}

// newFront is enginetest.MeteredFront over s's journal.
func newFront(b *testing.B, s *sqlite.Store) *engine.Front {
	return enginetest.MeteredFront(b, s.Journal(), engine.Config{}, nil)
}
