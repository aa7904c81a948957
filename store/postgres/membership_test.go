package postgres_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals/membership"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
	"github.com/annals-go/annals/storetest"
)

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

// TestLeasesWithoutEpochIndex: an r2dbc-layout schema whose lease table
// an older Annals made, without the epoch index that lets a fenced write
// hold off a take-over, is refused at Open, naming the fix; Migrate adds
// the index.
func TestLeasesWithoutEpochIndex(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dsn, schema := pgtest.Schema(t)
	conn := connect(t)
	pekkoDDL(t, conn, schema)
	s, err := postgres.Open(ctx, dsn, postgres.WithMigrate(true))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := conn.Exec(ctx, "DROP INDEX "+pgx.Identifier{schema, "cluster_leases_epoch_idx"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if s, err := postgres.Open(ctx, dsn); !errors.Is(err, postgres.ErrSchemaMissing) || !strings.Contains(err.Error(), "migrate") {
		if s != nil {
			s.Close()
		}
		t.Fatalf("Open without the epoch index: %v, want ErrSchemaMissing naming migrate", err)
	}
	s, err = postgres.Open(ctx, dsn, postgres.WithMigrate(true))
	if err != nil {
		t.Fatalf("Open with migrate: %v", err)
	}
	s.Close()
}

// TestMembershipAcrossPools: the kit's rules between two stores, each
// with its pool, on one schema, as two processes would hold them.
func TestMembershipAcrossPools(t *testing.T) {
	t.Parallel()
	dsn, _ := pgtest.Schema(t)
	var stores [2]membership.Store
	for i := range stores {
		s, err := postgres.Open(t.Context(), dsn, postgres.WithMigrate(true))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores[i] = s.Membership()
	}
	storetest.RunMembershipAcross(t, stores[0], stores[1])
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
