package cassandra_test

import (
	"context"
	"testing"
	"time"

	"github.com/annals-go/annals/recovery"
	"github.com/annals-go/annals/store/cassandra"
	"github.com/annals-go/annals/store/cassandra/cassandratest"
	"github.com/annals-go/annals/storetest"
)

// TestKits runs every suite of the compliance kit the store offers on one
// keyspace (partitions of 2,500 numbers, so that the kit's writes of
// 1,000 events cross partition boundaries), its recoveries read with
// three calls (recovery.ThreeCalls: the journal has no one-call read).
func TestKits(t *testing.T) {
	for _, guard := range []cassandra.WriteGuard{cassandra.GuardClaims, cassandra.GuardConditional} {
		t.Run(guard.String(), func(t *testing.T) { runKit(t, guard) })
	}
}

// runKit runs the compliance kit on a store of a new keyspace whose
// writes are guarded by guard.
func runKit(t *testing.T, guard cassandra.WriteGuard) {
	u, _ := cassandratest.URL(t)
	opts := []cassandra.Option{cassandra.WithPartitionSize(2500), cassandra.WithMaxPayloadSize(storetest.KitMaxPayloadSize),
		cassandra.WithEventualConsistencyDelay(0), cassandra.WithFirstTimeBucket(time.Now().Add(-time.Hour)), cassandra.WithWriteGuard(guard)}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s, err := cassandra.Open(ctx, u, append(opts, cassandra.WithMigrate(true))...)
	if err != nil {
		t.Fatalf("open %s: %v", u, err)
	}
	t.Cleanup(func() { s.Close() })
	j, snaps := s.Journal(), s.Snapshots()
	storetest.Run(t, storetest.Store{
		Journal: j, Snapshots: snaps, Queries: s.ReadJournal(), Recovery: recovery.ThreeCalls(j, snaps),
		Durable: s.DurableState(), Membership: s.Membership(),
		// Another session on the keyspace, as another process's.
		Open: func(ctx context.Context) (storetest.Store, error) {
			o, err := cassandra.Open(ctx, u, opts...)
			if err != nil {
				return storetest.Store{}, err
			}
			return storetest.Store{Journal: o.Journal(), Snapshots: o.Snapshots(), Durable: o.DurableState(), Membership: o.Membership(), Close: o.Close}, nil
		},
		IDsInStoreOrder: true,
		MaxPayloadSize:  storetest.KitMaxPayloadSize,
	})
	t.Run("across", func(t *testing.T) {
		o, err := cassandra.Open(t.Context(), u, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { o.Close() })
		storetest.RunJournalAcross(t, j, o.Journal())
	})
}
