package main

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/offsets"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
	"github.com/annals-go/annals/store/sqlite"

	_ "github.com/mattn/go-sqlite3" // olderSchema and the broken store write with the raw driver
)

// The shared tests run once per kind of store, as subtests named after it
// (TestIDs/sqlite, TestIDs/postgres): SQLite files in a temporary directory,
// and schemas of their own on the PostgreSQL test server (pgtest.Schema,
// dropped at the end; skipped when no server answers, failed when
// ANNALS_TEST_REQUIRE=postgres).

// storeKind is a kind of store the commands are tested on.
type storeKind struct {
	name string
	// newStore reserves a store that does not exist yet.
	newStore func(t *testing.T) testStore
}

var (
	sqliteKind = storeKind{"sqlite", func(t *testing.T) testStore {
		path := filepath.Join(t.TempDir(), "annals.db")
		return testStore{kind: "sqlite", url: "sqlite:" + path, version: sqlite.SchemaVersion, path: path}
	}}
	postgresKind = storeKind{"postgres", func(t *testing.T) testStore {
		url, schema := pgtest.Schema(t)
		return testStore{kind: "postgres", url: url, version: postgres.SchemaVersion, schema: schema}
	}}
	storeKinds = []storeKind{sqliteKind, postgresKind}
)

// forEachStore runs test as a parallel subtest per kind of store.
func forEachStore(t *testing.T, test func(t *testing.T, k storeKind)) {
	t.Helper()
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			test(t, k)
		})
	}
}

// forEachFixture runs test as a parallel subtest per kind of store, on a
// fixture of that kind.
func forEachFixture(t *testing.T, test func(t *testing.T, st testStore)) {
	t.Helper()
	forEachStore(t, func(t *testing.T, k storeKind) { test(t, fixture(t, k)) })
}

// testStore is one store of a test.
type testStore struct {
	kind    string // "sqlite" or "postgres"
	url     string
	version int    // the schema version annals init creates
	path    string // SQLite: the database file
	schema  string // PostgreSQL: the schema
}

func (s testStore) sqlite() bool { return s.kind == "sqlite" }

// env sets the store as ANNALS_STORE.
func (s testStore) env() []string { return []string{"ANNALS_STORE=" + s.url} }

// where is how the commands name the store in their output.
func (s testStore) where() string {
	if s.sqlite() {
		return s.path
	}
	return "schema " + s.schema
}

// table is how the schema's SQL names a table.
func (s testStore) table(name string) string {
	if s.sqlite() {
		return name
	}
	return pgx.Identifier{s.schema}.Sanitize() + "." + name
}

// alias is another URL of the same store.
func (s testStore) alias() string {
	if s.sqlite() {
		return "sqlite:" + filepath.Dir(s.path) + "/./" + filepath.Base(s.path)
	}
	return s.url
}

// missing is what the commands say of the store when it does not exist.
func (s testStore) missing() []string {
	if s.sqlite() {
		return []string{"no database at " + s.path, "annals init --store " + s.url}
	}
	return []string{"schema missing", "annals init"}
}

// exists reports whether the store was created: the file, the schema.
func (s testStore) exists(t *testing.T) bool {
	t.Helper()
	if s.sqlite() {
		_, err := os.Stat(s.path)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	return pgSchemaExists(t, s.schema)
}

// watch returns a function that fails the test if the store changed since
// watch: for SQLite, the file's sha256; for PostgreSQL, the row counts of
// the schema's tables, and what the store holds.
func (s testStore) watch(t *testing.T) func(what string) {
	t.Helper()
	if s.sqlite() {
		sum := fileSum(t, s.path)
		return func(what string) {
			t.Helper()
			if fileSum(t, s.path) != sum {
				t.Fatalf("%s changed the file", what)
			}
		}
	}
	before, rows := contents(t, s.url), pgRows(t, s.schema)
	return func(what string) {
		t.Helper()
		equalContents(t, what, before, contents(t, s.url))
		if got := pgRows(t, s.schema); !reflect.DeepEqual(got, rows) {
			t.Fatalf("%s changed rows: %v, then %v", what, rows, got)
		}
	}
}

// withStore opens the existing store at url through the command's own mux
// for f, and closes it (an SQLite file is then whole, without a write-ahead
// log).
func withStore(t *testing.T, url string, f func(s *stores.Store)) {
	t.Helper()
	s, err := stores.New().Open(context.Background(), url, stores.Existing)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}()
	f(s)
}

