package kafka_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/eventual"
	"github.com/annals-go/annals/store/kafka/kafkatest"
)

// TestStats: the statistics count what the eventual store holds, on both
// stores: ids, events (not the deleted ones), the highest number and the
// time range.
func TestStats(t *testing.T) {
	for _, name := range []string{"cassandra", "postgres"} {
		t.Run(name, func(t *testing.T) {
			tables := eventualStores[name](t)
			brokers := kafkatest.Fake(t)
			topic := fmt.Sprintf("journal-Stats%d", time.Now().UnixNano())
			j := kafkatest.Open(t, brokers, tables, kafka.WithTopic(func(string) string { return topic }))
			start := time.Now().Add(-time.Second)
			write(t, j, "Stats|a", 1, 3, "a")
			write(t, j, "Stats|b", 1, 2, "a")
			if err := j.DeleteTo(t.Context(), "Stats|a", 1); err != nil {
				t.Fatal(err)
			}
			rep := newReplicated()
			replicate(t, brokers, tables, append(rep.options(), kafka.WithTopics(topic), kafka.WithGroup(topic))...)
			rep.await(t, "both ids replicated", func() bool {
				h, ok, _ := tables.Head(t.Context(), eventual.Key{ID: "Stats|a", Topic: topic})
				return ok && h.DeleteTo == 1 && headSeq(t, tables, eventual.Key{ID: "Stats|b", Topic: topic}) == 2
			})
			st, err := j.Stats(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			var found bool
			for _, ts := range st.EntityTypes {
				if ts.EntityType != "Stats" {
					continue
				}
				found = true
				if ts.PersistenceIDs != 2 || ts.Events != 4 || ts.HighestSequenceNr != 3 || ts.PayloadBytes <= 0 ||
					ts.Oldest.Before(start) || ts.Newest.Before(ts.Oldest) {
					t.Errorf("stats of Stats = %+v; want 2 ids, 4 events, highest 3, payload bytes, times since the test began", ts)
				}
			}
			if !found {
				t.Errorf("no stats for Stats in %+v", st)
			}
		})
	}
}
