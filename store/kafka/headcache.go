package kafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/annals-go/annals/store/kafka/eventual"
	"github.com/annals-go/annals/store/kafka/wire"
)

// DefaultHeadCacheEntries bounds the actions a journal's head cache holds
// per topic partition.
const DefaultHeadCacheEntries = 100_000

// DefaultHeadCacheBytes bounds the bytes of Append values a journal's head
// cache holds per topic; past it, appends are held without their values
// (a replay of their events reads the partition) until the replicator's
// pointer passes older ones.
const DefaultHeadCacheBytes = 64 << 20

// headCacheStall is how long a read waits for the head cache to move when
// it has not yet reached the read's Mark, before it reads the partition
// itself. A read waits as long as the cache keeps moving (it may be
// loading a long head at the start), within the read's own deadline.
const headCacheStall = 2 * time.Second

// headCacheRetry is how long after a failed start (the topic's offsets or
// pointers could not be read) reads of a topic go without the cache
// before the next start is tried.
const headCacheRetry = time.Second

// headCache follows each topic the journal reads with one consumer that
// keeps the topic's actions the eventual store has not applied yet (seed
// 002's head cache): from each partition's pointer, so that a journal that
// starts while the replicator is behind holds the whole unreplicated head
// once, instead of each read reading it again. Every read of the topic
// folds its id's actions from memory, in time proportional to that id's
// actions (they are indexed by key; Marks, which change nothing, are not
// held), and a replay takes the values of the id's unreplicated appends
// from memory too. Entries the pointer has passed are dropped; a
// partition holds at most max entries (the oldest
// go first, and reads before them read the partition) and a topic at most
// maxBytes of Append values.
type headCache struct {
	j        *Journal
	max      int
	maxBytes int

	mu     sync.Mutex
	topics map[string]*topicStart
}

// topicStart is a topic's cache once ready is closed: t, or err when the
// start failed (at failedAt).
type topicStart struct {
	ready    chan struct{}
	t        *topicCache
	err      error
	failedAt time.Time
}

type topicCache struct {
	cl       *kgo.Client
	maxBytes int

	mu    sync.Mutex
	parts map[int32]*partCache
	bytes int           // Append values held, across partitions
	moved chan struct{} // closed and replaced when any partition moves on
}

// partCache holds the actions of offsets [from, next): next is the offset
// after the last record read.
type partCache struct {
	from, next int64
	entries    []*cacheEntry            // in offset order
	byKey      map[string][]*cacheEntry // each key's entries, in offset order
}

// cacheEntry is one action of the head. value is the record's value for an
// Append held with it (nil otherwise); headers are the record's headers.
type cacheEntry struct {
	offset  int64
	key     string
	action  eventual.ActionRecord
	value   []byte
	headers []kgo.RecordHeader
}

func newHeadCache(j *Journal, max, maxBytes int) *headCache {
	return &headCache{j: j, max: max, maxBytes: maxBytes, topics: map[string]*topicStart{}}
}

