package entity_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/entity/entitytest"
	"github.com/annals-go/annals/internal/entitystores"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/recovery"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/snapshot"
)

// faultyJournal fails chosen Write calls: before the store call (nothing
// stored) or after it (stored, but reported as a failure: outcome unknown).
// onWrite, when set, runs first in every Write with the call's number, and
// may block. It counts concurrent HighestSequenceNr calls, which gate can
// hold.
type faultyJournal struct {
	journal.Journal
	mu        sync.Mutex
	calls     int
	failAt    map[int]string // call number → "before" or "after"
	onWrite   func(call int)
	gate      chan struct{}
	recovers  atomic.Int32
	maxRecovs atomic.Int32
}

var errInjected = errors.New("injected store failure")

func (f *faultyJournal) Write(ctx context.Context, ws []journal.AtomicWrite) ([]error, error) {
	f.mu.Lock()
	f.calls++
	n, mode, hook := f.calls, f.failAt[f.calls], f.onWrite
	f.mu.Unlock()
	if hook != nil {
		hook(n)
	}
	switch mode {
	case "before":
		return nil, errInjected
	case "after":
		if _, err := f.Journal.Write(ctx, ws); err != nil {
			return nil, err
		}
		return nil, errInjected
	case "reject":
		return []error{journal.Reject("injected rejection")}, nil
	}
	return f.Journal.Write(ctx, ws)
}

func (f *faultyJournal) HighestSequenceNr(ctx context.Context, pid string, from int64) (int64, error) {
	n := f.recovers.Add(1)
	defer f.recovers.Add(-1)
	for {
		m := f.maxRecovs.Load()
		if n <= m || f.maxRecovs.CompareAndSwap(m, n) {
			break
		}
	}
	if f.gate != nil {
		<-f.gate
	}
	return f.Journal.HighestSequenceNr(ctx, pid, from)
}

func replayPayloadManifests(t *testing.T, j journal.Journal, pid string) []journal.Repr {
	t.Helper()
	var out []journal.Repr
	for r, err := range j.Replay(t.Context(), pid, 1, math.MaxInt64, math.MaxInt64) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func TestEffects(t *testing.T) {
	ctx := t.Context()
	st := memoryStores(t)
	h := newHost(t, st, accountBehavior())

	t.Run("persist several events atomically", func(t *testing.T) {
		got, err := entity.Ask(ctx, h, "many", func(r entity.ReplyTo[int64]) Command { return DepositMany{Amounts: []int64{1, 2, 3}, Reply: r} })
		if err != nil || got != 6 {
			t.Fatalf("DepositMany = %d, %v; want 6", got, err)
		}
		evs := replayPayloadManifests(t, st.Journal, "Account|many")
		if len(evs) != 3 || evs[0].Ordering+2 != evs[2].Ordering {
			t.Errorf("stored %d events, want 3 in one atomic write", len(evs))
		}
	})
	t.Run("unhandled", func(t *testing.T) {
		if err := h.Send(ctx, "closed", Close{}); err != nil {
			t.Fatal(err)
		}
		if err := h.Send(ctx, "closed", Close{}); !errors.Is(err, entity.ErrUnhandled) {
			t.Errorf("second Close: %v, want ErrUnhandled", err)
		}
	})
	t.Run("no reply is an error for Ask", func(t *testing.T) {
		_, err := entity.Ask(ctx, h, "forget", func(entity.ReplyTo[int64]) Command { return Forget{} })
		if !errors.Is(err, entity.ErrNoReply) {
			t.Errorf("Ask of a command handled without reply: %v, want ErrNoReply", err)
		}
	})
	t.Run("stop, then the next command recovers", func(t *testing.T) {
		if _, err := deposit(ctx, h, "stopper", 5); err != nil {
			t.Fatal(err)
		}
		if err := h.Send(ctx, "stopper", Close{}); err != nil {
			t.Fatal(err)
		}
		// The next command recovers a new instance that saw Closed.
		if err := h.Send(ctx, "stopper", Close{}); !errors.Is(err, entity.ErrUnhandled) {
			t.Errorf("after stop, Close = %v; the recovered state must be closed", err)
		}
		mustBalance(t, h, "stopper", 5)
	})
}

func TestStashKeepsOrder(t *testing.T) {
	ctx := t.Context()
	st := memoryStores(t)
	h := newHost(t, st, accountBehavior())
	if err := h.Send(ctx, "o", Hold{}); err != nil {
		t.Fatal(err)
	}
	for _, a := range []int64{1, 2, 3} {
		if err := h.Tell("o", Deposit{Amount: a}); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Send(ctx, "o", Release{}); err != nil {
		t.Fatal(err)
	}
	mustBalance(t, h, "o", 6)
	var amounts []string
	for _, r := range replayPayloadManifests(t, st.Journal, "Account|o") {
		amounts = append(amounts, string(r.Payload))
	}
	want := []string{"{}", "{}", `{"Amount":1}`, `{"Amount":2}`, `{"Amount":3}`}
	if !slices.Equal(amounts, want) {
		t.Errorf("journal holds %v, want %v: Held, Released, then the stashed commands in arrival order", amounts, want)
	}
}

func TestStashOverflow(t *testing.T) {
	ctx := t.Context()
	h := newHost(t, memoryStores(t), accountBehavior(), func(c *entity.HostConfig) { c.StashCapacity = 2 })
	if err := h.Send(ctx, "s", Hold{}); err != nil {
		t.Fatal(err)
	}
	_ = h.Tell("s", Forget{})
	_ = h.Tell("s", Forget{})
	if err := h.Send(ctx, "s", Forget{}); !errors.Is(err, entity.ErrStashOverflow) {
		t.Errorf("third stashed command: %v, want ErrStashOverflow", err)
	}
}

func TestMailboxOverflow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memoryStores(t)
		release := make(chan struct{})
		st.Journal = &faultyJournal{Journal: st.Journal, onWrite: func(n int) {
			if n == 1 {
				<-release
			}
		}}
		h := newHost(t, st, accountBehavior(), func(c *entity.HostConfig) { c.MailboxCapacity = 2 })
		if err := h.Tell("m", Deposit{Amount: 1}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the entity is persisting; commands now wait in its mailbox
		for i := range 2 {
			if err := h.Tell("m", Deposit{Amount: 1}); err != nil {
				t.Fatalf("command %d within capacity: %v", i, err)
			}
		}
		if err := h.Tell("m", Deposit{Amount: 1}); !errors.Is(err, entity.ErrMailboxFull) {
			t.Errorf("command beyond capacity: %v, want ErrMailboxFull", err)
		}
		close(release)
		synctest.Wait()
		mustBalance(t, h, "m", 3)
	})
}

func TestRejectionKeepsEntityRunning(t *testing.T) {
	st := memoryStores(t)
	st.Journal = &faultyJournal{Journal: st.Journal, failAt: map[int]string{2: "reject"}}
	h := newHost(t, st, accountBehavior())
	ctx := t.Context()
	if _, err := deposit(ctx, h, "r", 5); err != nil {
		t.Fatal(err)
	}
	if _, err := deposit(ctx, h, "r", 7); !errors.Is(err, journal.ErrRejected) {
		t.Fatalf("rejected write: %v, want ErrRejected", err)
	}
	if got, err := deposit(ctx, h, "r", 1); err != nil || got != 6 {
		t.Errorf("after a rejection the entity goes on with its state: %d, %v, want 6", got, err)
	}
}

func TestPersistFailureStopsAndNextCommandRecovers(t *testing.T) {
	st := memoryStores(t)
	entered, release := make(chan struct{}), make(chan struct{})
	st.Journal = &faultyJournal{Journal: st.Journal, failAt: map[int]string{2: "before"}, onWrite: func(n int) {
		if n == 2 {
			close(entered)
			<-release
		}
	}}
	h := newHost(t, st, accountBehavior())
	ctx := t.Context()
	if _, err := deposit(ctx, h, "f", 5); err != nil {
		t.Fatal(err)
	}
	failed := make(chan error, 1)
	go func() { _, err := deposit(ctx, h, "f", 7); failed <- err }()
	<-entered
	waiting := make(chan error, 1)
	go func() { _, err := deposit(ctx, h, "f", 100); waiting <- err }()
	// The second deposit may reach the mailbox before or after the failure:
	// before, it fails with ErrStopped; after, a new instance handles it.
	close(release)
	if err := <-failed; !errors.Is(err, errInjected) || errors.Is(err, journal.ErrRejected) {
		t.Fatalf("failed write: %v, want the store's error, not a rejection", err)
	}
	if err := <-waiting; err != nil && !errors.Is(err, entity.ErrStopped) {
		t.Fatalf("command waiting behind a failure: %v, want success (after recovery) or ErrStopped", err)
	}
	got, err := balance(ctx, h, "f")
	if err != nil {
		t.Fatal(err)
	}
	if got != 5 && got != 105 {
		t.Errorf("balance after failure = %d, want 5 (or 105 if the waiting deposit ran after recovery); never the failed 7", got)
	}
}

