package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/eventual"
	"github.com/annals-go/annals/store/kafka/eventual/cql/cqltest"
	"github.com/annals-go/annals/store/kafka/kafkatest"
	"github.com/annals-go/annals/store/kafka/wire"
)

// TestReplicatorHeadsAfterAnotherMember: a replicator remembers the heads
// it wrote, but not across a stop: when another member of its group
// applied the partition meanwhile (a delete, more appends), the
// replicator run again reads the heads the other one left, so that its
// next append keeps the other's deleted-to mark. The same for a head the
// other member purged.
func TestReplicatorHeadsAfterAnotherMember(t *testing.T) {
	brokers := kafkatest.Real(t)
	tables, _, _ := cqltest.Open(t)
	run := kafkatest.Prefix(t, brokers, "test")
	topic := run + "Heads"
	j := kafkatest.Open(t, brokers, tables, kafka.WithTopic(func(string) string { return topic }))
	deleted, purged := "Heads|deleted", "Heads|purged"
	dkey, pkey := eventual.Key{ID: deleted, Topic: topic}, eventual.Key{ID: purged, Topic: topic}
	rep := newReplicated()
	opts := append(rep.options(), kafka.WithTopics(topic), kafka.WithGroup(run))
	first, err := kafka.NewReplicator(brokers, tables, opts...)
	if err != nil {
		t.Fatal(err)
	}
	runFirst := func() (stop func()) {
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- first.Run(ctx) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}
	stopFirst := runFirst()
	write(t, j, deleted, 1, 3, "d")
	write(t, j, purged, 1, 2, "p")
	rep.await(t, "the first appends", func() bool { return headSeq(t, tables, dkey) == 3 && headSeq(t, tables, pkey) == 2 })
	stopFirst()

	// Another member of the group, alone now.
	stopOther := replicateUntil(t, brokers, tables, opts)
	if err := j.DeleteTo(t.Context(), deleted, 3); err != nil {
		t.Fatal(err)
	}
	write(t, j, deleted, 4, 4, "d")
	if err := j.Purge(t.Context(), []string{purged}); err != nil {
		t.Fatal(err)
	}
	rep.await(t, "the other member's writes", func() bool {
		_, has, err := tables.Head(t.Context(), pkey)
		return err == nil && !has && headSeq(t, tables, dkey) == 4
	})
	stopOther()

	stopFirst = runFirst()
	defer stopFirst()
	write(t, j, deleted, 5, 5, "d")
	write(t, j, purged, 1, 1, "q")
	rep.await(t, "the later appends", func() bool { return headSeq(t, tables, dkey) == 5 && headSeq(t, tables, pkey) == 1 })
	if h, _, err := tables.Head(t.Context(), dkey); err != nil || h.DeleteTo != 3 {
		t.Errorf("%s: head %+v, %v; want deleted to 3", deleted, h, err)
	}
	if h, _, err := tables.Head(t.Context(), pkey); err != nil || h.DeleteTo != 0 {
		t.Errorf("%s: head %+v, %v; want a new journal, deleted to 0", purged, h, err)
	}
	var got []int64
	for r, err := range tables.Records(t.Context(), pkey, 0, 1, 10) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r.Event.SeqNr)
	}
	if len(got) != 1 || got[0] != 1 {
		t.Errorf("%s: events %v in the store, want [1]", purged, got)
	}
}

// armedTables fails every read and write of the heads and events of one
// partition's keys while armed: the
// partition of the first key written after Arm, so that a poll holding
// several partitions is stuck at whichever it applies first.
type armedTables struct {
	eventual.Tables
	partitionOf map[string]int32

	mu     sync.Mutex
	armed  bool
	stuck  int32
	failed chan int32 // the stuck partition, at its first failure
}

var errArmed = errors.New("armed: this partition's writes fail")

func (a *armedTables) arm() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.armed, a.stuck = true, -1
}

func (a *armedTables) disarm() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.armed = false
}

func (a *armedTables) check(key eventual.Key) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.armed {
		return nil
	}
	p := a.partitionOf[key.ID]
	if a.stuck < 0 {
		a.stuck = p
		a.failed <- p
	}
	if p == a.stuck {
		return errArmed
	}
	return nil
}

func (a *armedTables) Head(ctx context.Context, key eventual.Key) (eventual.Head, bool, error) {
	if err := a.check(key); err != nil {
		return eventual.Head{}, false, err
	}
	return a.Tables.Head(ctx, key)
}

