package engine

// Group commit: the queue of callers' writes, the leaders that take
// batches from it, and the store calls that carry them.

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/annals-go/annals/journal"
)

// writeQueue holds the requests no leader has taken yet, in arrival
// order. Invariant: writes is the number of atomic writes in reqs.
type writeQueue[W any] struct {
	reqs   []*request[W]
	writes int
}

// flights is the state of the leaders and their store calls.
// Invariants: 0 ≤ calls ≤ leaders ≤ Config.MaxCalls; flying is the number
// of atomic writes in the calls in flight (0 when calls is 0); each
// lingering leader is counted in leaders and waits on its wake channel,
// which is closed once, by wakeLingering.
type flights struct {
	leaders   int           // running leaders
	calls     int           // store calls in flight
	flying    int           // atomic writes in calls in flight
	expected  int           // writes expected back after the last call (see run)
	lastCall  time.Duration // duration of the last call
	lingering []*linger     // leaders waiting for the queue to hold want writes, or for a call to end
}

// request is one caller's writes in the queue. Requests are recycled
// through Front.requests once their caller has its result.
type request[W any] struct {
	ctx    context.Context
	writes []W
	fence  journal.Fence // zero: none (see Front.WriteFenced)
	one    [1]W          // Persist's write, without an allocation
	done   chan result
	taken  bool // guarded by core.mu: in a batch, no longer cancellable
}

type result struct {
	errs []error
	err  error
}

// linger is a leader waiting for the queue to hold want writes.
type linger struct {
	want int
	wake chan struct{}
}

// submit sends writes through the group-commit queue under fence (the
// zero Fence: none) and returns their results (see Front.WriteFenced).
func (f *core[W]) submit(ctx context.Context, writes []W, fence journal.Fence) ([]error, error) {
	if len(writes) == 0 {
		return nil, nil
	}
	req := f.requests.Get().(*request[W])
	req.writes, req.fence = writes, fence
	return f.write(ctx, req)
}

// persist sends one write under fence and returns its result: nil when it
// is stored, the store's rejection, or the whole call's error.
func (f *core[W]) persist(ctx context.Context, w W, fence journal.Fence) error {
	req := f.requests.Get().(*request[W])
	req.one[0] = w
	req.writes, req.fence = req.one[:], fence
	errs, err := f.write(ctx, req)
	if err != nil {
		return err
	}
	if errs != nil {
		return errs[0]
	}
	return nil
}

// write queues req (from f.requests, with its writes set), waits for its
// result and recycles it unless its call may still answer it.
func (f *core[W]) write(ctx context.Context, req *request[W]) ([]error, error) {
	if err := ctx.Err(); err != nil {
		f.recycle(req)
		return nil, err
	}
	req.ctx = ctx
	writes := req.writes
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		f.recycle(req)
		return nil, ErrClosed
	}
	f.q.reqs = append(f.q.reqs, req)
	f.q.writes += len(writes)
	for _, w := range writes {
		f.ids.pending[f.idOf(w)]++
	}
	f.wakeLingering(false)
	switch {
	case f.fl.leaders == 0:
		f.fl.leaders++
		batch := f.take()
		f.mu.Unlock()
		f.send(batch)
		f.handOff()
		r := <-req.done
		f.recycle(req)
		return r.errs, r.err
	case f.fl.leaders < f.cfg.MaxCalls:
		f.fl.leaders++
		go f.run()
	}
	f.mu.Unlock()
	select {
	case r := <-req.done:
		f.recycle(req)
		return r.errs, r.err
	case <-ctx.Done():
		f.mu.Lock()
		select {
		case r := <-req.done: // answered meanwhile: the outcome is known
			f.mu.Unlock()
			f.recycle(req)
			return r.errs, r.err
		default:
		}
		if req.taken { // its call will still answer it: not recycled
			f.mu.Unlock()
			return nil, fmt.Errorf("engine: write abandoned, outcome unknown: %w", ctx.Err())
		}
		for i, r := range f.q.reqs {
			if r == req {
				f.q.reqs = append(f.q.reqs[:i], f.q.reqs[i+1:]...)
				f.q.writes -= len(writes)
				break
			}
		}
		f.answered(writes)
		f.mu.Unlock()
		f.recycle(req)
		return nil, ctx.Err()
	}
}

// recycle returns a request whose result has been taken (or that was never
// queued) to the pool.
func (f *core[W]) recycle(req *request[W]) {
	var zero W
	req.ctx, req.writes, req.one[0], req.taken, req.fence = nil, nil, zero, false, journal.Fence{}
	f.requests.Put(req)
}

