package kafka_test

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/eventual"
	"github.com/annals-go/annals/store/kafka/kafkatest"
	"github.com/annals-go/annals/store/kafka/wire/wiretest"
)

// blackhole is a franz-go dialer whose connections, once armed, swallow
// every response on the first connection that sends a Produce request:
// the broker appends the records, the client never hears of it, until
// kill closes that connection (the client then sends the batch again on
// a new one).
type blackhole struct {
	armed    atomic.Bool
	mu       sync.Mutex
	swallows []*blackholeConn
	produced chan struct{} // closed when an armed connection sent a Produce
}

func newBlackhole() *blackhole { return &blackhole{produced: make(chan struct{})} }

func (b *blackhole) dial(ctx context.Context, network, host string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	return &blackholeConn{Conn: c, b: b}, nil
}

// kill closes the swallowing connections.
func (b *blackhole) kill() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.swallows {
		c.Conn.Close()
	}
}

type blackholeConn struct {
	net.Conn
	b          *blackhole
	out        []byte // outgoing bytes not yet parsed into whole requests
	swallowing atomic.Bool
}

func (c *blackholeConn) Write(p []byte) (int, error) {
	c.out = append(c.out, p...)
	for len(c.out) >= 6 {
		size := int(binary.BigEndian.Uint32(c.out))
		key := int16(binary.BigEndian.Uint16(c.out[4:]))
		if key == 0 && c.b.armed.CompareAndSwap(true, false) { // Produce
			c.swallowing.Store(true)
			c.b.mu.Lock()
			c.b.swallows = append(c.b.swallows, c)
			c.b.mu.Unlock()
			close(c.b.produced)
		}
		if len(c.out) < 4+size {
			break
		}
		c.out = c.out[4+size:]
	}
	return c.Conn.Write(p)
}

func (c *blackholeConn) Read(p []byte) (int, error) {
	for {
		n, err := c.Conn.Read(p)
		if !c.swallowing.Load() || err != nil {
			return n, err
		}
	}
}

// TestClaimFencedWriteWhoseFirstSendWasAppended: a write under a claim
// whose Produce the broker appended but whose answer was lost (a dropped
// connection, a request timeout after a pause), sent again after a later
// claim fenced the first: the resend is refused as fenced, but the first
// send's record is in the log (in the transaction the later claim
// aborted, which the journal's readers read) and the new owner's
// recovery saw it. The write is not acknowledged, and it is never
// reported as a *journal.FencedError (definitely not stored): its outcome
// is unknown. The same holds when the new owner, having recovered it,
// deleted the id's events through it (a snapshot and its retention)
// before the resend met the fence, so that a replay finds nothing at the
// write's number.
func TestClaimFencedWriteWhoseFirstSendWasAppended(t *testing.T) {
	for _, c := range []struct {
		name   string
		delete bool // the new owner deletes through the write before the resend
	}{{"kept", false}, {"deleted by the new owner", true}} {
		t.Run(c.name, func(t *testing.T) {
			brokers := brokersOf(t, "real")
			tables, _ := openEventual(t, "postgres")
			b := brokerEnv{brokers: brokers, tables: tables, prefix: kafkatest.Prefix(t, brokers, "claimlost")}
			const partitions = 2
			topic := b.prefix + "Lost"
			kafkatest.CreateTopic(t, b.brokers, topic, partitions)
			bh := newBlackhole()
			old := kafkatest.Open(t, b.brokers, b.tables, b.topic("Lost"), kafka.WithClientOptions(kgo.Dialer(bh.dial)))
			next := kafkatest.Open(t, b.brokers, b.tables, b.topic("Lost"))
			ctx := t.Context()
			pid := idsIn("Lost", b.prefix, 1, partitions, 1)[0]

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
			// The broker's answer is swallowed: its end offset tells when
			// it appended the record (no signal to wait on).
			for deadline := time.Now().Add(10 * time.Second); endOf() <= before; {
				if time.Now().After(deadline) {
					t.Fatal("the broker did not append the record")
				}
				time.Sleep(20 * time.Millisecond)
			}
			// The take-over: the later claim aborts the earlier one's
			// transaction; the new owner recovers the id.
			second, err := next.Claim(ctx, b.prefix, topic, 1)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(second.Close)
			if h, err := next.HighestSequenceNr(ctx, pid, 0); err != nil || h != 2 {
				t.Fatalf("the new owner's recovery: highest %d, %v; want 2 (the first send was appended)", h, err)
			}
			if c.delete {
				if err := next.DeleteTo(ctx, pid, 2); err != nil {
					t.Fatal(err)
				}
			}
			bh.kill() // the first send's connection drops: franz-go sends the batch again

			var o outcome
			select {
			case o = <-done:
			case <-time.After(40 * time.Second):
				t.Fatal("the write did not end")
			}
			var fe *journal.FencedError
			switch {
			case o.err == nil && journal.Results(o.res) == nil:
				t.Errorf("the write under the fenced claim was acknowledged")
			case o.err == nil && errors.As(o.res[0], &fe):
				t.Errorf("the write of %s@2 was reported as a *journal.FencedError (definitely not stored), but the new owner recovered it: %v", pid, o.res[0])
			default:
				t.Logf("the write under the fenced claim: results %v, error %v", o.res, o.err)
			}
		})
	}
}

