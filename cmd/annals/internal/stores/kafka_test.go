package stores_test

import (
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/kafka/kafkatest"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

// TestKafkaScratchHasTopicsOfItsOwn: each scratch store of a Kafka URL
// has a topic prefix of its own (a scratch store's new eventual store
// beside another journal's topics would read that journal's records as
// its own), and removing it deletes its topics.
func TestKafkaScratchHasTopicsOfItsOwn(t *testing.T) {
	brokers := kafkatest.Real(t)
	dsn, _ := pgtest.Schema(t)
	url := "kafka://" + brokers[0] + "/?topic_prefix=" + kafkatest.Prefix(t, brokers, "scratch") + "&eventual=" + dsn
	m := stores.New()
	ctx := t.Context()
	var prefixes []string
	for range 2 {
		scratch, remove, err := m.Scratch(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		k, err := stores.ParseKafkaURL(scratch)
		if err != nil {
			t.Fatal(err)
		}
		prefixes = append(prefixes, k.TopicPrefix)
		s, err := m.Open(ctx, scratch, stores.Create)
		if err != nil {
			t.Fatal(err)
		}
		pid := "Scratch|1"
		if res, err := s.Journal.Write(ctx, []journal.AtomicWrite{{PersistenceID: pid, Events: []journal.Repr{{PersistenceID: pid, SequenceNr: 1, Payload: []byte("x")}}}}); err != nil || res != nil {
			t.Fatal(res, err)
		}
		s.Close()
		if got := topicsWith(t, brokers, k.TopicPrefix); len(got) != 1 {
			t.Errorf("scratch %s: topics %v, want its one topic", k.TopicPrefix, got)
		}
		if err := remove(); err != nil {
			t.Fatal(err)
		}
		if got := topicsWith(t, brokers, k.TopicPrefix); len(got) != 0 {
			t.Errorf("after removing scratch %s: topics %v remain", k.TopicPrefix, got)
		}
	}
	if prefixes[0] == prefixes[1] || strings.HasPrefix(prefixes[0], "journal-") {
		t.Errorf("scratch topic prefixes %q, want two of their own", prefixes)
	}
}

func topicsWith(t *testing.T, brokers []string, prefix string) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	meta, err := kmsg.NewPtrMetadataRequest().RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, tp := range meta.Topics {
		if tp.Topic != nil && strings.HasPrefix(*tp.Topic, prefix) {
			out = append(out, *tp.Topic)
		}
	}
	return out
}
