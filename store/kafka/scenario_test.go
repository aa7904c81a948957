package kafka_test

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/eventual"
	"github.com/annals-go/annals/store/kafka/eventual/cql/cqltest"
	"github.com/annals-go/annals/store/kafka/kafkatest"
	"github.com/annals-go/annals/store/kafka/wire"
)

// partitionOf returns every record of pid's partition so far, ending
// with a record the test adds (keyed by pid, without an action header, so
// replication skips it).
func partitionOf(t testing.TB, brokers []string, topic, pid string) []wire.Record {
	t.Helper()
	ctx := t.Context()
	pcl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	end := &kgo.Record{Topic: topic, Key: []byte(pid), Value: []byte("end of test head")}
	if err := pcl.ProduceSync(ctx, end).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {end.Partition: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []wire.Record
	for {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		for _, r := range fs.Records() {
			rec := wire.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp, Key: r.Key, Value: r.Value,
				Headers: map[string][]byte{}}
			for _, h := range r.Headers {
				rec.Headers[h.Key] = h.Value
			}
			out = append(out, rec)
			if r.Offset == end.Offset {
				return out
			}
		}
	}
}

func write(t testing.TB, j journal.Journal, pid string, from, to int64, tag string) {
	t.Helper()
	w := journal.AtomicWrite{PersistenceID: pid}
	for s := from; s <= to; s++ {
		w.Events = append(w.Events, journal.Repr{PersistenceID: pid, SequenceNr: s, Payload: fmt.Appendf(nil, "%s-%d", tag, s), SerializerID: 4})
	}
	res, err := j.Write(t.Context(), []journal.AtomicWrite{w})
	if err != nil || res != nil {
		t.Fatalf("write %s %d..%d: %v %v", pid, from, to, res, err)
	}
}

// replay returns pid's events as "payload" strings.
func replay(t testing.TB, j journal.Journal, pid string) []string {
	t.Helper()
	var out []string
	for e, err := range j.Replay(t.Context(), pid, 1, 1<<62, 1<<62) {
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprint(e.SequenceNr); string(e.Payload[len(e.Payload)-len(want):]) != want {
			t.Fatalf("event %d has payload %q", e.SequenceNr, e.Payload)
		}
		out = append(out, string(e.Payload))
	}
	return out
}

func payloads(tag string, from, to int64) []string {
	var out []string
	for s := from; s <= to; s++ {
		out = append(out, fmt.Sprintf("%s-%d", tag, s))
	}
	return out
}

// fetchCounter counts the record batches the journal's head readers
// fetch.
type fetchCounter struct{ n atomic.Int64 }

func (c *fetchCounter) OnFetchBatchRead(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.FetchBatchMetrics) {
	c.n.Add(int64(m.NumRecords))
}

// replicateFirst replicates pid's partition up to and including pid's
// n-th record (all of it when n < 0), as a replicator would, pointer
// included.
func replicateFirst(t testing.TB, brokers []string, tables eventual.Tables, topic, pid string, n int) {
	t.Helper()
	head := partitionOf(t, brokers, topic, pid)
	if n >= 0 {
		seen := 0
		for i, r := range head {
			if string(r.Key) == pid {
				if seen++; seen == n {
					head = head[:i+1]
					break
				}
			}
		}
	}
	if err := eventual.Replicate(t.Context(), tables, head, time.Now()); err != nil {
		t.Fatal(err)
	}
}

// applyWithoutPointer applies all of pid's actions to the eventual store
// but leaves the partition's pointer where it was: a replicator stopped
// between the two.
func applyWithoutPointer(t *testing.T, brokers []string, tables eventual.Tables, topic, pid string) {
	t.Helper()
	var actions []eventual.ActionRecord
	var partition int32
	for _, r := range partitionOf(t, brokers, topic, pid) {
		a, ok, err := wire.DecodeRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		if ok && a.ID == pid {
			partition = r.Partition
			actions = append(actions, eventual.ActionRecord{Action: a, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp,
				Headers: eventual.UserHeaders(r.Headers)})
		}
	}
	if err := eventual.Apply(t.Context(), tables, eventual.Key{ID: pid, Topic: topic}, partition, eventual.Batches(actions), time.Now()); err != nil {
		t.Fatal(err)
	}
}

