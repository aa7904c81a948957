package kafka

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sync/errgroup"

	"github.com/annals-go/annals/store/kafka/eventual"
	"github.com/annals-go/annals/store/kafka/wire"
)

// DefaultGroup is the replicator's default consumer group.
const DefaultGroup = "annals-replicator"

// DefaultTopicPattern matches the default topics (DefaultTopic).
const DefaultTopicPattern = `^journal(-.+)?$`

// ReplicatorOption configures a Replicator.
type ReplicatorOption func(*replicatorConfig)

type replicatorConfig struct {
	group      string
	topics     []string
	pattern    string
	clientOpts []kgo.Opt
	onError    func(error)
	onDone     func(topic string, partition int32, offset int64)
	now        func() time.Time
	discover   time.Duration
	heads      int
}

// DefaultTopicDiscovery is how often a replicator of a topic pattern looks
// for new topics.
const DefaultTopicDiscovery = 5 * time.Second

// WithGroup sets the prefix of the consumer groups (default DefaultGroup):
// each topic has a group of its own, the prefix, "-" and the topic, as
// the Scala replicator has a consumer per topic.
func WithGroup(group string) ReplicatorOption { return func(c *replicatorConfig) { c.group = group } }

// WithTopicDiscovery sets how often a replicator of a topic pattern looks
// for new topics (default DefaultTopicDiscovery).
func WithTopicDiscovery(d time.Duration) ReplicatorOption {
	return func(c *replicatorConfig) { c.discover = d }
}

// WithTopics replicates these topics instead of those matching
// DefaultTopicPattern.
func WithTopics(topics ...string) ReplicatorOption {
	return func(c *replicatorConfig) { c.topics, c.pattern = topics, "" }
}

// WithTopicPattern replicates the topics matching a regular expression.
func WithTopicPattern(pattern string) ReplicatorOption {
	return func(c *replicatorConfig) { c.pattern, c.topics = pattern, nil }
}

// WithKnownHeads sets how many heads (metajournal rows) the replicator
// remembers per topic (default eventual.DefaultKnownHeads), so that a key
// met again is applied without reading its head: what it remembers is
// what it read or wrote itself, forgotten whenever one of the topic's
// partitions is assigned, revoked or lost, after any failed write, and
// from the moment a rebalance waits on a poll being applied until the
// next assignment (see eventual.Heads). 0 reads every key's head at every poll. A store
// with transactions (eventual.TxTables) reads its heads in them and
// remembers none.
func WithKnownHeads(n int) ReplicatorOption { return func(c *replicatorConfig) { c.heads = n } }

// WithReplicatorClientOptions adds franz-go options to the replicator's
// consumer. The callbacks of partition assignment (OnPartitionsAssigned,
// OnPartitionsRevoked, OnPartitionsLost) are the replicator's own, which
// keep its remembered heads true: NewReplicator refuses them
// (ErrInvalidConfig; franz-go refuses them on the group-less client
// NewReplicator checks the options with), rather than replacing them
// silently.
func WithReplicatorClientOptions(opts ...kgo.Opt) ReplicatorOption {
	return func(c *replicatorConfig) { c.clientOpts = append(c.clientOpts, opts...) }
}

// WithErrorHandler is called with every error the replicator meets and
// goes on from: a partition stopped at a record it cannot decode, an
// eventual store failure it retries, a failure of a topic's consumer
// (a fetch, the group session while the brokers are away). Each error
// names its topic, and its partition when it is of one; a group
// session's error names the topic's consumer group too.
func WithErrorHandler(f func(error)) ReplicatorOption {
	return func(c *replicatorConfig) { c.onError = f }
}

// WithOnReplicated is called after each poll's records of a partition are
// replicated, with the offset the partition's pointer moved to.
func WithOnReplicated(f func(topic string, partition int32, offset int64)) ReplicatorOption {
	return func(c *replicatorConfig) { c.onDone = f }
}