func TestSequenceConflictStopsEntity(t *testing.T) {
	st := memoryStores(t)
	h := newHost(t, st, accountBehavior())
	ctx := t.Context()
	if _, err := deposit(ctx, h, "c", 5); err != nil {
		t.Fatal(err)
	}
	// Another process writes event 2 of the same id.
	other := journal.AtomicWrite{PersistenceID: "Account|c", Events: []journal.Repr{{PersistenceID: "Account|c", SequenceNr: 2, Payload: []byte(`{"Amount":1000}`), SerializerID: 33, Manifest: "test.Deposited"}}}
	if res, err := st.Journal.Write(ctx, []journal.AtomicWrite{other}); err != nil || res != nil {
		t.Fatal(res, err)
	}
	if _, err := deposit(ctx, h, "c", 7); !errors.Is(err, journal.ErrSequenceConflict) {
		t.Fatalf("write after another writer: %v, want ErrSequenceConflict", err)
	}
	mustBalance(t, h, "c", 1005) // recovered from the journal, with the other writer's event
}

// TestRestartWithBackoff: an entity whose write failed restarts after a
// backoff that doubles per consecutive failure. Meanwhile a caller (Ask,
// Send) is told at once, with a *RestartingError naming the cause and the
// time of the restart, instead of waiting out its own deadline; a command
// sent with Tell waits and is handled after the restart.
func TestRestartWithBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memoryStores(t)
		st.Journal = &faultyJournal{Journal: st.Journal, failAt: map[int]string{2: "before", 3: "before"}}
		h := newHost(t, st, accountBehavior(), func(c *entity.HostConfig) { c.Restart = &entity.Backoff{Min: time.Second, Max: 4 * time.Second} })
		ctx := t.Context()
		if _, err := deposit(ctx, h, "b", 5); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := deposit(ctx, h, "b", 7); !errors.Is(err, errInjected) {
			t.Fatalf("failed write: %v", err)
		}
		restarting := func(what string, call func() error, at time.Duration) {
			t.Helper()
			asked := time.Now()
			err := call()
			var re *entity.RestartingError
			switch {
			case !errors.As(err, &re) || !errors.Is(err, entity.ErrRestarting) || !errors.Is(err, errInjected):
				t.Errorf("%s during the backoff: %v; want a *RestartingError matching ErrRestarting and the cause", what, err)
			case re.PersistenceID != "Account|b" || !re.At.Equal(start.Add(at)):
				t.Errorf("%s during the backoff: %+v; want Account|b restarting at start+%v", what, re, at)
			case time.Since(asked) != 0:
				t.Errorf("%s during the backoff was answered after %v; want at once", what, time.Since(asked))
			}
		}
		restarting("Ask", func() error { _, err := deposit(ctx, h, "b", 9); return err }, time.Second)
		restarting("Send", func() error { return h.Send(ctx, "b", Forget{}) }, time.Second)
		// Handled after the restart: its write (the third) fails too, and
		// the next backoff is twice as long.
		if err := h.Tell("b", Deposit{Amount: 100}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		restarting("Ask after the second failure", func() error { _, err := balance(ctx, h, "b"); return err }, 3*time.Second)
		time.Sleep(2 * time.Second)
		got, err := deposit(ctx, h, "b", 1)
		if err != nil || got != 6 {
			t.Fatalf("after restarts: %d, %v, want 6", got, err)
		}
		if h.Live() != 1 {
			t.Errorf("live = %d, want 1: a restart keeps the instance", h.Live())
		}
	})
}

// snapshotStore wraps a snapshot store, failing Save when failSave is set.
type snapshotStore struct {
	snapshot.Store
	failSave atomic.Bool
}

func (s *snapshotStore) Save(ctx context.Context, snap snapshot.Snapshot) error {
	if s.failSave.Load() {
		return errInjected
	}
	return s.Store.Save(ctx, snap)
}

func TestSnapshotsAndRetention(t *testing.T) {
	st := memoryStores(t)
	b := accountBehavior()
	b.Snapshots = entity.SnapshotPolicy[Event, State]{Every: 2, KeepLast: 2, DeleteEvents: true}
	h := newHost(t, st, b)
	ctx := t.Context()
	for range 10 {
		if _, err := deposit(ctx, h, "s", 1); err != nil {
			t.Fatal(err)
		}
	}
	// A snapshot is taken after the reply; shutting down waits for it.
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		max  int64
		want int64
	}{{10, 10}, {9, 8}, {7, 0}} {
		snap, ok, err := st.Snapshots.Load(ctx, "Account|s", snapshot.Criteria{MaxSequenceNr: c.max})
		if err != nil {
			t.Fatal(err)
		}
		if got := map[bool]int64{true: snap.Metadata.SequenceNr}[ok]; got != c.want {
			t.Errorf("snapshot at or below %d: %d, want %d (every 2, keep the last 2)", c.max, got, c.want)
		}
	}
	evs := replayPayloadManifests(t, st.Journal, "Account|s")
	if len(evs) != 4 || evs[0].SequenceNr != 7 {
		t.Errorf("journal holds %d events from %d, want 7..10: events below the oldest kept snapshot are deleted", len(evs), evs[0].SequenceNr)
	}
	mustBalance(t, newHost(t, st, b), "s", 10)
}

func TestSnapshotFailureDoesNotStopEntity(t *testing.T) {
	st := memoryStores(t)
	ss := &snapshotStore{Store: st.Snapshots}
	ss.failSave.Store(true)
	st.Snapshots = ss
	b := accountBehavior()
	b.Snapshots.Every = 1
	h := newHost(t, st, b)
	for i := range 3 {
		if _, err := deposit(t.Context(), h, "sf", 1); err != nil {
			t.Fatalf("deposit %d with failing snapshots: %v", i, err)
		}
	}
	mustBalance(t, h, "sf", 3)
}

func TestOptionalSnapshot(t *testing.T) {
	for name, mk := range entitystores.All() {
		for _, optional := range []bool{true, false} {
			t.Run(fmt.Sprint(name, "/optional=", optional), func(t *testing.T) {
				testOptionalSnapshot(t, mk(t), optional)
			})
		}
	}
}

func testOptionalSnapshot(t *testing.T, st stores, optional bool) {
	{
		{
			b := accountBehavior()
			b.Snapshots.Optional = optional
			ctx := t.Context()
			h := newHost(t, st, b)
			for range 3 {
				if _, err := deposit(ctx, h, "o", 2); err != nil {
					t.Fatal(err)
				}
			}
			_ = h.Shutdown(ctx)
			corrupt := snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: "Account|o", SequenceNr: 2}, Payload: []byte("not json"), SerializerID: 33, Manifest: "test.State"}
			if err := st.Snapshots.Save(ctx, corrupt); err != nil {
				t.Fatal(err)
			}
			got, err := balance(ctx, newHost(t, st, b), "o")
			if optional && (err != nil || got != 6) {
				t.Errorf("optional snapshot that cannot be decoded: %d, %v; want 6 from all events", got, err)
			}
			if !optional && !errors.Is(err, entity.ErrRecovery) {
				t.Errorf("required snapshot that cannot be decoded: %v, want ErrRecovery", err)
			}
		}
	}
}

