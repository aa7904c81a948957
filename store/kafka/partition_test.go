package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/kafkatest"
)

// TestPartition: kafka.Partition names the partition the journal's
// producer writes each id to, read back from the topic, and Topic names
// the topic.
func TestPartition(t *testing.T) {
	j, brokers, topic := openOneTopic(t, "Partition")
	want := map[string]int32{}
	for i := range 40 {
		pid := fmt.Sprintf("Partition|%d", i)
		write(t, j, pid, 1, 1, "a")
		want[pid] = kafka.Partition(pid, kafkatest.Partitions)
		if got, err := j.Topic(pid); got != topic || err != nil {
			t.Fatalf("Topic(%s) = %q, %v; want %q", pid, got, err, topic)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	got := map[string]int32{}
	for len(got) < len(want) {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %d of %d records: %v", len(got), len(want), err)
		}
		fs.EachRecord(func(r *kgo.Record) { got[string(r.Key)] = r.Partition })
	}
	used := map[int32]bool{}
	for pid, p := range want {
		used[p] = true
		if got[pid] != p {
			t.Errorf("%s went to partition %d, Partition says %d", pid, got[pid], p)
		}
	}
	if len(used) != kafkatest.Partitions {
		t.Errorf("40 ids used partitions %v, want all %d", used, kafkatest.Partitions)
	}
	if p := kafka.Partition("x", 0); p != -1 {
		t.Errorf("Partition over 0 partitions = %d, want -1", p)
	}
}

// openOneTopic opens a journal on the fake broker whose entity types all
// write to one topic of the test's own, PostgreSQL its eventual store.
func openOneTopic(t *testing.T, name string) (j *kafka.Journal, brokers []string, topic string) {
	t.Helper()
	brokers = kafkatest.Fake(t)
	topic = fmt.Sprintf("journal-%s%d", name, time.Now().UnixNano())
	return kafkatest.Open(t, brokers, eventualStores["postgres"](t), kafka.WithTopic(func(string) string { return topic })), brokers, topic
}

// TestPartitionIsFranzGos: Partition chooses as franz-go's producer
// (StickyKeyPartitioner, Kafka's murmur2) for ids of every length class
// and partition counts from 1 to 64.
func TestPartitionIsFranzGos(t *testing.T) {
	p := kgo.StickyKeyPartitioner(nil).ForTopic("")
	for i := range 5000 {
		pid := fmt.Sprintf("Type|%s%d", strings.Repeat("é", i%7), i*7919)
		for _, n := range []int{1, 2, 3, 12, 64} {
			want := int32(p.Partition(&kgo.Record{Key: []byte(pid)}, n))
			if got := kafka.Partition(pid, n); got != want {
				t.Fatalf("Partition(%q, %d) = %d, franz-go's producer chooses %d", pid, n, got, want)
			}
		}
	}
}

// BenchmarkPartition: what choosing an id's partition costs (every read
// of an id, every write under a claim, a kafkacluster member's ownership
// checks), beside franz-go's StickyKeyPartitioner made for the call, as
// Partition once did ("franz-go-per-call").
func BenchmarkPartition(b *testing.B) {
	key := "Account|acct-1yzvrnl5dt7qd"
	b.Run("annals", func(b *testing.B) {
		for b.Loop() {
			kafka.Partition(key, 12)
		}
	})
	b.Run("franz-go-per-call", func(b *testing.B) {
		for b.Loop() {
			kgo.StickyKeyPartitioner(nil).ForTopic("").Partition(&kgo.Record{Key: []byte(key)}, 12)
		}
	})
}

// TestTopicNames: an id whose entity type maps to a name Kafka refuses for
// a topic is refused by Topic and its writes are rejected naming the
// topic, before anything is sent; Kafka's names pass.
func TestTopicNames(t *testing.T) {
	brokers := brokersOf(t, "fake")
	tables, _ := openEventual(t, "postgres")
	cases := []struct {
		topic string
		ok    bool
	}{
		{"journal-Account_1.v2", true},
		{strings.Repeat("a", 249), true},
		{strings.Repeat("a", 250), false},
		{"", false},
		{".", false},
		{"..", false},
		{"...", true},
		{"with space", false},
		{"slash/es", false},
		{"ünicode", false},
	}
	for _, c := range cases {
		j := kafkatest.Open(t, brokers, tables, kafka.WithTopic(func(string) string { return c.topic }))
		pid := "T|x"
		_, err := j.Topic(pid)
		if (err == nil) != c.ok {
			t.Errorf("Topic for a type mapped to %q: %v, want accepted %v", c.topic, err, c.ok)
		}
		if c.ok {
			continue
		}
		res, werr := j.Write(t.Context(), []journal.AtomicWrite{{PersistenceID: pid, Events: []journal.Repr{sized(pid, 1, 10)}}})
		if werr != nil || len(res) != 1 || !errors.Is(res[0], journal.ErrInvalidArgument) || !errors.Is(res[0], journal.ErrRejected) || !strings.Contains(res[0].Error(), "not a Kafka topic name") {
			t.Errorf("a write to topic %q: %v, %v; want a rejection (ErrInvalidArgument) naming the topic", c.topic, res, werr)
		}
	}
}
