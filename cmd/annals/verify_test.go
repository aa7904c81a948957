package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/kafka/kafkatest"
	"github.com/annals-go/annals/store/kafka/wire/wiretest"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

// verifyJSON runs verify --json with args, wants exit code, and decodes
// its output, every field known.
func verifyJSON(t *testing.T, code int, args ...string) verifyResult {
	t.Helper()
	r := cli(t, nil, append([]string{"verify", "--json"}, args...)...)
	if r.code != code {
		t.Fatalf("verify %q: want exit %d; got %s", args, code, r)
	}
	var out verifyResult
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("verify %q: %v\n%s", args, err, r)
	}
	return out
}

// problemsText is the problems one per line, "ID: problem".
func problemsText(ps []verifyProblem) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "%s: %s\n", p.PersistenceID, p.Problem)
	}
	return b.String()
}

// wantProblems fails the test unless ps are, in order, problems of the
// given ids whose texts contain the given parts.
func wantProblems(t *testing.T, what string, ps []verifyProblem, want []verifyProblem) {
	t.Helper()
	ok := len(ps) == len(want)
	for i := 0; ok && i < len(ps); i++ {
		ok = ps[i].PersistenceID == want[i].PersistenceID && strings.Contains(ps[i].Problem, want[i].Problem)
	}
	if !ok {
		t.Errorf("%s: problems\n%swant\n%s", what, problemsText(ps), problemsText(want))
	}
}

// TestVerifyHealthy: a sound store reads whole, every id, event and
// snapshot counted, and verify changes nothing.
func TestVerifyHealthy(t *testing.T) {
	t.Parallel()
	forEachFixture(t, func(t *testing.T, st testStore) {
		before := contents(t, st.url)
		var out verifyResult
		decode(t, cli(t, nil, "verify", "--store", st.url, "--json"), &out)
		if !out.OK || out.IDs != 5 || out.Events == 0 || out.Snapshots == 0 || len(out.Problems) != 0 || out.Integrity.Checked != st.sqlite() ||
			out.Payloads.Read != out.Events+out.Snapshots || out.Kafka != nil {
			t.Errorf("verify of a sound store: %+v", out)
		}
		cli(t, nil, "verify", "--store", st.url).want(t, 0, []string{"problems   0"}, nil)
		equalContents(t, "before and after verify", before, contents(t, st.url))
	})
}

// TestVerifyFindsDamage: on SQLite, an event row whose tags do not decode
// is named with its id, and the other ids are still read; copy names the
// id it stopped at; garbage in an index page is found by the integrity
// check. Both exit 1.
func TestVerifyFindsDamage(t *testing.T) {
	t.Parallel()
	t.Run("row", func(t *testing.T) {
		t.Parallel()
		st := fixture(t, sqliteKind)
		rawExec(t, st.path, `UPDATE event_journal SET tags = '{not json' WHERE persistence_id = 'Account|a-2' AND sequence_nr = 2`)
		r := cli(t, nil, "verify", "--store", st.url, "--json")
		var out verifyResult
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != 1 {
			t.Fatalf("verify of a damaged row: %v; %s", err, r)
		}
		if out.OK || out.IDs != 5 || len(out.Problems) != 1 || out.Problems[0].PersistenceID != "Account|a-2" || !strings.Contains(out.Problems[0].Problem, "corrupt tags of event 2") {
			t.Errorf("verify of a damaged row: %+v", out)
		}
		tgt := "sqlite:" + st.path + ".copy"
		cli(t, nil, "copy", "--from", st.url, "--to", tgt).want(t, 1, nil, []string{`copying "Account|a-2"`, "annals verify"})
	})
	t.Run("index page", func(t *testing.T) {
		t.Parallel()
		st := fixture(t, sqliteKind)
		var root, pageSize int64
		db := rawDB(t, st.path)
		if _, err := db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRow(`SELECT rootpage FROM sqlite_master WHERE type = 'index' AND tbl_name = 'event_journal' ORDER BY name LIMIT 1`).Scan(&root); err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRow(`PRAGMA page_size`).Scan(&pageSize); err != nil {
			t.Fatal(err)
		}
		db.Close()
		f, err := os.OpenFile(st.path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte(strings.Repeat("garbage!", int(pageSize)/8)), (root-1)*pageSize); err != nil {
			t.Fatal(err)
		}
		f.Close()
		r := cli(t, nil, "verify", "--store", st.url, "--json")
		var out verifyResult
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != 1 {
			t.Fatalf("verify of a damaged index: %v; %s", err, r)
		}
		if out.OK || !out.Integrity.Checked || len(out.Integrity.Problems) == 0 {
			t.Errorf("verify of a damaged index page: %+v", out)
		}
	})
}