// TestSeedScenarios: the reading cases of seed 002, with the eventual
// store put in each state by replicating chosen parts of the topic, and
// the records the journal then reads from Kafka counted.
func TestSeedScenarios(t *testing.T) {
	tables, _, _ := cqltest.Open(t)
	// Each case has a cluster and a topic of its own: the eventual store
	// is shared, and its pointers are per topic name.
	var topic string
	type env struct {
		t       *testing.T
		j       *kafka.Journal
		brokers []string
		pid     string
	}
	for _, c := range []struct {
		name string
		run  func(e env)
		want []string
		high int64
		// kafkaRead: whether the final replay must read the topic.
		kafkaRead bool
	}{
		{"EventualStoreActionsBehind", func(e env) {
			write(e.t, e.j, e.pid, 1, 2, "a")
			write(e.t, e.j, e.pid, 3, 3, "a")
			write(e.t, e.j, e.pid, 4, 5, "a")
			replicateFirst(e.t, e.brokers, tables, topic, e.pid, 1)
		}, payloads("a", 1, 5), 5, true},
		{"PointerBehind", func(e env) {
			write(e.t, e.j, e.pid, 1, 2, "a")
			write(e.t, e.j, e.pid, 3, 3, "a")
			applyWithoutPointer(e.t, e.brokers, tables, topic, e.pid)
			write(e.t, e.j, e.pid, 4, 4, "a")
		}, payloads("a", 1, 4), 4, true},
		{"DeleteInHeadNotReplicated", func(e env) {
			write(e.t, e.j, e.pid, 1, 5, "a")
			replicateFirst(e.t, e.brokers, tables, topic, e.pid, -1)
			if err := e.j.DeleteTo(e.t.Context(), e.pid, 3); err != nil {
				e.t.Fatal(err)
			}
		}, payloads("a", 4, 5), 5, true},
		{"DeleteReplicated", func(e env) {
			write(e.t, e.j, e.pid, 1, 5, "a")
			if err := e.j.DeleteTo(e.t.Context(), e.pid, 3); err != nil {
				e.t.Fatal(err)
			}
			replicateFirst(e.t, e.brokers, tables, topic, e.pid, -1)
			for r, err := range tables.Records(e.t.Context(), eventual.Key{ID: e.pid, Topic: topic}, 0, 1, 3) {
				e.t.Errorf("event %d still in the eventual store after the delete was replicated (%v)", r.Event.SeqNr, err)
			}
		}, payloads("a", 4, 5), 5, false},
		{"PurgeThenAppendRestartsAt1", func(e env) {
			write(e.t, e.j, e.pid, 1, 3, "a")
			replicateFirst(e.t, e.brokers, tables, topic, e.pid, -1)
			if err := e.j.Purge(e.t.Context(), []string{e.pid}); err != nil {
				e.t.Fatal(err)
			}
			write(e.t, e.j, e.pid, 1, 2, "b")
		}, payloads("b", 1, 2), 2, true},
		{"PurgeThenAppendReplicated", func(e env) {
			write(e.t, e.j, e.pid, 1, 3, "a")
			replicateFirst(e.t, e.brokers, tables, topic, e.pid, 1)
			if err := e.j.Purge(e.t.Context(), []string{e.pid}); err != nil {
				e.t.Fatal(err)
			}
			write(e.t, e.j, e.pid, 1, 2, "b")
			replicateFirst(e.t, e.brokers, tables, topic, e.pid, -1)
		}, payloads("b", 1, 2), 2, false},
		{"FullyReplicatedSkipsKafka", func(e env) {
			write(e.t, e.j, e.pid, 1, 3, "a")
			replicateFirst(e.t, e.brokers, tables, topic, e.pid, -1)
		}, payloads("a", 1, 3), 3, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			topic = "journal-Seed" + c.name
			brokers := kafkatest.Fake(t)
			j := kafkatest.Open(t, brokers, tables, kafka.WithTopic(func(string) string { return topic }))
			pid := fmt.Sprintf("Seed|%s-%d", c.name, time.Now().UnixNano())
			c.run(env{t, j, brokers, pid})
			// A fresh journal, as after a restart: what it reads is all it
			// knows.
			var fetched fetchCounter
			fresh := kafkatest.Open(t, brokers, tables, kafka.WithTopic(func(string) string { return topic }),
				kafka.WithClientOptions(kgo.WithHooks(&fetched)))
			if got := replay(t, fresh, pid); !slices.Equal(got, c.want) {
				t.Errorf("replay = %v, want %v", got, c.want)
			}
			if read := fetched.n.Load() > 0; read != c.kafkaRead {
				t.Errorf("the replay read %d records from Kafka; want a read: %v", fetched.n.Load(), c.kafkaRead)
			}
			if h, err := fresh.HighestSequenceNr(t.Context(), pid, 0); err != nil || h != c.high {
				t.Errorf("HighestSequenceNr = %d, %v; want %d", h, err, c.high)
			}
		})
	}
}
