package kafka

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"iter"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/kafka/eventual"
	"github.com/annals-go/annals/store/kafka/wire"
)

// view is what a read knows of one journal: the eventual store's head and
// the topic's not yet replicated actions folded over it.
type view struct {
	key  eventual.Key
	head eventual.Head
	has  bool
	// purged: the topic's head holds a purge, so the eventual store's
	// events are of an ended incarnation.
	purged          bool
	seqNr, deleteTo int64
	// partition and mark locate the read's Mark; appendsFrom is the offset
	// of the head's first append after its last purge, -1 when none.
	partition   int32
	mark        int64
	appendsFrom int64
	// held, when holding, are the head's appends after its last purge,
	// values decoded, as the read of the partition found them: the
	// replay streams them without reading the partition again.
	held    []eventual.ActionRecord
	holding bool
}

// heldBytes bounds the payload bytes of the appends one read of a
// partition keeps for its replay (view.held); a longer head is read again
// while it is streamed, so memory stays bounded.
const heldBytes = 1 << 20

// read returns the view of pid: a Mark, the partition's pointer and the
// id's head in the eventual store, then, unless the store has applied
// everything before the Mark, the headers of the partition's records from
// there to the Mark (from the head cache when it holds them). With values,
// a read of the partition keeps the appends' values too, up to heldBytes,
// for the replay that follows.
func (j *Journal) read(ctx context.Context, pid string, values bool) (view, error) {
	key, err := j.key(pid)
	if err != nil {
		return view{}, err
	}
	return j.readKey(ctx, key, values)
}

// stored is what a read finds in the eventual store: the pointer of the
// partition, then the head of the key.
type stored struct {
	partition int32
	pointer   int64
	ok        bool
	head      eventual.Head
	has       bool
	err       error
}

// readStored reads the pointer of a partition, then key's head. The
// pointer before the head: the replicator moves the pointer after the
// heads, so every action of the key up to the pointer is in the head read
// after it. (Read the other way round, an append applied in between would
// be in neither the head nor the range read from Kafka.)
func (j *Journal) readStored(ctx context.Context, key eventual.Key, partition int32) (s stored) {
	s.partition = partition
	if s.pointer, s.ok, s.err = j.tables.Pointer(ctx, key.Topic, partition); s.err != nil {
		s.err = j.errs.Map(ctx, fmt.Sprintf("reading the pointer of %s/%d", key.Topic, partition), s.err, journal.ErrClosed)
		return s
	}
	if s.head, s.has, s.err = j.tables.Head(ctx, key); s.err != nil {
		s.err = j.errs.Map(ctx, fmt.Sprintf("reading the head of %q", key.ID), s.err, journal.ErrClosed)
	}
	return s
}

// partitionOf returns the partition the producer sends key's records to,
// when the journal knows its topic's partitions (from an earlier read).
func (j *Journal) partitionOf(key eventual.Key) (int32, bool) {
	j.metas.mu.Lock()
	m, ok := j.metas.m[key.Topic]
	j.metas.mu.Unlock()
	if !ok || len(m.leaders) == 0 {
		return 0, false
	}
	return Partition(key.ID, len(m.leaders)), true
}

