package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

// TestReadModelTablesLandInTheStoresSchema: a read-model table created
// through Projections().InTx with an unqualified name lands in the store's
// schema, not in public, on both layouts; two stores of one database in
// schemas of their own each get their own table of that name; the search
// path is the transaction's only.
func TestReadModelTablesLandInTheStoresSchema(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		opts []postgres.Option
	}{
		{"annals", nil},
		{"r2dbc", []postgres.Option{postgres.WithLayout(postgres.LayoutR2DBC)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			var b [4]byte
			_, _ = rand.Read(b[:])
			table := "readmodel_" + hex.EncodeToString(b[:]) // unique: a failure would leave it in public
			server := pgtest.Server(t)
			conn, err := pgx.Connect(ctx, server)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.WithoutCancel(ctx))
			t.Cleanup(func() { // in case it landed in public
				_, _ = conn.Exec(context.WithoutCancel(ctx), `DROP TABLE IF EXISTS public.`+table)
			})

			// Two services sharing the database, each in a schema of its own.
			schemas := make([]string, 2)
			for i := range schemas {
				dsn, schema := pgtest.Schema(t)
				schemas[i] = schema
				s, err := postgres.Open(ctx, dsn, append([]postgres.Option{postgres.WithMigrate(true)}, c.opts...)...)
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				var path string
				err = s.Projections().InTx(ctx, func(tx pgx.Tx) error {
					if err := tx.QueryRow(ctx, `SHOW search_path`).Scan(&path); err != nil {
						return err
					}
					if _, err := tx.Exec(ctx, `CREATE TABLE `+table+` (id text PRIMARY KEY, balance bigint NOT NULL)`); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, `INSERT INTO `+table+` VALUES ($1, $2)`, schema, int64(i))
					return err
				})
				if err != nil {
					t.Fatalf("store %d: create the read model's table in InTx: %v", i, err)
				}
				if !strings.HasPrefix(path, `"`+schema+`"`) && !strings.HasPrefix(path, schema) {
					t.Errorf("store %d: search path in InTx %q, want the store's schema %s first", i, path, schema)
				}
			}

			var inPublic bool
			if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, "public."+table).Scan(&inPublic); err != nil {
				t.Fatal(err)
			}
			if inPublic {
				t.Errorf("the table %s landed in public", table)
			}
			for i, schema := range schemas {
				var id string
				var balance int64
				err := conn.QueryRow(ctx, `SELECT id, balance FROM `+pgx.Identifier{schema, table}.Sanitize()).Scan(&id, &balance)
				if err != nil || id != schema || balance != int64(i) {
					t.Errorf("%s.%s holds %q %d (%v); want its own store's row %q %d", schema, table, id, balance, err, schema, i)
				}
			}
		})
	}
}

// TestReadModelSearchPathIsTheTransactions: InTx puts the schema before
// the session's search path for its transaction only (SET LOCAL): the
// next InTx on the same connection finds the session's path unchanged and
// puts the schema once, not twice.
func TestReadModelSearchPathIsTheTransactions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dsn, schema := pgtest.Schema(t)
	// One connection, so the statement after InTx runs on the
	// transaction's connection.
	s, err := postgres.Open(ctx, pgtest.WithParam(dsn, "pool_max_conns", "1"), postgres.WithMigrate(true))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var before, during, after string
	read := func(into *string) func(tx pgx.Tx) error {
		return func(tx pgx.Tx) error { return tx.QueryRow(ctx, `SHOW search_path`).Scan(into) }
	}
	conn, err := pgx.Connect(ctx, pgtest.Server(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := conn.QueryRow(ctx, `SHOW search_path`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	if err := s.Projections().InTx(ctx, read(&during)); err != nil {
		t.Fatal(err)
	}
	if err := s.Projections().InTx(ctx, read(&after)); err != nil {
		t.Fatal(err)
	}
	if want := `"` + schema + `", ` + before; during != want && during != schema+", "+before {
		t.Errorf("search path in InTx %q, want %q (the schema, then the session's)", during, want)
	}
	if after != during {
		t.Errorf("a second InTx sees %q, want %q (the schema put once, not stacked)", after, during)
	}
}