// Replicator copies journal topics into an eventual store: for each topic
// (those named, or those matching the pattern, found again every
// discovery interval) a member of that topic's consumer group; each
// partition in offset order; each poll's records of a partition applied
// with eventual.Replicate, which moves the partition's pointer; the
// group's offsets committed after that. On assignment each
// partition starts after its pointer (the eventual store, not the group's
// offsets, says where replication stands), or at the partition's start.
//
// A record that cannot be decoded stops its partition (others go on) with
// a *StoppedError; SkipRecord moves past it once an operator has looked.
type Replicator struct {
	cfg     replicatorConfig
	tables  eventual.Tables
	brokers []string
	pattern *regexp.Regexp

	mu      sync.Mutex
	stopped map[topicPartition]error
}

type topicPartition struct {
	topic     string
	partition int32
}

// StoppedError reports a partition the replicator stopped at a record it
// cannot decode. It wraps the *wire.RecordError.
type StoppedError struct {
	Topic     string
	Partition int32
	Offset    int64
	Err       error
}

func (e *StoppedError) Error() string {
	return fmt.Sprintf("kafka journal: replication of %s/%d stopped at offset %d (review the record, then `annals skip-record %s %d %d` and start the replicator again): %v",
		e.Topic, e.Partition, e.Offset, e.Topic, e.Partition, e.Offset, e.Err)
}

// Unwrap returns the cause.
func (e *StoppedError) Unwrap() error { return e.Err }

// NewReplicator returns a replicator of the topics at brokers into tables.
// It does not own tables.
func NewReplicator(brokers []string, tables eventual.Tables, opts ...ReplicatorOption) (*Replicator, error) {
	cfg := replicatorConfig{group: DefaultGroup, pattern: DefaultTopicPattern, onError: func(error) {}, onDone: func(string, int32, int64) {}, now: time.Now,
		heads: eventual.DefaultKnownHeads}
	for _, o := range opts {
		o(&cfg)
	}
	if len(brokers) == 0 || tables == nil {
		return nil, fmt.Errorf("%w: a replicator needs brokers and an eventual store", ErrInvalidConfig)
	}
	if cfg.discover <= 0 {
		cfg.discover = DefaultTopicDiscovery
	}
	r := &Replicator{cfg: cfg, tables: tables, brokers: brokers, stopped: map[topicPartition]error{}}
	if cfg.pattern != "" {
		re, err := regexp.Compile(cfg.pattern)
		if err != nil {
			return nil, fmt.Errorf("%w: topic pattern: %w", ErrInvalidConfig, err)
		}
		r.pattern = re
	} else if len(cfg.topics) == 0 {
		return nil, fmt.Errorf("%w: a replicator needs topics or a topic pattern", ErrInvalidConfig)
	}
	// A client now, so that bad options fail here rather than in Run.
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, cfg.clientOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	cl.Close()
	return r, nil
}

// member returns a consumer of topic in the topic's own group, which
// forgets heads' heads of each partition assigned, revoked or lost, and
// suspends heads from the moment a rebalance waits on a poll being applied
// (OnPartitionsCallbackBlocked) until partitions are assigned again: a
// member that applies a poll for longer than the rebalance timeout is
// kicked from the group, and the rest of its poll must not trust what it
// remembered while another member applies the same partitions.
func (r *Replicator) member(topic string, heads *eventual.Heads) (*kgo.Client, error) {
	forget := func(ps map[string][]int32) {
		for t, parts := range ps {
			for _, p := range parts {
				heads.Forget(t, p)
			}
		}
	}
	assigned := func(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
		forget(ps)
		heads.Resume()
	}
	revoked := func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { forget(ps) }
	blocked := func(context.Context, *kgo.Client) { heads.Suspend() }
	return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(r.brokers...), kgo.ConsumerGroup(r.cfg.group + "-" + topic),
		kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(250 * time.Millisecond),
		// Control records (the markers that end the transactions of
		// claims, kafka.Claim) take offsets: kept, the replicator
		// skips them as records without the action header and the
		// pointer moves past them, so that a partition whose last
		// offset is a marker is not reported behind (Lag) and the
		// record a StoppedError names is the one after the pointer.
		kgo.KeepControlRecords(),
		// Kafka counts compressed bytes, and a poll of repetitive events
		// decompresses to many times them: polls stay small.
		kgo.FetchMaxBytes(1 << 20), kgo.FetchMaxPartitionBytes(1 << 20),
		kgo.AdjustFetchOffsetsFn(r.startAfterPointers)}, append(r.cfg.clientOpts,
		kgo.OnPartitionsAssigned(assigned), kgo.OnPartitionsRevoked(revoked), kgo.OnPartitionsLost(revoked),
		kgo.OnPartitionsCallbackBlocked(blocked))...)...)
}