// readKey is read of a key, whatever topic it is on. The eventual store
// is read while the Mark is produced when the key's partition is known
// (it is read again after the Mark if the Mark went elsewhere): an
// acknowledged write precedes the Mark, and an older pointer only widens
// the range read from Kafka.
func (j *Journal) readKey(ctx context.Context, key eventual.Key, values bool) (view, error) {
	if j.closed.Load() {
		return view{}, journal.ErrClosed
	}
	ctx, cancel := j.bounded(ctx)
	defer cancel()
	v := view{key: key, appendsFrom: -1}
	var early chan stored
	if p, ok := j.partitionOf(key); ok {
		early = make(chan stored, 1)
		go func() { early <- j.readStored(ctx, key, p) }()
	}
	var idBytes [16]byte
	_, _ = rand.Read(idBytes[:])
	partition, mark, err := j.produce(ctx, key, wire.Header{Kind: wire.Mark, ID: hex.EncodeToString(idBytes[:])})
	var s stored
	if early != nil {
		s = <-early
	}
	if err != nil {
		return view{}, err
	}
	if early == nil || s.partition != partition {
		if early != nil {
			j.forgetMeta(key.Topic) // partitions were added: the next read asks again
		}
		s = j.readStored(ctx, key, partition)
		_, _ = j.meta(ctx, key.Topic) // the partitions, for the next read's partitionOf
	}
	if s.err != nil {
		return view{}, s.err
	}
	v.head, v.has = s.head, s.has
	v.seqNr, v.deleteTo = v.head.SeqNr, v.head.DeleteTo
	from := int64(-1) // the start of the partition
	if s.ok {
		from = s.pointer + 1
	}
	if v.has && v.head.Partition == partition {
		from = max(from, v.head.Offset+1)
	}
	v.partition, v.mark = partition, mark
	if from >= mark {
		return v, nil
	}
	if t := j.cachedTopic(ctx, key.Topic); t != nil {
		p := int64(-1)
		if s.ok {
			p = s.pointer
		}
		if t.fold(ctx, partition, key.ID, from, mark, p, v.fold) {
			return v, nil
		}
	}
	v.holding = values
	held := 0
	err = j.readHead(ctx, key, partition, from, mark, values, func(a eventual.ActionRecord) bool {
		v.fold(a)
		if !v.holding {
			return true
		}
		switch a.Action.Header.Kind {
		case wire.Append:
			for _, e := range a.Action.Events.Events {
				if e.Payload != nil {
					held += len(e.Payload.Data)
				}
			}
			if held > heldBytes {
				v.held, v.holding = nil, false
			} else {
				v.held = append(v.held, a)
			}
		case wire.Purge:
			v.held, held = v.held[:0], 0
		}
		return true
	})
	if err != nil {
		return view{}, err
	}
	return v, nil
}

// fold applies one of the head's actions, in offset order, to the view.
func (v *view) fold(a eventual.ActionRecord) {
	h := a.Action.Header
	switch h.Kind {
	case wire.Append:
		v.seqNr = max(v.seqNr, h.To)
		if v.appendsFrom < 0 {
			v.appendsFrom = a.Offset
		}
	case wire.Delete:
		if v.seqNr == 0 && v.deleteTo == 0 {
			// A delete of a journal without events starts it there.
			v.seqNr, v.deleteTo = h.To, h.To
			return
		}
		v.deleteTo = max(v.deleteTo, min(h.To, max(v.seqNr, v.deleteTo)))
	case wire.Purge:
		v.purged, v.seqNr, v.deleteTo, v.appendsFrom = true, 0, 0, -1
	}
}

// HighestSequenceNr implements journal.Journal: the eventual store's last
// number, or a later one appended in the topic's head.
func (j *Journal) HighestSequenceNr(ctx context.Context, persistenceID string, from int64) (int64, error) {
	if err := journal.CheckID("highest sequence number", persistenceID, from); err != nil {
		return 0, err
	}
	v, err := j.read(ctx, persistenceID, false)
	if err != nil {
		return 0, err
	}
	j.remember(persistenceID, v.seqNr)
	return v.seqNr, nil
}

// Replay implements journal.Journal: the eventual store's events, then
// the head's later ones, with every delete and purge applied. A head read
// from the partition is read once when its appends' payloads fit
// heldBytes; a longer one twice: its actions first (for the deletes and
// purges), then, while streaming, its appends; memory stays bounded
// whatever its length.
func (j *Journal) Replay(ctx context.Context, persistenceID string, from, to, maxEvents int64) iter.Seq2[journal.Repr, error] {
	return func(yield func(journal.Repr, error) bool) {
		if err := journal.CheckReplay(persistenceID, from, to, maxEvents); err != nil {
			yield(journal.Repr{}, err)
			return
		}
		if from > to || maxEvents == 0 {
			return
		}
		v, err := j.read(ctx, persistenceID, true)
		if err != nil {
			yield(journal.Repr{}, err)
			return
		}
		j.stream(ctx, v, persistenceID, from, to, maxEvents, yield)
	}
}

