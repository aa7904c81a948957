package kafka_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/annals-go/annals/store/cassandra/cassandratest"
	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/eventual"
	"github.com/annals-go/annals/store/kafka/eventual/cql"
	"github.com/annals-go/annals/store/kafka/eventual/cql/cqltest"
	"github.com/annals-go/annals/store/kafka/eventual/pg"
	"github.com/annals-go/annals/store/kafka/eventual/pg/pgeventualtest"
	"github.com/annals-go/annals/store/kafka/kafkatest"
	"github.com/annals-go/annals/store/postgres/pgtest"
	"github.com/annals-go/annals/storetest"
)

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
	"cassandra": func(t *testing.T) eventual.Tables { s, _ := openEventual(t, "cassandra"); return s },
	"postgres":  func(t *testing.T) eventual.Tables { s, _ := openEventual(t, "postgres"); return s },
}

// openEventual opens an eventual store of a kind in a keyspace or schema
// of the test's own, and returns that name.
func openEventual(t *testing.T, kind string) (eventual.Tables, string) {
	t.Helper()
	if kind == "cassandra" {
		s, _, keyspace := cqltest.Open(t)
		return s, keyspace
	}
	_, schema := pgtest.Schema(t)
	return pgeventualtest.OpenIn(t, schema), schema
}

// Environment of the replicator child process replicateInChild starts.
const (
	replChildEnv = "ANNALS_KAFKA_REPLICATOR_CHILD" // the eventual store's kind
	replWhereEnv = "ANNALS_KAFKA_REPLICATOR_WHERE" // its keyspace or schema
	replArgsEnv  = "ANNALS_KAFKA_REPLICATOR_ARGS"  // brokers, pattern, group, lagging: tab-separated
)

// replicateInChild runs a replicator in a child process until the test
// ends, so that its memory is not the test's (the kit measures the heap
// during a replay).
func replicateInChild(t *testing.T, brokers []string, kind, where, pattern, group string, lag bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestReplicatorChildProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), replChildEnv+"="+kind, replWhereEnv+"="+where,
		replArgsEnv+"="+strings.Join([]string{brokers[0], pattern, group, fmt.Sprint(lag)}, "\t"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case err := <-done:
			t.Errorf("the replicator process ended early: %v\n%s", err, out.String())
		default:
			cancel()
			<-done
		}
	})
}

// fakeChildEnv marks the fake-broker child process fakeBrokerInChild
// starts.
const fakeChildEnv = "ANNALS_KAFKA_FAKE_BROKER_CHILD"

// fakeBrokerInChild runs the fake broker (kafkatest.Fake) in a child
// process until the test ends, and returns its addresses.
func fakeBrokerInChild(t *testing.T) []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestFakeBrokerChildProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), fakeChildEnv+"=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("the fake broker process said nothing: %v\n%s", err, stderr.String())
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return strings.Fields(line)
}

// TestFakeBrokerChildProcess is the fake-broker process of
// fakeBrokerInChild: it prints the broker's addresses on one line and
// serves until it is killed.
func TestFakeBrokerChildProcess(t *testing.T) {
	if os.Getenv(fakeChildEnv) == "" {
		t.Skip("run by fakeBrokerInChild")
	}
	fmt.Println(strings.Join(kafkatest.Fake(t), " "))
	select {}
}

// awaitReplicated waits (polling, the replicator being another process)
// until the eventual store holds a journal of topic.
func awaitReplicated(t *testing.T, tables eventual.Tables, topic string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		for _, err := range tables.IDs(context.Background(), topic) {
			if err == nil {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Errorf("the replicator process copied nothing of %s in a minute", topic)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestReplicatorChildProcess is the replicator process of
// replicateInChild.
func TestReplicatorChildProcess(t *testing.T) {
	kind := os.Getenv(replChildEnv)
	if kind == "" {
		t.Skip("run by replicateInChild")
	}
	args := strings.Split(os.Getenv(replArgsEnv), "\t")
	where := os.Getenv(replWhereEnv)
	ctx := context.Background()
	var tables eventual.Tables
	if kind == "cassandra" {
		cluster := gocql.NewCluster(cassandratest.Address())
		cluster.Timeout = time.Minute
		cluster.DisableInitialHostLookup = true
		session, err := cluster.CreateSession()
		if err != nil {
			t.Fatal(err)
		}
		if tables, err = cql.New(ctx, session, where, false, "", cql.WithConsistency(gocql.One, gocql.One)); err != nil {
			t.Fatal(err)
		}
	} else {
		pool, err := pgxpool.New(ctx, pgtest.DSN())
		if err != nil {
			t.Fatal(err)
		}
		if tables, err = pg.New(ctx, pool, where, false); err != nil {
			t.Fatal(err)
		}
	}
	if args[3] == "true" {
		tables = &lagging{Tables: tables}
	}
	r, err := kafka.NewReplicator([]string{args[0]}, tables, kafka.WithTopicPattern(args[1]), kafka.WithGroup(args[2]),
		kafka.WithTopicDiscovery(time.Second), kafka.WithErrorHandler(func(err error) { t.Log(err) }))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestJournalKit runs the journal, query and batch query suites of the
// compliance kit with the replicator running, lagging (its pointer moved
// only every third poll, so reads find events in both the store and the
// topic) and with none (every read from the topic), on the fake broker
// and on the real one (topics and group of this run's own), with each
// eventual store.
func TestJournalKit(t *testing.T) {
	for _, store := range []string{"cassandra", "postgres"} {
		t.Run(store, func(t *testing.T) {
			tables, where := openEventual(t, store)
			for _, broker := range []string{"fake", "real"} {
				for _, mode := range []string{"replicated", "unreplicated", "lagging"} {
					t.Run(broker+"/"+mode, func(t *testing.T) {
						// The fake broker in a process of its own, as the
						// replicator: the kit measures this one's heap while
						// it replays, and an in-process broker's buffers
						// would count.
						var brokers []string
						if broker == "fake" {
							brokers = fakeBrokerInChild(t)
						} else {
							brokers = kafkatest.Real(t)
						}
						run := kafkatest.Prefix(t, brokers, "test")
						var jopts []kafka.Option
						// Topics of the run's own: the eventual store is
						// shared, and its pointers are per topic name.
						jopts = append(jopts, kafka.WithTopic(func(et string) string { return run + et }))
						// LargeReplayStreams lets the heap grow by half its
						// 51 MB journal while it replays; a lagging replicator
						// leaves the head cache, the journal's one bounded
						// buffer of unreplicated events, filling up to its
						// byte bound (64 MiB by default) meanwhile. A bound
						// under the rule's keeps the rule about the replay.
						jopts = append(jopts, kafka.WithHeadCacheBytes(8<<20))
						j := kafkatest.Open(t, brokers, tables, jopts...)
						if mode != "unreplicated" {
							// In a process of its own: the kit measures this
							// one's heap while it replays.
							replicateInChild(t, brokers, store, where, "^"+run, run, mode == "lagging")
							// Once the kit's rules have run: the replicator
							// has copied some of what they wrote.
							t.Cleanup(func() { awaitReplicated(t, tables, run+"KitJournal") })
						}
						// The batch queries by slices only: the read journal
						// offers no events by tag (the topic keeps no order
						// across ids).
						storetest.Run(t, storetest.Store{Journal: j, Queries: j.ReadJournal(50 * time.Millisecond), MaxPayloadSize: kafka.DefaultMaxPayloadSize,
							Claim: kafkatest.Claims(t, j, run)})
					})
				}
			}
		})
	}
}
