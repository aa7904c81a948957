package cql_test

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/annals-go/annals/store/kafka/eventual/cql"
	"github.com/annals-go/annals/store/kafka/eventual/cql/cqltest"
	"github.com/annals-go/annals/store/kafka/eventual/eventualtest"
	"github.com/annals-go/annals/store/kafka/wire/wiretest"
)

// timeColumns are left out of the comparison with the Scala replicator's
// rows: the times it ran at, and the random record ids (checked instead
// to be the same within a journal).
var timeColumns = map[string][]string{
	"journal":     {"meta_record_id"},
	"metajournal": {"created", "updated", "record_id"},
	"pointer2":    {"created", "updated"},
	"setting":     {"timestamp"},
}

// rowKeys name a row of each table.
var rowKeys = map[string][]string{
	"journal":     {"topic", "id", "seq_nr"},
	"metajournal": {"topic", "id"},
	"pointer2":    {"topic", "partition"},
	"setting":     {"key"},
}

// TestReplicatesAsScala replicates the records the Scala Kafka Journal
// wrote to a real broker and compares the keyspace with the one its own
// replicator wrote from them, row by row and column by column.
func TestReplicatesAsScala(t *testing.T) {
	want := scalaRows(t)
	s, session, keyspace := cqltest.Open(t, cql.WithOrigin("anchors-replicator"))
	eventualtest.ReplicateScalaWritten(t, s)
	eventualtest.CompareWithScala(t, s)
	got := dump(t, session, keyspace)
	for table, rows := range want {
		t.Run(table, func(t *testing.T) {
			compare(t, table, got[table], rows)
		})
	}
	// Every journal row carries its head's record id.
	ids := map[string]string{}
	for _, m := range got["metajournal"] {
		ids[m["topic"].(string)+"/"+m["id"].(string)] = fmt.Sprint(m["record_id"])
	}
	for _, r := range got["journal"] {
		if k := r["topic"].(string) + "/" + r["id"].(string); fmt.Sprint(r["meta_record_id"]) != ids[k] {
			t.Errorf("journal row %s %v has record id %v, its head %v", k, r["seq_nr"], r["meta_record_id"], ids[k])
		}
	}
}

// scalaRows reads scala-written/cassandra-journal-keyspace.jsonl by table.
func scalaRows(t *testing.T) map[string][]map[string]any {
	t.Helper()
	f, err := os.Open(filepath.Join(wiretest.Dir(t), "scala-written", "cassandra-journal-keyspace.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]map[string]any{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		table := m["_table"].(string)
		delete(m, "_table")
		if table != "locks" {
			out[table] = append(out[table], m)
		}
	}
	return out
}

// dump reads every row of the keyspace's tables in the fixture's form:
// blobs as 0x-hex, times in UTC, NULLs as zero values.
func dump(t *testing.T, session *gocql.Session, keyspace string) map[string][]map[string]any {
	t.Helper()
	out := map[string][]map[string]any{}
	for table := range rowKeys {
		it := session.Query(`SELECT * FROM ` + keyspace + `.` + table).Iter()
		for {
			row := map[string]any{}
			if !it.MapScan(row) {
				break
			}
			for k, v := range row {
				switch v := v.(type) {
				case []byte:
					row[k] = "0x" + hex.EncodeToString(v)
				case time.Time:
					row[k] = v.UTC()
				case []string:
					// An empty set is no cell in Cassandra: the driver
					// gives nil, the fixture's dump [].
					if v == nil {
						row[k] = []string{}
					}
				}
			}
			b, err := json.Marshal(row)
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			out[table] = append(out[table], m)
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func rowKey(table string, m map[string]any) string {
	var parts []string
	for _, k := range rowKeys[table] {
		parts = append(parts, fmt.Sprint(m[k]))
	}
	return strings.Join(parts, " ")
}

func compare(t *testing.T, table string, got, want []map[string]any) {
	t.Helper()
	index := func(rows []map[string]any) map[string]map[string]any {
		m := map[string]map[string]any{}
		for _, r := range rows {
			m[rowKey(table, r)] = r
		}
		return m
	}
	g, w := index(got), index(want)
	var keys []string
	for k := range w {
		keys = append(keys, k)
	}
	for k := range g {
		if _, ok := w[k]; !ok {
			t.Errorf("%s: row %s is not in the Scala replicator's keyspace", table, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		gr, ok := g[k]
		if !ok {
			t.Errorf("%s: row %s missing", table, k)
			continue
		}
		for col, wv := range w[k] {
			if slices.Contains(timeColumns[table], col) {
				continue
			}
			gj, _ := json.Marshal(gr[col])
			wj, _ := json.Marshal(wv)
			if string(gj) != string(wj) {
				t.Errorf("%s row %s: %s = %s, Scala wrote %s", table, k, col, gj, wj)
			}
		}
	}
}

// TestSavePointerKeepsCreated: a pointer row is inserted with its created
// time by the first SavePointer and only its offset and updated time move
// after, for the store that wrote it (which no longer reads it first) as
// for another store on the same keyspace.
func TestSavePointerKeepsCreated(t *testing.T) {
	s, session, keyspace := cqltest.Open(t)
	ctx := t.Context()
	other, err := cql.New(ctx, session, keyspace, false, "", cql.WithConsistency(gocql.One, gocql.One))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	steps := []struct {
		store  *cql.Store
		offset int64
		at     time.Time
	}{
		{s, 10, t0},
		{s, 20, t0.Add(time.Minute)},
		{other, 30, t0.Add(2 * time.Minute)},
		{s, 40, t0.Add(3 * time.Minute)},
	}
	for i, st := range steps {
		if err := st.store.SavePointer(ctx, "topic-a", 3, st.offset, st.at); err != nil {
			t.Fatal(err)
		}
		var offset int64
		var created, updated time.Time
		if err := session.Query(`SELECT offset, created, updated FROM `+keyspace+`.pointer2 WHERE topic = ? AND partition = ?`, "topic-a", int32(3)).
			WithContext(ctx).Scan(&offset, &created, &updated); err != nil {
			t.Fatal(err)
		}
		if offset != st.offset || !created.Equal(t0) || !updated.Equal(st.at) {
			t.Errorf("after save %d: offset %d, created %v, updated %v; want %d, %v, %v", i, offset, created, updated, st.offset, t0, st.at)
		}
		if got, ok, err := s.Pointer(ctx, "topic-a", 3); err != nil || !ok || got != st.offset {
			t.Errorf("after save %d: Pointer = %d, %v, %v; want %d", i, got, ok, err, st.offset)
		}
	}
}
