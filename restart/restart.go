// Package restart holds the backoff schedule shared by everything in
// Annals that restarts after a failure: an entity whose write or recovery
// failed (entity.HostConfig.Restart) and a failed projection run
// (projection.Config.Restart). It follows Akka's RestartSettings
// (minBackoff, maxBackoff, randomFactor).
package restart

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// ErrInvalid reports a Backoff with a negative field or Min above Max.
var ErrInvalid = errors.New("restart: invalid backoff")

// Backoff is a restart schedule. Rules:
//   - The delay before the restart after the n-th consecutive failure
//     (n ≥ 1) is Min·2^(n-1), capped at Max, then stretched by a random
//     share of itself in [0, RandomFactor): with RandomFactor 0.2, a 10 s
//     delay becomes 10–12 s. The jitter spreads the restarts of many
//     entities or projections that failed together, so they do not meet
//     the store at the same instant again.
//   - Zero fields take the defaults of the user (entity, projection);
//     RandomFactor's default is 0 (no jitter). Negative fields are an
//     error, as are a RandomFactor that is not a finite number and Min
//     above Max once the defaults are in (CheckWith).
type Backoff struct {
	Min, Max     time.Duration
	RandomFactor float64
}

// Check returns an error wrapping ErrInvalid, naming the field, when b
// breaks the rules of Backoff.
func (b Backoff) Check() error {
	switch {
	case b.Min < 0:
		return fmt.Errorf("%w: Min %v is negative", ErrInvalid, b.Min)
	case b.Max < 0:
		return fmt.Errorf("%w: Max %v is negative", ErrInvalid, b.Max)
	case b.RandomFactor < 0:
		return fmt.Errorf("%w: RandomFactor %v is negative", ErrInvalid, b.RandomFactor)
	case math.IsNaN(b.RandomFactor) || math.IsInf(b.RandomFactor, 0):
		return fmt.Errorf("%w: RandomFactor %v is not a finite number", ErrInvalid, b.RandomFactor)
	case b.Max > 0 && b.Min > b.Max:
		return fmt.Errorf("%w: Min %v is above Max %v", ErrInvalid, b.Min, b.Max)
	}
	return nil
}

// CheckWith checks b with its zero Min and Max replaced by min and max,
// and returns that backoff: Backoff{Min: time.Minute} with a default Max
// of 30 s is an error, not a silent cap.
func (b Backoff) CheckWith(min, max time.Duration) (Backoff, error) {
	if err := b.Check(); err != nil {
		return b, err
	}
	d := b.WithDefaults(min, max)
	if d.Min > d.Max {
		return b, fmt.Errorf("%w: Min %v is above Max %v (defaults in)", ErrInvalid, d.Min, d.Max)
	}
	return d, nil
}

// WithDefaults returns b with its zero Min and Max replaced by min and max.
func (b Backoff) WithDefaults(min, max time.Duration) Backoff {
	if b.Min == 0 {
		b.Min = min
	}
	if b.Max == 0 {
		b.Max = max
	}
	return b
}

// Delay returns the delay before the restart that follows the failures-th
// consecutive failure (failures < 1 counts as 1).
func (b Backoff) Delay(failures int) time.Duration {
	d := b.Min
	for i := 1; i < failures && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	if b.RandomFactor > 0 && d > 0 {
		d += time.Duration(rand.Float64() * b.RandomFactor * float64(d))
	}
	return d
}
