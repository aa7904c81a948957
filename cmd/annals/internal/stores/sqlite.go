package stores

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/store/sqlite"
)

// SQLite is the scheme of "sqlite:PATH" URLs: a database file of
// store/sqlite. The Admin of its stores is the *sqlite.Store, which
// implements every capability of package admin.
func SQLite() Scheme {
	return Scheme{Open: openSQLite, Migrator: sqliteMigrator, Scratch: sqliteScratch}
}

func sqliteMigrator(_ context.Context, url string) (admin.Migrator, error) {
	m, err := sqlite.NewMigrator(url)
	if err != nil {
		return nil, BadURL(err)
	}
	return m, nil
}

func openSQLite(ctx context.Context, url string, mode Mode) (*Store, error) {
	m, err := sqlite.NewMigrator(url)
	if err != nil {
		return nil, BadURL(err)
	}
	if mode == Existing {
		if err := sqliteReady(ctx, m, url); err != nil {
			return nil, err
		}
	}
	s, err := sqlite.Open(ctx, url)
	if err != nil {
		return nil, badURLIf(err, sqlite.ErrInvalidConfig)
	}
	return &Store{
		Kind: "sqlite", Where: s.Path(), MaxPayloadSize: sqlite.DefaultMaxPayloadSize,
		Journal: s.Journal(), Snapshots: s.Snapshots(), Queries: s.Queries(), Offsets: s.Projections(), Durable: s.DurableState(), Membership: s.Membership(), Admin: s, GlobalOrdering: true,
		Close: s.Close,
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

// sqliteScratch makes the scratch database a new file in the directory of
// the given one, so it lies on the same disk.
func sqliteScratch(_ context.Context, url string) (string, func() error, error) {
	m, err := sqlite.NewMigrator(url)
	if err != nil {
		return "", nil, BadURL(err)
	}
	dir := filepath.Dir(m.Path())
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return "", nil, fmt.Errorf("directory %s of %s: not found", dir, m.Path())
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	path := filepath.Join(dir, ".annals-scratch-"+hex.EncodeToString(b[:])+".db")
	remove := func() error {
		var errs []error
		for _, p := range []string{path, path + "-wal", path + "-shm"} {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	return "sqlite:" + path, remove, nil
}
