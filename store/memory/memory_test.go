package memory_test

import (
	"testing"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/memory"
	"github.com/annals-go/annals/storetest"
)

func TestJournalCompliance(t *testing.T) {
	storetest.RunJournal(t, storetest.JournalHarness{
		New: func(t *testing.T) journal.Journal {
			s := memory.New()
			t.Cleanup(func() { _ = s.Close() })
			return s.Journal()
		},
		Capabilities: storetest.Capabilities{GlobalOrdering: true},
	})
}

func TestSnapshotCompliance(t *testing.T) {
	storetest.RunSnapshots(t, storetest.SnapshotHarness{
		New: func(t *testing.T) snapshot.Store {
			s := memory.New()
			t.Cleanup(func() { _ = s.Close() })
			return s.Snapshots()
		},
	})
}

func TestQueryCompliance(t *testing.T) {
	storetest.RunQueries(t, storetest.QueryHarness{
		New: func(t *testing.T) (journal.Journal, any) {
			s := memory.New()
			t.Cleanup(func() { _ = s.Close() })
			return s.Journal(), s.Queries()
		},
	})
}
