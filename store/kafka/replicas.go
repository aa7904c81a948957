package kafka

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The producer retries a write the partition's leader refuses with
// NOT_ENOUGH_REPLICAS (fewer replicas in sync than the topic's
// min.insync.replicas, as when brokers are down) until the write's
// context ends, for it is a retriable error: without more, such a write
// would wait out its caller's whole timeout. So a record that has waited
// stallCheck for its acknowledgement makes the journal ask the cluster
// (metadata, and the topic's min.insync.replicas) whether its partition
// has enough replicas in sync; when it has not, the write fails at once
// with an error wrapping kerr.NotEnoughReplicas that names the partition
// and its in-sync replicas. A stall of any other kind (a leader moving, a
// broker slow to answer) is waited out as before.
const (
	stallCheck   = time.Second
	replicasTTL  = time.Second     // how long a cluster's answer is reused
	replicasWait = 5 * time.Second // bound of one question to the cluster
)

// replicaState is what the journal last learned of a topic's partitions.
type replicaState struct {
	at         time.Time
	partitions int
	short      map[int32]error // the partitions refusing acks=all writes, and why
}

// replicaStates caches replicaState by topic, for replicasTTL.
type replicaStates struct {
	mu     sync.Mutex
	topics map[string]replicaState
}

// shortOfReplicas returns, for each record whose partition has fewer
// replicas in sync than its topic's min.insync.replicas, an error saying
// so; nil when none has (or the cluster did not answer the question).
func (j *Journal) shortOfReplicas(ctx context.Context, records []*kgo.Record) map[*kgo.Record]error {
	var out map[*kgo.Record]error
	states := map[string]replicaState{}
	for _, r := range records {
		st, ok := states[r.Topic]
		if !ok {
			st = j.replicaState(ctx, r.Topic)
			states[r.Topic] = st
		}
		if len(st.short) == 0 {
			continue
		}
		if err, ok := st.short[Partition(string(r.Key), st.partitions)]; ok {
			if out == nil {
				out = map[*kgo.Record]error{}
			}
			out[r] = err
		}
	}
	return out
}

// replicaState returns topic's state, from the cache when fresh, else
// from the cluster; a question the cluster does not answer gives a state
// with nothing short.
func (j *Journal) replicaState(ctx context.Context, topic string) replicaState {
	j.replicas.mu.Lock()
	st, ok := j.replicas.topics[topic]
	j.replicas.mu.Unlock()
	if ok && time.Since(st.at) < replicasTTL {
		return st
	}
	st, err := j.askReplicas(ctx, topic)
	if err != nil {
		return replicaState{}
	}
	j.replicas.mu.Lock()
	defer j.replicas.mu.Unlock()
	if j.replicas.topics == nil {
		j.replicas.topics = map[string]replicaState{}
	}
	j.replicas.topics[topic] = st
	return st
}

// askReplicas reads topic's min.insync.replicas and its partitions'
// in-sync replicas from the cluster.
func (j *Journal) askReplicas(ctx context.Context, topic string) (replicaState, error) {
	ctx, cancel := context.WithTimeout(ctx, replicasWait)
	defer cancel()
	creq := kmsg.NewPtrDescribeConfigsRequest()
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType, res.ResourceName, res.ConfigNames = kmsg.ConfigResourceTypeTopic, topic, []string{"min.insync.replicas"}
	creq.Resources = append(creq.Resources, res)
	cresp, err := creq.RequestWith(ctx, j.cl)
	if err != nil {
		return replicaState{}, err
	}
	minISR := 0
	for _, r := range cresp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			return replicaState{}, err
		}
		for _, c := range r.Configs {
			if c.Name == "min.insync.replicas" && c.Value != nil {
				minISR, _ = strconv.Atoi(*c.Value)
			}
		}
	}
	mreq := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	mreq.Topics = append(mreq.Topics, mt)
	mresp, err := mreq.RequestWith(ctx, j.cl)
	if err != nil {
		return replicaState{}, err
	}
	st := replicaState{at: time.Now()}
	for _, t := range mresp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil || t.Topic == nil || *t.Topic != topic {
			continue
		}
		st.partitions = len(t.Partitions)
		for _, p := range t.Partitions {
			if p.Leader >= 0 && len(p.ISR) < minISR {
				if st.short == nil {
					st.short = map[int32]error{}
				}
				st.short[p.Partition] = fmt.Errorf("partition %d of topic %s has %d of its %d replicas in sync (brokers %v), fewer than its min.insync.replicas of %d, so its leader (broker %d) refuses writes acknowledged by all: %w",
					p.Partition, topic, len(p.ISR), len(p.Replicas), p.ISR, minISR, p.Leader, kerr.NotEnoughReplicas)
			}
		}
	}
	return st, nil
}
