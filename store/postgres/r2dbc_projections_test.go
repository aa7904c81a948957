package postgres_test

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/offsets"
	"github.com/annals-go/annals/projection"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/store/postgres"
)

// jvmOffset is what the JVM's projection offset store (pekko-projection-r2dbc
// R2dbcOffsetStore.readTimestampOffset) makes of the timestamp rows of a
// projection: its SQL (the rows of the projection's name in its slice
// range) and its State fold (the latest timestamp, with the ids and
// highest sequence numbers at it; and per id the highest sequence number
// of any row, by which it rejects duplicates).
func jvmOffset(t *testing.T, conn *pgx.Conn, schema, name string, minSlice, maxSlice int) (latest time.Time, seen, byPid map[string]int64) {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT persistence_id, seq_nr, timestamp_offset
		FROM `+pgx.Identifier{schema, "projection_timestamp_offset_store"}.Sanitize()+` WHERE slice BETWEEN $1 AND $2 AND projection_name = $3`,
		minSlice, maxSlice, name)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen, byPid = map[string]int64{}, map[string]int64{}
	for rows.Next() {
		var pid string
		var seq int64
		var ts time.Time
		if err := rows.Scan(&pid, &seq, &ts); err != nil {
			t.Fatal(err)
		}
		byPid[pid] = max(byPid[pid], seq)
		switch {
		case ts.After(latest):
			latest, seen = ts, map[string]int64{pid: seq}
		case ts.Equal(latest):
			seen[pid] = max(seen[pid], seq)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return latest.UTC(), seen, byPid
}

// TestR2DBCProjectionOffsets: on the r2dbc layout, offsets are stored in
// the JVM projection offset store's tables and form: timestamp offsets
// as projection_timestamp_offset_store rows that the JVM's read statement
// and fold turn into the same offset, primitive offsets under the JVM's
// manifests; rows the JVM writes load in Go.
func TestR2DBCProjectionOffsets(t *testing.T) {
	t.Parallel()
	s := open(t, postgres.WithLayout(postgres.LayoutR2DBC))
	conn := connect(t)
	ctx := context.Background()
	ts := time.Date(2026, 11, 22, 13, 54, 38, 418648000, time.UTC)
	tsTable, offTable := pgx.Identifier{s.Schema(), "projection_timestamp_offset_store"}.Sanitize(), pgx.Identifier{s.Schema(), "projection_offset_store"}.Sanitize()

	t.Run("GoSavesJVMReads", func(t *testing.T) {
		// A by-slices projection saving each envelope's offset, as a
		// projection with one save per envelope does: every event of the
		// fixture's Fixture entities, in events-by-slices order.
		id := offsets.ID{Name: "go-to-jvm", Key: "0-1023"}
		saves := []query.Offset{
			query.TimestampOffset(ts, map[string]int64{"Fixture|f-1": 1}),
			query.TimestampOffset(ts.Add(time.Second), map[string]int64{"Fixture|f-1": 2}),
			query.TimestampOffset(ts.Add(2*time.Second), map[string]int64{"Fixture|f-2": 3}),
			query.TimestampOffset(ts.Add(2*time.Second), map[string]int64{"Fixture|f-2": 3, "Fixture|ünï-ç": 1}),
		}
		for _, o := range saves {
			if err := s.Projections().SaveOffset(ctx, id, o); err != nil {
				t.Fatal(err)
			}
		}
		latest, seen, byPid := jvmOffset(t, conn, s.Schema(), id.Name, 0, 1023)
		last := saves[len(saves)-1]
		if !latest.Equal(last.Timestamp) || !maps.Equal(seen, last.Seen) {
			t.Errorf("the JVM reads TimestampOffset(%v, %v), want the last saved %v", latest, seen, last)
		}
		if want := map[string]int64{"Fixture|f-1": 2, "Fixture|f-2": 3, "Fixture|ünï-ç": 1}; !maps.Equal(byPid, want) {
			t.Errorf("the JVM's per-id sequence numbers %v, want %v (one row per saved envelope within the time window)", byPid, want)
		}
		rows, err := conn.Query(ctx, `SELECT projection_key, slice, persistence_id, timestamp_consumed FROM `+tsTable+` WHERE projection_name = $1`, id.Name)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rows.Next() {
			var key, pid string
			var slice int
			var consumed time.Time
			if err := rows.Scan(&key, &slice, &pid, &consumed); err != nil {
				t.Fatal(err)
			}
			n++
			if key != id.Key || slice != annals.Slice(pid) || time.Since(consumed) > time.Minute {
				t.Errorf("row (%q, %d, %q, consumed %v), want the key %q, the id's slice %d, consumed now", key, slice, pid, consumed, id.Key, annals.Slice(pid))
			}
		}
		if err := rows.Err(); err != nil || n != 4 {
			t.Errorf("%d rows (%v), want one per saved (id, sequence number): 4", n, err)
		}
		st, err := s.Projections().Load(ctx, id)
		if err != nil || !st.Offset.Timestamp.Equal(last.Timestamp) || !maps.Equal(st.Offset.Seen, last.Seen) {
			t.Errorf("Load = %+v, %v; want %v", st, err, last)
		}
	})

	t.Run("JVMSavesGoReads", func(t *testing.T) {
		// Rows as the JVM's insertTimestampOffsetSql writes them, for two
		// instances of one projection (slices 0-511 and 512-1023).
		for _, r := range []struct {
			key, pid string
			seq      int64
			at       time.Time
		}{
			{"0-511", "Fixture|ünï-ç", 1, ts},
			{"0-511", "FixtureR|r-1|A", 1, ts.Add(time.Second)},
			{"0-511", "Fixture|ünï-ç", 2, ts.Add(time.Second)},
			{"512-1023", "Fixture|f-1", 7, ts.Add(time.Hour)},
		} {
			if _, err := conn.Exec(ctx, `INSERT INTO `+tsTable+` (projection_name, projection_key, slice, persistence_id, seq_nr, timestamp_offset, timestamp_consumed)
				VALUES ($1, $2, $3, $4, $5, $6, transaction_timestamp())`, "jvm-to-go", r.key, annals.Slice(r.pid), r.pid, r.seq, r.at); err != nil {
				t.Fatal(err)
			}
		}
		for key, want := range map[string]query.Offset{
			"0-511":    query.TimestampOffset(ts.Add(time.Second), map[string]int64{"FixtureR|r-1|A": 1, "Fixture|ünï-ç": 2}),
			"512-1023": query.TimestampOffset(ts.Add(time.Hour), map[string]int64{"Fixture|f-1": 7}),
			"0-1023":   query.TimestampOffset(ts.Add(time.Hour), map[string]int64{"Fixture|f-1": 7}), // as the JVM reads a scaled-down projection
		} {
			st, err := s.Projections().Load(ctx, offsets.ID{Name: "jvm-to-go", Key: key})
			if err != nil || st.Offset.Kind != query.KindTimestamp || !st.Offset.Timestamp.Equal(want.Timestamp) || !maps.Equal(st.Offset.Seen, want.Seen) {
				t.Errorf("Load(%s) = %+v, %v; want %v", key, st.Offset, err, want)
			}
		}
	})

	t.Run("PrimitiveOffsets", func(t *testing.T) {
		uuid := [16]byte{0x1e, 0xc9, 0x41, 0x4c, 0x23, 0x2a, 0x11, 0xb2, 0x80, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07}
		for _, c := range []struct {
			key, current, manifest string
			o                      query.Offset
			jvmWrites              bool
		}{
			{"seq", "42", "SEQ", query.SequenceOffset(42), false},
			{"uuid", "1ec9414c-232a-11b2-8001-020304050607", "TBU", query.TimeUUIDOffset(uuid), false},
			{"jvm-seq", "7", "SEQ", query.SequenceOffset(7), true},
			{"jvm-long", "9", "LNG", query.SequenceOffset(9), true},
		} {
			id := offsets.ID{Name: "primitive", Key: c.key}
			if c.jvmWrites {
				if _, err := conn.Exec(ctx, `INSERT INTO `+offTable+` (projection_name, projection_key, current_offset, manifest, mergeable, last_updated)
					VALUES ($1, $2, $3, $4, false, 1795355678418)`, id.Name, id.Key, c.current, c.manifest); err != nil {
					t.Fatal(err)
				}
			} else if err := s.Projections().SaveOffset(ctx, id, c.o); err != nil {
				t.Fatal(err)
			}
			var current, manifest string
			var mergeable bool
			var updated int64
			if err := conn.QueryRow(ctx, `SELECT current_offset, manifest, mergeable, last_updated FROM `+offTable+` WHERE projection_name = $1 AND projection_key = $2`,
				id.Name, id.Key).Scan(&current, &manifest, &mergeable, &updated); err != nil {
				t.Fatal(err)
			}
			if current != c.current || manifest != c.manifest || mergeable || updated < 1e12 {
				t.Errorf("%s: row (%q, %q, %v, %d), want (%q, %q, false, epoch millis)", c.key, current, manifest, mergeable, updated, c.current, c.manifest)
			}
			if st, err := s.Projections().Load(ctx, id); err != nil || st.Offset.Kind != c.o.Kind || st.Offset.Sequence != c.o.Sequence || st.Offset.TimeUUID != c.o.TimeUUID {
				t.Errorf("%s: Load = %+v, %v; want %v", c.key, st.Offset, err, c.o)
			}
		}
	})

	t.Run("MovesBackAndForgetsOldRows", func(t *testing.T) {
		id := offsets.ID{Name: "moves", Key: "0-1023"}
		for _, o := range []query.Offset{
			query.TimestampOffset(ts, map[string]int64{"A|1": 1}),
			query.TimestampOffset(ts.Add(time.Hour), map[string]int64{"A|1": 2}),   // the row at ts is older than the window: deleted
			query.TimestampOffset(ts.Add(time.Minute), map[string]int64{"A|1": 9}), // back: the later row is deleted
		} {
			if err := s.Projections().SaveOffset(ctx, id, o); err != nil {
				t.Fatal(err)
			}
			st, err := s.Projections().Load(ctx, id)
			if err != nil || !st.Offset.Timestamp.Equal(o.Timestamp) || !maps.Equal(st.Offset.Seen, o.Seen) {
				t.Errorf("after saving %v, Load = %+v, %v", o, st.Offset, err)
			}
		}
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+tsTable+` WHERE projection_name = $1`, id.Name).Scan(&n); err != nil || n != 1 {
			t.Errorf("%d rows left, %v; want 1", n, err)
		}
		if err := s.Projections().Reset(ctx, id); err != nil {
			t.Fatal(err)
		}
		if st, err := s.Projections().Load(ctx, id); err != nil || st.Offset.Kind != query.KindNone {
			t.Errorf("after Reset, Load = %+v, %v", st.Offset, err)
		}
	})
}

// TestR2DBCProjectionHandover: an Annals projection over the fixture rows
// leaves offset rows the JVM's offset store would resume from (the last
// event's timestamp, and every id's last sequence number); after rows the
// JVM writes for an event it handled, a new Annals run handles only the
// event after it.
func TestR2DBCProjectionHandover(t *testing.T) {
	t.Parallel()
	s, conn := fixtureStore(t)
	id := projection.ID{Name: "handover", Key: "0-1023"}
	src := projection.BySlices(s.Queries(), "Fixture", annals.SliceRange{Min: 0, Max: 1023})

	// run runs the projection until it handled want events, and returns
	// them as "id#seq".
	run := func(t *testing.T, want int) []string {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var got []string
		saved := savedHook{want: want, enough: make(chan struct{})}
		enough := saved.enough
		p, err := projection.ExactlyOnce(id, src, s.Projections(), func(_ context.Context, _ pgx.Tx, env query.Envelope) error {
			got = append(got, env.PersistenceID+"#"+strconv.FormatInt(env.SequenceNr, 10))
			return nil
		}, projection.Config{Logger: slog.New(slog.DiscardHandler), Hooks: []any{&saved}})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()
		select {
		case <-enough:
		case err := <-done:
			t.Fatalf("the projection ended: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatalf("handled %v, want %d events", got, want)
		}
		cancel()
		<-done
		return got
	}

	got := run(t, 10)
	if want := []string{"Fixture|f-1#1", "Fixture|f-1#2", "Fixture|f-1#3", "Fixture|f-1#4", "Fixture|f-1#5", "Fixture|f-1#6", "Fixture|f-1#7",
		"Fixture|f-2#3", "Fixture|ünï-ç#1", "Fixture|ünï-ç#2"}; !slices.Equal(got, want) {
		t.Fatalf("handled %v, want %v", got, want)
	}
	latest, seen, byPid := jvmOffset(t, conn, s.Schema(), id.Name, 0, 1023)
	lastTS := time.Date(2026, 11, 22, 13, 55, 3, 912712000, time.UTC) // Fixture|ünï-ç #2
	if !latest.Equal(lastTS) || !maps.Equal(seen, map[string]int64{"Fixture|ünï-ç": 2}) {
		t.Errorf("the JVM would resume from (%v, %v), want (%v, ünï-ç #2)", latest, seen, lastTS)
	}
	if want := map[string]int64{"Fixture|f-1": 7, "Fixture|f-2": 3, "Fixture|ünï-ç": 2}; !maps.Equal(byPid, want) {
		t.Errorf("the JVM would take %v as handled, want %v", byPid, want)
	}

	// Two more events of f-1; the JVM handles #8 and stores its row as
	// its offset store does; Annals resumes with #9.
	w := journal.AtomicWrite{PersistenceID: "Fixture|f-1"}
	for seq := int64(8); seq <= 9; seq++ {
		w.Events = append(w.Events, journal.Repr{PersistenceID: "Fixture|f-1", SequenceNr: seq, Payload: []byte(`{"n":8,"text":"x"}`), SerializerID: 31, Manifest: "anchor.Fixture$Added", WriterID: "w"})
	}
	if res, err := s.Journal().Write(context.Background(), []journal.AtomicWrite{w}); err != nil || res != nil {
		t.Fatal(res, err)
	}
	if _, err := conn.Exec(context.Background(), `INSERT INTO `+pgx.Identifier{s.Schema(), "projection_timestamp_offset_store"}.Sanitize()+`
		(projection_name, projection_key, slice, persistence_id, seq_nr, timestamp_offset, timestamp_consumed)
		SELECT $1, $2, slice, persistence_id, seq_nr, db_timestamp, transaction_timestamp() FROM `+pgx.Identifier{s.Schema(), "event_journal"}.Sanitize()+`
		WHERE persistence_id = 'Fixture|f-1' AND seq_nr = 8`, id.Name, id.Key); err != nil {
		t.Fatal(err)
	}
	if got := run(t, 1); !slices.Equal(got, []string{"Fixture|f-1#9"}) {
		t.Errorf("after the JVM handled #8, Annals handled %v, want [Fixture|f-1#9]", got)
	}
}

// savedHook closes enough once want offsets were saved (after their
// transactions committed).
type savedHook struct {
	mu     sync.Mutex
	n      int
	want   int
	enough chan struct{}
}

// OnOffsetSaved implements projection.HookOffsetSaved.
func (h *savedHook) OnOffsetSaved(projection.ID, query.Offset, time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n++; h.n == h.want {
		close(h.enough)
	}
}
