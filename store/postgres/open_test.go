package postgres_test

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

func TestOpenRefuses(t *testing.T) {
	t.Parallel()
	base := pgtest.Server(t)
	// A port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := l.Addr().String()
	l.Close()

	missing, _ := pgtest.Schema(t)
	newer, newerSchema := pgtest.Schema(t)
	foreign, foreignSchema := pgtest.Schema(t)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	s, err := postgres.Open(ctx, newer, postgres.WithMigrate(true))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := conn.Exec(ctx, `UPDATE `+pgx.Identifier{newerSchema, "annals_schema"}.Sanitize()+` SET version = version + 1`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{foreignSchema}.Sanitize()+`; CREATE TABLE `+pgx.Identifier{foreignSchema, "event_journal"}.Sanitize()+` (x int)`); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name, dsn string
		opts      []postgres.Option
		want      error
		says      string
	}{
		{"unreachable server", "postgres://postgres@" + closedPort + "/annals_test?connect_timeout=2", nil, postgres.ErrUnreachable, "scripts/services up postgres"},
		{"missing schema", missing, nil, postgres.ErrSchemaMissing, "annals init"},
		{"newer schema", newer, nil, postgres.ErrNewerSchema, fmt.Sprintf("version %d", postgres.SchemaVersion+1)},
		{"newer schema, migrating", newer, []postgres.Option{postgres.WithMigrate(true)}, postgres.ErrNewerSchema, fmt.Sprintf("version %d", postgres.SchemaVersion+1)},
		{"foreign tables", foreign, []postgres.Option{postgres.WithMigrate(true)}, postgres.ErrNotAnnals, "event_journal"},
		{"schema not an identifier", pgtest.WithParam(base, "schema", `x"; DROP TABLE y; --`), nil, postgres.ErrInvalidConfig, "identifier"},
		{"not a postgres URL", "mysql://localhost/x", nil, postgres.ErrInvalidConfig, "postgres://"},
		{"TLS required, server without TLS", pgtest.WithParam(base, "sslmode", "require"), nil, postgres.ErrUnreachable, "TLS"},
		{"bad ordering", pgtest.WithParam(base, "ordering", "random"), nil, postgres.ErrInvalidConfig, "ordering"},
		{"bad duration", pgtest.WithParam(base, "behind_current_time", "soon"), nil, postgres.ErrInvalidConfig, "behind_current_time"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := postgres.Open(ctx, c.dsn, c.opts...)
			if err == nil {
				s.Close()
				t.Fatalf("Open succeeded, want %v", c.want)
			}
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
				t.Errorf("Open: %v\nwant an error wrapping %v that says %q", err, c.want, c.says)
			}
		})
	}
	// Refusals changed nothing: the missing schema is still missing, the
	// foreign table has no Annals tables beside it.
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM information_schema.tables WHERE table_schema = $1`, foreignSchema).Scan(&n); err != nil || n != 1 {
		t.Errorf("the foreign schema holds %d tables (%v), want its 1", n, err)
	}
}

func TestMigrateIsIdempotentAndDryRunChangesNothing(t *testing.T) {
	t.Parallel()
	dsn, _ := pgtest.Schema(t)
	ctx := t.Context()
	s, err := postgres.Open(ctx, dsn, postgres.WithMigrate(true))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m, err := postgres.NewMigrator(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if pending, err := m.PendingMigrations(ctx); err != nil || len(pending) != 0 {
		t.Fatalf("after migrating, pending %v (%v), want none", pending, err)
	}
	for range 3 {
		if err := s.Migrate(ctx); err != nil {
			t.Fatalf("migrate again: %v", err)
		}
	}
	mustWrite := func(pid string) {
		t.Helper()
		res, err := s.Journal().Write(ctx, []journal.AtomicWrite{{PersistenceID: pid, Events: []journal.Repr{{PersistenceID: pid, SequenceNr: 1, Payload: []byte("x")}}}})
		if err != nil || res != nil {
			t.Fatal(res, err)
		}
	}
	mustWrite("M|1")
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.Journal().HighestSequenceNr(ctx, "M|1", 0); n != 1 {
		t.Errorf("migrating again lost data: highest %d", n)
	}

	// A second schema: dry run lists the statements and creates nothing.
	dsn2, schema2 := pgtest.Schema(t)
	conn, err := pgx.Connect(ctx, pgtest.Server(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	_, err = postgres.Open(ctx, dsn2)
	if !errors.Is(err, postgres.ErrSchemaMissing) {
		t.Fatalf("Open of an empty schema: %v", err)
	}
	m2, err := postgres.NewMigrator(ctx, dsn2)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	steps, err := m2.PendingMigrations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != postgres.SchemaVersion || !strings.Contains(steps[0].SQL, "CREATE TABLE "+pgx.Identifier{schema2}.Sanitize()+".event_journal") {
		t.Errorf("dry run steps: %+v", steps)
	}
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema2).Scan(&exists); err != nil || exists {
		t.Errorf("the dry run created schema %s (%v)", schema2, err)
	}
}

func TestURLParameters(t *testing.T) {
	t.Parallel()
	dsn, schema := pgtest.Schema(t)
	dsn = pgtest.WithParam(pgtest.WithParam(pgtest.WithParam(dsn, "statement_timeout", "1234"), "pool_max_conns", "3"), "ordering", "timestamp")
	s, err := postgres.Open(t.Context(), pgtest.WithParam(dsn, "migrate", "true"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var timeout string
	if err := s.Pool().QueryRow(t.Context(), `SHOW statement_timeout`).Scan(&timeout); err != nil || timeout != "1234ms" {
		t.Errorf("statement_timeout %q (%v), want 1234ms from the URL", timeout, err)
	}
	if got := s.Pool().Config().MaxConns; got != 3 {
		t.Errorf("pool size %d, want 3 from the URL", got)
	}
	if s.Schema() != schema || s.Ordering() != postgres.TimestampOrder {
		t.Errorf("schema %q ordering %v, want %q and timestamp", s.Schema(), s.Ordering(), schema)
	}
}
