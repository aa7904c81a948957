package engine

// Grouped recovery reads: the recoveries that wait for a turn among the
// MaxReads are read together, a group per turn, when the journal is a
// recovery.BatchReader (see Front.ReadRecovery).

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/annals-go/annals/recovery"
)

// MaxRecoveryGroup is the most recoveries one grouped read asks for.
const MaxRecoveryGroup = 32

// recoveryWait is a recovery waiting in the front's group queue, then
// its answer.
type recoveryWait struct {
	ctx   context.Context
	req   recovery.Request
	res   recovery.Result
	err   error
	done  chan struct{} // closed once res and err are set
	taken bool          // in a group (guarded by the queue's mu)
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
// gives the turn back. The call runs under no caller's context (the
// first one's values, without its cancellation): a caller who leaves does
// not end the others' read.
func (f *Front) readGroup(br recovery.BatchReader, group []*recoveryWait) {
	defer func() { <-f.reads }()
	answer := func(w *recoveryWait, res recovery.Result, err error) {
		w.res, w.err = res, err
		close(w.done)
	}
	live := group[:0]
	for _, w := range group {
		if err := w.ctx.Err(); err != nil {
			answer(w, recovery.Result{}, err) // gone already: not read
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
			answer(w, results[i], nil)
		}
		return
	}
	if len(live) == 1 {
		answer(live[0], recovery.Result{}, err)
		return
	}
	// One request may be what fails the group: each is read alone, with
	// its own outcome.
	for _, w := range live {
		res, err := guardedCall(ctx, &f.core, func(ctx context.Context) (recovery.Result, error) {
			return br.ReadRecovery(ctx, w.req)
		})
		answer(w, res, err)
	}
}
