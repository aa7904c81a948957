package kafka_test

import (
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/recovery"
	"slices"
	"testing"
	"time"

	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/eventual"
	"github.com/annals-go/annals/store/kafka/kafkatest"
)

// TestHeadCacheServesReads: reads of a head the eventual store has not
// applied fold it from the cache, with deletes applied, and take the
// values of unreplicated appends from it too; without the cache every
// such read reads the partition once (HighestSequenceNr for the head's
// actions, Replay for the actions with the appends' values), on each
// eventual store.
func TestHeadCacheServesReads(t *testing.T) {
	for _, c := range []struct {
		store  string
		cached bool
	}{{"cassandra", true}, {"cassandra", false}, {"postgres", true}, {"postgres", false}} {
		t.Run(fmt.Sprintf("%s/cache=%v", c.store, c.cached), func(t *testing.T) {
			tables, _ := openEventual(t, c.store)
			cached := c.cached
			brokers := kafkatest.Fake(t)
			topic := fmt.Sprintf("journal-Cache%d", time.Now().UnixNano())
			size := kafka.DefaultHeadCacheEntries
			if !cached {
				size = 0
			}
			j := kafkatest.Open(t, brokers, tables, kafka.WithTopic(func(string) string { return topic }), kafka.WithHeadCache(size))
			pid := "Cache|1"
			key := eventual.Key{ID: pid, Topic: topic}
			write(t, j, pid, 1, 3, "a")
			rep := newReplicated()
			ropts := append(rep.options(), kafka.WithTopics(topic), kafka.WithGroup(topic))
			stop := replicateUntil(t, brokers, tables, ropts)
			rep.await(t, "events 1..3 replicated", func() bool { return headSeq(t, tables, key) == 3 })
			stop()
			// Unreplicated from here: an append and a delete.
			write(t, j, pid, 4, 6, "a")
			if err := j.DeleteTo(t.Context(), pid, 2); err != nil {
				t.Fatal(err)
			}
			before := kafka.HeadReads(j)
			if h, err := j.HighestSequenceNr(t.Context(), pid, 0); err != nil || h != 6 {
				t.Fatalf("HighestSequenceNr = %d, %v; want 6", h, err)
			}
			if got := replay(t, j, pid); !slices.Equal(got, payloads("a", 3, 6)) {
				t.Errorf("replay = %v, want a-3..a-6", got)
			}
			reads := kafka.HeadReads(j) - before
			if cached && reads != 0 {
				t.Errorf("with the cache, %d reads read the partition's head, want 0", reads)
			}
			if !cached && reads != 2 {
				t.Errorf("without the cache, %d reads read the partition's head, want 2", reads)
			}
		})
	}
}

// TestHeadCacheHoldsTheUnreplicatedHead: a journal that starts while the
// replicator is far behind (here not running: 6,000 records, of 300 ids,
// none replicated) reads the unreplicated head once, into its cache, and
// serves every recovery from it: 300 recoveries, 64 at a time, each with
// its id's events, and no recovery reads the partition.
func TestHeadCacheHoldsTheUnreplicatedHead(t *testing.T) {
	onEachBroker(t, "behind", func(t *testing.T, b brokerEnv) {
		const ids, events = 300, 20
		writer := kafkatest.Open(t, b.brokers, b.tables, b.topic("Behind"))
		pid := func(i int) string { return fmt.Sprintf("Behind|%d", i) }
		for seq := int64(1); seq <= events; seq++ {
			var ws []journal.AtomicWrite
			for i := range ids {
				ws = append(ws, journal.AtomicWrite{PersistenceID: pid(i), Events: []journal.Repr{sized(pid(i), seq, 100)}})
			}
			if res, err := writer.Write(t.Context(), ws); err != nil || res != nil {
				t.Fatalf("Write: %v %v", res, err)
			}
		}
		j := kafkatest.Open(t, b.brokers, b.tables, b.topic("Behind")) // a process that starts now
		recoverAll(t, j, ids, pid, events)
		if reads := kafka.HeadReads(j); reads != 0 {
			t.Errorf("%d of %d recoveries read the partition, want 0 (the head cache holds the unreplicated head)", reads, ids)
		}
	})
}

// TestColdStartRecoveries: a process's first 1,000 recoveries on a topic
// that does not exist yet, 64 at a time, each bounded by the journal
// front's default call timeout: every one succeeds (empty), and they
// share the head cache instead of each reading the partition.
func TestColdStartRecoveries(t *testing.T) {
	onEachBroker(t, "cold", func(t *testing.T, b brokerEnv) {
		const ids = 1000
		j := kafkatest.Open(t, b.brokers, b.tables, b.topic("Cold"))
		recoverAll(t, j, ids, func(i int) string { return fmt.Sprintf("Cold|%d", i) }, 0)
		if reads := kafka.HeadReads(j); reads > 64 {
			t.Errorf("%d of %d recoveries read the partition, want at most the first 64 (the head cache serves the rest)", reads, ids)
		}
	})
}

// recoverAll recovers the ids pid(0) to pid(ids-1) through j, 64 at a
// time, each bounded by the journal front's default call timeout, and
// fails t unless each recovers events 1 to events.
func recoverAll(t *testing.T, j *kafka.Journal, ids int, pid func(int) string, events int64) {
	t.Helper()
	g, ctx := errgroup.WithContext(t.Context())
	g.SetLimit(64)
	for i := range ids {
		g.Go(func() error {
			rctx, cancel := context.WithTimeout(ctx, engine.DefaultCallTimeout)
			defer cancel()
			res, err := j.ReadRecovery(rctx, recovery.Request{PersistenceID: pid(i), ToSequenceNr: 1 << 62, MaxEvents: 1000})
			if err != nil {
				return fmt.Errorf("%s: %w", pid(i), err)
			}
			if res.Highest != events || int64(len(res.Events)) != events || (events > 0 && res.Events[events-1].SequenceNr != events) {
				return fmt.Errorf("%s recovered highest %d with %d events, want %d and %d", pid(i), res.Highest, len(res.Events), events, events)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}
