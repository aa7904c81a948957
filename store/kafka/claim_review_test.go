package kafka_test

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/kafkatest"
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
// whose Produce the broker appended but whose response was lost (a
// dropped connection, a request timeout after a pause), sent again after
// a later claim fenced the first: the resend is refused as fenced, and
// the write is reported as a *journal.FencedError (definitely not
// stored). But the first send's record is in the log, in the transaction
// the later claim aborted, and the journal's readers read uncommitted
// records: a replay returns the event of the write reported as not
// stored.
func TestClaimFencedWriteWhoseFirstSendWasAppended(t *testing.T) {
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
	for deadline := time.Now().Add(10 * time.Second); endOf() <= before; {
		if time.Now().After(deadline) {
			t.Fatal("the broker did not append the record")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The take-over: the later claim aborts the earlier one's transaction.
	second, err := next.Claim(ctx, b.prefix, topic, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(second.Close)
	bh.kill() // the first send's connection drops: franz-go sends the batch again

	var o outcome
	select {
	case o = <-done:
	case <-time.After(40 * time.Second):
		t.Fatal("the write did not end")
	}
	t.Logf("the write under the fenced claim: results %v, error %v", o.res, o.err)
	reader := kafkatest.Open(t, b.brokers, b.tables, b.topic("Lost"))
	got := replayedSeqs(t, reader, pid)
	t.Logf("replay of %s: %v", pid, got)
	var fe *journal.FencedError
	if o.err == nil && len(o.res) == 1 && errors.As(o.res[0], &fe) && slices.Contains(got, 2) {
		t.Errorf("the write of %s@2 was reported as a *journal.FencedError (definitely not stored), but a replay returns it: %v", pid, got)
	}
	if h, err := reader.HighestSequenceNr(ctx, pid, 0); err == nil && o.err == nil && fe != nil && h != 1 {
		t.Errorf("HighestSequenceNr(%s) = %d after its write at 2 was refused as fenced, want 1", pid, h)
	}
}
