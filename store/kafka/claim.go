package kafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/kafka/eventual"
)

// Claim is one journal's exclusive right to append to one partition of a
// journal topic, among the claims of one domain (the consumer group of
// package kafkacluster, say): the fence Kafka itself keeps for a member
// that owns a partition.
//
// Rules:
//   - Once Claim returns, the brokers refuse every record sent under an
//     earlier claim of the same domain, topic and partition, by any
//     process, and a transaction of that earlier claim still open is
//     aborted. A writer paused between its own check of its ownership
//     and the produce (a stopped process) therefore cannot append after
//     the new owner has read the partition.
//   - Writes carry a claim through journal.FencedWriter: WriteFenced with
//     the claim's Token for each write. A write refused because a later
//     claim was made is not stored and its result is a
//     *journal.FencedError (ErrFenced, ErrRejected); every later write
//     under the claim is refused the same way without being sent.
//   - The records of one WriteFenced call under one claim are written in
//     one Kafka transaction, committed before the call returns; one
//     transaction of a claim runs at a time (the journal front already
//     sends many writers' writes in one call). A write whose record was
//     appended but whose transaction could not be committed has an
//     unknown outcome: its record stays visible to readers that read
//     uncommitted records, as this journal's do, and not to those that
//     read committed ones.
//   - A write whose records met the later claim's fence is refused as
//     fenced only when the journal, read after, holds none of the call's
//     writes (a send whose answer was lost is sent again, and the resend
//     can meet the fence after the first was appended); otherwise the
//     call's outcome is unknown.
//   - A write under a claim of another journal, or for an id whose
//     partition is not the claim's, is rejected with
//     journal.ErrInvalidArgument. The records go to the claimed
//     partition only.
//
// A claim is a Kafka transactional producer whose transactional id names
// the domain, topic and partition ("annals-claim/DOMAIN/TOPIC/PARTITION"):
// Claim initialises its producer id, which raises the id's epoch at the
// transaction coordinator. The cluster's brokers must allow transactions
// (the transaction state topic needs as many brokers as its replication
// factor, transaction.state.log.replication.factor).
type Claim struct {
	j          *Journal
	cl         *kgo.Client
	id         string // the producer's transactional id
	domain     string
	topic      string
	partition  int32
	partitions int // the topic's partition count when claimed
	epoch      int16

	txn sync.Mutex // one transaction at a time

	mu     sync.Mutex
	fenced error // set once the claim is fenced off (or unusable): every later write is refused
	closed bool
}

// stop records why the claim can take no more writes (the first cause):
// a later claim's fence wraps journal.ErrFenced.
func (c *Claim) stop(err error) {
	if isFencedOff(err) {
		err = fmt.Errorf("%w: a later claim of %s fenced this one off: %w", journal.ErrFenced, c.Unit(), err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fenced == nil {
		c.fenced = err
	}
}

// state returns whether the claim is closed and why it is fenced.
func (c *Claim) state() (closed bool, fenced error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed, c.fenced
}

// claimEndTimeout bounds the ending of a claim's transaction after its
// writes' context ended: the transaction must end before the next.
const claimEndTimeout = 10 * time.Second

// Claim makes this journal the only writer of partition of topic among
// the claims of domain (see Claim) and returns the claim, or an error
// when the coordinator could not be reached within ctx. Close releases
// it.
func (j *Journal) Claim(ctx context.Context, domain, topic string, partition int32) (*Claim, error) {
	if j.closed.Load() {
		return nil, journal.ErrClosed
	}
	if domain == "" {
		return nil, fmt.Errorf("%w: a claim of %s/%d with no domain", journal.ErrInvalidArgument, topic, partition)
	}
	m, err := j.meta(ctx, topic)
	if _, ok := m.leaders[partition]; err == nil && !ok { // partitions added since the journal read the topic's
		j.forgetMeta(topic)
		m, err = j.meta(ctx, topic)
	}
	if err != nil {
		return nil, fmt.Errorf("kafka journal: claiming %s/%d: %w", topic, partition, err)
	}
	if _, ok := m.leaders[partition]; !ok {
		return nil, fmt.Errorf("%w: claiming %s/%d: the topic has %d partitions", journal.ErrInvalidArgument, topic, partition, len(m.leaders))
	}
	id := "annals-claim/" + domain + "/" + topic + "/" + strconv.Itoa(int(partition))
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(j.brokers...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0), kgo.RecordDeliveryTimeout(j.cfg.readTimeout), kgo.TransactionalID(id),
		kgo.RecordPartitioner(kgo.ManualPartitioner())}, j.cfg.clientOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	_, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("kafka journal: claiming %s/%d for %s (transactional id %q): %w", topic, partition, domain, id, err)
	}
	return &Claim{j: j, cl: cl, id: id, domain: domain, topic: topic, partition: partition, partitions: len(m.leaders), epoch: epoch}, nil
}

