package kafka

import (
	"github.com/twmb/franz-go/pkg/kgo"
)

// Topic returns the topic persistenceID's records go to (its entity
// type's, as WithTopic maps it), or an error naming a topic Kafka would
// refuse.
func (j *Journal) Topic(persistenceID string) (string, error) {
	k, err := j.key(persistenceID)
	return k.Topic, err
}

// Partition returns the partition, among partitions, that the journal's
// producer writes persistenceID's records to: Kafka's murmur2 hash of the
// key, as the Java producer and the Scala Kafka Journal choose it. It is
// -1 when partitions is not positive. An id keeps its partition only while
// its topic's partition count stays the same.
func Partition(persistenceID string, partitions int) int32 {
	if partitions <= 0 {
		return -1
	}
	p := kgo.StickyKeyPartitioner(nil).ForTopic("")
	return int32(p.Partition(&kgo.Record{Key: []byte(persistenceID)}, partitions))
}
