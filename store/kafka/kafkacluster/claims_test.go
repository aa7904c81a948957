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
	ctx := t.Context()
	unit := w.topic + "/0"
	m := w.joinAlone(t, rec, 200*time.Millisecond, unit)
	fence, _, _ := rec.fence(unit)
	pid := accountIn("late", 0)
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
	healthy := w.topic + "/0"
	m := w.joinAlone(t, shard, 0, healthy) // defaults: heartbeat 1.2 s, hand-off 3 s
	await(t, "holding every partition", func() bool { return len(m.Held()) == partitions }, m)
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

// fenceRecorder is a Shard that keeps the fence of each unit it is given.
type fenceRecorder struct {
	kafkacluster.Shard
	mu     sync.Mutex
	fences map[string]journal.Fence
	served chan struct{} // closed (and made again) at each ServeUnit
}

func newFenceRecorder(s kafkacluster.Shard) *fenceRecorder {
	return &fenceRecorder{Shard: s, fences: map[string]journal.Fence{}, served: make(chan struct{})}
}

func (r *fenceRecorder) ServeUnit(unit string, owns func(string) bool, fence journal.Fence) error {
	err := r.Shard.ServeUnit(unit, owns, fence)
	r.mu.Lock()
	r.fences[unit] = fence
	close(r.served)
	r.served = make(chan struct{})
	r.mu.Unlock()
	return err
}

// fence returns the fence unit was last served with, and a channel
// closed at the next ServeUnit.
func (r *fenceRecorder) fence(unit string) (journal.Fence, bool, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, ok := r.fences[unit]
	return f, ok, r.served
}

// TestMemberClaimsItsPartitions: a member claims each partition it is
// given before serving it, and its writes carry the claim: once another
// process claims the partition (a member that took it over while this one
// was paused), a write this member sends under its fence, at the id's
// next free number, is refused as fenced and not stored, and the fence
// stays closed after.
func TestMemberClaimsItsPartitions(t *testing.T) {
	w := newWorld(t)
	rec := newFenceRecorder(newHost(t, w.journal, true))
	ctx := t.Context()
	unit := w.topic + "/0"
	w.joinAlone(t, rec, 0, unit)
	fence, ok, _ := rec.fence(unit)
	if !ok {
		t.Fatalf("%s is held and was not served", unit)
	}
	if err := fence.Open(); err != nil {
		t.Fatalf("the fence of a held partition: %v", err)
	}
	pid := accountIn("claimed", 0)
	write := func(seq int64) error {
		t.Helper()
		ev := journal.Repr{PersistenceID: pid, SequenceNr: seq, Payload: []byte("{}"), SerializerID: 1, Manifest: "m"}
		res, err := w.journal.WriteFenced(ctx, []journal.AtomicWrite{{PersistenceID: pid, Events: []journal.Repr{ev}}}, []journal.FenceToken{fence.Token})
		if err != nil {
			t.Fatalf("WriteFenced %d: outcome unknown: %v", seq, err)
		}
		if res == nil {
			return nil
		}
		return res[0]
	}
	if err := write(1); err != nil {
		t.Fatalf("a write under the member's claim: %v", err)
	}
	other, err := kafka.Open(ctx, w.brokers, w.tables, kafka.WithTopic(func(string) string { return w.topic }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	taken, err := other.Claim(ctx, w.group, w.topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(taken.Close)
	if err := write(2); !errors.Is(err, journal.ErrFenced) || !errors.Is(err, journal.ErrRejected) {
		t.Errorf("a write under the member's claim after another took it: %v, want ErrFenced and ErrRejected", err)
	}
	if err := fence.Open(); err == nil {
		t.Error("the fence is open after the claim was fenced off")
	}
	if n, err := other.HighestSequenceNr(ctx, pid, 0); err != nil || n != 1 {
		t.Errorf("highest of %s = %d, %v; want 1", pid, n, err)
	}
}

// TestMemberClaimsAgain: a member whose claim of a partition it still
// holds stops working (here closed under it; a producer that failed to
// end a transaction is the same) hands the partition's entities off,
// claims it again and serves it under the new claim, at its next
// heartbeat: writes go on.
func TestMemberClaimsAgain(t *testing.T) {
	w := newWorld(t)
	rec := newFenceRecorder(newHost(t, w.journal, true))
	ctx := t.Context()
	unit := w.topic + "/1"
	w.joinAlone(t, rec, 200*time.Millisecond, unit)
	before, _, _ := rec.fence(unit)
	claim, ok := before.Token.Store.(*kafka.Claim)
	if !ok {
		t.Fatalf("the fence of %s carries no claim: %+v", unit, before.Token)
	}
	claim.Close()
	if err := before.Open(); err == nil {
		t.Error("the fence is open after its claim was closed")
	}
	deadline := time.After(30 * time.Second)
	var after journal.Fence
	for {
		f, _, served := rec.fence(unit)
		if f.Token.Store != before.Token.Store {
			after = f
			break
		}
		select {
		case <-served:
		case <-deadline:
			t.Fatal("the partition was not claimed again within 30 s")
		}
	}
	if err := after.Open(); err != nil {
		t.Fatalf("the new fence: %v", err)
	}
	pid := accountIn("again", 1)
	ev := journal.Repr{PersistenceID: pid, SequenceNr: 1, Payload: []byte("{}"), SerializerID: 1, Manifest: "m"}
	if res, err := w.journal.WriteFenced(ctx, []journal.AtomicWrite{{PersistenceID: pid, Events: []journal.Repr{ev}}}, []journal.FenceToken{after.Token}); err != nil || res != nil {
		t.Errorf("a write under the new claim: %v, %v", res, err)
	}
}

// joinAlone makes "a" the only member of w's group, serving shard, with
// heartbeat (0: the default) and a session of 6 s, leaving when the test
// ends, and waits until it holds unit.
func (w *world) joinAlone(t *testing.T, shard kafkacluster.Shard, heartbeat time.Duration, unit string) *kafkacluster.Member {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	m, err := kafkacluster.Join(ctx, kafkacluster.Config{
		Journal: w.journal, Group: w.group, Name: "a", Address: "a.invalid:80",
		Shards: []kafkacluster.Shard{shard}, SessionTimeout: 6 * time.Second, Heartbeat: heartbeat,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Leave(context.Background()) })
	await(t, "holding "+unit, func() bool { return slices.Contains(m.Held(), unit) }, m)
	return m
}

// accountIn returns an account id, named after name, whose records go to
// partition p of w's topic.
func accountIn(name string, p int32) string {
	for i := 0; ; i++ {
		if id := annals.PersistenceID(bank.EntityType, fmt.Sprintf("%s-%d", name, i)); kafka.Partition(id, partitions) == p {
			return id
		}
	}
}