// Token returns the fencing token that carries the claim in
// journal.FencedWriter.WriteFenced.
func (c *Claim) Token() journal.FenceToken {
	return journal.FenceToken{Store: c, Cluster: c.domain, Lease: c.Unit(), Holder: c.id, Epoch: int64(c.epoch)}
}

// Err returns nil while writes can be made under the claim; after it was
// fenced off by a later claim of its partition, an error wrapping
// journal.ErrFenced; after its producer failed to end a transaction (the
// claim is broken: a new one must be made), that failure. A closed
// claim's Err is journal.ErrClosed.
func (c *Claim) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return journal.ErrClosed
	}
	return c.fenced
}

// Unit returns the claimed partition's name, "topic/partition".
func (c *Claim) Unit() string { return c.topic + "/" + strconv.Itoa(int(c.partition)) }

// Close releases the claim after the transaction in progress, if any;
// writes under it fail after. It does not make the partition free for
// another claim: the next Claim of it fences this one in any case.
func (c *Claim) Close() {
	c.txn.Lock()
	defer c.txn.Unlock()
	c.mu.Lock()
	closed := c.closed
	c.closed = true
	c.mu.Unlock()
	if !closed {
		c.cl.Close()
	}
}

var _ journal.FencedWriter = (*Journal)(nil)

// WriteFenced implements journal.FencedWriter: writes whose token carries
// a Claim of this journal are written under it (see Claim), the others as
// Write writes them. Tokens of other stores only mark their writes as
// fenced by their writer's own check.
func (j *Journal) WriteFenced(ctx context.Context, writes []journal.AtomicWrite, tokens []journal.FenceToken) ([]error, error) {
	if len(tokens) != len(writes) {
		return nil, fmt.Errorf("%w: %d fencing tokens for %d atomic writes", journal.ErrInvalidArgument, len(tokens), len(writes))
	}
	if j.closed.Load() {
		return nil, journal.ErrClosed
	}
	// The writes without a claim of this journal form one part, those of
	// each claim one each; the parts are written at once.
	type part struct {
		claim   *Claim // nil: no claim
		at      []int
		results []error
		err     error
	}
	results := make([]error, len(writes))
	var parts []*part
	of := map[*Claim]*part{}
	for i, t := range tokens {
		c, _ := t.Store.(*Claim)
		if c != nil && c.j != j {
			results[i] = journal.Reject("%w: write of %q under claim %s of another journal", journal.ErrInvalidArgument, writes[i].PersistenceID, c.Unit())
			continue
		}
		p := of[c]
		if p == nil {
			p = &part{claim: c}
			of[c] = p
			parts = append(parts, p)
		}
		p.at = append(p.at, i)
	}
	var wg sync.WaitGroup
	for _, p := range parts {
		sub := make([]journal.AtomicWrite, len(p.at))
		for n, i := range p.at {
			sub[n] = writes[i]
		}
		wg.Go(func() {
			if p.claim == nil {
				p.results, p.err = j.Write(ctx, sub)
			} else {
				p.results, p.err = p.claim.write(ctx, sub)
			}
		})
	}
	wg.Wait()
	var unknown error
	for _, p := range parts {
		if p.err != nil {
			unknown = errors.Join(unknown, p.err)
			continue
		}
		for n, i := range p.at {
			if p.results != nil {
				results[i] = p.results[n]
			}
		}
	}
	if unknown != nil {
		return nil, unknown
	}
	return journal.Results(results), nil
}

// write writes ws under the claim in one transaction, after the claim's
// transaction in progress, if any.
func (c *Claim) write(ctx context.Context, ws []journal.AtomicWrite) ([]error, error) {
	j := c.j
	c.txn.Lock()
	defer c.txn.Unlock()
	if closed, fenced := c.state(); closed || fenced != nil {
		results := make([]error, len(ws))
		for i, w := range ws {
			if closed {
				results[i] = journal.Reject("%w: write of %q under claim %s, which is closed", journal.ErrInvalidArgument, w.PersistenceID, c.Unit())
			} else {
				results[i] = &journal.FencedError{PersistenceID: w.PersistenceID, Token: c.Token()}
			}
		}
		return results, nil
	}
	refuse := func(key eventual.Key) error {
		if p := Partition(key.ID, c.partitions); key.Topic != c.topic || p != c.partition {
			return journal.Reject("%w: write of %q under claim %s: the id's records go to %s/%d", journal.ErrInvalidArgument,
				key.ID, c.Unit(), key.Topic, p)
		}
		return nil
	}
	b, err := j.prepare(ctx, ws, refuse)
	if err != nil || len(b.records) == 0 {
		return b.done(), err
	}
	for _, r := range b.records { // checked by refuse: the id's partition is the claim's
		r.Partition = c.partition
	}
	if err := c.cl.BeginTransaction(); err != nil {
		return nil, fmt.Errorf("kafka journal: claim %s: beginning a transaction: %w", c.Unit(), err)
	}
	produced := j.produceSync(ctx, c.cl, b.records...)
	if c.allFenced(produced) {
		c.stop(produced[0].Err)
		c.end(kgo.TryAbort)
		j.forgetAll(b)
		// A refusal of the records' first send proves that none was
		// appended, but a send whose answer was lost is sent again, and
		// a resend can meet the fence after the first was appended (in
		// the transaction the later claim aborted, which readers of
		// uncommitted records see). The journal is read to tell: any of
		// the writes there makes the call's outcome unknown.
		if err := c.absent(ctx, ws, b); err != nil {
			return nil, fmt.Errorf("kafka journal: claim %s was fenced off while its records were sent: %w", c.Unit(), err)
		}
		for _, i := range b.index {
			b.results[i] = &journal.FencedError{PersistenceID: ws[i].PersistenceID, Token: c.Token()}
		}
		return b.done(), nil
	}
	results, err := j.settle(ws, b, produced)
	if err != nil {
		if end := c.end(kgo.TryAbort); end != nil {
			err = errors.Join(err, end)
		}
		return nil, err
	}
	if err := c.end(kgo.TryCommit); err != nil {
		j.forgetAll(b)
		return nil, fmt.Errorf("kafka journal: claim %s: the records are appended, their transaction's outcome is unknown: %w", c.Unit(), err)
	}
	return results, nil
}

