package postgres_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/offsets"
	"github.com/annals-go/annals/recovery"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
	"github.com/annals-go/annals/storetest"
)

// open opens a store in a schema of the test's own, migrated, closed and
// dropped when the test ends.
func open(t testing.TB, opts ...postgres.Option) *postgres.Store {
	t.Helper()
	dsn, _ := pgtest.Schema(t)
	s, err := postgres.Open(context.Background(), dsn, append([]postgres.Option{postgres.WithMigrate(true)}, opts...)...)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// orderings are the two live-query orderings every query rule runs under.
var orderings = []struct {
	name string
	opts []postgres.Option
}{
	{"commit", []postgres.Option{postgres.WithOrdering(postgres.CommitOrder)}},
	{"timestamp", []postgres.Option{postgres.WithOrdering(postgres.TimestampOrder), postgres.WithBacktracking(postgres.DefaultBacktrackWindow, 1e9)}},
}

func TestJournalKit(t *testing.T) {
	t.Parallel()
	for _, o := range orderings {
		t.Run(o.name, func(t *testing.T) {
			t.Parallel()
			opts := append([]postgres.Option{postgres.WithMaxPayloadSize(storetest.KitMaxPayloadSize)}, o.opts...)
			s := open(t, opts...)
			storetest.RunJournal(t, storetest.JournalHarness{
				New:            func(t *testing.T) journal.Journal { return s.Journal() },
				Own:            func(t *testing.T) journal.Journal { return open(t, opts...).Journal() },
				MaxPayloadSize: storetest.KitMaxPayloadSize,
			})
		})
	}
}

func TestSnapshotKit(t *testing.T) {
	t.Parallel()
	s := open(t)
	storetest.RunSnapshots(t, storetest.SnapshotHarness{
		New: func(t *testing.T) snapshot.Store { return s.Snapshots() },
		Own: func(t *testing.T) snapshot.Store { return open(t).Snapshots() },
	})
}

func TestQueryKit(t *testing.T) {
	t.Parallel()
	for _, o := range orderings {
		t.Run(o.name, func(t *testing.T) {
			t.Parallel()
			s := open(t, o.opts...)
			storetest.RunQueries(t, storetest.QueryHarness{New: func(t *testing.T) (journal.Journal, any) { return s.Journal(), s.Queries() }})
		})
	}
}

// TestRecoveryKit runs the recovery kit on the journal and on a journal
// front before it (which waits for the id's writes, then reads through the
// store's reader).
func TestRecoveryKit(t *testing.T) {
	t.Parallel()
	s, other := open(t), open(t)
	for _, front := range []bool{false, true} {
		t.Run(map[bool]string{false: "store", true: "front"}[front], func(t *testing.T) {
			t.Parallel()
			storetest.RunRecovery(t, storetest.RecoveryHarness{
				New: func(t *testing.T) (recovery.Reader, journal.Journal, snapshot.Store) {
					if !front {
						return s.Journal(), s.Journal(), s.Snapshots()
					}
					f, err := engine.NewFront(s.Journal(), engine.Config{})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = f.Close() })
					return f, f, s.Snapshots()
				},
				Foreign: func(*testing.T) snapshot.Store { return other.Snapshots() },
			})
		})
	}
}

// TestFrontReadsFitThePool: a journal front before the store takes its
// read bound from the pool (its connections less the front's two write
// calls), so a burst of recoveries queues in the front, not in the pool.
func TestFrontReadsFitThePool(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ conns, want int }{{6, 4}, {3, 1}, {1, 1}} {
		t.Run(fmt.Sprint(c.conns), func(t *testing.T) {
			s := open(t, postgres.WithPoolConfig(func(pc *pgxpool.Config) { pc.MaxConns = int32(c.conns) }))
			var _ engine.ReadCapacity = s.Journal()
			f, err := engine.NewFront(s.Journal(), engine.Config{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = f.Close() })
			if got := f.Config().MaxReads; got != c.want {
				t.Errorf("pool of %d: the front's MaxReads = %d, want %d", c.conns, got, c.want)
			}
		})
	}
}

func TestOffsetsCompliance(t *testing.T) {
	t.Parallel()
	s := open(t)
	storetest.RunTxOffsets(t, storetest.TxOffsetsHarness[pgx.Tx]{
		New: func(t *testing.T) offsets.TxStore[pgx.Tx] { return s.Projections() },
	})
}
