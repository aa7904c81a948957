package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/store/sqlite"
)

func TestUsageAndExitCodes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "missing.db")
	for _, tc := range []struct {
		name           string
		env            []string
		args           []string
		code           int
		stdout, stderr []string
	}{
		{"no command", nil, nil, 2, nil, []string{"Usage: annals", "ids", "delete-to", "copy", "projections", "tail", "bench", "check"}},
		{"help", nil, []string{"help"}, 0, []string{"Usage: annals", "delete-to", "ANNALS_STORE"}, nil},
		{"help command", nil, []string{"help", "events"}, 0, []string{"Usage: annals events [flags] ID", "--from", "Examples:", "payload_base64"}, nil},
		{"help unknown", nil, []string{"help", "nope"}, 2, nil, []string{`unknown command "nope"`}},
		{"dash h", nil, []string{"stats", "-h"}, 0, []string{"Usage: annals stats", "--store", "Examples:"}, nil},
		{"dash dash help", nil, []string{"events", "--help"}, 0, []string{"Usage: annals events [flags] ID", "payload_base64"}, nil},
		{"unknown command", nil, []string{"nope"}, 2, nil, []string{`unknown command "nope"`}},
		{"bad flag", nil, []string{"ids", "--nope"}, 2, nil, []string{"flag provided but not defined: -nope", "Usage: annals ids"}},
		{"missing store", nil, []string{"stats"}, 2, nil, []string{"set --store URL or ANNALS_STORE (e.g. sqlite:./annals.db)"}},
		{"missing argument", nil, []string{"events", "--store", db}, 2, nil, []string{"want ID, got 0 argument(s)", "annals help events"}},
		{"extra argument", nil, []string{"stats", "--store", db, "x"}, 2, nil, []string{`got 1 argument(s): "x"`}},
		{"unknown scheme", nil, []string{"stats", "--store", "mysql://x"}, 2, nil, []string{`unknown store URL "mysql://x"`, "sqlite:PATH", "annals help stats"}},
		{"empty id", nil, []string{"events", "--store", "memory:", ""}, 2, nil, []string{"empty", "annals help events"}},
		{"from after to", nil, []string{"events", "--store", "memory:", "Account|a-1", "--from", "10", "--to", "5"}, 2, nil, []string{"--from 10 is after --to 5"}},
		{"id without type", nil, []string{"events", "--store", "memory:", "a-1"}, 0, nil, []string{`no events stored for "a-1"`, "persistence ids are TYPE|ID"}},
		{"postgres unreachable", nil, []string{"stats", "--store", "postgres://postgres@127.0.0.1:1/x?connect_timeout=2"}, 1, nil, []string{"server unreachable", "scripts/services up postgres"}},
		{"missing file", nil, []string{"stats", "--store", db}, 1, nil, []string{"no database at", "annals init --store " + db}},
		{"missing file from env", []string{"ANNALS_STORE=" + db}, []string{"ids"}, 1, nil, []string{"annals init --store " + db}},
		{"migrate missing", nil, []string{"migrate", "--store", db}, 1, nil, []string{"annals init"}},
		{"demo still there", nil, []string{"help", "demo"}, 0, []string{"-accounts"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cli(t, tc.env, tc.args...).want(t, tc.code, tc.stdout, tc.stderr)
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "missing.db")); !os.IsNotExist(err) {
		t.Errorf("a reading command created the database file (%v)", err)
	}
}

