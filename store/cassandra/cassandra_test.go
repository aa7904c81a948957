package cassandra_test

import (
	"testing"
	"time"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/recovery"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/cassandra"
	"github.com/annals-go/annals/store/cassandra/cassandratest"
	"github.com/annals-go/annals/store/memory"
	"github.com/annals-go/annals/storetest"
)

// TestKits runs the journal, query, batch query, snapshot and recovery
// compliance kits on one keyspace (partitions of 2,500 numbers, so that
// the kit's writes of 1,000 events cross partition boundaries).
func TestKits(t *testing.T) {
	s := cassandratest.Open(t, cassandra.WithPartitionSize(2500), cassandra.WithMaxPayloadSize(storetest.KitMaxPayloadSize),
		cassandra.WithEventualConsistencyDelay(0), cassandra.WithFirstTimeBucket(time.Now().Add(-time.Hour)))
	t.Run("journal", func(t *testing.T) {
		storetest.RunJournal(t, storetest.JournalHarness{
			New:            func(t *testing.T) journal.Journal { return s.Journal() },
			MaxPayloadSize: storetest.KitMaxPayloadSize,
		})
	})
	t.Run("queries", func(t *testing.T) {
		storetest.RunQueries(t, storetest.QueryHarness{
			New:             func(t *testing.T) (journal.Journal, any) { return s.Journal(), s.ReadJournal() },
			IDsInStoreOrder: true,
		})
	})
	t.Run("batch-queries", func(t *testing.T) {
		// Events by tag only: the read journal offers no events by slices.
		storetest.RunBatchQueries(t, storetest.QueryHarness{
			New: func(t *testing.T) (journal.Journal, any) { return s.Journal(), s.ReadJournal() },
		})
	})
	t.Run("snapshots", func(t *testing.T) {
		storetest.RunSnapshots(t, storetest.SnapshotHarness{
			New: func(t *testing.T) snapshot.Store { return s.Snapshots() },
		})
	})
	t.Run("recovery", func(t *testing.T) {
		storetest.RunRecovery(t, storetest.RecoveryHarness{
			New: func(t *testing.T) (recovery.Reader, journal.Journal, snapshot.Store) {
				j, snaps := s.Journal(), s.Snapshots()
				return recovery.ThreeCalls(j, snaps), j, snaps
			},
			Foreign: func(t *testing.T) snapshot.Store {
				m := memory.New()
				t.Cleanup(func() { _ = m.Close() })
				return m.Snapshots()
			},
		})
	})
}
