// Package entitystores gives entity tests the real stores beside the
// memory one: SQLite on a file and PostgreSQL in a schema of the test's
// own, each behind a journal front as in production, removed when the
// test ends. It is a test helper of the module's own tests; users test
// their behaviors with entity/behaviortest or entity/entitytest, which
// need only the memory store.
package entitystores

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/entity/entitytest"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
	"github.com/annals-go/annals/store/sqlite"
)

// SQLite returns a new SQLite store on a file in t.TempDir(), its journal
// behind an engine.Front as in production, closed when t ends.
func SQLite(t testing.TB) entitytest.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "entitytest.db"))
	if err != nil {
		t.Fatal(err)
	}
	return behindFront(t, s.Journal(), s.Snapshots(), s.Close)
}

// Postgres returns a PostgreSQL store in a schema of the test's own (see
// pgtest: the test is skipped when no server answers, unless required),
// behind a journal front, closed and dropped when the test ends.
func Postgres(t testing.TB) entitytest.Store {
	t.Helper()
	dsn, _ := pgtest.Schema(t)
	s, err := postgres.Open(context.Background(), dsn, postgres.WithMigrate(true))
	if err != nil {
		t.Fatal(err)
	}
	return behindFront(t, s.Journal(), s.Snapshots(), s.Close)
}

// All returns the store constructors by name ("memory", "sqlite",
// "postgres"), for tests that run on each.
func All() map[string]func(testing.TB) entitytest.Store {
	return map[string]func(testing.TB) entitytest.Store{"memory": entitytest.Memory, "sqlite": SQLite, "postgres": Postgres}
}

// behindFront puts a journal front before j; the front and the store (by
// closeStore) are closed when t ends.
func behindFront(t testing.TB, j journal.Journal, snaps snapshot.Store, closeStore func() error) entitytest.Store {
	t.Helper()
	f, err := engine.NewFront(j, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close(); _ = closeStore() })
	return entitytest.Store{Journal: f, Snapshots: snaps}
}