// TestLagAndSkipAfterClaimWrites: a write under a claim ends with its
// transaction's commit marker, which takes an offset: once the replicator
// has applied everything, Lag reports no partition behind, and a record
// the replicator cannot decode right after a transaction is named by a
// *StoppedError whose offset SkipRecord accepts (the pointer moves past
// the marker).
func TestLagAndSkipAfterClaimWrites(t *testing.T) {
	brokers := brokersOf(t, "real")
	tables, _ := openEventual(t, "postgres")
	run := kafkatest.Prefix(t, brokers, "claimlag")
	topic := run + "ClaimLag"
	kafkatest.CreateTopic(t, brokers, topic, 1)
	j := kafkatest.Open(t, brokers, tables, kafka.WithTopic(func(string) string { return topic }))
	ctx := t.Context()
	pid := "ClaimLag|1"
	c, err := j.Claim(ctx, run, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	res, err := j.WriteFenced(ctx, []journal.AtomicWrite{{PersistenceID: pid, Events: []journal.Repr{sized(pid, 1, 10)}}}, []journal.FenceToken{c.Token()})
	if err != nil || journal.Results(res) != nil {
		t.Fatalf("claim write: %v %v", res, err)
	}
	poison := wiretest.ProduceUndecodable(t, brokers, topic, pid, 2)

	rep := newReplicated()
	opts := append(rep.options(), kafka.WithTopics(topic), kafka.WithGroup(run))
	rctx, cancel := context.WithCancel(ctx)
	r, err := kafka.NewReplicator(brokers, tables, opts...)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	var stop error
	select {
	case stop = <-rep.stopped:
	case <-time.After(time.Minute):
		t.Fatal("the replicator did not stop at the undecodable record")
	}
	cancel()
	<-done
	var se *kafka.StoppedError
	if !errors.As(stop, &se) || se.Offset != poison.Offset {
		t.Fatalf("stopped with %v, want at offset %d", stop, poison.Offset)
	}
	pointer, _, err := tables.Pointer(ctx, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pointer %d, undecodable record at %d", pointer, poison.Offset)
	if err := kafka.SkipRecord(ctx, tables, topic, 0, se.Offset); err != nil {
		t.Errorf("SkipRecord at the offset the StoppedError names (%d): %v", se.Offset, err)
	}

	// Lag with everything before the undecodable record applied: one
	// transaction's marker between the pointer and it.
	if err := tables.SavePointer(ctx, topic, 0, poison.Offset, time.Now()); err != nil {
		t.Fatal(err)
	}
	res, err = j.WriteFenced(ctx, []journal.AtomicWrite{{PersistenceID: "ClaimLag|2", Events: []journal.Repr{sized("ClaimLag|2", 1, 10)}}}, []journal.FenceToken{c.Token()})
	if err != nil || journal.Results(res) != nil {
		t.Fatalf("claim write: %v %v", res, err)
	}
	r2, err := kafka.NewReplicator(brokers, tables, opts...)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel = context.WithCancel(ctx)
	go func() { done <- r2.Run(rctx) }()
	rep.await(t, "the second id", func() bool {
		h, ok, err := tables.Head(ctx, eventual.Key{ID: "ClaimLag|2", Topic: topic})
		return err == nil && ok && h.SeqNr == 1
	})
	cancel()
	<-done
	lags, err := j.Lag(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lags {
		t.Logf("lag: %+v", l)
		if l.Behind != 0 {
			t.Errorf("partition %d: Behind = %d with every record applied (Records %d): the transaction's marker counts as unreplicated", l.Partition, l.Behind, l.Records)
		}
	}
}
