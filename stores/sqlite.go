package stores

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/annals-go/annals/store/sqlite"
)

// sqliteURL refuses, touching nothing, a sqlite: URL that names no file.
func sqliteURL(url string) error {
	if _, err := sqlite.NewMigrator(url); err != nil {
		return BadURL(err)
	}
	return nil
}

// openSQLite opens "sqlite:PATH", a database file of store/sqlite; its
// Store is the *sqlite.Store, which implements every capability of
// package admin, and its read model is the file itself (*sql.Tx).
func openSQLite(ctx context.Context, url string, cfg config) (*Stack, error) {
	m, err := sqlite.NewMigrator(url)
	if err != nil {
		return nil, BadURL(err)
	}
	if !cfg.migrate {
		if err := sqliteReady(ctx, m, url); err != nil {
			return nil, err
		}
	}
	s, err := sqlite.Open(ctx, url)
	if err != nil {
		return nil, badURLIf(err, sqlite.ErrInvalidConfig)
	}
	return &Stack{
		Kind: "sqlite", Where: s.Path(),
		Journal: s.Journal(), Snapshots: s.Snapshots(), Queries: s.Queries(), Offsets: s.Projections(), ReadModelKind: "sqlite",
		Durable: s.DurableState(), Membership: s.Membership(), ReadModelMembership: s.Membership(), Store: s,
		closers: []func() error{s.Close},
	}, nil
}

// sqliteReady checks, without creating or changing the file, that it
// exists and has the current schema.
func sqliteReady(ctx context.Context, m *sqlite.Migrator, url string) error {
	_, err := os.Stat(m.Path())
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no database at %s; create one with: annals init --store %s", m.Path(), url)
	}
	if err != nil {
		return err
	}
	current, latest, err := m.SchemaVersion(ctx)
	switch {
	case err != nil:
		return err
	case current == 0:
		return fmt.Errorf("%s has no Annals schema yet; create it with: annals init --store %s", m.Path(), url)
	case current < latest:
		return fmt.Errorf("%s has schema version %d and this annals needs %d; upgrade it with: annals migrate --store %s (add --dry-run to see the SQL first)", m.Path(), current, latest, url)
	}
	return nil
}
