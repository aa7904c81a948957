package snapshot_test

import (
	"testing"
	"time"

	"github.com/annals-go/annals/snapshot"
)

func TestCriteriaMatches(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := snapshot.Metadata{PersistenceID: "p", SequenceNr: 10, Timestamp: t0}
	tests := []struct {
		name string
		c    snapshot.Criteria
		want bool
	}{
		{"latest", snapshot.Latest(), true},
		{"none", snapshot.None(), false},
		{"zero value matches none at 10", snapshot.Criteria{}, false},
		{"max seq equal", snapshot.Criteria{MaxSequenceNr: 10}, true},
		{"max seq below", snapshot.Criteria{MaxSequenceNr: 9}, false},
		{"min seq above", snapshot.Criteria{MaxSequenceNr: 20, MinSequenceNr: 11}, false},
		{"max time equal", snapshot.Criteria{MaxSequenceNr: 10, MaxTimestamp: t0}, true},
		{"max time before", snapshot.Criteria{MaxSequenceNr: 10, MaxTimestamp: t0.Add(-time.Microsecond)}, false},
		{"min time after", snapshot.Criteria{MaxSequenceNr: 10, MinTimestamp: t0.Add(time.Microsecond)}, false},
		{"min time equal", snapshot.Criteria{MaxSequenceNr: 10, MinTimestamp: t0}, true},
	}
	for _, tt := range tests {
		if got := tt.c.Matches(m); got != tt.want {
			t.Errorf("%s: Matches = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestCriteriaOfSnapshotAtZero: a snapshot saved at sequence number 0 (the
// state before any event) is matched by criteria whose bounds hold 0, and
// never by None.
func TestCriteriaOfSnapshotAtZero(t *testing.T) {
	m := snapshot.Metadata{PersistenceID: "p", SequenceNr: 0, Timestamp: time.Unix(1, 0)}
	for _, tt := range []struct {
		name string
		c    snapshot.Criteria
		want bool
	}{
		{"latest", snapshot.Latest(), true},
		{"zero value", snapshot.Criteria{}, true},
		{"none", snapshot.None(), false},
		{"min seq 1", snapshot.Criteria{MaxSequenceNr: 10, MinSequenceNr: 1}, false},
	} {
		if got := tt.c.Matches(m); got != tt.want {
			t.Errorf("%s: Matches = %v, want %v", tt.name, got, tt.want)
		}
	}
}
