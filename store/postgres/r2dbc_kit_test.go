package postgres_test

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/offsets"
	"github.com/annals-go/annals/recovery"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/storetest"
)

// r2dbcOpts open a store on the r2dbc layout, with the backtracking query
// 1s behind the clock (as the timestamp ordering's kit runs).
var r2dbcOpts = []postgres.Option{postgres.WithLayout(postgres.LayoutR2DBC), postgres.WithBacktracking(postgres.DefaultBacktrackWindow, 1e9)}

func TestR2DBCJournalKit(t *testing.T) {
	t.Parallel()
	opts := append([]postgres.Option{postgres.WithMaxPayloadSize(storetest.KitMaxPayloadSize)}, r2dbcOpts...)
	s := open(t, opts...)
	storetest.RunJournal(t, storetest.JournalHarness{
		New: func(t *testing.T) journal.Journal { return s.Journal() },
		Own: func(t *testing.T) journal.Journal { return open(t, opts...).Journal() },
		// No write_timestamp column: an event's Timestamp reads as its
		// db_timestamp, as Pekko's PersistentRepr.timestamp does.
		Capabilities:   storetest.Capabilities{StoreTimestamps: true},
		MaxPayloadSize: storetest.KitMaxPayloadSize,
	})
}

func TestR2DBCSnapshotKit(t *testing.T) {
	t.Parallel()
	s := open(t, r2dbcOpts...)
	storetest.RunSnapshots(t, storetest.SnapshotHarness{
		New:         func(t *testing.T) snapshot.Store { return s.Snapshots() },
		Own:         func(t *testing.T) snapshot.Store { return open(t, r2dbcOpts...).Snapshots() },
		Unsupported: r2dbcSnapshotRules,
	})
}

func TestR2DBCQueryKit(t *testing.T) {
	t.Parallel()
	s := open(t, r2dbcOpts...)
	storetest.RunQueries(t, storetest.QueryHarness{New: func(t *testing.T) (journal.Journal, any) { return s.Journal(), s.Queries() }})
}

func TestR2DBCRecoveryKit(t *testing.T) {
	t.Parallel()
	s, other := open(t, r2dbcOpts...), open(t, r2dbcOpts...)
	storetest.RunRecovery(t, storetest.RecoveryHarness{
		New: func(t *testing.T) (recovery.Reader, journal.Journal, snapshot.Store) {
			f, err := engine.NewFront(s.Journal(), engine.Config{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = f.Close() })
			return f, f, s.Snapshots()
		},
		Foreign:     func(*testing.T) snapshot.Store { return other.Snapshots() },
		Unsupported: r2dbcRecoveryRules,
	})
}

func TestR2DBCOffsetsKit(t *testing.T) {
	t.Parallel()
	s := open(t, r2dbcOpts...)
	storetest.RunTxOffsets(t, storetest.TxOffsetsHarness[pgx.Tx]{
		New: func(t *testing.T) offsets.TxStore[pgx.Tx] { return s.Projections() },
	})
}

// r2dbcSnapshotRules and r2dbcRecoveryRules are the rules the r2dbc
// layout cannot keep, with the reasons.
var r2dbcSnapshotRules, r2dbcRecoveryRules, _ = postgres.KitExceptions(postgres.LayoutR2DBC)