// wakeLingering wakes the lingering leaders whose batch is full, or all of
// them when all. f.mu is held.
func (f *core[W]) wakeLingering(all bool) {
	kept := f.fl.lingering[:0]
	for _, l := range f.fl.lingering {
		if all || f.q.writes >= l.want {
			close(l.wake)
			continue
		}
		kept = append(kept, l)
	}
	clear(f.fl.lingering[len(kept):])
	f.fl.lingering = kept
}

// take removes the next batch from the queue: in queue order, the requests
// none of whose ids has a write in flight or in a request passed over, at
// most MaxBatchSize atomic writes, never splitting one caller's writes. It
// marks their ids in flight. f.mu is held.
func (f *core[W]) take() []*request[W] {
	var batch []*request[W]
	var passed map[string]bool // ids of requests passed over
	kept, size := f.q.reqs[:0], 0
	for i, r := range f.q.reqs {
		if len(batch) > 0 && size+len(r.writes) > f.cfg.MaxBatchSize {
			kept = append(kept, f.q.reqs[i:]...)
			break
		}
		if f.blocked(r, passed) {
			if passed == nil {
				passed = map[string]bool{}
			}
			for _, w := range r.writes {
				passed[f.idOf(w)] = true
			}
			kept = append(kept, r)
			continue
		}
		r.taken = true
		batch = append(batch, r)
		size += len(r.writes)
		for _, w := range r.writes {
			f.ids.inFlight[f.idOf(w)]++
		}
	}
	clear(f.q.reqs[len(kept):])
	f.q.reqs = kept
	f.q.writes -= size
	if len(batch) > 0 {
		f.fl.calls++
		f.fl.flying += size
	}
	return batch
}

// blocked reports whether one of r's ids has a write in flight or was
// passed over. f.mu is held.
func (f *core[W]) blocked(r *request[W], passed map[string]bool) bool {
	if len(f.ids.inFlight) == 0 && passed == nil {
		return false
	}
	for _, w := range r.writes {
		if id := f.idOf(w); f.ids.inFlight[id] > 0 || passed[id] {
			return true
		}
	}
	return false
}

// handOff ends the call of a caller that led it: with writes queued, a new
// goroutine leads on; otherwise the leader stops.
func (f *core[W]) handOff() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.q.reqs) > 0 {
		go f.run()
		return
	}
	f.stop()
}

// stop ends a leader. f.mu is held.
func (f *core[W]) stop() {
	if f.fl.leaders--; f.fl.leaders == 0 {
		f.idle.Broadcast()
	}
}

// run leads batches while writes keep coming.
//
// Lingering: the callers answered by a call tend to write again at once. So
// a leader aims for a batch of its share of the writes expected back (the
// writes of the call that ended last, of the calls still in flight then,
// and of the queue then), shared among as many calls in flight as allowed
// (at most MaxCalls, and one per SplitWrites expected writes); and at most
// MaxBatchSize. It takes the batch once the queue holds that many, or after
// a linger of half the last call's duration (at most MaxLinger). Without
// this, a steady load of n writers would split into ever smaller batches,
// each paying a commit; and a fast store is never kept waiting long. A
// leader waits for a call to end while as many calls as allowed are in
// flight, or while every queued write waits for a write of its id in
// flight.
func (f *core[W]) run() {
	f.mu.Lock()
	for {
		target := f.target()
		if f.q.writes < target && !f.closed && f.fl.lastCall > 0 {
			f.wait(target, min(f.cfg.MaxLinger, f.fl.lastCall/2))
		}
		if f.fl.calls >= f.allowed() && len(f.q.reqs) > 0 {
			f.wait(math.MaxInt, 0) // until a call ends
			continue
		}
		batch := f.take()
		if len(batch) == 0 {
			if len(f.q.reqs) == 0 {
				f.stop()
				f.mu.Unlock()
				return
			}
			f.wait(f.q.writes+1, 0) // every queued write waits for one in flight
			continue
		}
		f.mu.Unlock()
		f.send(batch)
		f.mu.Lock()
	}
}

// allowed is how many calls may be in flight now: one per SplitWrites
// writes expected, at least one, at most MaxCalls. f.mu is held.
func (f *core[W]) allowed() int {
	return min(f.cfg.MaxCalls, max(1, f.fl.expected/f.cfg.SplitWrites))
}

