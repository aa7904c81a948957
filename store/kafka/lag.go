package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/kafka/wire"
)

// PartitionLag is how far replication of one partition of a journal topic
// is behind, and what the partition's unreplicated head holds: the
// records past the eventual store's pointer, which reads merge from Kafka
// and the replicator has not applied yet.
type PartitionLag struct {
	Topic     string
	Partition int32
	// Pointer is the offset of the last record the eventual store has
	// applied; -1 when it has applied none of the partition's.
	Pointer int64
	// Start is the partition's first offset still in Kafka (its log start
	// offset) and End the offset its next record will take (its high
	// watermark), as listed before the head was read.
	Start, End int64
	// Behind is how many offsets replication is behind: from the first
	// offset not applied (Pointer+1, or Start when that is later) to End.
	Behind int64
	// Lost is how many offsets Kafka deleted (retention) before the
	// eventual store applied them, from Pointer+1 to Start: their
	// actions are in neither.
	Lost int64
	// Records is how many records the head holds (Kafka's transaction
	// markers not counted). Of them, Appends are journal appends holding
	// Events events in all, Marks are the marks reads produce, and
	// Undecodable are those the replicator cannot decode (it stops the
	// partition at the first); records without a key or without the
	// journal's action header, which the replicator skips, are the rest.
	Records, Appends, Events, Marks int64
	Undecodable                     []UndecodableRecord
	// IDs are the keys (persistence ids) of the head's records that carry
	// the journal's action header, Marks aside, ascending: the ids whose
	// journals the eventual store does not hold in full, or at all.
	IDs []string
}

// UndecodableRecord is a record of a head that the replicator cannot
// decode.
type UndecodableRecord struct {
	Offset int64
	// ID is the record's key.
	ID string
	// Err is the *wire.RecordError that names the record and wraps
	// wire.ErrMalformed.
	Err error
}

