package kafka_test

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/kafkatest"
)

// TestClaimFencedWriteAppendedThenDeleted: a write under a claim whose
// first send the broker appended but whose answer was lost (as a process
// paused mid-produce), sent again after a later claim fenced the first.
// The new owner recovered the entity, saw the write's event (its readers
// read uncommitted records) and deleted its events through it (a snapshot
// and its retention) before the resend met the fence. The write is
// stored and the new owner built on it: its outcome is unknown, never a
// *journal.FencedError (definitely not stored), though a replay finds
// nothing at its first number.
func TestClaimFencedWriteAppendedThenDeleted(t *testing.T) {
	brokers := brokersOf(t, "real")
	tables, _ := openEventual(t, "postgres")
	b := brokerEnv{brokers: brokers, tables: tables, prefix: kafkatest.Prefix(t, brokers, "claimdel")}
	const partitions = 2
	topic := b.prefix + "Del"
	kafkatest.CreateTopic(t, b.brokers, topic, partitions)
	bh := newBlackhole()
	old := kafkatest.Open(t, b.brokers, b.tables, b.topic("Del"), kafka.WithClientOptions(kgo.Dialer(bh.dial)))
	next := kafkatest.Open(t, b.brokers, b.tables, b.topic("Del"))
	ctx := t.Context()
	pid := idsIn("Del", b.prefix, 1, partitions, 1)[0]

	first, err := old.Claim(ctx, b.prefix, topic, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(first.Close)
	write := func(j *kafka.Journal, seq int64, token journal.FenceToken) ([]error, error) {
		return j.WriteFenced(ctx, []journal.AtomicWrite{{PersistenceID: pid, Events: []journal.Repr{sized(pid, seq, 10)}}}, []journal.FenceToken{token})
	}
	if res, err := write(old, 1, first.Token()); err != nil || journal.Results(res) != nil {
		t.Fatalf("first write: %v %v", res, err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	endOf := func() int64 {
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		o, _ := ends.Lookup(topic, 1)
		return o.Offset
	}
	before := endOf()

	bh.armed.Store(true)
	type outcome struct {
		res []error
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := write(old, 2, first.Token())
		done <- outcome{res, err}
	}()
	select {
	case <-bh.produced:
	case <-time.After(10 * time.Second):
		t.Fatal("the write sent no Produce")
	}
	for deadline := time.Now().Add(10 * time.Second); endOf() <= before; {
		if time.Now().After(deadline) {
			t.Fatal("the broker did not append the record")
		}
		time.Sleep(20 * time.Millisecond)
	}
	second, err := next.Claim(ctx, b.prefix, topic, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(second.Close)
	// The new owner recovers (the write at 2 is there) and deletes
	// through it.
	if h, err := next.HighestSequenceNr(ctx, pid, 0); err != nil || h != 2 {
		t.Fatalf("the new owner's recovery: highest %d, %v; want 2 (the first send was appended)", h, err)
	}
	if err := next.DeleteTo(ctx, pid, 2); err != nil {
		t.Fatal(err)
	}
	bh.kill() // the first send's connection drops: franz-go sends the batch again

	var o outcome
	select {
	case o = <-done:
	case <-time.After(40 * time.Second):
		t.Fatal("the write did not end")
	}
	t.Logf("the write under the fenced claim: results %v, error %v", o.res, o.err)
	var fe *journal.FencedError
	if o.err == nil && len(o.res) == 1 && errors.As(o.res[0], &fe) {
		reader := kafkatest.Open(t, b.brokers, b.tables, b.topic("Del"))
		if h, err := reader.HighestSequenceNr(ctx, pid, 0); err == nil && h >= 2 {
			t.Errorf("the write of %s@2 was reported as a *journal.FencedError (definitely not stored), but it is stored: the new owner recovered it and the journal's highest number is %d", pid, h)
		}
	}
}