// target is the batch a leader aims for. f.mu is held.
func (f *core[W]) target() int {
	n := f.allowed()
	return min(f.cfg.MaxBatchSize, (f.fl.expected+n-1)/n)
}

// wait releases f.mu until the queue holds want writes, a call ends, or
// (when d > 0) d has passed. f.mu is held.
func (f *core[W]) wait(want int, d time.Duration) {
	l := &linger{want: want, wake: make(chan struct{})}
	f.fl.lingering = append(f.fl.lingering, l)
	f.mu.Unlock()
	if d > 0 {
		timer := time.NewTimer(d)
		select {
		case <-l.wake:
		case <-timer.C:
		}
		timer.Stop()
	} else {
		<-l.wake
	}
	f.mu.Lock()
	for i, x := range f.fl.lingering {
		if x == l {
			f.fl.lingering = append(f.fl.lingering[:i], f.fl.lingering[i+1:]...)
			break
		}
	}
}

// send makes one store call for the live requests of batch, ends their
// in-flight counts, answers each and wakes the lingering leaders.
func (f *core[W]) send(batch []*request[W]) {
	live := batch[:0:0]
	n := 0
	for _, r := range batch {
		n += len(r.writes)
	}
	writes := make([]W, 0, n)
	tokened := false // a live request carries a fencing token for the store to check
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			f.finish(r, result{err: err})
			continue
		}
		if r.fence.Open != nil {
			if err := r.fence.Open(); err != nil {
				f.finish(r, result{err: fmt.Errorf("%w: %w", ErrFenced, err)})
				continue
			}
		}
		tokened = tokened || !r.fence.Token.IsZero()
		live = append(live, r)
		writes = append(writes, r.writes...)
	}
	if len(live) == 0 {
		f.mu.Lock()
		f.fl.calls--
		f.fl.flying -= n
		f.wakeLingering(true)
		f.mu.Unlock()
		return
	}
	queued := 0
	if len(f.hooks.writeCall) > 0 {
		f.mu.Lock()
		queued = f.q.writes
		f.mu.Unlock()
	}
	start := time.Now()
	// The call carries its first caller's values (a tracer's span, for a
	// driver that traces), never a caller's cancellation: it is shared.
	ctx, end := f.calls.start(context.WithoutCancel(live[0].ctx))
	defer end()
	var tokens []journal.FenceToken
	if f.tokens && tokened {
		tokens = make([]journal.FenceToken, 0, len(writes))
		for _, r := range live {
			for range r.writes {
				tokens = append(tokens, r.fence.Token)
			}
		}
	}
	out, err := f.breaker.Execute(func() (any, error) {
		errs, err := f.store(ctx, writes, tokens)
		if err == nil && errs != nil && len(errs) != len(writes) {
			err = fmt.Errorf("engine: store returned %d results for %d atomic writes: outcome unknown", len(errs), len(writes))
		}
		return errs, f.callError(ctx, err)
	})
	errs, _ := out.([]error)
	err = breakerError(err)
	took := time.Since(start)
	f.mu.Lock()
	f.fl.lastCall = took
	f.fl.calls--
	f.fl.flying -= n
	f.fl.expected = n + f.fl.flying + f.q.writes
	f.landed(writes)
	f.wakeLingering(true)
	f.mu.Unlock()
	var contexts []context.Context
	if len(f.hooks.writeCall) > 0 {
		contexts = make([]context.Context, len(live))
		for i, r := range live {
			contexts[i] = r.ctx
		}
	}
	at := 0
	for _, r := range live {
		res := result{err: err}
		if err == nil && errs != nil {
			res.errs = journal.Results(errs[at : at+len(r.writes)])
		}
		at += len(r.writes)
		r.done <- res
	}
	// The hooks run once the callers have their answers.
	if len(f.hooks.writeCall) > 0 {
		call := WriteCall{Writes: len(writes), Queued: queued, Start: start, Duration: took, Err: err, Contexts: contexts}
		for _, w := range writes {
			call.Events += f.events(w)
		}
		for _, e := range errs {
			if e != nil {
				call.Rejected++
			}
		}
		for _, h := range f.hooks.writeCall {
			h.OnWriteCall(call)
		}
	}
}

// finish ends the in-flight count of a request that is not sent, and
// answers it.
func (f *core[W]) finish(r *request[W], res result) {
	f.mu.Lock()
	f.landed(r.writes)
	f.mu.Unlock()
	r.done <- res
}