// TestOptionalSnapshotFallsBackToOlder: with Snapshots.Optional, a
// snapshot that cannot be decoded is passed over for the next older one
// (at most three tried, as Akka's local snapshot store does), and only
// when none is usable are all events replayed. Six deposits of 1 with a
// snapshot every 2 (at 2, 4 and 6); with DeleteEvents, KeepLast 2 deletes
// snapshot 2 and events 1–2 after snapshot 6.
func TestOptionalSnapshotFallsBackToOlder(t *testing.T) {
	for name, mk := range entitystores.All() {
		for _, c := range []struct {
			name         string
			deleteEvents bool
			corrupt      []int64 // snapshots replaced by undecodable ones
			wantErr      bool    // ErrRecovery: no usable snapshot covers the deleted events
		}{
			{"youngest undecodable, events deleted", true, []int64{6}, false},
			{"two undecodable, events deleted", true, []int64{6, 4}, true},
			{"youngest undecodable, events kept", false, []int64{6}, false},
			{"all three undecodable, events kept", false, []int64{6, 4, 2}, false},
		} {
			t.Run(name+"/"+c.name, func(t *testing.T) {
				st := mk(t)
				b := accountBehavior()
				b.Snapshots = entity.SnapshotPolicy[Event, State]{Every: 2, Optional: true}
				if c.deleteEvents {
					b.Snapshots.KeepLast, b.Snapshots.DeleteEvents = 2, true
				}
				ctx := t.Context()
				id := fmt.Sprintf("older-%d", time.Now().UnixNano())
				h := newHost(t, st, b)
				for range 6 {
					if _, err := deposit(ctx, h, id, 1); err != nil {
						t.Fatal(err)
					}
				}
				if err := h.Shutdown(ctx); err != nil {
					t.Fatal(err)
				}
				for _, seq := range c.corrupt {
					bad := snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: "Account|" + id, SequenceNr: seq}, Payload: []byte("not json"), SerializerID: 33, Manifest: "test.State"}
					if err := st.Snapshots.Save(ctx, bad); err != nil {
						t.Fatal(err)
					}
				}
				got, err := balance(ctx, newHost(t, st, b), id)
				switch {
				case c.wantErr && !errors.Is(err, entity.ErrRecovery):
					t.Errorf("recovery: balance %d, %v; want ErrRecovery (events 1–2 deleted, no usable snapshot)", got, err)
				case !c.wantErr && (err != nil || got != 6):
					t.Errorf("recovery: balance %d, %v; want 6", got, err)
				}
			})
		}
	}
}

func TestRecoveryOptions(t *testing.T) {
	for name, mk := range entitystores.All() {
		t.Run(name, func(t *testing.T) { testRecoveryOptions(t, mk(t)) })
	}
}

func testRecoveryOptions(t *testing.T, st stores) {
	ctx := t.Context()
	h := newHost(t, st, accountBehavior())
	for _, a := range []int64{1, 2, 4} {
		if _, err := deposit(ctx, h, "r", a); err != nil {
			t.Fatal(err)
		}
	}
	_ = h.Shutdown(ctx)

	t.Run("bounded", func(t *testing.T) {
		b := accountBehavior()
		b.Recovery.ToSequenceNr = 2
		mustBalance(t, newHost(t, st, b), "r", 3)
	})
	t.Run("disabled, writes continue after the highest number", func(t *testing.T) {
		b := accountBehavior()
		b.Recovery.Disabled = true
		h := newHost(t, st, b)
		if got, err := deposit(ctx, h, "r", 10); err != nil || got != 10 {
			t.Fatalf("deposit without recovery: %d, %v; want 10 from the empty state", got, err)
		}
		evs := replayPayloadManifests(t, st.Journal, "Account|r")
		if n := len(evs); n != 4 || evs[3].SequenceNr != 4 {
			t.Errorf("journal holds %d events, want the new one at 4", n)
		}
	})
	t.Run("recovered hook", func(t *testing.T) {
		b := accountBehavior()
		var calls []string
		var mu sync.Mutex
		b.OnRecovered = func(_ string, s State, seq int64) {
			mu.Lock()
			calls = append(calls, fmt.Sprintf("%d@%d", s.Balance, seq))
			mu.Unlock()
		}
		h := newHost(t, st, b)
		mustBalance(t, h, "r", 17)
		mustBalance(t, h, "r", 17)
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(calls, []string{"17@4"}) {
			t.Errorf("OnRecovered calls = %v, want one with the recovered state and number", calls)
		}
	})
}

func TestConcurrentRecoveriesAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memoryStores(t)
		fj := &faultyJournal{Journal: st.Journal, gate: make(chan struct{})}
		st.Journal = fj
		h := newHost(t, st, accountBehavior(), func(c *entity.HostConfig) { c.MaxConcurrentRecoveries = 2 })
		for i := range 5 {
			if err := h.Tell(fmt.Sprint("id-", i), Forget{}); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		if n := fj.recovers.Load(); n != 2 {
			t.Errorf("%d recoveries in progress, want 2 (the limit)", n)
		}
		close(fj.gate)
		synctest.Wait()
		if m := fj.maxRecovs.Load(); m != 2 {
			t.Errorf("at most %d recoveries ran at once, want 2", m)
		}
	})
}

func TestPassivation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memoryStores(t)
		h := newHost(t, st, accountBehavior(), func(c *entity.HostConfig) { c.IdleTimeout = time.Minute })
		ctx := t.Context()
		if _, err := deposit(ctx, h, "p", 3); err != nil {
			t.Fatal(err)
		}
		time.Sleep(59 * time.Second)
		synctest.Wait()
		if h.Live() != 1 {
			t.Fatalf("live = %d before the idle timeout, want 1", h.Live())
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if h.Live() != 0 {
			t.Fatalf("live = %d after the idle timeout, want 0", h.Live())
		}
		mustBalance(t, h, "p", 3)
	})
}

func TestMaxLivePassivatesLeastRecentlyUsed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memoryStores(t)
		var recovered []string
		b := accountBehavior()
		var mu sync.Mutex
		b.OnRecovered = func(_ string, s State, seq int64) {
			mu.Lock()
			recovered = append(recovered, fmt.Sprint(s.Balance))
			mu.Unlock()
		}
		h := newHost(t, st, b, func(c *entity.HostConfig) { c.MaxLive = 2 })
		ctx := t.Context()
		for i, id := range []string{"a", "b", "a", "c"} {
			if _, err := deposit(ctx, h, id, int64(i+1)); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
		}
		if h.Live() != 2 {
			t.Fatalf("live = %d, want 2 (MaxLive)", h.Live())
		}
		// b was least recently used when c came: asking it again recovers
		// it (balance 2), and evicts a, now the least recently used.
		mustBalance(t, h, "b", 2)
		synctest.Wait()
		mustBalance(t, h, "a", 4)
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(recovered, []string{"0", "0", "0", "2", "4"}) {
			t.Errorf("recoveries saw balances %v, want a, b, c fresh, then b, then a again: the least recently used passivates", recovered)
		}
	})
}

