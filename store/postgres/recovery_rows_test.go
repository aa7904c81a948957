package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/recovery"
	"github.com/annals-go/annals/store/postgres"
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

// TestR2DBCRecoveryEventsAsReplayed: on the r2dbc layout, an id without a
// separator written by Pekko has rows of entity type "" (Pekko's
// PersistenceId.extractEntityType), not annals.EntityType's whole id; a
// recovery's events are the rows as a replay reads them.
func TestR2DBCRecoveryEventsAsReplayed(t *testing.T) {
	t.Parallel()
	s := open(t, postgres.WithLayout(postgres.LayoutR2DBC))
	j := s.Journal()
	const pid = "plain-actor-1" // a classic persistent actor's id: no separator
	writeSeqs(t, j, pid, 1, 2)
	conn := connect(t)
	// The rows as Pekko R2DBC writes them for this id.
	if _, err := conn.Exec(context.Background(), `UPDATE `+pgx.Identifier{s.Schema(), "event_journal"}.Sanitize()+` SET entity_type = '' WHERE persistence_id = $1`, pid); err != nil {
		t.Fatal(err)
	}
	var replayed []journal.Repr
	for e, err := range j.Replay(context.Background(), pid, 1, 2, 10) {
		if err != nil {
			t.Fatal(err)
		}
		replayed = append(replayed, e)
	}
	res, err := j.ReadRecovery(context.Background(), recovery.Request{PersistenceID: pid})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Events) != len(replayed) {
		t.Fatalf("recovered %d events, replayed %d", len(res.Events), len(replayed))
	}
	for i, e := range res.Events {
		r := replayed[i]
		if e.EntityType != r.EntityType || e.Slice != r.Slice || e.PersistenceID != r.PersistenceID {
			t.Errorf("event %d: recovered (%q, slice %d, %q), replayed (%q, slice %d, %q)", e.SequenceNr, e.PersistenceID, e.Slice, e.EntityType, r.PersistenceID, r.Slice, r.EntityType)
		}
	}
}