func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func rawExec(t *testing.T, path, stmt string) {
	t.Helper()
	db := rawDB(t, path)
	defer db.Close()
	if _, err := db.Exec(stmt); err != nil {
		t.Fatal(err)
	}
}

// TestVerifyUnknownSerializer: events and a snapshot stored under
// serializer ids no registry of annals knows are problems, named by id
// and sequence number (recovery would fail on them), until --registry
// names the ids; what was not decoded is said per serializer.
func TestVerifyUnknownSerializer(t *testing.T) {
	t.Parallel()
	st := fixture(t, sqliteKind)
	rawExec(t, st.path, `UPDATE event_journal SET serializer_id = 77 WHERE persistence_id = 'Account|a-1' AND sequence_nr IN (2, 4)`)
	rawExec(t, st.path, `UPDATE snapshot SET serializer_id = 78 WHERE persistence_id = 'Account|a-1' AND sequence_nr = 5`)

	out := verifyJSON(t, 1, "--store", st.url)
	if out.OK || out.IDs != 5 || out.Events != 13 || out.Snapshots != 1 || out.Payloads.Read != 14 {
		t.Errorf("verify: %+v", out)
	}
	wantProblems(t, "unknown serializers", out.Problems, []verifyProblem{
		{"Account|a-1", `events 2, 4: serializer 77 is not in the registry (manifest "Deposited")`},
		{"Account|a-1", `snapshot 5: serializer 78 is not in the registry (manifest "Account")`},
	})
	wantSerializers := []payloadStats{
		{SerializerID: 4, Name: "bytes", Known: true, Payloads: 2, Decoded: 2},
		{SerializerID: 31, Name: "json", Known: true, Payloads: 9},
		{SerializerID: 77, Payloads: 2},
		{SerializerID: 78, Payloads: 1},
	}
	if !slices.Equal(out.Payloads.Serializers, wantSerializers) {
		t.Errorf("serializers\n%+v\nwant\n%+v", out.Payloads.Serializers, wantSerializers)
	}
	if len(out.Payloads.NotChecked) != 1 || !strings.Contains(out.Payloads.NotChecked[0], "serializer 31 (json): 9 of 9 payloads not decoded and their manifests not checked") {
		t.Errorf("not checked: %q", out.Payloads.NotChecked)
	}
	cli(t, nil, "verify", "--store", st.url).want(t, 1, []string{
		"problems   2",
		`Account|a-1: events 2, 4: serializer 77 is not in the registry`,
		"not checked: serializer 31 (json): 9 of 9 payloads not decoded",
	}, []string{"2 problems"})

	named := verifyJSON(t, 0, "--store", st.url, "--registry", "77", "--registry", "78")
	if !named.OK || len(named.Problems) != 0 || len(named.Payloads.NotChecked) != 3 ||
		!strings.Contains(named.Payloads.NotChecked[1], "serializer 77: 2 of 2 payloads not decoded and their manifests not checked (annals has no decoder for this id") {
		t.Errorf("verify with the ids named: %+v", named)
	}
}