func TestGracefulShutdownFinishesInFlightPersist(t *testing.T) {
	st := memoryStores(t)
	entered, release := make(chan struct{}), make(chan struct{})
	st.Journal = &faultyJournal{Journal: st.Journal, onWrite: func(n int) {
		if n == 1 {
			close(entered)
			<-release
		}
	}}
	h := newHost(t, st, accountBehavior())
	ctx := t.Context()
	result := make(chan error, 1)
	go func() { _, err := deposit(ctx, h, "g", 5); result <- err }()
	<-entered
	shut := make(chan error, 1)
	go func() { shut <- h.Shutdown(ctx) }()
	close(release)
	if err := <-result; err != nil {
		t.Errorf("in-flight persist during shutdown: %v, want success", err)
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	if _, err := deposit(ctx, h, "g", 1); !errors.Is(err, entity.ErrHostClosed) {
		t.Errorf("command after shutdown: %v, want ErrHostClosed", err)
	}
	if evs := replayPayloadManifests(t, st.Journal, "Account|g"); len(evs) != 1 {
		t.Errorf("journal holds %d events, want the one persisted during shutdown", len(evs))
	}
}

func TestOneInstancePerID(t *testing.T) {
	st := sqliteStores(t)
	h := newHost(t, st, accountBehavior())
	ctx := t.Context()
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			for range 10 {
				if _, err := deposit(ctx, h, "shared", 1); err != nil {
					t.Errorf("concurrent deposit: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	evs := replayPayloadManifests(t, st.Journal, "Account|shared")
	for i, e := range evs {
		if e.SequenceNr != int64(i+1) {
			t.Fatalf("event %d has sequence number %d: one writer per id keeps numbers contiguous", i, e.SequenceNr)
		}
	}
	if len(evs) != 500 {
		t.Errorf("stored %d events, want 500", len(evs))
	}
	mustBalance(t, h, "shared", 500)
}

func TestSideEffectsRunOnceInOrderAfterStore(t *testing.T) {
	st := memoryStores(t)
	var log []string
	var mu sync.Mutex
	note := func(s string) { mu.Lock(); log = append(log, s); mu.Unlock() }
	b := accountBehavior()
	inner := b.Command
	b.Command = func(s State, c Command) entity.ReplyEffect[Event, State] {
		if d, ok := c.(Deposit); ok {
			return fx.Persist(Deposited{d.Amount}).
				Then(func(s State) { note(fmt.Sprint("first:", s.Balance)) }).
				Then(func(s State) { note(fmt.Sprint("second:", s.Balance)) }).
				ThenReply(func(s State) { d.Reply.Send(s.Balance) })
		}
		return inner(s, c)
	}
	h := newHost(t, st, b)
	ctx := t.Context()
	for range 2 {
		if _, err := deposit(ctx, h, "se", 5); err != nil {
			t.Fatal(err)
		}
	}
	_ = h.Shutdown(ctx)
	mustBalance(t, newHost(t, st, b), "se", 10) // recovery runs no side effect
	mu.Lock()
	defer mu.Unlock()
	want := []string{"first:5", "second:5", "first:10", "second:10"}
	if !slices.Equal(log, want) {
		t.Errorf("side effects ran %v, want %v: once each, in order, with the new state, never in recovery", log, want)
	}
}

func TestPanicInHandlerFailsCommandAndRecovers(t *testing.T) {
	h := newHost(t, memoryStores(t), accountBehavior())
	ctx := t.Context()
	if _, err := deposit(ctx, h, "x", 4); err != nil {
		t.Fatal(err)
	}
	if err := h.Send(ctx, "x", Panic{}); err == nil {
		t.Fatal("a panicking handler must fail its command")
	}
	mustBalance(t, h, "x", 4)
}

// TestCrashesNeverLoseAcknowledgedEvents injects store failures before and
// after the write reaches the store, and checks after every command that
// the entity's state is exactly the fold of the journal: no acknowledged
// event lost, no event applied that the journal does not hold.
func TestCrashesNeverLoseAcknowledgedEvents(t *testing.T) {
	st := memoryStores(t)
	raw := st.Journal
	failAt := map[int]string{}
	for call := 3; call <= 200; call += 7 {
		failAt[call] = "before"
		failAt[call+3] = "after"
	}
	st.Journal = &faultyJournal{Journal: raw, failAt: failAt}
	h := newHost(t, st, accountBehavior())
	ctx := t.Context()
	acked := map[int64]bool{}
	var failures int
	for i := int64(1); i <= 150; i++ {
		amount := i * 1000 // unique amounts identify events
		if _, err := deposit(ctx, h, "crash", amount); err != nil {
			if !errors.Is(err, errInjected) {
				t.Fatalf("deposit %d: %v", i, err)
			}
			failures++
		} else {
			acked[amount] = true
		}
		var fold int64
		stored := map[int64]bool{}
		for _, r := range replayPayloadManifests(t, raw, "Account|crash") {
			var a int64
			if _, err := fmt.Sscanf(string(r.Payload), `{"Amount":%d}`, &a); err != nil {
				t.Fatal(err)
			}
			fold += a
			stored[a] = true
		}
		for a := range acked {
			if !stored[a] {
				t.Fatalf("acknowledged deposit %d is not in the journal", a)
			}
		}
		mustBalance(t, h, "crash", fold)
	}
	if failures < 30 {
		t.Errorf("only %d injected failures hit; the test must exercise them", failures)
	}
}

func TestThousandConcurrentEntities(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	st := sqliteStores(t)
	h := newHost(t, st, accountBehavior())
	ctx := t.Context()
	var wg sync.WaitGroup
	for i := range 1000 {
		wg.Go(func() {
			id := fmt.Sprint("acct-", i)
			for k := range 3 {
				if _, err := deposit(ctx, h, id, int64(i+k)); err != nil {
					t.Errorf("%s: %v", id, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if h.Live() != 1000 {
		t.Errorf("live = %d, want 1000", h.Live())
	}
	_ = h.Shutdown(ctx)
	h2 := newHost(t, st, accountBehavior())
	for i := range 1000 {
		wg.Go(func() {
			id := fmt.Sprint("acct-", i)
			if got, err := balance(ctx, h2, id); err != nil || got != int64(3*i+3) {
				t.Errorf("%s recovered %d, %v; want %d", id, got, err, 3*i+3)
			}
		})
	}
	wg.Wait()
}

func TestTaggerStoresTags(t *testing.T) {
	st := memoryStores(t)
	b := accountBehavior()
	b.Tagger = func(e Event) []string {
		if d, ok := e.(Deposited); ok && d.Amount >= 100 {
			return []string{"large", "deposit"}
		}
		return nil
	}
	h := newHost(t, st, b)
	for _, a := range []int64{5, 500} {
		if _, err := deposit(t.Context(), h, "t", a); err != nil {
			t.Fatal(err)
		}
	}
	evs := replayPayloadManifests(t, st.Journal, "Account|t")
	if len(evs) != 2 || len(evs[0].Tags) != 0 || !slices.Equal(evs[1].Tags, []string{"large", "deposit"}) {
		t.Errorf("stored tags %v, %v; want none, then [large deposit]", evs[0].Tags, evs[1].Tags)
	}
}

// TestTagsForTagsByEntity: TagsFor's tags, which depend on the entity,
// are stored after Tagger's.
func TestTagsForTagsByEntity(t *testing.T) {
	st := memoryStores(t)
	b := accountBehavior()
	b.Tagger = func(Event) []string { return []string{"account"} }
	b.TagsFor = func(pid string, _ Event) []string {
		return []string{"owner-" + strings.TrimPrefix(pid, "Account|"), "account"} // "account" again: stored once
	}
	h := newHost(t, st, b)
	for _, id := range []string{"ann", "bob"} {
		if _, err := deposit(t.Context(), h, id, 5); err != nil {
			t.Fatal(err)
		}
		evs := replayPayloadManifests(t, st.Journal, "Account|"+id)
		if len(evs) != 1 {
			t.Fatalf("%s: stored %d events, want one", id, len(evs))
		}
		if want := []string{"account", "owner-" + id}; !slices.Equal(evs[0].Tags, want) {
			t.Errorf("%s: stored tags %v, want %v", id, evs[0].Tags, want)
		}
	}
}

func TestShutdownFailsWaitingCommands(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memoryStores(t)
		release := make(chan struct{})
		st.Journal = &faultyJournal{Journal: st.Journal, onWrite: func(n int) {
			if n == 1 {
				<-release
			}
		}}
		h := newHost(t, st, accountBehavior())
		results := make(chan error, 21)
		ask := func() { _, err := deposit(context.Background(), h, "w", 1); results <- err }
		go ask()
		synctest.Wait() // the first deposit is persisting
		for range 20 {
			go ask()
		}
		synctest.Wait() // 20 wait in the mailbox
		shut := make(chan error, 1)
		go func() { shut <- h.Shutdown(context.Background()) }()
		synctest.Wait()
		close(release)
		if err := <-shut; err != nil {
			t.Fatal(err)
		}
		ok := 0
		for range 21 {
			if err := <-results; err == nil {
				ok++
			} else if !errors.Is(err, entity.ErrHostClosed) {
				t.Errorf("waiting command: %v, want ErrHostClosed", err)
			}
		}
		if ok != 1 {
			t.Errorf("%d commands succeeded, want 1: only the one in flight finishes after Shutdown", ok)
		}
	})
}

func TestShutdownWhileWaitingForRecoverySlotAfterEviction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memoryStores(t)
		fj := &faultyJournal{Journal: st.Journal, gate: make(chan struct{})}
		st.Journal = fj
		h := newHost(t, st, accountBehavior(), func(c *entity.HostConfig) { c.MaxConcurrentRecoveries = 1; c.MaxLive = 2 })
		_ = h.Tell("b", Forget{}) // holds the only recovery slot
		synctest.Wait()
		_ = h.Tell("a", Forget{}) // waits for the slot
		synctest.Wait()
		_ = h.Tell("b", Forget{})
		_ = h.Tell("c", Forget{}) // evicts a, the least recently used, while it waits
		synctest.Wait()
		done := make(chan error, 1)
		go func() { done <- h.Shutdown(context.Background()) }()
		synctest.Wait()
		close(fj.gate)
		if err := <-done; err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	})
}

func TestMaxLiveHoldsAfterRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memoryStores(t)
		st.Journal = &faultyJournal{Journal: st.Journal, failAt: map[int]string{1: "before"}}
		h := newHost(t, st, accountBehavior(), func(c *entity.HostConfig) {
			c.MaxLive = 1
			c.Restart = &entity.Backoff{Min: time.Minute, Max: time.Minute}
		})
		ctx := context.Background()
		if _, err := deposit(ctx, h, "a", 1); !errors.Is(err, errInjected) {
			t.Fatalf("first write: %v", err)
		}
		synctest.Wait() // a waits out its backoff
		for _, id := range []string{"b", "c", "d"} {
			if _, err := deposit(ctx, h, id, 1); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if n := h.Live(); n != 1 {
			t.Errorf("live = %d after a restart, want 1 (MaxLive)", n)
		}
	})
}

func TestOptionalSnapshotDoesNotHideDeletedEvents(t *testing.T) {
	for name, mk := range entitystores.All() {
		t.Run(name, func(t *testing.T) { testOptionalSnapshotDoesNotHideDeletedEvents(t, mk(t)) })
	}
}

func testOptionalSnapshotDoesNotHideDeletedEvents(t *testing.T, st stores) {
	b := accountBehavior()
	b.Snapshots = entity.SnapshotPolicy[Event, State]{Every: 2, KeepLast: 1, DeleteEvents: true, Optional: true}
	h := newHost(t, st, b)
	ctx := t.Context()
	for range 4 {
		if _, err := deposit(ctx, h, "od", 1); err != nil {
			t.Fatal(err)
		}
	}
	_ = h.Shutdown(ctx)
	corrupt := snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: "Account|od", SequenceNr: 4}, Payload: []byte("garbage"), SerializerID: 33, Manifest: "test.State"}
	if err := st.Snapshots.Save(ctx, corrupt); err != nil {
		t.Fatal(err)
	}
	if _, err := balance(ctx, newHost(t, st, b), "od"); !errors.Is(err, entity.ErrRecovery) {
		t.Errorf("recovery with an unusable snapshot and deleted events: %v, want ErrRecovery, not a wrong state", err)
	}
}

func TestStopAndUnstashAllWithoutEvents(t *testing.T) {
	st := memoryStores(t)
	b := accountBehavior()
	inner := b.Command
	b.Command = func(s State, c Command) entity.ReplyEffect[Event, State] {
		switch c.(type) {
		case Close: // stop without persisting
			return fx.Stop().ThenNoReply()
		case Release: // unstash without persisting: the entity stays held
			return fx.UnstashAll().ThenNoReply()
		}
		return inner(s, c)
	}
	h := newHost(t, st, b)
	ctx := t.Context()
	if _, err := deposit(ctx, h, "s", 2); err != nil {
		t.Fatal(err)
	}
	if err := h.Send(ctx, "s", Close{}); err != nil {
		t.Fatal(err)
	}
	mustBalance(t, h, "s", 2) // a new instance recovered it
	if n := len(replayPayloadManifests(t, st.Journal, "Account|s")); n != 1 {
		t.Errorf("Stop persisted %d events, want none beyond the deposit", n)
	}
	// UnstashAll re-handles stashed commands with the current state: still
	// held, they are stashed again, and nothing is lost.
	if err := h.Send(ctx, "u", Hold{}); err != nil {
		t.Fatal(err)
	}
	_ = h.Tell("u", Deposit{Amount: 1})
	if err := h.Send(ctx, "u", Release{}); err != nil {
		t.Fatal(err)
	}
	if n := len(replayPayloadManifests(t, st.Journal, "Account|u")); n != 1 {
		t.Errorf("journal holds %d events, want only Held: the stashed deposit waits again", n)
	}
}

func TestIdleEntitiesHoldNoGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHost(t, memoryStores(t), accountBehavior())
		ctx := t.Context()
		before := runtime.NumGoroutine()
		for i := range 200 {
			if _, err := balance(ctx, h, fmt.Sprint("i-", i)); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		if n := runtime.NumGoroutine() - before; n >= 10 {
			t.Errorf("%d more goroutines with 200 idle entities, want none per entity", n)
		}
		if n := h.Live(); n != 200 {
			t.Errorf("live = %d, want 200: idle entities stay live", n)
		}
		mustBalance(t, h, "i-7", 0) // an idle entity takes commands again
	})
}