// topic returns the cache of topic, starting it on first use: its
// consumer begins at each partition's pointer (the partition's first
// record when it has none); of a head longer than max actions it keeps
// the last max. Concurrent first reads wait for one start; a failed start is
// tried again after headCacheRetry, and reads until then go without the
// cache.
func (c *headCache) topic(ctx context.Context, topic string) (*topicCache, error) {
	c.mu.Lock()
	if c.topics == nil {
		c.mu.Unlock()
		return nil, errors.New("kafka journal: closed")
	}
	s, ok := c.topics[topic]
	if ok && s.err != nil && time.Since(s.failedAt) >= headCacheRetry {
		ok = false
	}
	if !ok {
		s = &topicStart{ready: make(chan struct{})}
		c.topics[topic] = s
		c.mu.Unlock()
		t, err := c.start(ctx, topic)
		c.mu.Lock()
		s.t, s.err, s.failedAt = t, err, time.Now()
		if c.topics == nil { // closed meanwhile
			if t != nil {
				t.cl.Close()
			}
			s.t, s.err = nil, errors.New("kafka journal: closed")
		}
		close(s.ready)
		c.mu.Unlock()
		return s.t, s.err
	}
	c.mu.Unlock()
	select {
	case <-s.ready:
		return s.t, s.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// start reads topic's partitions' start and end offsets and pointers, and
// starts its consumer.
func (c *headCache) start(ctx context.Context, topic string) (*topicCache, error) {
	starts, ends, err := partitionOffsets(ctx, c.j.cl, topic)
	if err != nil {
		return nil, err
	}
	from := map[int32]kgo.Offset{}
	t := &topicCache{parts: map[int32]*partCache{}, moved: make(chan struct{}), maxBytes: c.maxBytes}
	for p, end := range ends {
		first := starts[p]
		pointer, ok, err := c.j.tables.Pointer(ctx, topic, p)
		if err != nil {
			return nil, fmt.Errorf("kafka journal: reading the pointer of %s/%d: %w", topic, p, err)
		}
		if ok {
			first = max(first, pointer+1)
		}
		first = min(first, end)
		from[p] = kgo.NewOffset().At(first)
		t.parts[p] = &partCache{from: first, next: first, byKey: map[string][]*cacheEntry{}}
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.j.brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}), kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.FetchMaxBytes(headCacheFetchBytes), kgo.FetchMaxPartitionBytes(headCacheFetchBytes)}, c.j.cfg.clientOpts...)...)
	if err != nil {
		return nil, err
	}
	t.cl = cl
	go t.follow(c.max)
	return t, nil
}

// headCacheFetchBytes bounds a head cache's fetch: larger than a single
// read's, since one cache serves every read of a topic.
const headCacheFetchBytes = 1 << 20

// partitionOffsets returns the first and the end offset of each partition
// of topic; a topic the cluster does not know yet is an error.
func partitionOffsets(ctx context.Context, cl *kgo.Client, topic string) (starts, ends map[int32]int64, err error) {
	partitions, err := partitionsOf(ctx, cl, topic)
	if err != nil {
		return nil, nil, err
	}
	if len(partitions) == 0 {
		return nil, nil, fmt.Errorf("kafka journal: topic %s: %w", topic, kerr.UnknownTopicOrPartition)
	}
	if starts, err = listOffsets(ctx, cl, topic, partitions, -2); err != nil {
		return nil, nil, err
	}
	if ends, err = listOffsets(ctx, cl, topic, partitions, -1); err != nil {
		return nil, nil, err
	}
	return starts, ends, nil
}

// follow reads the topic until the client closes.
func (t *topicCache) follow(max int) {
	for {
		fs := t.cl.PollFetches(context.Background())
		if fs.IsClientClosed() {
			return
		}
		t.mu.Lock()
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 {
				return
			}
			pc := t.parts[p.Partition]
			if pc == nil { // a partition added since the start
				pc = &partCache{from: p.Records[0].Offset, next: p.Records[0].Offset, byKey: map[string][]*cacheEntry{}}
				t.parts[p.Partition] = pc
			}
			for _, r := range p.Records {
				// Offsets a partition skips hold no record (compaction,
				// control records): the cache still covers them.
				if r.Offset < pc.next {
					continue
				}
				pc.next = r.Offset + 1
				a, ok, err := decode(r, false)
				if err != nil || !ok {
					continue // the replicator and direct reads report malformed records
				}
				if a.Action.Header.Kind == wire.Mark {
					continue // a read's upper bound: nothing to fold
				}
				e := &cacheEntry{offset: r.Offset, key: string(r.Key), action: a}
				if a.Action.Header.Kind == wire.Append && t.bytes+len(r.Value) <= t.maxBytes {
					// Copies: the record's slices share the fetched batch's
					// buffer, which a held slice would keep whole.
					e.value, e.headers = bytes.Clone(r.Value), cloneHeaders(r.Headers)
					t.bytes += len(r.Value)
				}
				pc.entries = append(pc.entries, e)
				pc.byKey[e.key] = append(pc.byKey[e.key], e)
			}
			if over := len(pc.entries) - max; over > 0 {
				t.drop(pc, over)
				pc.from = pc.entries[0].offset
			}
		})
		close(t.moved)
		t.moved = make(chan struct{})
		t.mu.Unlock()
	}
}

