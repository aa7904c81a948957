package kafka

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/annals-go/annals/store/kafka/eventual"
)

// DefaultHeadCacheEntries bounds the actions a journal's head cache holds
// per topic partition.
const DefaultHeadCacheEntries = 100_000

// headCacheWait is how long a read waits for the cache to reach its Mark
// before reading the partition itself.
const headCacheWait = 2 * time.Second

// headCache follows each topic the journal reads with one consumer that
// keeps the action headers of records the eventual store has not applied
// yet (seed 002's head cache): a read whose head lies within what the
// cache holds folds it from memory instead of reading the partition.
// Entries the eventual store's pointer has passed are dropped; a partition
// holds at most max entries (the oldest go first, and reads before them
// read the partition).
type headCache struct {
	j   *Journal
	max int

	mu     sync.Mutex
	topics map[string]*topicCache
}

type topicCache struct {
	cl     *kgo.Client
	mu     sync.Mutex
	parts  map[int32]*partCache
	moved  chan struct{} // closed and replaced when any partition moves on
	closed bool
}

// partCache holds the actions of offsets [from, next): next is the offset
// after the last record read.
type partCache struct {
	from, next int64
	entries    []cacheEntry
}

type cacheEntry struct {
	offset int64
	key    string
	action eventual.ActionRecord
}

func newHeadCache(j *Journal, max int) *headCache {
	return &headCache{j: j, max: max, topics: map[string]*topicCache{}}
}

// topic returns the cache of topic, starting its consumer on first use at
// the end offsets of the topic's partitions, read first: each partition's
// cache then holds [end, end) at once, so that a read right after the
// start waits for the cache to reach its mark instead of finding no cache
// for the partition (which a consumer told only "at the end" would not
// have until its first records arrive).
func (c *headCache) topic(ctx context.Context, topic string) (*topicCache, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.topics[topic]; ok {
		return t, nil
	}
	ends, err := endOffsets(ctx, c.j.cl, topic)
	if err != nil {
		return nil, err
	}
	start := map[int32]kgo.Offset{}
	t := &topicCache{parts: map[int32]*partCache{}, moved: make(chan struct{})}
	for p, end := range ends {
		start[p] = kgo.NewOffset().At(end)
		t.parts[p] = &partCache{from: end, next: end}
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.j.brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}), kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.FetchMaxBytes(readerFetchBytes), kgo.FetchMaxPartitionBytes(readerFetchBytes)}, c.j.cfg.clientOpts...)...)
	if err != nil {
		return nil, err
	}
	t.cl = cl
	c.topics[topic] = t
	go t.follow(c.max)
	return t, nil
}

// endOffsets returns the end offset of each partition of topic.
func endOffsets(ctx context.Context, cl *kgo.Client, topic string) (map[int32]int64, error) {
	meta := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	meta.Topics = append(meta.Topics, mt)
	mresp, err := meta.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("kafka journal: partitions of %s: %w", topic, err)
	}
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for _, t := range mresp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return nil, fmt.Errorf("kafka journal: partitions of %s: %w", topic, err)
		}
		for _, p := range t.Partitions {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition, rp.Timestamp = p.Partition, -1 // -1: the end
			rt.Partitions = append(rt.Partitions, rp)
		}
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("kafka journal: end offsets of %s: %w", topic, err)
	}
	ends := map[int32]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("kafka journal: end offset of %s/%d: %w", topic, p.Partition, err)
			}
			ends[p.Partition] = p.Offset
		}
	}
	return ends, nil
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
				pc = &partCache{from: p.Records[0].Offset, next: p.Records[0].Offset}
				t.parts[p.Partition] = pc
			}
			for _, r := range p.Records {
				if r.Offset < pc.next {
					continue
				}
				if r.Offset > pc.next && len(pc.entries) == 0 {
					pc.from = r.Offset // a gap (compaction, transaction markers) before anything is held
				}
				pc.next = r.Offset + 1
				a, ok, err := decode(r, false)
				if err != nil || !ok {
					continue // the replicator and direct reads report malformed records
				}
				pc.entries = append(pc.entries, cacheEntry{offset: r.Offset, key: string(r.Key), action: a})
			}
			if over := len(pc.entries) - max; over > 0 {
				pc.from = pc.entries[over].offset
				pc.entries = append(pc.entries[:0:0], pc.entries[over:]...)
			}
		})
		close(t.moved)
		t.moved = make(chan struct{})
		t.mu.Unlock()
	}
}

// fold calls f with key's actions in [from, until) of a partition when the
// cache holds that whole range (waiting up to headCacheWait for it to
// reach until), and drops the entries at or before pointer. ok is false
// when the cache cannot serve the range.
func (t *topicCache) fold(ctx context.Context, partition int32, key string, from, until, pointer int64, f func(eventual.ActionRecord)) (ok bool) {
	deadline := time.NewTimer(headCacheWait)
	defer deadline.Stop()
	for {
		t.mu.Lock()
		pc := t.parts[partition]
		if pc != nil && pointer >= 0 {
			pc.evict(pointer)
		}
		if pc != nil && pc.from <= max(from, 0) && pc.next > until {
			for _, e := range pc.entries {
				if e.offset >= from && e.offset < until && e.key == key {
					f(e.action)
				}
			}
			t.mu.Unlock()
			return true
		}
		if pc == nil || pc.from > max(from, 0) {
			t.mu.Unlock()
			return false // the cache has not seen the partition, or the range starts before what it holds
		}
		moved := t.moved
		t.mu.Unlock()
		select {
		case <-moved:
		case <-deadline.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// evict drops the entries at or before pointer, which the eventual store
// has applied.
func (pc *partCache) evict(pointer int64) {
	i := 0
	for i < len(pc.entries) && pc.entries[i].offset <= pointer {
		i++
	}
	if i > 0 {
		pc.entries = append(pc.entries[:0:0], pc.entries[i:]...)
	}
	if pointer+1 > pc.from && pointer+1 <= pc.next {
		pc.from = pointer + 1
	}
}

func (c *headCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.topics {
		t.cl.Close()
	}
	c.topics = map[string]*topicCache{}
}