// schemaPlan is the --json shape of init and migrate.
type schemaPlan struct {
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

func TestInitAndMigrate(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, k storeKind) {
		st := k.newStore(t)

		// A dry run prints the SQL and creates nothing, not even the
		// schema.
		var p schemaPlan
		decode(t, cli(t, nil, "init", "--store", st.url, "--dry-run", "--json"), &p)
		if p.Store != st.url || p.From != 0 || p.To != st.version || !p.DryRun || len(p.Steps) == 0 || p.Steps[0].From != 0 || p.Steps[len(p.Steps)-1].To != p.To ||
			!strings.Contains(p.Steps[0].SQL, "CREATE TABLE "+st.table("event_journal")) {
			t.Errorf("dry-run plan %+v", p)
		}
		dryRun := []string{fmt.Sprintf("schema version 0 → %d; would run (nothing changed)", st.version), "CREATE TABLE " + st.table("event_journal"), "journal_metadata", "snapshot", "projection_management"}
		if st.sqlite() {
			dryRun = append(dryRun, "CREATE TABLE projection_offset", "CREATE TABLE durable_state", fmt.Sprintf("UPDATE annals_schema SET version = %d", st.version))
		} else {
			dryRun = append(dryRun, "CREATE SCHEMA IF NOT EXISTS", "projection_offset_store")
		}
		cli(t, nil, "init", "--store", st.url, "--dry-run").want(t, 0, dryRun, nil)
		if st.exists(t) {
			t.Fatal("init --dry-run created the store")
		}

		// Reading (and deleting) commands on the missing store: exit 1,
		// naming the command that creates it; they create nothing.
		for _, args := range [][]string{
			{"stats"}, {"ids"}, {"events", "Account|a-1"}, {"snapshots", "Account|a-1"},
			{"tail", "--type", "Account", "--current"}, {"projections", "list"}, {"projections", "status"},
			{"delete-to", "Account|a-1", "3", "--yes"}, {"delete-snapshots", "Account|a-1", "--yes"}, {"check", "--short"},
		} {
			cli(t, st.env(), args...).want(t, 1, nil, st.missing())
		}
		cli(t, nil, "copy", "--from", st.url, "--to", "memory:").want(t, 1, nil, append([]string{"source:"}, st.missing()...))
		// migrate upgrades; it does not create (init does).
		cli(t, nil, "migrate", "--store", st.url).want(t, 1, nil, []string{"has no Annals schema to upgrade", "annals init --store " + st.url})
		if st.exists(t) {
			t.Fatal("a reading command or migrate created the store")
		}

		cli(t, nil, "init", "--store", st.url).want(t, 0, []string{fmt.Sprintf("created schema version %d", st.version)}, nil)
		if !st.exists(t) {
			t.Fatal("init did not create the store")
		}
		unchanged := st.watch(t)
		current := fmt.Sprintf("schema version %d is current; nothing to do", st.version)
		cli(t, nil, "migrate", "--store", st.url).want(t, 0, []string{current}, nil)
		cli(t, nil, "init", "--store", st.url).want(t, 0, []string{current}, nil)
		cli(t, nil, "migrate", "--store", st.url, "--dry-run").want(t, 0, []string{current}, nil)
		p = schemaPlan{}
		decode(t, cli(t, nil, "migrate", "--store", st.url, "--json"), &p)
		if p.From != p.To || p.DryRun || p.Steps == nil || len(p.Steps) != 0 {
			t.Errorf("migrate of a current schema: %+v", p)
		}
		unchanged("init and migrate of a current schema")
		cli(t, nil, "stats", "--store", st.url).want(t, 0, []string{"(total)", st.where()}, nil)
		cli(t, nil, "ids", "--store", st.url).want(t, 0, nil, []string{"no persistence ids"})
	})
}

// An older SQLite schema: reading refuses and names migrate; a dry run
// prints the step and changes nothing; migrate upgrades.
func TestMigrateAnOlderSQLiteSchema(t *testing.T) {
	t.Parallel()
	old := filepath.Join(t.TempDir(), "old.db")
	olderSchema(t, old)
	oldURL := "sqlite:" + old
	sum := fileSum(t, old)
	cli(t, nil, "stats", "--store", oldURL).want(t, 1, nil, []string{fmt.Sprintf("schema version 2 and this annals needs %d", sqlite.SchemaVersion), "annals migrate --store " + oldURL})
	var plan schemaPlan
	decode(t, cli(t, nil, "migrate", "--store", oldURL, "--dry-run", "--json"), &plan)
	if plan.From != 2 || plan.To != sqlite.SchemaVersion || !plan.DryRun || len(plan.Steps) != sqlite.SchemaVersion-2 || !strings.Contains(plan.Steps[0].SQL, "CREATE TABLE projection_offset") {
		t.Errorf("dry-run plan %+v", plan)
	}
	if fileSum(t, old) != sum {
		t.Fatal("migrate --dry-run changed the file")
	}
	plan.Steps = nil
	decode(t, cli(t, nil, "migrate", "--store", oldURL, "--json"), &plan)
	if plan.DryRun || len(plan.Steps) != sqlite.SchemaVersion-2 || plan.Steps[0].SQL != "" || plan.Steps[len(plan.Steps)-1].To != sqlite.SchemaVersion {
		t.Errorf("migrate result %+v", plan)
	}
	cli(t, nil, "stats", "--store", oldURL).want(t, 0, []string{"(total)"}, nil)
}

