package postgres_test

// Benchmarks of the PostgreSQL store, each beside a baseline ("raw") that
// does the same work with pgx directly, in the same run, against the same
// server at the same durability (fsync and synchronous_commit on, as
// `scripts/services up postgres` configures it):
//
//	go test -run '^$' -bench . -benchtime 2s ./store/postgres/
//	scripts/bench postgres
//
// Compare the events/s of each annals/raw pair. Every benchmark works in
// schemas of its own (pgtest.Schema), dropped when it ends, and skips when
// no server answers. BenchmarkLiveLagAcrossProcesses is in lag_test.go.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/engine/enginetest"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

var benchPayload = make([]byte, 100)

func benchEvent(pid string, seq int64) journal.Repr {
	return journal.Repr{PersistenceID: pid, SequenceNr: seq, Payload: benchPayload, SerializerID: 4, Manifest: "m", WriterID: "w"}
}

func reportRate(b *testing.B, events int) {
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}

// benchOrderings are the two live-query orderings; writes differ between
// them (CommitOrder stamps every write from the schema's clock row).
var benchOrderings = []struct {
	name     string
	ordering postgres.Ordering
}{
	{"commit", postgres.CommitOrder},
	{"timestamp", postgres.TimestampOrder},
}

// rawSchema creates an Annals schema of its own (the store's tables and
// indexes, so the baseline writes rows of the same shape into a table
// indexed the same way), and returns a plain pgx pool on the server and the
// quoted name of its event_journal.
func rawSchema(b *testing.B) (*pgxpool.Pool, string) {
	b.Helper()
	dsn, schema := pgtest.Schema(b)
	s, err := postgres.Open(b.Context(), dsn, postgres.WithMigrate(true))
	if err != nil {
		b.Fatal(err)
	}
	_ = s.Close()
	pool, err := pgxpool.New(b.Context(), pgtest.DSN())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close) // before the schema is dropped (cleanups run last first)
	return pool, pgx.Identifier{schema, "event_journal"}.Sanitize()
}

// rawInsert inserts rows in one statement, one round trip, one implicit
// transaction: the columns as arrays, unnested by the server. Tags and
// metadata are NULL, as in the Annals writes.
func rawInsert(journalTable string) string {
	return `INSERT INTO ` + journalTable + ` (slice, entity_type, persistence_id, seq_nr, db_timestamp, write_timestamp, event_ser_id, event_ser_manifest, event_payload, writer)
	SELECT * FROM unnest($1::int[], $2::text[], $3::text[], $4::bigint[], $5::timestamptz[], $6::timestamptz[], $7::int[], $8::text[], $9::bytea[], $10::text[])`
}

// rawRows holds the column arrays of one raw insert.
type rawRows struct {
	slices, serIDs     []int32
	types, pids        []string
	seqs               []int64
	dbTS, writeTS      []time.Time
	manifests, writers []string
	payloads           [][]byte
}

func newRawRows(pids []string) *rawRows {
	n := len(pids)
	r := &rawRows{slices: make([]int32, n), serIDs: make([]int32, n), types: make([]string, n), pids: pids,
		seqs: make([]int64, n), dbTS: make([]time.Time, n), writeTS: make([]time.Time, n),
		manifests: make([]string, n), writers: make([]string, n), payloads: make([][]byte, n)}
	for i, pid := range pids {
		r.slices[i], r.types[i] = int32(annals.Slice(pid)), annals.EntityType(pid)
		r.serIDs[i], r.manifests[i], r.writers[i], r.payloads[i] = 4, "m", "w", benchPayload
	}
	return r
}

// insert stores every id's event seq in one transaction.
func (r *rawRows) insert(b *testing.B, pool *pgxpool.Pool, sql string, seq int64) {
	now := time.Now()
	for i := range r.seqs {
		r.seqs[i], r.writeTS[i], r.dbTS[i] = seq, now, now.Add(time.Duration(i)*time.Microsecond)
	}
	if _, err := pool.Exec(b.Context(), sql, r.slices, r.types, r.pids, r.seqs, r.dbTS, r.writeTS, r.serIDs, r.manifests, r.payloads, r.writers); err != nil {
		b.Fatal(err)
	}
}