// topics lists the cluster's topics matching the pattern.
func (r *Replicator) topics(ctx context.Context, cl *kgo.Client) ([]string, error) {
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("kafka journal: listing topics: %w", err)
	}
	var out []string
	for _, t := range resp.Topics {
		if t.Topic != nil && r.pattern.MatchString(*t.Topic) {
			out = append(out, *t.Topic)
		}
	}
	return out, nil
}

// pointerReads is how many partitions' pointers startAfterPointers reads
// at once.
const pointerReads = 16

// startAfterPointers sets each assigned partition to start after its
// pointer, or at its start when it has none (whatever the group's
// committed offsets say). The pointers are read pointerReads at once: an
// assignment of many partitions (every rebalance) waits for the slowest
// read of each group of them, not for the sum of all.
func (r *Replicator) startAfterPointers(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	type read struct {
		topic     string
		partition int32
		offset    kgo.Offset
	}
	var reads []*read
	for topic, ps := range offsets {
		for p := range ps {
			reads = append(reads, &read{topic: topic, partition: p})
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(pointerReads)
	for _, rd := range reads {
		g.Go(func() error {
			off, ok, err := r.tables.Pointer(gctx, rd.topic, rd.partition)
			if err != nil {
				return fmt.Errorf("kafka journal: reading the pointer of %s/%d: %w", rd.topic, rd.partition, err)
			}
			rd.offset = kgo.NewOffset().AtStart()
			if ok {
				rd.offset = kgo.NewOffset().At(off + 1).WithEpoch(-1)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	for _, rd := range reads {
		offsets[rd.topic][rd.partition] = rd.offset
	}
	return offsets, nil
}

// Run replicates until ctx ends, then leaves the groups and returns nil.
// Eventual store failures are retried (with backoff) without losing
// order; Run returns an error only when a Kafka client fails for good.
func (r *Replicator) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	started := map[string]bool{}
	start := func(topic string) error {
		if started[topic] {
			return nil
		}
		heads := eventual.NewHeads(r.cfg.heads)
		cl, err := r.member(topic, heads)
		if err != nil {
			return fmt.Errorf("kafka journal: a consumer of %s: %w", topic, err)
		}
		started[topic] = true
		g.Go(func() error { return r.runMember(gctx, topic, cl, heads) })
		return nil
	}
	if r.pattern == nil {
		for _, t := range r.cfg.topics {
			if err := start(t); err != nil {
				return errors.Join(err, g.Wait())
			}
		}
		return g.Wait()
	}
	admin, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(r.brokers...)}, r.cfg.clientOpts...)...)
	if err != nil {
		return err
	}
	defer admin.Close()
	tick := time.NewTicker(r.cfg.discover)
	defer tick.Stop()
	for {
		topics, err := r.topics(gctx, admin)
		if err != nil && gctx.Err() == nil {
			r.cfg.onError(err)
		}
		for _, t := range topics {
			if err := start(t); err != nil {
				r.cfg.onError(err)
			}
		}
		select {
		case <-gctx.Done():
			return g.Wait()
		case <-tick.C:
		}
	}
}

// runMember replicates one topic's consumer until ctx ends, remembering
// heads in heads.
func (r *Replicator) runMember(ctx context.Context, topic string, cl *kgo.Client, heads *eventual.Heads) error {
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			cl.AllowRebalance()
			return nil
		}
		var fatal error
		fs.EachError(func(t string, p int32, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			r.cfg.onError(r.fetchError(topic, t, p, err))
		})
		commits := map[string]map[int32]kgo.EpochOffset{}
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 || fatal != nil || ctx.Err() != nil {
				return
			}
			tp := topicPartition{p.Topic, p.Partition}
			if r.isStopped(tp) {
				return
			}
			done, err := r.replicate(ctx, heads, p.Records)
			if done >= p.Records[0].Offset {
				r.cfg.onDone(p.Topic, p.Partition, done)
			}
			if done >= 0 {
				if commits[p.Topic] == nil {
					commits[p.Topic] = map[int32]kgo.EpochOffset{}
				}
				commits[p.Topic][p.Partition] = kgo.EpochOffset{Epoch: -1, Offset: done + 1}
			}
			var re *wire.RecordError
			if errors.As(err, &re) {
				r.stop(cl, tp, &StoppedError{Topic: re.Topic, Partition: re.Partition, Offset: re.Offset, Err: err})
			} else if err != nil && ctx.Err() == nil {
				fatal = err
			}
		})
		if len(commits) > 0 && ctx.Err() == nil {
			cl.CommitOffsetsSync(ctx, commits, nil)
		}
		cl.AllowRebalance()
		if fatal != nil {
			return fatal
		}
	}
}

