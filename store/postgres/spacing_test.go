package postgres_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

// TestWriteSpacesRowsApart: the rows one Write call stores get a
// db_timestamp each, none shared, on both layouts and in both orderings,
// also when the call goes as one statement per atomic write (after a write
// the server refuses), and each id's stay ascending with its sequence
// numbers, at least 1µs past its previous event's, which may be ahead of
// the server's clock. Group commit puts up to 1,000 writes of different
// ids in one call: with one timestamp among them, Pekko's by-slices query
// fails ("Too many events stored with the same timestamp"), and every
// offset would list them all. The by-slices query
// still returns every event once, each at an offset of its own.
func TestWriteSpacesRowsApart(t *testing.T) {
	t.Parallel()
	layouts := []struct {
		name string
		opts []postgres.Option
		// the layout grows db_timestamp per id (from the id's previous
		// event) rather than from a clock row of its own
		perID bool
	}{
		{"annals-commit", []postgres.Option{postgres.WithOrdering(postgres.CommitOrder)}, false},
		{"annals-timestamp", []postgres.Option{postgres.WithOrdering(postgres.TimestampOrder)}, true},
		{"r2dbc", []postgres.Option{postgres.WithLayout(postgres.LayoutR2DBC)}, true},
	}
	const ids, skewed = 1000, 10
	for _, l := range layouts {
		for _, each := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/statement-per-write=%v", l.name, each), func(t *testing.T) {
				t.Parallel()
				s := open(t, l.opts...)
				j, conn, ctx := s.Journal(), connect(t), t.Context()
				one := func(pid string, from, to int64) journal.AtomicWrite {
					w := journal.AtomicWrite{PersistenceID: pid}
					for seq := from; seq <= to; seq++ {
						w.Events = append(w.Events, journal.Repr{PersistenceID: pid, SequenceNr: seq, Payload: []byte("{}"), SerializerID: 31, Manifest: "m", WriterID: "w"})
					}
					return w
				}
				// Stored before: an event of each skewed id and of
				// Burst|multi. Where timestamps grow per id, the skewed
				// ids' are written by another store whose clock is an
				// hour ahead (a clock that stepped back since), so this
				// store reads them before its write.
				var before, skew []journal.AtomicWrite
				for k := range skewed {
					skew = append(skew, one(fmt.Sprintf("Skew|k-%d", k), 1, 1))
				}
				before = append(before, one("Burst|multi", 1, 1))
				future := time.Now().Add(59 * time.Minute)
				if l.perID {
					ahead, err := postgres.Open(ctx, pgtest.WithParam(pgtest.DSN(), "schema", s.Schema()),
						append(l.opts, postgres.WithClockSQL(`(transaction_timestamp() + interval '1 hour')`))...)
					if err != nil {
						t.Fatal(err)
					}
					res, err := ahead.Journal().Write(ctx, skew)
					ahead.Close()
					if err != nil || res != nil {
						t.Fatal(res, err)
					}
				} else {
					before = append(before, skew...)
				}
				if res, err := j.Write(ctx, before); err != nil || res != nil {
					t.Fatal(res, err)
				}
				// The call: 1,000 single-event writes of new ids (every
				// seventh tagged), the skewed ids' second events among
				// them, two writes of Burst|multi far apart (three events,
				// then one), and with each a write the server refuses,
				// which sends the call again as one statement per atomic
				// write.
				var writes []journal.AtomicWrite
				refused := -1
				for i := range ids {
					if i%(ids/skewed) == 0 {
						writes = append(writes, one(fmt.Sprintf("Skew|k-%d", i/(ids/skewed)), 2, 2))
					}
					if i == ids/2 {
						writes = append(writes, one("Burst|multi", 2, 4))
						if each {
							bad := one("Burst|refused", 1, 1)
							bad.Events[0].Manifest = "nul\x00byte"
							refused, writes = len(writes), append(writes, bad)
						}
					}
					w := one(fmt.Sprintf("Burst|b-%d", i), 1, 1)
					if i%7 == 0 {
						w.Events[0].Tags = []string{"burst"}
					}
					writes = append(writes, w)
				}
				writes = append(writes, one("Burst|multi", 5, 5))
				res, err := j.Write(ctx, writes)
				if err != nil {
					t.Fatal(err)
				}
				for i := range writes {
					var r error
					if res != nil {
						r = res[i]
					}
					if (r != nil) != (i == refused) {
						t.Fatalf("write %d (%s): %v; want only write %d refused", i, writes[i].PersistenceID, r, refused)
					}
				}

				type stamp struct {
					pid string
					seq int64
					ts  time.Time
				}
				rows, err := conn.Query(ctx, `SELECT persistence_id, seq_nr, db_timestamp FROM `+s.Schema()+`.event_journal ORDER BY persistence_id, seq_nr`)
				if err != nil {
					t.Fatal(err)
				}
				var stamps []stamp
				for rows.Next() {
					var st stamp
					if err := rows.Scan(&st.pid, &st.seq, &st.ts); err != nil {
						t.Fatal(err)
					}
					stamps = append(stamps, st)
				}
				if err := rows.Err(); err != nil {
					t.Fatal(err)
				}
				// Rows of the call: all but the events stored before.
				seen, shared := map[time.Time]string{}, 0
				for _, st := range stamps {
					if st.seq == 1 && (st.pid == "Burst|multi" || st.pid[:5] == "Skew|") {
						continue
					}
					name := fmt.Sprintf("%s #%d", st.pid, st.seq)
					if other, ok := seen[st.ts]; ok {
						if shared++; shared <= 3 {
							t.Errorf("%s and %s share db_timestamp %v", other, name, st.ts)
						}
					}
					seen[st.ts] = name
				}
				if want := ids + skewed + 4; len(seen) != want {
					t.Errorf("%d distinct db_timestamps among the call's rows, want %d", len(seen), want)
				}
				for k := 1; k < len(stamps); k++ {
					prev, st := stamps[k-1], stamps[k]
					if prev.pid == st.pid && st.ts.Sub(prev.ts) < time.Microsecond {
						t.Errorf("%s: event %d at %v, event %d at %v: want 1µs later at least", st.pid, prev.seq, prev.ts, st.seq, st.ts)
					}
				}
				if l.perID {
					for _, st := range stamps {
						if st.pid[:5] == "Skew|" && st.ts.Before(future) {
							t.Errorf("%s #%d at %v, want an hour ahead of the clock, after its first event", st.pid, st.seq, st.ts)
						}
					}
				}

				// The by-slices query returns the call's events once each,
				// each at an offset that lists it alone.
				got, crowded := map[string]int{}, 0
				for env, err := range s.Queries().CurrentEventsBySlices(ctx, "Burst", 0, 1023, query.NoOffset()) {
					if err != nil {
						t.Fatal(err)
					}
					got[fmt.Sprintf("%s #%d", env.PersistenceID, env.SequenceNr)]++
					if len(env.Offset.Seen) != 1 {
						if crowded++; crowded > 3 {
							continue
						}
						t.Errorf("%s #%d: offset at %v lists %d events, want itself alone", env.PersistenceID, env.SequenceNr, env.Offset.Timestamp, len(env.Offset.Seen))
					}
				}
				tagged := 0
				for env, err := range s.Queries().CurrentEventsByTag(ctx, "burst", query.NoOffset()) {
					if err != nil {
						t.Fatal(err)
					}
					if tagged++; env.SequenceNr != 1 || len(env.Offset.Seen) != 1 {
						t.Errorf("by tag: %s #%d at an offset listing %d events, want #1 alone", env.PersistenceID, env.SequenceNr, len(env.Offset.Seen))
					}
				}
				if want := (ids + 6) / 7; tagged != want {
					t.Errorf("by tag returned %d events, want %d", tagged, want)
				}
				var want []string
				for i := range ids {
					want = append(want, fmt.Sprintf("Burst|b-%d #1", i))
				}
				for seq := 1; seq <= 5; seq++ {
					want = append(want, fmt.Sprintf("Burst|multi #%d", seq))
				}
				for _, w := range want {
					if got[w] != 1 {
						t.Errorf("%s returned %d times, want once", w, got[w])
					}
				}
				if len(got) != len(want) {
					keys := make([]string, 0, len(got))
					for k := range got {
						if !slices.Contains(want, k) {
							keys = append(keys, k)
						}
					}
					t.Errorf("by slices returned %d events, want %d; unexpected: %v", len(got), len(want), keys)
				}
			})
		}
	}
}