func (a *armedTables) InsertRecords(ctx context.Context, key eventual.Key, segment int64, recordID [16]byte, records []eventual.Record) error {
	if err := a.check(key); err != nil {
		return err
	}
	return a.Tables.InsertRecords(ctx, key, segment, recordID, records)
}

func (a *armedTables) UpdateHead(ctx context.Context, key eventual.Key, h eventual.Head, now time.Time) error {
	if err := a.check(key); err != nil {
		return err
	}
	return a.Tables.UpdateHead(ctx, key, h, now)
}

func (a *armedTables) InsertHead(ctx context.Context, key eventual.Key, h eventual.Head, now time.Time, origin string) error {
	if err := a.check(key); err != nil {
		return err
	}
	return a.Tables.InsertHead(ctx, key, h, now, origin)
}

func (a *armedTables) DeleteRecords(ctx context.Context, key eventual.Key, segment int64, to int64) error {
	if err := a.check(key); err != nil {
		return err
	}
	return a.Tables.DeleteRecords(ctx, key, segment, to)
}

// produceAction produces one journal action of id to a partition of topic:
// an append of events from-to, or a delete to to (from 0).
func produceAction(t *testing.T, cl *kgo.Client, topic string, partition int32, id string, kind wire.Kind, from, to int64) *kgo.Record {
	t.Helper()
	return produceActions(t, cl, topic, []int32{partition}, []string{id}, kind, from, to)[0]
}

