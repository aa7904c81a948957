package postgres_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/recovery"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/postgres"
)

// jsonRow is one row of a fixture .jsonl file (or one read back in the
// same form): its keys in column order and its values as JSON decodes
// them (numbers as json.Number).
type jsonRow struct {
	keys   []string
	values map[string]any
}

// decodeRow decodes one JSON object, keeping its key order.
func decodeRow(t testing.TB, line []byte) jsonRow {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	r := jsonRow{values: map[string]any{}}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("row %q: %v", line, err)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		key := tok.(string)
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		r.keys, r.values[key] = append(r.keys, key), v
	}
	return r
}

// readRows reads a fixture .jsonl file.
func readRows(t testing.TB, name string) []jsonRow {
	t.Helper()
	data, err := os.ReadFile(fixturePath(t, name))
	if err != nil {
		t.Fatal(err)
	}
	var rows []jsonRow
	for line := range strings.Lines(string(data)) {
		if strings.TrimSpace(line) != "" {
			rows = append(rows, decodeRow(t, []byte(line)))
		}
	}
	return rows
}

// fixtureTime is the fixtures' timestamptz form.
const fixtureTime = "2006-01-02T15:04:05.000000Z"

// sqlValue turns a fixture value into the value of a column of type typ.
func sqlValue(t testing.TB, typ string, v any) any {
	t.Helper()
	if v == nil {
		return nil
	}
	switch {
	case typ == "integer" || typ == "bigint":
		n, err := v.(json.Number).Int64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	case typ == "bytea":
		b, err := hex.DecodeString(v.(string))
		if err != nil {
			t.Fatal(err)
		}
		return b
	case typ == "timestamp with time zone":
		ts, err := time.Parse(fixtureTime, v.(string))
		if err != nil {
			t.Fatal(err)
		}
		return ts
	case typ == "text[]":
		var out []string
		for _, s := range v.([]any) {
			out = append(out, s.(string))
		}
		return out
	}
	return v // strings and booleans
}

// loadFixture inserts every row of a fixture file into the schema's table
// with plain INSERTs, as the plugin stored them.
func loadFixture(t testing.TB, conn *pgx.Conn, schema, table, file string) {
	t.Helper()
	def := readSchemaFixture(t, table)
	types := map[string]string{}
	for _, c := range def.columns {
		types[c.name] = c.typ
	}
	for _, r := range readRows(t, file) {
		args := make([]any, len(r.keys))
		params := make([]string, len(r.keys))
		for i, k := range r.keys {
			args[i], params[i] = sqlValue(t, types[k], r.values[k]), "$"+strconv.Itoa(i+1)
		}
		cols := make([]string, len(r.keys))
		for i, k := range r.keys {
			cols[i] = pgx.Identifier{k}.Sanitize()
		}
		sql := `INSERT INTO ` + pgx.Identifier{schema, table}.Sanitize() + ` (` + strings.Join(cols, ", ") + `) VALUES (` + strings.Join(params, ", ") + `)`
		if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
			t.Fatalf("insert fixture row %v: %v", r.values, err)
		}
	}
}

// dumpRows reads rows of a table in the fixtures' JSON form (the
// README's json_build_object with encode(…, 'hex'), to_char(… AT TIME
// ZONE 'UTC') and to_json(array)), in the columns' order.
func dumpRows(t testing.TB, conn *pgx.Conn, schema, table, where string, args ...any) []jsonRow {
	t.Helper()
	var fields []string
	for _, c := range readSchemaFixture(t, table).columns {
		name := pgx.Identifier{c.name}.Sanitize()
		expr := name
		switch c.typ {
		case "bytea":
			expr = `encode(` + name + `, 'hex')`
		case "timestamp with time zone":
			expr = `to_char(` + name + ` AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`
		case "text[]":
			expr = `to_json(` + name + `)`
		}
		fields = append(fields, `'`+c.name+`', `+expr)
	}
	rows, err := conn.Query(context.Background(), `SELECT json_build_object(`+strings.Join(fields, ", ")+`)::text FROM `+
		pgx.Identifier{schema, table}.Sanitize()+` WHERE `+where+` ORDER BY persistence_id`, args...)
	if err != nil {
		t.Fatal(err)
	}
	texts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var out []jsonRow
	for _, s := range texts {
		out = append(out, decodeRow(t, []byte(s)))
	}
	return out
}

