package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/recovery"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/eventual"
	"github.com/annals-go/annals/store/kafka/eventual/pg/pgeventualtest"
	"github.com/annals-go/annals/store/kafka/kafkatest"
	"github.com/annals-go/annals/store/memory"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
	"github.com/annals-go/annals/storetest"
)

// TestRecoveryKit runs the recovery.Reader rules on the journal with its
// snapshots in the eventual store's PostgreSQL schema, the replicator
// running, on the fake broker and on the real one.
func TestRecoveryKit(t *testing.T) {
	for _, broker := range []string{"fake", "real"} {
		t.Run(broker, func(t *testing.T) {
			brokers := brokersOf(t, broker)
			tables, snaps := eventualWithSnapshots(t)
			run := kafkatest.Prefix(t, brokers, "test")
			j := open(t, brokers, tables, kafka.WithTopic(func(et string) string { return run + et }), kafka.WithSnapshots(snaps))
			replicate(t, brokers, tables, kafka.WithTopicPattern("^"+run), kafka.WithGroup(run))
			storetest.RunRecovery(t, storetest.RecoveryHarness{
				New: func(t *testing.T) (recovery.Reader, journal.Journal, snapshot.Store) { return j, j, snaps },
				Foreign: func(t *testing.T) snapshot.Store {
					m := memory.New()
					t.Cleanup(func() { m.Close() })
					return m.Snapshots()
				},
			})
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
