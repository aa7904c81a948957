package kafka_test

import (
	"slices"
	"testing"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/recovery"
	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/kafkatest"
)

// TestUncachedReads: without the head cache, a recovery reads the
// partition once when the unreplicated head's appends fit the bound a
// read keeps for its replay, and twice (actions, then values while
// streaming) when they do not; either way it recovers what Replay does,
// with the head's deletes and purges applied, on each broker.
func TestUncachedReads(t *testing.T) {
	for _, c := range []struct {
		name      string
		eventSize int   // bytes of each event's payload
		reads     int64 // partition reads of one recovery
	}{
		{"short", 100, 1},
		{"beyond the held bound", 100 << 10, 2}, // 20 events of 100 KiB: 2 MiB
	} {
		t.Run(c.name, func(t *testing.T) {
			onEachBroker(t, "uncached", func(t *testing.T, b brokerEnv) {
				j := kafkatest.Open(t, b.brokers, b.tables, b.topic("Uncached"), kafka.WithHeadCache(0))
				pid := "Uncached|1"
				put := func(from, to int64) {
					t.Helper()
					for s := from; s <= to; s++ {
						w := journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{sized(pid, s, c.eventSize)}}
						if res, err := j.Write(t.Context(), []journal.AtomicWrite{w}); err != nil || res != nil {
							t.Fatalf("write %d: %v %v", s, res, err)
						}
					}
				}
				// A first incarnation, purged; then 20 events, the first
				// five deleted.
				put(1, 4)
				if err := j.Purge(t.Context(), []string{pid}); err != nil {
					t.Fatal(err)
				}
				put(1, 20)
				if err := j.DeleteTo(t.Context(), pid, 5); err != nil {
					t.Fatal(err)
				}
				want := make([]int64, 0, 15)
				for s := int64(6); s <= 20; s++ {
					want = append(want, s)
				}
				if got := replayedSeqs(t, j, pid); !slices.Equal(got, want) {
					t.Fatalf("Replay = %v, want %v", got, want)
				}
				before := kafka.HeadReads(j)
				res, err := j.ReadRecovery(t.Context(), recovery.Request{PersistenceID: pid, ToSequenceNr: 1 << 62, MaxEvents: 100})
				if err != nil {
					t.Fatal(err)
				}
				var got []int64
				for _, e := range res.Events {
					if want := sized(pid, e.SequenceNr, c.eventSize).Payload; !slices.Equal(e.Payload, want) {
						t.Errorf("event %d: payload of %d bytes, not the one written", e.SequenceNr, len(e.Payload))
					}
					got = append(got, e.SequenceNr)
				}
				if res.Highest != 20 || !slices.Equal(got, want) {
					t.Errorf("ReadRecovery = highest %d, events %v; want 20, %v", res.Highest, got, want)
				}
				if reads := kafka.HeadReads(j) - before; reads != c.reads {
					t.Errorf("the recovery read the partition %d times, want %d", reads, c.reads)
				}
			})
		})
	}
}