// stream yields the events of the view v of persistenceID with
// from ≤ SequenceNr ≤ to, at most maxEvents: the eventual store's, then
// the head's, as Replay does.
func (j *Journal) stream(ctx context.Context, v view, persistenceID string, from, to, maxEvents int64, yield func(journal.Repr, error) bool) {
	{
		start := max(from, v.deleteTo+1, 1)
		var n, last int64
		emit := func(r eventual.Record) (more bool) {
			if err := ctx.Err(); err != nil {
				yield(journal.Repr{}, err)
				return false
			}
			e, err := toRepr(persistenceID, r)
			if err != nil {
				yield(journal.Repr{}, err)
				return false
			}
			n, last = n+1, e.SequenceNr
			return yield(e, nil) && n < maxEvents
		}
		if v.has && !v.purged && start <= min(to, v.head.SeqNr) {
			end := min(to, v.head.SeqNr)
			size := v.head.SegmentSize
			first, lastSeg := eventual.JournalSegment(start, size), eventual.JournalSegment(end, size)
			segments := journal.Pager[eventual.Record]{
				// Page p.Index is segment first+p.Index, read from the
				// number after the last one seen; the segment of end is
				// the last.
				ReadPage: func(ctx context.Context, p journal.Page, yield func(*eventual.Record) bool) (bool, error) {
					seg := first + int64(p.Index)
					var cur eventual.Record // one per page: yield takes its address
					for r, err := range j.tables.Records(ctx, v.key, seg, p.From, p.To) {
						if err != nil {
							return true, err
						}
						if r.Event.SeqNr < p.From {
							continue
						}
						if cur = r; !yield(&cur) {
							return true, nil
						}
					}
					return seg >= lastSeg, nil
				},
				SequenceNr: func(r *eventual.Record) int64 { return r.Event.SeqNr },
				Errors:     j.errs,
				Op:         fmt.Sprintf("reading %q from the eventual store", persistenceID),
			}
			for r, err := range segments.Replay(ctx, start, end, maxEvents) {
				if err != nil {
					yield(journal.Repr{}, err)
					return
				}
				if !emit(r) {
					return
				}
			}
		}
		if v.appendsFrom >= 0 && last < min(to, v.seqNr) {
			stopped := false
			each := func(a eventual.ActionRecord) bool {
				h := a.Action.Header
				if h.Kind != wire.Append || h.To <= last || h.To < start {
					return true
				}
				for _, e := range a.Action.Events.Events {
					if s := e.SeqNr; s < start || s > to || s <= last {
						continue
					}
					r := eventual.Record{Event: e, Timestamp: a.Timestamp, Origin: h.Origin, Version: h.Version, Partition: a.Partition,
						Offset: a.Offset, HeaderMetadata: h.Metadata, PayloadMetadata: a.Action.Events.Metadata, Headers: a.Headers}
					if !emit(r) {
						stopped = true
						return false
					}
				}
				return last < to
			}
			var err error
			if v.holding {
				for _, a := range v.held {
					if !each(a) {
						break
					}
				}
			} else {
				err = j.readAppends(ctx, v.key, v.partition, v.appendsFrom, v.mark, each)
			}
			if stopped {
				return
			}
			if err != nil {
				yield(journal.Repr{}, err)
				return
			}
		}
		if err := ctx.Err(); err != nil {
			yield(journal.Repr{}, err)
		}
	}
}

// cachedTopic returns the head cache of topic, or nil when the cache is
// off or cannot start.
func (j *Journal) cachedTopic(ctx context.Context, topic string) *topicCache {
	if j.cache == nil {
		return nil
	}
	t, err := j.cache.topic(ctx, topic)
	if err != nil {
		return nil
	}
	return t
}

// readAppends calls f with the key's Append actions, values decoded, in a
// partition from offset from to before until, in order, until f returns
// false: from the head cache when it holds them all with their values,
// else from the partition.
func (j *Journal) readAppends(ctx context.Context, key eventual.Key, partition int32, from, until int64, f func(eventual.ActionRecord) bool) error {
	if t := j.cachedTopic(ctx, key.Topic); t != nil {
		if records, ok := t.appends(ctx, key.Topic, partition, key.ID, from, until); ok {
			for _, r := range records {
				a, ok, err := decode(r, true)
				if err != nil {
					return err
				}
				if ok && !f(a) {
					return nil
				}
			}
			return nil
		}
	}
	return j.readHead(ctx, key, partition, from, until, true, f)
}

