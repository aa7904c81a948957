package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/recovery"
	"github.com/annals-go/annals/snapshot"
)

// TestRecoveryTimestampAsReplayed: a recovery's event reads its timestamp
// as a replay does for every timestamp PostgreSQL holds. rowValues.time
// adds the binary value (µs since 2000-01-01) to the Unix microseconds of
// 2000-01-01 in an int64, which overflows for timestamps after
// 294247-01-10 (PostgreSQL holds them up to 294276-12-31); pgx's codec,
// which a replay uses, adds seconds and microseconds apart and reads them
// right.
func TestRecoveryTimestampAsReplayed(t *testing.T) {
	t.Parallel()
	s := open(t)
	j := s.Journal()
	const pid = "Review|far-future"
	writeSeqs(t, j, pid, 1)
	conn := connect(t)
	// A row as another writer (SQL, a JVM service) may store it.
	if _, err := conn.Exec(context.Background(), `UPDATE `+pgx.Identifier{s.Schema(), "event_journal"}.Sanitize()+` SET write_timestamp = '294270-06-01 00:00:00+00' WHERE persistence_id = $1`, pid); err != nil {
		t.Fatal(err)
	}
	var replayed []journal.Repr
	for e, err := range j.Replay(context.Background(), pid, 1, 1, 10) {
		if err != nil {
			t.Fatal(err)
		}
		replayed = append(replayed, e)
	}
	res, err := j.ReadRecovery(context.Background(), recovery.Request{PersistenceID: pid})
	if err != nil {
		t.Fatal(err)
	}
	if len(replayed) != 1 || len(res.Events) != 1 {
		t.Fatalf("replayed %d events, recovered %d; want 1 and 1", len(replayed), len(res.Events))
	}
	if got, want := res.Events[0].Timestamp, replayed[0].Timestamp; !got.Equal(want) {
		t.Errorf("recovered timestamp %v, replayed %v", got, want)
	}
}

// TestRecoveryWithoutCriteriaReadsNoSnapshotAtZero: a recovery without
// snapshot criteria (Request.Snapshot nil) reads no snapshot (the
// recovery.Result rule: HasSnapshot never with a nil Request.Snapshot).
// recoveryArgs passes snapshot.None() = Criteria{} for it, whose bounds
// (seq_nr >= 0 AND seq_nr <= 0) select a snapshot saved at 0, which
// Snapshots.Save accepts. (Older than the commit under review: the
// three-branch statement before it read it too.)
func TestRecoveryWithoutCriteriaReadsNoSnapshotAtZero(t *testing.T) {
	t.Parallel()
	s := open(t)
	j := s.Journal()
	const pid = "Review|snap0"
	writeSeqs(t, j, pid, 1, 2)
	if err := s.Snapshots().Save(context.Background(), snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: pid, SequenceNr: 0}, Payload: []byte("s")}); err != nil {
		t.Fatal(err)
	}
	res, err := j.ReadRecovery(context.Background(), recovery.Request{PersistenceID: pid})
	if err != nil {
		t.Fatal(err)
	}
	if res.HasSnapshot {
		t.Errorf("a recovery without snapshot criteria read the snapshot at 0")
	}
}
