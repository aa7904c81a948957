package restart_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/annals-go/annals/restart"
)

func TestDelay(t *testing.T) {
	b := restart.Backoff{Min: time.Second, Max: 10 * time.Second}
	for _, c := range []struct {
		failures int
		want     time.Duration
	}{{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {4, 8 * time.Second}, {5, 10 * time.Second}, {60, 10 * time.Second}} {
		if got := b.Delay(c.failures); got != c.want {
			t.Errorf("Delay(%d) = %v, want %v", c.failures, got, c.want)
		}
	}
}

func TestDelayJitter(t *testing.T) {
	b := restart.Backoff{Min: time.Second, Max: 10 * time.Second, RandomFactor: 0.2}
	spread := map[time.Duration]bool{}
	for range 1000 {
		d := b.Delay(5) // 10 s before the jitter
		if d < 10*time.Second || d >= 12*time.Second {
			t.Fatalf("Delay(5) = %v, want within [10s, 12s)", d)
		}
		spread[d] = true
	}
	if len(spread) < 100 {
		t.Errorf("1000 delays took %d values: the jitter does not spread them", len(spread))
	}
}

func TestCheck(t *testing.T) {
	for _, c := range []struct {
		b    restart.Backoff
		want string // "" valid
	}{
		{restart.Backoff{}, ""},
		{restart.Backoff{Min: time.Second, Max: time.Minute, RandomFactor: 0.2}, ""},
		{restart.Backoff{Min: time.Second}, ""}, // Max takes its default
		{restart.Backoff{Min: -1}, "Min"},
		{restart.Backoff{Max: -1}, "Max"},
		{restart.Backoff{RandomFactor: -0.1}, "RandomFactor"},
		{restart.Backoff{Min: time.Minute, Max: time.Second}, "above Max"},
		{restart.Backoff{Min: time.Minute}, "above Max"},      // the default Max is 30 s
		{restart.Backoff{Max: time.Millisecond}, "above Max"}, // the default Min is 1 s
		{restart.Backoff{RandomFactor: math.NaN()}, "finite"},
		{restart.Backoff{RandomFactor: math.Inf(1)}, "finite"},
	} {
		_, err := c.b.CheckWith(time.Second, 30*time.Second)
		if c.want == "" {
			if err != nil {
				t.Errorf("%+v: %v, want valid", c.b, err)
			}
			continue
		}
		if !errors.Is(err, restart.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want ErrInvalid naming %s", c.b, err, c.want)
		}
	}
}

func ExampleBackoff() {
	b := restart.Backoff{Min: time.Second, Max: 30 * time.Second}
	for failures := 1; failures <= 7; failures++ {
		fmt.Print(b.Delay(failures), " ")
	}
	// Output: 1s 2s 4s 8s 16s 30s 30s
}