// A file that is not an Annals database: refused, untouched.
func TestInitRefusesAFileNotADatabase(t *testing.T) {
	t.Parallel()
	other := filepath.Join(t.TempDir(), "other.txt")
	if err := os.WriteFile(other, []byte("hello, this is not a database, not at all......................................................"), 0o600); err != nil {
		t.Fatal(err)
	}
	sum := fileSum(t, other)
	cli(t, nil, "init", "--store", "sqlite:"+other).want(t, 1, nil, []string{"not an SQLite database"})
	if fileSum(t, other) != sum {
		t.Error("init changed a file that is not a database")
	}
}

func TestIDs(t *testing.T) {
	t.Parallel()
	forEachFixture(t, func(t *testing.T, st testStore) {
		env := st.env()
		cli(t, env, "ids").want(t, 0, []string{"PERSISTENCE ID", "HIGHEST SEQ", "Account|a-1", "Cart|c-1", "Order|o-1"}, nil)
		cli(t, env, "ids", "--limit", "2").want(t, 0, []string{"Account|a-2"}, []string{"more ids: add --after 'Account|a-2'"})
		var all []string
		highest := map[string]int64{}
		after := ""
		for range 10 {
			var p idsReport
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
		var p idsReport
		decode(t, cli(t, env, "ids", "--type", "Cart", "--json"), &p)
		if len(p.IDs) != 2 || p.IDs[0].PersistenceID != "Cart|c-1" || p.IDs[0].Highest != 4 || p.NextAfter != "" {
			t.Errorf("ids of Cart: %+v", p)
		}
	})
}

func TestEvents(t *testing.T) {
	t.Parallel()
	forEachFixture(t, func(t *testing.T, st testStore) {
		env := st.env()
		r := cli(t, env, "events", "Account|a-1", "--from", "2", "--to", "4")
		r.want(t, 0, []string{"SEQ", "2026-01-02T03:04:07.123456Z", "json", "Deposited", "bank,odd", `{"amount":3}`}, nil)
		if n := strings.Count(r.stdout, "\n"); n != 4 {
			t.Errorf("%d lines for events 2..4 and a header:\n%s", n, r.stdout)
		}
		// Raw payloads: text quoted, binary in hex.
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
				e.EntityType != "Account" || e.Slice != annals.Slice("Account|a-1") || e.SerializerID != serialization.JSONID || e.Manifest != "Deposited" ||
				e.WriterID != "writer-1" || !slices.Equal(e.Tags, tags) || !jsonEqual(e.Payload, fmt.Sprintf(`{"amount": %d}`, seq)) ||
				e.PayloadBase64 != nil || e.PayloadSize != 13 || e.Metadata != nil {
				t.Errorf("event %+v", e)
			}
			// The offset, if any, is one tail --from-offset takes; on
			// SQLite, the ordering (Account|a-1 was written first).
			if e.Offset != nil {
				var o query.Offset
				if err := json.Unmarshal(e.Offset, &o); err != nil {
					t.Errorf("offset %s: %v", e.Offset, err)
				}
			}
			if want := fmt.Sprintf(`{"seq":%d}`, seq); st.sqlite() && string(e.Offset) != want {
				t.Errorf("offset of event %d: %s, want %s", seq, e.Offset, want)
			}
		}
		if lim := jsonLines[ev](t, cli(t, env, "events", "--json", "Account|a-1", "--limit", "2")); len(lim) != 2 || !reflect.DeepEqual(lim, evs[:2]) {
			t.Errorf("--limit 2: %+v", lim)
		}
		evs = jsonLines[ev](t, cli(t, env, "events", "Account|a-2", "--json"))
		if len(evs) != 3 || string(evs[0].PayloadBase64) != "text 1" || evs[0].Payload != nil || evs[0].Tags == nil || len(evs[0].Tags) != 0 ||
			string(evs[1].PayloadBase64) != "\x00\x01\x02\xff" || evs[1].Payload != nil || string(evs[1].Metadata) != "meta" ||
			evs[2].SerializerID != serialization.JSONID || evs[2].Payload != nil || string(evs[2].PayloadBase64) != "text 3" {
			t.Errorf("raw events (the JSON serializer with invalid JSON included) %+v", evs)
		}
		// Deleted events are not shown; an id with none says so.
		evs = jsonLines[ev](t, cli(t, env, "events", "Cart|c-2", "--json"))
		if len(evs) != 3 || evs[0].SequenceNr != 3 {
			t.Errorf("events of Cart|c-2 after deleting 1..2: %+v", evs)
		}
		cli(t, env, "events", "Cart|c-1").want(t, 0, nil, []string{"highest sequence number 4"})
		cli(t, env, "events", "Nobody|x").want(t, 0, nil, []string{`no events stored for "Nobody|x"`})
	})
}

