package engine

// The guards of store calls: the call timeout, the circuit breaker and
// the turns of the reads.

import (
	"context"
	"errors"
	"fmt"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/recovery"
	"github.com/sony/gobreaker/v2"
)

// breakerState maps gobreaker's states to the front's.
func breakerState(s gobreaker.State) BreakerState {
	switch s {
	case gobreaker.StateOpen:
		return BreakerOpen
	case gobreaker.StateHalfOpen:
		return BreakerHalfOpen
	}
	return BreakerClosed
}

// callError marks an error caused by the call timeout.
func (f *core[W]) callError(ctx context.Context, err error) error {
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w after %v: %w", ErrCallTimeout, f.cfg.CallTimeout, err)
	}
	return err
}

func breakerError(err error) error {
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		return ErrCircuitOpen
	}
	return err
}

// guarded runs call on the store with f's call timeout and breaker, once
// it has a turn among the MaxReads. The breaker's result type stays
// inside: callers get call's own.
func guarded[T, W any](ctx context.Context, f *core[W], call func(ctx context.Context) (T, error)) (T, error) {
	if f.reads != nil {
		select {
		case f.reads <- struct{}{}:
			defer func() { <-f.reads }()
		case <-ctx.Done():
			var zero T
			return zero, ctx.Err()
		}
	}
	return guardedCall(ctx, f, call)
}

// guardedCall runs call on the store with f's call timeout and breaker,
// in a turn the caller holds (or with no MaxReads).
func guardedCall[T, W any](ctx context.Context, f *core[W], call func(ctx context.Context) (T, error)) (T, error) {
	cctx, end := f.calls.start(ctx)
	defer end()
	out, err := f.breaker.Execute(func() (any, error) {
		v, err := call(cctx)
		if err != nil {
			if ctx.Err() != nil {
				return v, &callerGone{err} // the caller's deadline: not the store's failure
			}
			err = f.callError(cctx, err)
		}
		return v, err
	})
	v, _ := out.(T)
	var gone *callerGone
	if errors.As(err, &gone) {
		return v, gone.err
	}
	return v, breakerError(err)
}

// callerGone marks an error caused by the caller's own context ending, which
// the circuit breaker does not count.
type callerGone struct{ err error }

func (c *callerGone) Error() string { return c.err.Error() }

func (c *callerGone) Unwrap() error { return c.err }

// HighestSequenceNr implements journal.Journal.HighestSequenceNr. It first
// waits for the writes of persistenceID accepted before the call.
func (f *Front) HighestSequenceNr(ctx context.Context, persistenceID string, from int64) (int64, error) {
	if err := journal.CheckID("highest sequence number", persistenceID, from); err != nil {
		return 0, err
	}
	if err := f.awaitWrites(ctx, persistenceID); err != nil {
		return 0, err
	}
	return guarded(ctx, &f.core, func(ctx context.Context) (int64, error) {
		return f.j.HighestSequenceNr(ctx, persistenceID, from)
	})
}

// DeleteTo implements journal.Journal.DeleteTo. It first waits for the writes
// of persistenceID accepted before the call.
func (f *Front) DeleteTo(ctx context.Context, persistenceID string, to int64) error {
	if err := journal.CheckID("delete", persistenceID, to); err != nil {
		return err
	}
	if err := f.awaitWrites(ctx, persistenceID); err != nil {
		return err
	}
	_, err := guarded(ctx, &f.core, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, f.j.DeleteTo(ctx, persistenceID, to)
	})
	return err
}

// ReadRecovery implements recovery.Reader. Like HighestSequenceNr, it first
// waits for the writes of the id accepted before the call, and the read
// runs under the call timeout and the circuit breaker. It fails with an
// error wrapping errors.ErrUnsupported when the store behind the front has
// no recovery reader (ReadsSnapshotsOf is then false for every store).
//
// When the store is a recovery.BatchReader and MaxReads bounds the reads,
// a recovery that finds a turn free reads alone on the caller's
// goroutine; one that must wait for a turn joins the group of waiting
// recoveries, and each turn that comes free reads the oldest of them (at
// most MaxRecoveryGroup) in one ReadRecoveries call, made on a goroutine
// of its own under the call timeout and the breaker but under no caller's
// context. A caller whose context ends stops waiting at once with the
// context's error; its request is left out of a group not yet read, and
// its answer dropped from one being read. When a group's call fails with
// an error that may be one request's, the requests of the callers still
// waiting are read one by one, each under its caller's context, with its
// own outcome; the call timeout, an open breaker or a closed journal
// answers the whole group at once. A panic of the store in a group's call
// is raised again on each waiting caller's goroutine.
func (f *Front) ReadRecovery(ctx context.Context, req recovery.Request) (recovery.Result, error) {
	r, ok := f.j.(recovery.Reader)
	if !ok {
		return recovery.Result{}, fmt.Errorf("engine: the journal behind the front (%T) reads no recovery: %w", f.j, errors.ErrUnsupported)
	}
	req, err := recovery.Check(req)
	if err != nil {
		return recovery.Result{}, err
	}
	if err := f.awaitWrites(ctx, req.PersistenceID); err != nil {
		return recovery.Result{}, err
	}
	if br, ok := r.(recovery.BatchReader); ok && f.reads != nil {
		return f.readRecoveryInGroup(ctx, br, req)
	}
	return guarded(ctx, &f.core, func(ctx context.Context) (recovery.Result, error) {
		return r.ReadRecovery(ctx, req)
	})
}
