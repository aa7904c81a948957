package memory_test

import (
	"context"
	"testing"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/recovery"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/memory"
	"github.com/annals-go/annals/storetest"
)

// threeCalls reads a memory store's recoveries with recovery.Read: the
// three calls an entity makes on a journal without the one-call
// capability, which the memory journal lacks. Through it the recovery
// suite holds the memory journal and snapshot store to the rules the
// stores that read a recovery in one call keep.
type threeCalls struct {
	j     journal.Journal
	snaps snapshot.Store
}

// ReadsSnapshotsOf is true for the snapshot store it was made with, or none.
func (r threeCalls) ReadsSnapshotsOf(s snapshot.Store) bool { return s == nil || s == r.snaps }

func (r threeCalls) ReadRecovery(ctx context.Context, req recovery.Request) (recovery.Result, error) {
	return recovery.Read(ctx, r.j, r.snaps, req)
}

func TestRecoveryCompliance(t *testing.T) {
	open := func(t *testing.T) *memory.Store {
		s := memory.New()
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	storetest.RunRecovery(t, storetest.RecoveryHarness{
		New: func(t *testing.T) (recovery.Reader, journal.Journal, snapshot.Store) {
			s := open(t)
			j, snaps := s.Journal(), s.Snapshots()
			return threeCalls{j, snaps}, j, snaps
		},
		Foreign: func(t *testing.T) snapshot.Store { return open(t).Snapshots() },
	})
}