// The fixture's timestamps: event n of an id is written at base + n s.
var base = time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)

// fixture creates a store of kind k with annals init and writes, through
// the store API:
//   - Account|a-1: events 1..5, JSON {"amount":n}, manifest Deposited,
//     tagged "bank" (odd numbers also "odd"); snapshots at 3 and 5.
//   - Account|a-2: events 1..3, raw bytes: 2 binary with metadata; 3 of
//     serializer 33 (JSON) but not JSON ("text 3").
//   - Order|o-1: events 1..2, JSON.
//   - Cart|c-1: events 1..4, all deleted (highest 4, no events).
//   - Cart|c-2: events 1..5, deleted up to 2.
//   - projections: balances/0-511 at the offset of the 6th Account event
//     by slices (on SQLite {"seq":6}, the 6th event stored);
//     balances/512-1023 paused, no offset.
//
// The store is closed when fixture returns.
func fixture(t *testing.T, k storeKind) testStore {
	t.Helper()
	st := k.newStore(t)
	cli(t, nil, "init", "--store", st.url).want(t, 0, []string{"created schema version"}, nil)
	withStore(t, st.url, func(s *stores.Store) {
		ctx := context.Background()
		write := func(pid string, from, to int64, mk func(seq int64) journal.Repr) {
			w := journal.AtomicWrite{PersistenceID: pid}
			for seq := from; seq <= to; seq++ {
				e := mk(seq)
				e.PersistenceID, e.SequenceNr, e.WriterID = pid, seq, "writer-1"
				e.Timestamp = base.Add(time.Duration(seq) * time.Second)
				w.Events = append(w.Events, e)
			}
			if res, err := s.Journal.Write(ctx, []journal.AtomicWrite{w}); err != nil || res != nil {
				t.Fatal(res, err)
			}
		}
		jsonEvent := func(seq int64) journal.Repr {
			e := journal.Repr{Payload: fmt.Appendf(nil, `{"amount": %d}`, seq), SerializerID: serialization.JSONID, Manifest: "Deposited", Tags: []string{"bank"}}
			if seq%2 == 1 {
				e.Tags = append(e.Tags, "odd")
			}
			return e
		}
		write("Account|a-1", 1, 5, jsonEvent)
		write("Account|a-2", 1, 3, func(seq int64) journal.Repr {
			switch seq {
			case 2:
				return journal.Repr{Payload: []byte{0, 1, 2, 0xff}, SerializerID: serialization.BytesID, Metadata: []byte("meta")}
			case 3:
				return journal.Repr{Payload: []byte("text 3"), SerializerID: serialization.JSONID}
			}
			return journal.Repr{Payload: fmt.Appendf(nil, "text %d", seq), SerializerID: serialization.BytesID}
		})
		write("Order|o-1", 1, 2, jsonEvent)
		write("Cart|c-1", 1, 4, jsonEvent)
		write("Cart|c-2", 1, 5, jsonEvent)
		for _, d := range []struct {
			pid string
			to  int64
		}{{"Cart|c-1", 4}, {"Cart|c-2", 2}} {
			if err := s.Journal.DeleteTo(ctx, d.pid, d.to); err != nil {
				t.Fatal(err)
			}
		}
		for _, seq := range []int64{3, 5} {
			snap := snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: "Account|a-1", SequenceNr: seq, Timestamp: base.Add(time.Duration(seq) * time.Second)},
				Payload: fmt.Appendf(nil, `{"balance": %d}`, seq*10), SerializerID: serialization.JSONID, Manifest: "Account"}
			if err := s.Snapshots.Save(ctx, snap); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Offsets.SaveOffset(ctx, offsets.ID{Name: "balances", Key: "0-511"}, accountEvents(t, s)[5].Offset); err != nil {
			t.Fatal(err)
		}
		if err := s.Offsets.SetPaused(ctx, offsets.ID{Name: "balances", Key: "512-1023"}, true); err != nil {
			t.Fatal(err)
		}
	})
	return st
}

