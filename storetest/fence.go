package storetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/membership"
)

// fenceRules is the fenced-writes suite: the rules of
// journal.FencedWriter over s.Journal and the leases of s.Membership
// (the store's own, which the journal checks where writes commit):
//   - a write under a lease its holder holds at the token's epoch is
//     stored, also once the lease's term passed and nobody took it;
//   - a write under a lease another member took since (a higher epoch) is
//     refused with an error wrapping journal.ErrFenced and
//     journal.ErrRejected (a *journal.FencedError), nothing of it stored,
//     while the other writes of the call, with no token, with the new
//     holder's, or with a token of another membership store, are stored;
//   - a tokens slice of another length than writes fails with
//     journal.ErrInvalidArgument and stores nothing.
//
// This is the rule a paused member needs: its own fence passed before the
// pause, and only the store can still refuse what it sends after.
//
// With Claim (or Membership), the owner rules: a write sent by an earlier
// owner after a new owner took the id over is refused and not stored, also
// at the id's next free number (where the sequence-number check sees no
// second writer: the earlier owner's own highest is the id's); the new
// owner's write at that number is stored.
func fenceRules(s Store) []rule {
	j, _ := s.Journal.(journal.FencedWriter)
	m := s.Membership
	claim := s.Claim
	if claim == nil && m != nil {
		claim = leaseClaims(m)
	}
	needLeases := func(t tb) {
		if m == nil {
			t.Skip("no Membership: the store's leases are not its own")
		}
	}
	return []rule{
		{"FencedWriteUnderHeldLease", "a write under a lease held at its epoch is stored, also after the lease's term passed while nobody took it", func(t tb) {
			needLeases(t)
			fencedUnderHeld(t, j, m, uniqueID(t, "KitCluster"))
		}},
		{"FencedWriteUnderLostLease", "a write under a lease another member took is refused (ErrFenced, ErrRejected) and not stored; the call's other writes are stored", func(t tb) {
			needLeases(t)
			fencedUnderLost(t, j, m, uniqueID(t, "KitCluster"))
		}},
		{"StaleOwnerWriteAtNextNumber", "an earlier owner's write sent after a new owner took the id over is refused (ErrFenced, ErrRejected) at the id's next free number; the new owner's write at that number is stored", func(t tb) {
			staleOwner(t, j, claim)
		}},
		{"FencedWriteTokensMismatch", "tokens of another length than writes fail with ErrInvalidArgument, storing nothing", func(t tb) {
			pid := uniqueID(t, "KitFence")
			_, err := j.WriteFenced(testContext(t), []journal.AtomicWrite{single(pid, 1)}, nil)
			if !errors.Is(err, journal.ErrInvalidArgument) {
				t.Errorf("WriteFenced with no tokens for one write: %v, want ErrInvalidArgument", err)
			}
			if n := highest(t, j, pid, 0); n != 0 {
				t.Errorf("highest after the refused call = %d, want 0", n)
			}
		}},
	}
}

// token is the fencing token of lease l held by h in cluster of m.
func token(m membership.Store, cluster string, l membership.Lease, h membership.Holder) journal.FenceToken {
	return journal.FenceToken{Store: m, Cluster: cluster, Lease: l.Name, Holder: h.Name, HolderIncarnation: h.Incarnation, Epoch: l.Epoch}
}

// mustWriteFenced writes ws under tokens in one call and returns the
// results (nil: all stored); an unknown outcome fails t.
func mustWriteFenced(t tb, j journal.FencedWriter, ws []journal.AtomicWrite, tokens []journal.FenceToken) []error {
	t.Helper()
	res, err := j.WriteFenced(testContext(t), ws, tokens)
	if err != nil {
		t.Fatalf("WriteFenced: outcome unknown: %v", err)
	}
	if res != nil && len(res) != len(ws) {
		t.Fatalf("WriteFenced returned %d results for %d atomic writes", len(res), len(ws))
	}
	if res == nil {
		res = make([]error, len(ws))
	}
	return res
}

func fencedUnderHeld(t tb, j journal.FencedWriter, m membership.Store, cluster string) {
	a := holder("a", "1")
	long := mustAcquire(t, m, cluster, "r0", a, longTTL)
	short := mustAcquire(t, m, cluster, "r1", a, shortTTL)
	p0, p1 := uniqueID(t, "KitFence"), uniqueID(t, "KitFence")
	res := mustWriteFenced(t, j, []journal.AtomicWrite{single(p0, 1), single(p1, 1)},
		[]journal.FenceToken{token(m, cluster, long, a), token(m, cluster, short, a)})
	for i, err := range res {
		if err != nil {
			t.Errorf("write %d under a held lease: %v, want stored", i, err)
		}
	}
	awaitExpiry(t, m, cluster, "r1", "")
	res = mustWriteFenced(t, j, []journal.AtomicWrite{single(p1, 2)}, []journal.FenceToken{token(m, cluster, short, a)})
	if res[0] != nil {
		t.Errorf("write under an expired lease nobody took: %v, want stored", res[0])
	}
	if n := highest(t, j, p1, 0); n != 2 {
		t.Errorf("highest of the expired lease's id = %d, want 2", n)
	}
}

