package memory_test

import (
	"errors"
	"github.com/annals-go/annals/membership"
	"testing"
	"time"

	"github.com/annals-go/annals/durable"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/offsets"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/memory"
	"github.com/annals-go/annals/storetest"
)

func TestJournalCompliance(t *testing.T) {
	newJournal := func(t *testing.T) journal.Journal {
		s := memory.New(memory.WithMaxPayloadSize(storetest.KitMaxPayloadSize))
		t.Cleanup(func() { _ = s.Close() })
		return s.Journal()
	}
	storetest.RunJournal(t, storetest.JournalHarness{
		New:            newJournal,
		Own:            newJournal,
		Capabilities:   storetest.Capabilities{GlobalOrdering: true},
		MaxPayloadSize: storetest.KitMaxPayloadSize,
	})
}

func TestSnapshotCompliance(t *testing.T) {
	newStore := func(t *testing.T) snapshot.Store {
		s := memory.New()
		t.Cleanup(func() { _ = s.Close() })
		return s.Snapshots()
	}
	storetest.RunSnapshots(t, storetest.SnapshotHarness{New: newStore, Own: newStore})
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

func TestOptions(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	s := memory.New(memory.WithMaxPayloadSize(4), memory.WithClock(func() time.Time { return at }))
	ev := func(seq int64, payload string) journal.AtomicWrite {
		return journal.AtomicWrite{PersistenceID: "p", Events: []journal.Repr{{PersistenceID: "p", SequenceNr: seq, Payload: []byte(payload)}}}
	}
	res, err := s.Journal().Write(t.Context(), []journal.AtomicWrite{ev(1, "abcd"), ev(2, "abcde")})
	if err != nil || len(res) != 2 || res[0] != nil || !errors.Is(res[1], journal.ErrRejected) {
		t.Fatalf("results %v, %v: want the 5-byte payload rejected", res, err)
	}
	for r, err := range s.Journal().Replay(t.Context(), "p", 1, 1, 1) {
		if err != nil || !r.Timestamp.Equal(at) {
			t.Errorf("timestamp %v (%v), want the clock's %v", r.Timestamp, err, at)
		}
	}
}

func TestOffsetsCompliance(t *testing.T) {
	storetest.RunTxOffsets(t, storetest.TxOffsetsHarness[*memory.Tx]{
		New: func(t *testing.T) offsets.TxStore[*memory.Tx] {
			s := memory.New()
			t.Cleanup(func() { _ = s.Close() })
			return s.Projections()
		},
	})
}

func TestDurableStateCompliance(t *testing.T) {
	newStore := func(t *testing.T) durable.Store {
		s := memory.New()
		t.Cleanup(func() { _ = s.Close() })
		return s.DurableState()
	}
	storetest.RunDurableState(t, storetest.DurableHarness{New: newStore, Own: newStore})
}

func TestFencedWritesKit(t *testing.T) {
	s := memory.New()
	storetest.RunFencedWrites(t, s.Journal(), s.Membership())
}

func TestMembershipKit(t *testing.T) {
	storetest.RunMembership(t, func(t *testing.T) membership.Store { return memory.New().Membership() })
}
