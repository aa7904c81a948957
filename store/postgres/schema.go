package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// The schema's check and migration, through the layout (see
// layout.check and layout.pending): Annals' schema is annals_schema.go,
// the r2dbc layout's r2dbc_schema.go.

// querier is what the schema reads need of a pool or a transaction.
type querier interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}

// schemaSQL replaces "{s}" in body with the quoted schema.
func schemaSQL(schema, body string) string {
	return strings.ReplaceAll(body, "{s}", pgx.Identifier{schema}.Sanitize())
}

// checkSchema picks the layout of the schema, and checks the schema on it
// (layout.check).
func (s *Store) checkSchema(ctx context.Context) error {
	l, err := s.layoutOf(ctx, s.pool)
	if err != nil {
		return err
	}
	if err := s.useLayout(l); err != nil {
		return err
	}
	return s.layout.check(ctx)
}

// Migrate creates the schema and its tables, or upgrades them to
// SchemaVersion, in one transaction. It is idempotent, and safe to run from
// several processes at once (they take turns on an advisory lock). On the
// r2dbc layout it creates the layout's missing tables and changes none
// that exist (see LayoutR2DBC).
func (s *Store) Migrate(ctx context.Context) error {
	_, err := s.migrate(ctx)
	return err
}

// migrate runs Migrate and returns the steps it ran.
func (s *Store) migrate(ctx context.Context) ([]step, error) {
	ran, _, err := s.migrateLayout(ctx)
	return ran, err
}

// migrateLayout runs Migrate and returns the steps it ran and the layout
// of the schema.
func (s *Store) migrateLayout(ctx context.Context) ([]step, Layout, error) {
	var ran []step
	var layout Layout
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lockKey("migrate."+s.cfg.schema)); err != nil {
			return err
		}
		var err error
		if layout, err = s.layoutOf(ctx, tx); err != nil {
			return err
		}
		if ran, err = newLayout(s, layout).pending(ctx, tx); err != nil {
			return err
		}
		for _, st := range ran {
			for _, stmt := range st.sql {
				if _, err := tx.Exec(ctx, stmt); err != nil {
					return fmt.Errorf("postgres: migrate schema %q to version %d: %w", s.cfg.schema, st.to, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrNewerSchema) || errors.Is(err, ErrNotAnnals) || errors.Is(err, ErrWrongLayout) {
			return nil, 0, err
		}
		return nil, 0, fmt.Errorf("postgres: migrate schema %q: %w", s.cfg.schema, err)
	}
	return ran, layout, nil
}

// step is one schema version step: its statements, the last of which
// records the new version.
type step struct {
	from, to int
	sql      []string
}
