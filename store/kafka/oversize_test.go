package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/eventual"
	"github.com/annals-go/annals/store/kafka/kafkatest"
	"github.com/annals-go/annals/store/kafka/wire"
)

// sized is event seq of pid with a payload of n bytes that names both.
func sized(pid string, seq int64, n int) journal.Repr {
	p := fmt.Appendf(nil, "%s@%d:", pid, seq)
	p = append(p, bytes.Repeat([]byte{'.'}, max(0, n-len(p)))...)
	return journal.Repr{PersistenceID: pid, SequenceNr: seq, Payload: p, SerializerID: 1, Manifest: "m"}
}

// brokerEnv is what a test on one broker works with: the brokers, an
// eventual store in a PostgreSQL schema of the test's own, and a topic
// prefix of its own.
type brokerEnv struct {
	brokers []string
	tables  eventual.Tables
	prefix  string
}

// topic puts every entity type on the topic prefix+name.
func (b brokerEnv) topic(name string) kafka.Option {
	return kafka.WithTopic(func(string) string { return b.prefix + name })
}

// onEachBroker runs test as a subtest on the fake broker and on the real
// one, with topics named after name.
func onEachBroker(t *testing.T, name string, test func(t *testing.T, b brokerEnv)) {
	t.Helper()
	for _, broker := range []string{"fake", "real"} {
		t.Run(broker, func(t *testing.T) {
			brokers := brokersOf(t, broker)
			tables, _ := openEventual(t, "postgres")
			test(t, brokerEnv{brokers: brokers, tables: tables, prefix: kafkatest.Prefix(t, brokers, name)})
		})
	}
}

// TestOversizedRecordOutcomeIsItsOwn: franz-go refuses a record above its
// batch limit at once, while the call's other records wait for the broker,
// and gives the results in completion order. Three atomic writes in one
// call (a small one, one with a 2 MiB event under a journal limit that
// lets it through to the producer, a small one): the refusal is the big
// write's, the small ones are stored, and the big id writes again at the
// refused numbers.
func TestOversizedRecordOutcomeIsItsOwn(t *testing.T) {
	onEachBroker(t, "oversize", func(t *testing.T, b brokerEnv) {
		run := b.prefix
		j := kafkatest.Open(t, b.brokers, b.tables, b.topic("Oversize"), kafka.WithMaxPayloadSize(4<<20))
		ctx := t.Context()
		n1, big, n2 := "Good|n1-"+run, "P|big-"+run, "Good|n2-"+run
		res, err := j.Write(ctx, []journal.AtomicWrite{
			{PersistenceID: n1, Events: []journal.Repr{sized(n1, 1, 10)}},
			{PersistenceID: big, Events: []journal.Repr{sized(big, 1, 10), sized(big, 2, 2<<20)}},
			{PersistenceID: n2, Events: []journal.Repr{sized(n2, 1, 10)}},
		})
		if err != nil {
			t.Fatalf("Write: outcome unknown: %v", err)
		}
		if len(res) != 3 || res[0] != nil || !errors.Is(res[1], journal.ErrRejected) || res[2] != nil {
			t.Fatalf("results = %v, want [nil, a rejection, nil]", res)
		}
		for _, c := range []struct {
			pid  string
			want []int64
		}{{n1, []int64{1}}, {big, nil}, {n2, []int64{1}}} {
			if got := replayedSeqs(t, j, c.pid); !slices.Equal(got, c.want) {
				t.Errorf("%s holds %v, want %v", c.pid, got, c.want)
			}
		}
		res, err = j.Write(ctx, []journal.AtomicWrite{{PersistenceID: big, Events: []journal.Repr{sized(big, 1, 10), sized(big, 2, 10)}}})
		if err != nil || res != nil {
			t.Fatalf("the refused id's write at 1..2 again: %v, %v", res, err)
		}
		if got := replayedSeqs(t, j, big); !slices.Equal(got, []int64{1, 2}) {
			t.Errorf("%s holds %v, want [1 2]", big, got)
		}
	})
}

