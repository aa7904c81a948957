package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/kafka/eventual"
	"github.com/annals-go/annals/store/kafka/wire"
)

// Write implements journal.Journal: one Append record per atomic write,
// all produced together and acknowledged by every in-sync replica before
// Write returns. A write whose first number is not above the id's known
// highest is a *journal.ConflictError; an event above the payload limit
// (WithMaxPayloadSize) and a record the producer or the broker refuses as
// too large are rejections. Each outcome is that of its own write's
// record, whatever order the records complete in.
func (j *Journal) Write(ctx context.Context, writes []journal.AtomicWrite) ([]error, error) {
	if j.closed.Load() {
		return nil, journal.ErrClosed
	}
	b, err := j.prepare(ctx, writes, nil)
	if err != nil || len(b.records) == 0 {
		return b.done(), err
	}
	return j.settle(writes, b, j.produceSync(ctx, j.cl, b.records...))
}

// batch is a call's writes made into records: one per write that passed
// the checks.
type batch struct {
	results []error          // per write: its refusal, nil for those with a record
	records []*kgo.Record    // in the order of the writes
	index   []int            // records[k] is the record of writes[index[k]]
	pending map[string]int64 // each id's last number in the batch
}

// done returns the results of a batch with nothing (more) to produce.
func (b *batch) done() []error {
	if b == nil {
		return nil
	}
	return journal.Results(b.results)
}

// prepare checks writes and encodes each that passes as one Append
// record. refuse, when set, returns the refusal of a write to key, after
// the checks of its own (nil: none). An error is the whole call's:
// nothing was produced.
func (j *Journal) prepare(ctx context.Context, writes []journal.AtomicWrite, refuse func(key eventual.Key) error) (*batch, error) {
	b := &batch{results: make([]error, len(writes)), pending: map[string]int64{}}
	now := time.Now()
	if err := j.learnHighest(ctx, writes); err != nil {
		return nil, err
	}
	for i, w := range writes {
		if err := journal.CheckAtomicWrite(w); err != nil {
			b.results[i] = err
			continue
		}
		if err := journal.CheckPayloads(w, j.cfg.maxPayload); err != nil {
			b.results[i] = err
			continue
		}
		key, err := j.key(w.PersistenceID)
		if err != nil {
			b.results[i] = journal.Reject("%w", err)
			continue
		}
		if refuse != nil {
			if err := refuse(key); err != nil {
				b.results[i] = err
				continue
			}
		}
		high, ok := b.pending[w.PersistenceID]
		if !ok {
			if high, ok = j.knownHighest(w.PersistenceID); !ok {
				if high, err = j.HighestSequenceNr(ctx, w.PersistenceID, 0); err != nil {
					return nil, err
				}
			}
		}
		first, last := w.Events[0].SequenceNr, w.Events[len(w.Events)-1].SequenceNr
		if first <= high {
			b.results[i] = &journal.ConflictError{PersistenceID: w.PersistenceID, SequenceNr: first}
			continue
		}
		value, headers, err := encodeAppend(w, j.cfg.origin, j.cfg.expireAfter, now)
		if err != nil {
			b.results[i] = journal.Reject("%w", err)
			continue
		}
		b.records = append(b.records, record(key, value, headers, now))
		b.index = append(b.index, i)
		b.pending[w.PersistenceID] = last
	}
	return b, nil
}

