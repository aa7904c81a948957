package postgres_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/projection"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

// TestLateCommitsHandledOnce: 32 writers whose transactions sleep a random
// 0–200 ms before they commit, and four exactly-once projections on four
// slice ranges and one by tag started before them, reading through a second
// store (as another process would): every stored event is handled exactly
// once by the slice projections, and once by the tag projection.
func TestLateCommitsHandledOnce(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name          string
		ordering      postgres.Ordering
		writesPerUser int
	}{
		{"timestamp", postgres.TimestampOrder, 20},
		{"commit", postgres.CommitOrder, 3}, // writers take turns: 96 transactions of ~100 ms
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dsn, schema := pgtest.Schema(t)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			writer, err := postgres.Open(ctx, dsn, postgres.WithMigrate(true), postgres.WithOrdering(c.ordering),
				postgres.WithBeforeCommitSQL(`SELECT pg_sleep(random() * 0.2)`))
			if err != nil {
				t.Fatal(err)
			}
			defer writer.Close()
			reader, err := postgres.Open(ctx, dsn, postgres.WithOrdering(c.ordering),
				postgres.WithBacktracking(time.Minute, time.Second), postgres.WithPollInterval(100*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer reader.Close()
			rm := pgx.Identifier{schema, "handled"}.Sanitize()
			rmTag := pgx.Identifier{schema, "handled_by_tag"}.Sanitize()
			for _, table := range []string{rm, rmTag} {
				if _, err := reader.Pool().Exec(ctx, `CREATE TABLE `+table+` (persistence_id TEXT, seq_nr BIGINT, instance INT, times INT NOT NULL, PRIMARY KEY (persistence_id, seq_nr))`); err != nil {
					t.Fatal(err)
				}
			}

			// Four projection instances, started before the writers.
			handled := make(chan struct{}, 1)
			runCtx, stopRuns := context.WithCancel(ctx)
			var runs sync.WaitGroup
			ranges, _ := annals.SliceRanges(4)
			into := func(table string, instance int) func(ctx context.Context, tx pgx.Tx, env query.Envelope) error {
				return func(ctx context.Context, tx pgx.Tx, env query.Envelope) error {
					_, err := tx.Exec(ctx, `INSERT INTO `+table+` AS h VALUES ($1, $2, $3, 1)
						ON CONFLICT (persistence_id, seq_nr) DO UPDATE SET times = h.times + 1`, env.PersistenceID, env.SequenceNr, instance)
					select {
					case handled <- struct{}{}:
					default:
					}
					return err
				}
			}
			sources := map[string]projection.Source{"tag": projection.ByTag(reader.Queries(), "harsh")}
			handlers := map[string]func(ctx context.Context, tx pgx.Tx, env query.Envelope) error{"tag": into(rmTag, -1)}
			for i, r := range ranges {
				key := fmt.Sprintf("%d-%d", r.Min, r.Max)
				sources[key], handlers[key] = projection.BySlices(reader.Queries(), "Harsh", r), into(rm, i)
			}
			for key, src := range sources {
				p, err := projection.ExactlyOnce(projection.ID{Name: "harsh", Key: key}, src, reader.Projections(), handlers[key], projection.Config{})
				if err != nil {
					t.Fatal(err)
				}
				runs.Go(func() { _ = p.Run(runCtx) })
			}

			const writers = 32
			var wg sync.WaitGroup
			for w := range writers {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(w), 7))
					next := map[string]int64{}
					for range c.writesPerUser {
						pid := fmt.Sprintf("Harsh|w%02d-%d", w, rng.IntN(4))
						var evs []journal.Repr
						for range 1 + rng.IntN(3) {
							next[pid]++
							evs = append(evs, journal.Repr{PersistenceID: pid, SequenceNr: next[pid], Payload: []byte(`{}`), SerializerID: 33, Manifest: "e", Tags: []string{"harsh"}})
						}
						res, err := writer.Journal().Write(ctx, []journal.AtomicWrite{{PersistenceID: pid, Events: evs}})
						if err == nil && res != nil {
							err = res[0]
						}
						if err != nil {
							t.Errorf("writer %d: %v", w, err)
							return
						}
					}
				})
			}
			wg.Wait()
			if t.Failed() {
				stopRuns()
				runs.Wait()
				return
			}
			var stored int
			if err := reader.Pool().QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, "event_journal"}.Sanitize()).Scan(&stored); err != nil {
				t.Fatal(err)
			}
			// The handler signals before its transaction commits, so the count
			// is read again on each signal and on a ticker.
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				var n, nTag int
				if err := reader.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM `+rm+`), (SELECT count(*) FROM `+rmTag+`)`).Scan(&n, &nTag); err != nil {
					t.Fatal(err)
				}
				if n >= stored && nTag >= stored {
					break
				}
				select {
				case <-handled:
				case <-tick.C:
				case <-ctx.Done():
					rows, _ := reader.Pool().Query(context.Background(), `SELECT e.persistence_id, e.seq_nr, e.db_timestamp, e.slice FROM `+pgx.Identifier{schema, "event_journal"}.Sanitize()+` e
						WHERE NOT EXISTS (SELECT 1 FROM `+rm+` h WHERE h.persistence_id = e.persistence_id AND h.seq_nr = e.seq_nr)`)
					for rows.Next() {
						var pid string
						var seq int64
						var ts time.Time
						var slice int
						_ = rows.Scan(&pid, &seq, &ts, &slice)
						t.Logf("not handled: %s#%d at %s (slice %d)", pid, seq, ts.Format(time.RFC3339Nano), slice)
					}
					rows.Close()
					var now, hn int
					_ = reader.Pool().QueryRow(context.Background(), `SELECT (SELECT count(*) FROM `+pgx.Identifier{schema, "event_journal"}.Sanitize()+`), (SELECT count(*) FROM `+rm+`)`).Scan(&now, &hn)
					t.Logf("now: %d events, %d handled", now, hn)
					for _, r := range ranges {
						st, _ := reader.Projections().Load(context.Background(), projection.ID{Name: "harsh", Key: fmt.Sprintf("%d-%d", r.Min, r.Max)})
						t.Logf("projection %d-%d at %s", r.Min, r.Max, st.Offset)
					}
					t.Fatalf("the projections handled %d (by slices) and %d (by tag) of %d stored events", n, nTag, stored)
				}
			}
			stopRuns()
			runs.Wait()
			for name, table := range map[string]string{"by slices": rm, "by tag": rmTag} {
				var missing, twice, handledRows int
				err = reader.Pool().QueryRow(ctx, `SELECT
					(SELECT count(*) FROM `+pgx.Identifier{schema, "event_journal"}.Sanitize()+` e WHERE NOT EXISTS (SELECT 1 FROM `+table+` h WHERE h.persistence_id = e.persistence_id AND h.seq_nr = e.seq_nr)),
					(SELECT count(*) FROM `+table+` WHERE times <> 1),
					(SELECT count(*) FROM `+table+`)`).Scan(&missing, &twice, &handledRows)
				if err != nil {
					t.Fatal(err)
				}
				if missing != 0 || twice != 0 || handledRows != stored {
					t.Errorf("%s: %d events stored; %d handled, %d never, %d more than once", name, stored, handledRows, missing, twice)
				}
			}
			t.Logf("%d events from %d writers, each handled once", stored, writers)
		})
	}
}

// TestKilledWriterLeavesNothingHalfWritten kills a writer in the middle of
// a write transaction of 3 events (its transaction sleeps before the
// commit): the process (SIGKILL), or its server backend
// (pg_terminate_backend). Either all 3 events are stored or none, and the id
// can be written on from what is stored.
func TestKilledWriterLeavesNothingHalfWritten(t *testing.T) {
	if os.Getenv("ANNALS_PG_KILLED_WRITER") != "" {
		killedWriter()
		return
	}
	t.Parallel()
	for _, kill := range []string{"process", "backend"} {
		t.Run(kill, func(t *testing.T) {
			t.Parallel()
			dsn, _ := pgtest.Schema(t)
			ctx := t.Context()
			s, err := postgres.Open(ctx, dsn, postgres.WithMigrate(true))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			pid := "Killed|" + kill
			app := "annals-killed-writer-" + kill
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestKilledWriterLeavesNothingHalfWritten$")
			cmd.Env = append(os.Environ(), "ANNALS_PG_KILLED_WRITER="+pgtest.WithParam(dsn, "application_name", app), "ANNALS_PG_KILLED_PID="+pid)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// Polling another process's state: there is no signal to await.
			waitFor := func(what, cond string) int {
				for {
					var backend int
					err := s.Pool().QueryRow(ctx, `SELECT COALESCE((SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND `+cond+` LIMIT 1), 0)`, app).Scan(&backend)
					if err != nil {
						t.Fatal(err)
					}
					if (backend != 0) == (what == "present") {
						return backend
					}
					select {
					case <-ctx.Done():
						t.Fatalf("waiting for the writer's backend to be %s: %v", what, ctx.Err())
					case <-time.After(20 * time.Millisecond):
					}
				}
			}
			backend := waitFor("present", `query LIKE '%pg_sleep%' AND state = 'active'`)
			switch kill {
			case "process":
				if err := cmd.Process.Kill(); err != nil {
					t.Fatal(err)
				}
			case "backend":
				if _, err := s.Pool().Exec(ctx, `SELECT pg_terminate_backend($1)`, backend); err != nil {
					t.Fatal(err)
				}
			}
			_ = cmd.Wait()
			waitFor("gone", `true`) // the server has finished the transaction
			n := int64(0)
			for _, err := range s.Journal().Replay(ctx, pid, 1, 1<<62, 1<<62) {
				if err != nil {
					t.Fatal(err)
				}
				n++
			}
			if n != 0 && n != 3 {
				t.Fatalf("a killed writer left %d of its 3 events", n)
			}
			if kill == "backend" && n != 0 {
				t.Fatalf("a terminated transaction left %d events", n)
			}
			ev := journal.Repr{PersistenceID: pid, SequenceNr: n + 1, Payload: []byte(`{}`), SerializerID: 33}
			if res, err := s.Journal().Write(ctx, []journal.AtomicWrite{{PersistenceID: pid, Events: []journal.Repr{ev}}}); err != nil || res != nil {
				t.Fatalf("writing the id on from %d: %v %v", n+1, res, err)
			}
			t.Logf("killed %s: %d of 3 events stored", kill, n)
		})
	}
}

// killedWriter is the child process of TestKilledWriterLeavesNothing: it
// writes 3 events in a transaction that sleeps before its commit.
func killedWriter() {
	dsn := os.Getenv("ANNALS_PG_KILLED_WRITER")
	pid := os.Getenv("ANNALS_PG_KILLED_PID")
	s, err := postgres.Open(context.Background(), dsn, postgres.WithBeforeCommitSQL(`SELECT pg_sleep(2)`))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	var evs []journal.Repr
	for i := int64(1); i <= 3; i++ {
		evs = append(evs, journal.Repr{PersistenceID: pid, SequenceNr: i, Payload: []byte(`{}`), SerializerID: 33})
	}
	_, err = s.Journal().Write(context.Background(), []journal.AtomicWrite{{PersistenceID: pid, Events: evs}})
	fmt.Fprintln(os.Stderr, "killed writer: write ended:", err)
	os.Exit(4)
}