// Topics returns the names of the cluster's topics for which match
// returns true, ascending.
func (j *Journal) Topics(ctx context.Context, match func(topic string) bool) ([]string, error) {
	if j.closed.Load() {
		return nil, journal.ErrClosed
	}
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, j.cl)
	if err != nil {
		return nil, fmt.Errorf("kafka journal: listing topics: %w", err)
	}
	var out []string
	for _, t := range resp.Topics {
		if t.Topic != nil && match(*t.Topic) {
			out = append(out, *t.Topic)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Lag reads, for each partition of topic, the eventual store's pointer,
// then the partition's start and end offsets, then every record from the
// first one not applied up to the end, decoding each as the replicator
// does; it changes nothing. A topic that does not exist has no
// partitions. The partitions come in ascending order.
//
// Records produced after the offsets were listed are not read. Lag reads
// each head until the record before its End: a partition whose last
// offsets hold no record (a compacted topic; journal topics are not
// compacted, their actions would be lost) is read until ctx ends.
func (j *Journal) Lag(ctx context.Context, topic string) ([]PartitionLag, error) {
	if j.closed.Load() {
		return nil, journal.ErrClosed
	}
	partitions, err := partitionsOf(ctx, j.cl, topic)
	if err != nil || len(partitions) == 0 {
		return nil, err
	}
	lags := make([]PartitionLag, len(partitions))
	for i, p := range partitions {
		pointer, ok, err := j.tables.Pointer(ctx, topic, p)
		if err != nil {
			return nil, j.errs.Map(ctx, fmt.Sprintf("reading the pointer of %s/%d", topic, p), err, journal.ErrClosed)
		}
		if !ok {
			pointer = -1
		}
		lags[i] = PartitionLag{Topic: topic, Partition: p, Pointer: pointer}
	}
	// The offsets after the pointers: whatever the replicator applies in
	// between is read twice, never missed.
	starts, err := listOffsets(ctx, j.cl, topic, partitions, -2)
	if err != nil {
		return nil, err
	}
	ends, err := listOffsets(ctx, j.cl, topic, partitions, -1)
	if err != nil {
		return nil, err
	}
	from := map[int32]kgo.Offset{}
	byPartition := map[int32]*PartitionLag{}
	for i := range lags {
		l := &lags[i]
		l.Start, l.End = starts[l.Partition], ends[l.Partition]
		first := max(l.Pointer+1, l.Start)
		l.Behind = max(l.End-first, 0)
		l.Lost = max(l.Start-(l.Pointer+1), 0)
		if first < l.End {
			from[l.Partition] = kgo.NewOffset().At(first)
			byPartition[l.Partition] = l
		}
	}
	if len(from) == 0 {
		return lags, nil
	}
	if err := j.readHeads(ctx, topic, from, byPartition); err != nil {
		return nil, err
	}
	return lags, nil
}

// readHeads reads each partition of from, from its offset to before its
// lag's End, into its lag.
func (j *Journal) readHeads(ctx context.Context, topic string, from map[int32]kgo.Offset, lags map[int32]*PartitionLag) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(j.brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}), kgo.KeepControlRecords(),
		kgo.FetchMaxWait(250 * time.Millisecond), kgo.FetchMaxBytes(readerFetchBytes), kgo.FetchMaxPartitionBytes(readerFetchBytes)},
		j.cfg.clientOpts...)...)
	if err != nil {
		return fmt.Errorf("kafka journal: a consumer of %s: %w", topic, err)
	}
	defer cl.Close()
	ids := map[int32]map[string]bool{}
	next := map[int32]int64{} // per partition, the offset after the last record read
	pending := len(lags)
	for pending > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				ferr = errors.Join(ferr, fmt.Errorf("kafka journal: reading the head of %s/%d: %w", t, p, err))
			}
		})
		if ferr != nil {
			return ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			l := lags[r.Partition]
			if r.Topic != topic || l == nil || r.Offset < next[r.Partition] || next[r.Partition] >= l.End {
				return
			}
			next[r.Partition] = r.Offset + 1
			if r.Offset >= l.End-1 {
				pending-- // a record at or past the end's: the head is read
			}
			if r.Offset >= l.End || r.Attrs.IsControl() {
				return
			}
			l.Records++
			a, ok, err := decode(r, true)
			switch {
			case err != nil: // a key and the action header, which do not decode
				l.Undecodable = append(l.Undecodable, UndecodableRecord{Offset: r.Offset, ID: string(r.Key), Err: err})
			case !ok: // skipped by the replicator
				return
			case a.Action.Header.Kind == wire.Mark:
				l.Marks++
				return
			case a.Action.Header.Kind == wire.Append:
				l.Appends++
				l.Events += int64(len(a.Action.Events.Events))
			}
			if ids[r.Partition] == nil {
				ids[r.Partition] = map[string]bool{}
			}
			ids[r.Partition][string(r.Key)] = true
		})
	}
	for p, set := range ids {
		for id := range set {
			lags[p].IDs = append(lags[p].IDs, id)
		}
		slices.Sort(lags[p].IDs)
	}
	return nil
}

// partitionsOf returns the partitions of topic, ascending; none when the
// topic does not exist.
func partitionsOf(ctx context.Context, cl *kgo.Client, topic string) ([]int32, error) {
	req := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, mt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("kafka journal: partitions of %s: %w", topic, err)
	}
	var out []int32
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); errors.Is(err, kerr.UnknownTopicOrPartition) {
			return nil, nil
		} else if err != nil {
			return nil, fmt.Errorf("kafka journal: partitions of %s: %w", topic, err)
		}
		for _, p := range t.Partitions {
			out = append(out, p.Partition)
		}
	}
	slices.Sort(out)
	return out, nil
}

// listOffsets returns an offset of each partition of topic: with
// timestamp -2 its start (log start offset), with -1 its end (high
// watermark).
func listOffsets(ctx context.Context, cl *kgo.Client, topic string, partitions []int32, timestamp int64) (map[int32]int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for _, p := range partitions {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = p, timestamp
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("kafka journal: offsets of %s: %w", topic, err)
	}
	out := map[int32]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("kafka journal: offsets of %s/%d: %w", topic, p.Partition, err)
			}
			out[p.Partition] = p.Offset
		}
	}
	for _, p := range partitions {
		if _, ok := out[p]; !ok {
			return nil, fmt.Errorf("kafka journal: offsets of %s/%d: not in the broker's answer", topic, p)
		}
	}
	return out, nil
}