// kindOf names the JSON kind of a decoded value.
func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case json.Number:
		return "number"
	case string:
		return "string"
	case bool:
		return "boolean"
	case []any:
		return "array"
	}
	return fmt.Sprintf("%T", v)
}

// fixtureRow returns the fixture row of (persistence id, seq) in rows;
// seq < 0 matches any.
func fixtureRow(t testing.TB, rows []jsonRow, pid string, seq int64) jsonRow {
	t.Helper()
	for _, r := range rows {
		n, _ := r.values["seq_nr"].(json.Number).Int64()
		if r.values["persistence_id"] == pid && (seq < 0 || n == seq) {
			return r
		}
	}
	t.Fatalf("no fixture row %s #%d", pid, seq)
	return jsonRow{}
}

// The Java records of the fixtures, as Go types bound to their class
// names.
type (
	fixtureEvent interface{ isFixtureEvent() }
	fixtureAdded struct {
		N    int    `json:"n"`
		Text string `json:"text"`
	}
	fixtureRenamed struct {
		Name string `json:"name"`
	}
	fixtureState struct {
		Count int      `json:"count"`
		Name  string   `json:"name"`
		Texts []string `json:"texts"`
	}
)

func (fixtureAdded) isFixtureEvent()   {}
func (fixtureRenamed) isFixtureEvent() {}

// String is the Java record's toString, as envelopes-read-back.txt shows.
func (a fixtureAdded) String() string { return fmt.Sprintf("Added[n=%d, text=%s]", a.N, a.Text) }

// String is the Java record's toString.
func (r fixtureRenamed) String() string { return fmt.Sprintf("Renamed[name=%s]", r.Name) }