// TestOversizedWritesThroughTheFront: 32 ids write small events while one
// writes 1.2 MiB events (above the producer's batch limit, under the
// journal's payload limit), each through the journal front, which puts
// many ids' writes into one call; each writer, like an entity, writes its
// next number after an acknowledgement and the same number again after a
// rejection. Every acknowledged event replays with its payload, no
// rejected one is stored, and no (id, number) is in the topic twice.
func TestOversizedWritesThroughTheFront(t *testing.T) {
	onEachBroker(t, "frontsize", func(t *testing.T, b brokerEnv) {
		run, brokers, topic := b.prefix, b.brokers, b.prefix+"Big"
		j := kafkatest.Open(t, brokers, b.tables, b.topic("Big"), kafka.WithMaxPayloadSize(4<<20))
		front, err := engine.NewFront(j, engine.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = front.Close() })
		const writers, rounds = 33, 8
		type outcome struct {
			acked    map[int64]string // seq -> payload prefix of the acknowledged event
			rejected int
		}
		outcomes := make([]outcome, writers)
		pids := make([]string, writers)
		var wg sync.WaitGroup
		for w := range writers {
			pids[w] = fmt.Sprintf("Big|w%d-%s", w, run)
			outcomes[w].acked = map[int64]string{}
			wg.Go(func() {
				pid, seq := pids[w], int64(1)
				for round := range rounds {
					size := 10
					if w == 0 && round%2 == 0 {
						size = 1200 << 10
					}
					e := sized(pid, seq, size)
					err := front.Persist(context.Background(), journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{e}})
					switch {
					case err == nil:
						outcomes[w].acked[seq] = string(e.Payload[:32])
						seq++
					case errors.Is(err, journal.ErrRejected):
						outcomes[w].rejected++
					default:
						t.Errorf("%s: Persist(%d): outcome unknown: %v", pid, seq, err)
						return
					}
				}
			})
		}
		wg.Wait()
		if got := outcomes[0].rejected; got != rounds/2 {
			t.Errorf("the big writer had %d writes rejected, want %d (its oversized ones)", got, rounds/2)
		}
		for w, o := range outcomes {
			if w > 0 && o.rejected > 0 {
				t.Errorf("%s: %d small writes rejected, want none", pids[w], o.rejected)
			}
			got := map[int64]string{}
			for _, e := range replayedEvents(t, j, pids[w]) {
				got[e.SequenceNr] = string(e.Payload[:32])
			}
			for seq, p := range o.acked {
				if got[seq] != p {
					t.Errorf("%s: acknowledged event %d (%q) replays as %q", pids[w], seq, p, got[seq])
				}
			}
			if len(got) != len(o.acked) {
				t.Errorf("%s replays %d events, %d were acknowledged", pids[w], len(got), len(o.acked))
			}
		}
		seen, read := map[string]bool{}, map[[2]int64]bool{}
		var records []wire.Record
		for _, pid := range pids {
			for _, r := range partitionOf(t, brokers, topic, pid) {
				if k := [2]int64{int64(r.Partition), r.Offset}; !read[k] {
					read[k] = true
					records = append(records, r)
				}
			}
		}
		for _, r := range records {
			a, ok, err := wire.DecodeRecord(r)
			if err != nil || !ok || a.Header.Kind != wire.Append {
				continue
			}
			for _, e := range a.Events.Events {
				k := fmt.Sprintf("%s@%d", a.ID, e.SeqNr)
				if seen[k] {
					t.Errorf("%s is in the topic twice", k)
				}
				seen[k] = true
			}
		}
	})
}

func replayedEvents(t testing.TB, j journal.Journal, pid string) []journal.Repr {
	t.Helper()
	var out []journal.Repr
	for e, err := range j.Replay(t.Context(), pid, 1, 1<<62, 1<<62) {
		if err != nil {
			t.Fatalf("Replay(%s): %v", pid, err)
		}
		out = append(out, e)
	}
	return out
}

func replayedSeqs(t testing.TB, j journal.Journal, pid string) []int64 {
	t.Helper()
	var out []int64
	for _, e := range replayedEvents(t, j, pid) {
		out = append(out, e.SequenceNr)
	}
	return out
}

// TestCallsWithoutDeadlineEnd: with the broker gone, a read and a write
// whose contexts have no deadline end with an error once the read
// timeout has passed, instead of waiting for the broker without end.
func TestCallsWithoutDeadlineEnd(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	tables, _ := openEventual(t, "postgres")
	j := kafkatest.Open(t, c.ListenAddrs(), tables, kafka.WithReadTimeout(2*time.Second))
	pid := "Gone|1"
	if res, err := j.Write(t.Context(), []journal.AtomicWrite{{PersistenceID: pid, Events: []journal.Repr{sized(pid, 1, 10)}}}); err != nil || res != nil {
		t.Fatalf("Write with the broker up: %v %v", res, err)
	}
	c.Close()
	if _, err := j.HighestSequenceNr(context.Background(), pid, 0); err == nil {
		t.Error("HighestSequenceNr with the broker gone succeeded")
	}
	res, err := j.Write(context.Background(), []journal.AtomicWrite{{PersistenceID: pid, Events: []journal.Repr{sized(pid, 2, 10)}}})
	if err == nil {
		t.Errorf("Write with the broker gone: %v, want an unknown outcome", res)
	}
}

// TestLongTagReplicates: an event with a tag longer than a Cassandra key
// component (65,535 bytes) is either refused by the journal with
// ErrInvalidArgument, or replicated into each eventual store: the journal
// never takes what the replicator cannot apply (the partition's
// replication would stop there for good).
func TestLongTagReplicates(t *testing.T) {
	for kind, openTables := range eventualStores {
		t.Run(kind, func(t *testing.T) {
			tables := openTables(t)
			brokers := kafkatest.Fake(t)
			run := kafkatest.Prefix(t, brokers, "longtag")
			topic := run + "Tag"
			j := kafkatest.Open(t, brokers, tables, kafka.WithTopic(func(string) string { return topic }))
			pid := "Tag|1"
			e := sized(pid, 1, 10)
			e.Tags = []string{strings.Repeat("t", 70_000)}
			res, err := j.Write(t.Context(), []journal.AtomicWrite{{PersistenceID: pid, Events: []journal.Repr{e}}})
			if err != nil {
				t.Fatalf("Write: outcome unknown: %v", err)
			}
			if res != nil {
				if !errors.Is(res[0], journal.ErrInvalidArgument) {
					t.Fatalf("Write = %v, want nil or ErrInvalidArgument", res[0])
				}
				e.Tags = nil // refused: the id goes on without it
				if res, err := j.Write(t.Context(), []journal.AtomicWrite{{PersistenceID: pid, Events: []journal.Repr{e}}}); err != nil || res != nil {
					t.Fatalf("Write without the tag: %v %v", res, err)
				}
			}
			rep := newReplicated()
			replicate(t, brokers, tables, append(rep.options(), kafka.WithTopics(topic), kafka.WithGroup(run))...)
			rep.await(t, "the event replicated", func() bool { return headSeq(t, tables, eventual.Key{ID: pid, Topic: topic}) == 1 })
		})
	}
}
