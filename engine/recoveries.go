package engine

// Grouped recovery reads: the recoveries that wait for a turn among the
// MaxReads are read together, a group per turn, when the journal is a
// recovery.BatchReader (see Front.ReadRecovery).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/recovery"
)

// MaxRecoveryGroup is the most recoveries one grouped read asks for.
const MaxRecoveryGroup = 32

// recoveryWait is a recovery waiting in the front's group queue, then
// its answer.
type recoveryWait struct {
	ctx      context.Context
	req      recovery.Request
	res      recovery.Result
	err      error
	panicked any           // a store's panic, raised again on the caller's goroutine
	done     chan struct{} // closed once res, err and panicked are set
	taken    bool          // in a group (guarded by the queue's mu)
	answered bool          // done is closed (only the group's goroutine touches it)
}

// answer gives w its outcome, once: a later answer is ignored.
func (w *recoveryWait) answer(res recovery.Result, err error, panicked any) {
	if w.answered {
		return
	}
	w.answered = true
	w.res, w.err, w.panicked = res, err, panicked
	close(w.done)
}

// recoveryQueue holds the recoveries waiting for a group, oldest first.
type recoveryQueue struct {
	mu      sync.Mutex
	waiting []*recoveryWait
}

func (q *recoveryQueue) push(w *recoveryWait) {
	q.mu.Lock()
	q.waiting = append(q.waiting, w)
	q.mu.Unlock()
}

// take removes and returns the oldest waiting recoveries, at most n.
func (q *recoveryQueue) take(n int) []*recoveryWait {
	q.mu.Lock()
	defer q.mu.Unlock()
	n = min(n, len(q.waiting))
	if n == 0 {
		return nil
	}
	group := slices.Clone(q.waiting[:n])
	clear(q.waiting[:n])
	q.waiting = q.waiting[n:]
	if len(q.waiting) == 0 {
		q.waiting = nil // not the array of a long burst
	}
	for _, w := range group {
		w.taken = true
	}
	return group
}

// isTaken reports whether w is in a group.
func (q *recoveryQueue) isTaken(w *recoveryWait) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return w.taken
}

// remove takes w out of the queue unless a group has it.
func (q *recoveryQueue) remove(w *recoveryWait) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if i := slices.Index(q.waiting, w); i >= 0 {
		q.waiting = slices.Delete(q.waiting, i, i+1)
	}
}

// readRecoveryInGroup reads req alone if a turn is free, else in a group.
func (f *Front) readRecoveryInGroup(ctx context.Context, br recovery.BatchReader, req recovery.Request) (recovery.Result, error) {
	select {
	case f.reads <- struct{}{}:
		defer func() { <-f.reads }()
		return guardedCall(ctx, &f.core, func(ctx context.Context) (recovery.Result, error) {
			return br.ReadRecovery(ctx, req)
		})
	default:
	}
	w := &recoveryWait{ctx: ctx, req: req, done: make(chan struct{})}
	f.groups.push(w)
	turns := f.reads // nil once w is in a group: it then only waits
	for {
		select {
		case <-w.done:
			if w.panicked != nil {
				panic(w.panicked) // the store's, as a read alone raises it
			}
			return w.res, w.err
		case <-ctx.Done():
			f.groups.remove(w)
			return recovery.Result{}, ctx.Err()
		case turns <- struct{}{}:
			group := f.groups.take(MaxRecoveryGroup)
			if len(group) == 0 {
				<-f.reads // w is in a group that another turn reads
				turns = nil
				continue
			}
			go f.readGroup(br, group)
			if f.groups.isTaken(w) {
				turns = nil
			}
		}
	}
}

// readGroup reads group's recoveries in the turn its caller took, then
// gives the turn back. The group's call runs under no caller's context
// (the first one's values, without its cancellation): a caller who leaves
// does not end the others' read. When it fails with an error that may be
// one request's, the requests of the callers still waiting are read one
// by one, each under its caller's own context and its own breaker call;
// an error that fails every request alike (the call timeout, the open
// breaker, the closed journal) answers them all at once, without reading
// again from a store that is slow or down. A panic of the store is raised
// again on the goroutine of each caller not yet answered.
func (f *Front) readGroup(br recovery.BatchReader, group []*recoveryWait) {
	defer func() { <-f.reads }()
	defer func() {
		if p := recover(); p != nil {
			for _, w := range group {
				w.answer(recovery.Result{}, nil, p)
			}
		}
	}()
	var live []*recoveryWait
	for _, w := range group {
		if err := w.ctx.Err(); err != nil {
			w.answer(recovery.Result{}, err, nil) // gone already: not read
			continue
		}
		live = append(live, w)
	}
	if len(live) == 0 {
		return
	}
	ctx := context.WithoutCancel(live[0].ctx)
	reqs := make([]recovery.Request, len(live))
	for i, w := range live {
		reqs[i] = w.req
	}
	results, err := guardedCall(ctx, &f.core, func(ctx context.Context) ([]recovery.Result, error) {
		return br.ReadRecoveries(ctx, reqs)
	})
	if err == nil && len(results) != len(live) {
		err = fmt.Errorf("engine: the store answered %d results to %d grouped recoveries", len(results), len(live))
	}
	if err == nil {
		for i, w := range live {
			w.answer(results[i], nil, nil)
		}
		return
	}
	if len(live) == 1 || failsEveryRequest(err) {
		for _, w := range live {
			w.answer(recovery.Result{}, err, nil)
		}
		return
	}
	// One request may be what fails the group: each is read alone, with
	// its own outcome, for the callers who still wait.
	for _, w := range live {
		if err := w.ctx.Err(); err != nil {
			w.answer(recovery.Result{}, err, nil)
			continue
		}
		res, err := guardedCall(w.ctx, &f.core, func(ctx context.Context) (recovery.Result, error) {
			return br.ReadRecovery(ctx, w.req)
		})
		w.answer(res, err, nil)
	}
}

// failsEveryRequest reports whether err, a group's failure, is the call's
// rather than one request's: the call timeout, the open breaker or the
// closed journal.
func failsEveryRequest(err error) bool {
	return errors.Is(err, ErrCallTimeout) || errors.Is(err, ErrCircuitOpen) || errors.Is(err, journal.ErrClosed)
}
