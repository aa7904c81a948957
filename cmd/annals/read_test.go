package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
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
		{"dash h", nil, []string{"stats", "-h"}, 0, nil, []string{"Usage: annals stats", "--store"}},
		{"unknown command", nil, []string{"nope"}, 2, nil, []string{`unknown command "nope"`}},
		{"bad flag", nil, []string{"ids", "--nope"}, 2, nil, []string{"flag provided but not defined: -nope", "Usage: annals ids"}},
		{"missing store", nil, []string{"stats"}, 2, nil, []string{"set --store URL or ANNALS_STORE (e.g. sqlite:./annals.db)"}},
		{"missing argument", nil, []string{"events", "--store", db}, 2, nil, []string{"want ID, got 0 argument(s)", "annals help events"}},
		{"extra argument", nil, []string{"stats", "--store", db, "x"}, 2, nil, []string{`got 1 argument(s): "x"`}},
		{"unknown scheme", nil, []string{"stats", "--store", "mysql://x"}, 1, nil, []string{`unknown store URL "mysql://x"`, "sqlite:PATH"}},
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

func TestInitAndMigrate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "new.db")
	url := "sqlite:" + path

	// A dry run on a missing file prints the whole schema and creates nothing.
	r := cli(t, nil, "init", "--store", url, "--dry-run")
	r.want(t, 0, []string{"schema version 0 → 3", "CREATE TABLE event_journal", "CREATE TABLE projection_offset", "UPDATE annals_schema SET version = 3"}, nil)
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("init --dry-run created the file (%v)", err)
	}
	cli(t, nil, "init", "--store", url).want(t, 0, []string{"created schema version 3"}, nil)
	sum := fileSum(t, path)
	cli(t, nil, "init", "--store", url).want(t, 0, []string{"schema version 3 is current; nothing to do"}, nil)
	cli(t, nil, "migrate", "--store", url, "--dry-run").want(t, 0, []string{"nothing to do"}, nil)
	if fileSum(t, path) != sum {
		t.Error("init on a current schema changed the file")
	}

	// An older schema: reading refuses and names migrate; a dry run prints
	// the step and changes nothing; migrate upgrades.
	old := filepath.Join(dir, "old.db")
	olderSchema(t, old)
	oldURL := "sqlite:" + old
	sum = fileSum(t, old)
	cli(t, nil, "stats", "--store", oldURL).want(t, 1, nil, []string{"schema version 2 and this annals needs 3", "annals migrate --store " + oldURL})
	var plan struct {
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
	decode(t, cli(t, nil, "migrate", "--store", oldURL, "--dry-run", "--json"), &plan)
	if plan.From != 2 || plan.To != 3 || !plan.DryRun || len(plan.Steps) != 1 || !strings.Contains(plan.Steps[0].SQL, "CREATE TABLE projection_offset") {
		t.Errorf("dry-run plan %+v", plan)
	}
	if fileSum(t, old) != sum {
		t.Fatal("migrate --dry-run changed the file")
	}
	plan.Steps = nil
	decode(t, cli(t, nil, "migrate", "--store", oldURL, "--json"), &plan)
	if plan.DryRun || len(plan.Steps) != 1 || plan.Steps[0].SQL != "" || plan.Steps[0].To != 3 {
		t.Errorf("migrate result %+v", plan)
	}
	cli(t, nil, "stats", "--store", oldURL).want(t, 0, []string{"(total)"}, nil)

	// Not an Annals file: refused, untouched.
	other := filepath.Join(dir, "other.txt")
	if err := os.WriteFile(other, []byte("hello, this is not a database, not at all......................................................"), 0o600); err != nil {
		t.Fatal(err)
	}
	sum = fileSum(t, other)
	cli(t, nil, "init", "--store", "sqlite:"+other).want(t, 1, nil, []string{"not an SQLite database"})
	if fileSum(t, other) != sum {
		t.Error("init changed a file that is not a database")
	}
}

func TestIDs(t *testing.T) {
	t.Parallel()
	env := []string{"ANNALS_STORE=sqlite:" + fixture(t, t.TempDir())}
	r := cli(t, env, "ids")
	r.want(t, 0, []string{"PERSISTENCE ID", "Account|a-1", "Cart|c-1", "Order|o-1"}, nil)
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
	want := []string{"Account|a-1", "Account|a-2", "Cart|c-1", "Cart|c-2", "Order|o-1"}
	if !slices.Equal(all, want) {
		t.Errorf("paged ids %v, want %v", all, want)
	}
	if highest["Cart|c-1"] != 4 || highest["Account|a-1"] != 5 {
		t.Errorf("highest numbers %v", highest)
	}
	var p page
	decode(t, cli(t, env, "ids", "--type", "Cart", "--json"), &p)
	if len(p.IDs) != 2 || p.NextAfter != "" {
		t.Errorf("ids of Cart: %+v", p)
	}
	cli(t, env, "ids", "--limit", "2").want(t, 0, []string{"Account|a-2"}, []string{"more ids: add --after 'Account|a-2'"})
}

