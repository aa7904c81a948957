package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/examples/bank"
	"github.com/annals-go/annals/projection"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/serialization"
)

// The read model's timing: how often its status is polled during the
// operations, how often the lag is looked at once they ended, and how long
// the run waits, after the last operation, for the projections to catch
// up.
const (
	readModelInstances = 4
	readModelPoll      = 200 * time.Millisecond
	readModelCheck     = 5 * time.Millisecond
	readModelWait      = 2 * time.Minute
)

// readModel is the bank's balance read model during a run: one instance of
// the balance projection per slice range, running from before the
// operations until stop.
type readModel struct {
	table  balanceTable
	ranges []annals.SliceRange
	ps     []*projection.Projection
	lags   []*rangeLag     // one per instance; used by one goroutine at a time
	ctx    context.Context // the projections' context, ended by stop
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error

	status atomic.Pointer[ReadModelStatus] // the latest poll
}

// startReadModel creates the read model's table if needed and starts the
// projection instances. They run until stop, not until ctx ends: after an
// interrupt the run still verifies the read model. A store that cannot
// keep the read model gives a nil read model and the reason.
func startReadModel(ctx context.Context, st *stores.Store, reg *serialization.Registry, logger *slog.Logger, hooks []any) (*readModel, string, error) {
	table, reason := tableFor(st, reg)
	if table == nil {
		return nil, reason, nil
	}
	if err := table.create(ctx); err != nil {
		return nil, "", err
	}
	ranges, err := annals.SliceRanges(readModelInstances)
	if err != nil {
		return nil, "", err
	}
	rm := &readModel{table: table, ranges: ranges, done: make(chan error, len(ranges))}
	for _, r := range ranges {
		p, err := table.projection(r, projection.Config{Logger: logger, Hooks: hooks})
		if err != nil {
			return nil, "", err
		}
		rm.ps = append(rm.ps, p)
		rm.lags = append(rm.lags, &rangeLag{p: p, r: r, q: table.queries(), sequence: st.GlobalOrdering})
	}
	rm.ctx, rm.cancel = context.WithCancel(context.WithoutCancel(ctx))
	for _, p := range rm.ps {
		go func() { rm.done <- p.Run(rm.ctx) }()
	}
	return rm, "", nil
}

// stop stops the projections and waits for them; later calls return the
// first one's result.
func (rm *readModel) stop() error {
	rm.once.Do(func() {
		rm.cancel()
		for range rm.ps {
			if err := <-rm.done; !errors.Is(err, context.Canceled) {
				rm.err = errors.Join(rm.err, err)
			}
		}
	})
	return rm.err
}

// behind returns how many stored events the projections have not applied.
// While an instance is failing (a handler error or failed run it may yet
// recover from), the count comes with the first failing instance's
// *projection.FailingError; any other error comes alone, with 0. Not safe
// for concurrent use.
func (rm *readModel) behind(ctx context.Context) (int64, error) {
	var n int64
	var failing error
	for _, l := range rm.lags {
		b, err := l.behind(ctx)
		if err != nil {
			if _, ok := errors.AsType[*projection.FailingError](err); !ok {
				return 0, err
			}
			if failing == nil {
				failing = err
			}
		}
		n += b
	}
	return n, failing
}

// rangeLag counts the events one projection instance has still to apply.
// On a store of sequence offsets it reads each event of the range once: it
// keeps the orderings read and not yet below the instance's offset, so a
// look costs the events stored since the last one, not the whole lag.
// Otherwise (timestamp offsets) it asks projection.Projection.Behind.
type rangeLag struct {
	p        *projection.Projection
	r        annals.SliceRange
	q        query.EventsBySlicesQuery
	sequence bool         // the store's offsets are sequence offsets
	read     query.Offset // events of the range read up to here
	pending  []int64      // orderings read, above the offset at the last look
}