// fetchError names what the consumer of topic failed at: the partition
// of the error, the whole topic (partition -1), or, for an error of the
// group session, which franz-go gives with no topic, the topic and its
// consumer group.
func (r *Replicator) fetchError(topic, t string, p int32, err error) error {
	switch {
	case t == "":
		return fmt.Errorf("kafka journal: consuming %s in group %s: %w", topic, r.cfg.group+"-"+topic, err)
	case p < 0:
		return fmt.Errorf("kafka journal: fetching %s: %w", t, err)
	}
	return fmt.Errorf("kafka journal: fetching %s/%d: %w", t, p, err)
}

// replicate applies one partition's records, remembering heads in heads,
// retrying eventual store failures until ctx ends. It returns the offset
// of the last record applied (-1 when none) and the error that stopped it.
func (r *Replicator) replicate(ctx context.Context, heads *eventual.Heads, krs []*kgo.Record) (int64, error) {
	records := make([]wire.Record, len(krs))
	for i, kr := range krs {
		rec := wire.Record{Topic: kr.Topic, Partition: kr.Partition, Offset: kr.Offset, Timestamp: kr.Timestamp.UTC(),
			Key: kr.Key, Value: kr.Value, Headers: make(map[string][]byte, len(kr.Headers))}
		for _, h := range kr.Headers {
			rec.Headers[h.Key] = h.Value
		}
		records[i] = rec
	}
	backoff := 100 * time.Millisecond
	for {
		err := eventual.ReplicateKnown(ctx, r.tables, heads, records, r.cfg.now())
		var re *wire.RecordError
		switch {
		case err == nil:
			return records[len(records)-1].Offset, nil
		case errors.As(err, &re):
			return re.Offset - 1, err
		case ctx.Err() != nil:
			return -1, ctx.Err()
		}
		r.cfg.onError(fmt.Errorf("kafka journal: replicating %s/%d from offset %d (retrying in %v): %w",
			records[0].Topic, records[0].Partition, records[0].Offset, backoff, err))
		select {
		case <-ctx.Done():
			return -1, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

func (r *Replicator) stop(cl *kgo.Client, tp topicPartition, err *StoppedError) {
	r.mu.Lock()
	r.stopped[tp] = err
	r.mu.Unlock()
	cl.PauseFetchPartitions(map[string][]int32{tp.topic: {tp.partition}})
	r.cfg.onError(err)
}

func (r *Replicator) isStopped(tp topicPartition) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopped[tp] != nil
}

// Stopped returns the partitions stopped at records the replicator cannot
// decode, each a *StoppedError.
func (r *Replicator) Stopped() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []error
	for _, err := range r.stopped {
		out = append(out, err)
	}
	return out
}

// SkipRecord moves a partition's pointer past the record at offset, so
// that replication resumes after it when the partition is next assigned
// (restart the replicator). Only the record right after the pointer (the
// one a stopped partition names) can be skipped: skipping further would
// leave records unreplicated.
func SkipRecord(ctx context.Context, tables eventual.Tables, topic string, partition int32, offset int64) error {
	p, ok, err := tables.Pointer(ctx, topic, partition)
	if err != nil {
		return err
	}
	if ok && p != offset-1 {
		return fmt.Errorf("%w: %s/%d is replicated up to offset %d: only the next record, at offset %d, can be skipped, not %d",
			ErrInvalidConfig, topic, partition, p, p+1, offset)
	}
	return tables.SavePointer(ctx, topic, partition, offset, time.Now())
}