func TestEvents(t *testing.T) {
	t.Parallel()
	env := []string{"ANNALS_STORE=sqlite:" + fixture(t, t.TempDir())}
	r := cli(t, env, "events", "Account|a-1", "--from", "2", "--to", "4")
	r.want(t, 0, []string{"SEQ", "2026-01-02T03:04:07.123456Z", "json", "Deposited", "bank,odd", `{"amount":3}`}, nil)
	if n := strings.Count(r.stdout, "\n"); n != 4 {
		t.Errorf("%d lines for events 2..4 and a header:\n%s", n, r.stdout)
	}
	// Raw payloads: text quoted, binary in hex.
	cli(t, env, "events", "Account|a-2").want(t, 0, []string{`"text 1"`, "0x000102ff", "bytes"}, nil)

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
	evs := jsonLines[ev](t, cli(t, env, "events", "--json", "Account|a-1", "--limit", "2"))
	if len(evs) != 2 {
		t.Fatalf("%d events, want 2", len(evs))
	}
	e := evs[1]
	if e.PersistenceID != "Account|a-1" || e.SequenceNr != 2 || string(e.Offset) != `{"seq":2}` || !e.Timestamp.Equal(base.Add(2*time.Second)) ||
		e.EntityType != "Account" || e.SerializerID != 33 || e.Manifest != "Deposited" || e.WriterID != "writer-1" ||
		!slices.Equal(e.Tags, []string{"bank"}) || !jsonEqual(e.Payload, `{"amount": 2}`) || e.PayloadBase64 != nil || e.PayloadSize != 13 {
		t.Errorf("event %+v", e)
	}
	evs = jsonLines[ev](t, cli(t, env, "events", "Account|a-2", "--json"))
	if len(evs) != 3 || string(evs[1].PayloadBase64) != "\x00\x01\x02\xff" || evs[1].Payload != nil || string(evs[1].Metadata) != "meta" || len(evs[0].Tags) != 0 || evs[0].Tags == nil {
		t.Errorf("raw events %+v", evs)
	}
	// Deleted events are not shown; an id with none says so.
	evs = jsonLines[ev](t, cli(t, env, "events", "Cart|c-2", "--json"))
	if len(evs) != 3 || evs[0].SequenceNr != 3 {
		t.Errorf("events of Cart|c-2 after deleting 1..2: %+v", evs)
	}
	cli(t, env, "events", "Cart|c-1").want(t, 0, nil, []string{"highest sequence number 4"})
	cli(t, env, "events", "Nobody|x").want(t, 0, nil, []string{`no events stored for "Nobody|x"`})
}

func TestSnapshots(t *testing.T) {
	t.Parallel()
	env := []string{"ANNALS_STORE=sqlite:" + fixture(t, t.TempDir())}
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
	if len(out.Snapshots) != 2 || out.Snapshots[0].SequenceNr != 5 || out.Snapshots[1].SequenceNr != 3 || !jsonEqual(out.Snapshots[0].Payload, `{"balance": 50}`) || !out.Snapshots[1].Timestamp.Equal(base.Add(3*time.Second)) {
		t.Errorf("snapshots %+v", out)
	}
	decode(t, cli(t, env, "snapshots", "Order|o-1", "--json"), &out)
	if out.Snapshots == nil || len(out.Snapshots) != 0 {
		t.Errorf("snapshots of an id without any: %+v", out)
	}
}

