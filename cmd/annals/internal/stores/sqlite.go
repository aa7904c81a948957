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
// store/sqlite, opened by stacks.Open. The Admin of its stores is the
// *sqlite.Store, which implements every capability of package admin.
func SQLite() Scheme {
	return Scheme{Open: openStack, Migrator: sqliteMigrator, Scratch: sqliteScratch}
}

func sqliteMigrator(_ context.Context, url string) (admin.Migrator, error) {
	m, err := sqlite.NewMigrator(url)
	if err != nil {
		return nil, BadURL(err)
	}
	return m, nil
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