// absent returns nil when none of the writes of b's records is in the
// journal, read after their sends ended: the event at each write's first
// number is missing or another writer's, and not deleted (a delete hides
// an event of the call as well as another's). A later claim can only
// have been made after any of them was appended (the brokers refuse the
// records of a fenced claim), so its owner's recovery saw that one and
// wrote after it: a write of the call that was appended holds its first
// number. Otherwise the error says which write is there, or why the
// journal could not be read (both: the outcome is unknown). One case it
// cannot tell: the new owner purged the id (its events and highest
// number gone) between the append and this read; the write is then
// reported fenced though its record is in the log, which the purge has
// made void for every reader.
func (c *Claim) absent(ctx context.Context, ws []journal.AtomicWrite, b *batch) error {
	ctx, cancel := c.j.bounded(context.WithoutCancel(ctx))
	defer cancel()
	for _, i := range b.index {
		w := ws[i]
		first := w.Events[0]
		v, err := c.j.read(ctx, w.PersistenceID, true)
		if err != nil {
			return fmt.Errorf("reading %s@%d to tell whether the write is stored: %w", w.PersistenceID, first.SequenceNr, err)
		}
		if v.deleteTo >= first.SequenceNr {
			// The id's events are deleted through the write's first
			// number since (the new owner recovered and deleted, a
			// snapshot's retention): the event there, whoever's, is
			// gone, so the write cannot be told absent.
			return fmt.Errorf("the events of %s are deleted through %d: whether its write at %d is stored cannot be told", w.PersistenceID, v.deleteTo, first.SequenceNr)
		}
		var found, failed error
		c.j.stream(ctx, v, w.PersistenceID, first.SequenceNr, first.SequenceNr, 1, func(r journal.Repr, err error) bool {
			switch {
			case err != nil:
				failed = fmt.Errorf("reading %s@%d to tell whether the write is stored: %w", w.PersistenceID, first.SequenceNr, err)
			case r.WriterID == first.WriterID && r.SerializerID == first.SerializerID && r.Manifest == first.Manifest && bytes.Equal(r.Payload, first.Payload):
				found = fmt.Errorf("the write of %s@%d..%d is in the journal", w.PersistenceID, first.SequenceNr, w.Events[len(w.Events)-1].SequenceNr)
			}
			return false
		})
		if failed != nil {
			return failed
		}
		if found != nil {
			return found
		}
	}
	return nil
}

// end ends the claim's transaction, flushing or aborting what is still
// buffered first. A failure to end it leaves the claim unusable (its
// producer cannot begin another transaction): every later write under it
// is refused as fenced.
func (c *Claim) end(how kgo.TransactionEndTry) error {
	ctx, cancel := context.WithTimeout(context.Background(), claimEndTimeout)
	defer cancel()
	if how == kgo.TryAbort {
		if err := c.cl.AbortBufferedRecords(ctx); err != nil {
			c.stop(err)
			return fmt.Errorf("kafka journal: claim %s: aborting its transaction: %w", c.Unit(), err)
		}
	}
	if err := c.cl.EndTransaction(ctx, how); err != nil {
		c.stop(err)
		return fmt.Errorf("kafka journal: claim %s: ending its transaction: %w", c.Unit(), err)
	}
	return nil
}

// allFenced reports whether every record was refused because a later
// claim of the partition fenced this one off: none was appended.
func (c *Claim) allFenced(produced kgo.ProduceResults) bool {
	if len(produced) == 0 {
		return false
	}
	for _, r := range produced {
		if !isFencedOff(r.Err) {
			return false
		}
	}
	return true
}

// isFencedOff reports whether err is the brokers' refusal of a producer
// whose transactional id a later producer initialised.
func isFencedOff(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.InvalidProducerIDMapping)
}
