package postgres_test

import (
	"context"
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/postgres"
)

// compareRow compares a row Annals wrote with a fixture row Pekko wrote of
// the same kind: the same columns in the same order, each of the same JSON
// kind (so the same SQL NULLs), and the same value except in the columns
// of varies (timestamps, writer ids, ids, payloads: checked by the
// caller). Tags compare as sets.
func compareRow(t *testing.T, what string, got, want jsonRow, varies ...string) {
	t.Helper()
	if !reflect.DeepEqual(got.keys, want.keys) {
		t.Fatalf("%s: columns %v, want Pekko's %v", what, got.keys, want.keys)
	}
	skip := map[string]bool{}
	for _, k := range varies {
		skip[k] = true
	}
	for _, k := range want.keys {
		g, w := got.values[k], want.values[k]
		if kindOf(g) != kindOf(w) {
			t.Errorf("%s: %s is %s %v, Pekko writes %s %v", what, k, kindOf(g), g, kindOf(w), w)
			continue
		}
		if skip[k] {
			continue
		}
		if k == "tags" && g != nil {
			if !sameSet(sqlValue(t, "text[]", g).([]string), sqlValue(t, "text[]", w).([]string)) {
				t.Errorf("%s: tags %v, Pekko wrote %v", what, g, w)
			}
			continue
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("%s: %s = %v, Pekko writes %v", what, k, g, w)
		}
	}
}

