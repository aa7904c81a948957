package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/membership"
	"github.com/annals-go/annals/store/sqlite"
	"github.com/annals-go/annals/storetest"
)

func TestMembershipKit(t *testing.T) {
	s := openTemp(t)
	storetest.RunMembership(t, func(t *testing.T) membership.Store { return s.Membership() })
}

// TestMembershipErrors: a call whose context has ended returns the
// context's error, a call after Close journal.ErrClosed, as every other
// call of the store does.
func TestMembershipErrors(t *testing.T) {
	s := openTemp(t)
	m := s.Membership()
	a := membership.Holder{Name: "a", Incarnation: "1"}
	calls := func(ctx context.Context) map[string]error {
		_, hb := m.Heartbeat(ctx, "c", a, time.Minute)
		_, acq := m.Acquire(ctx, "c", "r0", a, time.Minute)
		_, mem := m.Members(ctx, "c")
		_, ls := m.Leases(ctx, "c")
		return map[string]error{
			"Join":      m.Join(ctx, "c", membership.Member{Name: "a", Incarnation: "1"}, time.Minute),
			"Heartbeat": hb, "Acquire": acq, "Members": mem, "Leases": ls,
			"Release": m.Release(ctx, "c", "r0", a),
			"Leave":   m.Leave(ctx, "c", a),
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for op, err := range calls(ctx) {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context: %v, want context.Canceled", op, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for op, err := range calls(t.Context()) {
		if !errors.Is(err, journal.ErrClosed) {
			t.Errorf("%s after Close: %v, want journal.ErrClosed", op, err)
		}
	}
}

// TestMembershipAcrossProcesses: two stores opened on one file, as two
// processes of one machine open it, see each other's members and leases;
// when members of both race for one lease, free and then expired, exactly
// one takes it each time and the epoch grows by one each time.
func TestMembershipAcrossProcesses(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "annals.db")
	var stores [2]membership.Store
	for i := range stores {
		s, err := sqlite.Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		stores[i] = s.Membership()
	}
	a, b := membership.Holder{Name: "a", Incarnation: "1"}, membership.Holder{Name: "b", Incarnation: "1"}
	if err := stores[0].Join(ctx, "c", membership.Member{Name: a.Name, Incarnation: a.Incarnation, Address: "x:1"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if ms, err := stores[1].Members(ctx, "c"); err != nil || len(ms) != 1 || ms[0].Name != "a" || !ms[0].Live {
		t.Fatalf("the other store's Members: %+v %v, want a, live", ms, err)
	}
	if err := stores[1].Join(ctx, "c", membership.Member{Name: a.Name, Incarnation: "2"}, time.Minute); !errors.Is(err, membership.ErrNameTaken) {
		t.Fatalf("Join of a's name by another incarnation in the other store: %v, want ErrNameTaken", err)
	}
	if _, err := stores[0].Acquire(ctx, "c", "r0", a, membership.MinTTL); err != nil {
		t.Fatal(err)
	}
	if ls, err := stores[1].Leases(ctx, "c"); err != nil || len(ls) != 1 || ls[0].Owner != a || !ls[0].Live || ls[0].Epoch != 1 {
		t.Fatalf("the other store's Leases: %+v %v, want r0 of a, live, at epoch 1", ls, err)
	}
	if _, err := stores[1].Acquire(ctx, "c", "r0", b, time.Minute); !errors.Is(err, membership.ErrHeld) {
		t.Fatalf("Acquire of a's lease in the other store: %v, want ErrHeld", err)
	}
	raceAcquire(t, stores[:], "c", "r1", 1) // free
	for {                                   // r0's term passes on the machine's clock
		ls, err := stores[1].Leases(ctx, "c")
		if err != nil {
			t.Fatal(err)
		}
		if ls[0].Name != "r0" || ls[0].Owner != a {
			t.Fatalf("Leases: %+v, want r0 of a first", ls)
		}
		if !ls[0].Live {
			break
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	raceAcquire(t, stores[:], "c", "r0", 2) // expired
}

// raceAcquire makes 8 members per store race for lease and checks that
// exactly one took it, at epoch, and that the others got ErrHeld.
func raceAcquire(t *testing.T, stores []membership.Store, cluster, lease string, epoch int64) {
	t.Helper()
	const per = 8
	errs := make([]error, per*len(stores))
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = stores[i%len(stores)].Acquire(t.Context(), cluster, lease, membership.Holder{Name: fmt.Sprint("m", i), Incarnation: "1"}, time.Minute)
		})
	}
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won >= 0:
			t.Errorf("%s: m%d and m%d both acquired it", lease, won, i)
		case err == nil:
			won = i
		case !errors.Is(err, membership.ErrHeld):
			t.Errorf("%s: m%d: %v, want nil or ErrHeld", lease, i, err)
		}
	}
	if won < 0 {
		t.Fatalf("%s: nobody acquired it", lease)
	}
	for _, s := range stores {
		ls, err := s.Leases(t.Context(), cluster)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(ls, func(l membership.Lease) bool { return l.Name == lease })
		if i < 0 || ls[i].Owner.Name != fmt.Sprint("m", won) || ls[i].Epoch != epoch || !ls[i].Live {
			t.Errorf("%s after the race: %+v, want m%d's at epoch %d", lease, ls, won, epoch)
		}
	}
}

// TestMembershipCheckHeldTx: inside a projection transaction the check
// passes for the holder at its epoch and fails with ErrNotHeld for
// another epoch or member.
func TestMembershipCheckHeldTx(t *testing.T) {
	s := openTemp(t)
	m, ctx := s.Membership(), t.Context()
	a, b := membership.Holder{Name: "a", Incarnation: "1"}, membership.Holder{Name: "b", Incarnation: "1"}
	l, err := m.Acquire(ctx, "check", "r0", a, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		h     membership.Holder
		epoch int64
		ok    bool
	}{{"holder", a, l.Epoch, true}, {"another epoch", a, l.Epoch + 1, false}, {"another member", b, l.Epoch, false}} {
		err := s.Projections().InTx(ctx, func(tx *sql.Tx) error { return m.CheckHeldTx(ctx, tx, "check", "r0", c.h, c.epoch) })
		if c.ok != (err == nil) || (!c.ok && !errors.Is(err, membership.ErrNotHeld)) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
