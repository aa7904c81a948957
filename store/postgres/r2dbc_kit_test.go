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
	s := open(t, r2dbcOpts...)
	storetest.RunJournal(t, storetest.JournalHarness{
		New: func(t *testing.T) journal.Journal { return s.Journal() },
		Own: func(t *testing.T) journal.Journal { return open(t, r2dbcOpts...).Journal() },
		// No write_timestamp column: an event's Timestamp reads as its
		// db_timestamp, as Pekko's PersistentRepr.timestamp does.
		Capabilities: storetest.Capabilities{StoreTimestamps: true},
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
		Unsupported: map[string]string{"CriteriaSelectOlderSnapshot": oneSnapshot},
	})
}

func TestR2DBCOffsetsKit(t *testing.T) {
	t.Parallel()
	s := open(t, r2dbcOpts...)
	storetest.RunTxOffsets(t, storetest.TxOffsetsHarness[pgx.Tx]{
		New: func(t *testing.T) offsets.TxStore[pgx.Tx] { return s.Projections() },
	})
}

// oneSnapshot is why the rules that need several snapshots of an id are not
// kept on the r2dbc layout.
const oneSnapshot = "the r2dbc layout keeps one snapshot per persistence id (the plugin's primary key is persistence_id): a save replaces the stored one whatever its sequence number, as the plugin's upsert does, so no older snapshot is left to select, keep or delete"

// r2dbcSnapshotRules are the snapshot rules the r2dbc layout cannot keep,
// with the reasons.
var r2dbcSnapshotRules = map[string]string{
	"LoadUpperSequenceBound":                   oneSnapshot,
	"LoadUpperSequenceAndTimestampBounds":      oneSnapshot,
	"LoadEqualSequenceAndTimestampBounds":      oneSnapshot,
	"LoadLowerBounds":                          oneSnapshot,
	"DeleteOneByMetadata":                      oneSnapshot,
	"DeleteBySequenceWithZeroTimestamp":        oneSnapshot,
	"DeleteMatching":                           oneSnapshot,
	"DeleteMatchingKeepsNonMatchingTimestamps": oneSnapshot,
	"OverwriteSameSequenceNr":                  oneSnapshot,
	"LoadLatest":                               "the plugin's write_timestamp is epoch milliseconds: a snapshot's Timestamp reads back truncated to the millisecond, and the rule wants the microsecond (TestR2DBCReadsPekkoRows loads the latest snapshot of each fixture id)",
}