// rowTime reads a row's timestamptz column.
func rowTime(t *testing.T, r jsonRow, col string) time.Time {
	t.Helper()
	ts, err := time.Parse(fixtureTime, r.values[col].(string))
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// rowInt reads a row's integer column.
func rowInt(t *testing.T, r jsonRow, col string) int64 {
	t.Helper()
	n, err := r.values[col].(json.Number).Int64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestR2DBCWritesPekkoRows: what Annals writes on the r2dbc layout has the
// shape, types and values of the rows Pekko wrote, column by column
// (timestamps, writer ids and payload contents aside, which are checked
// on their own): events continuing a Pekko entity (tagged and untagged),
// its snapshot (replacing Pekko's), and a delete marker.
func TestR2DBCWritesPekkoRows(t *testing.T) {
	t.Parallel()
	s, conn := fixtureStore(t)
	ctx := context.Background()
	reg := fixtureRegistry(t)
	fixtures, snaps := readRows(t, "event_journal.jsonl"), readRows(t, "snapshot.jsonl")

	// Fixture|f-1 continues through an entity: 8 Added (untagged), 9
	// Renamed (two tags, then a snapshot), 10 Added (odd: tagged).
	before := time.Now().Add(-time.Second)
	h, err := entity.NewHost(fixtureBehavior(), entity.HostConfig{Journal: s.Journal(), Snapshots: s.Snapshots(), Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Shutdown(context.Background())
	for _, mk := range []func(entity.ReplyTo[fixtureState]) fixtureCommand{
		func(r entity.ReplyTo[fixtureState]) fixtureCommand { return fixtureAdd{N: 8, Text: "eight", Reply: r} },
		func(r entity.ReplyTo[fixtureState]) fixtureCommand { return fixtureRename{Name: "gamma", Reply: r} },
		func(r entity.ReplyTo[fixtureState]) fixtureCommand { return fixtureAdd{N: 9, Text: "nine", Reply: r} },
	} {
		if _, err := entity.Ask(ctx, h, "f-1", mk); err != nil {
			t.Fatal(err)
		}
	}
	after := time.Now().Add(time.Second)

	// Fixture|g-1: three events through the journal, then DeleteTo(2).
	pid := "Fixture|g-1"
	var w journal.AtomicWrite
	w.PersistenceID = pid
	for i := 1; i <= 3; i++ {
		payload, id, manifest, err := reg.Serialize(fixtureAdded{N: i, Text: "g"})
		if err != nil {
			t.Fatal(err)
		}
		var tags []string
		if i%2 == 1 {
			tags = []string{"fixture-odd"}
		}
		w.Events = append(w.Events, journal.Repr{PersistenceID: pid, SequenceNr: int64(i), Payload: payload, SerializerID: id, Manifest: manifest, WriterID: "w", Tags: tags})
	}
	if res, err := s.Journal().Write(ctx, []journal.AtomicWrite{w}); err != nil || res != nil {
		t.Fatal(res, err)
	}
	if err := s.Journal().DeleteTo(ctx, pid, 2); err != nil {
		t.Fatal(err)
	}

	got := dumpRows(t, conn, s.Schema(), "event_journal", `persistence_id = 'Fixture|f-1' AND seq_nr >= 7 OR persistence_id = 'Fixture|g-1'`)
	bySeq := map[string]jsonRow{}
	for _, r := range got {
		bySeq[r.values["persistence_id"].(string)+"#"+strconv.FormatInt(rowInt(t, r, "seq_nr"), 10)] = r
	}
	if len(got) != 6 {
		t.Fatalf("rows %v, want f-1 #7–10 and g-1 #2 (a marker) and #3", bySeq)
	}
	for _, c := range []struct {
		key, like, payload string
		likeSeq            int64
	}{
		{"Fixture|f-1#8", "Fixture|f-1", `{"n":8,"text":"eight"}`, 2}, // an untagged Added
		{"Fixture|f-1#9", "Fixture|f-1", `{"name":"gamma"}`, 7},       // a Renamed with two tags
		{"Fixture|f-1#10", "Fixture|f-1", `{"n":9,"text":"nine"}`, 5}, // a tagged Added
		{"Fixture|g-1#3", "Fixture|f-2", `{"n":3,"text":"g"}`, 3},     // a tagged Added after a delete
		{"Fixture|g-1#2", "Fixture|f-2", ``, 2},                       // the delete marker
	} {
		r, ok := bySeq[c.key]
		if !ok {
			t.Errorf("no row %s", c.key)
			continue
		}
		want := fixtureRow(t, fixtures, c.like, c.likeSeq)
		compareRow(t, c.key, r, want, "persistence_id", "slice", "seq_nr", "db_timestamp", "writer", "event_payload")
		if p, _ := sqlValue(t, "bytea", r.values["event_payload"]).([]byte); string(p) != c.payload {
			t.Errorf("%s: payload %q, want %q (as Jackson writes it)", c.key, p, c.payload)
		}
		if n := rowInt(t, r, "slice"); n != int64(annals.Slice(r.values["persistence_id"].(string))) {
			t.Errorf("%s: slice %d", c.key, n)
		}
		if ts := rowTime(t, r, "db_timestamp"); ts.Before(before) || ts.After(after) {
			t.Errorf("%s: db_timestamp %v, want the time of the write", c.key, ts)
		}
		if wr := r.values["writer"].(string); (wr == "") != (c.payload == "") {
			t.Errorf("%s: writer %q", c.key, wr)
		}
	}
	// db_timestamp grows per id from Pekko's last event on.
	for seq := 8; seq <= 10; seq++ {
		prev, cur := bySeq["Fixture|f-1#"+strconv.Itoa(seq-1)], bySeq["Fixture|f-1#"+strconv.Itoa(seq)]
		if !rowTime(t, cur, "db_timestamp").After(rowTime(t, prev, "db_timestamp")) {
			t.Errorf("db_timestamp of #%d is not after #%d's", seq, seq-1)
		}
	}

	// The snapshot at 9 replaced Pekko's at 7, in the same row shape.
	snapRows := dumpRows(t, conn, s.Schema(), "snapshot", `persistence_id = 'Fixture|f-1'`)
	if len(snapRows) != 1 {
		t.Fatalf("%d snapshot rows for Fixture|f-1, want 1", len(snapRows))
	}
	snap := snapRows[0]
	compareRow(t, "snapshot", snap, fixtureRow(t, snaps, "Fixture|f-1", -1), "seq_nr", "write_timestamp", "snapshot")
	if seq, ms := rowInt(t, snap, "seq_nr"), rowInt(t, snap, "write_timestamp"); seq != 9 || ms < before.UnixMilli() || ms > after.UnixMilli() {
		t.Errorf("snapshot at %d written at %d ms, want 9 between %d and %d", seq, ms, before.UnixMilli(), after.UnixMilli())
	}
	state, err := reg.Deserialize(sqlValue(t, "bytea", snap.values["snapshot"]).([]byte), serialization.JSONID, "anchor.Fixture$State")
	if st, ok := state.(fixtureState); err != nil || !ok || st.Count != 9 || st.Name != "gamma" {
		t.Errorf("snapshot state %+v, %v; want count 9, name gamma", state, err)
	}
}

// TestR2DBCTimestampRule: db_timestamp grows per id as the plugin's
// does: from the transaction's time, 1µs per event, and never earlier than
// the previous row's (an event or a delete marker) plus 1µs. Where the
// previous row is later, the write's rows stay 1µs apart and move less
// than 1µs per row of the call past it, so as to share no timestamp with
// another row of the call (see TestWriteSpacesRowsApart).
func TestR2DBCTimestampRule(t *testing.T) {
	t.Parallel()
	s := open(t, postgres.WithLayout(postgres.LayoutR2DBC))
	conn := connect(t)
	ctx := context.Background()
	future := time.Now().Add(time.Hour).Truncate(time.Microsecond).UTC()
	cases := []struct {
		name     string
		prevSeq  int64 // a row stored before, at future (0: none)
		marker   bool  // that row is a delete marker
		from, to int64 // the atomic write
		// the earliest db_timestamp of each event; it may be later by
		// less than the rows of the call, in µs
		want func(base time.Time, seq int64) time.Time
	}{
		{"after a later event", 1, false, 2, 4, func(_ time.Time, seq int64) time.Time {
			return future.Add(time.Duration(seq-1) * time.Microsecond)
		}},
		{"after a later delete marker", 5, true, 6, 6, func(_ time.Time, seq int64) time.Time {
			return future.Add(time.Duration(seq-5) * time.Microsecond)
		}},
		{"a new id", 0, false, 1, 3, func(base time.Time, seq int64) time.Time {
			return base.Add(time.Duration(seq-1) * time.Microsecond)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pid := "Mono|" + strconv.Itoa(int(c.from)) + "-" + c.name
			if c.prevSeq > 0 {
				if _, err := conn.Exec(ctx, `INSERT INTO `+s.Schema()+`.event_journal
					(slice, entity_type, persistence_id, seq_nr, db_timestamp, event_ser_id, event_ser_manifest, event_payload, deleted, writer, adapter_manifest)
					VALUES ($1, 'Mono', $2, $3, $4, 0, '', ''::bytea, $5, '', '')`, annals.Slice(pid), pid, c.prevSeq, future, c.marker); err != nil {
					t.Fatal(err)
				}
			}
			w := journal.AtomicWrite{PersistenceID: pid}
			for seq := c.from; seq <= c.to; seq++ {
				w.Events = append(w.Events, journal.Repr{PersistenceID: pid, SequenceNr: seq, Payload: []byte("{}"), SerializerID: 31, Manifest: "m", WriterID: "w"})
			}
			if res, err := s.Journal().Write(ctx, []journal.AtomicWrite{w}); err != nil || res != nil {
				t.Fatal(res, err)
			}
			rows := dumpRows(t, conn, s.Schema(), "event_journal", `persistence_id = $1 AND seq_nr >= $2`, pid, c.from)
			if len(rows) != int(c.to-c.from+1) {
				t.Fatalf("%d rows, want %d", len(rows), c.to-c.from+1)
			}
			// dumpRows orders by persistence id only: index by seq.
			ts := map[int64]time.Time{}
			for _, r := range rows {
				ts[rowInt(t, r, "seq_nr")] = rowTime(t, r, "db_timestamp")
			}
			base, slack := ts[c.from], time.Duration(c.to-c.from+1)*time.Microsecond
			for seq := c.from; seq <= c.to; seq++ {
				if want := c.want(base, seq); ts[seq].Before(want) || !ts[seq].Before(want.Add(slack)) {
					t.Errorf("db_timestamp of #%d = %v, want %v or less than %v later", seq, ts[seq], want, slack)
				}
				if seq > c.from && ts[seq].Sub(ts[seq-1]) != time.Microsecond {
					t.Errorf("db_timestamp of #%d = %v, want 1µs after #%d's %v", seq, ts[seq], seq-1, ts[seq-1])
				}
			}
		})
	}
}

// TestR2DBCOneSnapshotPerID: on the r2dbc layout a save replaces the id's
// snapshot whatever its sequence number (the plugin's upsert), criteria
// select or skip that one snapshot at millisecond precision, and deletes
// remove it only when it matches.
func TestR2DBCOneSnapshotPerID(t *testing.T) {
	t.Parallel()
	s := open(t, postgres.WithLayout(postgres.LayoutR2DBC))
	ctx := context.Background()
	base := time.Date(2026, 11, 22, 13, 54, 38, 418648000, time.UTC)
	type step struct {
		save, delete   int64 // a save or a Delete by metadata at this sequence number
		deleteMatching *snapshot.Criteria
		load           snapshot.Criteria
		want           int64 // the sequence number loaded, 0 for none
	}
	latest := snapshot.Latest()
	cases := []struct {
		name  string
		steps []step
	}{
		{"a younger save replaces", []step{{save: 3, load: latest, want: 3}, {save: 5, load: latest, want: 5}, {load: snapshot.Criteria{MaxSequenceNr: 4}, want: 0}}},
		{"an older save replaces too", []step{{save: 5, load: latest, want: 5}, {save: 3, load: latest, want: 3}}},
		{"delete of another sequence number keeps", []step{{save: 5}, {delete: 4, load: latest, want: 5}, {delete: 5, load: latest, want: 0}}},
		{"delete matching", []step{{save: 5}, {deleteMatching: &snapshot.Criteria{MaxSequenceNr: 4}, load: latest, want: 5}, {deleteMatching: &latest, load: latest, want: 0}}},
		{"time bounds at the millisecond", []step{{save: 2, load: snapshot.Criteria{MaxSequenceNr: 9, MaxTimestamp: base.Add(2 * time.Second).Truncate(time.Millisecond)}, want: 2},
			{load: snapshot.Criteria{MaxSequenceNr: 9, MaxTimestamp: base.Add(2*time.Second - time.Millisecond)}, want: 0}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pid := "Snap|" + strings.ReplaceAll(c.name, " ", "-")
			for i, st := range c.steps {
				md := snapshot.Metadata{PersistenceID: pid, SequenceNr: st.save, Timestamp: base.Add(time.Duration(st.save) * time.Second)}
				switch {
				case st.save > 0:
					if err := s.Snapshots().Save(ctx, snapshot.Snapshot{Metadata: md, Payload: []byte("s"), SerializerID: 31, Manifest: "m"}); err != nil {
						t.Fatal(err)
					}
				case st.delete > 0:
					if err := s.Snapshots().Delete(ctx, snapshot.Metadata{PersistenceID: pid, SequenceNr: st.delete}); err != nil {
						t.Fatal(err)
					}
				case st.deleteMatching != nil:
					if err := s.Snapshots().DeleteMatching(ctx, pid, *st.deleteMatching); err != nil {
						t.Fatal(err)
					}
				}
				if st.load == (snapshot.Criteria{}) {
					continue
				}
				got, ok, err := s.Snapshots().Load(ctx, pid, st.load)
				if err != nil {
					t.Fatal(err)
				}
				if seq := map[bool]int64{true: got.Metadata.SequenceNr}[ok]; seq != st.want {
					t.Errorf("step %d: Load(%+v) found %d, want %d", i, st.load, seq, st.want)
				}
				if ok && !got.Metadata.Timestamp.Equal(base.Add(time.Duration(got.Metadata.SequenceNr)*time.Second).Truncate(time.Millisecond)) {
					t.Errorf("step %d: timestamp %v, want the saved one to the millisecond", i, got.Metadata.Timestamp)
				}
			}
		})
	}
}

// TestR2DBCDeleteMarkers: DeleteTo leaves the plugin's marker rows: one at
// to (lowered to the highest number), none for an id without rows or a
// range already deleted, and a later delete replaces the earlier marker.
func TestR2DBCDeleteMarkers(t *testing.T) {
	t.Parallel()
	s := open(t, postgres.WithLayout(postgres.LayoutR2DBC))
	conn := connect(t)
	ctx := context.Background()
	cases := []struct {
		name    string
		written int64   // events 1..written
		deletes []int64 // DeleteTo calls in order
		rows    string  // the id's rows after: seq (m for a marker), in order
		highest int64
	}{
		{"a prefix", 5, []int64{2}, "2m 3 4 5", 5},
		{"all", 5, []int64{5}, "5m", 5},
		{"beyond the highest", 5, []int64{9}, "5m", 5},
		{"to max", 5, []int64{math.MaxInt64}, "5m", 5},
		{"twice the same", 5, []int64{2, 2}, "2m 3 4 5", 5},
		{"a smaller one after", 5, []int64{3, 1}, "3m 4 5", 5},
		{"a larger one after", 5, []int64{2, 4}, "4m 5", 5},
		{"an unknown id", 0, []int64{3}, "", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pid := "Del|" + strings.ReplaceAll(c.name, " ", "-")
			if c.written > 0 {
				w := journal.AtomicWrite{PersistenceID: pid}
				for seq := int64(1); seq <= c.written; seq++ {
					w.Events = append(w.Events, journal.Repr{PersistenceID: pid, SequenceNr: seq, Payload: []byte("{}"), SerializerID: 31, Manifest: "m", WriterID: "w"})
				}
				if res, err := s.Journal().Write(ctx, []journal.AtomicWrite{w}); err != nil || res != nil {
					t.Fatal(res, err)
				}
			}
			for _, to := range c.deletes {
				if err := s.Journal().DeleteTo(ctx, pid, to); err != nil {
					t.Fatal(err)
				}
			}
			rows, err := conn.Query(ctx, `SELECT seq_nr::text || CASE WHEN deleted THEN 'm' ELSE '' END FROM `+s.Schema()+`.event_journal WHERE persistence_id = $1 ORDER BY seq_nr`, pid)
			if err != nil {
				t.Fatal(err)
			}
			got, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, " ") != c.rows {
				t.Errorf("rows %q, want %q", strings.Join(got, " "), c.rows)
			}
			if n, err := s.Journal().HighestSequenceNr(ctx, pid, 0); err != nil || n != c.highest {
				t.Errorf("highest %d, %v; want %d", n, err, c.highest)
			}
		})
	}
}
