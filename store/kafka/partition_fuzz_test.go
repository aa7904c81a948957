package kafka_test

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/annals-go/annals/store/kafka"
)

// FuzzPartitionIsFranzGos: Partition chooses as franz-go's keyed
// partitioner for any key bytes (invalid UTF-8, bytes above 0x7f, every
// tail length) and partition count.
func FuzzPartitionIsFranzGos(f *testing.F) {
	for _, s := range []string{"", "a", "ab", "abc", "abcd", "\xff\xfe\xfd", "Type|é€", "\x80\x00\x7f\xff\x01"} {
		f.Add(s, uint16(7))
	}
	p := kgo.StickyKeyPartitioner(nil).ForTopic("")
	f.Fuzz(func(t *testing.T, key string, n uint16) {
		parts := int(n%4096) + 1
		want := int32(p.Partition(&kgo.Record{Key: []byte(key)}, parts))
		if got := kafka.Partition(key, parts); got != want {
			t.Fatalf("Partition(%q, %d) = %d, franz-go chooses %d", key, parts, got, want)
		}
	})
}