// persistEach persists events from+1 to to of each id in pids through f,
// one goroutine per id persisting its own events one at a time, and
// returns when all are stored.
func persistEach(b *testing.B, f *engine.Front, pids []string, from, to int64) {
	var wg sync.WaitGroup
	for _, pid := range pids {
		wg.Go(func() {
			for seq := from + 1; seq <= to; seq++ {
				if err := f.Persist(b.Context(), journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{benchEvent(pid, seq)}}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkWriteIDs: 1, 100 and 1,000 ids persisting concurrently through
// the journal front, one goroutine per id persisting its own events one at
// a time (b.N events in all), in each ordering, with MaxCalls 1 and 2
// (calls=1, calls=2; see engine.Config.MaxCalls).
//
// The baseline ("raw-events/s") inserts the same rows with pgx into a
// schema of its own, one transaction per round of one event of every id:
// as many rows per transaction as there are ids. That is the most the front
// can put in one store call (each id has one write in flight at a time), so
// the baseline is the group commit the front would achieve if every writer
// were always back in time; the front's achieved writes per store call are
// reported as writes/call. The rows go in as one INSERT … SELECT FROM
// unnest(arrays) statement (one round trip, one implicit transaction): a
// statement, as a store would send it, that is as fast as CopyFrom at 1,000
// rows here (86k against 97k events/s in one noisy run) and faster for
// single rows (COPY takes more round trips), while a pgx.Batch of 1,000
// single-row INSERTs reached only 44k.
//
// The two sides take turns, a fifth of the events each time, so that both
// see the same machine: this VM's speed drifts by tens of percent within a
// minute. "annals/raw" is the ratio of the two rates. Each side's CPU per
// event is reported too: this process's ("cpu-µs/ev", getrusage) and the
// database server's ("server-µs/ev": its postmaster and the postmaster's
// children, from /proc, in 10 ms ticks: the whole server's, so measured
// while no other client uses it; absent when the server runs elsewhere).
func BenchmarkWriteIDs(b *testing.B) {
	const turns = 5
	for _, ids := range []int{1, 100, 1000} {
		pids := make([]string, ids)
		for i := range pids {
			pids[i] = fmt.Sprintf("Bench|id-%d", i)
		}
		for _, o := range benchOrderings {
			for _, calls := range []int{1, 2} {
				b.Run(fmt.Sprintf("ids=%d/%s/calls=%d", ids, o.name, calls), func(b *testing.B) {
					var annalsTime, rawTime time.Duration
					var annalsCPU, rawCPU, annalsServer, rawServer time.Duration
					f := enginetest.MeteredFront(b, open(b, postgres.WithOrdering(o.ordering)).Journal(),
						engine.Config{MaxCalls: calls}, func() time.Duration { return annalsTime })
					pool, tbl := rawSchema(b)
					pm := postmaster(b.Context(), pool)
					sql := rawInsert(tbl)
					rows := newRawRows(pids)
					perID := (b.N + ids - 1) / ids
					b.ResetTimer()
					for turn := range turns {
						from, to := int64(perID*turn/turns), int64(perID*(turn+1)/turns)
						// The server's reading first: it scans /proc, outside
						// the window it measures.
						server0, cpu0, start := serverCPU(pm), processCPU(), time.Now()
						persistEach(b, f, pids, from, to)
						annalsTime += time.Since(start)
						annalsCPU += processCPU() - cpu0
						annalsServer += serverCPU(pm) - server0
						server0, cpu0, start = serverCPU(pm), processCPU(), time.Now()
						for seq := from + 1; seq <= to; seq++ {
							rows.insert(b, pool, sql, seq)
						}
						rawTime += time.Since(start)
						rawCPU += processCPU() - cpu0
						rawServer += serverCPU(pm) - server0
					}
					events := float64(perID * ids)
					perEvent := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / events }
					b.ReportMetric(events/annalsTime.Seconds(), "events/s")
					b.ReportMetric(events/rawTime.Seconds(), "raw-events/s")
					b.ReportMetric(rawTime.Seconds()/annalsTime.Seconds(), "annals/raw")
					b.ReportMetric(perEvent(annalsCPU), "cpu-µs/ev")
					b.ReportMetric(perEvent(rawCPU), "raw-cpu-µs/ev")
					if pm != 0 {
						b.ReportMetric(perEvent(annalsServer), "server-µs/ev")
						b.ReportMetric(perEvent(rawServer), "raw-server-µs/ev")
					}
				})
			}
		}
	}
}

// BenchmarkReplay10000: Journal.Replay of 10,000 events of one id; the
// baseline runs one SELECT of the same rows and columns, in the same order,
// and scans them into the same fields.
func BenchmarkReplay10000(b *testing.B) {
	const n = 10_000
	s := open(b)
	for from := int64(1); from <= n; from += 1000 {
		w := journal.AtomicWrite{PersistenceID: "Bench|replay"}
		for seq := from; seq < from+1000; seq++ {
			w.Events = append(w.Events, benchEvent("Bench|replay", seq))
		}
		if res, err := s.Journal().Write(b.Context(), []journal.AtomicWrite{w}); err != nil || res != nil {
			b.Fatal(res, err)
		}
	}
	if _, err := s.Pool().Exec(b.Context(), `VACUUM ANALYZE `+pgx.Identifier{s.Schema(), "event_journal"}.Sanitize()); err != nil {
		b.Fatal(err)
	}
	b.Run("annals", func(b *testing.B) {
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
		sql := `SELECT ` + benchColumns + ` FROM ` + pgx.Identifier{s.Schema(), "event_journal"}.Sanitize() + ` e
			WHERE e.persistence_id = $1 AND e.seq_nr >= $2 AND e.seq_nr <= $3 ORDER BY e.seq_nr LIMIT $4`
		ctx := b.Context()
		for b.Loop() {
			rows, err := s.Pool().Query(ctx, sql, "Bench|replay", 1, n, n)
			if err != nil {
				b.Fatal(err)
			}
			count, err := scanRaw(rows, nil)
			if err != nil {
				b.Fatal(err)
			}
			if count != n {
				b.Fatalf("scanned %d", count)
			}
		}
		reportRate(b, b.N*n)
	})
}

// benchColumns are the columns the store's queries read.
const benchColumns = `e.persistence_id, e.seq_nr, e.db_timestamp, e.write_timestamp, e.event_ser_id, e.event_ser_manifest, e.event_payload, e.writer, e.tags, e.meta_payload, e.slice, e.entity_type`

// rawEvent is what the baseline scans a row into: the fields of a
// journal.Repr and the row's db_timestamp.
type rawEvent struct {
	journal.Repr
	dbTimestamp time.Time
}

// scanRaw scans rows into rawEvents, as the store does, and returns how
// many there were; last, when not nil, receives the last one.
func scanRaw(rows pgx.Rows, last *rawEvent) (int, error) {
	defer rows.Close()
	count := 0
	var e rawEvent
	for rows.Next() {
		e = rawEvent{}
		var tags []string
		if err := rows.Scan(&e.PersistenceID, &e.SequenceNr, &e.dbTimestamp, &e.Timestamp, &e.SerializerID, &e.Manifest, &e.Payload, &e.WriterID, &tags, &e.Metadata, &e.Slice, &e.EntityType); err != nil {
			return count, err
		}
		e.Timestamp, e.dbTimestamp = e.Timestamp.UTC(), e.dbTimestamp.UTC()
		if len(tags) > 0 {
			e.Tags = tags
		}
		count++
	}
	if last != nil && count > 0 {
		*last = e
	}
	return count, rows.Err()
}

// Catch-up over 1,000,000 events: 10,000 ids of type "Bench" with 100
// events each, interleaved (event k of every id, then event k+1), with
// db_timestamps 1µs apart in that order, an hour ago.
const (
	catchUpIDs    = 10_000
	catchUpPerID  = 100
	catchUpEvents = catchUpIDs * catchUpPerID
)

// loadCatchUp fills the store's event_journal with the catch-up events
// through COPY: its indexes are dropped first and rebuilt after (from their
// own definitions), the rows go in over two connections, then the table is
// vacuumed and analyzed, so that the timed reads neither set hint bits nor
// run on guessed statistics.
func loadCatchUp(b *testing.B, s *postgres.Store) {
	b.Helper()
	ctx := b.Context()
	start := time.Now()
	pool := s.Pool()
	tbl := pgx.Identifier{s.Schema(), "event_journal"}.Sanitize()
	var pkey string
	var defs []string
	rows, err := pool.Query(ctx, `SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid), i.indisprimary
		FROM pg_index i WHERE i.indrelid = $1::regclass`, tbl)
	if err != nil {
		b.Fatal(err)
	}
	var drops []string
	for rows.Next() {
		var name, def string
		var primary bool
		if err := rows.Scan(&name, &def, &primary); err != nil {
			b.Fatal(err)
		}
		defs = append(defs, def)
		if primary {
			pkey = name
			drops = append(drops, `ALTER TABLE `+tbl+` DROP CONSTRAINT `+pgx.Identifier{lastPart(name)}.Sanitize())
		} else {
			drops = append(drops, `DROP INDEX `+name)
		}
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	for _, st := range drops {
		if _, err := pool.Exec(ctx, st); err != nil {
			b.Fatal(st, err)
		}
	}

	pids := make([]string, catchUpIDs)
	slices := make([]int32, catchUpIDs)
	for i := range pids {
		pids[i] = fmt.Sprintf("Bench|c-%05d", i)
		slices[i] = int32(annals.Slice(pids[i]))
	}
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	cols := []string{"slice", "entity_type", "persistence_id", "seq_nr", "db_timestamp", "write_timestamp", "event_ser_id", "event_ser_manifest", "event_payload", "writer"}
	const parts = 2
	var wg sync.WaitGroup
	errs := make([]error, parts)
	for p := range parts {
		wg.Go(func() {
			lo, hi := p*catchUpEvents/parts, (p+1)*catchUpEvents/parts
			i := lo - 1
			src := pgx.CopyFromFunc(func() ([]any, error) {
				i++
				if i >= hi {
					return nil, nil
				}
				id, seq := i%catchUpIDs, int64(i/catchUpIDs+1)
				ts := base.Add(time.Duration(i) * time.Microsecond)
				return []any{slices[id], "Bench", pids[id], seq, ts, ts, int32(4), "m", benchPayload, "w"}, nil
			})
			_, errs[p] = pool.CopyFrom(ctx, pgx.Identifier{s.Schema(), "event_journal"}, cols, src)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	// Rebuild the indexes in parallel, the primary key last as a constraint.
	wg = sync.WaitGroup{}
	errs = make([]error, len(defs))
	for k, def := range defs {
		wg.Go(func() { _, errs[k] = pool.Exec(ctx, def) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	if pkey != "" {
		n := pgx.Identifier{lastPart(pkey)}.Sanitize()
		if _, err := pool.Exec(ctx, `ALTER TABLE `+tbl+` ADD CONSTRAINT `+n+` PRIMARY KEY USING INDEX `+n); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE `+tbl); err != nil {
		b.Fatal(err)
	}
	b.Logf("loaded %d events in %v", catchUpEvents, time.Since(start).Round(time.Millisecond))
}

// lastPart returns the unqualified name of a possibly schema-qualified one.
func lastPart(name string) string {
	for i := len(name) - 1; i >= 0; i-- {
		if name[i] == '.' {
			return name[i+1:]
		}
	}
	return name
}

// BenchmarkCatchUp1M: CurrentEventsBySlices over all slices of one entity
// type from NoOffset, over 1,000,000 events, by one instance (slices
// 0–1023) and by four in parallel (four slice ranges). The baseline pages
// through the same rows in the same order with a keyset select of the same
// page size (the store's default, 1,000 rows), scanning the same fields.
func BenchmarkCatchUp1M(b *testing.B) {
	s := open(b)
	loadCatchUp(b, s)
	tbl := pgx.Identifier{s.Schema(), "event_journal"}.Sanitize()
	rawSQL := `SELECT ` + benchColumns + ` FROM ` + tbl + ` e
		WHERE e.entity_type = $1 AND e.slice BETWEEN $2 AND $3
		AND (e.db_timestamp, e.seq_nr, e.persistence_id) > ($4, $5, $6)
		ORDER BY e.db_timestamp, e.seq_nr, e.persistence_id LIMIT $7`
	annalsRead := func(ctx context.Context, r annals.SliceRange) (int, error) {
		n := 0
		for _, err := range s.Queries().CurrentEventsBySlices(ctx, "Bench", r.Min, r.Max, query.NoOffset()) {
			if err != nil {
				return n, err
			}
			n++
		}
		return n, nil
	}
	rawRead := func(ctx context.Context, r annals.SliceRange) (int, error) {
		const page = postgres.DefaultPageSize
		n := 0
		last := rawEvent{dbTimestamp: time.Unix(0, 0), Repr: journal.Repr{SequenceNr: -1}}
		for {
			rows, err := s.Pool().Query(ctx, rawSQL, "Bench", r.Min, r.Max, last.dbTimestamp, last.SequenceNr, last.PersistenceID, page)
			if err != nil {
				return n, err
			}
			got, err := scanRaw(rows, &last)
			n += got
			if err != nil || got < page {
				return n, err
			}
		}
	}
	for _, instances := range []int{1, 4} {
		ranges, err := annals.SliceRanges(instances)
		if err != nil {
			b.Fatal(err)
		}
		for _, side := range []struct {
			name string
			read func(context.Context, annals.SliceRange) (int, error)
		}{{"annals", annalsRead}, {"raw", rawRead}} {
			b.Run(fmt.Sprintf("instances=%d/%s", instances, side.name), func(b *testing.B) {
				for b.Loop() {
					var total atomic.Int64
					var wg sync.WaitGroup
					for _, r := range ranges {
						wg.Go(func() {
							n, err := side.read(b.Context(), r)
							if err != nil {
								b.Error(err)
							}
							total.Add(int64(n))
						})
					}
					wg.Wait()
					if total.Load() != catchUpEvents {
						b.Fatalf("read %d of %d events", total.Load(), catchUpEvents)
					}
				}
				reportRate(b, b.N*catchUpEvents)
			})
		}
	}
}

// BenchmarkRecoveryStatement: the server's side of a recovery of a small
// entity. 1,000 ids of 10 events written through the store; then, in
// turns on one pooled connection, the store's two recovery statements
// (recoverySQL, "recovery": the highest number, the latest snapshot and
// the events in one statement, which a recovery with ToSequenceNr sends;
// recoveryOpenSQL, "open": the one a recovery to the end sends), a plain
// select of the same events ("raw"), and that select with seven more
// columns of constants, as many columns as the open statement's ("wide"),
// once per id each turn; reports the wall time per round trip of each
// (the rows read, not decoded) and this process's CPU time per round trip
// ("-cpu-"). The ids have no snapshot, so the statements' snapshot parts
// find none (their payload and first-event parts are not measured). The
// client's CPU follows the server's time more than the columns: see
// BenchmarkRoundTripCPU.
//
//	go test -run '^$' -bench RecoveryStatement -benchtime 10x -count 2 ./store/postgres/
func BenchmarkRecoveryStatement(b *testing.B) {
	const ids, events = 1000, 10
	s := open(b)
	ctx := context.Background()
	for from := 0; from < ids; from += 100 {
		var ws []journal.AtomicWrite
		for e := from; e < from+100; e++ {
			w := journal.AtomicWrite{PersistenceID: fmt.Sprint("Account|rec-", e)}
			for seq := int64(1); seq <= events; seq++ {
				w.Events = append(w.Events, benchEvent(w.PersistenceID, seq))
			}
			ws = append(ws, w)
		}
		if res, err := s.Journal().Write(ctx, ws); err != nil || journal.Results(res) != nil {
			b.Fatalf("seed: %v %v", res, err)
		}
	}
	conn, err := s.Pool().Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	plain := `SELECT seq_nr, write_timestamp, event_ser_id, event_ser_manifest, event_payload, writer, tags, meta_payload FROM ` +
		postgres.JournalTable(s) + ` WHERE persistence_id = $1 AND seq_nr >= 1 ORDER BY seq_nr`
	wide := `SELECT seq_nr, write_timestamp, event_ser_id, event_ser_manifest, event_payload, writer, tags, meta_payload, NULL::text, 7::bigint, 5::bigint, 1234567::bigint, 4, 'snapmanifest'::text, NULL::bytea FROM ` +
		postgres.JournalTable(s) + ` WHERE persistence_id = $1 AND seq_nr >= 1 ORDER BY seq_nr`
	statements := []struct {
		name string
		sql  func(pid string) (string, []any)
	}{
		{"recovery", func(pid string) (string, []any) { return postgres.RecoveryStatement(s, pid, false) }},
		{"open", func(pid string) (string, []any) { return postgres.RecoveryStatement(s, pid, true) }},
		{"raw", func(pid string) (string, []any) { return plain, []any{pid} }},
		{"wide", func(pid string) (string, []any) { return wide, []any{pid} }},
	}
	var took, cpu [4]time.Duration
	run := func(k int) {
		start, cpu0 := time.Now(), processCPU()
		for e := range ids {
			q, args := statements[k].sql(fmt.Sprint("Account|rec-", e))
			rows, err := conn.Query(ctx, q, args...)
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for rows.Next() {
				n++
			}
			if rows.Close(); rows.Err() != nil || n < events {
				b.Fatalf("%s of id %d: %d rows, %v", statements[k].name, e, n, rows.Err())
			}
		}
		took[k] += time.Since(start)
		cpu[k] += processCPU() - cpu0
	}
	for k := range statements { // prepared, and the plan settled, outside the timing
		for range 2 {
			run(k)
		}
	}
	took, cpu = [4]time.Duration{}, [4]time.Duration{}
	i := 0
	for b.Loop() {
		for k := range statements {
			run((k + i) % len(statements))
		}
		i++
	}
	for k, st := range statements {
		b.ReportMetric(float64(took[k].Microseconds())/float64(i*ids), st.name+"-µs/op")
		b.ReportMetric(float64(cpu[k].Nanoseconds())/1e3/float64(i*ids), st.name+"-cpu-µs/op")
	}
}

// processCPU is this process's CPU time (user and system) so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// postmaster returns the process id of the database server's postmaster
// when the server of pool runs on this machine (the parent of the
// connection's backend, both named postgres in /proc), and 0 otherwise.
func postmaster(ctx context.Context, pool *pgxpool.Pool) int {
	var backend int
	if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		return 0
	}
	f, ok := procStat(backend)
	if !ok {
		return 0
	}
	parent, err := strconv.Atoi(f[1])
	if err != nil {
		return 0
	}
	if _, ok := procStat(parent); !ok {
		return 0
	}
	return parent
}

// procStat returns the fields of /proc/PID/stat after the process's name,
// from its state (field 3) on, when the process is named postgres.
func procStat(pid int) ([]string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, false
	}
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open || string(b[open+1:end]) != "postgres" {
		return nil, false
	}
	f := strings.Fields(string(b[end+1:]))
	return f, len(f) >= 15
}

// serverCPU is the CPU time (user and system) of the PostgreSQL server
// whose postmaster is pm (see postmaster): the postmaster's own and that
// of its children it has reaped (cutime, cstime), and that of its live
// children (backends, autovacuum workers, the WAL writer, ...), from
// /proc (Linux: clock ticks of 1/100 s). A child's time moves from the
// live sum to the postmaster's reaped sum when it exits, so the sum does
// not lose it. 0 when pm is 0.
func serverCPU(pm int) time.Duration {
	if pm == 0 {
		return 0
	}
	ticks := func(f []string, fields ...int) int64 {
		var n int64
		for _, k := range fields {
			v, err := strconv.ParseInt(f[k-3], 10, 64) // f[0] is field 3
			if err == nil {
				n += v
			}
		}
		return n
	}
	var total int64
	if f, ok := procStat(pm); ok {
		total += ticks(f, 14, 15, 16, 17) // utime, stime, cutime, cstime
	}
	parent := strconv.Itoa(pm)
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil || pid == pm {
			continue
		}
		if f, ok := procStat(pid); ok && f[1] == parent {
			total += ticks(f, 14, 15)
		}
	}
	return time.Duration(total) * 10 * time.Millisecond
}

// BenchmarkRoundTripCPU: what one round trip costs this process in CPU
// while the server works for it. On one pooled connection, a statement
// whose server time grows with n (the count of n generated rows; n=0:
// SELECT 1), one row back; reports the wall time and this process's CPU
// time (user and system, getrusage) per round trip. While a goroutine
// waits for the server, the Go runtime parks and wakes threads and polls
// the network, and the kernel switches between them, so the client's CPU
// per round trip grows with the server's time: the reason a statement that
// keeps the server longer costs the client more CPU even for the same
// rows.
//
//	go test -run '^$' -bench RoundTripCPU -benchtime 5000x -count 2 ./store/postgres/
func BenchmarkRoundTripCPU(b *testing.B) {
	s := open(b)
	ctx := context.Background()
	conn, err := s.Pool().Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	for _, n := range []int{0, 500, 1500, 3000} {
		b.Run(fmt.Sprint("n=", n), func(b *testing.B) {
			q := fmt.Sprintf("SELECT count(*) FROM generate_series(1, %d)", n)
			if n == 0 {
				q = "SELECT 1"
			}
			start, cpu0 := time.Now(), processCPU()
			for b.Loop() {
				var got int64
				if err := conn.QueryRow(ctx, q).Scan(&got); err != nil {
					b.Fatal(err)
				}
				if want := int64(max(n, 1)); got != want {
					b.Fatalf("%s: %d, want %d", q, got, want)
				}
			}
			b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
			b.ReportMetric(float64(time.Since(start).Nanoseconds())/1e3/float64(b.N), "wall-µs/op")
		})
	}
}