// bounded returns ctx, bounded by the read timeout (WithReadTimeout) when
// it has no deadline: no read of the journal waits for the broker or the
// eventual store without end.
func (j *Journal) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, j.cfg.readTimeout)
}

// DefaultReadTimeout is the default of WithReadTimeout.
const DefaultReadTimeout = 30 * time.Second

// headReaders is how many reads of partitions (reads the head cache
// cannot serve) run at once per journal; others wait their turn, within
// their context.
const headReaders = 4

// readHead calls f with pid's actions in a partition from offset from
// (-1: the partition's start) to before until, in order, decoding Append
// values only when values is true, until f returns false. It reads the
// partition (Fetch requests of the journal's client, fetch), at most
// headReaders at once.
func (j *Journal) readHead(ctx context.Context, key eventual.Key, partition int32, from, until int64, values bool, f func(eventual.ActionRecord) bool) error {
	select {
	case j.readers <- struct{}{}:
		defer func() { <-j.readers }()
	case <-ctx.Done():
		return fmt.Errorf("kafka journal: waiting to read %s/%d: %w", key.Topic, partition, ctx.Err())
	}
	j.headReads.Add(1)
	seen := from - 1
	var derr error // a record that does not decode
	err := j.fetch(ctx, key.Topic, partition, from, func(r *kgo.Record) bool {
		if r.Offset <= seen {
			return true
		}
		seen = r.Offset
		if r.Offset >= until {
			return false
		}
		if string(r.Key) != key.ID {
			return true
		}
		a, ok, err := decode(r, values)
		if err != nil {
			derr = err
			return false
		}
		return !ok || f(a)
	})
	if derr != nil {
		return derr
	}
	if err != nil {
		return fmt.Errorf("kafka journal: reading %s/%d from offset %d: %w", key.Topic, partition, from, err)
	}
	return nil
}

// decode reads a record of the head: with values, the whole action;
// without, the header only.
func decode(r *kgo.Record, values bool) (eventual.ActionRecord, bool, error) {
	rec := wire.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp, Key: r.Key,
		Headers: make(map[string][]byte, len(r.Headers))}
	for _, h := range r.Headers {
		rec.Headers[h.Key] = h.Value
	}
	if values {
		rec.Value = r.Value
	}
	var (
		a   wire.Action
		ok  bool
		err error
	)
	if values {
		a, ok, err = wire.DecodeRecord(rec)
	} else if raw, has := rec.Headers[wire.HeaderKey]; has && len(rec.Key) > 0 {
		a.ID = string(rec.Key)
		a.Header, ok, err = wire.DecodeHeader(raw)
		if err != nil {
			err = &wire.RecordError{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Err: err}
		}
	}
	if err != nil || !ok {
		return eventual.ActionRecord{}, false, err
	}
	return eventual.ActionRecord{Action: a, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp.UTC(),
		Headers: eventual.UserHeaders(rec.Headers)}, true, nil
}

// reader returns a consumer of one partition from start, made for one
// read of the head (a connection and a metadata request): such reads are
// the exception once the replicator keeps up. It keeps control records
// (the markers that end transactions, which take offsets): a read up to
// an end offset needs them to know it got there.
func (j *Journal) reader(topic string, partition int32, start kgo.Offset) (*kgo.Client, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(j.brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: start}}),
		kgo.FetchMaxWait(250 * time.Millisecond), kgo.FetchMaxBytes(readerFetchBytes), kgo.FetchMaxPartitionBytes(readerFetchBytes),
		kgo.MaxConcurrentFetches(1), kgo.KeepControlRecords()}, j.cfg.clientOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka journal: a consumer for %s/%d: %w", topic, partition, err)
	}
	return cl, nil
}

// readerFetchBytes bounds a head reader's fetch. Kafka counts compressed
// bytes, and a batch of repetitive events can decompress to twenty times
// its size: a small fetch keeps a reader's memory bounded (a batch larger
// than it still comes whole).
const readerFetchBytes = 256 << 10