// fixtureRegistry binds the fixture types to the JVM class names.
func fixtureRegistry(t testing.TB) *serialization.Registry {
	t.Helper()
	r := serialization.NewRegistry()
	for _, err := range []error{
		serialization.RegisterJSON[fixtureAdded](r, "anchor.Fixture$Added"),
		serialization.RegisterJSON[fixtureRenamed](r, "anchor.Fixture$Renamed"),
		serialization.RegisterJSON[fixtureState](r, "anchor.Fixture$State"),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// Commands of the fixture entity.
type (
	fixtureCommand interface{ isFixtureCommand() }
	fixtureGet     struct{ Reply entity.ReplyTo[fixtureState] }
	fixtureAdd     struct {
		N     int
		Text  string
		Reply entity.ReplyTo[fixtureState]
	}
	fixtureRename struct {
		Name  string
		Reply entity.ReplyTo[fixtureState]
	}
)

func (fixtureGet) isFixtureCommand()    {}
func (fixtureAdd) isFixtureCommand()    {}
func (fixtureRename) isFixtureCommand() {}

// fixtureBehavior is the fixtures' Java entity in Go: count counts the
// events, Added appends its text, Renamed sets the name; odd Added events
// are tagged fixture-odd and Renamed fixture-renamed and fixture-all; a
// snapshot after sequence number 9.
func fixtureBehavior() entity.Behavior[fixtureCommand, fixtureEvent, fixtureState] {
	var fx entity.Effects[fixtureEvent, fixtureState]
	reply := func(r entity.ReplyTo[fixtureState]) func(fixtureState) { return func(s fixtureState) { r.Send(s) } }
	return entity.Behavior[fixtureCommand, fixtureEvent, fixtureState]{
		EntityType: "Fixture",
		Command: func(s fixtureState, c fixtureCommand) entity.ReplyEffect[fixtureEvent, fixtureState] {
			switch c := c.(type) {
			case fixtureGet:
				return fx.Reply(reply(c.Reply))
			case fixtureAdd:
				return fx.Persist(fixtureAdded{N: c.N, Text: c.Text}).ThenReply(reply(c.Reply))
			case fixtureRename:
				return fx.Persist(fixtureRenamed{Name: c.Name}).ThenReply(reply(c.Reply))
			}
			return fx.Unhandled()
		},
		Event: func(s fixtureState, e fixtureEvent) fixtureState {
			s.Count++
			switch e := e.(type) {
			case fixtureAdded:
				s.Texts = append(slices.Clone(s.Texts), e.Text)
			case fixtureRenamed:
				s.Name = e.Name
			}
			return s
		},
		Tagger: func(e fixtureEvent) []string {
			switch e := e.(type) {
			case fixtureAdded:
				if e.N%2 == 1 {
					return []string{"fixture-odd"}
				}
			case fixtureRenamed:
				return []string{"fixture-renamed", "fixture-all"}
			}
			return nil
		},
		Snapshots: entity.SnapshotPolicy[fixtureEvent, fixtureState]{
			When: func(_ fixtureState, _ fixtureEvent, seq int64) bool { return seq == 9 },
		},
	}
}

// fixtureStore opens an r2dbc-layout store in a schema of its own and
// loads every row of the journal and snapshot fixtures into it.
func fixtureStore(t *testing.T) (*postgres.Store, *pgx.Conn) {
	t.Helper()
	fixturePath(t, "event_journal.jsonl")
	s := open(t, postgres.WithLayout(postgres.LayoutR2DBC))
	conn := connect(t)
	loadFixture(t, conn, s.Schema(), "event_journal", "event_journal.jsonl")
	loadFixture(t, conn, s.Schema(), "snapshot", "snapshot.jsonl")
	return s, conn
}

// TestR2DBCReadsPekkoRows: the rows a Pekko R2DBC service wrote, loaded
// into an r2dbc-layout schema, read through every Annals API as Pekko
// reads them: delete markers skipped and counted in the highest number,
// metadata kept, tags as sets, timestamps from db_timestamp, one snapshot
// per id, events by slices in Pekko's order.
func TestR2DBCReadsPekkoRows(t *testing.T) {
	t.Parallel()
	s, _ := fixtureStore(t)
	ctx := context.Background()
	reg := fixtureRegistry(t)
	rows := readRows(t, "event_journal.jsonl")

	t.Run("Replay", func(t *testing.T) {
		for _, c := range []struct {
			pid  string
			want []int64
		}{
			{"Fixture|f-1", []int64{1, 2, 3, 4, 5, 6, 7}},
			{"Fixture|f-2", []int64{3}},
			{"Fixture|ünï-ç", []int64{1, 2}},
			{"FixtureR|r-1|A", []int64{1, 2}},
			{"Fixture|none", nil},
		} {
			var got []int64
			for e, err := range s.Journal().Replay(ctx, c.pid, 1, math.MaxInt64, math.MaxInt64) {
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, e.SequenceNr)
				want := fixtureRow(t, rows, c.pid, e.SequenceNr).values
				payload, _ := hex.DecodeString(want["event_payload"].(string))
				ts, _ := time.Parse(fixtureTime, want["db_timestamp"].(string))
				serID, _ := want["event_ser_id"].(json.Number).Int64()
				var tags []string
				if want["tags"] != nil {
					tags = sqlValue(t, "text[]", want["tags"]).([]string)
				}
				var meta []byte
				if want["meta_payload"] != nil {
					meta, _ = hex.DecodeString(want["meta_payload"].(string))
				}
				if !bytes.Equal(e.Payload, payload) || int64(e.SerializerID) != serID || e.Manifest != want["event_ser_manifest"] ||
					e.WriterID != want["writer"] || !e.Timestamp.Equal(ts) || e.Timestamp.Location() != time.UTC ||
					!sameSet(e.Tags, tags) || !bytes.Equal(e.Metadata, meta) || e.Slice != annals.Slice(c.pid) || e.EntityType != want["entity_type"] {
					t.Errorf("%s #%d replayed as %+v, want the fixture row %v", c.pid, e.SequenceNr, e, want)
				}
				if _, err := reg.DeserializeRepr(e); err != nil {
					t.Errorf("%s #%d does not decode: %v", c.pid, e.SequenceNr, err)
				}
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("replay of %s yielded %v, want %v", c.pid, got, c.want)
			}
		}
	})

	t.Run("HighestSequenceNr", func(t *testing.T) {
		for pid, want := range map[string]int64{"Fixture|f-1": 7, "Fixture|f-2": 3, "Fixture|ünï-ç": 2, "FixtureR|r-1|A": 2, "Fixture|none": 0} {
			if n, err := s.Journal().HighestSequenceNr(ctx, pid, 0); err != nil || n != want {
				t.Errorf("HighestSequenceNr(%s) = %d, %v; want %d", pid, n, err, want)
			}
		}
	})

	t.Run("Snapshots", func(t *testing.T) {
		for _, c := range []struct {
			pid       string
			seq, ms   int64
			count     int
			crit      snapshot.Criteria
			wantFound bool
		}{
			{"Fixture|f-1", 7, 1795355699284, 7, snapshot.Latest(), true},
			{"Fixture|f-2", 3, 1795355702377, 3, snapshot.Latest(), true},
			{"FixtureR|r-1|A", 2, 1795355704007, 2, snapshot.Latest(), true},
			{"Fixture|f-1", 0, 0, 0, snapshot.Criteria{MaxSequenceNr: 6}, false}, // the seq-5 snapshot was overwritten
			{"Fixture|ünï-ç", 0, 0, 0, snapshot.Latest(), false},
		} {
			snap, ok, err := s.Snapshots().Load(ctx, c.pid, c.crit)
			if err != nil || ok != c.wantFound {
				t.Fatalf("Load(%s, %+v) = %v, %v; want found=%v", c.pid, c.crit, ok, err, c.wantFound)
			}
			if !ok {
				continue
			}
			v, err := reg.Deserialize(snap.Payload, snap.SerializerID, snap.Manifest)
			if err != nil || snap.Metadata.SequenceNr != c.seq || snap.Metadata.Timestamp.UnixMilli() != c.ms || v.(fixtureState).Count != c.count {
				t.Errorf("snapshot of %s = %+v (%v, %v), want seq %d at %d ms, count %d", c.pid, snap.Metadata, v, err, c.seq, c.ms, c.count)
			}
		}
	})

	t.Run("ReadRecovery", func(t *testing.T) {
		latest := snapshot.Latest()
		for _, c := range []struct {
			pid           string
			highest, snap int64
			events        []int64
		}{
			{"Fixture|f-1", 7, 7, nil},
			{"Fixture|f-2", 3, 3, nil},
			{"Fixture|ünï-ç", 2, 0, []int64{1, 2}},
		} {
			res, err := s.Journal().ReadRecovery(ctx, recovery.Request{PersistenceID: c.pid, Snapshot: &latest})
			if err != nil {
				t.Fatal(err)
			}
			var events []int64
			for _, e := range res.Events {
				events = append(events, e.SequenceNr)
			}
			if res.Highest != c.highest || res.Snapshot.Metadata.SequenceNr != c.snap || res.HasSnapshot != (c.snap > 0) || !slices.Equal(events, c.events) {
				t.Errorf("ReadRecovery(%s) = highest %d, snapshot %d, events %v; want %d, %d, %v", c.pid, res.Highest, res.Snapshot.Metadata.SequenceNr, events, c.highest, c.snap, c.events)
			}
		}
	})

	t.Run("EntityRecovery", func(t *testing.T) {
		h, err := entity.NewHost(fixtureBehavior(), entity.HostConfig{Journal: s.Journal(), Snapshots: s.Snapshots(), Registry: reg})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Shutdown(context.Background())
		for id, want := range map[string]fixtureState{
			"f-1":   {Count: 7, Name: "beta", Texts: []string{"one", "two", "four", "five", "six"}}, // from the seq-7 snapshot
			"f-2":   {Count: 3, Name: "", Texts: []string{"f2-1", "f2-2", "f2-3"}},                  // from the snapshot: events 1 and 2 are deleted
			"ünï-ç": {Count: 2, Texts: []string{"ünï-ç 日本 😀", "second ß"}},                          // from the events
		} {
			got, err := entity.Ask(ctx, h, id, func(r entity.ReplyTo[fixtureState]) fixtureCommand { return fixtureGet{Reply: r} })
			if err != nil || got.Count != want.Count || got.Name != want.Name || !slices.Equal(got.Texts, want.Texts) {
				t.Errorf("Fixture|%s recovered as %+v, %v; want %+v", id, got, err, want)
			}
		}
	})

	t.Run("EventsBySlices", func(t *testing.T) {
		want := readEnvelopes(t)
		var got []string
		for _, et := range []string{"Fixture", "FixtureR"} {
			for env, err := range s.Queries().CurrentEventsBySlices(ctx, et, 0, 1023, query.NoOffset()) {
				if err != nil {
					t.Fatal(err)
				}
				v, err := reg.Deserialize(env.Payload, env.SerializerID, env.Manifest)
				if err != nil {
					t.Fatal(err)
				}
				meta := "None"
				if env.Metadata != nil {
					meta = "Some"
				}
				got = append(got, fmt.Sprintf("ENVELOPE %s seq=%d slice=%d event=%v meta=%s ts=%d", env.PersistenceID, env.SequenceNr, env.Slice, v, meta, env.Timestamp.UnixMilli()))
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("events by slices:\n%s\nwant (envelopes-read-back.txt):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})

	t.Run("EventsByPersistenceID", func(t *testing.T) {
		for _, c := range []struct {
			pid      string
			from, to int64
			want     []int64
		}{
			{"Fixture|f-2", 1, math.MaxInt64, []int64{3}},
			{"Fixture|f-2", 2, 2, nil},
			{"Fixture|f-1", 3, 5, []int64{3, 4, 5}},
		} {
			var got []int64
			for env, err := range s.Queries().CurrentEventsByPersistenceID(ctx, c.pid, c.from, c.to) {
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, env.SequenceNr)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("events of %s from %d to %d: %v, want %v", c.pid, c.from, c.to, got, c.want)
			}
		}
	})

	t.Run("PersistenceIDs", func(t *testing.T) {
		for et, want := range map[string][]string{
			"":         {"Fixture|f-1", "Fixture|f-2", "Fixture|ünï-ç", "FixtureR|r-1|A"},
			"Fixture":  {"Fixture|f-1", "Fixture|f-2", "Fixture|ünï-ç"},
			"FixtureR": {"FixtureR|r-1|A"},
		} {
			got, err := s.Queries().CurrentPersistenceIDs(ctx, et, "", 0)
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("persistence ids of %q: %v, want %v", et, got, want)
			}
		}
	})

	t.Run("EventsByTag", func(t *testing.T) {
		var got []string
		for env, err := range s.Queries().CurrentEventsByTag(ctx, "fixture-odd", query.NoOffset()) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, fmt.Sprintf("%s#%d", env.PersistenceID, env.SequenceNr))
		}
		want := []string{"Fixture|f-1#1", "Fixture|f-1#5", "Fixture|f-2#3", "Fixture|ünï-ç#1", "FixtureR|r-1|A#1"}
		if !slices.Equal(got, want) {
			t.Errorf("events tagged fixture-odd: %v, want %v", got, want)
		}
	})
}

// readEnvelopes reads the ENVELOPE lines of envelopes-read-back.txt, with
// the metadata's value reduced to Some or None.
func readEnvelopes(t testing.TB) []string {
	t.Helper()
	f, err := os.Open(fixturePath(t, "envelopes-read-back.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "ENVELOPE ") {
			continue
		}
		if i, j := strings.Index(line, " meta=Some("), strings.LastIndex(line, " ts="); i >= 0 && j > i {
			line = line[:i] + " meta=Some" + line[j:]
		}
		out = append(out, line)
	}
	return out
}

// sameSet reports whether a and b hold the same strings, in any order.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