func TestShutdownFailsCommandsStashedByIdleEntities(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHost(t, memoryStores(t), accountBehavior())
		ctx := t.Context()
		if err := h.Send(ctx, "held", Hold{}); err != nil {
			t.Fatal(err)
		}
		stashed := make(chan error, 1)
		go func() { stashed <- h.Send(context.Background(), "held", Forget{}) }()
		synctest.Wait() // stashed, and the entity is idle
		if err := h.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-stashed; !errors.Is(err, entity.ErrHostClosed) {
			t.Errorf("command stashed by an idle entity at shutdown: %v, want ErrHostClosed", err)
		}
		if n := h.Live(); n != 0 {
			t.Errorf("live = %d after Shutdown, want 0", n)
		}
	})
}

// TestMaxLiveHoldsWithConcurrentClients has many clients send commands to
// distinct ids at once, and checks, in every recovery and every command
// handler, that no more than MaxLive entities are live; and that no
// command is lost on the way.
func TestMaxLiveHoldsWithConcurrentClients(t *testing.T) {
	const maxLive, clients, deposits = 16, 256, 3
	st := memoryStores(t)
	var h *entity.Host[Command, Event, State]
	var most atomic.Int64
	sample := func() {
		n := int64(h.Live())
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
	}
	b := accountBehavior()
	inner := b.Command
	b.Command = func(s State, c Command) entity.ReplyEffect[Event, State] {
		sample()
		return inner(s, c)
	}
	b.OnRecovered = func(string, State, int64) { sample() }
	h = newHost(t, st, b, func(c *entity.HostConfig) { c.MaxLive = maxLive })
	ctx := t.Context()
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			id := fmt.Sprint("c-", i)
			for k := range deposits {
				if _, err := deposit(ctx, h, id, 1); err != nil {
					t.Errorf("deposit %d to %s: %v", k, id, err)
					return
				}
			}
			if got, err := balance(ctx, h, id); err != nil || got != deposits {
				t.Errorf("balance of %s = %d, %v; want %d", id, got, err, deposits)
			}
		})
	}
	wg.Wait()
	if m := most.Load(); m > maxLive {
		t.Errorf("%d entities were live at once, want at most MaxLive = %d", m, maxLive)
	}
	if n := h.Live(); n > maxLive {
		t.Errorf("live = %d at the end, want at most %d", n, maxLive)
	}
}

// countingReader counts the recovery calls a host makes to the journal
// behind it, which reads recoveries in one call.
type countingReader struct {
	journal.Journal
	reader                   recovery.Reader
	reads, highests, replays atomic.Int64
}

func (c *countingReader) ReadsSnapshotsOf(s snapshot.Store) bool { return c.reader.ReadsSnapshotsOf(s) }
func (c *countingReader) ReadRecovery(ctx context.Context, req recovery.Request) (recovery.Result, error) {
	c.reads.Add(1)
	return c.reader.ReadRecovery(ctx, req)
}
func (c *countingReader) HighestSequenceNr(ctx context.Context, pid string, from int64) (int64, error) {
	c.highests.Add(1)
	return c.Journal.HighestSequenceNr(ctx, pid, from)
}
func (c *countingReader) Replay(ctx context.Context, pid string, from, to, max int64) iter.Seq2[journal.Repr, error] {
	c.replays.Add(1)
	return c.Journal.Replay(ctx, pid, from, to, max)
}

