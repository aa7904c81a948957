package sqlite_test

import (
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/annals-go/annals/membership"
	"github.com/annals-go/annals/store/sqlite"
	"github.com/annals-go/annals/storetest"
)

// TestMembershipAcrossProcesses: the kit's rules between two stores on
// one file, as two processes on one machine would hold them.
func TestMembershipAcrossProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "annals.db")
	var stores [2]membership.Store
	for i := range stores {
		s, err := sqlite.Open(t.Context(), path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		stores[i] = s.Membership()
	}
	storetest.RunMembershipAcross(t, stores[0], stores[1])
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
