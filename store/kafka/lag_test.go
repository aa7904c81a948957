package kafka_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/eventual/pg/pgeventualtest"
	"github.com/annals-go/annals/store/kafka/kafkatest"
	"github.com/annals-go/annals/store/kafka/wire"
	"github.com/annals-go/annals/store/kafka/wire/wiretest"
)

// TestLag: Lag reads what each partition holds past the eventual store's
// pointer, changing nothing: with no pointer the whole partition (the
// first write's Mark, two appends, a record the replicator cannot decode),
// after the pointer only the rest, and after Kafka deleted records the
// pointer had not reached, those as lost. Other partitions are empty; a
// topic that does not exist has none.
func TestLag(t *testing.T) {
	t.Parallel()
	for _, broker := range []string{"fake", "real"} {
		t.Run(broker, func(t *testing.T) {
			t.Parallel()
			brokers := brokersOf(t, broker)
			run := kafkatest.Prefix(t, brokers, "lag")
			topic := run + "Lag"
			tables := pgeventualtest.Open(t)
			j := kafkatest.Open(t, brokers, tables, kafka.WithTopic(func(string) string { return topic }))
			pid := "Lag|1"
			write(t, j, pid, 1, 2, "a") // a Mark (the first write reads the id), then the Append: offsets 0, 1
			write(t, j, pid, 3, 3, "a") // offset 2
			poison := wiretest.ProduceUndecodable(t, brokers, topic, pid, 4)
			if poison.Offset != 3 {
				t.Fatalf("the undecodable record is at offset %d, want 3 (after the Mark and two appends)", poison.Offset)
			}
			p := poison.Partition

			lagOf := func(what string) kafka.PartitionLag {
				t.Helper()
				lags, err := j.Lag(t.Context(), topic)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				var mine kafka.PartitionLag
				found := false
				for i, l := range lags {
					if i > 0 && lags[i-1].Partition >= l.Partition {
						t.Errorf("%s: partitions out of order: %d after %d", what, l.Partition, lags[i-1].Partition)
					}
					if l.Topic != topic {
						t.Errorf("%s: partition of topic %q", what, l.Topic)
					}
					if l.Partition == p {
						mine, found = l, true
						continue
					}
					if l.End != 0 || l.Behind != 0 || l.Records != 0 || len(l.IDs) != 0 {
						t.Errorf("%s: partition %d, which holds nothing: %+v", what, l.Partition, l)
					}
				}
				if !found {
					t.Fatalf("%s: no partition %d in %+v", what, p, lags)
				}
				return mine
			}
			check := func(what string, got kafka.PartitionLag, want kafka.PartitionLag, undecodable bool) {
				t.Helper()
				bad := got.Undecodable
				got.Undecodable, want.Topic, want.Partition = nil, topic, p
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("%s:\ngot  %+v\nwant %+v", what, got, want)
				}
				if !undecodable {
					if len(bad) != 0 {
						t.Errorf("%s: undecodable %v, want none", what, bad)
					}
					return
				}
				if len(bad) != 1 || bad[0].Offset != 3 || bad[0].ID != pid || !errors.Is(bad[0].Err, wire.ErrMalformed) {
					t.Errorf("%s: undecodable %+v, want the record at offset 3 of %q wrapping ErrMalformed", what, bad, pid)
				}
			}
			check("nothing replicated", lagOf("nothing replicated"), kafka.PartitionLag{Pointer: -1, Start: 0, End: 4, Behind: 4,
				Records: 4, Appends: 2, Events: 3, Marks: 1, IDs: []string{pid}}, true)

			// As if the replicator had applied the Mark and the first append.
			if err := tables.SavePointer(t.Context(), topic, p, 1, time.Now()); err != nil {
				t.Fatal(err)
			}
			check("replicated up to offset 1", lagOf("replicated up to offset 1"), kafka.PartitionLag{Pointer: 1, Start: 0, End: 4, Behind: 2,
				Records: 2, Appends: 1, Events: 1, IDs: []string{pid}}, true)

			// Kafka deletes offsets 0..2 (as retention would): offset 2
			// was never applied, and is lost.
			deleteRecords(t, brokers, topic, p, 3)
			check("offsets before 3 deleted", lagOf("offsets before 3 deleted"), kafka.PartitionLag{Pointer: 1, Start: 3, End: 4, Behind: 1, Lost: 1,
				Records: 1, IDs: []string{pid}}, true)

			// Applied up to the end: nothing behind.
			if err := tables.SavePointer(t.Context(), topic, p, 3, time.Now()); err != nil {
				t.Fatal(err)
			}
			check("replicated to the end", lagOf("replicated to the end"), kafka.PartitionLag{Pointer: 3, Start: 3, End: 4}, false)

			if lags, err := j.Lag(t.Context(), run+"Missing"); err != nil || len(lags) != 0 {
				t.Errorf("Lag of a topic that does not exist: %+v, %v; want none", lags, err)
			}
			topics, err := j.Topics(t.Context(), func(s string) bool { return strings.HasPrefix(s, run) })
			if err != nil || !slices.Equal(topics, []string{topic}) {
				t.Errorf("Topics with the test's prefix: %v, %v; want [%s]", topics, err, topic)
			}
			j.Close()
			if _, err := j.Lag(t.Context(), topic); err == nil {
				t.Error("Lag after Close succeeded")
			}
		})
	}
}

// deleteRecords moves the start of a partition to offset, as retention
// does.
func deleteRecords(t *testing.T, brokers []string, topic string, partition int32, offset int64) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrDeleteRecordsRequest()
	rt := kmsg.NewDeleteRecordsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewDeleteRecordsRequestTopicPartition()
	rp.Partition, rp.Offset = partition, offset
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 30_000
	resp, err := req.RequestWith(t.Context(), cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				t.Fatalf("deleting the records of %s/%d before %d: %v", topic, rp.Partition, offset, err)
			}
		}
	}
}