// TestRecoveryInOneRead: on a journal that reads recoveries (SQLite and
// PostgreSQL behind a front), an entity recovers with one read when its
// events after the snapshot fit in one (and a replay of the rest when they
// do not); with a snapshot store the journal does not read, the host falls
// back to its three calls.
func TestRecoveryInOneRead(t *testing.T) {
	for _, name := range []string{"sqlite", "postgres"} {
		t.Run(name, func(t *testing.T) {
			st := entitystores.All()[name](t)
			ctx := t.Context()
			b := accountBehavior()
			b.Snapshots = entity.SnapshotPolicy[Event, State]{Every: 5}
			h := newHost(t, st, b)
			const many = recovery.DefaultMaxEvents + 7
			for _, c := range []struct {
				id     string
				events int
			}{{"small", 12}, {"large", many}} {
				var ws []journal.AtomicWrite
				if c.id == "large" { // written raw: no snapshots
					payload, ser, manifest, _ := registry(t).Serialize(Deposited{Amount: 1})
					w := journal.AtomicWrite{PersistenceID: "Account|large"}
					for s := range c.events {
						w.Events = append(w.Events, journal.Repr{PersistenceID: w.PersistenceID, SequenceNr: int64(s + 1), Payload: payload, SerializerID: ser, Manifest: manifest})
					}
					ws = append(ws, w)
					if res, err := st.Journal.Write(ctx, ws); err != nil || res != nil {
						t.Fatal(res, err)
					}
					continue
				}
				for range c.events {
					if _, err := deposit(ctx, h, c.id, 1); err != nil {
						t.Fatal(err)
					}
				}
			}
			_ = h.Shutdown(ctx)
			for _, c := range []struct {
				name                     string
				snaps                    snapshot.Store
				id                       string
				balance                  int64
				reads, highests, replays int64
			}{
				{"small entity", st.Snapshots, "small", 12, 1, 0, 0},
				{"more events than one read", st.Snapshots, "large", many, 1, 0, 1},
				{"no snapshot store", nil, "small", 12, 1, 0, 0},
				{"foreign snapshot store", entitytest.Memory(t).Snapshots, "small", 12, 0, 1, 1},
			} {
				t.Run(c.name, func(t *testing.T) {
					cr := &countingReader{Journal: st.Journal, reader: st.Journal.(recovery.Reader)}
					h := newHost(t, stores{Journal: cr, Snapshots: c.snaps}, b)
					mustBalance(t, h, c.id, c.balance)
					if r, hi, rp := cr.reads.Load(), cr.highests.Load(), cr.replays.Load(); r != c.reads || hi != c.highests || rp != c.replays {
						t.Errorf("recovery made %d reads, %d highest-number calls, %d replays; want %d, %d, %d", r, hi, rp, c.reads, c.highests, c.replays)
					}
				})
			}
		})
	}
}

// TestNewHostRefusesBadBehaviors: a behavior that cannot work is refused
// when the host is made, naming the problem: an entity type whose ids
// would read as another type's is one.
func TestNewHostRefusesBadBehaviors(t *testing.T) {
	st := memoryStores(t)
	for _, c := range []struct {
		name   string
		change func(*entity.Behavior[Command, Event, State])
		want   string
	}{
		{"separator in the type", func(b *entity.Behavior[Command, Event, State]) { b.EntityType = "Bank|Account" }, `would read as type "Bank"`},
		{"empty type", func(b *entity.Behavior[Command, Event, State]) { b.EntityType = "" }, "empty"},
		{"no command handler", func(b *entity.Behavior[Command, Event, State]) { b.Command = nil }, "no Command handler"},
		{"KeepLast without Every", func(b *entity.Behavior[Command, Event, State]) {
			b.Snapshots = entity.SnapshotPolicy[Event, State]{KeepLast: 2}
		}, "KeepLast needs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := accountBehavior()
			c.change(&b)
			_, err := entity.NewHost(b, entity.HostConfig{Journal: st.Journal, Registry: registry(t)})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("NewHost: %v, want an error naming %q", err, c.want)
			}
		})
	}
}

// TestNewHostRefusesSnapshotsItCannotSerialize: snapshots of a state the
// registry cannot serialize would all fail, so the host is refused, naming
// the fix; without snapshots the same registry is fine.
func TestNewHostRefusesSnapshotsItCannotSerialize(t *testing.T) {
	st := memoryStores(t)
	events := serialization.NewRegistry()
	for _, err := range []error{serialization.RegisterJSON[Deposited](events, "test.Deposited"), serialization.RegisterJSON[Withdrawn](events, "test.Withdrawn")} {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, every := range []int64{0, 10} {
		b := accountBehavior()
		b.Snapshots.Every = every
		_, err := entity.NewHost(b, entity.HostConfig{Journal: st.Journal, Snapshots: st.Snapshots, Registry: events})
		if every == 0 && err != nil {
			t.Errorf("NewHost without snapshots, state not registered: %v", err)
		}
		if every > 0 && (!errors.Is(err, serialization.ErrNotSerializable) || !strings.Contains(err.Error(), "register the state type")) {
			t.Errorf("NewHost with snapshots of a state the registry cannot serialize: %v, want ErrNotSerializable and the fix", err)
		}
	}
}

// TestSliceRangesSplitEntities: two hosts on one store, each owning half
// the slices, serve only their own entities; a command for the other's is
// refused at once with a *NotOwnedError. Two hosts that do write one id
// (no ranges) meet a sequence conflict: the loser's caller gets
// ErrSequenceConflict, and its next command sees the winner's events.
func TestSliceRangesSplitEntities(t *testing.T) {
	st := memoryStores(t)
	halves, err := annals.SliceRanges(2)
	if err != nil {
		t.Fatal(err)
	}
	hosts := make([]*entity.Host[Command, Event, State], 2)
	for i, r := range halves {
		hosts[i] = newHost(t, st, accountBehavior(), func(c *entity.HostConfig) { c.SliceRanges = []annals.SliceRange{r} })
	}
	ctx := t.Context()
	served := [2]int{}
	for n := range 40 {
		id := fmt.Sprintf("split-%d", n)
		owner := 0
		if !halves[0].Contains(annals.Slice(annals.PersistenceID("Account", id))) {
			owner = 1
		}
		if _, err := deposit(ctx, hosts[owner], id, 1); err != nil {
			t.Fatalf("owner of %s: %v", id, err)
		}
		served[owner]++
		_, err := deposit(ctx, hosts[1-owner], id, 1)
		var notOwned *entity.NotOwnedError
		if !errors.As(err, &notOwned) || !errors.Is(err, entity.ErrNotOwned) || notOwned.PersistenceID != "Account|"+id {
			t.Errorf("the other host, for %s: %v; want a *NotOwnedError naming it", id, err)
		}
	}
	if served[0] == 0 || served[1] == 0 || hosts[0].Live()+hosts[1].Live() != 40 {
		t.Errorf("served %v, live %d+%d; want both halves used and 40 live entities, none for refused commands", served, hosts[0].Live(), hosts[1].Live())
	}
	if _, err := entity.NewHost(accountBehavior(), entity.HostConfig{Journal: st.Journal, Registry: registry(t), SliceRanges: []annals.SliceRange{{Min: 0, Max: 1024}}}); err == nil {
		t.Error("NewHost accepted the slice range 0-1024")
	}

	// Without ranges, two hosts on one id: a conflict, not a loss.
	a, b := newHost(t, st, accountBehavior()), newHost(t, st, accountBehavior())
	mustBalance(t, a, "both", 0)
	mustBalance(t, b, "both", 0)
	if _, err := deposit(ctx, a, "both", 5); err != nil {
		t.Fatal(err)
	}
	if _, err := deposit(ctx, b, "both", 7); !errors.Is(err, journal.ErrSequenceConflict) {
		t.Fatalf("the second host's write of the same sequence number: %v, want ErrSequenceConflict", err)
	}
	mustBalance(t, b, "both", 5) // recovered with the first host's event
}

// TestHostPutsAFrontBeforeTheJournal: a host given a store's journal puts
// a journal front before it (its breaker opens after MaxFailures failed
// writes, tuned by HostConfig.Front) and closes that front at shutdown,
// not the journal; a front given is used as is, left open, and may not be
// tuned twice.
func TestHostPutsAFrontBeforeTheJournal(t *testing.T) {
	st := memoryStores(t)
	failing := &faultyJournal{Journal: st.Journal, failAt: map[int]string{1: "before", 2: "before", 3: "before"}}
	h := newHost(t, stores{Journal: failing, Snapshots: st.Snapshots}, accountBehavior(), func(c *entity.HostConfig) {
		c.Front = engine.Config{MaxFailures: 3, ResetTimeout: time.Hour}
	})
	ctx := t.Context()
	for i := range 4 { // recovered first: their reads would close the breaker
		mustBalance(t, h, fmt.Sprintf("f-%d", i), 0)
	}
	for i := range 3 {
		if _, err := deposit(ctx, h, fmt.Sprintf("f-%d", i), 1); !errors.Is(err, errInjected) {
			t.Fatalf("write %d: %v, want the store's failure", i+1, err)
		}
	}
	if _, err := deposit(ctx, h, "f-3", 1); !errors.Is(err, engine.ErrCircuitOpen) {
		t.Errorf("after 3 failures: %v, want ErrCircuitOpen from the host's front", err)
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Journal.HighestSequenceNr(ctx, "Account|f-0", 0); err != nil {
		t.Errorf("the journal after the host's shutdown: %v, want it open", err)
	}

	front, err := engine.NewFront(st.Journal, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer front.Close()
	if _, err := entity.NewHost(accountBehavior(), entity.HostConfig{Journal: front, Front: engine.Config{MaxCalls: 1}, Registry: registry(t)}); err == nil {
		t.Error("NewHost accepted HostConfig.Front with a front given as the journal")
	}
	shared := newHost(t, stores{Journal: front, Snapshots: st.Snapshots}, accountBehavior())
	if _, err := deposit(ctx, shared, "g", 2); err != nil {
		t.Fatal(err)
	}
	if err := shared.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := front.Persist(ctx, journal.AtomicWrite{PersistenceID: "Account|g", Events: []journal.Repr{{PersistenceID: "Account|g", SequenceNr: 2, Payload: []byte(`{"Amount":1}`), SerializerID: 33, Manifest: "test.Deposited"}}}); err != nil {
		t.Errorf("a front given to a host, after its shutdown: %v, want it open", err)
	}
}

// hookLog records every entity hook as a line.
type hookLog struct {
	mu    sync.Mutex
	lines []string
}

func (h *hookLog) add(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lines = append(h.lines, fmt.Sprintf(format, args...))
}

func (h *hookLog) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.lines
	h.lines = nil
	return out
}

func (h *hookLog) OnRecovered(r entity.Recovered) {
	h.add("recovered %s from snapshot %d, %d events, at %d in %v (%v)", r.PersistenceID, r.SnapshotSequenceNr, r.Events, r.SequenceNr, r.Duration, r.Err)
}
func (h *hookLog) OnPassivated(pid string)         { h.add("passivated %s", pid) }
func (h *hookLog) OnStopped(pid string, err error) { h.add("stopped %s (%v)", pid, err) }
func (h *hookLog) OnSnapshot(pid string, seq int64, err error) {
	h.add("snapshot %s at %d (%v)", pid, seq, err)
}
func (h *hookLog) OnRestartScheduled(pid string, err error, d time.Duration) {
	h.add("restart %s in %v (%v)", pid, d, err)
}
func (h *hookLog) OnOverflow(pid string, what entity.Overflow) { h.add("overflow %s %s", pid, what) }

// TestHostHooks: each entity hook fires with the right values (fake time).
func TestHostHooks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memoryStores(t)
		faulty := &faultyJournal{Journal: st.Journal, failAt: map[int]string{4: "before"}}
		log := &hookLog{}
		b := accountBehavior()
		b.Snapshots.Every = 2
		h := newHost(t, stores{Journal: faulty, Snapshots: st.Snapshots}, b, func(c *entity.HostConfig) {
			c.Hooks = []any{log}
			c.IdleTimeout = time.Minute
			c.StashCapacity = 1
			c.Restart = &entity.Backoff{Min: time.Second, Max: time.Second}
		})
		ctx := t.Context()
		step := func(what string, want []string, do func()) {
			t.Helper()
			do()
			synctest.Wait()
			if got := log.take(); !slices.Equal(got, want) {
				t.Errorf("%s: hooks said\n%q\nwant\n%q", what, got, want)
			}
		}
		step("two deposits", []string{
			"recovered Account|a from snapshot 0, 0 events, at 0 in 0s (<nil>)",
			"snapshot Account|a at 2 (<nil>)",
		}, func() {
			for range 2 {
				if _, err := deposit(ctx, h, "a", 1); err != nil {
					t.Fatal(err)
				}
			}
		})
		step("idle for a minute", []string{"passivated Account|a"}, func() { time.Sleep(time.Minute + time.Second) })
		step("back, one more deposit", []string{
			"recovered Account|a from snapshot 2, 0 events, at 2 in 0s (<nil>)",
		}, func() {
			if _, err := deposit(ctx, h, "a", 1); err != nil {
				t.Fatal(err)
			}
		})
		step("a failed write", []string{"restart Account|a in 1s (entity Account|a: persist events 4..4: outcome unknown: injected store failure)"}, func() {
			if _, err := deposit(ctx, h, "a", 1); !errors.Is(err, errInjected) {
				t.Fatal(err)
			}
		})
		step("the restart", []string{"recovered Account|a from snapshot 2, 1 events, at 3 in 0s (<nil>)"}, func() {
			time.Sleep(time.Second)
			mustBalance(t, h, "a", 3)
		})
		step("a full stash", []string{"snapshot Account|a at 4 (<nil>)", "overflow Account|a stash"}, func() {
			if err := h.Send(ctx, "a", Hold{}); err != nil {
				t.Fatal(err)
			}
			_ = h.Tell("a", Deposit{Amount: 1})
			if _, err := deposit(ctx, h, "a", 1); !errors.Is(err, entity.ErrStashOverflow) {
				t.Fatalf("second stashed command: %v, want ErrStashOverflow", err)
			}
		})
		step("a Stop effect", []string{
			"recovered Account|b from snapshot 0, 0 events, at 0 in 0s (<nil>)",
			"stopped Account|b (entity: stopped)",
		}, func() {
			if err := h.Send(ctx, "b", Close{}); err != nil {
				t.Fatal(err)
			}
		})
	})
}

