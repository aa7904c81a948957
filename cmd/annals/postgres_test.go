package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/offsets"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
	"github.com/annals-go/annals/store/sqlite"
)

// The commands on PostgreSQL, through the binary: each test has a schema
// of its own on the test server (pgtest.Schema, dropped at the end), and
// skips when no server answers (fails when ANNALS_TEST_REQUIRE=postgres).

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

// pgInit creates the schema of url with annals init.
func pgInit(t *testing.T, url string) {
	t.Helper()
	cli(t, nil, "init", "--store", url).want(t, 0, []string{"created schema version"}, nil)
}

func pgOpen(t *testing.T, url string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// pgFixture creates a schema and writes through the store API what
// fixture writes to SQLite, except that Account|a-2 event 3 is of the JSON
// serializer and not valid JSON ("text 3"); no projection state. It returns
// the URL, the schema name and the open store.
//   - Account|a-1: events 1..5, JSON {"amount":n}, manifest Deposited,
//     tagged "bank" (odd numbers also "odd"); snapshots at 3 and 5.
//   - Account|a-2: events 1..3, raw bytes (2 binary with metadata; 3 of
//     serializer 33 but not JSON).
//   - Order|o-1: events 1..2, JSON.
//   - Cart|c-1: events 1..4, all deleted (highest 4, no events).
//   - Cart|c-2: events 1..5, deleted up to 2.
func pgFixture(t *testing.T) (string, string, *postgres.Store) {
	t.Helper()
	url, schema := pgtest.Schema(t)
	pgInit(t, url)
	s := pgOpen(t, url)
	ctx := context.Background()
	j := s.Journal()
	write := func(pid string, from, to int64, mk func(seq int64) journal.Repr) {
		w := journal.AtomicWrite{PersistenceID: pid}
		for seq := from; seq <= to; seq++ {
			e := mk(seq)
			e.PersistenceID, e.SequenceNr, e.WriterID = pid, seq, "writer-1"
			e.Timestamp = base.Add(time.Duration(seq) * time.Second)
			w.Events = append(w.Events, e)
		}
		if res, err := j.Write(ctx, []journal.AtomicWrite{w}); err != nil || res != nil {
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
		if err := j.DeleteTo(ctx, d.pid, d.to); err != nil {
			t.Fatal(err)
		}
	}
	for _, seq := range []int64{3, 5} {
		snap := snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: "Account|a-1", SequenceNr: seq, Timestamp: base.Add(time.Duration(seq) * time.Second)},
			Payload: fmt.Appendf(nil, `{"balance": %d}`, seq*10), SerializerID: serialization.JSONID, Manifest: "Account"}
		if err := s.Snapshots().Save(ctx, snap); err != nil {
			t.Fatal(err)
		}
	}
	return url, schema, s
}

