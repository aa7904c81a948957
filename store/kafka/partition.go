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
	return int32(kgo.KafkaHasher(murmur2)([]byte(persistenceID), partitions))
}

// murmur2 is the hash of Kafka's default partitioner (the Java client's
// Utils.murmur2), which franz-go's StickyKeyPartitioner uses for keyed
// records but does not export: making that partitioner for one key seeds
// a random source, which cost more than the rest of a write.
// TestPartitionIsFranzGos holds it to franz-go's.
func murmur2(b []byte) uint32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	h := seed ^ uint32(len(b))
	for len(b) >= 4 {
		k := uint32(b[3])<<24 | uint32(b[2])<<16 | uint32(b[1])<<8 | uint32(b[0])
		b = b[4:]
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch len(b) {
	case 3:
		h ^= uint32(b[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(b[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(b[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}