// TestVerifyRegistry: --registry names serializer ids, the manifests an
// id accepts, the demo's types (then decoded), or a file of those; a
// payload annals has a type for that does not decode is a problem.
func TestVerifyRegistry(t *testing.T) {
	t.Parallel()
	st := sqliteKind.newStore(t)
	cli(t, nil, "init", "--store", st.url).want(t, 0, nil, nil)
	withStore(t, st.url, func(s *stores.Store) {
		ctx := context.Background()
		for pid, events := range map[string][]journal.Repr{
			"Account|b-1": {
				{Payload: []byte(`{"amount":5}`), SerializerID: 31, Manifest: "bank.Deposited.v2"},
				{Payload: []byte(`not json`), SerializerID: 31, Manifest: "bank.Withdrawn"},
				{Payload: []byte(`{"amt":1}`), SerializerID: 31, Manifest: "bank.Deposited"}, // read through the behavior's adapter
			},
			"Other|o-1": {
				{Payload: []byte("raw"), SerializerID: 77, Manifest: "X"},
				{Payload: []byte("bytes"), SerializerID: 4},
				{Payload: []byte(`{}`), SerializerID: 31, Manifest: "Other"},
			},
		} {
			w := journal.AtomicWrite{PersistenceID: pid}
			for i, e := range events {
				e.PersistenceID, e.SequenceNr, e.WriterID, e.Timestamp = pid, int64(i+1), "w", base
				w.Events = append(w.Events, e)
			}
			if res, err := s.Journal.Write(ctx, []journal.AtomicWrite{w}); err != nil || res != nil {
				t.Fatal(res, err)
			}
		}
		sn := snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: "Account|b-1", SequenceNr: 3, Timestamp: base},
			Payload: []byte(`{"balance":4,"ops":3}`), SerializerID: 31, Manifest: "bank.Account"}
		if err := s.Snapshots.Save(ctx, sn); err != nil {
			t.Fatal(err)
		}
	})
	file := filepath.Join(t.TempDir(), "serializers.txt")
	if err := os.WriteFile(file, []byte("# the ids our services register\n77   # the legacy one\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	unknown77 := verifyProblem{"Other|o-1", `event 1: serializer 77 is not in the registry (manifest "X")`}
	for _, c := range []struct {
		name     string
		registry []string
		code     int
		problems []verifyProblem
		// per serializer id: manifests checked, decoded
		checked, decoded map[int32]int64
	}{
		{name: "built-in", code: 1, problems: []verifyProblem{unknown77},
			checked: map[int32]int64{}, decoded: map[int32]int64{4: 1}},
		{name: "an id", registry: []string{"77"}, code: 0,
			checked: map[int32]int64{}, decoded: map[int32]int64{4: 1}},
		{name: "a file", registry: []string{"@" + file}, code: 0,
			checked: map[int32]int64{}, decoded: map[int32]int64{4: 1}},
		{name: "an id and the manifests it accepts", registry: []string{"77:Y,Z"}, code: 1,
			problems: []verifyProblem{{"Other|o-1", `event 1: manifest "X" is not one the registry knows for serializer 77`}},
			checked:  map[int32]int64{77: 1}, decoded: map[int32]int64{4: 1}},
		{name: "JSON manifests", registry: []string{"77:X", "31:bank.Deposited.v2,bank.Withdrawn,bank.Deposited,bank.Account"}, code: 1,
			problems: []verifyProblem{{"Other|o-1", `event 3: manifest "Other" is not one the registry knows for serializer 31 (json)`}},
			checked:  map[int32]int64{31: 5, 77: 1}, decoded: map[int32]int64{4: 1}},
		{name: "the demo", registry: []string{"demo", "77:X"}, code: 1,
			problems: []verifyProblem{
				{"Account|b-1", `event 2: the payload does not decode: serialization: cannot decode payload (serializer id 31, manifest "bank.Withdrawn")`},
				{"Other|o-1", `event 3: manifest "Other" is not one the registry knows for serializer 31 (json)`},
			},
			checked: map[int32]int64{31: 5, 77: 1}, decoded: map[int32]int64{4: 1, 31: 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			args := []string{"--store", st.url}
			for _, r := range c.registry {
				args = append(args, "--registry", r)
			}
			out := verifyJSON(t, c.code, args...)
			if out.IDs != 2 || out.Events != 6 || out.Snapshots != 1 || out.Payloads.Read != 7 || out.OK != (c.code == 0) {
				t.Errorf("verify: %+v", out)
			}
			wantProblems(t, c.name, out.Problems, c.problems)
			for _, s := range out.Payloads.Serializers {
				if s.ManifestsChecked != c.checked[s.SerializerID] || s.Decoded != c.decoded[s.SerializerID] {
					t.Errorf("serializer %d: %d manifests checked, %d decoded; want %d, %d",
						s.SerializerID, s.ManifestsChecked, s.Decoded, c.checked[s.SerializerID], c.decoded[s.SerializerID])
				}
			}
		})
	}
	for _, bad := range []string{"x:y", "", "@" + filepath.Join(t.TempDir(), "missing.txt")} {
		cli(t, nil, "verify", "--store", st.url, "--registry", bad).want(t, 2, nil, []string{"--registry"})
	}
}

// TestVerifyKafkaHead: with no replicator running, the Kafka journal's
// events are only in its topic: verify reads them there (the ids in the
// topics' unreplicated heads, their events), says how far replication is
// behind, and names the record the replicator cannot decode, with the id
// whose replay fails on it.
func TestVerifyKafkaHead(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Real(t)
	dsn, _ := pgtest.Schema(t)
	prefix := kafkatest.Prefix(t, brokers, "verify")
	topic := prefix + "Acct"
	url := "kafka://" + brokers[0] + "/?topic_prefix=" + prefix + "&eventual=" + dsn
	cli(t, nil, "init", "--store", url).want(t, 0, nil, nil)
	// Each id's first write reads it: a Mark, then its Append.
	withStore(t, url, func(s *stores.Store) {
		for _, w := range []struct {
			pid      string
			from, to int64
		}{{"Acct|v-1", 1, 2}, {"Acct|v-1", 3, 4}, {"Acct|v-2", 1, 2}} {
			aw := journal.AtomicWrite{PersistenceID: w.pid}
			for seq := w.from; seq <= w.to; seq++ {
				aw.Events = append(aw.Events, journal.Repr{PersistenceID: w.pid, SequenceNr: seq, Payload: fmt.Appendf(nil, `{"n":%d}`, seq),
					SerializerID: 31, Manifest: "acct.Event", WriterID: "w", Timestamp: base})
			}
			if res, err := s.Journal.Write(context.Background(), []journal.AtomicWrite{aw}); err != nil || res != nil {
				t.Fatal(res, err)
			}
		}
	})
	// An Append of Acct|v-1 whose value is not the events its header says.
	poison := wiretest.ProduceUndecodable(t, brokers, topic, "Acct|v-1", 5)

	out := verifyJSON(t, 1, "--store", url)
	if out.OK || out.IDs != 2 || out.Events != 6 || out.Snapshots != 0 || out.Payloads.Read != 6 {
		t.Errorf("verify: %+v", out)
	}
	wantProblems(t, "an undecodable record", out.Problems, []verifyProblem{
		{"Acct|v-1", fmt.Sprintf("the record at %s/%d offset %d does not decode", topic, poison.Partition, poison.Offset)},
		{"Acct|v-1", "replay failed after event 4"},
	})
	if out.Kafka == nil || !slices.Equal(out.Kafka.Topics, []string{topic}) {
		t.Fatalf("kafka: %+v, want topic %s", out.Kafka, topic)
	}
	var behind, records, appends, events, marks, undecodable, ids int64
	for _, p := range out.Kafka.Partitions {
		if p.Pointer != nil || p.Start != 0 || p.Behind != p.End || p.Lost != 0 {
			t.Errorf("partition %d, nothing replicated: %+v", p.Partition, p)
		}
		behind, records, appends, events = behind+p.Behind, records+p.Records, appends+p.Appends, events+p.Events
		marks, undecodable, ids = marks+p.Marks, undecodable+p.Undecodable, ids+int64(p.IDs)
	}
	// Two Marks (each id's first write), three appends of six events, the
	// undecodable record.
	if behind != 6 || records != 6 || appends != 3 || events != 6 || marks != 2 || undecodable != 1 || ids != 2 {
		t.Errorf("partitions %+v: %d behind, %d records, %d appends, %d events, %d marks, %d undecodable, %d ids; want 6, 6, 3, 6, 2, 1, 2",
			out.Kafka.Partitions, behind, records, appends, events, marks, undecodable, ids)
	}
	cli(t, nil, "verify", "--store", url).want(t, 1, []string{
		"replication  1 topic, ",
		"read         2 ids, 6 events, 0 snapshots",
		"problems     2",
		fmt.Sprintf("behind: %s/%d: nothing applied", topic, poison.Partition),
		fmt.Sprintf("Acct|v-1: the record at %s/%d offset %d does not decode", topic, poison.Partition, poison.Offset),
	}, nil)
	typed := verifyJSON(t, 0, "--store", url, "--type", "Other")
	if typed.IDs != 0 || typed.Kafka == nil || len(typed.Kafka.Topics) != 0 {
		t.Errorf("verify --type Other (no topic): %+v", typed)
	}
}
