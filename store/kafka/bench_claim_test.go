package kafka_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/eventual/pg/pgeventualtest"
	"github.com/annals-go/annals/store/kafka/kafkatest"
)

// BenchmarkClaimedWrites: what a partition claim costs a writer (the
// fence of package kafkacluster's members: each call's records of a
// partition are one transaction). 1,000 entities over a topic of 12
// partitions persist concurrently through the journal front, one
// goroutine per id writing its own events one at a time, in turns of a
// fifth of the events each: "claimed" ids write under claims of their
// partitions (Front.WriteFenced with the claim's token), "plain" ids with
// Front.Persist, as a journal without a cluster does. ratio is claimed
// throughput over plain.
func BenchmarkClaimedWrites(b *testing.B) {
	const ids, turns, partitions = 1000, 5, 12
	brokers := kafkatest.Real(b)
	tables := pgeventualtest.Open(b)
	topic := benchTopic(b, brokers, "claimed")
	kafkatest.CreateTopic(b, brokers, topic, partitions)
	j := kafkatest.Open(b, brokers, tables, kafka.WithTopic(func(string) string { return topic }))
	f, err := engine.NewFront(j, engine.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = f.Close() })
	ctx := b.Context()
	fences := make([]journal.Fence, partitions)
	for p := range int32(partitions) {
		c, err := j.Claim(ctx, topic, topic, p)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Close)
		fences[p] = journal.Fence{Open: func() error { return nil }, Token: c.Token()}
	}
	var wg sync.WaitGroup
	for i := range ids {
		for _, kind := range []string{"c", "p"} {
			wg.Go(func() {
				if _, err := f.HighestSequenceNr(ctx, fmt.Sprintf("Bench|%s-%d", kind, i), 0); err != nil {
					b.Error(err)
				}
			})
		}
	}
	wg.Wait()
	perID := max((b.N+ids-1)/ids, turns)
	run := func(kind string, from, to int64) time.Duration {
		start := time.Now()
		for i := range ids {
			pid := fmt.Sprintf("Bench|%s-%d", kind, i)
			fence := fences[kafka.Partition(pid, partitions)]
			wg.Go(func() {
				for seq := from + 1; seq <= to; seq++ {
					w := journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{benchEvent(pid, seq)}}
					var err error
					if kind == "p" {
						err = f.Persist(ctx, w)
					} else {
						var res []error
						res, err = f.WriteFenced(ctx, []journal.AtomicWrite{w}, fence)
						if err == nil && res != nil {
							err = res[0]
						}
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	var claimed, plain time.Duration
	for turn := range turns {
		from, to := int64(perID*turn/turns), int64(perID*(turn+1)/turns)
		if turn%2 == 0 {
			claimed += run("c", from, to)
			plain += run("p", from, to)
		} else {
			plain += run("p", from, to)
			claimed += run("c", from, to)
		}
	}
	events := float64(perID * ids)
	b.ReportMetric(events/claimed.Seconds(), "events/s")
	b.ReportMetric(events/plain.Seconds(), "plain-events/s")
	b.ReportMetric(plain.Seconds()/claimed.Seconds(), "ratio")
}