// TestHostHooksMailboxOverflow: a command refused with ErrMailboxFull
// fires the overflow hook.
func TestHostHooksMailboxOverflow(t *testing.T) {
	st := memoryStores(t)
	gate := make(chan struct{})
	log := &hookLog{}
	h := newHost(t, stores{Journal: &faultyJournal{Journal: st.Journal, gate: gate}, Snapshots: st.Snapshots}, accountBehavior(), func(c *entity.HostConfig) {
		c.Hooks = []any{log}
		c.MailboxCapacity = 1
	})
	if err := h.Tell("m", Deposit{Amount: 1}); err != nil { // recovery waits at the gate
		t.Fatal(err)
	}
	if err := h.Tell("m", Deposit{Amount: 1}); !errors.Is(err, entity.ErrMailboxFull) {
		t.Fatalf("second command: %v, want ErrMailboxFull", err)
	}
	close(gate)
	if got := log.take(); !slices.Contains(got, "overflow Account|m mailbox") {
		t.Errorf("hooks said %q, want the mailbox overflow", got)
	}
}

// TestHandOffRange: an Assigned host serves only the ranges given to it.
// Handing a range off finishes the persist in flight and the commands
// already waiting, refuses new ones with a moving *NotOwnedError, and
// returns once the range's entities have passivated; the next owner
// recovers them with every acknowledged event. A write whose fence fails
// is not stored.
func TestHandOffRange(t *testing.T) {
	st := memoryStores(t)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	st.Journal = &faultyJournal{Journal: st.Journal, onWrite: func(n int) {
		if n == 2 {
			once.Do(func() { close(entered); <-release })
		}
	}}
	assigned := func(c *entity.HostConfig) { c.Assigned = true }
	a := newHost(t, st, accountBehavior(), assigned)
	ctx := t.Context()
	all := annals.SliceRange{Min: 0, Max: annals.NumberOfSlices - 1}
	var notOwned *entity.NotOwnedError
	if _, err := deposit(ctx, a, "h", 1); !errors.As(err, &notOwned) || notOwned.Moving {
		t.Fatalf("a command before any range is served: %v, want a *NotOwnedError", err)
	}
	if err := a.ServeRange(all, journal.Fence{}); err != nil {
		t.Fatal(err)
	}
	if err := a.ServeRange(annals.SliceRange{Min: 3, Max: 4}, journal.Fence{}); err == nil {
		t.Error("ServeRange accepted a range overlapping one served")
	}
	if _, err := deposit(ctx, a, "h", 1); err != nil {
		t.Fatal(err)
	}
	inFlight := make(chan error, 1)
	go func() { _, err := deposit(ctx, a, "h", 2); inFlight <- err }()
	<-entered // the second deposit's write is in flight
	waiting := make(chan error, 1)
	go func() { _, err := deposit(ctx, a, "h", 4); waiting <- err }()
	handedOff := make(chan error, 1)
	go func() { handedOff <- a.HandOffRange(ctx, all) }()
	// New commands are refused as soon as the hand-off has begun (Tell
	// is answered when the command is queued or refused; a Forget queued
	// before is handled without effect).
	for {
		err := a.Tell("h", Forget{})
		if errors.As(err, &notOwned) && notOwned.Moving {
			break
		}
		if err != nil {
			t.Fatalf("Tell during the hand-off: %v", err)
		}
		runtime.Gosched()
	}
	select {
	case err := <-handedOff:
		t.Fatalf("HandOffRange returned %v while a persist was in flight", err)
	default:
	}
	close(release)
	if err := <-inFlight; err != nil {
		t.Errorf("persist in flight during the hand-off: %v, want stored", err)
	}
	if err := <-handedOff; err != nil {
		t.Fatalf("HandOffRange: %v", err)
	}
	if a.Live() != 0 {
		t.Errorf("%d entities live after the hand-off, want 0", a.Live())
	}
	// The command waiting in the mailbox was either handled before the
	// passivation or refused as moving; never lost unanswered.
	want := int64(3)
	if err := <-waiting; err == nil {
		want = 7
	} else if !errors.As(err, &notOwned) || !notOwned.Moving {
		t.Errorf("waiting command: %v, want handled or refused as moving", err)
	}
	b := newHost(t, st, accountBehavior(), assigned)
	if err := b.ServeRange(all, journal.Fence{}); err != nil {
		t.Fatal(err)
	}
	mustBalance(t, b, "h", want)

	// A fenced-off write fails its command and stores nothing.
	lost := errors.New("lease lost")
	c := newHost(t, st, accountBehavior(), assigned)
	if err := c.ServeRange(all, journal.Fence{Open: func() error { return lost }}); err != nil {
		t.Fatal(err)
	}
	if _, err := deposit(ctx, c, "fenced", 5); !errors.Is(err, lost) || !errors.Is(err, engine.ErrFenced) {
		t.Errorf("a write whose fence fails: %v, want ErrFenced and the fence's error", err)
	}
	if evs := replayPayloadManifests(t, st.Journal, "Account|fenced"); len(evs) != 0 {
		t.Errorf("the fenced write stored %d events", len(evs))
	}
	if _, err := entity.NewHost(accountBehavior(), entity.HostConfig{Journal: st.Journal, Registry: registry(t), Assigned: true, SliceRanges: []annals.SliceRange{all}}); err == nil {
		t.Error("NewHost accepted Assigned with SliceRanges")
	}
}

