package engine

// The call timeout of store calls, kept by one timer per front.

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// callTimer bounds a front's store calls by its call timeout with one
// timer for all of them, where context.WithTimeout starts a timer per
// call: starting a timer wakes an idle processor of the Go scheduler, a
// cost every recovery and every lone write paid (measured with
// benchmarks/compare, see docs/performance.md). The timer stays armed
// while calls come and fires at the oldest running call's deadline; once
// it fires with no call running it is left unarmed until the next call.
type callTimer struct {
	timeout time.Duration
	mu      sync.Mutex
	calls   map[*timedCall]struct{}
	timer   *time.Timer
	armed   bool
}

func newCallTimer(timeout time.Duration) *callTimer {
	t := &callTimer{timeout: timeout, calls: map[*timedCall]struct{}{}}
	t.timer = time.AfterFunc(time.Hour, t.fire)
	t.timer.Stop()
	return t
}

// timedCall is the context of one store call: its caller's, ended at the
// call's deadline at the latest. It keeps the context package's own
// cancellation underneath (the embedded context and its Done channel),
// so that context.AfterFunc, which drivers use to watch a call, starts no
// goroutine for it. Its Err and context.Cause are those of
// context.WithTimeout: once the call timed out, Err is
// context.DeadlineExceeded and the cause errCallTimedOut (which wraps
// it); else the caller's context's error. Either stays as it is once
// set. A context derived from the call with context.WithCancel reports
// context.Canceled at the deadline (its cause still errCallTimedOut):
// stores report ctx.Err() of the call's context itself
// (journal.StoreErrors.Map).
type timedCall struct {
	context.Context
	cancel   context.CancelCauseFunc
	deadline time.Time
}

// errCallTimedOut is the cause of a call the timer ended.
var errCallTimedOut = fmt.Errorf("engine: store call deadline: %w", context.DeadlineExceeded)

// Deadline reports the call's deadline, or its caller's when earlier.
func (c *timedCall) Deadline() (time.Time, bool) {
	if d, ok := c.Context.Deadline(); ok && d.Before(c.deadline) {
		return d, true
	}
	return c.deadline, true
}

// Err is context.DeadlineExceeded once the call timed out, else the
// caller's context's error. The cause, set once with the cancellation
// that ended the call, tells the two apart.
func (c *timedCall) Err() error {
	err := c.Context.Err()
	if err != nil && context.Cause(c.Context) == errCallTimedOut {
		return context.DeadlineExceeded
	}
	return err
}

// start returns the context of a call made under parent, and the function
// that ends it (to be called when the call returns).
func (t *callTimer) start(parent context.Context) (*timedCall, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	c := &timedCall{Context: ctx, cancel: cancel, deadline: time.Now().Add(t.timeout)}
	t.mu.Lock()
	t.calls[c] = struct{}{}
	if !t.armed {
		t.armed = true
		t.timer.Reset(t.timeout)
	}
	t.mu.Unlock()
	return c, func() {
		t.mu.Lock()
		delete(t.calls, c)
		t.mu.Unlock()
		cancel(context.Canceled)
	}
}

// fire ends the calls past their deadline and arms the timer for the
// next deadline, if a call runs.
func (t *callTimer) fire() {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	var next time.Time
	for c := range t.calls {
		if !c.deadline.After(now) {
			delete(t.calls, c)
			c.cancel(errCallTimedOut) // no effect once the caller's context ended it
			continue
		}
		if next.IsZero() || c.deadline.Before(next) {
			next = c.deadline
		}
	}
	if next.IsZero() {
		t.armed = false
		return
	}
	t.timer.Reset(next.Sub(now))
}