func fencedUnderLost(t tb, j journal.FencedWriter, m membership.Store, cluster string) {
	ctx := testContext(t)
	a, b := holder("a", "1"), holder("b", "1")
	old := mustAcquire(t, m, cluster, "r0", a, longTTL)
	if err := m.Release(ctx, cluster, "r0", a); err != nil {
		t.Fatalf("Release: %v", err)
	}
	taken := mustAcquire(t, m, cluster, "r0", b, longTTL)
	lost, none, newer, other := uniqueID(t, "KitFence"), uniqueID(t, "KitFence"), uniqueID(t, "KitFence"), uniqueID(t, "KitFence")
	foreign := token(m, cluster, old, a)
	foreign.Store = struct{ another string }{"membership store"} // a lease this journal does not keep
	res := mustWriteFenced(t, j,
		[]journal.AtomicWrite{single(lost, 1), single(none, 1), single(newer, 1), single(other, 1)},
		[]journal.FenceToken{token(m, cluster, old, a), {}, token(m, cluster, taken, b), foreign})
	var fe *journal.FencedError
	switch err := res[0]; {
	case !errors.Is(err, journal.ErrFenced) || !errors.Is(err, journal.ErrRejected):
		t.Errorf("write under a lease another member took: %v, want ErrFenced and ErrRejected", err)
	case !errors.As(err, &fe) || fe.PersistenceID != lost || fe.Token.Lease != "r0":
		t.Errorf("write under a lease another member took: %v, want a *journal.FencedError naming %s and r0", err, lost)
	}
	for i, name := range []string{"", "with no token", "under the new holder's token", "under another store's token"} {
		if i > 0 && res[i] != nil {
			t.Errorf("write %s, in a call with a fenced write: %v, want stored", name, res[i])
		}
	}
	if n := highest(t, j, lost, 0); n != 0 {
		t.Errorf("highest of the fenced write's id = %d, want 0 (not stored)", n)
	}
	for _, pid := range []string{none, newer, other} {
		if n := highest(t, j, pid, 0); n != 1 {
			t.Errorf("highest of %s = %d, want 1", pid, n)
		}
	}
}

// leaseClaims makes owners of ids from leases of m: each call takes the
// id's lease (one per id, in a cluster of the kit's own) over from its
// holder, who releases it, and returns the new holder's token.
func leaseClaims(m membership.Store) func(ctx context.Context, persistenceID string) (journal.FenceToken, error) {
	var (
		mu      sync.Mutex
		holders = map[string]membership.Holder{}
		n       int
	)
	return func(ctx context.Context, pid string) (journal.FenceToken, error) {
		mu.Lock()
		defer mu.Unlock()
		const cluster = "KitClaims"
		lease := "owner-of-" + pid
		if h, ok := holders[lease]; ok {
			if err := m.Release(ctx, cluster, lease, h); err != nil {
				return journal.FenceToken{}, err
			}
		}
		n++
		h := holder(fmt.Sprintf("owner-%d", n), "1")
		l, err := m.Acquire(ctx, cluster, lease, h, longTTL)
		if err != nil {
			return journal.FenceToken{}, err
		}
		holders[lease] = h
		return token(m, cluster, l, h), nil
	}
}

// staleOwner: an owner writes 1; a new owner takes the id over; the
// earlier owner's write of 2 (sent after, as by a process paused between
// its own check and the store) is refused as fenced and not stored; the
// new owner's write of 2 is stored, and so is its 3, while the earlier
// owner's write of 3 is refused too.
func staleOwner(t tb, j journal.FencedWriter, claim func(context.Context, string) (journal.FenceToken, error)) {
	ctx := testContext(t)
	pid := uniqueID(t, "KitOwner")
	first, err := claim(ctx, pid)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	event := func(seq int64, by string) journal.AtomicWrite {
		w := single(pid, seq)
		w.Events[0].Payload = []byte(fmt.Sprintf("%d by the %s owner", seq, by))
		return w
	}
	write := func(w journal.AtomicWrite, tok journal.FenceToken) error {
		return mustWriteFenced(t, j, []journal.AtomicWrite{w}, []journal.FenceToken{tok})[0]
	}
	if err := write(event(1, "first"), first); err != nil {
		t.Fatalf("the only owner's write of 1: %v", err)
	}
	second, err := claim(ctx, pid)
	if err != nil {
		t.Fatalf("Claim by a new owner: %v", err)
	}
	if n := highest(t, j, pid, 0); n != 1 { // the new owner recovers the id
		t.Fatalf("highest after the first owner's write = %d, want 1", n)
	}
	for _, seq := range []int64{2, 3} {
		err := write(event(seq, "first"), first)
		var fe *journal.FencedError
		switch {
		case !errors.Is(err, journal.ErrFenced) || !errors.Is(err, journal.ErrRejected):
			t.Errorf("the earlier owner's write of %d after the take-over: %v, want ErrFenced and ErrRejected", seq, err)
		case !errors.As(err, &fe) || fe.PersistenceID != pid:
			t.Errorf("the earlier owner's write of %d: %v, want a *journal.FencedError naming %s", seq, err, pid)
		}
		if err := write(event(seq, "second"), second); err != nil {
			t.Errorf("the new owner's write of %d: %v, want stored", seq, err)
		}
	}
	var got []string
	for r, err := range j.Replay(ctx, pid, 1, math.MaxInt64, math.MaxInt64) {
		if err != nil {
			t.Fatalf("Replay: %v", err)
		}
		got = append(got, string(r.Payload))
	}
	if want := []string{"1 by the first owner", "2 by the second owner", "3 by the second owner"}; !slices.Equal(got, want) {
		t.Errorf("the id holds %q, want %q", got, want)
	}
}