// TestHandOffRangeTimeout: a hand-off whose entity is still writing when
// ctx ends returns ctx's error, and the range can be served again at
// once: commands for other ids are taken, the still-running entity keeps
// refusing new commands as moving and finishes its persist.
func TestHandOffRangeTimeout(t *testing.T) {
	st := memoryStores(t)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	st.Journal = &faultyJournal{Journal: st.Journal, onWrite: func(n int) {
		once.Do(func() { close(entered); <-release })
	}}
	h := newHost(t, st, accountBehavior(), func(c *entity.HostConfig) { c.Assigned = true })
	all := annals.SliceRange{Min: 0, Max: annals.NumberOfSlices - 1}
	if err := h.ServeRange(all, journal.Fence{}); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	slow := make(chan error, 1)
	go func() { _, err := deposit(ctx, h, "slow", 1); slow <- err }()
	<-entered
	expired, cancel := context.WithCancel(ctx)
	cancel()
	if err := h.HandOffRange(expired, all); !errors.Is(err, context.Canceled) {
		t.Fatalf("HandOffRange with a persist in flight and an ended ctx: %v, want context.Canceled", err)
	}
	if err := h.ServeRange(all, journal.Fence{}); err != nil {
		t.Fatalf("ServeRange after a timed-out hand-off: %v", err)
	}
	var notOwned *entity.NotOwnedError
	if err := h.Tell("slow", Forget{}); !errors.As(err, &notOwned) || !notOwned.Moving {
		t.Errorf("a command for the entity still handing off: %v, want a moving *NotOwnedError", err)
	}
	if err := h.Tell("other", Forget{}); err != nil {
		t.Errorf("a command for another id after serving again: %v", err)
	}
	close(release)
	if err := <-slow; err != nil {
		t.Errorf("the persist in flight: %v", err)
	}
	if _, err := deposit(ctx, h, "other", 2); err != nil {
		t.Errorf("a deposit for another id after serving again: %v", err)
	}
}

// TestServeUnit: an Assigned host serves the ids each unit owns, refuses
// the others, refuses a unit name served twice, and hands a unit off
// without touching the others; the fence of the unit an id belongs to
// guards its writes.
func TestServeUnit(t *testing.T) {
	st := memoryStores(t)
	h := newHost(t, st, accountBehavior(), func(c *entity.HostConfig) { c.Assigned = true })
	ctx := t.Context()
	lost := errors.New("unit lost")
	owns := func(ids ...string) func(string) bool {
		return func(pid string) bool {
			return slices.ContainsFunc(ids, func(id string) bool { return pid == annals.PersistenceID(accountBehavior().EntityType, id) })
		}
	}
	if err := h.ServeUnit("p0", owns("a", "b"), journal.Fence{}); err != nil {
		t.Fatal(err)
	}
	if err := h.ServeUnit("p1", owns("c"), journal.Fence{Open: func() error { return lost }}); err != nil {
		t.Fatal(err)
	}
	if err := h.ServeUnit("p0", owns("z"), journal.Fence{}); err == nil {
		t.Error("ServeUnit accepted a unit name served already")
	}
	if err := h.ServeUnit("", owns("z"), journal.Fence{}); err == nil {
		t.Error("ServeUnit accepted an empty unit name")
	}
	var notOwned *entity.NotOwnedError
	for _, tc := range []struct {
		id      string
		wantErr error
	}{
		{id: "a"},
		{id: "b"},
		{id: "c", wantErr: lost},
		{id: "d", wantErr: entity.ErrNotOwned},
	} {
		_, err := deposit(ctx, h, tc.id, 1)
		if (tc.wantErr == nil) != (err == nil) || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
			t.Errorf("deposit to %s: %v, want %v", tc.id, err, tc.wantErr)
		}
	}
	if err := h.HandOffUnit(ctx, "p0"); err != nil {
		t.Fatal(err)
	}
	if _, err := deposit(ctx, h, "a", 1); !errors.As(err, &notOwned) {
		t.Errorf("deposit after its unit was handed off: %v, want a *NotOwnedError", err)
	}
	if err := h.HandOffUnit(ctx, "p0"); err == nil {
		t.Error("HandOffUnit of a unit no longer served: nil error")
	}
	if err := h.ServeUnit("p0", owns("a"), journal.Fence{}); err != nil {
		t.Fatalf("serving a handed-off unit again: %v", err)
	}
	mustBalance(t, h, "a", 1)
	if got := h.EntityType(); got != accountBehavior().EntityType {
		t.Errorf("EntityType() = %q, want %q", got, accountBehavior().EntityType)
	}
}

// threeCallJournal hides the journal's recovery reader: a host before it
// recovers with three calls (highest number, snapshot, replay).
type threeCallJournal struct{ journal.Journal }

// TestSnapshotAtZero: a snapshot saved at sequence number 0 (a state
// before any event) is read as the recovery's criteria select it, with one
// read and with three calls alike: Latest reads it, None does not.
func TestSnapshotAtZero(t *testing.T) {
	for _, name := range []string{"sqlite", "postgres"} {
		t.Run(name, func(t *testing.T) {
			st := entitystores.All()[name](t)
			payload, ser, manifest, err := registry(t).Serialize(State{Balance: 42})
			if err != nil {
				t.Fatal(err)
			}
			none := snapshot.None()
			for _, c := range []struct {
				name    string
				journal journal.Journal
				crit    *snapshot.Criteria
				want    int64
			}{
				{"one read, Latest", st.Journal, nil, 42},
				{"three calls, Latest", threeCallJournal{st.Journal}, nil, 42},
				{"one read, None", st.Journal, &none, 0},
				{"three calls, None", threeCallJournal{st.Journal}, &none, 0},
			} {
				t.Run(c.name, func(t *testing.T) {
					id := strings.ReplaceAll(c.name, " ", "-")
					snap := snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: "Account|" + id, Timestamp: time.Now()}, Payload: payload, SerializerID: ser, Manifest: manifest}
					if err := st.Snapshots.Save(t.Context(), snap); err != nil {
						t.Fatal(err)
					}
					b := accountBehavior()
					b.Recovery.Snapshot = c.crit
					h := newHost(t, stores{Journal: c.journal, Snapshots: st.Snapshots}, b)
					mustBalance(t, h, id, c.want)
				})
			}
		})
	}
}
