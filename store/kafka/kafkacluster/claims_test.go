package kafkacluster_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/examples/bank"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/kafkacluster"
)

// TestMemberFencedByALateClaimServesAgain: a process that no longer
// holds a partition claims it late (a member the group removed, paused
// between its check of its term and its Journal.Claim, resuming after
// the partition moved here): its claim fences off the claim of this
// member, which the group still gives the partition and whose term runs.
// The group does not move the partition, so the member claims it again
// and serves it under the new claim.
func TestMemberFencedByALateClaimServesAgain(t *testing.T) {
	w := newWorld(t)
	rec := newFenceRecorder(newHost(t, w.journal, true))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	m, err := kafkacluster.Join(ctx, kafkacluster.Config{
		Journal: w.journal, Group: w.group, Name: "a", Address: "a.invalid:80",
		Shards: []kafkacluster.Shard{rec}, SessionTimeout: 6 * time.Second, Heartbeat: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Leave(context.Background()) })
	unit := w.topic + "/0"
	await(t, "holding "+unit, func() bool { return slices.Contains(m.Held(), unit) }, m)
	fence, _, _ := rec.fence(unit)
	var pid string
	for i := 0; pid == ""; i++ {
		if id := annals.PersistenceID(bank.EntityType, fmt.Sprintf("late-%d", i)); kafka.Partition(id, partitions) == 0 {
			pid = id
		}
	}
	write := func(f journal.Fence, seq int64) error {
		t.Helper()
		if err := f.Open(); err != nil {
			return err
		}
		ev := journal.Repr{PersistenceID: pid, SequenceNr: seq, Payload: []byte("{}"), SerializerID: 1, Manifest: "m"}
		res, err := w.journal.WriteFenced(ctx, []journal.AtomicWrite{{PersistenceID: pid, Events: []journal.Repr{ev}}}, []journal.FenceToken{f.Token})
		if err != nil {
			return err
		}
		if res == nil {
			return nil
		}
		return res[0]
	}
	if err := write(fence, 1); err != nil {
		t.Fatalf("a write under the member's claim: %v", err)
	}
	// The late claim of a process that no longer holds the partition.
	stale, err := kafka.Open(ctx, w.brokers, w.tables, kafka.WithTopic(func(string) string { return w.topic }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stale.Close() })
	late, err := stale.Claim(ctx, w.group, w.topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	late.Close() // the stale process gives up at once: nothing of it writes
	if err := write(fence, 2); !errors.Is(err, journal.ErrFenced) {
		t.Fatalf("a write under the fenced claim: %v, want ErrFenced", err)
	}
	// 25 heartbeats later the member still holds the partition: it must
	// serve it again.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if !slices.Contains(m.Held(), unit) {
			t.Fatalf("the member gave %s up", unit)
		}
		f, _, _ := rec.fence(unit)
		if err := write(f, 2); err == nil {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("25 heartbeats after a late claim fenced the member's off, the member holds %s (its term running: the group gives it the partition) and serves it under no claim: a write fails with %v", unit, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// slowHandOff is a fenceRecorder whose hand-offs of some units take
// until their context ends (an entity whose persist hangs on the broker
// that broke the claim).
type slowHandOff struct {
	*fenceRecorder
	mu   sync.Mutex
	slow map[string]bool
}

func (s *slowHandOff) HandOffUnit(ctx context.Context, unit string) error {
	s.mu.Lock()
	slow := s.slow[unit]
	s.mu.Unlock()
	if slow {
		<-ctx.Done()
		_ = s.fenceRecorder.HandOffUnit(context.Background(), unit)
		return ctx.Err()
	}
	return s.fenceRecorder.HandOffUnit(ctx, unit)
}

// TestRepairingClaimsKeepsTheOtherPartitionsServed: the repair of broken
// claims runs beside the member's heartbeats, never between them: two
// broken claims whose hand-offs take all of HandOffTimeout (half the
// session by default) do not keep the member from heartbeating, so its
// term runs on and the fences of its other partitions stay open.
func TestRepairingClaimsKeepsTheOtherPartitionsServed(t *testing.T) {
	w := newWorld(t)
	shard := &slowHandOff{fenceRecorder: newFenceRecorder(newHost(t, w.journal, true)), slow: map[string]bool{}}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	m, err := kafkacluster.Join(ctx, kafkacluster.Config{
		Journal: w.journal, Group: w.group, Name: "a", Address: "a.invalid:80",
		Shards: []kafkacluster.Shard{shard}, SessionTimeout: 6 * time.Second, // defaults: heartbeat 1.2 s, hand-off 3 s
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Leave(context.Background()) })
	await(t, "holding every partition", func() bool { return len(m.Held()) == partitions }, m)
	healthy := w.topic + "/0"
	if f, _, _ := shard.fence(healthy); f.Open() != nil {
		t.Fatalf("the fence of %s: %v", healthy, f.Open())
	}
	shard.mu.Lock()
	shard.slow[w.topic+"/1"], shard.slow[w.topic+"/2"] = true, true
	shard.mu.Unlock()
	for _, u := range []string{w.topic + "/1", w.topic + "/2"} {
		f, _, _ := shard.fence(u)
		f.Token.Store.(*kafka.Claim).Close() // broken: repairClaims takes it
	}
	var closed time.Duration
	var why error
	for start := time.Now(); time.Since(start) < 10*time.Second; {
		f, _, _ := shard.fence(healthy)
		if err := f.Open(); err != nil && why == nil {
			closed, why = time.Since(start), err
		}
		time.Sleep(20 * time.Millisecond)
	}
	if why != nil {
		t.Errorf("the fence of %s, whose claim is sound, closed %v after two other claims broke (the repairs' hand-offs held the member's heartbeats back past its term): %v", healthy, closed.Round(time.Millisecond), why)
	}
}
