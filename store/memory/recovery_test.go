package memory_test

import (
	"testing"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/recovery"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/memory"
	"github.com/annals-go/annals/storetest"
)

// TestRecoveryCompliance holds the memory journal and snapshot store,
// read with three calls (recovery.ThreeCalls: the journal has no one-call
// read), to the rules of the recovery suite.
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
			return recovery.ThreeCalls(j, snaps), j, snaps
		},
		Foreign: func(t *testing.T) snapshot.Store { return open(t).Snapshots() },
	})
}
