package recovery_test

import (
	"math"
	"testing"

	"github.com/annals-go/annals/recovery"
)

func TestEventsCap(t *testing.T) {
	tests := []struct {
		name      string
		from, to  int64
		maxEvents int
		want      int
	}{
		{"a small entity: its range", 1, 10, recovery.DefaultMaxEvents, 10},
		{"after a snapshot: the rest of the range", 8, 10, recovery.DefaultMaxEvents, 3},
		{"one event", 5, 5, recovery.DefaultMaxEvents, 1},
		{"max events below the range", 1, 10, 4, 4},
		{"a long journal: at most 256", 1, 1_000_000, recovery.DefaultMaxEvents, 256},
		{"no bound: at most 256", 1, math.MaxInt64, math.MaxInt, 256},
		{"the widest range", math.MinInt64, math.MaxInt64, math.MaxInt, 256},
		{"a range wider than int64 holds, small max", math.MinInt64, 0, 10, 10},
		{"nothing to read", 11, 10, recovery.DefaultMaxEvents, 0},
		{"no events wanted", 1, 10, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := recovery.EventsCap(tt.from, tt.to, tt.maxEvents); got != tt.want {
				t.Errorf("EventsCap(%d, %d, %d) = %d, want %d", tt.from, tt.to, tt.maxEvents, got, tt.want)
			}
		})
	}
}
