// Package entitytest helps test entities: a memory store that a test's
// hosts share and that is removed when the test ends, and hosts that shut
// down with the test. It needs the memory store only.
//
//	st := entitytest.Memory(t)
//	h := entitytest.NewHost(t, st, bank.Behavior(), registry)
package entitytest

import (
	"context"
	"log/slog"
	"testing"

	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/memory"
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
