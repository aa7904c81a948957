package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/membership"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
	"github.com/annals-go/annals/storetest"
)

func TestMembershipKit(t *testing.T) {
	t.Parallel()
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			t.Parallel()
			s := open(t, l.opts...)
			storetest.RunMembership(t, func(t *testing.T) membership.Store { return s.Membership() })
		})
	}
}

// TestMembershipErrors: a call whose context has ended returns the
// context's error, a call after Close journal.ErrClosed, as every other
// call of the store does.
func TestMembershipErrors(t *testing.T) {
	t.Parallel()
	s := open(t)
	m := s.Membership()
	a := membership.Holder{Name: "a", Incarnation: "1"}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
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
	for op, err := range calls(ctx) {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context: %v, want context.Canceled", op, err)
		}
	}
	s.Close()
	for op, err := range calls(t.Context()) {
		if !errors.Is(err, journal.ErrClosed) {
			t.Errorf("%s after Close: %v, want journal.ErrClosed", op, err)
		}
	}
}

// TestMembershipWithoutTables: an r2dbc-layout schema whose tables were
// made by a JVM service's DDL (no membership tables) opens, and
// membership calls fail with ErrSchemaMissing until Migrate adds them.
func TestMembershipWithoutTables(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dsn, schema := pgtest.Schema(t)
	pekkoDDL(t, connect(t), schema)
	s, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m := s.Membership()
	a := membership.Holder{Name: "a", Incarnation: "1"}
	if _, err := m.Acquire(ctx, "c", "r0", a, time.Minute); !errors.Is(err, postgres.ErrSchemaMissing) {
		t.Fatalf("Acquire without the membership tables: %v, want ErrSchemaMissing", err)
	}
	if _, err := m.Members(ctx, "c"); !errors.Is(err, postgres.ErrSchemaMissing) {
		t.Fatalf("Members without the membership tables: %v, want ErrSchemaMissing", err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if l, err := m.Acquire(ctx, "c", "r0", a, time.Minute); err != nil || l.Epoch != 1 {
		t.Fatalf("Acquire after Migrate: %+v %v", l, err)
	}
}

// TestMembershipAcrossPools: members in two processes (two stores, each
// with its pool, on one schema) see each other's records, and when they
// all race for one lease, free and then expired, exactly one takes it
// each time and the epoch grows by one each time.
func TestMembershipAcrossPools(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dsn, _ := pgtest.Schema(t)
	var stores [2]membership.Store
	for i := range stores {
		s, err := postgres.Open(ctx, dsn, postgres.WithMigrate(true))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
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
	if _, err := stores[1].Acquire(ctx, "c", "r0", b, time.Minute); !errors.Is(err, membership.ErrHeld) {
		t.Fatalf("Acquire of a's lease in the other store: %v, want ErrHeld", err)
	}
	raceAcquire(t, stores[:], "c", "r1", 1) // free
	for {                                   // r0's term passes on the server's clock
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
// passes for the holder at its epoch, fails with ErrNotHeld for another
// epoch or member, and holds the lease: a member acquiring it meanwhile
// waits until the transaction ends.
func TestMembershipCheckHeldTx(t *testing.T) {
	t.Parallel()
	s := open(t)
	m, ctx := s.Membership(), t.Context()
	a, b := membership.Holder{Name: "a", Incarnation: "1"}, membership.Holder{Name: "b", Incarnation: "1"}
	const cl = "check"
	l, err := m.Acquire(ctx, cl, "r0", a, membership.MinTTL)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		h     membership.Holder
		epoch int64
		ok    bool
	}{{"holder", a, l.Epoch, true}, {"another epoch", a, l.Epoch + 1, false}, {"another member", b, l.Epoch, false}} {
		err := s.Projections().InTx(ctx, func(tx pgx.Tx) error { return m.CheckHeldTx(ctx, tx, cl, "r0", c.h, c.epoch) })
		if c.ok != (err == nil) || (!c.ok && !errors.Is(err, membership.ErrNotHeld)) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	// Past a's term, b's Acquire waits for a's transaction, which checked
	// the lease, and takes it only after.
	for live := true; live; {
		ls, err := m.Leases(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		live = ls[0].Live
		if live {
			time.Sleep(50 * time.Millisecond) // a's term passes on the server's clock
		}
	}
	checked, release := make(chan struct{}), make(chan struct{})
	txDone := make(chan error, 1)
	go func() {
		txDone <- s.Projections().InTx(ctx, func(tx pgx.Tx) error {
			if err := m.CheckHeldTx(ctx, tx, cl, "r0", a, l.Epoch); err != nil {
				return err
			}
			close(checked)
			<-release
			return nil
		})
	}()
	<-checked
	acquired := make(chan error, 1)
	go func() { _, err := m.Acquire(ctx, cl, "r0", b, time.Minute); acquired <- err }()
	// b's statement waits on the row's lock: the server says so.
	for waiting := false; !waiting; {
		select {
		case err := <-acquired:
			t.Fatalf("b acquired the lease while a's transaction held it: %v", err)
		default:
		}
		err := s.Pool().QueryRow(ctx, `SELECT count(*) > 0 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%cluster_leases%'`, s.Schema()).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	if err := <-txDone; err != nil {
		t.Fatal(err)
	}
	if err := <-acquired; err != nil {
		t.Fatalf("b's Acquire after a's transaction: %v", err)
	}
	err = s.Projections().InTx(ctx, func(tx pgx.Tx) error { return m.CheckHeldTx(ctx, tx, cl, "r0", a, l.Epoch) })
	if !errors.Is(err, membership.ErrNotHeld) {
		t.Errorf("a's check after b took the lease: %v, want ErrNotHeld", err)
	}
}
