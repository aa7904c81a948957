package postgres_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

// TestTimestampOrderKnowsItsStamps: in TimestampOrder a store knows the
// db_timestamp of the last event it wrote of each id, exactly as stored,
// and stamps the id's next write from it without reading the journal;
// it reads the id's previous row when it does not know it (a restart,
// another writer's events, a conflict, a delete). Each id's db_timestamps
// strictly increase with its sequence numbers throughout, while the
// server's clock steps back an hour, on both layouts.
func TestTimestampOrderKnowsItsStamps(t *testing.T) {
	t.Parallel()
	type step struct {
		writer   string        // "a", "b": two stores on the schema; "fresh": a new one (a restart)
		shift    time.Duration // the server clock's offset during the step
		from, to int64         // the id's atomic write, after a new id's event in the same call
		refused  bool          // the call also carries a write the server refuses, then the id's event to+1: one statement per write
		deleteTo int64         // instead of a write: DeleteTo(id, deleteTo)
		purge    bool          // instead of a write: Purge(id)
		conflict bool          // the id's write is a conflict
		reads    int64         // ids whose previous event the writer reads in the step
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"the clock steps back under one writer", []step{
			{writer: "a", shift: time.Hour, from: 1, to: 3},
			{writer: "a", from: 4, to: 5},
			{writer: "a", from: 6, to: 6},
		}},
		{"a restart knows nothing", []step{
			{writer: "a", shift: time.Hour, from: 1, to: 3},
			{writer: "fresh", from: 4, to: 4, reads: 1},
		}},
		{"two writers on one id", []step{
			{writer: "a", from: 1, to: 2},
			{writer: "b", shift: time.Hour, from: 3, to: 4, reads: 1},
			{writer: "a", from: 3, to: 3, conflict: true},
			{writer: "a", from: 5, to: 5, reads: 1},
			{writer: "b", from: 6, to: 6, reads: 1},
		}},
		{"a delete", []step{
			{writer: "a", from: 1, to: 3},
			{writer: "a", shift: time.Hour, deleteTo: 3},
			{writer: "a", from: 4, to: 4, reads: 1},
		}},
		{"a purge, then the id written again", []step{
			{writer: "a", shift: time.Hour, from: 1, to: 3},
			{writer: "a", purge: true},
			{writer: "b", shift: 2 * time.Hour, from: 1, to: 3},
			{writer: "a", from: 4, to: 4, reads: 1},
		}},
		{"one statement per write", []step{
			{writer: "a", shift: time.Hour, from: 1, to: 1},
			{writer: "a", from: 2, to: 3, refused: true},
		}},
	}
	layouts := []struct {
		name string
		opts []postgres.Option
	}{
		{"annals", []postgres.Option{postgres.WithOrdering(postgres.TimestampOrder)}},
		{"r2dbc", []postgres.Option{postgres.WithLayout(postgres.LayoutR2DBC)}},
	}
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			t.Parallel()
			s := open(t, l.opts...)
			conn, ctx := connect(t), t.Context()
			schema := s.Schema()
			// A server clock the test moves: every store's writes stamp from it.
			for _, q := range []string{
				`CREATE TABLE ` + schema + `.test_clock (shift interval NOT NULL)`,
				`INSERT INTO ` + schema + `.test_clock VALUES ('0')`,
				`CREATE FUNCTION ` + schema + `.test_clock() RETURNS timestamptz LANGUAGE sql STABLE AS 'SELECT transaction_timestamp() + shift FROM ` + schema + `.test_clock'`,
			} {
				if _, err := conn.Exec(ctx, q); err != nil {
					t.Fatal(err)
				}
			}
			store := func() *postgres.Store {
				st, err := postgres.Open(ctx, pgtest.WithParam(pgtest.DSN(), "schema", schema), append(l.opts, postgres.WithClockSQL(schema+`.test_clock()`))...)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { st.Close() })
				return st
			}
			one := func(pid string, from, to int64) journal.AtomicWrite {
				w := journal.AtomicWrite{PersistenceID: pid}
				for seq := from; seq <= to; seq++ {
					w.Events = append(w.Events, journal.Repr{PersistenceID: pid, SequenceNr: seq, Payload: []byte("{}"), SerializerID: 31, Manifest: "m", WriterID: "w"})
				}
				return w
			}
			stored := func(pid string) map[int64]time.Time {
				rows, err := conn.Query(ctx, `SELECT seq_nr, db_timestamp FROM `+schema+`.event_journal WHERE persistence_id = $1 ORDER BY seq_nr`, pid)
				if err != nil {
					t.Fatal(err)
				}
				defer rows.Close()
				got := map[int64]time.Time{}
				var last int64
				for rows.Next() {
					var seq int64
					var ts time.Time
					if err := rows.Scan(&seq, &ts); err != nil {
						t.Fatal(err)
					}
					if prev, ok := got[last]; ok && ts.Sub(prev) < time.Microsecond {
						t.Errorf("%s: #%d at %v, #%d at %v: want 1µs later at least", pid, last, prev, seq, ts)
					}
					got[seq], last = ts, seq
				}
				if err := rows.Err(); err != nil {
					t.Fatal(err)
				}
				return got
			}
			// knows checks that st knows pid's event seq as stored.
			knows := func(st *postgres.Store, pid string, seq int64) {
				t.Helper()
				kseq, kts, ok := postgres.KnownStamp(st, pid)
				if !ok || kseq != seq {
					t.Errorf("%s: the writer knows #%d (%v), want #%d", pid, kseq, ok, seq)
					return
				}
				if ts := stored(pid)[seq]; !kts.Equal(ts) {
					t.Errorf("%s #%d: the writer knows db_timestamp %v, stored %v", pid, seq, kts, ts)
				}
			}
			for n, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					pid := fmt.Sprintf("Stamp|case-%d", n)
					writers := map[string]*postgres.Store{"a": store(), "b": store()}
					for k, st := range c.steps {
						if _, err := conn.Exec(ctx, `UPDATE `+schema+`.test_clock SET shift = $1`, st.shift); err != nil {
							t.Fatal(err)
						}
						w := writers[st.writer]
						if w == nil {
							w = store()
						}
						reads := postgres.StampReads(w)
						switch {
						case st.deleteTo > 0:
							if err := w.Journal().DeleteTo(ctx, pid, st.deleteTo); err != nil {
								t.Fatal(err)
							}
							continue
						case st.purge:
							if err := w.Purge(ctx, []string{pid}); err != nil {
								t.Fatal(err)
							}
							continue
						}
						fill := fmt.Sprintf("Fill|case-%d-%d", n, k)
						writes := []journal.AtomicWrite{one(fill, 1, 1), one(pid, st.from, st.to)}
						last, refused := st.to, -1
						if st.refused {
							bad := one("Bad|x", 1, 1)
							bad.Events[0].Manifest = "nul\x00byte"
							refused, writes, last = len(writes), append(writes, bad, one(pid, st.to+1, st.to+1)), st.to+1
						}
						res, err := w.Journal().Write(ctx, writes)
						if err != nil {
							t.Fatalf("step %d: %v", k, err)
						}
						for i := range writes {
							var got error
							if res != nil {
								got = res[i]
							}
							var conflict *journal.ConflictError
							switch {
							case i == refused && got == nil:
								t.Errorf("step %d: the write the server refuses was stored", k)
							case i == 1 && st.conflict && !errors.As(got, &conflict):
								t.Errorf("step %d: %v, want a conflict", k, got)
							case i != refused && !(i == 1 && st.conflict) && got != nil:
								t.Errorf("step %d: write %d: %v", k, i, got)
							}
						}
						if got := postgres.StampReads(w) - reads; got != st.reads {
							t.Errorf("step %d: the writer read %d ids' previous events, want %d", k, got, st.reads)
						}
						knows(w, fill, 1)
						if st.conflict {
							if _, _, ok := postgres.KnownStamp(w, pid); ok {
								t.Errorf("step %d: the writer still knows %s after a conflict", k, pid)
							}
							continue
						}
						knows(w, pid, last)
						stored(pid) // strictly increasing, past the events stamped an hour ahead
					}
				})
			}
		})
	}
}
