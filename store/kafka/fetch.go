package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A read of a partition's head that the head cache cannot serve sends
// Fetch requests through the journal's own client, to the partition's
// leader, on connections already open: a consumer client of its own per
// read (as before) cost a metadata request, new connections and the
// consumer's start, more than the records themselves for a head of a
// thousand events.

// fetchMeta is what a read of a partition needs of its topic: the topic's
// id (Fetch v13 and later name topics by id) and each partition's leader.
type fetchMeta struct {
	id      [16]byte
	leaders map[int32]int32
}

// fetchMetas caches fetchMeta per topic; an entry is dropped when a fetch
// meets an error that may mean it is stale (a moved leader, a topic
// deleted and made again).
type fetchMetas struct {
	mu sync.Mutex
	m  map[string]fetchMeta
}

// fetchRetryWait is the pause before a read of a partition asks again
// after an error that may pass (a leader moving, a broker restarting).
const fetchRetryWait = 100 * time.Millisecond

// meta returns topic's ids and leaders, from the cache or the cluster.
func (j *Journal) meta(ctx context.Context, topic string) (fetchMeta, error) {
	j.metas.mu.Lock()
	m, ok := j.metas.m[topic]
	j.metas.mu.Unlock()
	if ok {
		return m, nil
	}
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, j.cl)
	if err != nil {
		return fetchMeta{}, fmt.Errorf("kafka journal: the metadata of %s: %w", topic, err)
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return fetchMeta{}, fmt.Errorf("kafka journal: the metadata of %s: %w", topic, err)
		}
		m = fetchMeta{id: t.TopicID, leaders: make(map[int32]int32, len(t.Partitions))}
		for _, p := range t.Partitions {
			m.leaders[p.Partition] = p.Leader
		}
		j.metas.mu.Lock()
		if j.metas.m == nil {
			j.metas.m = map[string]fetchMeta{}
		}
		j.metas.m[topic] = m
		j.metas.mu.Unlock()
		return m, nil
	}
	return fetchMeta{}, fmt.Errorf("kafka journal: the metadata of %s: %w", topic, kerr.UnknownTopicOrPartition)
}

// forgetMeta drops topic's cached metadata.
func (j *Journal) forgetMeta(topic string) {
	j.metas.mu.Lock()
	delete(j.metas.m, topic)
	j.metas.mu.Unlock()
}

// fetch calls f with the records of a partition from offset from (-1: the
// partition's first record) in offset order, one Fetch request of at most
// readerFetchBytes at a time, until f returns false. Errors that may pass
// (a leader moving, a lost connection) are retried within ctx. An offset
// before the partition's first (retention deleted it) reads from the
// first, as a consumer resetting to the start does.
func (j *Journal) fetch(ctx context.Context, topic string, partition int32, from int64, f func(*kgo.Record) bool) error {
	offset := from
	var last error // the error that made the read ask again
	for {
		if err := ctx.Err(); err != nil {
			if last != nil {
				return fmt.Errorf("kafka journal: reading %s/%d at offset %d: %w (after %w)", topic, partition, offset, err, last)
			}
			return err
		}
		if last != nil {
			t := time.NewTimer(fetchRetryWait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				continue
			}
		}
		if offset < 0 {
			starts, err := listOffsets(ctx, j.cl, topic, []int32{partition}, -2)
			if err != nil {
				last = err
				continue
			}
			offset = starts[partition]
		}
		m, err := j.meta(ctx, topic)
		if err != nil {
			last = err
			continue
		}
		leader, ok := m.leaders[partition]
		if !ok || leader < 0 {
			j.forgetMeta(topic)
			last = fmt.Errorf("kafka journal: %s/%d: %w", topic, partition, kerr.LeaderNotAvailable)
			continue
		}
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = -1, 250, 1, readerFetchBytes
		req.SessionID, req.SessionEpoch = 0, -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = topic, m.id
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = partition, offset, readerFetchBytes
		rp.CurrentLeaderEpoch, rp.LogStartOffset, rp.LastFetchedEpoch = -1, -1, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := j.cl.Broker(int(leader)).Request(ctx, req)
		if err != nil {
			j.forgetMeta(topic)
			last = err
			continue
		}
		fr, _ := resp.(*kmsg.FetchResponse)
		if err := kerr.ErrorForCode(fr.ErrorCode); err != nil {
			last = err
			continue
		}
		var part *kmsg.FetchResponseTopicPartition
		for i := range fr.Topics {
			for k := range fr.Topics[i].Partitions {
				if p := &fr.Topics[i].Partitions[k]; p.Partition == partition {
					part = p
				}
			}
		}
		if part == nil {
			last = fmt.Errorf("kafka journal: %s/%d: not in the broker's answer", topic, partition)
			continue
		}
		fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Offset: offset, Topic: topic, Partition: partition},
			part, j.decompressor, nil)
		switch {
		case errors.Is(fp.Err, kerr.OffsetOutOfRange):
			starts, err := listOffsets(ctx, j.cl, topic, []int32{partition}, -2)
			if err != nil {
				last = err
				continue
			}
			if starts[partition] <= offset {
				return fmt.Errorf("kafka journal: reading %s/%d at offset %d: %w", topic, partition, offset, fp.Err)
			}
			offset, last = starts[partition], nil
			continue
		case fp.Err != nil && (kerr.IsRetriable(fp.Err) || errors.Is(fp.Err, kerr.UnknownTopicID) || errors.Is(fp.Err, kerr.InconsistentTopicID)):
			j.forgetMeta(topic)
			last = fp.Err
			continue
		case fp.Err != nil:
			return fmt.Errorf("kafka journal: reading %s/%d at offset %d: %w", topic, partition, offset, fp.Err)
		}
		last = nil
		for _, r := range fp.Records {
			if !f(r) {
				return nil
			}
		}
		offset = max(offset, next) // the offset after the last record processed
	}
}
