package projection

import (
	"errors"
	"fmt"
	"time"
)

// RunState is what a projection's Run is doing in this process.
type RunState int

const (
	// RunStopped: Run is not running in this process (never started, or
	// returned because its context ended or its source ended).
	RunStopped RunState = iota
	// RunActive: Run reads its source and hands envelopes to the handler
	// (or waits for new ones).
	RunActive
	// RunPaused: Run found the projection paused and waits for a resume.
	RunPaused
	// RunRestarting: a run failed; Run waits out the restart backoff
	// (Status.NextRestart) and starts again from the stored offset.
	RunRestarting
	// RunFailed: Run gave up after Config.MaxRestarts failed runs in a row
	// and returned; it handles nothing until Run is called again.
	RunFailed
)

func (s RunState) String() string {
	switch s {
	case RunActive:
		return "running"
	case RunPaused:
		return "paused"
	case RunRestarting:
		return "restarting"
	case RunFailed:
		return "failed"
	}
	return "stopped"
}

// Status is what a projection instance is doing in this process. It lives
// in the process that calls Run: the offset store keeps offsets and paused
// flags only, so another process (such as `annals projections status`)
// cannot read it.
type Status struct {
	// State is Run's state.
	State RunState
	// Failing reports a handler error or failed run since the projection
	// last handled an envelope (or group), or a Run that gave up: while it
	// holds, Behind returns a *FailingError with its count. Handling an
	// envelope, skipping one by the Recovery strategy, a new Run, or Run
	// returning for its context or the end of its source clears it.
	Failing bool
	// LastError is the last handler error or failed run (nil if none
	// since the Projection was made), at LastErrorAt. It stays after the
	// projection recovers; Failing tells whether it still holds.
	LastError   error
	LastErrorAt time.Time
	// Failures is the number of failed runs since the projection last
	// handled an envelope (or group).
	Failures int
	// NextRestart is when the next run starts, while State is
	// RunRestarting.
	NextRestart time.Time
}

// Status returns what the projection's Run is doing in this process.
func (p *Projection) Status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Status{State: p.runState, Failing: p.failing.Load(), LastError: p.lastErr, LastErrorAt: p.lastErrAt,
		Failures: p.failures, NextRestart: p.nextRestart}
}

// ErrFailing is what a *FailingError wraps, besides the projection's last
// error.
var ErrFailing = errors.New("projection: failing")

// FailingError reports a projection that fails in this process: Behind
// returns it (with its count) while the projection has events to handle
// and is failing, and Run returns it, GaveUp set, when it stops after
// Config.MaxRestarts. errors.Is matches both ErrFailing and the last
// error's chain.
type FailingError struct {
	ID ID
	// Err is the last handler error or failed run, at At.
	Err error
	At  time.Time
	// Failures is the number of failed runs in a row (0 when only a
	// handler error is being retried, within a run).
	Failures int
	// NextRestart is when the next run starts (zero when none is
	// scheduled).
	NextRestart time.Time
	// GaveUp reports that Run stopped after Config.MaxRestarts: nothing
	// handles the projection until Run is called again.
	GaveUp bool
}

func (e *FailingError) Error() string {
	switch {
	case e.GaveUp:
		return fmt.Sprintf("projection %s: gave up after %d failed runs in a row: %v", e.ID, e.Failures, e.Err)
	case e.Failures > 0:
		return fmt.Sprintf("projection %s: failing (%d failed runs in a row, next run in %v): %v", e.ID, e.Failures,
			max(0, time.Until(e.NextRestart)).Round(time.Millisecond), e.Err)
	}
	return fmt.Sprintf("projection %s: failing (handler error): %v", e.ID, e.Err)
}

// Unwrap returns ErrFailing and the last error.
func (e *FailingError) Unwrap() []error { return []error{ErrFailing, e.Err} }

// failingError returns the *FailingError of the projection's state, or nil
// when it is not failing.
func (p *Projection) failingError() error {
	if !p.failing.Load() {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.failing.Load() {
		return nil
	}
	return &FailingError{ID: p.id, Err: p.lastErr, At: p.lastErrAt, Failures: p.failures,
		NextRestart: p.nextRestart, GaveUp: p.runState == RunFailed}
}

// handled clears the failing state: an envelope or group was handled (or
// skipped by the strategy). It costs an atomic load when not failing.
func (p *Projection) handled() {
	if !p.failing.Load() {
		return
	}
	p.mu.Lock()
	p.failing.Store(false)
	p.failures = 0
	p.mu.Unlock()
}

// handlerFailed records a handler error.
func (p *Projection) handlerFailed(err error) {
	p.mu.Lock()
	p.lastErr, p.lastErrAt = err, time.Now()
	p.failing.Store(true)
	p.mu.Unlock()
}
