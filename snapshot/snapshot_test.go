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
		{"zero value is none", snapshot.Criteria{}, false},
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
