package kafka_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/eventual"
	"github.com/annals-go/annals/store/kafka/kafkatest"
)

// TestPurgeExpired: journals written with an expire-after are purged
// through the log once their expiry date has come, on both eventual
// stores; journals without one, and journals appended to since, are not.
func TestPurgeExpired(t *testing.T) {
	for _, name := range []string{"cassandra", "postgres"} {
		t.Run(name, func(t *testing.T) {
			tables := eventualStores[name](t)
			brokers := kafkatest.Fake(t)
			topic := fmt.Sprintf("journal-Expiry%d", time.Now().UnixNano())
			opts := []kafka.Option{kafka.WithTopic(func(string) string { return topic })}
			expiring := kafkatest.Open(t, brokers, tables, append(opts, kafka.WithExpireAfter(24*time.Hour))...)
			lasting := kafkatest.Open(t, brokers, tables, opts...)
			write(t, expiring, "Expiry|old", 1, 3, "a")
			write(t, expiring, "Expiry|fresh", 1, 2, "a")
			write(t, lasting, "Expiry|forever", 1, 2, "a")
			rep := newReplicated()
			ropts := append(rep.options(), kafka.WithTopics(topic), kafka.WithGroup(topic))
			stop := replicateUntil(t, brokers, tables, ropts)
			key := func(id string) eventual.Key { return eventual.Key{ID: id, Topic: topic} }
			rep.await(t, "the three journals replicated", func() bool {
				return headSeq(t, tables, key("Expiry|old")) == 3 && headSeq(t, tables, key("Expiry|fresh")) == 2 && headSeq(t, tables, key("Expiry|forever")) == 2
			})
			if got, err := expiring.PurgeExpired(t.Context(), time.Now()); err != nil || len(got) != 0 {
				t.Fatalf("PurgeExpired today = %v, %v; want nothing (they expire tomorrow)", got, err)
			}
			// Appended since, and not replicated yet: the eventual store
			// still has the old date.
			stop()
			write(t, expiring, "Expiry|fresh", 3, 3, "a")
			later := time.Now().Add(72 * time.Hour)
			got, err := expiring.PurgeExpired(t.Context(), later)
			if err != nil || !slices.Equal(got, []string{"Expiry|old"}) {
				t.Fatalf("PurgeExpired in 3 days = %v, %v; want [Expiry|old] (fresh was appended to, forever has no expiry)", got, err)
			}
			replicate(t, brokers, tables, ropts...)
			rep.await(t, "the purge replicated", func() bool {
				_, ok, err := tables.Head(t.Context(), key("Expiry|old"))
				return err == nil && !ok
			})
			if got := replay(t, lasting, "Expiry|old"); len(got) != 0 {
				t.Errorf("the purged journal replays %v", got)
			}
			if got := replay(t, lasting, "Expiry|forever"); !slices.Equal(got, payloads("a", 1, 2)) {
				t.Errorf("the journal without expiry replays %v", got)
			}
			if got := replay(t, lasting, "Expiry|fresh"); !slices.Equal(got, payloads("a", 1, 3)) {
				t.Errorf("the journal appended to replays %v", got)
			}
		})
	}
}
