package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/eventual"
	"github.com/annals-go/annals/store/kafka/eventual/pg/pgeventualtest"
	"github.com/annals-go/annals/store/kafka/kafkatest"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
	"github.com/annals-go/annals/storetest"
)

// TestRecoveryKit runs the recovery suite of the compliance kit on the
// journal with its snapshots in the eventual store's PostgreSQL schema,
// the replicator running, on the fake broker and on the real one.
func TestRecoveryKit(t *testing.T) {
	for _, broker := range []string{"fake", "real"} {
		t.Run(broker, func(t *testing.T) {
			brokers := brokersOf(t, broker)
			tables, snaps := eventualWithSnapshots(t)
			run := kafkatest.Prefix(t, brokers, "test")
			j := kafkatest.Open(t, brokers, tables, kafka.WithTopic(func(et string) string { return run + et }), kafka.WithSnapshots(snaps))
			replicate(t, brokers, tables, kafka.WithTopicPattern("^"+run), kafka.WithGroup(run))
			storetest.Run(t, storetest.Store{Journal: j, Snapshots: snaps, Recovery: j, Exceptions: map[string]string{
				"journal":   "TestJournalKit runs it (with the broker in a process of its own, so that the replay's heap is the journal's)",
				"snapshots": "the snapshot store is PostgreSQL's, which its tests check",
			}})
		})
	}
}

// eventualWithSnapshots opens an eventual store in a PostgreSQL schema of
// the test's own and the snapshot store in that schema (as annals opens a
// kafka:// URL with a postgres:// eventual store).
func eventualWithSnapshots(t *testing.T) (eventual.Tables, snapshot.Store) {
	t.Helper()
	dsn, schema := pgtest.Schema(t)
	tables := pgeventualtest.OpenIn(t, schema)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	ps, err := postgres.Open(ctx, dsn, postgres.WithMigrate(true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ps.Close() })
	return tables, ps.Snapshots()
}
