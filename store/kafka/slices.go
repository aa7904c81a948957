package kafka

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/store/kafka/eventual"
	"github.com/annals-go/annals/store/kafka/wire"
)

// CurrentEventsBySlices implements query.EventsBySlicesQuery from the
// entity type's topic, the journal's write-ahead log, as Akka Projections'
// Kafka source reads it: each partition from the offset's position to the
// partition's end when the query starts, the events of the Append records
// whose ids' slices lie in [minSlice, maxSlice]. Offsets are
// query.KindPartitions (after must be one, or NoOffset): the next record
// of each partition, and the events already seen of a record read in part.
// An id's events come in their order (an id has one partition); ids of
// different partitions interleave in no order. The topic holds what was
// appended: events deleted or purged later are read as written, until the
// topic's retention removes them.
func (r *ReadJournal) CurrentEventsBySlices(ctx context.Context, entityType string, minSlice, maxSlice int, after query.Offset) iter.Seq2[query.Envelope, error] {
	return func(yield func(query.Envelope, error) bool) {
		j := r.j
		if after.Kind != query.KindNone && after.Kind != query.KindPartitions {
			yield(query.Envelope{}, fmt.Errorf("kafka journal: events by slices after %s: want a partitions offset", after))
			return
		}
		key, err := j.key(annals.PersistenceID(entityType, "x"))
		if err != nil {
			yield(query.Envelope{}, err)
			return
		}
		ctx, cancel := j.bounded(ctx)
		defer cancel()
		starts, ends, err := j.partitionBounds(ctx, key.Topic)
		if err != nil {
			yield(query.Envelope{}, err)
			return
		}
		cur := query.PartitionsOffset(after.Partitions, after.Seen)
		for _, p := range slices.Sorted(maps.Keys(ends)) {
			from, ok := cur.Partitions[p]
			if !ok || from < starts[p] {
				from = starts[p]
			}
			if from >= ends[p] {
				continue
			}
			if !r.readPartition(ctx, key.Topic, p, from, ends[p], minSlice, maxSlice, &cur, yield) {
				return
			}
		}
	}
}

// EventsBySlices implements query.EventsBySlicesQuery: the current query
// again after each write of this journal and every poll.
func (r *ReadJournal) EventsBySlices(ctx context.Context, entityType string, minSlice, maxSlice int, after query.Offset) *query.Stream[query.Envelope] {
	return query.FollowOffsets(ctx, &r.j.written, r.poll, after, func(ctx context.Context, after query.Offset) iter.Seq2[query.Envelope, error] {
		return r.CurrentEventsBySlices(ctx, entityType, minSlice, maxSlice, after)
	})
}

var _ query.EventsBySlicesQuery = (*ReadJournal)(nil)

// readPartition yields the events of partition p's records in [from,
// until) whose ids' slices lie in the range, moving cur along, and
// reports whether to go on.
func (r *ReadJournal) readPartition(ctx context.Context, topic string, p int32, from, until int64, minSlice, maxSlice int, cur *query.Offset, yield func(query.Envelope, error) bool) bool {
	cl, err := r.j.reader(topic, p, kgo.NewOffset().At(from))
	if err != nil {
		return yield(query.Envelope{}, err)
	}
	defer cl.Close()
	next := from
	for next < until {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return yield(query.Envelope{}, fmt.Errorf("kafka journal: reading %s/%d: %w", topic, p, err))
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = errors.Join(ferr, err) })
		if ferr != nil {
			return yield(query.Envelope{}, fmt.Errorf("kafka journal: reading %s/%d from offset %d: %w", topic, p, next, ferr))
		}
		for _, rec := range fs.Records() {
			if rec.Offset < next || rec.Offset >= until {
				continue
			}
			next = rec.Offset + 1
			if rec.Attrs.IsControl() { // a transaction's marker: no event, the position moves past it
				cur.Partitions[p] = next
				continue
			}
			if !r.emitRecord(rec, minSlice, maxSlice, cur, yield) {
				return false
			}
		}
	}
	return true
}