// cloneHeaders copies hs, keys and values.
func cloneHeaders(hs []kgo.RecordHeader) []kgo.RecordHeader {
	out := make([]kgo.RecordHeader, len(hs))
	for i, h := range hs {
		out[i] = kgo.RecordHeader{Key: strings.Clone(h.Key), Value: bytes.Clone(h.Value)}
	}
	return out
}

// drop removes pc's n oldest entries.
func (t *topicCache) drop(pc *partCache, n int) {
	for _, e := range pc.entries[:n] {
		ks := pc.byKey[e.key]
		if len(ks) <= 1 {
			delete(pc.byKey, e.key)
		} else {
			pc.byKey[e.key] = ks[1:] // e is the key's oldest
		}
		t.bytes -= len(e.value)
	}
	pc.entries = append(pc.entries[:0:0], pc.entries[n:]...)
}

// covering waits until the cache of partition covers [from, until) and
// returns it with t.mu held, having dropped the entries at or before
// pointer (-1: none). It returns nil (t.mu not held) when the cache
// cannot serve the range: it has not seen the partition, the range starts
// before what it holds, or it made no progress for headCacheStall.
func (t *topicCache) covering(ctx context.Context, partition int32, from, until, pointer int64) *partCache {
	stall := time.NewTimer(headCacheStall)
	defer stall.Stop()
	for {
		t.mu.Lock()
		pc := t.parts[partition]
		if pc != nil && pointer >= 0 {
			t.evict(pc, pointer)
		}
		if pc != nil && pc.from <= max(from, 0) && pc.next >= until {
			return pc
		}
		if pc == nil || pc.from > max(from, 0) {
			t.mu.Unlock()
			return nil
		}
		moved, next := t.moved, pc.next
		t.mu.Unlock()
		select {
		case <-moved:
			t.mu.Lock()
			progressed := t.parts[partition] != nil && t.parts[partition].next > next
			t.mu.Unlock()
			if progressed {
				stall.Reset(headCacheStall)
			}
		case <-stall.C:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// fold calls f with key's actions in [from, until) of a partition when the
// cache holds that whole range (see covering). ok is false when the cache
// cannot serve the range.
func (t *topicCache) fold(ctx context.Context, partition int32, key string, from, until, pointer int64, f func(eventual.ActionRecord)) (ok bool) {
	pc := t.covering(ctx, partition, from, until, pointer)
	if pc == nil {
		return false
	}
	defer t.mu.Unlock()
	for _, e := range pc.byKey[key] {
		if e.offset >= from && e.offset < until {
			f(e.action)
		}
	}
	return true
}

// appends returns key's Append records in [from, until) of a partition,
// values included, when the cache holds the range and every one of them
// with its value; ok is false otherwise.
func (t *topicCache) appends(ctx context.Context, topic string, partition int32, key string, from, until int64) (records []*kgo.Record, ok bool) {
	pc := t.covering(ctx, partition, from, until, -1)
	if pc == nil {
		return nil, false
	}
	defer t.mu.Unlock()
	for _, e := range pc.byKey[key] {
		if e.offset < from || e.offset >= until || e.action.Action.Header.Kind != wire.Append {
			continue
		}
		if e.value == nil {
			return nil, false
		}
		records = append(records, &kgo.Record{Topic: topic, Partition: partition, Offset: e.offset, Key: []byte(e.key),
			Value: e.value, Headers: e.headers, Timestamp: e.action.Timestamp})
	}
	return records, true
}

// evict drops pc's entries at or before pointer, which the eventual store
// has applied.
func (t *topicCache) evict(pc *partCache, pointer int64) {
	i := 0
	for i < len(pc.entries) && pc.entries[i].offset <= pointer {
		i++
	}
	if i > 0 {
		t.drop(pc, i)
	}
	if pointer+1 > pc.from && pointer+1 <= pc.next {
		pc.from = pointer + 1
	}
}

func (c *headCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.topics {
		select {
		case <-s.ready:
			if s.t != nil {
				s.t.cl.Close()
			}
		default: // its start closes it
		}
	}
	c.topics = nil
}
