package engine

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"testing/synctest"
	"time"
)

// TestCallTimerEndsEachCallAtItsDeadline: calls started one after another,
// some ended before their deadline, the others each ended by the one
// timer no sooner than their own deadline, with
// context.DeadlineExceeded; an ended call's deadline does not end a later
// call early.
func TestCallTimerEndsEachCallAtItsDeadline(t *testing.T) {
	t.Parallel()
	const timeout = 30 * time.Millisecond
	ct := newCallTimer(timeout)
	for _, endEarly := range []bool{true, false, true, false, false} {
		c, end := ct.start(context.Background())
		if d, ok := c.Deadline(); !ok || !d.Equal(c.deadline) {
			t.Fatalf("Deadline() = %v, %v, want the call's %v", d, ok, c.deadline)
		}
		if endEarly {
			end()
			if err := c.Err(); !errors.Is(err, context.Canceled) {
				t.Fatalf("a call ended before its deadline: Err() = %v, want context.Canceled", err)
			}
			continue
		}
		<-c.Done()
		if now := time.Now(); now.Before(c.deadline) {
			t.Fatalf("a call ended %v before its deadline", c.deadline.Sub(now))
		}
		if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a timed-out call: Err() = %v, want context.DeadlineExceeded", err)
		}
		end()
	}
}

// TestCallTimerKeepsTheCallersContext: a call ends with its caller's
// context (its error, not DeadlineExceeded), reports the caller's
// deadline when it is the earlier, and carries the caller's values.
func TestCallTimerKeepsTheCallersContext(t *testing.T) {
	t.Parallel()
	ct := newCallTimer(time.Hour)
	type key struct{}
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	c, end := ct.start(parent)
	defer end()
	if c.Value(key{}) != "v" {
		t.Error("the call's context lost its caller's value")
	}
	cancel()
	<-c.Done()
	if err := c.Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("Err() = %v after the caller's cancellation, want context.Canceled", err)
	}
	soon := time.Now().Add(time.Minute)
	dl, cancelDL := context.WithDeadline(context.Background(), soon)
	defer cancelDL()
	c2, end2 := ct.start(dl)
	defer end2()
	if d, _ := c2.Deadline(); !d.Equal(soon) {
		t.Errorf("Deadline() = %v, want the caller's earlier %v", d, soon)
	}
}

// TestCallTimerCallsAreWatchedWithoutGoroutines: context.AfterFunc on a
// call's context, as pgx watches each query, registers with the context
// package's own cancellation instead of starting a goroutine per call.
func TestCallTimerCallsAreWatchedWithoutGoroutines(t *testing.T) {
	ct := newCallTimer(time.Hour)
	before := runtime.NumGoroutine()
	var ends []func()
	var stops []func() bool
	for range 200 {
		c, end := ct.start(context.Background())
		ends = append(ends, end)
		stops = append(stops, context.AfterFunc(c, func() {}))
	}
	if grew := runtime.NumGoroutine() - before; grew >= 100 {
		t.Errorf("%d goroutines more after watching 200 calls, want none per call", grew)
	}
	for i, end := range ends {
		stops[i]()
		end()
	}
}

// TestCallTimerErrIsStable: a call whose caller's context ended keeps
// that error once its deadline passes too (context.Context: successive
// calls of Err return the same error), and a timed-out call's
// context.Cause reports the deadline, as context.WithTimeout's does.
func TestCallTimerErrIsStable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = time.Second
		ct := newCallTimer(timeout)
		parent, cancel := context.WithCancel(t.Context())
		c, end := ct.start(parent)
		cancel()
		<-c.Done()
		if err := c.Err(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Err() = %v after the caller's cancellation, want context.Canceled", err)
		}
		time.Sleep(2 * timeout) // the store has not returned yet: the timer fires on the call
		if err := c.Err(); !errors.Is(err, context.Canceled) {
			t.Errorf("Err() = %v once the deadline passed too, want context.Canceled still", err)
		}
		end()

		timed, end2 := ct.start(t.Context())
		defer end2()
		<-timed.Done()
		if err := timed.Err(); err != context.DeadlineExceeded {
			t.Errorf("Err() = %v, want context.DeadlineExceeded", err)
		}
		if cause := context.Cause(timed); !errors.Is(cause, context.DeadlineExceeded) {
			t.Errorf("context.Cause = %v, want context.DeadlineExceeded", cause)
		}
	})
}