// accountEvents returns the fixture's Account events, all slices, in the
// order of the store's query by slices.
func accountEvents(t *testing.T, s *stores.Store) []query.Envelope {
	t.Helper()
	var envs []query.Envelope
	for e, err := range s.Queries.(query.EventsBySlicesQuery).CurrentEventsBySlices(context.Background(), "Account", 0, 1023, query.NoOffset()) {
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, e)
	}
	if len(envs) != 8 {
		t.Fatalf("%d Account events, want 8", len(envs))
	}
	return envs
}

// storeContents is everything a store holds for its ids, ordering aside.
type storeContents struct {
	highest   map[string]int64
	events    map[string][]journal.Repr
	snapshots map[string][]snapshot.Snapshot
}

// contents reads everything the store at url holds for its ids through the
// store APIs: highest numbers (ids whose events were all deleted included),
// events (ordering aside; timestamps in UTC, no tags as nil), snapshots.
func contents(t *testing.T, url string) storeContents {
	t.Helper()
	c := storeContents{map[string]int64{}, map[string][]journal.Repr{}, map[string][]snapshot.Snapshot{}}
	withStore(t, url, func(s *stores.Store) {
		ctx := context.Background()
		ids, err := s.Queries.(query.PersistenceIDsQuery).CurrentPersistenceIDs(ctx, "", "", 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, pid := range ids {
			if c.highest[pid], err = s.Journal.HighestSequenceNr(ctx, pid, 0); err != nil {
				t.Fatal(err)
			}
			for r, err := range s.Journal.Replay(ctx, pid, 1, math.MaxInt64, math.MaxInt64) {
				if err != nil {
					t.Fatal(err)
				}
				r.Ordering = 0
				r.Timestamp = r.Timestamp.UTC()
				if len(r.Tags) == 0 {
					r.Tags = nil
				}
				c.events[pid] = append(c.events[pid], r)
			}
			snaps, err := listSnapshots(ctx, s.Snapshots, pid, 0, math.MaxInt64)
			if err != nil {
				t.Fatal(err)
			}
			for i := range snaps {
				snaps[i].Metadata.Timestamp = snaps[i].Metadata.Timestamp.UTC()
			}
			if snaps != nil {
				c.snapshots[pid] = snaps
			}
		}
	})
	return c
}

// equalContents fails the test unless a and b hold the same ids, highest
// numbers, events (every field, byte for byte) and snapshots.
func equalContents(t *testing.T, what string, a, b storeContents) {
	t.Helper()
	if !reflect.DeepEqual(a.highest, b.highest) {
		t.Errorf("%s: highest numbers differ:\n%v\n%v", what, a.highest, b.highest)
	}
	if len(a.events) != len(b.events) {
		t.Errorf("%s: %d ids with events, and %d", what, len(a.events), len(b.events))
	}
	for pid, evs := range a.events {
		if !reflect.DeepEqual(evs, b.events[pid]) {
			t.Errorf("%s: events of %s differ:\n%+v\n%+v", what, pid, evs, b.events[pid])
		}
	}
	if !reflect.DeepEqual(a.snapshots, b.snapshots) {
		t.Errorf("%s: snapshots differ:\n%+v\n%+v", what, a.snapshots, b.snapshots)
	}
}

// pgQuery runs a query returning one value on the test server.
func pgQuery[T any](t *testing.T, sql string, args ...any) T {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var v T
	if err := conn.QueryRow(ctx, sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

func pgSchemaExists(t *testing.T, schema string) bool {
	t.Helper()
	return pgQuery[bool](t, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema)
}

// pgRows counts the rows of the schema's data tables.
func pgRows(t *testing.T, schema string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, table := range []string{"event_journal", "event_tag", "journal_metadata", "snapshot", "projection_offset_store", "projection_management"} {
		out[table] = pgQuery[int64](t, `SELECT count(*) FROM `+pgx.Identifier{schema, table}.Sanitize())
	}
	return out
}

// olderSchema writes an Annals database of schema version 2 at path.
func olderSchema(t *testing.T, path string) {
	t.Helper()
	m, err := sqlite.NewMigrator(path)
	if err != nil {
		t.Fatal(err)
	}
	steps, err := m.PendingMigrations(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{steps[0].SQL, steps[1].SQL, `UPDATE annals_schema SET version = 2`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
}
