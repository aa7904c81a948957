package entity_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/internal/entitystores"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/snapshot"
)

// recoveries records what each recovery of a behavior ended with, as
// "balance@seq".
type recoveries struct {
	mu  sync.Mutex
	got []string
}

func (r *recoveries) watch(b *entity.Behavior[Command, Event, State]) {
	b.OnRecovered = func(_ string, s State, seq int64) {
		r.mu.Lock()
		r.got = append(r.got, fmt.Sprintf("%d@%d", s.Balance, seq))
		r.mu.Unlock()
	}
}

func (r *recoveries) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	got := r.got
	r.got = nil
	return got
}

// TestRecoveryAfterDeletionWithoutSnapshot: events deleted without a
// snapshot that covers them are skipped, as Akka and Pekko recover such
// an id: the state is rebuilt from the snapshot (or the empty state) and
// the events that remain, at the highest number kept, and it stays so
// after the entity writes again (a recovery that refused the gap left the
// id dead once Annals had written its next event). Deposits
// of 1, 2 and 4 are events 1–3; a new host recovers, deposits 8 (event
// 4), and a third host recovers again.
func TestRecoveryAfterDeletionWithoutSnapshot(t *testing.T) {
	for name, open := range entitystores.All() {
		for _, c := range []struct {
			name     string
			snapAt   int64 // a snapshot after this event (0: none)
			deleteTo int64
			// the first recovery after the deletion, and the one after
			// the deposit of 8
			first, second string
			kept          []int64 // the events in the journal at the end
		}{
			{name: "every event deleted", deleteTo: 3, first: "0@3", second: "8@4", kept: []int64{4}},
			{name: "a prefix deleted", deleteTo: 2, first: "4@3", second: "12@4", kept: []int64{3, 4}},
			{name: "deleted beyond the snapshot", snapAt: 1, deleteTo: 2, first: "5@3", second: "13@4", kept: []int64{3, 4}},
			{name: "every event deleted beyond the snapshot", snapAt: 1, deleteTo: 3, first: "1@3", second: "9@4", kept: []int64{4}},
		} {
			t.Run(name+"/"+c.name, func(t *testing.T) {
				st := open(t)
				ctx := t.Context()
				id := fmt.Sprintf("deleted-%d", time.Now().UnixNano())
				pid := "Account|" + id
				var rec recoveries
				b := accountBehavior()
				rec.watch(&b)
				if c.snapAt > 0 {
					b.Snapshots.When = func(_ State, _ Event, seq int64) bool { return seq == c.snapAt }
				}
				h := newHost(t, st, b)
				for _, a := range []int64{1, 2, 4} {
					if _, err := deposit(ctx, h, id, a); err != nil {
						t.Fatal(err)
					}
				}
				if err := h.Shutdown(ctx); err != nil {
					t.Fatal(err)
				}
				if err := st.Journal.DeleteTo(ctx, pid, c.deleteTo); err != nil {
					t.Fatal(err)
				}
				b.Snapshots.When = nil // no snapshot covers the events deleted
				rec.take()

				h = newHost(t, st, b)
				want := balanceOf(t, c.first)
				if got, err := deposit(ctx, h, id, 8); err != nil || got != want+8 {
					t.Fatalf("deposit of 8 after the deletion: %d, %v; want %d", got, err, want+8)
				}
				if err := h.Shutdown(ctx); err != nil {
					t.Fatal(err)
				}
				mustBalance(t, newHost(t, st, b), id, want+8)
				if got := rec.take(); !slices.Equal(got, []string{c.first, c.second}) {
					t.Errorf("recoveries ended at %v, want %v (balance@sequence number)", got, []string{c.first, c.second})
				}
				var kept []int64
				for r, err := range st.Journal.Replay(ctx, pid, 1, math.MaxInt64, math.MaxInt64) {
					if err != nil {
						t.Fatal(err)
					}
					kept = append(kept, r.SequenceNr)
				}
				if !slices.Equal(kept, c.kept) {
					t.Errorf("journal holds events %v, want %v: the deposit of 8 is event 4", kept, c.kept)
				}
			})
		}
	}
}

// balanceOf reads the balance of a "balance@seq" record.
func balanceOf(t *testing.T, rec string) int64 {
	t.Helper()
	var b, seq int64
	if _, err := fmt.Sscanf(rec, "%d@%d", &b, &seq); err != nil {
		t.Fatalf("record %q: %v", rec, err)
	}
	return b
}

// TestUnusableSnapshotOverDeletedEvents: with Snapshots.Optional, a
// snapshot that cannot be decoded is passed over for the events from 1;
// when event 1 was deleted, the snapshot covered deleted events and the
// recovery fails rather than build a wrong state, whether or not events
// remain after the deletion (before, an id with none left recovered the
// empty state at the highest number, and failed once it had written
// again). Four deposits of 1 with a snapshot at 4; events up to 4
// deleted; the snapshot then corrupted.
func TestUnusableSnapshotOverDeletedEvents(t *testing.T) {
	for name, open := range entitystores.All() {
		for _, c := range []struct {
			name  string
			after int // events written after the deletion, raw
		}{
			{"no event left", 0},
			{"an event after the deletion", 1},
		} {
			t.Run(name+"/"+c.name, func(t *testing.T) {
				st := open(t)
				ctx := t.Context()
				id := fmt.Sprintf("unusable-%d", time.Now().UnixNano())
				pid := "Account|" + id
				b := accountBehavior()
				b.Snapshots = entity.SnapshotPolicy[Event, State]{Every: 4, Optional: true}
				h := newHost(t, st, b)
				for range 4 {
					if _, err := deposit(ctx, h, id, 1); err != nil {
						t.Fatal(err)
					}
				}
				if err := h.Shutdown(ctx); err != nil {
					t.Fatal(err)
				}
				if err := st.Journal.DeleteTo(ctx, pid, 4); err != nil {
					t.Fatal(err)
				}
				for i := range c.after {
					payload, ser, manifest, err := registry(t).Serialize(Deposited{Amount: 1})
					if err != nil {
						t.Fatal(err)
					}
					seq := int64(5 + i)
					w := journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{{PersistenceID: pid, SequenceNr: seq, Payload: payload, SerializerID: ser, Manifest: manifest}}}
					if res, err := st.Journal.Write(ctx, []journal.AtomicWrite{w}); err != nil || res != nil {
						t.Fatal(res, err)
					}
				}
				corrupt := snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: pid, SequenceNr: 4}, Payload: []byte("garbage"), SerializerID: 33, Manifest: "test.State"}
				if err := st.Snapshots.Save(ctx, corrupt); err != nil {
					t.Fatal(err)
				}
				if got, err := balance(ctx, newHost(t, st, b), id); !errors.Is(err, entity.ErrRecovery) {
					t.Errorf("recovery with the snapshot over deleted events unusable: balance %d, %v; want ErrRecovery, not a wrong state", got, err)
				}
			})
		}
	}
}