func TestSnapshots(t *testing.T) {
	t.Parallel()
	forEachFixture(t, func(t *testing.T, st testStore) {
		env := st.env()
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
		if s0.SequenceNr != 5 || s1.SequenceNr != 3 || !jsonEqual(s0.Payload, `{"balance": 50}`) || s0.PayloadBase64 != nil || s0.SerializerID != serialization.JSONID ||
			s0.Manifest != "Account" || s0.PayloadSize != 15 || !s1.Timestamp.Equal(base.Add(3*time.Second)) {
			t.Errorf("snapshots %+v", out)
		}
		decode(t, cli(t, env, "snapshots", "Order|o-1", "--json"), &out)
		if out.Snapshots == nil || len(out.Snapshots) != 0 {
			t.Errorf("snapshots of an id without any: %+v", out)
		}
	})
}

// statsOut is the --json shape of stats.
type statsOut struct {
	Types        []statsFigures `json:"entity_types"`
	Total        statsFigures   `json:"total"`
	StorageBytes int64          `json:"storage_bytes"`
}

type statsFigures struct {
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

func TestStats(t *testing.T) {
	t.Parallel()
	forEachFixture(t, func(t *testing.T, st testStore) {
		env := st.env()
		cli(t, env, "stats").want(t, 0, []string{"ENTITY TYPE", "Account", "Cart", "Order", "(total)", "storage:", st.where()}, nil)
		var out statsOut
		decode(t, cli(t, env, "stats", "--json"), &out)
		byType := map[string]statsFigures{}
		for _, f := range out.Types {
			byType[f.EntityType] = f
		}
		acc, cart, ord := byType["Account"], byType["Cart"], byType["Order"]
		if len(out.Types) != 3 || acc.PersistenceIDs != 2 || acc.Events != 8 || acc.Highest != 5 || acc.Snapshots != 2 || acc.SnapshotBytes != 30 ||
			acc.PayloadBytes != 5*13+6+4+6 || acc.Oldest == nil || !acc.Oldest.Equal(base.Add(time.Second)) || acc.Newest == nil || !acc.Newest.Equal(base.Add(5*time.Second)) {
			t.Errorf("Account: %+v", acc)
		}
		if cart.PersistenceIDs != 2 || cart.Events != 3 || cart.Highest != 5 || cart.Snapshots != 0 || cart.PayloadBytes != 3*13 {
			t.Errorf("Cart (one id all deleted, one deleted to 2): %+v", cart)
		}
		if ord.PersistenceIDs != 1 || ord.Events != 2 || ord.Highest != 2 {
			t.Errorf("Order: %+v", ord)
		}
		if out.Total.Events != 13 || out.Total.PersistenceIDs != 5 || out.Total.Snapshots != 2 || out.Total.EntityType != "" || out.Total.Highest != 5 || out.StorageBytes <= 0 {
			t.Errorf("total %+v, storage %d", out.Total, out.StorageBytes)
		}
	})
}

// snapshotsPlan is the --json shape of delete-snapshots.
type snapshotsPlan struct {
	PersistenceID string  `json:"persistence_id"`
	From          int64   `json:"from"`
	To            int64   `json:"to"`
	Snapshots     []int64 `json:"snapshots"`
	DryRun        bool    `json:"dry_run"`
	Deleted       bool    `json:"deleted"`
}

func TestDeleteTo(t *testing.T) {
	t.Parallel()
	forEachFixture(t, func(t *testing.T, st testStore) {
		env := st.env()
		unchanged := st.watch(t)

		// Dry runs and refusals (stdin not a terminal, even answering y).
		for _, tc := range []struct {
			args   []string
			code   int
			stdout string
			stderr string
		}{
			{[]string{"delete-to", "Account|a-1", "3", "--dry-run"}, 0, `(sequence numbers 1–3); 2 kept; the highest sequence number stays 5;
the snapshot at 5 covers them`, ""},
			{[]string{"delete-to", "Account|a-1", "5", "--dry-run"}, 0, `would delete 5 events of "Account|a-1" in ` + st.kind, ""},
			{[]string{"delete-to", "Account|a-2", "2", "--dry-run"}, 0, `no snapshot covers them (Account|a-2 has none): Account|a-2's state is then rebuilt from the events kept alone`, ""},
			{[]string{"delete-to", "Account|a-2", "2", "--yes"}, 2, "", "refusing: no snapshot covers them (Account|a-2 has none)"},
			{[]string{"delete-to", "Account|a-1", "3"}, 2, "", "standard input is not a terminal; pass --yes"},
			{[]string{"delete-to", "Cart|c-1", "4", "--yes"}, 0, "nothing to delete", ""},
			{[]string{"delete-snapshots", "Account|a-1", "--dry-run"}, 0, `would delete 2 snapshots of "Account|a-1" at sequence numbers [5 3]`, ""},
			{[]string{"delete-snapshots", "Account|a-1", "--to", "4", "--dry-run"}, 0, `would delete 1 snapshots of "Account|a-1" at sequence numbers [3]`, ""},
			{[]string{"delete-snapshots", "Account|a-1"}, 2, "", "pass --yes"},
			{[]string{"delete-snapshots", "Account|a-1", "--to", "4"}, 2, "", "pass --yes"},
			{[]string{"delete-snapshots", "Order|o-1", "--yes"}, 0, "nothing to delete", ""},
		} {
			cliIn(t, env, strings.NewReader("y\n"), tc.args...).want(t, tc.code, []string{tc.stdout}, []string{tc.stderr})
		}
		var p deleteToReport
		decode(t, cli(t, env, "delete-to", "--dry-run", "--json", "Account|a-1", "3"), &p)
		where := p.Store
		if !strings.HasPrefix(where, st.kind+" ") || p != (deleteToReport{"Account|a-1", where, 3, 3, 1, 3, 5, 2, 5, true, true, false}) {
			t.Errorf("dry run %+v", p)
		}
		decode(t, cli(t, env, "delete-to", "--dry-run", "--json", "Account|a-1", "5"), &p)
		if p != (deleteToReport{"Account|a-1", where, 5, 5, 1, 5, 5, 0, 5, true, true, false}) {
			t.Errorf("dry run %+v", p)
		}
		decode(t, cli(t, env, "delete-to", "--dry-run", "--json", "Account|a-2", "2"), &p)
		if p != (deleteToReport{"Account|a-2", where, 2, 2, 1, 2, 3, 1, 0, false, true, false}) {
			t.Errorf("dry run of an uncovered deletion %+v", p)
		}
		var sp snapshotsPlan
		decode(t, cli(t, env, "delete-snapshots", "Account|a-1", "--from", "4", "--dry-run", "--json"), &sp)
		if sp.PersistenceID != "Account|a-1" || !slices.Equal(sp.Snapshots, []int64{5}) || !sp.DryRun || sp.Deleted || sp.From != 4 || sp.To != math.MaxInt64 {
			t.Errorf("snapshot dry run %+v", sp)
		}
		unchanged("a dry run or a refused deletion")

		decode(t, cli(t, env, "delete-to", "Account|a-1", "3", "--yes", "--json"), &p)
		if p != (deleteToReport{"Account|a-1", where, 3, 3, 1, 3, 5, 2, 5, true, false, true}) {
			t.Errorf("deletion %+v", p)
		}
		decode(t, cli(t, env, "delete-to", "Account|a-2", "2", "--yes", "--allow-uncovered", "--json"), &p)
		if !p.Deleted || p.Covered {
			t.Errorf("uncovered deletion with --allow-uncovered %+v", p)
		}
		evs := jsonLines[map[string]any](t, cli(t, env, "events", "--json", "Account|a-1"))
		if len(evs) != 2 || evs[0]["sequence_nr"] != 4.0 {
			t.Errorf("after delete-to 3: %v", evs)
		}
		cli(t, env, "delete-to", "Account|a-1", "3", "--yes").want(t, 0, []string{"nothing to delete"}, nil)
		cli(t, env, "delete-to", "Account|a-1", "x").want(t, 2, nil, []string{`SEQ "x"`})
	})
}

// Every event of an id: the highest number stays.
func TestDeleteEveryEvent(t *testing.T) {
	t.Parallel()
	forEachFixture(t, func(t *testing.T, st testStore) {
		env := st.env()
		var p deleteToReport
		decode(t, cli(t, env, "delete-to", "Account|a-1", "5", "--yes", "--json"), &p)
		if p != (deleteToReport{"Account|a-1", p.Store, 5, 5, 1, 5, 5, 0, 5, true, false, true}) {
			t.Errorf("deletion %+v", p)
		}
		cli(t, env, "delete-to", "Order|o-1", "1", "--yes").want(t, 2, nil, []string{"refusing: no snapshot covers them", "--allow-uncovered"})
		cli(t, env, "delete-to", "Order|o-1", "1", "--yes", "--allow-uncovered").want(t, 0, []string{`deleted 1 events of "Order|o-1" in `, `(sequence numbers 1–1); 1 kept; the highest sequence number stays 2`}, nil)
		withStore(t, st.url, func(s *stores.Store) {
			for pid, want := range map[string]int64{"Account|a-1": 5, "Order|o-1": 2} {
				if h, err := s.Journal.HighestSequenceNr(context.Background(), pid, 0); err != nil || h != want {
					t.Errorf("highest of %s after delete-to: %d, %v; want %d", pid, h, err, want)
				}
			}
		})
		var page idsReport
		decode(t, cli(t, env, "ids", "--type", "Account", "--json"), &page)
		if len(page.IDs) != 2 || page.IDs[0].PersistenceID != "Account|a-1" || page.IDs[0].Highest != 5 {
			t.Errorf("ids after deleting every event of Account|a-1: %+v", page)
		}
		cli(t, env, "events", "Account|a-1").want(t, 0, nil, []string{"highest sequence number 5"})
		if evs := jsonLines[map[string]any](t, cli(t, env, "events", "--json", "Order|o-1")); len(evs) != 1 || evs[0]["sequence_nr"] != 2.0 {
			t.Errorf("Order|o-1 after delete-to 1: %v", evs)
		}
	})
}

func TestDeleteSnapshots(t *testing.T) {
	t.Parallel()
	forEachFixture(t, func(t *testing.T, st testStore) {
		env := st.env()
		var sp snapshotsPlan
		decode(t, cli(t, env, "delete-snapshots", "Account|a-1", "--from", "4", "--yes", "--json"), &sp)
		if !slices.Equal(sp.Snapshots, []int64{5}) || !sp.Deleted || sp.DryRun || sp.From != 4 {
			t.Errorf("deletion %+v", sp)
		}
		cli(t, env, "snapshots", "Account|a-1").want(t, 0, []string{`{"balance":30}`}, nil)
		if r := cli(t, env, "snapshots", "Account|a-1"); strings.Contains(r.stdout, `{"balance":50}`) {
			t.Errorf("the deleted snapshot is still listed:\n%s", r.stdout)
		}
		withStore(t, st.url, func(s *stores.Store) {
			snaps, err := listSnapshots(context.Background(), s.Snapshots, "Account|a-1", 0, math.MaxInt64)
			if err != nil || len(snaps) != 1 || snaps[0].Metadata.SequenceNr != 3 {
				t.Errorf("snapshots left: %+v, %v", snaps, err)
			}
		})
		cli(t, env, "delete-snapshots", "Account|a-1", "--yes").want(t, 0, []string{`deleted 1 snapshots of "Account|a-1" at sequence numbers [3]`}, nil)
		var out statsOut
		decode(t, cli(t, env, "stats", "--json"), &out)
		if out.Total.Snapshots != 0 || out.Total.SnapshotBytes != 0 {
			t.Errorf("snapshots left: %+v", out.Total)
		}
		if !st.sqlite() {
			if n := pgRows(t, st.schema)["snapshot"]; n != 0 {
				t.Errorf("%d snapshot rows left", n)
			}
		}
		cli(t, env, "delete-to", "Account|a-1", "x").want(t, 2, nil, []string{`SEQ "x"`})
	})
}

func TestConfirm(t *testing.T) {
	for _, tc := range []struct {
		answer      string
		interactive bool
		yes         bool
		want        error
	}{
		{"", false, true, nil},
		{"y\n", true, false, nil},
		{"YES\n", true, false, nil},
		{"n\n", true, false, errCancelled},
		{"\n", true, false, errCancelled},
		{"", true, false, errCancelled}, // end of input
	} {
		var stderr strings.Builder
		e := &env{stderr: &stderr, stdin: newReader(tc.answer), interactive: tc.interactive}
		if err := e.confirm("Delete?", tc.yes); err != tc.want {
			t.Errorf("answer %q: %v, want %v", tc.answer, err, tc.want)
		}
		if tc.interactive && !tc.yes && stderr.String() != "Delete? [y/N] " {
			t.Errorf("prompt %q", stderr.String())
		}
	}
	e := &env{stdin: newReader("y\n")}
	var ue *usageError
	if err := e.confirm("Delete?", false); !asUsage(err, &ue) {
		t.Errorf("without a terminal: %v, want a usage error", err)
	}
}
