package postgres_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals/internal/fixtures"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

// fixturePath returns the path of a file of the rows and DDL a real
// Pekko Persistence R2DBC 1.2.0 service wrote (see the fixture's
// README.md); a missing fixture fails the test when ANNALS_TEST_REQUIRE
// lists fixtures (CI) and skips it otherwise.
func fixturePath(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(fixtures.Dir(t, "pekko-r2dbc"), name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("Pekko R2DBC fixture: %v", err)
	}
	return p
}

// column is one column as psql's \d prints it.
type column struct{ name, typ, nullable, def string }

// tableDef is a table as psql's \d prints it: its columns in order and its
// indexes ("name" PRIMARY KEY, btree (a, b)), sorted.
type tableDef struct {
	columns []column
	indexes []string
}

// readSchemaFixture parses a <table>.schema.txt fixture (\d output).
func readSchemaFixture(t testing.TB, table string) tableDef {
	t.Helper()
	f, err := os.Open(fixturePath(t, table+".schema.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var def tableDef
	section := "header"
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "----"):
			section = "columns"
		case strings.TrimSpace(line) == "Indexes:":
			section = "indexes"
		case strings.TrimSpace(line) == "":
			if section == "columns" {
				section = "after"
			}
		case section == "columns":
			f := strings.Split(line, "|")
			if len(f) != 5 {
				t.Fatalf("%s.schema.txt: column line %q", table, line)
			}
			def.columns = append(def.columns, column{strings.TrimSpace(f[0]), strings.TrimSpace(f[1]), strings.TrimSpace(f[3]), strings.TrimSpace(f[4])})
		case section == "indexes":
			def.indexes = append(def.indexes, strings.TrimSpace(line))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(def.indexes)
	return def
}

// readSchema reads a table of a schema in the form of readSchemaFixture,
// from the catalog.
func readSchema(t testing.TB, conn *pgx.Conn, schema, table string) tableDef {
	t.Helper()
	ctx := context.Background()
	var def tableDef
	rows, err := conn.Query(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod),
		CASE WHEN a.attnotnull THEN 'not null' ELSE '' END, COALESCE(pg_get_expr(d.adbin, d.adrelid), '')
		FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`,
		pgx.Identifier{schema, table}.Sanitize())
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var c column
		if err := rows.Scan(&c.name, &c.typ, &c.nullable, &c.def); err != nil {
			t.Fatal(err)
		}
		def.columns = append(def.columns, c)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows, err = conn.Query(ctx, `SELECT c.relname, i.indisprimary, i.indisunique, pg_get_indexdef(i.indexrelid)
		FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = $1::regclass`,
		pgx.Identifier{schema, table}.Sanitize())
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name, indexDef string
		var primary, unique bool
		if err := rows.Scan(&name, &primary, &unique, &indexDef); err != nil {
			t.Fatal(err)
		}
		_, using, _ := strings.Cut(indexDef, " USING ")
		kind := ""
		switch {
		case primary:
			kind = "PRIMARY KEY, "
		case unique:
			kind = "UNIQUE, "
		}
		def.indexes = append(def.indexes, `"`+name+`" `+kind+using)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(def.indexes)
	return def
}

// connect opens a plain connection to the test server, closed with t.
func connect(t testing.TB) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), pgtest.Server(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// tablesOf lists the tables of a schema.
func tablesOf(t testing.TB, conn *pgx.Conn, schema string) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// pekkoTables are the plugin's tables, all six, which the r2dbc layout
// creates with the plugin's DDL.
var pekkoTables = []string{"durable_state", "event_journal", "projection_management", "projection_offset_store", "projection_timestamp_offset_store", "snapshot"}

// r2dbcTables are the tables the r2dbc layout creates: the plugin's and
// the membership tables of Annals' own.
var r2dbcTables = append([]string{"cluster_leases", "cluster_members"}, pekkoTables...)

// TestR2DBCSchemaIsPekkos: Migrate on the r2dbc layout creates exactly the
// tables, columns, types, nullability, defaults and indexes of Pekko
// Persistence R2DBC 1.2.0's DDL as psql showed them in the fixtures, and no
// other table but the membership tables; migrating again changes nothing.
func TestR2DBCSchemaIsPekkos(t *testing.T) {
	t.Parallel()
	fixturePath(t, "event_journal.schema.txt")
	dsn, schema := pgtest.Schema(t)
	for range 2 { // the second run finds every table
		s, err := postgres.Open(context.Background(), dsn, postgres.WithLayout(postgres.LayoutR2DBC), postgres.WithMigrate(true))
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	conn := connect(t)
	if got := tablesOf(t, conn, schema); !slices.Equal(got, r2dbcTables) {
		t.Errorf("the r2dbc layout created the tables %v, want exactly %v", got, r2dbcTables)
	}
	for _, table := range pekkoTables {
		t.Run(table, func(t *testing.T) {
			want, got := readSchemaFixture(t, table), readSchema(t, conn, schema, table)
			if !slices.Equal(got.columns, want.columns) {
				t.Errorf("columns:\n got %v\nwant %v", got.columns, want.columns)
			}
			if !slices.Equal(got.indexes, want.indexes) {
				t.Errorf("indexes:\n got %q\nwant %q", got.indexes, want.indexes)
			}
		})
	}
}

// pekkoDDL creates the plugin's tables, durable_state included, in schema
// with plain SQL (the fixture DDL as the plugin's script has it), as a JVM
// service's operator would.
func pekkoDDL(t testing.TB, conn *pgx.Conn, schema string) {
	t.Helper()
	ctx := context.Background()
	q := pgx.Identifier{schema}.Sanitize()
	for _, stmt := range []string{
		`CREATE SCHEMA ` + q,
		`CREATE TABLE ` + q + `.event_journal(slice INT NOT NULL, entity_type VARCHAR(255) NOT NULL, persistence_id VARCHAR(255) NOT NULL,
			seq_nr BIGINT NOT NULL, db_timestamp timestamp with time zone NOT NULL, event_ser_id INTEGER NOT NULL,
			event_ser_manifest VARCHAR(255) NOT NULL, event_payload BYTEA NOT NULL, deleted BOOLEAN DEFAULT FALSE NOT NULL,
			writer VARCHAR(255) NOT NULL, adapter_manifest VARCHAR(255), tags TEXT ARRAY, meta_ser_id INTEGER,
			meta_ser_manifest VARCHAR(255), meta_payload BYTEA, PRIMARY KEY(persistence_id, seq_nr))`,
		`CREATE INDEX event_journal_slice_idx ON ` + q + `.event_journal(slice, entity_type, db_timestamp, seq_nr)`,
		`CREATE TABLE ` + q + `.snapshot(slice INT NOT NULL, entity_type VARCHAR(255) NOT NULL, persistence_id VARCHAR(255) NOT NULL,
			seq_nr BIGINT NOT NULL, write_timestamp BIGINT NOT NULL, ser_id INTEGER NOT NULL, ser_manifest VARCHAR(255) NOT NULL,
			snapshot BYTEA NOT NULL, meta_ser_id INTEGER, meta_ser_manifest VARCHAR(255), meta_payload BYTEA, PRIMARY KEY(persistence_id))`,
		`CREATE TABLE ` + q + `.durable_state (slice INT NOT NULL, entity_type VARCHAR(255) NOT NULL, persistence_id VARCHAR(255) NOT NULL,
			revision BIGINT NOT NULL, db_timestamp timestamp with time zone NOT NULL, state_ser_id INTEGER NOT NULL,
			state_ser_manifest VARCHAR(255), state_payload BYTEA NOT NULL, tags TEXT ARRAY, PRIMARY KEY(persistence_id, revision))`,
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
}

// TestR2DBCLayoutChoice: a schema's layout is detected from its tables, a
// layout asked for that the schema does not hold is an ErrWrongLayout
// naming both, CommitOrder is refused on the r2dbc layout, and the URL
// parameter layout= is checked.
func TestR2DBCLayoutChoice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := connect(t)

	// Schemas made once: Annals', the store's r2dbc layout, the plugin's
	// own DDL (with durable_state).
	annalsDSN, _ := pgtest.Schema(t)
	if s, err := postgres.Open(ctx, annalsDSN, postgres.WithMigrate(true)); err != nil {
		t.Fatal(err)
	} else {
		s.Close()
	}
	r2dbcDSN, _ := pgtest.Schema(t)
	if s, err := postgres.Open(ctx, pgtest.WithParam(r2dbcDSN, "layout", "r2dbc"), postgres.WithMigrate(true)); err != nil {
		t.Fatal(err)
	} else {
		s.Close()
	}
	pekkoDSN, pekkoSchema := pgtest.Schema(t)
	pekkoDDL(t, conn, pekkoSchema)
	// With the query index LayoutR2DBC advises, which the plugin ignores.
	if _, err := conn.Exec(ctx, `CREATE INDEX ON `+pgx.Identifier{pekkoSchema, "event_journal"}.Sanitize()+` (entity_type, db_timestamp, seq_nr, persistence_id)`); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name    string
		dsn     string
		opts    []postgres.Option
		layout  postgres.Layout // when it opens
		wantErr error
		names   []string // the error names these
	}{
		{"annals detected", annalsDSN, nil, postgres.LayoutAnnals, nil, nil},
		{"annals asked", annalsDSN, []postgres.Option{postgres.WithLayout(postgres.LayoutAnnals)}, postgres.LayoutAnnals, nil, nil},
		{"annals asked as r2dbc", annalsDSN, []postgres.Option{postgres.WithLayout(postgres.LayoutR2DBC)}, 0, postgres.ErrWrongLayout, []string{"annals", "r2dbc"}},
		{"annals migrated as r2dbc", annalsDSN, []postgres.Option{postgres.WithLayout(postgres.LayoutR2DBC), postgres.WithMigrate(true)}, 0, postgres.ErrWrongLayout, []string{"annals", "r2dbc"}},
		{"r2dbc detected", r2dbcDSN, nil, postgres.LayoutR2DBC, nil, nil},
		{"r2dbc by URL", pgtest.WithParam(r2dbcDSN, "layout", "r2dbc"), nil, postgres.LayoutR2DBC, nil, nil},
		{"r2dbc asked as annals", pgtest.WithParam(r2dbcDSN, "layout", "annals"), nil, 0, postgres.ErrWrongLayout, []string{"annals", "r2dbc"}},
		{"r2dbc migrated as annals", r2dbcDSN, []postgres.Option{postgres.WithLayout(postgres.LayoutAnnals), postgres.WithMigrate(true)}, 0, postgres.ErrWrongLayout, []string{"annals", "r2dbc"}},
		{"r2dbc with commit order", r2dbcDSN, []postgres.Option{postgres.WithOrdering(postgres.CommitOrder)}, 0, postgres.ErrInvalidConfig, []string{"commit", "r2dbc"}},
		{"r2dbc with commit order by URL", pgtest.WithParam(r2dbcDSN, "ordering", "commit"), nil, 0, postgres.ErrInvalidConfig, []string{"commit", "r2dbc"}},
		{"pekko's own DDL detected", pekkoDSN, nil, postgres.LayoutR2DBC, nil, nil},
		{"pekko's own DDL migrated", pekkoDSN, []postgres.Option{postgres.WithMigrate(true)}, postgres.LayoutR2DBC, nil, nil},
		{"unknown layout", pgtest.WithParam(r2dbcDSN, "layout", "jdbc"), nil, 0, postgres.ErrInvalidConfig, []string{"jdbc"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := postgres.Open(ctx, c.dsn, c.opts...)
			if c.wantErr != nil {
				if err == nil {
					s.Close()
					t.Fatalf("Open succeeded, want %v", c.wantErr)
				}
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("Open: %v, want %v", err, c.wantErr)
				}
				for _, n := range c.names {
					if !strings.Contains(err.Error(), n) {
						t.Errorf("Open: %v, does not name %q", err, n)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer s.Close()
			if s.Layout() != c.layout {
				t.Errorf("layout %v, want %v", s.Layout(), c.layout)
			}
			if c.layout == postgres.LayoutR2DBC && s.Ordering() != postgres.TimestampOrder {
				t.Errorf("ordering %v on the r2dbc layout, want timestamp", s.Ordering())
			}
		})
	}
	// Migrating the plugin's own schema added the projection and
	// membership tables and left its durable_state alone (it has no
	// durable_state_slice_idx).
	if got := tablesOf(t, conn, pekkoSchema); !slices.Equal(got, r2dbcTables) {
		t.Errorf("the plugin's schema holds %v after Migrate, want %v", got, r2dbcTables)
	}
	if got := readSchema(t, conn, pekkoSchema, "durable_state").indexes; len(got) != 1 {
		t.Errorf("Migrate changed the plugin's durable_state: indexes %q, want its primary key only", got)
	}
}
