package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/eventual"
	"github.com/annals-go/annals/store/kafka/eventual/pg"
	"github.com/annals-go/annals/store/kafka/eventual/pg/pgeventualtest"
	"github.com/annals-go/annals/store/kafka/kafkatest"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

// Environment of the replicator child process TestReplicatorKilled starts.
const (
	childEnv   = "ANNALS_KAFKA_CRASH_CHILD"   // the kill point
	brokersEnv = "ANNALS_KAFKA_CRASH_BROKERS" // one broker
	dsnEnv     = "ANNALS_KAFKA_CRASH_DSN"     // the PostgreSQL server
	schemaEnv  = "ANNALS_KAFKA_CRASH_SCHEMA"  // the eventual store's schema
	topicEnv   = "ANNALS_KAFKA_CRASH_TOPIC"
)

// killing wraps an eventual store so that the process kills itself
// (SIGKILL) at a point of the replication of its first key.
type killing struct {
	eventual.Tables
	point   string
	records atomic.Int64
}

func (k *killing) kill() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) }

func (k *killing) InsertRecords(ctx context.Context, key eventual.Key, seg int64, id [16]byte, rs []eventual.Record) error {
	err := k.Tables.InsertRecords(ctx, key, seg, id, rs)
	k.records.Add(int64(len(rs)))
	return err
}

func (k *killing) InsertHead(ctx context.Context, key eventual.Key, h eventual.Head, now time.Time, origin string) error {
	if k.point == "rows" && k.records.Load() > 0 {
		k.kill()
	}
	return k.Tables.InsertHead(ctx, key, h, now, origin)
}

func (k *killing) SavePointer(ctx context.Context, topic string, partition int32, offset int64, now time.Time) error {
	if k.point == "pointer" {
		k.kill()
	}
	return k.Tables.SavePointer(ctx, topic, partition, offset, now)
}

// TestReplicatorKilledChild is the child process: a replicator that kills
// itself at the point childEnv names.
func TestReplicatorKilledChild(t *testing.T) {
	point := os.Getenv(childEnv)
	if point == "" {
		t.Skip("run by TestReplicatorKilled")
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv(dsnEnv))
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pg.New(ctx, pool, os.Getenv(schemaEnv), false)
	if err != nil {
		t.Fatal(err)
	}
	r, err := kafka.NewReplicator([]string{os.Getenv(brokersEnv)}, &killing{Tables: tables, point: point},
		kafka.WithTopics(os.Getenv(topicEnv)), kafka.WithGroup(os.Getenv(topicEnv)))
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Run(ctx)
	t.Fatal("the replicator ended without being killed")
}

// TestReplicatorKilled: a replicator killed (SIGKILL of a child process)
// between an append's journal rows and its metajournal head, and between
// the heads and the pointer, loses and doubles nothing once a replicator
// runs again.
func TestReplicatorKilled(t *testing.T) {
	for _, point := range []string{"rows", "pointer"} {
		t.Run(point, func(t *testing.T) {
			brokers := kafkatest.Fake(t)
			dsn := pgtest.Server(t)
			_, schema := pgtest.Schema(t)
			tables := pgeventualtest.OpenIn(t, schema)
			topic := fmt.Sprintf("journal-Crash%s%d", point, time.Now().UnixNano())
			j := kafkatest.Open(t, brokers, tables, kafka.WithTopic(func(string) string { return topic }))
			const ids, events = 20, 6
			for i := range ids {
				pid := fmt.Sprintf("Crash|%d", i)
				write(t, j, pid, 1, 3, "a")
				write(t, j, pid, 4, events, "a")
			}

			child := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestReplicatorKilledChild$", "-test.count=1")
			child.Env = append(os.Environ(), childEnv+"="+point, brokersEnv+"="+brokers[0], dsnEnv+"="+dsn, schemaEnv+"="+schema, topicEnv+"="+topic)
			out, err := child.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("the child replicator was not killed: %v\n%s", err, out)
			}
			// What the kill left: rows without their head, or heads without
			// the pointer.
			key0 := func(i int) eventual.Key { return eventual.Key{ID: fmt.Sprintf("Crash|%d", i), Topic: topic} }
			rows, heads := 0, 0
			for i := range ids {
				for _, err := range tables.Records(t.Context(), key0(i), 0, 1, 1<<62) {
					if err != nil {
						t.Fatal(err)
					}
					rows++
				}
				if _, ok, _ := tables.Head(t.Context(), key0(i)); ok {
					heads++
				}
			}
			_, pointed, _ := tables.Pointer(t.Context(), topic, 0)
			t.Logf("killed at %q: %d rows, %d heads, pointer of partition 0 stored: %v", point, rows, heads, pointed)
			if rows == 0 || (point == "rows" && heads == ids) || (point == "pointer" && heads == 0) {
				t.Fatalf("the kill at %q left %d rows and %d heads", point, rows, heads)
			}

			// Another group: the killed member would hold the partitions
			// until its session times out (45 s), and where replication
			// resumes is the eventual store's pointer, not the group's.
			rep := newReplicated()
			replicate(t, brokers, tables, append(rep.options(), kafka.WithTopics(topic), kafka.WithGroup(topic+"-restarted"))...)
			done := func() bool {
				for i := range ids {
					if headSeq(t, tables, key0(i)) != events {
						return false
					}
				}
				return true
			}
			rep.await(t, "every id replicated", done)
			for i := range ids {
				var seqs []int64
				for r, err := range tables.Records(t.Context(), key0(i), 0, 1, 1<<62) {
					if err != nil {
						t.Fatal(err)
					}
					seqs = append(seqs, r.Event.SeqNr)
				}
				if !slices.Equal(seqs, []int64{1, 2, 3, 4, 5, 6}) {
					t.Errorf("%s has rows %v, want 1..6 once each", key0(i).ID, seqs)
				}
				if got := replay(t, j, key0(i).ID); !slices.Equal(got, payloads("a", 1, events)) {
					t.Errorf("%s replays %v", key0(i).ID, got)
				}
			}
		})
	}
}
