package projection_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annals-go/annals/projection"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/restart"
	"github.com/annals-go/annals/store/memory"
)

// errSQL stands for a mistake in a handler's SQL: it fails every time.
var errSQL = errors.New(`syntax error at or near "UPDTE"`)

// restartSignal signals each restart scheduled.
type restartSignal chan error

func (s restartSignal) OnProjectionRestartScheduled(_ projection.ID, err error, _ time.Duration) {
	select {
	case s <- err:
	default:
	}
}

// TestFailingProjectionIsVisible: a projection whose handler always fails
// shows it through Status (state, last error, failures) and Behind (a
// *FailingError with the count, never a silent non-zero), and with
// MaxRestarts its Run stops after that many restarts, as Akka's
// RestartSettings maxRestarts.
func TestFailingProjectionIsVisible(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name        string
		recovery    projection.Strategy
		maxRestarts int
		// calls is the handler calls Run makes before it gives up (0: it
		// does not give up).
		calls int64
	}{
		{"fail, at most 2 restarts", projection.Fail(), 2, 3},
		{"retry twice then fail, at most 1 restart", projection.RetryThenFail(2, time.Millisecond), 1, 6},
		{"fail, no bound", projection.Fail(), 0, 0},
		{"retry twice then fail, no bound", projection.RetryThenFail(2, time.Millisecond), 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := memory.New()
			defer s.Close()
			typ := "Fail" + unique(t)
			for _, pid := range pids(typ, 2) {
				write(t, s.Journal(), pid, 1, 3)
			}
			var calls atomic.Int64
			restarts := restartSignal(make(chan error, 1))
			backoff := restart.Backoff{Min: time.Millisecond, Max: time.Millisecond}
			if c.maxRestarts == 0 {
				// Unbounded: the first restart waits long enough to be seen.
				backoff = restart.Backoff{Min: time.Hour, Max: time.Hour}
			}
			id := projection.ID{Name: "failing", Key: typ}
			p, err := projection.AtLeastOnce(id, allSlices(s.Queries(), typ), s.Projections(),
				func(context.Context, query.Envelope) error {
					calls.Add(1)
					return fmt.Errorf("update balances: %w", errSQL)
				}, projection.Config{Recovery: c.recovery, Restart: backoff, MaxRestarts: c.maxRestarts, Hooks: []any{restarts}, Logger: quiet.Logger})
			if err != nil {
				t.Fatal(err)
			}
			if st := p.Status(); st.State != projection.RunStopped || st.Failing || st.LastError != nil {
				t.Errorf("before Run: %+v", st)
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- p.Run(ctx) }()

			var runErr error
			if c.calls > 0 {
				runErr = <-done
			} else {
				<-restarts
			}
			st := p.Status()
			wantState := projection.RunRestarting
			if c.calls > 0 {
				wantState = projection.RunFailed
			}
			if st.State != wantState || !st.Failing || !errors.Is(st.LastError, errSQL) || st.Failures < 1 || st.LastErrorAt.IsZero() {
				t.Errorf("Status = %+v, want state %v, failing, the handler's error", st, wantState)
			}
			if wantState == projection.RunRestarting && time.Until(st.NextRestart) < 30*time.Minute {
				t.Errorf("NextRestart %v, want about an hour from now", st.NextRestart)
			}

			n, err := p.Behind(ctx, 0)
			var fe *projection.FailingError
			if n != 6 || !errors.As(err, &fe) || !errors.Is(err, projection.ErrFailing) || !errors.Is(err, errSQL) || fe.ID != id {
				t.Fatalf("Behind = %d, %v; want 6 and a *FailingError wrapping the handler's error", n, err)
			}
			if fe.GaveUp != (c.calls > 0) || fe.Failures != st.Failures {
				t.Errorf("FailingError %+v; want GaveUp %v, Failures %d", fe, c.calls > 0, st.Failures)
			}
			if c.calls > 0 {
				var ge *projection.FailingError
				if !errors.As(runErr, &ge) || !ge.GaveUp || ge.Failures != c.maxRestarts+1 || !errors.Is(runErr, errSQL) {
					t.Errorf("Run returned %v; want a *FailingError that gave up after %d failed runs", runErr, c.maxRestarts+1)
				}
				if got := calls.Load(); got != c.calls {
					t.Errorf("the handler was called %d times, want %d", got, c.calls)
				}
				return
			}
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("Run returned %v, want context.Canceled", err)
			}
			if st := p.Status(); st.State != projection.RunStopped || st.Failing || !errors.Is(st.LastError, errSQL) {
				t.Errorf("after Run returned: %+v; want stopped, not failing, the last error kept", st)
			}
			if n, err := p.Behind(t.Context(), 0); n != 6 || err != nil {
				t.Errorf("Behind of a stopped projection = %d, %v; want 6, nil", n, err)
			}
		})
	}
}

// TestRecoveredProjectionIsNotFailing: a handler that fails a few times,
// then succeeds: Behind reports the failure while it holds, then reaches
// 0 without error; Status keeps the last error but no longer fails.
func TestRecoveredProjectionIsNotFailing(t *testing.T) {
	t.Parallel()
	s := memory.New()
	defer s.Close()
	typ := "Recover" + unique(t)
	write(t, s.Journal(), typ+"|a", 1, 2)
	var calls atomic.Int64
	release := make(chan struct{})
	restarts := restartSignal(make(chan error, 1))
	saved := savedHook(make(chan struct{}, 1))
	p, err := projection.AtLeastOnce(projection.ID{Name: "recovers", Key: typ}, allSlices(s.Queries(), typ), s.Projections(),
		func(ctx context.Context, _ query.Envelope) error {
			if calls.Add(1) == 1 {
				return errSQL
			}
			<-release // the restarted run waits here until the test has looked
			return nil
		}, projection.Config{SaveAfter: 1, Restart: restart.Backoff{Min: time.Millisecond, Max: time.Millisecond},
			Hooks: []any{restarts, saved}, Logger: quiet.Logger})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, p)
	defer stop()
	<-restarts
	if n, err := p.Behind(t.Context(), 1); n != 1 || !errors.Is(err, projection.ErrFailing) {
		t.Errorf("after a failed run: Behind = %d, %v; want 1 and ErrFailing", n, err)
	}
	close(release)
	for {
		n, err := p.Behind(t.Context(), 0)
		if err != nil && !errors.Is(err, projection.ErrFailing) {
			t.Fatal(err)
		}
		if n == 0 {
			if err != nil {
				t.Errorf("caught up: Behind returned %v", err)
			}
			break
		}
		<-saved
	}
	if st := p.Status(); st.State != projection.RunActive || st.Failing || st.Failures != 0 || !errors.Is(st.LastError, errSQL) {
		t.Errorf("after recovering: %+v; want running, not failing, the last error kept", st)
	}
}