func (l *rangeLag) behind(ctx context.Context) (int64, error) {
	if !l.sequence {
		return l.p.Behind(ctx, 0)
	}
	o, err := l.p.Offset(ctx)
	if err != nil {
		return 0, err
	}
	if o.Kind != query.KindNone && o.Kind != query.KindSequence {
		return 0, fmt.Errorf("projection %s: offset %s is not a sequence", l.p.ID(), o)
	}
	i := 0
	for i < len(l.pending) && l.pending[i] <= o.Sequence {
		i++
	}
	l.pending = l.pending[i:]
	if o.Sequence > l.read.Sequence { // handled beyond what was read
		l.read = o
	}
	for env, err := range l.q.CurrentEventsBySlices(ctx, bank.EntityType, l.r.Min, l.r.Max, l.read) {
		if err != nil {
			return 0, err
		}
		l.pending = append(l.pending, env.Offset.Sequence)
		l.read = env.Offset
	}
	return int64(len(l.pending)), nil
}

// poll looks at the read model's total and lag every interval, keeping the
// latest for latest, until the returned stop is called. A nil read model
// does nothing.
func (rm *readModel) poll(ctx context.Context, interval time.Duration) (stop func()) {
	if rm == nil {
		return func() {}
	}
	quit, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			behind, err := rm.behind(ctx)
			if _, failing := errors.AsType[*projection.FailingError](err); failing {
				err = nil // the count holds; the lag shows the failure
			}
			if err == nil {
				var total int64
				if _, total, err = rm.table.read(ctx); err == nil {
					rm.status.Store(&ReadModelStatus{Total: total, Behind: behind})
				}
			}
			select {
			case <-quit:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(quit); <-ended }
}

// latest returns the last status polled; false when there is none (or no
// read model).
func (rm *readModel) latest() (ReadModelStatus, bool) {
	if rm == nil {
		return ReadModelStatus{}, false
	}
	st := rm.status.Load()
	if st == nil {
		return ReadModelStatus{}, false
	}
	return *st, true
}

// caughtUpResult is when the projections caught up, or why they did not.
type caughtUpResult struct {
	after time.Duration
	err   error
}

// catchUp looks at the lag every readModelCheck until it is 0 and sends the
// time since from, or an error after limit. Call it when no more events
// come: a lag of 0 is then final. A projection that is failing is waited
// for, within limit, as it may recover (its restart backoff runs); one
// that gave up (Config.MaxRestarts) ends the wait at once. A nil read
// model returns nil.
func (rm *readModel) catchUp(from time.Time, limit time.Duration) <-chan caughtUpResult {
	if rm == nil {
		return nil
	}
	out := make(chan caughtUpResult, 1)
	go func() {
		deadline := from.Add(limit)
		t := time.NewTicker(readModelCheck)
		defer t.Stop()
		for {
			behind, err := rm.behind(rm.ctx)
			failing, isFailing := errors.AsType[*projection.FailingError](err)
			switch {
			case isFailing && failing.GaveUp, err != nil && !isFailing:
				out <- caughtUpResult{err: err}
				return
			case behind == 0:
				out <- caughtUpResult{after: time.Since(from)}
				return
			case time.Now().After(deadline) && isFailing:
				out <- caughtUpResult{err: fmt.Errorf("still %d events behind %s after the last operation: %w", behind, limit, err)}
				return
			case time.Now().After(deadline):
				out <- caughtUpResult{err: fmt.Errorf("still %d events behind %s after the last operation", behind, limit)}
				return
			}
			select {
			case <-rm.ctx.Done():
				out <- caughtUpResult{err: rm.ctx.Err()}
				return
			case <-t.C:
			}
		}
	}()
	return out
}

// verify waits for caughtUp, then compares the read model with the verified
// balances (indexed like ids; an account without events has no row and
// counts as 0).
func (rm *readModel) verify(ctx context.Context, ids []string, verified []atomic.Int64, caughtUp <-chan caughtUpResult) (ReadModelVerified, error) {
	var v ReadModelVerified
	c := <-caughtUp
	if c.err != nil {
		return v, fmt.Errorf("read model: %w", c.err)
	}
	v.CaughtUp = c.after
	rows, _, err := rm.table.read(ctx)
	if err != nil {
		return v, err
	}
	for i, id := range ids {
		have, ok := rows[id]
		if ok {
			v.Accounts++
			v.Total += have
			delete(rows, id)
		}
		if want := verified[i].Load(); have != want {
			v.Mismatches = append(v.Mismatches, Mismatch{ID: id, Have: have, Want: want})
		}
	}
	v.Others = len(rows)
	return v, nil
}
