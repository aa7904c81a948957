package kafka_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/eventual"
	"github.com/annals-go/annals/store/kafka/eventual/cql/cqltest"
	"github.com/annals-go/annals/store/kafka/eventual/pg/pgeventualtest"
	"github.com/annals-go/annals/store/kafka/kafkatest"
	"github.com/annals-go/annals/storetest"
)

// open returns a journal on brokers with tables as its eventual store,
// closed when the test ends.
func open(t testing.TB, brokers []string, tables eventual.Tables, opts ...kafka.Option) *kafka.Journal {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	j, err := kafka.Open(ctx, brokers, tables, append([]kafka.Option{kafka.WithOrigin("test")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

// replicate runs a replicator of the default topics until the test ends.
func replicate(t testing.TB, brokers []string, tables eventual.Tables, opts ...kafka.ReplicatorOption) *kafka.Replicator {
	t.Helper()
	r, stop := startReplicator(t, brokers, tables, opts...)
	t.Cleanup(stop)
	return r
}

// replicateUntil runs a replicator until the returned function is called.
func replicateUntil(t testing.TB, brokers []string, tables eventual.Tables, opts []kafka.ReplicatorOption) (stop func()) {
	t.Helper()
	_, stop = startReplicator(t, brokers, tables, opts...)
	t.Cleanup(stop)
	return stop
}

func startReplicator(t testing.TB, brokers []string, tables eventual.Tables, opts ...kafka.ReplicatorOption) (*kafka.Replicator, func()) {
	t.Helper()
	r, err := kafka.NewReplicator(brokers, tables, append([]kafka.ReplicatorOption{kafka.WithErrorHandler(func(err error) { t.Log(err) })}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := r.Run(ctx); err != nil {
			t.Errorf("replicator: %v", err)
		}
	})
	var once sync.Once
	return r, func() { once.Do(func() { cancel(); wg.Wait() }) }
}

// lagging is an eventual store whose pointer moves only every third
// poll: the rows are ahead of it, as after a replicator that stops between
// the two.
type lagging struct {
	eventual.Tables
	polls atomic.Int64
}

func (l *lagging) SavePointer(ctx context.Context, topic string, partition int32, offset int64, now time.Time) error {
	if l.polls.Add(1)%3 != 0 {
		return nil
	}
	return l.Tables.SavePointer(ctx, topic, partition, offset, now)
}

// brokersOf returns the fake cluster's address ("fake") or the real
// broker's ("real").
func brokersOf(t testing.TB, kind string) []string {
	t.Helper()
	if kind == "fake" {
		return kafkatest.Fake(t)
	}
	return kafkatest.Real(t)
}

// eventualStores opens an eventual store of each kind, in a keyspace or
// schema of the test's own.
var eventualStores = map[string]func(t *testing.T) eventual.Tables{
	"cassandra": func(t *testing.T) eventual.Tables { s, _, _ := cqltest.Open(t); return s },
	"postgres":  func(t *testing.T) eventual.Tables { return pgeventualtest.Open(t) },
}

// TestJournalKit runs the journal compliance kit with the replicator
// running, lagging (its pointer moved only every third poll, so reads
// find events in both the store and the topic) and with none (every read
// from the topic), on the fake broker and on the real one (topics and
// group of this run's own), with each eventual store.
func TestJournalKit(t *testing.T) {
	for _, store := range []string{"cassandra", "postgres"} {
		t.Run(store, func(t *testing.T) {
			tables := eventualStores[store](t)
			for _, broker := range []string{"fake", "real"} {
				for _, mode := range []string{"replicated", "unreplicated", "lagging"} {
					t.Run(broker+"/"+mode, func(t *testing.T) {
						brokers := brokersOf(t, broker)
						run := fmt.Sprintf("annals-test-%d-", time.Now().UnixNano())
						var jopts []kafka.Option
						var ropts []kafka.ReplicatorOption
						// Topics of the run's own: the eventual store is
						// shared, and its pointers are per topic name.
						jopts = append(jopts, kafka.WithTopic(func(et string) string { return run + et }))
						ropts = append(ropts, kafka.WithTopicPattern("^"+run), kafka.WithGroup(run))
						j := open(t, brokers, tables, jopts...)
						switch mode {
						case "replicated":
							replicate(t, brokers, tables, ropts...)
						case "lagging":
							replicate(t, brokers, &lagging{Tables: tables}, ropts...)
						}
						storetest.RunJournal(t, storetest.JournalHarness{
							New: func(t *testing.T) journal.Journal { return j },
						})
						rj := j.ReadJournal(50 * time.Millisecond)
						storetest.RunQueries(t, storetest.QueryHarness{New: func(t *testing.T) (journal.Journal, any) { return j, rj }})
					})
				}
			}
		})
	}
}
