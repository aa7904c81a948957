package postgres_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

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
	replayed, res := replayedAndRecovered(t, j, pid)
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

// TestRecoveryTimestampsAsReplayed: a recovery decodes each event's
// timestamp from its binary value (microseconds since 2000-01-01) as a
// replay does through pgx, for times before and after 2000 and up to the
// end of PostgreSQL's range, where microseconds since 1970 no longer fit
// an int64. The rows are as another writer (SQL, a JVM service) may
// store them.
func TestRecoveryTimestampsAsReplayed(t *testing.T) {
	t.Parallel()
	s := open(t)
	j := s.Journal()
	conn := connect(t)
	for i, stored := range []string{
		"1900-06-15 12:34:56.789012+00",
		"1970-01-01 00:00:00+00",
		"1999-12-31 23:59:59.999999+00",
		"2000-01-01 00:00:00+00",
		"2026-11-29 17:00:00.123456+00",
		"294270-06-01 00:00:00.000001+00",
	} {
		t.Run(stored, func(t *testing.T) {
			pid := fmt.Sprint("Review|time-", i)
			writeSeqs(t, j, pid, 1)
			if _, err := conn.Exec(context.Background(), `UPDATE `+pgx.Identifier{s.Schema(), "event_journal"}.Sanitize()+` SET write_timestamp = $2::timestamptz WHERE persistence_id = $1`, pid, stored); err != nil {
				t.Fatal(err)
			}
			replayed, res := replayedAndRecovered(t, j, pid)
			if len(replayed) != 1 || len(res.Events) != 1 {
				t.Fatalf("replayed %d events, recovered %d; want 1 and 1", len(replayed), len(res.Events))
			}
			if got, want := res.Events[0].Timestamp, replayed[0].Timestamp; !got.Equal(want) || got.Location() != time.UTC {
				t.Errorf("recovered timestamp %v, replayed %v (in UTC)", got, want)
			}
		})
	}
}

// replayedAndRecovered returns pid's events as a replay reads them and its
// recovery without snapshot criteria.
func replayedAndRecovered(t *testing.T, j *postgres.Journal, pid string) ([]journal.Repr, recovery.Result) {
	t.Helper()
	var replayed []journal.Repr
	for e, err := range j.Replay(context.Background(), pid, 1, math.MaxInt64, 1000) {
		if err != nil {
			t.Fatal(err)
		}
		replayed = append(replayed, e)
	}
	res, err := j.ReadRecovery(context.Background(), recovery.Request{PersistenceID: pid})
	if err != nil {
		t.Fatal(err)
	}
	return replayed, res
}
