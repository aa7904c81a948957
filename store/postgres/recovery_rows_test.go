package postgres_test

import (
	"context"
	"testing"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/recovery"
)

// writeSeqs writes one event of each number to pid, one write each.
func writeSeqs(t *testing.T, j journal.Journal, pid string, seqs ...int64) {
	t.Helper()
	for _, seq := range seqs {
		w := journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{{PersistenceID: pid, SequenceNr: seq, Payload: []byte("e"), SerializerID: 1}}}
		if res, err := j.Write(context.Background(), []journal.AtomicWrite{w}); err != nil || res != nil {
			t.Fatalf("write %s %d: %v %v", pid, seq, res, err)
		}
	}
}

// TestHighestKeptWhenAWriteFallsBelowTheDeleted: an id whose stored
// events are all below the highest deleted number (here a write of a
// number the deletion freed: the journal takes it, since no stored event
// holds it) keeps the deleted number as its highest. The journal contract
// says the highest number never decreases; a highest read from the stored
// events alone would come out at 3, and the next write would take 4 again,
// a number already given to an event (that projections have seen).
func TestHighestKeptWhenAWriteFallsBelowTheDeleted(t *testing.T) {
	t.Parallel()
	s := open(t)
	j := s.Journal()
	const pid = "Review|below-deleted"
	writeSeqs(t, j, pid, 1, 2, 3, 4, 5)
	if err := j.DeleteTo(context.Background(), pid, 5); err != nil {
		t.Fatal(err)
	}
	writeSeqs(t, j, pid, 3)
	if n, err := j.HighestSequenceNr(context.Background(), pid, 0); err != nil || n != 5 {
		t.Errorf("HighestSequenceNr = %d, %v; want 5, the highest deleted number", n, err)
	}
	res, err := j.ReadRecovery(context.Background(), recovery.Request{PersistenceID: pid})
	if err != nil || res.Highest != 5 {
		t.Errorf("ReadRecovery's Highest = %d, %v; want 5", res.Highest, err)
	}
}
