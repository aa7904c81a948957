// Package engine holds the machinery between entities and a store. Its
// journal front batches writes (group commit), keeps each persistence id's
// writes in order, makes highest-sequence-number reads wait for the writes
// in flight, enforces call timeouts and protects the store with a circuit
// breaker.
package engine

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/recovery"
	"github.com/annals-go/annals/snapshot"
	"github.com/sony/gobreaker/v2"
)

// Defaults of Config, Akka's journal circuit-breaker settings.
const (
	DefaultMaxFailures  = 10
	DefaultCallTimeout  = 10 * time.Second
	DefaultResetTimeout = 30 * time.Second
	DefaultMaxBatchSize = 1000
	DefaultMaxLinger    = 5 * time.Millisecond
	DefaultMaxCalls     = 2
)

var (
	// ErrCircuitOpen is returned while the circuit breaker is open (or half
	// open and already probing): the call was not sent to the store, so its
	// writes are not stored.
	ErrCircuitOpen = errors.New("engine: journal circuit breaker is open")
	// ErrCallTimeout wraps a store call that exceeded Config.CallTimeout.
	// For writes the outcome is unknown.
	ErrCallTimeout = errors.New("engine: journal call timed out")
	// ErrClosed is returned by calls on a closed Front. It wraps
	// journal.ErrClosed, as the journal contract the front keeps asks.
	ErrClosed = fmt.Errorf("engine: journal front closed: %w", journal.ErrClosed)
)

// Config configures a Front. The zero value of a field selects its default.
type Config struct {
	// MaxBatchSize is the most atomic writes sent in one store call
	// (default DefaultMaxBatchSize = 1000). One caller's writes are never
	// split; a caller with more goes alone.
	MaxBatchSize int
	// MaxLinger caps how long the batcher holds queued writes, while the
	// store is free, waiting for the writers it just answered to write again
	// (default DefaultMaxLinger = 5 ms). The linger is also at most half the
	// duration of the previous store call, so a fast store never waits long,
	// and a lone writer, whose next write is all there is to wait for, never
	// waits.
	MaxLinger time.Duration
	// MaxCalls is how many Write calls to the store may be in flight at
	// once (default DefaultMaxCalls = 2). With more than one, the next batch
	// goes to the store while the previous one is still being written, so
	// the store is not left idle while the writers it just answered come
	// back; a batch never holds a write of a persistence id that has a
	// write in flight, so each id's writes are still stored in order. The
	// writes are split across calls only when each call would carry at
	// least 200 (below that, the commit a second call pays costs more than
	// the wait it hides). With 1, batches reach the store one at a time, in
	// arrival order.
	MaxCalls int
	// CallTimeout bounds each Write, HighestSequenceNr and DeleteTo call to
	// the store (default DefaultCallTimeout = 10 s). Replay is not bounded,
	// as in Akka: it can take long and is bounded by the caller's context.
	CallTimeout time.Duration
	// MaxFailures is how many consecutive failed store calls open the
	// circuit breaker (default DefaultMaxFailures = 10). Rejections, invalid
	// arguments and callers' cancellations are not failures.
	MaxFailures uint32
	// ResetTimeout is how long the breaker stays open before it lets one
	// call probe the store (default DefaultResetTimeout = 30 s).
	ResetTimeout time.Duration
	// Logger receives the circuit breaker's state changes (default
	// slog.Default()).
	Logger *slog.Logger
	// Hooks are called on the front's events: each value for the hook
	// interfaces it implements (HookWriteCall, HookBreakerStateChange).
	Hooks []any
	// MaxReads is how many HighestSequenceNr, ReadRecovery and DeleteTo
	// calls may be in flight to the store at once (default: what the
	// journal's ConcurrentReads reports, see ReadCapacity; unbounded when
	// it does not). A call beyond it waits for a turn before its
	// CallTimeout starts, bounded only by its caller's context, and the
	// breaker does not count the wait: a burst of recoveries queues in the
	// front instead of in the store's connection pool, where the wait
	// would time calls out and open the breaker while the store is healthy.
	MaxReads int
}

