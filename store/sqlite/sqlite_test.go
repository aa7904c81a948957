package sqlite_test

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/offsets"
	"github.com/annals-go/annals/recovery"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/sqlite"
	"github.com/annals-go/annals/storetest"
)

// openTemp opens a store on a new file in the test's temporary directory.
func openTemp(t testing.TB, opts ...sqlite.Option) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "annals.db"), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// openKit opens a store for the journal suite: a new file, with the
// kit's payload limit.
func openKit(t testing.TB) *sqlite.Store {
	return openTemp(t, sqlite.WithMaxPayloadSize(storetest.KitMaxPayloadSize))
}

func TestJournalCompliance(t *testing.T) {
	storetest.RunJournal(t, storetest.JournalHarness{
		New:            func(t *testing.T) journal.Journal { return openKit(t).Journal() },
		Own:            func(t *testing.T) journal.Journal { return openKit(t).Journal() },
		Capabilities:   storetest.Capabilities{GlobalOrdering: true},
		MaxPayloadSize: storetest.KitMaxPayloadSize,
	})
}

func TestSnapshotCompliance(t *testing.T) {
	storetest.RunSnapshots(t, storetest.SnapshotHarness{
		New: func(t *testing.T) snapshot.Store { return openTemp(t).Snapshots() },
		Own: func(t *testing.T) snapshot.Store { return openTemp(t).Snapshots() },
	})
}

// TestJournalComplianceSharedFile runs the kit with every subtest on one
// database file, in parallel: the single writer and the reader pool under
// concurrent load.
func TestJournalComplianceSharedFile(t *testing.T) {
	shared := openKit(t)
	storetest.RunJournal(t, storetest.JournalHarness{
		New:            func(*testing.T) journal.Journal { return shared.Journal() },
		Capabilities:   storetest.Capabilities{GlobalOrdering: true},
		MaxPayloadSize: storetest.KitMaxPayloadSize,
	})
}

func TestQueryCompliance(t *testing.T) {
	storetest.RunQueries(t, storetest.QueryHarness{
		New: func(t *testing.T) (journal.Journal, any) {
			s := openTemp(t)
			return s.Journal(), s.Queries()
		},
	})
}

// TestRecoveryCompliance runs the recovery kit on the journal and on a
// journal front before it (which waits for the id's writes, then reads
// through the store's reader).
func TestRecoveryCompliance(t *testing.T) {
	for _, front := range []bool{false, true} {
		t.Run(map[bool]string{false: "store", true: "front"}[front], func(t *testing.T) {
			storetest.RunRecovery(t, storetest.RecoveryHarness{
				New: func(t *testing.T) (recovery.Reader, journal.Journal, snapshot.Store) {
					s := openTemp(t)
					if !front {
						return s.Journal(), s.Journal(), s.Snapshots()
					}
					f, err := engine.NewFront(s.Journal(), engine.Config{})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = f.Close() })
					return f, f, s.Snapshots()
				},
				Foreign: func(t *testing.T) snapshot.Store { return openTemp(t).Snapshots() },
			})
		})
	}
}

// TestFrontReadsFitThePool: a journal front before the store takes its
// read bound from the read pool.
func TestFrontReadsFitThePool(t *testing.T) {
	for _, readers := range []int{1, 7} {
		s := openTemp(t, sqlite.WithReaders(readers))
		var _ engine.ReadCapacity = s.Journal()
		f, err := engine.NewFront(s.Journal(), engine.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		if got := f.Config().MaxReads; got != readers {
			t.Errorf("%d readers: the front's MaxReads = %d, want %d", readers, got, readers)
		}
	}
}

func TestOffsetsCompliance(t *testing.T) {
	s := openTemp(t)
	storetest.RunTxOffsets(t, storetest.TxOffsetsHarness[*sql.Tx]{
		New: func(t *testing.T) offsets.TxStore[*sql.Tx] { return s.Projections() },
	})
}
