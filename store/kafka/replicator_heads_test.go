package kafka_test

import (
	"context"
	"testing"

	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/eventual"
	"github.com/annals-go/annals/store/kafka/eventual/cql/cqltest"
	"github.com/annals-go/annals/store/kafka/kafkatest"
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