func TestStats(t *testing.T) {
	t.Parallel()
	env := []string{"ANNALS_STORE=sqlite:" + fixture(t, t.TempDir())}
	cli(t, env, "stats").want(t, 0, []string{"ENTITY TYPE", "Account", "Cart", "Order", "(total)", "storage:"}, nil)
	type figures struct {
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
	var st struct {
		Types        []figures `json:"entity_types"`
		Total        figures   `json:"total"`
		StorageBytes int64     `json:"storage_bytes"`
	}
	decode(t, cli(t, env, "stats", "--json"), &st)
	byType := map[string]figures{}
	for _, f := range st.Types {
		byType[f.EntityType] = f
	}
	acc, cart := byType["Account"], byType["Cart"]
	if len(st.Types) != 3 || acc.PersistenceIDs != 2 || acc.Events != 8 || acc.Highest != 5 || acc.Snapshots != 2 ||
		acc.PayloadBytes != 5*13+6+4+6 || !acc.Oldest.Equal(base.Add(time.Second)) || !acc.Newest.Equal(base.Add(5*time.Second)) {
		t.Errorf("Account: %+v", acc)
	}
	if cart.PersistenceIDs != 2 || cart.Events != 3 || cart.Highest != 5 || cart.Snapshots != 0 {
		t.Errorf("Cart (one id all deleted, one deleted to 2): %+v", cart)
	}
	if st.Total.Events != 13 || st.Total.PersistenceIDs != 5 || st.Total.Snapshots != 2 || st.Total.EntityType != "" || st.StorageBytes <= 0 {
		t.Errorf("total %+v, storage %d", st.Total, st.StorageBytes)
	}
}

func TestDeleteTo(t *testing.T) {
	t.Parallel()
	path := fixture(t, t.TempDir())
	env := []string{"ANNALS_STORE=sqlite:" + path}
	sum := fileSum(t, path)
	cli(t, env, "delete-to", "Account|a-1", "3", "--dry-run").want(t, 0, []string{`would delete 3 events of "Account|a-1" (sequence numbers 1–3); 2 kept; the highest sequence number stays 5`}, nil)
	type plan struct {
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
	var p plan
	decode(t, cli(t, env, "delete-to", "--dry-run", "--json", "Account|a-1", "3"), &p)
	if p != (plan{"Account|a-1", 3, 3, 1, 3, 5, 2, true, false}) {
		t.Errorf("dry run %+v", p)
	}
	// Without a terminal and without --yes: refused.
	cliIn(t, env, strings.NewReader("y\n"), "delete-to", "Account|a-1", "3").want(t, 2, nil, []string{"standard input is not a terminal; pass --yes"})
	if fileSum(t, path) != sum {
		t.Fatal("a dry run or a refused deletion changed the file")
	}
	decode(t, cli(t, env, "delete-to", "Account|a-1", "3", "--yes", "--json"), &p)
	if p != (plan{"Account|a-1", 3, 3, 1, 3, 5, 2, false, true}) {
		t.Errorf("deletion %+v", p)
	}
	evs := jsonLines[map[string]any](t, cli(t, env, "events", "--json", "Account|a-1"))
	if len(evs) != 2 || evs[0]["sequence_nr"] != 4.0 {
		t.Errorf("after delete-to 3: %v", evs)
	}
	cli(t, env, "delete-to", "Account|a-1", "3", "--yes").want(t, 0, []string{"nothing to delete"}, nil)
	cli(t, env, "delete-to", "Account|a-1", "x").want(t, 2, nil, []string{`SEQ "x"`})
}

func TestDeleteSnapshots(t *testing.T) {
	t.Parallel()
	path := fixture(t, t.TempDir())
	env := []string{"ANNALS_STORE=sqlite:" + path}
	sum := fileSum(t, path)
	cli(t, env, "delete-snapshots", "Account|a-1", "--to", "4", "--dry-run").want(t, 0, []string{`would delete 1 snapshots of "Account|a-1" at sequence numbers [3]`}, nil)
	cli(t, env, "delete-snapshots", "Account|a-1").want(t, 2, nil, []string{"pass --yes"})
	if fileSum(t, path) != sum {
		t.Fatal("a dry run or a refused deletion changed the file")
	}
	var out struct {
		PersistenceID string  `json:"persistence_id"`
		From          int64   `json:"from"`
		To            int64   `json:"to"`
		Snapshots     []int64 `json:"snapshots"`
		DryRun        bool    `json:"dry_run"`
		Deleted       bool    `json:"deleted"`
	}
	decode(t, cli(t, env, "delete-snapshots", "Account|a-1", "--from", "4", "--yes", "--json"), &out)
	if !slices.Equal(out.Snapshots, []int64{5}) || !out.Deleted || out.From != 4 {
		t.Errorf("deletion %+v", out)
	}
	cli(t, env, "snapshots", "Account|a-1").want(t, 0, []string{`{"balance":30}`}, nil)
	if r := cli(t, env, "snapshots", "Account|a-1"); strings.Contains(r.stdout, `{"balance":50}`) {
		t.Errorf("the deleted snapshot is still listed:\n%s", r.stdout)
	}
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