// produceActions produces the same action of each id to its partition, in
// one request.
func produceActions(t *testing.T, cl *kgo.Client, topic string, partitions []int32, ids []string, kind wire.Kind, from, to int64) []*kgo.Record {
	t.Helper()
	var rs []*kgo.Record
	for i, id := range ids {
		h := wire.Header{Kind: kind, To: to}
		var value []byte
		if kind == wire.Append {
			var es wire.Events
			for s := from; s <= to; s++ {
				es.Events = append(es.Events, wire.Event{SeqNr: s, Payload: &wire.Payload{Type: wire.Binary, Data: fmt.Appendf(nil, "%s-%d", id, s)}})
			}
			v, err := wire.EncodeBinary(es)
			if err != nil {
				t.Fatal(err)
			}
			h, value = wire.Header{Kind: wire.Append, From: from, To: to, PayloadType: wire.Binary}, v
		}
		hb, err := wire.EncodeHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, &kgo.Record{Topic: topic, Partition: partitions[i], Key: []byte(id), Value: value,
			Headers: []kgo.RecordHeader{{Key: wire.HeaderKey, Value: hb}}})
	}
	if err := cl.ProduceSync(t.Context(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return rs
}

// TestReplicatorHeadsAfterKickedMidPoll: a member stuck applying one
// partition of a poll (its writes failing) while a rebalance waits on it is
// kicked from the group after the rebalance timeout, and another member
// applies both partitions meanwhile, a delete included. When the stuck
// member's writes succeed again it goes on with the poll it holds: the
// other partition's records, which the new owner already applied. It must
// not apply them from the heads it remembered before the rebalance (that
// would move the delete's mark back and store the deleted event again); as
// without remembered heads, it reads the heads the other member left and
// skips what they record as applied.
func TestReplicatorHeadsAfterKickedMidPoll(t *testing.T) {
	brokers := kafkatest.Real(t)
	store, _, _ := cqltest.Open(t)
	run := kafkatest.Prefix(t, brokers, "test")
	topic := run + "Kicked"
	kafkatest.CreateTopic(t, brokers, topic, 2)
	ids := []string{"Kicked|0", "Kicked|1"}
	parts := []int32{0, 1}
	armed := &armedTables{Tables: store, partitionOf: map[string]int32{ids[0]: 0, ids[1]: 1}, failed: make(chan int32, 1)}
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	keyOf := func(p int32) eventual.Key { return eventual.Key{ID: ids[p], Topic: topic} }
	await := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %s", what)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	head := func(p int32) eventual.Head {
		h, _, err := store.Head(t.Context(), keyOf(p))
		if err != nil {
			t.Fatal(err)
		}
		return h
	}

	// The first member, alone in the group: its fetches wait 3 s for
	// data, so that records produced together come in one poll.
	type done struct {
		partition int32
		deleteTo  int64
		events    []int64
	}
	var (
		mu        sync.Mutex
		afterArm  bool
		firstDone = make(chan done, 8)
	)
	events := func(p int32) []int64 {
		var got []int64
		for r, err := range store.Records(context.Background(), keyOf(p), 0, 1, 10) {
			if err != nil {
				t.Error(err)
				return nil
			}
			got = append(got, r.Event.SeqNr)
		}
		return got
	}
	rebalance := kgo.RebalanceTimeout(3 * time.Second)
	stopFirst := replicateUntil(t, brokers, armed, []kafka.ReplicatorOption{kafka.WithTopics(topic), kafka.WithGroup(run),
		kafka.WithReplicatorClientOptions(kgo.FetchMaxWait(3*time.Second), kgo.FetchMinBytes(1<<20), rebalance),
		kafka.WithOnReplicated(func(_ string, p int32, off int64) {
			t.Logf("first member: %d@%d", p, off)
			mu.Lock()
			after := afterArm
			mu.Unlock()
			if after {
				// What the store holds right after this member
				// applied the partition, before any rebalance.
				h, _, err := store.Head(context.Background(), keyOf(p))
				if err != nil {
					t.Error(err)
				}
				firstDone <- done{p, h.DeleteTo, events(p)}
			}
		})})
	defer stopFirst()
	produceActions(t, producer, topic, parts, ids, wire.Append, 1, 1)
	await("the first appends", func() bool { return head(0).SeqNr == 1 && head(1).SeqNr == 1 })

	// One poll of both partitions, stuck at whichever it applies first.
	armed.arm()
	mu.Lock()
	afterArm = true
	mu.Unlock()
	produceActions(t, producer, topic, parts, ids, wire.Append, 2, 2)
	var stuck int32
	select {
	case stuck = <-armed.failed:
	case <-time.After(time.Minute):
		t.Fatal("the first member did not apply the stuck poll")
	}
	other := 1 - stuck

	// A second member joins: the first one, blocking the rebalance,
	// is kicked after 3 s, and the second applies both partitions and
	// a delete of each journal to 2.
	stopSecond := replicateUntil(t, brokers, store, []kafka.ReplicatorOption{kafka.WithTopics(topic), kafka.WithGroup(run),
		kafka.WithReplicatorClientOptions(rebalance), kafka.WithOnReplicated(func(_ string, p int32, off int64) { t.Logf("second member: %d@%d", p, off) })})
	defer stopSecond()
	await("the second member's appends", func() bool { return head(0).SeqNr == 2 && head(1).SeqNr == 2 })
	produceActions(t, producer, topic, parts, ids, wire.Delete, 0, 2)
	await("the second member's deletes", func() bool { return head(0).DeleteTo == 2 && head(1).DeleteTo == 2 })

	// The first member's writes succeed again: it finishes its poll.
	armed.disarm()
	seen := map[int32]done{}
	for len(seen) < 2 {
		select {
		case d := <-firstDone:
			seen[d.partition] = d
		case <-time.After(time.Minute):
			t.Fatalf("the first member applied only %v of its stuck poll (the poll must hold both partitions)", seen)
		}
	}
	for _, p := range []int32{stuck, other} {
		if d := seen[p]; d.deleteTo != 2 || len(d.events) != 0 {
			t.Errorf("partition %d (stuck %v): after the kicked member's poll, %q is deleted to %d with events %v; want deleted to 2, no events",
				p, p == stuck, ids[p], d.deleteTo, d.events)
		}
	}
}

// TestReplicatorRefusesGroupCallbacks: partition callbacks passed with
// WithReplicatorClientOptions are refused by NewReplicator (the
// replicator's consumers own them: they keep its remembered heads true),
// rather than silently replaced.
func TestReplicatorRefusesGroupCallbacks(t *testing.T) {
	store, _, _ := cqltest.Open(t)
	cb := func(context.Context, *kgo.Client, map[string][]int32) {}
	for name, opt := range map[string]kgo.Opt{"assigned": kgo.OnPartitionsAssigned(cb), "revoked": kgo.OnPartitionsRevoked(cb),
		"lost": kgo.OnPartitionsLost(cb)} {
		_, err := kafka.NewReplicator([]string{"127.0.0.1:1"}, store, kafka.WithTopics("t"), kafka.WithReplicatorClientOptions(opt))
		if !errors.Is(err, kafka.ErrInvalidConfig) {
			t.Errorf("%s: NewReplicator = %v, want ErrInvalidConfig", name, err)
		}
	}
}
