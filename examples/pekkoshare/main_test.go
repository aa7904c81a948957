package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals/internal/fixtures"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

// loadPekkoRows inserts the rows of a fixture .jsonl file into the
// schema's table with plain SQL, as the JVM service stored them (bytea
// columns are hexadecimal there).
func loadPekkoRows(t *testing.T, conn *pgx.Conn, schema, table, file string) {
	t.Helper()
	// The rows a real Pekko Persistence R2DBC 1.2.0 service wrote (the
	// fixture's README says how).
	data, err := os.ReadFile(filepath.Join(fixtures.Dir(t, "pekko-r2dbc"), file))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		var row map[string]any
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatal(err)
		}
		for _, col := range []string{"event_payload", "meta_payload", "snapshot"} {
			if v, ok := row[col].(string); ok {
				row[col] = `\x` + v
			}
		}
		b, _ := json.Marshal(row)
		q := pgx.Identifier{schema, table}.Sanitize()
		if _, err := conn.Exec(context.Background(), `INSERT INTO `+q+` SELECT * FROM json_populate_record(NULL::`+q+`, $1::json)`, string(b)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRunOnPekkoRows: the example, on a schema holding the rows a Pekko
// service wrote, recovers the JVM's entity from its snapshot, continues it
// and lists the events by slices in the JVM's order.
func TestRunOnPekkoRows(t *testing.T) {
	dsn, schema := pgtest.Schema(t)
	ctx := context.Background()
	var out bytes.Buffer
	if err := run(ctx, &out, dsn, "none", "", true); err != nil { // creates the plugin's tables
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, pgtest.Server(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	loadPekkoRows(t, conn, schema, "event_journal", "event_journal.jsonl")
	loadPekkoRows(t, conn, schema, "snapshot", "snapshot.jsonl")

	out.Reset()
	if err := run(ctx, &out, dsn, "f-1", "from Go", false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`Fixture|f-1 recovered: count 7, name "beta", texts ["one" "two" "four" "five" "six"]`,
		`Fixture|f-1 persisted event 8: count 8, texts ["one" "two" "four" "five" "six" "from Go"]`,
		"Fixture|f-1 #1 slice 1015 {N:1 Text:one} tags [fixture-odd]",
		"Fixture|f-2 #3 slice 1016 {N:3 Text:f2-3} tags [fixture-odd]",
		"Fixture|ünï-ç #1 slice 124 {N:1 Text:ünï-ç 日本 😀} tags [fixture-odd]",
		"Fixture|f-1 #8 slice 1015 {N:8 Text:from Go} tags []",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "Fixture|f-2 #2") {
		t.Errorf("the delete marker was listed:\n%s", out.String())
	}
}