// settle pairs the produce results of b's records with their writes and
// returns the call's results: a record the producer or the broker refused
// as too large is a rejection; any other failure makes the whole call's
// outcome unknown (and the journal forgets the highest numbers of its
// ids, to read them again).
func (j *Journal) settle(writes []journal.AtomicWrite, b *batch, produced kgo.ProduceResults) ([]error, error) {
	// franz-go gives the results in the order the records complete (a
	// record the client refuses at once comes before those the broker
	// acknowledges), never by position: each result is paired with its
	// write through its record.
	of := make(map[*kgo.Record]int, len(b.records))
	for k, r := range b.records {
		of[r] = b.index[k]
	}
	var unknown error
	for _, r := range produced {
		i, ok := of[r.Record]
		if !ok {
			unknown = errors.Join(unknown, fmt.Errorf("kafka journal: the client returned the outcome of a record it was not given (key %q)", recordKey(r.Record)))
			continue
		}
		delete(of, r.Record)
		switch {
		case r.Err == nil:
		case errors.Is(r.Err, kerr.MessageTooLarge) || errors.Is(r.Err, kerr.RecordListTooLarge):
			b.results[i] = journal.Reject("%s: the record of %d events (%d bytes) is larger than the producer or the broker accepts (franz-go's ProducerBatchMaxBytes, the topic's max.message.bytes): %w",
				writes[i].PersistenceID, len(writes[i].Events), len(r.Record.Value), r.Err)
		default:
			unknown = errors.Join(unknown, fmt.Errorf("kafka journal: producing %s: %w", writes[i].PersistenceID, r.Err))
		}
	}
	if len(of) > 0 {
		unknown = errors.Join(unknown, fmt.Errorf("kafka journal: the client returned no outcome for %d of %d records", len(of), len(b.records)))
	}
	if unknown != nil {
		j.forgetAll(b)
		return nil, unknown
	}
	for _, i := range b.index {
		if b.results[i] == nil {
			pid := writes[i].PersistenceID
			j.remember(pid, writes[i].Events[len(writes[i].Events)-1].SequenceNr)
		}
	}
	j.written.Notify()
	return journal.Results(b.results), nil
}

// forgetAll forgets the highest numbers of b's ids, to read them again.
func (j *Journal) forgetAll(b *batch) {
	for pid := range b.pending {
		j.forget(pid)
	}
}

// produceSync produces records with cl and returns their results, in completion
// order, once all have one or ctx ends, whichever comes first (then each
// record still in flight has ctx's error, and its outcome is unknown).
// Unlike franz-go's ProduceSync it never waits past ctx: an idempotent
// producer does not fail a record it may have sent until the broker
// answers, which may be never. Nor does it wait for records whose
// partition has too few replicas in sync (see stallCheck): once one is
// found, every record still unanswered fails, that one with the reason.
func (j *Journal) produceSync(ctx context.Context, cl *kgo.Client, records ...*kgo.Record) kgo.ProduceResults {
	ctx, cancel := j.bounded(ctx)
	defer cancel()
	ctx, abandon := context.WithCancel(ctx) // the records' production, ended when the write fails fast
	defer abandon()
	var (
		mu      sync.Mutex
		results = make(kgo.ProduceResults, 0, len(records))
		done    = make(chan struct{})
	)
	for _, r := range records {
		cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if results = append(results, kgo.ProduceResult{Record: r, Err: err}); len(results) == len(records) {
				close(done)
			}
		})
	}
	// unanswered returns the records without a result yet.
	unanswered := func() []*kgo.Record {
		mu.Lock()
		defer mu.Unlock()
		answered := make(map[*kgo.Record]bool, len(results))
		for _, r := range results {
			answered[r.Record] = true
		}
		var out []*kgo.Record
		for _, r := range records {
			if !answered[r] {
				out = append(out, r)
			}
		}
		return out
	}
	var (
		short    map[*kgo.Record]error // records refused for too few replicas in sync
		checking chan map[*kgo.Record]error
	)
	check := time.NewTicker(stallCheck)
	defer check.Stop()