// emitRecord yields the events of one record (an Append of an id in the
// slice range), each at the offset after it, and reports whether to go on.
func (r *ReadJournal) emitRecord(rec *kgo.Record, minSlice, maxSlice int, cur *query.Offset, yield func(query.Envelope, error) bool) bool {
	p := rec.Partition
	pid := string(rec.Key)
	// Records of ids outside the range are passed over undecoded.
	if slice := annals.Slice(pid); slice < minSlice || slice > maxSlice {
		cur.Partitions[p] = rec.Offset + 1
		return true
	}
	a, ok, err := decode(rec, true)
	if err != nil {
		return yield(query.Envelope{}, err)
	}
	if !ok || a.Action.Header.Kind != wire.Append {
		// Nothing of this record is read: the position moves past it.
		cur.Partitions[p] = rec.Offset + 1
		return true
	}
	seen, partial := cur.Seen[pid]
	partial = partial && cur.Partitions[p] == rec.Offset
	h := a.Action.Header
	events := a.Action.Events.Events
	for i, e := range events {
		if partial && e.SeqNr <= seen {
			continue
		}
		repr, err := toRepr(pid, eventual.Record{Event: e, Timestamp: a.Timestamp, Origin: h.Origin, Version: h.Version, Partition: p,
			Offset: rec.Offset, HeaderMetadata: h.Metadata, PayloadMetadata: a.Action.Events.Metadata, Headers: a.Headers})
		if err != nil {
			return yield(query.Envelope{}, err)
		}
		if i == len(events)-1 {
			cur.Partitions[p] = rec.Offset + 1
			delete(cur.Seen, pid)
		} else {
			cur.Partitions[p] = rec.Offset
			if cur.Seen == nil {
				cur.Seen = map[string]int64{}
			}
			cur.Seen[pid] = e.SeqNr
		}
		if !yield(query.FromRepr(repr, query.PartitionsOffset(cur.Partitions, cur.Seen)), nil) {
			return false
		}
	}
	if len(events) == 0 {
		cur.Partitions[p] = rec.Offset + 1
	}
	return true
}

// partitionBounds returns the first and the next offset of each partition
// of topic; a topic that does not exist has none.
func (j *Journal) partitionBounds(ctx context.Context, topic string) (starts, ends map[int32]int64, err error) {
	meta := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	meta.Topics = append(meta.Topics, mt)
	mresp, err := meta.RequestWith(ctx, j.cl)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka journal: reading %s's partitions: %w", topic, err)
	}
	var parts []int32
	for _, t := range mresp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); errors.Is(err, kerr.UnknownTopicOrPartition) {
			return nil, nil, nil
		} else if err != nil {
			return nil, nil, fmt.Errorf("kafka journal: reading %s's partitions: %w", topic, err)
		}
		for _, p := range t.Partitions {
			parts = append(parts, p.Partition)
		}
	}
	starts, ends = map[int32]int64{}, map[int32]int64{}
	for _, at := range []struct {
		ts  int64
		out map[int32]int64
	}{{-2, starts}, {-1, ends}} {
		req := kmsg.NewPtrListOffsetsRequest()
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = topic
		for _, p := range parts {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition, rp.Timestamp = p, at.ts
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		shards := j.cl.RequestSharded(ctx, req)
		for _, sh := range shards {
			if sh.Err != nil {
				return nil, nil, fmt.Errorf("kafka journal: reading %s's offsets: %w", topic, sh.Err)
			}
			for _, t := range sh.Resp.(*kmsg.ListOffsetsResponse).Topics {
				for _, p := range t.Partitions {
					if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
						return nil, nil, fmt.Errorf("kafka journal: reading %s/%d's offsets: %w", topic, p.Partition, err)
					}
					at.out[p.Partition] = p.Offset
				}
			}
		}
	}
	return starts, ends, nil
}
