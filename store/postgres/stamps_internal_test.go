package postgres

import (
	"fmt"
	"testing"
	"time"
)

// TestStampOf: a row takes its time (t0 + p µs) unless its floor is
// later; then the first time at or after the floor that is p µs modulo
// total after t0.
func TestStampOf(t *testing.T) {
	t0 := time.UnixMicro(1_700_000_000_000_000)
	us := func(n int64) time.Time { return t0.Add(time.Duration(n) * time.Microsecond) }
	for _, c := range []struct {
		name     string
		p, total int64
		floor    time.Time
		hasFloor bool
		want     time.Time
	}{
		{"no floor", 3, 10, time.Time{}, false, us(3)},
		{"a floor behind", 3, 10, us(-50), true, us(3)},
		{"a floor at the row's time", 3, 10, us(3), true, us(3)},
		{"a floor 1µs ahead", 3, 10, us(4), true, us(13)},
		{"a floor on the row's class", 3, 10, us(23), true, us(23)},
		{"a floor an hour ahead", 7, 1000, us(3_600_000_000), true, us(3_600_000_007)},
		{"one row", 0, 1, us(5), true, us(5)},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := stampOf(t0, c.p, c.total, c.floor, c.hasFloor); !got.Equal(c.want) {
				t.Errorf("stampOf = %v, want %v", got.Sub(t0), c.want.Sub(t0))
			}
		})
	}
}

// TestKnownStamps: an id's stamp is known for the sequence number it was
// put at only; forget drops it; beyond maxKnownStamps ids, one is
// forgotten for each new one.
func TestKnownStamps(t *testing.T) {
	ts := time.UnixMicro(1_700_000_000_000_000)
	for _, c := range []struct {
		name  string
		ids   int // put before, "id-0"…, at seq 5
		get   string
		below int64
		found bool
	}{
		{"the next write", 1, "id-0", 6, true},
		{"a write that does not follow", 1, "id-0", 8, false},
		{"an unknown id", 1, "id-9", 6, false},
		{"forgotten", 0, "id-0", 6, false},
		{"over the bound, the last id put", maxKnownStamps + 10, fmt.Sprint("id-", maxKnownStamps+9), 6, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			k := newKnownStamps()
			k.put([]string{"id-0"}, []int64{5}, []time.Time{ts})
			if c.ids == 0 {
				k.forget("id-0")
			}
			for n := 1; n < c.ids; n++ {
				k.put([]string{fmt.Sprint("id-", n)}, []int64{5}, []time.Time{ts})
			}
			if len(k.latest) > maxKnownStamps {
				t.Errorf("%d ids known, want at most %d", len(k.latest), maxKnownStamps)
			}
			prevs, found := make([]time.Time, 1), make([]bool, 1)
			k.get([]string{c.get}, []int64{c.below}, prevs, found)
			if found[0] != c.found || (found[0] && !prevs[0].Equal(ts)) {
				t.Errorf("get(%s, %d) = %v, %v; want found %v", c.get, c.below, prevs[0], found[0], c.found)
			}
		})
	}
}
