// Package entitytest helps test entities: real stores that a test's hosts
// share and that are removed when the test ends, and hosts that shut down
// with the test.
//
//	for name, open := range entitytest.Stores() {
//		t.Run(name, func(t *testing.T) {
//			st := open(t)
//			h := entitytest.NewHost(t, st, bank.Behavior(), registry)
//			...
//		})
//	}
package entitytest

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/memory"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
	"github.com/annals-go/annals/store/sqlite"
)

// Store is a journal and a snapshot store that a test's hosts share.
type Store struct {
	Journal   journal.Journal
	Snapshots snapshot.Store
}

// Memory returns a new in-memory store, closed when t ends.
func Memory(t testing.TB) Store {
	s := memory.New()
	t.Cleanup(func() { _ = s.Close() })
	return Store{s.Journal(), s.Snapshots()}
}

// SQLite returns a new SQLite store on a file in t.TempDir(), its journal
// behind an engine.Front as in production, closed when t ends.
func SQLite(t testing.TB) Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "entitytest.db"))
	if err != nil {
		t.Fatal(err)
	}
	return behindFront(t, s.Journal(), s.Snapshots(), s.Close)
}

// behindFront puts a journal front before j; the front and the store (by
// closeStore) are closed when t ends.
func behindFront(t testing.TB, j journal.Journal, snaps snapshot.Store, closeStore func() error) Store {
	t.Helper()
	f, err := engine.NewFront(j, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close(); _ = closeStore() })
	return Store{f, snaps}
}

// Postgres returns a PostgreSQL store in a schema of the test's own (see
// pgtest: the test is skipped when no server answers, unless required),
// behind a journal front, closed and dropped when the test ends.
func Postgres(t testing.TB) Store {
	t.Helper()
	dsn, _ := pgtest.Schema(t)
	s, err := postgres.Open(context.Background(), dsn, postgres.WithMigrate(true))
	if err != nil {
		t.Fatal(err)
	}
	return behindFront(t, s.Journal(), s.Snapshots(), s.Close)
}

// Stores returns the store constructors by name ("memory", "sqlite",
// "postgres"), for tests that run on each.
func Stores() map[string]func(testing.TB) Store {
	return map[string]func(testing.TB) Store{"memory": Memory, "sqlite": SQLite, "postgres": Postgres}
}

// NewHost starts a host of b on st with reg, its log discarded, shut down
// when t ends. configure, if given, adjusts the configuration first.
func NewHost[C, E, S any](t testing.TB, st Store, b entity.Behavior[C, E, S], reg *serialization.Registry, configure ...func(*entity.HostConfig)) *entity.Host[C, E, S] {
	t.Helper()
	cfg := entity.HostConfig{Journal: st.Journal, Snapshots: st.Snapshots, Registry: reg, Logger: slog.New(slog.DiscardHandler)}
	for _, c := range configure {
		c(&cfg)
	}
	h, err := entity.NewHost(b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Shutdown(context.Background()) })
	return h
}