// contentsOf reads everything a store holds for its ids through the store
// APIs: highest numbers (ids whose events were all deleted included),
// events (ordering aside; timestamps in UTC, no tags as nil), snapshots.
func contentsOf(t *testing.T, j journal.Journal, ss snapshot.Store, q query.PersistenceIDsQuery) storeContents {
	t.Helper()
	ctx := context.Background()
	ids, err := q.CurrentPersistenceIDs(ctx, "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	c := storeContents{map[string]int64{}, map[string][]journal.Repr{}, map[string][]snapshot.Snapshot{}}
	for _, pid := range ids {
		if c.highest[pid], err = j.HighestSequenceNr(ctx, pid, 0); err != nil {
			t.Fatal(err)
		}
		for r, err := range j.Replay(ctx, pid, 1, math.MaxInt64, math.MaxInt64) {
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
		snaps, err := listSnapshots(ctx, ss, pid, 0, math.MaxInt64)
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
	return c
}

func pgContents(t *testing.T, url string) storeContents {
	t.Helper()
	s, err := postgres.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	return contentsOf(t, s.Journal(), s.Snapshots(), s.Queries())
}

func sqliteContents(t *testing.T, path string) storeContents {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	return contentsOf(t, s.Journal(), s.Snapshots(), s.Queries())
}

// equalContents fails the test unless a and b hold the same ids, highest
// numbers, events (every field) and snapshots.
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

// pgStats is the --json shape of stats.
type pgStatsFigures struct {
	EntityType     string     `json:"entity_type"`
	PersistenceIDs int64      `json:"persistence_ids"`
	Events         int64      `json:"events"`
	PayloadBytes   int64      `json:"payload_bytes"`
	Highest        int64      `json:"highest_sequence_nr"`
	Oldest         *time.Time `json:"oldest_event"`
	Newest         *time.Time `json:"newest_event"`
	Snapshots      int64      `json:"snapshots"`
	SnapshotBytes  int64      `json:"snapshot_bytes"`
}

type pgStats struct {
	Types        []pgStatsFigures `json:"entity_types"`
	Total        pgStatsFigures   `json:"total"`
	StorageBytes int64            `json:"storage_bytes"`
}

func TestPostgresInitAndMigrate(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.Schema(t)

	// A dry run prints the SQL and creates nothing, not even the schema.
	r := cli(t, nil, "init", "--store", url, "--dry-run")
	r.want(t, 0, []string{"schema version 0 → 1; would run (nothing changed)", "CREATE SCHEMA IF NOT EXISTS", "CREATE TABLE", "event_journal", "journal_metadata", "snapshot", "projection_offset_store", "projection_management"}, nil)
	type plan struct {
		Store  string `json:"store"`
		From   int    `json:"from_version"`
		To     int    `json:"to_version"`
		DryRun bool   `json:"dry_run"`
		Steps  []struct {
			From int    `json:"from"`
			To   int    `json:"to"`
			SQL  string `json:"sql"`
		} `json:"steps"`
	}
	var p plan
	decode(t, cli(t, nil, "init", "--store", url, "--dry-run", "--json"), &p)
	if p.Store != url || p.From != 0 || p.To < 1 || !p.DryRun || len(p.Steps) == 0 || p.Steps[0].From != 0 || p.Steps[len(p.Steps)-1].To != p.To ||
		!strings.Contains(p.Steps[0].SQL, "CREATE TABLE "+pgx.Identifier{schema}.Sanitize()+".event_journal") {
		t.Errorf("dry-run plan %+v", p)
	}
	if pgSchemaExists(t, schema) {
		t.Fatal("init --dry-run created the schema")
	}

	// Reading (and deleting) commands on the missing schema: exit 1, naming
	// the command that creates it; they create nothing.
	for _, args := range [][]string{
		{"stats"}, {"ids"}, {"events", "Account|a-1"}, {"snapshots", "Account|a-1"},
		{"tail", "--type", "Account", "--current"}, {"projections", "list"}, {"projections", "status"},
		{"delete-to", "Account|a-1", "3", "--yes"}, {"delete-snapshots", "Account|a-1", "--yes"}, {"check", "--short"},
	} {
		r := cli(t, []string{"ANNALS_STORE=" + url}, args...)
		if r.code != 1 || !strings.Contains(r.stderr, "schema missing") || !(strings.Contains(r.stderr, "annals migrate") || strings.Contains(r.stderr, "annals init")) {
			t.Errorf("%q on a missing schema: %s", args, r)
		}
	}
	cli(t, nil, "copy", "--from", url, "--to", "memory:").want(t, 1, nil, []string{"source:", "schema missing"})
	// migrate upgrades; it does not create (init does).
	cli(t, nil, "migrate", "--store", url).want(t, 1, nil, []string{"has no Annals schema to upgrade", "annals init --store " + url})
	if pgSchemaExists(t, schema) {
		t.Fatal("a reading command or migrate created the schema")
	}

	cli(t, nil, "init", "--store", url).want(t, 0, []string{fmt.Sprintf("created schema version %d", p.To)}, nil)
	if !pgSchemaExists(t, schema) {
		t.Fatal("init did not create the schema")
	}
	rows := pgRows(t, schema)
	current := fmt.Sprintf("schema version %d is current; nothing to do", p.To)
	cli(t, nil, "migrate", "--store", url).want(t, 0, []string{current}, nil)
	cli(t, nil, "init", "--store", url).want(t, 0, []string{current}, nil)
	cli(t, nil, "migrate", "--store", url, "--dry-run").want(t, 0, []string{current}, nil)
	p = plan{}
	decode(t, cli(t, nil, "migrate", "--store", url, "--json"), &p)
	if p.From != p.To || p.DryRun || p.Steps == nil || len(p.Steps) != 0 {
		t.Errorf("migrate of a current schema: %+v", p)
	}
	if got := pgRows(t, schema); !reflect.DeepEqual(got, rows) {
		t.Errorf("migrate of a current schema changed rows: %v, then %v", rows, got)
	}
	cli(t, nil, "stats", "--store", url).want(t, 0, []string{"(total)", "schema " + schema}, nil)
	cli(t, nil, "ids", "--store", url).want(t, 0, nil, []string{"no persistence ids"})
}

func TestPostgresRead(t *testing.T) {
	t.Parallel()
	url, schema, _ := pgFixture(t)
	env := []string{"ANNALS_STORE=" + url}

	t.Run("ids", func(t *testing.T) {
		t.Parallel()
		cli(t, env, "ids").want(t, 0, []string{"PERSISTENCE ID", "HIGHEST SEQ", "Account|a-1", "Cart|c-1", "Order|o-1"}, nil)
		cli(t, env, "ids", "--limit", "2").want(t, 0, []string{"Account|a-2"}, []string{"more ids: add --after 'Account|a-2'"})
		type page struct {
			IDs []struct {
				PersistenceID string `json:"persistence_id"`
				Highest       int64  `json:"highest_sequence_nr"`
			} `json:"ids"`
			NextAfter string `json:"next_after"`
		}
		var all []string
		highest := map[string]int64{}
		after := ""
		for range 10 {
			var p page
			decode(t, cli(t, env, "ids", "--limit", "2", "--after", after, "--json"), &p)
			for _, id := range p.IDs {
				all = append(all, id.PersistenceID)
				highest[id.PersistenceID] = id.Highest
			}
			if p.NextAfter == "" {
				break
			}
			after = p.NextAfter
		}
		if want := []string{"Account|a-1", "Account|a-2", "Cart|c-1", "Cart|c-2", "Order|o-1"}; !slices.Equal(all, want) {
			t.Errorf("paged ids %v, want %v", all, want)
		}
		if want := map[string]int64{"Account|a-1": 5, "Account|a-2": 3, "Cart|c-1": 4, "Cart|c-2": 5, "Order|o-1": 2}; !reflect.DeepEqual(highest, want) {
			t.Errorf("highest numbers %v, want %v", highest, want)
		}
		var p page
		decode(t, cli(t, env, "ids", "--type", "Cart", "--json"), &p)
		if len(p.IDs) != 2 || p.IDs[0].PersistenceID != "Cart|c-1" || p.IDs[0].Highest != 4 || p.NextAfter != "" {
			t.Errorf("ids of Cart: %+v", p)
		}
	})

	t.Run("events", func(t *testing.T) {
		t.Parallel()
		r := cli(t, env, "events", "Account|a-1", "--from", "2", "--to", "4")
		r.want(t, 0, []string{"SEQ", "2026-01-02T03:04:07.123456Z", "json", "Deposited", "bank,odd", `{"amount":3}`}, nil)
		if n := strings.Count(r.stdout, "\n"); n != 4 {
			t.Errorf("%d lines for events 2..4 and a header:\n%s", n, r.stdout)
		}
		cli(t, env, "events", "Account|a-2").want(t, 0, []string{`"text 1"`, "0x000102ff", "bytes", `"text 3"`}, nil)

		type ev struct {
			PersistenceID string          `json:"persistence_id"`
			SequenceNr    int64           `json:"sequence_nr"`
			Offset        json.RawMessage `json:"offset"`
			Timestamp     time.Time       `json:"timestamp"`
			EntityType    string          `json:"entity_type"`
			Slice         int             `json:"slice"`
			SerializerID  int32           `json:"serializer_id"`
			Manifest      string          `json:"manifest"`
			WriterID      string          `json:"writer_id"`
			Tags          []string        `json:"tags"`
			PayloadSize   int             `json:"payload_size"`
			Payload       json.RawMessage `json:"payload"`
			PayloadBase64 []byte          `json:"payload_base64"`
			Metadata      []byte          `json:"metadata_base64"`
		}
		evs := jsonLines[ev](t, cli(t, env, "events", "--json", "Account|a-1"))
		if len(evs) != 5 {
			t.Fatalf("%d events, want 5", len(evs))
		}
		for i, e := range evs {
			seq := int64(i + 1)
			tags := []string{"bank"}
			if seq%2 == 1 {
				tags = append(tags, "odd")
			}
			if e.PersistenceID != "Account|a-1" || e.SequenceNr != seq || !e.Timestamp.Equal(base.Add(time.Duration(seq)*time.Second)) ||
				e.EntityType != "Account" || e.Slice != annals.Slice("Account|a-1") || e.SerializerID != 33 || e.Manifest != "Deposited" ||
				e.WriterID != "writer-1" || !slices.Equal(e.Tags, tags) || !jsonEqual(e.Payload, fmt.Sprintf(`{"amount": %d}`, seq)) ||
				e.PayloadBase64 != nil || e.PayloadSize != 13 || e.Metadata != nil {
				t.Errorf("event %+v", e)
			}
			// The offset, if any, is one tail --from-offset takes.
			if e.Offset != nil {
				var o query.Offset
				if err := json.Unmarshal(e.Offset, &o); err != nil {
					t.Errorf("offset %s: %v", e.Offset, err)
				}
			}
		}
		if n := len(jsonLines[ev](t, cli(t, env, "events", "--json", "Account|a-1", "--limit", "2"))); n != 2 {
			t.Errorf("--limit 2: %d events", n)
		}
		evs = jsonLines[ev](t, cli(t, env, "events", "Account|a-2", "--json"))
		if len(evs) != 3 || string(evs[0].PayloadBase64) != "text 1" || evs[0].Payload != nil || evs[0].Tags == nil || len(evs[0].Tags) != 0 ||
			string(evs[1].PayloadBase64) != "\x00\x01\x02\xff" || evs[1].Payload != nil || string(evs[1].Metadata) != "meta" ||
			evs[2].SerializerID != 33 || evs[2].Payload != nil || string(evs[2].PayloadBase64) != "text 3" {
			t.Errorf("raw events (serializer 33 with invalid JSON included) %+v", evs)
		}
		evs = jsonLines[ev](t, cli(t, env, "events", "Cart|c-2", "--json"))
		if len(evs) != 3 || evs[0].SequenceNr != 3 {
			t.Errorf("events of Cart|c-2 after deleting 1..2: %+v", evs)
		}
		cli(t, env, "events", "Cart|c-1").want(t, 0, nil, []string{"highest sequence number 4"})
		cli(t, env, "events", "Nobody|x").want(t, 0, nil, []string{`no events stored for "Nobody|x"`})
	})

	t.Run("snapshots", func(t *testing.T) {
		t.Parallel()
		cli(t, env, "snapshots", "Account|a-1").want(t, 0, []string{"SEQ", "Account", `{"balance":50}`, `{"balance":30}`}, nil)
		var out struct {
			PersistenceID string `json:"persistence_id"`
			Snapshots     []struct {
				SequenceNr    int64           `json:"sequence_nr"`
				Timestamp     time.Time       `json:"timestamp"`
				SerializerID  int32           `json:"serializer_id"`
				Manifest      string          `json:"manifest"`
				PayloadSize   int             `json:"payload_size"`
				Payload       json.RawMessage `json:"payload"`
				PayloadBase64 []byte          `json:"payload_base64"`
			} `json:"snapshots"`
		}
		decode(t, cli(t, env, "snapshots", "Account|a-1", "--json"), &out)
		if out.PersistenceID != "Account|a-1" || len(out.Snapshots) != 2 {
			t.Fatalf("snapshots %+v", out)
		}
		s0, s1 := out.Snapshots[0], out.Snapshots[1]
		if s0.SequenceNr != 5 || s1.SequenceNr != 3 || !jsonEqual(s0.Payload, `{"balance": 50}`) || s0.PayloadBase64 != nil || s0.SerializerID != 33 ||
			s0.Manifest != "Account" || s0.PayloadSize != 15 || !s1.Timestamp.Equal(base.Add(3*time.Second)) {
			t.Errorf("snapshots %+v", out)
		}
		decode(t, cli(t, env, "snapshots", "Order|o-1", "--json"), &out)
		if out.Snapshots == nil || len(out.Snapshots) != 0 {
			t.Errorf("snapshots of an id without any: %+v", out)
		}
	})

	t.Run("stats", func(t *testing.T) {
		t.Parallel()
		cli(t, env, "stats").want(t, 0, []string{"ENTITY TYPE", "Account", "Cart", "Order", "(total)", "storage:", "schema " + schema}, nil)
		var st pgStats
		decode(t, cli(t, env, "stats", "--json"), &st)
		byType := map[string]pgStatsFigures{}
		for _, f := range st.Types {
			byType[f.EntityType] = f
		}
		acc, cart, ord := byType["Account"], byType["Cart"], byType["Order"]
		if len(st.Types) != 3 || acc.PersistenceIDs != 2 || acc.Events != 8 || acc.Highest != 5 || acc.Snapshots != 2 || acc.SnapshotBytes != 30 ||
			acc.PayloadBytes != 5*13+6+4+6 || acc.Oldest == nil || !acc.Oldest.Equal(base.Add(time.Second)) || acc.Newest == nil || !acc.Newest.Equal(base.Add(5*time.Second)) {
			t.Errorf("Account: %+v", acc)
		}
		if cart.PersistenceIDs != 2 || cart.Events != 3 || cart.Highest != 5 || cart.Snapshots != 0 || cart.PayloadBytes != 3*13 {
			t.Errorf("Cart (one id all deleted, one deleted to 2): %+v", cart)
		}
		if ord.PersistenceIDs != 1 || ord.Events != 2 || ord.Highest != 2 {
			t.Errorf("Order: %+v", ord)
		}
		if st.Total.Events != 13 || st.Total.PersistenceIDs != 5 || st.Total.Snapshots != 2 || st.Total.EntityType != "" || st.Total.Highest != 5 || st.StorageBytes <= 0 {
			t.Errorf("total %+v, storage %d", st.Total, st.StorageBytes)
		}
	})
}

func TestPostgresDelete(t *testing.T) {
	t.Parallel()
	url, schema, s := pgFixture(t)
	env := []string{"ANNALS_STORE=" + url}
	ctx := context.Background()
	unchanged := func(what string, before storeContents, rows map[string]int64) {
		t.Helper()
		equalContents(t, what, before, pgContents(t, url))
		if got := pgRows(t, schema); !reflect.DeepEqual(got, rows) {
			t.Errorf("%s changed rows: %v, then %v", what, rows, got)
		}
	}

	type deletePlan struct {
		PersistenceID string `json:"persistence_id"`
		To            int64  `json:"to"`
		Events        int64  `json:"events"`
		First         int64  `json:"first"`
		Last          int64  `json:"last"`
		Highest       int64  `json:"highest_sequence_nr"`
		Kept          int64  `json:"kept"`
		DryRun        bool   `json:"dry_run"`
		Deleted       bool   `json:"deleted"`
	}
	type snapPlan struct {
		PersistenceID string  `json:"persistence_id"`
		From          int64   `json:"from"`
		To            int64   `json:"to"`
		Snapshots     []int64 `json:"snapshots"`
		DryRun        bool    `json:"dry_run"`
		Deleted       bool    `json:"deleted"`
	}

	// Dry runs and refusals (stdin not a terminal, even answering y).
	before, rows := pgContents(t, url), pgRows(t, schema)
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{[]string{"delete-to", "Account|a-1", "5", "--dry-run"}, 0, `would delete 5 events of "Account|a-1" (sequence numbers 1–5); 0 kept; the highest sequence number stays 5`, ""},
		{[]string{"delete-to", "Account|a-1", "3"}, 2, "", "standard input is not a terminal; pass --yes"},
		{[]string{"delete-to", "Cart|c-1", "4", "--yes"}, 0, "nothing to delete", ""},
		{[]string{"delete-snapshots", "Account|a-1", "--dry-run"}, 0, `would delete 2 snapshots of "Account|a-1" at sequence numbers [5 3]`, ""},
		{[]string{"delete-snapshots", "Account|a-1", "--to", "4"}, 2, "", "pass --yes"},
		{[]string{"delete-snapshots", "Order|o-1", "--yes"}, 0, "nothing to delete", ""},
	} {
		r := cliIn(t, env, strings.NewReader("y\n"), tc.args...)
		r.want(t, tc.code, []string{tc.stdout}, []string{tc.stderr})
	}
	var dp deletePlan
	decode(t, cli(t, env, "delete-to", "--dry-run", "--json", "Account|a-1", "5"), &dp)
	if dp != (deletePlan{"Account|a-1", 5, 5, 1, 5, 5, 0, true, false}) {
		t.Errorf("dry run %+v", dp)
	}
	var sp snapPlan
	decode(t, cli(t, env, "delete-snapshots", "Account|a-1", "--from", "4", "--dry-run", "--json"), &sp)
	if sp.PersistenceID != "Account|a-1" || !slices.Equal(sp.Snapshots, []int64{5}) || !sp.DryRun || sp.Deleted || sp.From != 4 || sp.To != math.MaxInt64 {
		t.Errorf("snapshot dry run %+v", sp)
	}
	unchanged("dry runs and refused deletions", before, rows)

	// Every event of an id: the highest number stays.
	decode(t, cli(t, env, "delete-to", "Account|a-1", "5", "--yes", "--json"), &dp)
	if dp != (deletePlan{"Account|a-1", 5, 5, 1, 5, 5, 0, false, true}) {
		t.Errorf("deletion %+v", dp)
	}
	cli(t, env, "delete-to", "Order|o-1", "1", "--yes").want(t, 0, []string{`deleted 1 events of "Order|o-1" (sequence numbers 1–1); 1 kept; the highest sequence number stays 2`}, nil)
	for pid, want := range map[string]int64{"Account|a-1": 5, "Order|o-1": 2} {
		if h, err := s.Journal().HighestSequenceNr(ctx, pid, 0); err != nil || h != want {
			t.Errorf("highest of %s after delete-to: %d, %v; want %d", pid, h, err, want)
		}
	}
	var page struct {
		IDs []struct {
			PersistenceID string `json:"persistence_id"`
			Highest       int64  `json:"highest_sequence_nr"`
		} `json:"ids"`
		NextAfter string `json:"next_after"`
	}
	decode(t, cli(t, env, "ids", "--type", "Account", "--json"), &page)
	if len(page.IDs) != 2 || page.IDs[0].PersistenceID != "Account|a-1" || page.IDs[0].Highest != 5 {
		t.Errorf("ids after deleting every event of Account|a-1: %+v", page)
	}
	cli(t, env, "events", "Account|a-1").want(t, 0, nil, []string{"highest sequence number 5"})
	if evs := jsonLines[map[string]any](t, cli(t, env, "events", "--json", "Order|o-1")); len(evs) != 1 || evs[0]["sequence_nr"] != 2.0 {
		t.Errorf("Order|o-1 after delete-to 1: %v", evs)
	}
	decode(t, cli(t, env, "delete-snapshots", "Account|a-1", "--from", "4", "--yes", "--json"), &sp)
	if !slices.Equal(sp.Snapshots, []int64{5}) || !sp.Deleted || sp.DryRun {
		t.Errorf("snapshot deletion %+v", sp)
	}
	snaps, err := listSnapshots(ctx, s.Snapshots(), "Account|a-1", 0, math.MaxInt64)
	if err != nil || len(snaps) != 1 || snaps[0].Metadata.SequenceNr != 3 {
		t.Errorf("snapshots left: %+v, %v", snaps, err)
	}
	cli(t, env, "delete-snapshots", "Account|a-1", "--yes").want(t, 0, []string{`deleted 1 snapshots of "Account|a-1" at sequence numbers [3]`}, nil)
	if n := pgRows(t, schema)["snapshot"]; n != 0 {
		t.Errorf("%d snapshot rows left", n)
	}
	cli(t, env, "delete-to", "Account|a-1", "x").want(t, 2, nil, []string{`SEQ "x"`})
}

func TestPostgresCopyInterruptedAndResumed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := filepath.Join(dir, "src.db")
	url, schema := pgtest.Schema(t)
	const nIDs, perID = 300, 20
	bigSource(t, src, nIDs, perID)
	args := []string{"copy", "--from", "sqlite:" + src, "--to", url, "--batch", "50"}
	// The target schema is created by the first run.
	cli(t, nil, append(args, "--limit-events", "1000")...).want(t, 1, nil, []string{"interrupted after copying 1,000 events", "run the same command again to resume"})
	if !pgSchemaExists(t, schema) {
		t.Fatal("copy did not create the target schema")
	}
	cli(t, nil, append(args, "--limit-events", "2000")...).want(t, 1, nil, []string{"interrupted after copying 2,000 events"})
	n := 0
	for _, evs := range pgContents(t, url).events {
		n += len(evs)
	}
	if n < 3000 || n >= nIDs*perID {
		t.Fatalf("%d events in the target after two interrupted copies", n)
	}
	var res copyResult
	decode(t, cli(t, nil, append(args, "--json")...), &res)
	if !res.Verified || res.IDs != nIDs || len(res.Mismatches) != 0 || res.From != "sqlite:"+src || res.To != url {
		t.Errorf("resumed copy: %+v", res)
	}
	source := sqliteContents(t, src)
	equalContents(t, "sqlite source, postgres target", source, pgContents(t, url))
	cli(t, nil, args...).want(t, 0, []string{"copied 0 events of 0 ids", "verified 300 ids"}, nil)

	// Queries by tag agree (the copy carries the tag index).
	count := func(q query.EventsByTagQuery) int {
		c := 0
		for _, err := range q.CurrentEventsByTag(context.Background(), "t1", query.NoOffset()) {
			if err != nil {
				t.Fatal(err)
			}
			c++
		}
		return c
	}
	ss, err := sqlite.Open(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	fromSQLite := count(ss.Queries())
	_ = ss.Close()
	if fromPG := count(pgOpen(t, url).Queries()); fromSQLite == 0 || fromSQLite != fromPG {
		t.Errorf("events tagged t1: %d in the source, %d in the target", fromSQLite, fromPG)
	}

	// And back: PostgreSQL to a new SQLite file, interrupted once.
	back := filepath.Join(dir, "back.db")
	backArgs := []string{"copy", "--from", url, "--to", "sqlite:" + back, "--batch", "200"}
	cli(t, nil, append(backArgs, "--limit-events", "1000")...).want(t, 1, nil, []string{"interrupted after copying 1,", "run the same command again to resume"})
	res = copyResult{}
	decode(t, cli(t, nil, append(backArgs, "--json")...), &res)
	if !res.Verified || res.IDs != nIDs || len(res.Mismatches) != 0 {
		t.Errorf("copy back: %+v", res)
	}
	equalContents(t, "sqlite source, sqlite copy of the postgres copy", source, sqliteContents(t, back))
}

// The fixture's ids (all deleted, partly deleted, raw payloads, metadata)
// copied from PostgreSQL to PostgreSQL.
func TestPostgresCopyBetweenSchemas(t *testing.T) {
	t.Parallel()
	url, _, _ := pgFixture(t)
	tgt, _ := pgtest.Schema(t)
	var res copyResult
	decode(t, cli(t, nil, "copy", "--from", url, "--to", tgt, "--json"), &res)
	if res.IDs != 5 || res.IDsCopied != 5 || res.EventsCopied != 13 || res.SnapshotsCopied != 2 || !res.Verified {
		t.Errorf("copy: %+v", res)
	}
	equalContents(t, "postgres schemas", pgContents(t, url), pgContents(t, tgt))
	cli(t, nil, "copy", "--from", url, "--to", url).want(t, 2, nil, []string{"name the same store"})
}

func TestPostgresProjections(t *testing.T) {
	t.Parallel()
	url, schema, s := pgFixture(t)
	env := []string{"ANNALS_STORE=" + url}
	ctx := context.Background()
	p := s.Projections()

	// An offset taken from a query: after the third Account event.
	var envs []query.Envelope
	for e, err := range s.Queries().CurrentEventsBySlices(ctx, "Account", 0, 1023, query.NoOffset()) {
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, e)
	}
	if len(envs) != 8 {
		t.Fatalf("%d Account events", len(envs))
	}
	saved := envs[2].Offset
	if saved.Kind != query.KindTimestamp {
		t.Fatalf("offset of a postgres query: %v", saved)
	}
	lowID, highID := offsets.ID{Name: "balances", Key: "0-511"}, offsets.ID{Name: "balances", Key: "512-1023"}
	if err := p.SaveOffset(ctx, lowID, saved); err != nil {
		t.Fatal(err)
	}
	if err := p.SetPaused(ctx, highID, true); err != nil {
		t.Fatal(err)
	}
	sameOffset := func(raw json.RawMessage, want query.Offset) bool {
		var o query.Offset
		if err := json.Unmarshal(raw, &o); err != nil {
			return false
		}
		return o.Kind == want.Kind && o.Sequence == want.Sequence && o.Timestamp.Equal(want.Timestamp) && maps2equal(o.Seen, want.Seen)
	}
	savedJSON, _ := json.Marshal(saved)

	cli(t, env, "projections", "list").want(t, 0, []string{"balances  0-511", string(savedJSON), "512-1023", "yes"}, nil)
	var list instancesOut
	decode(t, cli(t, env, "projections", "list", "--json"), &list)
	if len(list.Projections) != 2 || list.Projections[0].Key != "0-511" || !sameOffset(list.Projections[0].Offset, saved) || list.Projections[0].Paused ||
		list.Projections[0].Updated == nil || list.Projections[0].PendingEvents != nil ||
		list.Projections[1].Key != "512-1023" || !jsonEqual(list.Projections[1].Offset, "{}") || !list.Projections[1].Paused {
		t.Errorf("list %+v", list)
	}

	// Status: the pending events, as the store's own queries count them.
	pending := func(r annals.SliceRange, after query.Offset, typ string) (n int64) {
		types := []string{"Account", "Cart", "Order"}
		if typ != "" {
			types = []string{typ}
		}
		for _, ty := range types {
			for _, err := range s.Queries().CurrentEventsBySlices(ctx, ty, r.Min, r.Max, after) {
				if err != nil {
					t.Fatal(err)
				}
				n++
			}
		}
		return n
	}
	low, high := annals.SliceRange{Min: 0, Max: 511}, annals.SliceRange{Min: 512, Max: 1023}
	for _, typ := range []string{"", "Account"} {
		var st instancesOut
		decode(t, cli(t, env, "projections", "status", "balances", "--json", "--type", typ), &st)
		if len(st.Projections) != 2 || st.Projections[0].PendingEvents == nil || st.Projections[1].PendingEvents == nil {
			t.Fatalf("status %+v", st)
		}
		// admin.BacklogReader may count the events at exactly a timestamp
		// offset's timestamp that the offset lists as seen.
		lo, hi := st.Projections[0], st.Projections[1]
		wantLo, wantHi := pending(low, saved, typ), pending(high, query.NoOffset(), typ)
		if lo.Slices != "0-511" || *lo.PendingEvents < wantLo || *lo.PendingEvents > wantLo+int64(len(saved.Seen)) || hi.Slices != "512-1023" || *hi.PendingEvents != wantHi {
			t.Errorf("type %q: pending %d in 0-511 (want %d, or up to %d more seen at the offset's timestamp), %d in 512-1023 (want %d)", typ, *lo.PendingEvents, wantLo, len(saved.Seen), *hi.PendingEvents, wantHi)
		}
		for _, in := range st.Projections {
			if (*in.PendingEvents > 0) != (in.OldestPending != nil && in.LagSeconds != nil && *in.LagSeconds > 0) {
				t.Errorf("%s: pending %d, oldest %v, lag %v", in.Key, *in.PendingEvents, in.OldestPending, in.LagSeconds)
			}
		}
	}
	cli(t, env, "projections", "status").want(t, 0, []string{"PENDING", "LAG", "0-511", "512-1023"}, nil)

	// Pause every instance of a name, resume one.
	var changed instancesOut
	decode(t, cli(t, env, "projections", "pause", "balances", "--json"), &changed)
	if len(changed.Projections) != 2 || !changed.Projections[0].Paused || !changed.Projections[1].Paused {
		t.Errorf("pause: %+v", changed)
	}
	cli(t, env, "projections", "resume", "balances", "0-511").want(t, 0, []string{"resumed balances/0-511"}, nil)
	for id, want := range map[offsets.ID]bool{lowID: false, highID: true} {
		st, err := p.Load(ctx, id)
		if err != nil || st.Paused != want {
			t.Errorf("%v after pause and resume: %+v, %v; want paused %v", id, st, err, want)
		}
	}
	if st, _ := p.Load(ctx, lowID); !sameOffset(mustJSON(t, st.Offset), saved) {
		t.Errorf("pause and resume changed the offset: %v", st.Offset)
	}

	// Reset: a dry run and a refusal change nothing; --offset sets one (a
	// timestamp offset as list prints it); without, it is removed.
	rows := pgRows(t, schema)
	cli(t, env, "projections", "reset-offset", "balances", "0-511", "--dry-run").want(t, 0, []string{"would remove the offset of balances/0-511 (now " + string(savedJSON) + ")"}, nil)
	cliIn(t, env, strings.NewReader("y\n"), "projections", "reset-offset", "balances", "0-511").want(t, 2, nil, []string{"pass --yes"})
	if st, _ := p.Load(ctx, lowID); !sameOffset(mustJSON(t, st.Offset), saved) {
		t.Errorf("a dry run or refused reset changed the offset: %v", st.Offset)
	}
	if got := pgRows(t, schema); !reflect.DeepEqual(got, rows) {
		t.Errorf("a dry run or refused reset changed rows: %v, then %v", rows, got)
	}
	later := envs[5].Offset
	laterJSON, _ := json.Marshal(later)
	cli(t, env, "projections", "reset-offset", "balances", "0-511", "--offset", string(laterJSON), "--yes").want(t, 0,
		[]string{"set the offset of balances/0-511 to " + string(laterJSON) + " (was " + string(savedJSON) + ")"}, []string{"is not paused"})
	if st, err := p.Load(ctx, lowID); err != nil || !sameOffset(mustJSON(t, st.Offset), later) || st.Paused {
		t.Errorf("after reset-offset --offset: %+v, %v", st, err)
	}
	var reset struct {
		Name     string          `json:"name"`
		Key      string          `json:"key"`
		Previous json.RawMessage `json:"previous_offset"`
		Offset   json.RawMessage `json:"offset"`
		DryRun   bool            `json:"dry_run"`
		Changed  bool            `json:"changed"`
	}
	decode(t, cli(t, env, "projections", "reset-offset", "balances", "0-511", "--yes", "--json"), &reset)
	if reset.Name != "balances" || reset.Key != "0-511" || !sameOffset(reset.Previous, later) || !jsonEqual(reset.Offset, "{}") || !reset.Changed || reset.DryRun {
		t.Errorf("reset %+v", reset)
	}
	if st, err := p.Load(ctx, lowID); err != nil || st.Offset.Kind != query.KindNone {
		t.Errorf("after reset-offset: %+v, %v", st, err)
	}
	decode(t, cli(t, env, "projections", "list", "balances", "--json"), &list)
	if len(list.Projections) == 0 || !jsonEqual(list.Projections[0].Offset, "{}") {
		t.Errorf("after reset: %+v", list.Projections)
	}
}

func maps2equal(a, b map[string]int64) bool {
	return len(a) == len(b) && (len(a) == 0 || reflect.DeepEqual(a, b))
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestPostgresTail(t *testing.T) {
	t.Parallel()
	url, _, s := pgFixture(t)
	env := []string{"ANNALS_STORE=" + url}

	t.Run("current", func(t *testing.T) {
		t.Parallel()
		evs := loose(t, cli(t, env, "tail", "--type", "Account", "--current", "--json"))
		got := ids(evs)
		if len(got) != 8 || !slices.Contains(got, "Account|a-1#5") || !slices.Contains(got, "Account|a-2#3") {
			t.Errorf("Account events: %v", got)
		}
		for _, e := range evs {
			var o query.Offset
			if err := json.Unmarshal(e.Offset, &o); err != nil || o.Kind != query.KindTimestamp {
				t.Errorf("offset %s: %v", e.Offset, err)
			}
		}
		// Resume after the third: the offset printed is the offset taken.
		rest := loose(t, cli(t, env, "tail", "--type", "Account", "--current", "--json", "--from-offset", string(evs[2].Offset)))
		if !slices.Equal(ids(rest), got[3:]) {
			t.Errorf("after %s: %v, want %v", evs[2].Offset, ids(rest), got[3:])
		}
		if lim := loose(t, cli(t, env, "tail", "--type", "Account", "--current", "--json", "--limit", "4")); !slices.Equal(ids(lim), got[:4]) {
			t.Errorf("--limit 4: %v", ids(lim))
		}
		// By tag: odd events, Cart|c-2 1 deleted.
		odd := ids(loose(t, cli(t, env, "tail", "--tag", "odd", "--current", "--json")))
		slices.Sort(odd)
		if want := []string{"Account|a-1#1", "Account|a-1#3", "Account|a-1#5", "Cart|c-2#3", "Cart|c-2#5", "Order|o-1#1"}; !slices.Equal(odd, want) {
			t.Errorf("tagged odd: %v", odd)
		}
		cli(t, env, "tail", "--tag", "odd", "--current").want(t, 0, []string{"Account|a-1  1  2026-01-02T03:04:06.123456Z  json  Deposited  bank,odd  {\"amount\":1}"}, []string{"up to now"})
	})

	t.Run("live", func(t *testing.T) {
		t.Parallel()
		// Events written after the tail started, while it runs; it ends
		// after --limit.
		cmd := exec.CommandContext(t.Context(), annalsBin, "tail", "--type", "Live", "--limit", "3", "--json")
		cmd.Env = append(cleanEnv(), env...)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		errLines := bufio.NewReader(stderr)
		if line, err := errLines.ReadString('\n'); err != nil || !strings.Contains(line, "following events of Live in slices 0-1023") {
			t.Fatalf("banner %q, %v", line, err)
		}
		go func() { _, _ = io.Copy(io.Discard, errLines) }()
		lines := bufio.NewScanner(stdout)
		next := func() eventOut {
			t.Helper()
			if !lines.Scan() {
				t.Fatalf("tail ended early: %v", lines.Err())
			}
			var e eventOut
			if err := json.Unmarshal(lines.Bytes(), &e); err != nil {
				t.Fatalf("line %q: %v", lines.Text(), err)
			}
			return e
		}
		write := func(pid string, from, to int64) {
			w := journal.AtomicWrite{PersistenceID: pid}
			for seq := from; seq <= to; seq++ {
				w.Events = append(w.Events, journal.Repr{PersistenceID: pid, SequenceNr: seq, Payload: fmt.Appendf(nil, `{"n":%d}`, seq), SerializerID: serialization.JSONID, Manifest: "N"})
			}
			if res, err := s.Journal().Write(context.Background(), []journal.AtomicWrite{w}); err != nil || res != nil {
				t.Fatal(res, err)
			}
		}
		write("Live|x", 1, 2)
		if got := ids([]eventOut{next(), next()}); !slices.Equal(got, []string{"Live|x#1", "Live|x#2"}) {
			t.Errorf("first events: %v", got)
		}
		write("Other|y", 1, 1)
		write("Live|x", 3, 4)
		if e := next(); e.PersistenceID != "Live|x" || e.SequenceNr != 3 || !jsonEqual(e.Payload, `{"n":3}`) {
			t.Errorf("third event %+v", e)
		}
		if lines.Scan() {
			t.Errorf("more than --limit 3 lines: %q", lines.Text())
		}
		if err := cmd.Wait(); err != nil {
			t.Errorf("tail --limit 3: %v, want exit 0", err)
		}
	})
}

func TestPostgresCheck(t *testing.T) {
	t.Parallel()
	url, schema, _ := pgFixture(t)
	before, rows := pgContents(t, url), pgRows(t, schema)
	var stBefore pgStats
	decode(t, cli(t, nil, "stats", "--store", url, "--json"), &stBefore)

	start := time.Now()
	var out checkOut
	decode(t, cli(t, nil, "check", "--store", url, "--short", "--json"), &out)
	t.Logf("check --short on PostgreSQL: %v", time.Since(start).Round(time.Millisecond))
	if !out.OK || out.Store != url || len(out.Suites) != 3 || out.RemovedIDs < 100 {
		t.Fatalf("check: %+v", out)
	}
	for _, s := range out.Suites {
		if s.Rules == 0 || s.Passed+len(s.Skipped) != s.Rules || len(s.Failed) != 0 || (s.Suite == "journal" && !slices.Contains(s.Skipped, "LargeReplayStreams")) {
			t.Errorf("suite %+v", s)
		}
	}
	equalContents(t, "before and after check", before, pgContents(t, url))
	if got := pgRows(t, schema); !reflect.DeepEqual(got, rows) {
		t.Errorf("rows before check %v, after %v", rows, got)
	}
	var stAfter pgStats
	decode(t, cli(t, nil, "stats", "--store", url, "--json"), &stAfter)
	if !reflect.DeepEqual(stBefore.Types, stAfter.Types) || !reflect.DeepEqual(stBefore.Total, stAfter.Total) {
		t.Errorf("stats before check %+v\nafter %+v", stBefore, stAfter)
	}

	// Table output, one rule; a failing rule pattern is a usage error.
	cli(t, nil, "check", "--store", url, "--run", "journal/FieldsRoundTrip$").want(t, 0, []string{"SUITE", "journal", "removed the kit's", "check passed", "schema " + schema}, nil)
	cli(t, nil, "check", "--store", url, "--run", "(").want(t, 2, nil, []string{"--run"})
}

var scratchSchema = regexp.MustCompile(`\(schema (annals_scratch_[0-9a-f]+)\)`)

func TestPostgresBench(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.Schema(t)
	small := []string{"--single", "20", "--events", "1000", "--ids", "50", "--replay", "1000"}
	type out struct {
		Store   string `json:"store"`
		Scratch string `json:"scratch"`
		Go      string `json:"go"`
		CPUs    int    `json:"cpus"`
		Results []struct {
			Workload string   `json:"workload"`
			Events   int64    `json:"events"`
			Annals   float64  `json:"annals_events_per_second"`
			Raw      *float64 `json:"raw_events_per_second"`
			Ratio    *float64 `json:"ratio"`
		} `json:"results"`
	}
	var o out
	decode(t, cli(t, nil, append([]string{"bench", "--store", url, "--json"}, small...)...), &o)
	m := scratchSchema.FindStringSubmatch(o.Scratch)
	if o.Store != "postgres" || m == nil || o.Go == "" || o.CPUs < 1 || len(o.Results) != 4 {
		t.Fatalf("bench: %+v", o)
	}
	wantEvents := []int64{20, 1000, 1000, 1000}
	for i, r := range o.Results {
		if r.Workload == "" || r.Events != wantEvents[i] || r.Annals <= 0 || r.Raw == nil || *r.Raw <= 0 || r.Ratio == nil || *r.Ratio <= 0 {
			t.Errorf("result %d: %+v", i, r)
		}
	}
	// The scratch schema is gone, and the store's own schema was never
	// created.
	if pgSchemaExists(t, m[1]) {
		t.Errorf("scratch schema %s left behind", m[1])
	}
	if pgSchemaExists(t, schema) {
		t.Errorf("bench created the store's schema %s", schema)
	}
	r := cli(t, nil, append([]string{"bench", "--store", url}, small...)...)
	r.want(t, 0, []string{"store postgres, scratch", "(removed)", "WORKLOAD", "write, 1 id", "write, 50 ids", "replay", "query by slices"}, nil)
	if m := scratchSchema.FindStringSubmatch(r.stdout); m == nil || pgSchemaExists(t, m[1]) {
		t.Errorf("scratch schema of the table run left behind (or not named): %v\n%s", m, r.stdout)
	}
	if n := pgQuery[int64](t, `SELECT count(*) FROM pg_namespace WHERE nspname = ANY($1)`, []string{m[1], schema}); n != 0 {
		t.Errorf("%d schemas left", n)
	}
}
