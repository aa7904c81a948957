package engine

import (
	"context"
	"log/slog"
	"time"

	hookset "github.com/annals-go/annals/internal/hooks"
)

// Hooks: a value given in Config.Hooks is called for each event whose
// interface it implements, as franz-go's kgo.Hook values are. A front
// with no hooks of a kind pays nothing for that kind. Hooks run on the
// front's goroutines, inline: they must be fast and must not call the
// front.

// WriteCall describes one Write call to the store.
type WriteCall struct {
	// Writes and Events are the atomic writes and their events in the call.
	Writes, Events int
	// Queued is how many atomic writes were waiting for the next call when
	// this one was sent.
	Queued int
	// Start is when the call was sent.
	Start time.Time
	// Duration is how long the store took to answer (or the breaker to
	// refuse).
	Duration time.Duration
	// Err is the call's error: nil when the store answered (some writes
	// may still have been rejected, see Rejected), ErrCircuitOpen,
	// ErrCallTimeout or the store's error (outcome unknown).
	Err error
	// Rejected counts the atomic writes the store refused.
	Rejected int
	// Contexts are the contexts of the Write and Persist calls whose
	// writes the call carried, in order (a tracer parents the call's span
	// on the first and links the others). The store call itself runs with
	// the first one's values, never its cancellation.
	Contexts []context.Context
}

// HookWriteCall is called after each Write call to the store, once its
// callers have their answers.
type HookWriteCall interface {
	OnWriteCall(WriteCall)
}

// BreakerState is the circuit breaker's state.
type BreakerState int

const (
	// BreakerClosed: calls go to the store.
	BreakerClosed BreakerState = iota
	// BreakerHalfOpen: one probe call goes to the store.
	BreakerHalfOpen
	// BreakerOpen: calls fail at once with ErrCircuitOpen.
	BreakerOpen
)

func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerHalfOpen:
		return "half-open"
	case BreakerOpen:
		return "open"
	}
	return "unknown"
}

// HookBreakerStateChange is called when the circuit breaker changes state,
// while the breaker holds its lock: store calls wait until it returns.
type HookBreakerStateChange interface {
	OnBreakerStateChange(from, to BreakerState)
}

// hooks are the Config.Hooks sorted by the interfaces they implement.
type hooks struct {
	writeCall []HookWriteCall
	breaker   []HookBreakerStateChange
}

func newHooks(values []any) hooks {
	return hooks{writeCall: hookset.Select[HookWriteCall](values), breaker: hookset.Select[HookBreakerStateChange](values)}
}

// breakerChanged logs a state change (a warning when the breaker opens)
// and calls the hooks.
func (f *core[W]) breakerChanged(from, to BreakerState) {
	level := slog.LevelInfo
	if to == BreakerOpen {
		level = slog.LevelWarn
	}
	f.cfg.Logger.Log(context.Background(), level, f.name+" circuit breaker "+to.String(), "from", from.String(),
		"reset_timeout", f.cfg.ResetTimeout, "max_failures", f.cfg.MaxFailures)
	for _, h := range f.hooks.breaker {
		h.OnBreakerStateChange(from, to)
	}
}

// isHook reports whether v implements at least one hook interface of
// this package.
func isHook(v any) bool {
	switch v.(type) {
	case HookWriteCall, HookBreakerStateChange:
		return true
	}
	return false
}
