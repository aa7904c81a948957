package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/eventual"
	"github.com/annals-go/annals/store/kafka/eventual/cql/cqltest"
	"github.com/annals-go/annals/store/kafka/eventual/pg/pgeventualtest"
	"github.com/annals-go/annals/store/kafka/kafkatest"
	"github.com/annals-go/annals/store/kafka/wire"
	"github.com/annals-go/annals/store/kafka/wire/wiretest"
)

// replicated is signalled each time the replicator moves a pointer.
type replicated struct {
	mu      sync.Mutex
	signal  chan struct{}
	stopped chan error
}

func newReplicated() *replicated {
	return &replicated{signal: make(chan struct{}, 1), stopped: make(chan error, 16)}
}

func (r *replicated) options() []kafka.ReplicatorOption {
	return []kafka.ReplicatorOption{
		kafka.WithOnReplicated(func(string, int32, int64) {
			select {
			case r.signal <- struct{}{}:
			default:
			}
		}),
		kafka.WithErrorHandler(func(err error) {
			var se *kafka.StoppedError
			if errors.As(err, &se) {
				r.stopped <- err
			}
		}),
	}
}

// await waits, replication by replication, until cond holds.
func (r *replicated) await(t testing.TB, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for !cond() {
		select {
		case <-r.signal:
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		}
	}
}

func headSeq(t testing.TB, tables eventual.Tables, key eventual.Key) int64 {
	t.Helper()
	h, _, err := tables.Head(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	return h.SeqNr
}

// TestReplicatorPoisonRecord: a record the replicator cannot decode stops
// its partition with an error naming topic, partition and offset; the
// records before it are replicated, none after it; SkipRecord and a
// restart move past it.
func TestReplicatorPoisonRecord(t *testing.T) {
	tables, _, _ := cqltest.Open(t)
	for _, broker := range []string{"fake", "real"} {
		t.Run(broker, func(t *testing.T) {
			brokers := brokersOf(t, broker)
			run := kafkatest.Prefix(t, brokers, "test")
			topic := run + "Poison"
			j := kafkatest.Open(t, brokers, tables, kafka.WithTopic(func(string) string { return topic }))
			pid := "Poison|1"
			key := eventual.Key{ID: pid, Topic: topic}
			write(t, j, pid, 1, 2, "a")
			// An Append whose value is not the events its header says.
			poison := wiretest.ProduceUndecodable(t, brokers, topic, pid, 3)
			write(t, j, "Poison|2", 1, 1, "b") // another id; same partition or not
			rep := newReplicated()
			opts := append(rep.options(), kafka.WithTopics(topic), kafka.WithGroup(run))
			ctx, cancel := context.WithCancel(t.Context())
			r, err := kafka.NewReplicator(brokers, tables, opts...)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- r.Run(ctx) }()
			var stop error
			select {
			case stop = <-rep.stopped:
			case <-time.After(time.Minute):
				t.Fatal("the replicator did not stop at the poison record")
			}
			var se *kafka.StoppedError
			if !errors.As(stop, &se) || se.Topic != topic || se.Partition != poison.Partition || se.Offset != poison.Offset || !errors.Is(stop, wire.ErrMalformed) {
				t.Fatalf("stopped with %v, want a *StoppedError at %s/%d@%d wrapping ErrMalformed", stop, topic, poison.Partition, poison.Offset)
			}
			if got := r.Stopped(); len(got) != 1 {
				t.Errorf("Stopped() = %v, want the one partition", got)
			}
			if n := headSeq(t, tables, key); n != 2 {
				t.Errorf("before the poison record the store holds %q up to %d, want 2", pid, n)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			// A later append of the same id stays unreplicated until the
			// operator skips the poison record.
			write(t, j, pid, 3, 4, "a")
			if err := kafka.SkipRecord(t.Context(), tables, topic, poison.Partition, poison.Offset+1); err == nil {
				t.Error("SkipRecord past the record after the pointer's next succeeded")
			}
			if err := kafka.SkipRecord(t.Context(), tables, topic, poison.Partition, poison.Offset); err != nil {
				t.Fatal(err)
			}
			replicate(t, brokers, tables, opts...)
			rep.await(t, "the id's later events", func() bool { return headSeq(t, tables, key) == 4 })
			if got := replay(t, j, pid); fmt.Sprint(got) != "[a-1 a-2 a-3 a-4]" {
				t.Errorf("replay after the skip = %v", got)
			}
		})
	}
}

// TestReplicatorStartsAfterEachPointer: a replicator starts each of its
// partitions after that partition's pointer (the pointers of many
// partitions are read at once), not at the topic's start: with each
// partition's pointer at its last first append, only the second appends
// are replicated.
func TestReplicatorStartsAfterEachPointer(t *testing.T) {
	const partitions, ids = 8, 40
	brokers := kafkatest.Fake(t)
	tables := pgeventualtest.Open(t)
	topic := kafkatest.Prefix(t, brokers, "test") + "Pointers"
	kafkatest.CreateTopic(t, brokers, topic, partitions)
	j := kafkatest.Open(t, brokers, tables, kafka.WithTopic(func(string) string { return topic }))
	pid := func(i int) string { return fmt.Sprint("Pointers|", i) }
	// Every first append, then every second one: each partition's
	// pointer goes to its last record before the second appends.
	used := map[int32]bool{}
	for i := range ids {
		write(t, j, pid(i), 1, 1, "first")
		used[kafka.Partition(pid(i), partitions)] = true
	}
	if len(used) < 2 {
		t.Fatalf("the ids landed in %d partitions, want several", len(used))
	}
	admin, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ends, err := kadm.NewClient(admin).ListEndOffsets(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			if err := tables.SavePointer(t.Context(), topic, o.Partition, o.Offset-1, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
	})
	for i := range ids {
		write(t, j, pid(i), 2, 2, "second")
	}
	rep := newReplicated()
	replicate(t, brokers, tables, append(rep.options(), kafka.WithTopics(topic), kafka.WithGroup(topic))...)
	key := func(i int) eventual.Key { return eventual.Key{ID: pid(i), Topic: topic} }
	rep.await(t, "every second append replicated", func() bool {
		for i := range ids {
			if headSeq(t, tables, key(i)) != 2 {
				return false
			}
		}
		return true
	})
	for i := range ids {
		for r, err := range tables.Records(t.Context(), key(i), 0, 1, 2) {
			if err != nil {
				t.Fatal(err)
			}
			if r.Event.SeqNr != 2 {
				t.Errorf("%s: event %d replicated, from before its partition's pointer", pid(i), r.Event.SeqNr)
			}
		}
	}
}