// ReadCapacity is implemented by a journal whose calls queue for a bounded
// resource, such as a connection pool. The front uses ConcurrentReads as
// its default Config.MaxReads.
type ReadCapacity interface {
	// ConcurrentReads returns how many read calls the journal serves at
	// once without queueing, leaving room for the front's writes (at least
	// 1).
	ConcurrentReads() int
}

// Validate reports a negative setting; zero settings take their defaults.
func (c Config) Validate() error {
	switch {
	case c.MaxBatchSize < 0:
		return fmt.Errorf("engine: MaxBatchSize %d is negative", c.MaxBatchSize)
	case c.MaxCalls < 0:
		return fmt.Errorf("engine: MaxCalls %d is negative", c.MaxCalls)
	case c.MaxLinger < 0:
		return fmt.Errorf("engine: MaxLinger %v is negative", c.MaxLinger)
	case c.CallTimeout < 0:
		return fmt.Errorf("engine: CallTimeout %v is negative", c.CallTimeout)
	case c.ResetTimeout < 0:
		return fmt.Errorf("engine: ResetTimeout %v is negative", c.ResetTimeout)
	case c.MaxReads < 0:
		return fmt.Errorf("engine: MaxReads %d is negative", c.MaxReads)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.MaxBatchSize == 0 {
		c.MaxBatchSize = DefaultMaxBatchSize
	}
	if c.MaxLinger == 0 {
		c.MaxLinger = DefaultMaxLinger
	}
	if c.MaxCalls == 0 {
		c.MaxCalls = DefaultMaxCalls
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	if c.MaxFailures == 0 {
		c.MaxFailures = DefaultMaxFailures
	}
	if c.ResetTimeout == 0 {
		c.ResetTimeout = DefaultResetTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Front is the journal front: it stands before a journal.Journal and itself
// implements journal.Journal, adding these rules:
//
//   - Group commit: the atomic writes of all callers that arrive while the
//     store is busy queue up and go to the store together in one Write
//     call (at most MaxBatchSize; see MaxLinger for how long a batch may
//     wait to fill). At most MaxCalls store calls are in flight at once,
//     more than one only under loads of at least 200 writes per call.
//   - Order: the writes of one persistence id reach the store in the order
//     they arrived, and a batch never holds a write of an id that has a
//     write in flight, so a write is sent only after every earlier write of
//     its id has been answered. With MaxCalls 1, all writes reach the store
//     in arrival order.
//   - HighestSequenceNr and DeleteTo for an id first wait until the writes
//     for that id that were accepted before the call have been answered.
//   - Every Write, HighestSequenceNr and DeleteTo store call is bounded by
//     CallTimeout and passes through a circuit breaker; while it is open,
//     calls fail at once with ErrCircuitOpen.
//   - At most MaxReads HighestSequenceNr, ReadRecovery and DeleteTo calls
//     are in flight; others wait for a turn, bounded by their caller's
//     context alone, outside CallTimeout and the breaker.
//   - A caller whose context ends while its writes still wait in the queue
//     gets the context's error, and those writes are not sent. Once sent,
//     the outcome of an abandoned write is unknown.
//
// Leaders: store calls are made by leaders, at most MaxCalls of them, each
// taking batches from the one queue while writes keep coming. A caller that
// finds no leader leads its own call on its own goroutine (a lone writer
// pays no goroutine hand-off); a caller that queues while fewer than
// MaxCalls leaders run starts another on a new goroutine. The leading
// caller returns once its own call is answered (within CallTimeout), even
// if its context ended earlier.
//
// Close does not close the journal behind the front.
type Front struct {
	j       journal.Journal
	cfg     Config
	breaker *gobreaker.CircuitBreaker[any]
	reads   chan struct{} // turns of the guarded reads; nil: unbounded
	hooks   hooks

	mu       sync.Mutex
	idle     sync.Cond // signalled when leaders drops to 0
	queue    []*request
	queued   int // atomic writes in queue
	leaders  int // running leaders, at most cfg.MaxCalls
	closed   bool
	pending  map[string]int             // unanswered writes per id, queued or in flight
	waiters  map[string][]chan struct{} // closed when pending[id] drops to 0
	inFlight map[string]int             // atomic writes per id in calls in flight
	// Lingering (see run): leaders waiting for the queue to hold want
	// writes, or for a call to end.
	lingering []*linger
	calls     int           // store calls in flight
	flying    int           // atomic writes in calls in flight
	expected  int           // writes expected back after the last call (see run)
	lastCall  time.Duration // duration of the last call

	requests sync.Pool // of *request
}

// request is one caller's writes in the queue. Requests are recycled
// through Front.requests once their caller has its result.
type request struct {
	ctx    context.Context
	writes []journal.AtomicWrite
	one    [1]journal.AtomicWrite // Persist's write, without an allocation
	done   chan result
	taken  bool // guarded by Front.mu: in a batch, no longer cancellable
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

var _ journal.Journal = (*Front)(nil)

// NewFront starts a journal front before j.
func NewFront(j journal.Journal, cfg Config) (*Front, error) {
	if j == nil {
		return nil, errors.New("engine: NewFront with a nil journal")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if rc, ok := j.(ReadCapacity); ok && cfg.MaxReads == 0 {
		cfg.MaxReads = max(1, rc.ConcurrentReads())
	}
	f := &Front{
		j:        j,
		cfg:      cfg,
		pending:  map[string]int{},
		waiters:  map[string][]chan struct{}{},
		inFlight: map[string]int{},
	}
	if cfg.MaxReads > 0 {
		f.reads = make(chan struct{}, cfg.MaxReads)
	}
	f.hooks = newHooks(cfg.Hooks)
	f.idle.L = &f.mu
	f.requests.New = func() any { return &request{done: make(chan result, 1)} }
	f.breaker = gobreaker.NewCircuitBreaker[any](gobreaker.Settings{
		Name:        "journal",
		MaxRequests: 1,
		Timeout:     cfg.ResetTimeout,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= cfg.MaxFailures },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			f.breakerChanged(breakerState(from), breakerState(to))
		},
		IsExcluded: func(err error) bool {
			var gone *callerGone
			return errors.As(err, &gone) || errors.Is(err, context.Canceled) || errors.Is(err, journal.ErrInvalidArgument)
		},
	})
	return f, nil
}

// Config returns the front's configuration with defaults filled in.
func (f *Front) Config() Config { return f.cfg }

// Write implements journal.Journal.Write through the group-commit queue: the
// writes of this call are sent in one store call, possibly together with
// other callers' writes. Results follow the journal contract; a whole-call
// error wraps ErrCircuitOpen (not sent), ErrCallTimeout (outcome unknown) or
// the store's error (outcome unknown), or is ErrClosed or ctx's error.
func (f *Front) Write(ctx context.Context, writes []journal.AtomicWrite) ([]error, error) {
	if len(writes) == 0 {
		return nil, nil
	}
	req := f.requests.Get().(*request)
	req.writes = writes
	return f.write(ctx, req)
}

// Persist writes one atomic write and returns nil when it is stored; an
// error wrapping journal.ErrRejected when it is definitely not stored; any
// other error when the outcome is unknown or the write was not sent.
func (f *Front) Persist(ctx context.Context, w journal.AtomicWrite) error {
	req := f.requests.Get().(*request)
	req.one[0] = w
	req.writes = req.one[:]
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
func (f *Front) write(ctx context.Context, req *request) ([]error, error) {
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
	f.queue = append(f.queue, req)
	f.queued += len(writes)
	for _, w := range writes {
		f.pending[w.PersistenceID]++
	}
	f.wakeLingering(false)
	switch {
	case f.leaders == 0:
		f.leaders++
		batch := f.take()
		f.mu.Unlock()
		f.send(batch)
		f.handOff()
		r := <-req.done
		f.recycle(req)
		return r.errs, r.err
	case f.leaders < f.cfg.MaxCalls:
		f.leaders++
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
		for i, r := range f.queue {
			if r == req {
				f.queue = append(f.queue[:i], f.queue[i+1:]...)
				f.queued -= len(writes)
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
func (f *Front) recycle(req *request) {
	req.ctx, req.writes, req.one[0], req.taken = nil, nil, journal.AtomicWrite{}, false
	f.requests.Put(req)
}

// wakeLingering wakes the lingering leaders whose batch is full, or all of
// them when all. f.mu is held.
func (f *Front) wakeLingering(all bool) {
	kept := f.lingering[:0]
	for _, l := range f.lingering {
		if all || f.queued >= l.want {
			close(l.wake)
			continue
		}
		kept = append(kept, l)
	}
	clear(f.lingering[len(kept):])
	f.lingering = kept
}

// take removes the next batch from the queue: in queue order, the requests
// none of whose ids has a write in flight or in a request passed over, at
// most MaxBatchSize atomic writes, never splitting one caller's writes. It
// marks their ids in flight. f.mu is held.
func (f *Front) take() []*request {
	var batch []*request
	var passed map[string]bool // ids of requests passed over
	kept, size := f.queue[:0], 0
	for i, r := range f.queue {
		if len(batch) > 0 && size+len(r.writes) > f.cfg.MaxBatchSize {
			kept = append(kept, f.queue[i:]...)
			break
		}
		if f.blocked(r, passed) {
			if passed == nil {
				passed = map[string]bool{}
			}
			for _, w := range r.writes {
				passed[w.PersistenceID] = true
			}
			kept = append(kept, r)
			continue
		}
		r.taken = true
		batch = append(batch, r)
		size += len(r.writes)
		for _, w := range r.writes {
			f.inFlight[w.PersistenceID]++
		}
	}
	clear(f.queue[len(kept):])
	f.queue = kept
	f.queued -= size
	if len(batch) > 0 {
		f.calls++
		f.flying += size
	}
	return batch
}

// blocked reports whether one of r's ids has a write in flight or was
// passed over. f.mu is held.
func (f *Front) blocked(r *request, passed map[string]bool) bool {
	if len(f.inFlight) == 0 && passed == nil {
		return false
	}
	for _, w := range r.writes {
		if f.inFlight[w.PersistenceID] > 0 || passed[w.PersistenceID] {
			return true
		}
	}
	return false
}

// answered ends the in-flight count of writes and releases the waiters of
// ids with none left. f.mu is held.
func (f *Front) answered(writes []journal.AtomicWrite) {
	for _, w := range writes {
		pid := w.PersistenceID
		if f.pending[pid]--; f.pending[pid] == 0 {
			delete(f.pending, pid)
			for _, ch := range f.waiters[pid] {
				close(ch)
			}
			delete(f.waiters, pid)
		}
	}
}

// landed ends the flight of writes taken into a call, and their in-flight
// counts. f.mu is held.
func (f *Front) landed(writes []journal.AtomicWrite) {
	for _, w := range writes {
		if f.inFlight[w.PersistenceID]--; f.inFlight[w.PersistenceID] == 0 {
			delete(f.inFlight, w.PersistenceID)
		}
	}
	f.answered(writes)
}

// handOff ends the call of a caller that led it: with writes queued, a new
// goroutine leads on; otherwise the leader stops.
func (f *Front) handOff() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.queue) > 0 {
		go f.run()
		return
	}
	f.stop()
}

// stop ends a leader. f.mu is held.
func (f *Front) stop() {
	if f.leaders--; f.leaders == 0 {
		f.idle.Broadcast()
	}
}

// splitAt is the fewest writes a call must expect for the writes to be
// split across more than one call in flight: below it, the commit that
// each call pays costs more than the wait for the writers, that a second
// call in flight hides.
const splitAt = 200

// run leads batches while writes keep coming.
//
// Lingering: the callers answered by a call tend to write again at once. So
// a leader aims for a batch of its share of the writes expected back (the
// writes of the call that ended last, of the calls still in flight then,
// and of the queue then), shared among as many calls in flight as allowed
// (at most MaxCalls, and one per splitAt expected writes); and at most
// MaxBatchSize. It takes the batch once the queue holds that many, or after
// a linger of half the last call's duration (at most MaxLinger). Without
// this, a steady load of n writers would split into ever smaller batches,
// each paying a commit; and a fast store is never kept waiting long. A
// leader waits for a call to end while as many calls as allowed are in
// flight, or while every queued write waits for a write of its id in
// flight.
func (f *Front) run() {
	f.mu.Lock()
	for {
		target := f.target()
		if f.queued < target && !f.closed && f.lastCall > 0 {
			f.wait(target, min(f.cfg.MaxLinger, f.lastCall/2))
		}
		if f.calls >= f.allowed() && len(f.queue) > 0 {
			f.wait(math.MaxInt, 0) // until a call ends
			continue
		}
		batch := f.take()
		if len(batch) == 0 {
			if len(f.queue) == 0 {
				f.stop()
				f.mu.Unlock()
				return
			}
			f.wait(f.queued+1, 0) // every queued write waits for one in flight
			continue
		}
		f.mu.Unlock()
		f.send(batch)
		f.mu.Lock()
	}
}

// allowed is how many calls may be in flight now: one per splitAt writes
// expected, at least one, at most MaxCalls. f.mu is held.
func (f *Front) allowed() int {
	return min(f.cfg.MaxCalls, max(1, f.expected/splitAt))
}

// target is the batch a leader aims for. f.mu is held.
func (f *Front) target() int {
	n := f.allowed()
	return min(f.cfg.MaxBatchSize, (f.expected+n-1)/n)
}

// wait releases f.mu until the queue holds want writes, a call ends, or
// (when d > 0) d has passed. f.mu is held.
func (f *Front) wait(want int, d time.Duration) {
	l := &linger{want: want, wake: make(chan struct{})}
	f.lingering = append(f.lingering, l)
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
	for i, x := range f.lingering {
		if x == l {
			f.lingering = append(f.lingering[:i], f.lingering[i+1:]...)
			break
		}
	}
}

// send makes one store call for the live requests of batch, ends their
// in-flight counts, answers each and wakes the lingering leaders.
func (f *Front) send(batch []*request) {
	live := batch[:0:0]
	n := 0
	for _, r := range batch {
		n += len(r.writes)
	}
	writes := make([]journal.AtomicWrite, 0, n)
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			f.finish(r, result{err: err})
			continue
		}
		live = append(live, r)
		writes = append(writes, r.writes...)
	}
	if len(live) == 0 {
		f.mu.Lock()
		f.calls--
		f.flying -= n
		f.wakeLingering(true)
		f.mu.Unlock()
		return
	}
	queued := 0
	if len(f.hooks.writeCall) > 0 {
		f.mu.Lock()
		queued = f.queued
		f.mu.Unlock()
	}
	start := time.Now()
	// The call carries its first caller's values (a tracer's span, for a
	// driver that traces), never a caller's cancellation: it is shared.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(live[0].ctx), f.cfg.CallTimeout)
	defer cancel()
	out, err := f.breaker.Execute(func() (any, error) {
		errs, err := f.j.Write(ctx, writes)
		if err == nil && errs != nil && len(errs) != len(writes) {
			err = fmt.Errorf("engine: store returned %d results for %d atomic writes: outcome unknown", len(errs), len(writes))
		}
		return errs, f.callError(ctx, err)
	})
	errs, _ := out.([]error)
	err = breakerError(err)
	took := time.Since(start)
	f.mu.Lock()
	f.lastCall = took
	f.calls--
	f.flying -= n
	f.expected = n + f.flying + f.queued
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
		call := WriteCall{Writes: len(writes), Queued: queued, Duration: took, Err: err, Contexts: contexts}
		for _, w := range writes {
			call.Events += len(w.Events)
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

// finish ends the in-flight count of a request that is not sent, and
// answers it.
func (f *Front) finish(r *request, res result) {
	f.mu.Lock()
	f.landed(r.writes)
	f.mu.Unlock()
	r.done <- res
}

// awaitWrites waits until the writes for pid accepted before the call have
// been answered.
func (f *Front) awaitWrites(ctx context.Context, pid string) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return ErrClosed
	}
	if f.pending[pid] == 0 {
		f.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	f.waiters[pid] = append(f.waiters[pid], ch)
	f.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// callError marks an error caused by the call timeout.
func (f *Front) callError(ctx context.Context, err error) error {
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

// guarded runs call on the store with the call timeout and the breaker,
// once it has a turn among the MaxReads.
func (f *Front) guarded(ctx context.Context, call func(ctx context.Context) (any, error)) (any, error) {
	if f.reads != nil {
		select {
		case f.reads <- struct{}{}:
			defer func() { <-f.reads }()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	cctx, cancel := context.WithTimeout(ctx, f.cfg.CallTimeout)
	defer cancel()
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
	var gone *callerGone
	if errors.As(err, &gone) {
		return out, gone.err
	}
	return out, breakerError(err)
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
	out, err := f.guarded(ctx, func(ctx context.Context) (any, error) {
		return f.j.HighestSequenceNr(ctx, persistenceID, from)
	})
	n, _ := out.(int64)
	return n, err
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
	_, err := f.guarded(ctx, func(ctx context.Context) (any, error) {
		return nil, f.j.DeleteTo(ctx, persistenceID, to)
	})
	return err
}

// Replay implements journal.Journal.Replay by passing the call to the store.
// It is neither time-bounded nor guarded by the breaker (Akka's rule): a long
// replay is bounded by ctx.
func (f *Front) Replay(ctx context.Context, persistenceID string, from, to, max int64) iter.Seq2[journal.Repr, error] {
	f.mu.Lock()
	closed := f.closed
	f.mu.Unlock()
	if closed {
		return func(yield func(journal.Repr, error) bool) { yield(journal.Repr{}, ErrClosed) }
	}
	return f.j.Replay(ctx, persistenceID, from, to, max)
}

// ReadsSnapshotsOf implements recovery.Reader: it reports whether the
// store behind the front reads recoveries, with snaps' snapshots.
func (f *Front) ReadsSnapshotsOf(snaps snapshot.Store) bool {
	r, ok := f.j.(recovery.Reader)
	return ok && r.ReadsSnapshotsOf(snaps)
}

// ReadRecovery implements recovery.Reader. Like HighestSequenceNr, it first
// waits for the writes of the id accepted before the call, and the read
// runs under the call timeout and the circuit breaker. It fails with an
// error wrapping errors.ErrUnsupported when the store behind the front has
// no recovery reader (ReadsSnapshotsOf is then false for every store).
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
	out, err := f.guarded(ctx, func(ctx context.Context) (any, error) {
		return r.ReadRecovery(ctx, req)
	})
	res, _ := out.(recovery.Result)
	return res, err
}

// Close stops accepting writes (later ones fail with ErrClosed), waits until
// the queued writes have been sent and answered, and returns. It does not
// close the journal behind the front. Close is idempotent.
func (f *Front) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	f.wakeLingering(true) // lingering leaders take their batches now
	for f.leaders > 0 {
		f.idle.Wait()
	}
	return nil
}
