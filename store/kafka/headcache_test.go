package kafka_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/eventual"
	"github.com/annals-go/annals/store/kafka/eventual/cql/cqltest"
	"github.com/annals-go/annals/store/kafka/kafkatest"
)

// TestHeadCacheServesReads: once the replicator has passed what the head
// cache started with, reads of a head the eventual store has not applied
// fold it from the cache, with deletes applied, and read the partition
// only for the values of unreplicated appends; without the cache every
// such read reads the partition.
func TestHeadCacheServesReads(t *testing.T) {
	tables, _, _ := cqltest.Open(t)
	for _, cached := range []bool{true, false} {
		t.Run(fmt.Sprintf("cache=%v", cached), func(t *testing.T) {
			brokers := kafkatest.Fake(t)
			topic := fmt.Sprintf("journal-Cache%d", time.Now().UnixNano())
			size := kafka.DefaultHeadCacheEntries
			if !cached {
				size = 0
			}
			j := open(t, brokers, tables, kafka.WithTopic(func(string) string { return topic }), kafka.WithHeadCache(size))
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