wait:
	for {
		select {
		case <-done:
			return results
		case <-ctx.Done():
			break wait
		case <-check.C:
			if checking == nil { // the question runs beside the wait, which an answer from the broker ends
				c, pending := make(chan map[*kgo.Record]error, 1), unanswered()
				checking = c
				go func() { c <- j.shortOfReplicas(ctx, pending) }()
			}
		case short = <-checking:
			checking = nil
			if len(short) > 0 {
				break wait
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	out := append(kgo.ProduceResults(nil), results...)
	answered := make(map[*kgo.Record]bool, len(out))
	for _, r := range out {
		answered[r.Record] = true
	}
	for _, r := range records {
		if answered[r] {
			continue
		}
		err, ok := short[r]
		switch {
		case ok:
		case len(short) > 0:
			err = errors.New("not waited for: another record of the write was refused for too few replicas in sync")
		default:
			err = fmt.Errorf("no answer from the broker: %w", ctx.Err())
		}
		out = append(out, kgo.ProduceResult{Record: r, Err: err})
	}
	return out
}

// recordKey is r's key, or "" for a nil record.
func recordKey(r *kgo.Record) string {
	if r == nil {
		return ""
	}
	return string(r.Key)
}

func record(key eventual.Key, value []byte, headers map[string][]byte, now time.Time) *kgo.Record {
	r := &kgo.Record{Topic: key.Topic, Key: []byte(key.ID), Value: value, Timestamp: now}
	// The action header first, as the Scala library writes it.
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: wire.HeaderKey, Value: headers[wire.HeaderKey]})
	for k, v := range headers {
		if k != wire.HeaderKey {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: v})
		}
	}
	return r
}

// learnHighest reads, concurrently, the highest number of each id of
// writes the journal does not know yet (its first write in this process).
func (j *Journal) learnHighest(ctx context.Context, writes []journal.AtomicWrite) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	seen := map[string]bool{}
	for _, w := range writes {
		pid := w.PersistenceID
		if seen[pid] || journal.CheckPersistenceID("write", pid) != nil {
			continue // refused below
		}
		seen[pid] = true
		if _, ok := j.knownHighest(pid); ok {
			continue
		}
		if _, err := j.key(pid); err != nil {
			continue // rejected below
		}
		g.Go(func() error {
			_, err := j.HighestSequenceNr(gctx, pid, 0)
			return err
		})
	}
	return g.Wait()
}

// produce writes one action record for key and returns where it went.
func (j *Journal) produce(ctx context.Context, key eventual.Key, h wire.Header) (partition int32, offset int64, err error) {
	h.Origin, h.Version = j.cfg.origin, Version
	header, err := wire.EncodeHeader(h)
	if err != nil {
		return 0, 0, err
	}
	r := record(key, nil, map[string][]byte{wire.HeaderKey: header}, time.Now())
	if err := j.produceSync(ctx, j.cl, r).FirstErr(); err != nil {
		return 0, 0, j.errs.Map(ctx, fmt.Sprintf("producing a %v for %s", h.Kind, key.ID), err, journal.ErrClosed)
	}
	return r.Partition, r.Offset, nil
}

// DeleteTo implements journal.Journal: a Delete action to the smaller of
// to and the id's highest number, acknowledged before DeleteTo returns.
// The replicator removes the events; reads apply the delete before then.
func (j *Journal) DeleteTo(ctx context.Context, persistenceID string, to int64) error {
	if err := journal.CheckID("delete", persistenceID, to); err != nil {
		return err
	}
	if j.closed.Load() {
		return journal.ErrClosed
	}
	key, err := j.key(persistenceID)
	if err != nil {
		return err
	}
	high, err := j.HighestSequenceNr(ctx, persistenceID, 0)
	if err != nil {
		return err
	}
	if to = min(to, high); to < 1 {
		return nil
	}
	_, _, err = j.produce(ctx, key, wire.Header{Kind: wire.Delete, To: to})
	return err
}

// Purge implements admin.Purger: a Purge action per id, acknowledged
// before Purge returns. The replicator removes each id's events and head;
// reads ignore them at once, and the id's next append starts at 1. Ids
// without events (and invalid ids, which none has) are not an error.
func (j *Journal) Purge(ctx context.Context, persistenceIDs []string) error {
	if j.closed.Load() {
		return journal.ErrClosed
	}
	for _, pid := range persistenceIDs {
		if journal.CheckPersistenceID("purge", pid) != nil {
			continue // no journal has it: every store refuses such ids
		}
		key, err := j.key(pid)
		if err != nil {
			return err
		}
		if _, _, err := j.produce(ctx, key, wire.Header{Kind: wire.Purge}); err != nil {
			return err
		}
		j.forget(pid)
	}
	return nil
}
