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
	"sync"
	"time"

	"github.com/annals-go/annals/journal"
	"github.com/sony/gobreaker/v2"
)

// Defaults of Config, Akka's journal circuit-breaker settings.
const (
	DefaultMaxFailures  = 10
	DefaultCallTimeout  = 10 * time.Second
	DefaultResetTimeout = 30 * time.Second
	DefaultMaxBatchSize = 1000
	DefaultMaxLinger    = 5 * time.Millisecond
)

var (
	// ErrCircuitOpen is returned while the circuit breaker is open (or half
	// open and already probing): the call was not sent to the store, so its
	// writes are not stored.
	ErrCircuitOpen = errors.New("engine: journal circuit breaker is open")
	// ErrCallTimeout wraps a store call that exceeded Config.CallTimeout.
	// For writes the outcome is unknown.
	ErrCallTimeout = errors.New("engine: journal call timed out")
	// ErrClosed is returned by calls on a closed Front.
	ErrClosed = errors.New("engine: journal front closed")
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
}

// Validate reports a negative setting; zero settings take their defaults.
func (c Config) Validate() error {
	switch {
	case c.MaxBatchSize < 0:
		return fmt.Errorf("engine: MaxBatchSize %d is negative", c.MaxBatchSize)
	case c.MaxLinger < 0:
		return fmt.Errorf("engine: MaxLinger %v is negative", c.MaxLinger)
	case c.CallTimeout < 0:
		return fmt.Errorf("engine: CallTimeout %v is negative", c.CallTimeout)
	case c.ResetTimeout < 0:
		return fmt.Errorf("engine: ResetTimeout %v is negative", c.ResetTimeout)
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
	if c.CallTimeout == 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	if c.MaxFailures == 0 {
		c.MaxFailures = DefaultMaxFailures
	}
	if c.ResetTimeout == 0 {
		c.ResetTimeout = DefaultResetTimeout
	}
	return c
}

// Front is the journal front: it stands before a journal.Journal and itself
// implements journal.Journal, adding these rules:
//
//   - Group commit: while one Write call to the store is in flight, the
//     atomic writes of all callers that arrive queue up, and go to the store
//     together in the next call (at most MaxBatchSize; see MaxLinger for how
//     long a batch may wait to fill). One store call is in flight at a time,
//     so writes reach the store in arrival order, and the writes of one
//     persistence id are never reordered.
//   - HighestSequenceNr and DeleteTo for an id first wait until the writes
//     for that id that were accepted before the call have been answered.
//   - Every Write, HighestSequenceNr and DeleteTo store call is bounded by
//     CallTimeout and passes through a circuit breaker; while it is open,
//     calls fail at once with ErrCircuitOpen.
//   - A caller whose context ends while its writes still wait in the queue
//     gets the context's error, and those writes are not sent. Once sent,
//     the outcome of an abandoned write is unknown.
//
// One goroutine, the batcher, owns the queue and the per-id counts of
// writes in flight; callers reach it through one channel, so a
// highest-number request is ordered after every write sent before it
// without a lock on the write path.
//
// Close does not close the journal behind the front.
type Front struct {
	j       journal.Journal
	cfg     Config
	breaker *gobreaker.CircuitBreaker[any]

	requests chan *request
	sendMu   sync.RWMutex
	closed   bool // guarded by sendMu
	closing  chan struct{}
	stopped  chan struct{}
	close    sync.Once
}

// request is either atomic writes to store (writes, done) or a barrier
// (barrier, ready): ready closes once the writes of the id barrier that the
// batcher received before it have been answered.
type request struct {
	ctx    context.Context
	writes []journal.AtomicWrite
	done   chan result

	barrier string
	ready   chan struct{}
}

type result struct {
	errs []error
	err  error
}

// callDone reports a finished store call to the batcher.
type callDone struct {
	pids []string // the persistence id of each atomic write of the call
	took time.Duration
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
	f := &Front{
		j:        j,
		cfg:      cfg,
		requests: make(chan *request, cfg.MaxBatchSize),
		closing:  make(chan struct{}),
		stopped:  make(chan struct{}),
	}
	f.breaker = gobreaker.NewCircuitBreaker[any](gobreaker.Settings{
		Name:        "journal",
		MaxRequests: 1,
		Timeout:     cfg.ResetTimeout,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= cfg.MaxFailures },
		IsExcluded: func(err error) bool {
			return errors.Is(err, context.Canceled) || errors.Is(err, journal.ErrInvalidArgument)
		},
	})
	go f.run()
	return f, nil
}

// Config returns the front's configuration with defaults filled in.
func (f *Front) Config() Config { return f.cfg }

// enqueue hands r to the batcher. sendMu orders sends before Close: once
// Close holds it, no request can enter the queue, and the batcher drains
// every request sent before.
func (f *Front) enqueue(ctx context.Context, r *request) error {
	f.sendMu.RLock()
	defer f.sendMu.RUnlock()
	if f.closed {
		return ErrClosed
	}
	select {
	case f.requests <- r:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Write implements journal.Journal.Write through the group-commit queue: the
// writes of this call are sent in one store call, possibly together with
// other callers' writes. Results follow the journal contract; a whole-call
// error wraps ErrCircuitOpen (not sent), ErrCallTimeout (outcome unknown) or
// the store's error (outcome unknown), or is ErrClosed or ctx's error.
func (f *Front) Write(ctx context.Context, writes []journal.AtomicWrite) ([]error, error) {
	if len(writes) == 0 {
		return nil, nil
	}
	req := &request{ctx: ctx, writes: writes, done: make(chan result, 1)}
	if err := f.enqueue(ctx, req); err != nil {
		return nil, err
	}
	select {
	case r := <-req.done:
		return r.errs, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("engine: write abandoned, outcome unknown: %w", ctx.Err())
	}
}

// Persist writes one atomic write and returns nil when it is stored; an
// error wrapping journal.ErrRejected when it is definitely not stored; any
// other error when the outcome is unknown or the write was not sent.
func (f *Front) Persist(ctx context.Context, w journal.AtomicWrite) error {
	errs, err := f.Write(ctx, []journal.AtomicWrite{w})
	if err != nil {
		return err
	}
	if errs != nil {
		return errs[0]
	}
	return nil
}

// awaitWrites waits until the writes for pid sent before the call have been
// answered.
func (f *Front) awaitWrites(ctx context.Context, pid string) error {
	r := &request{barrier: pid, ready: make(chan struct{})}
	if err := f.enqueue(ctx, r); err != nil {
		return err
	}
	select {
	case <-r.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run is the batcher: it sends queued writes to the store, one call at a
// time, keeps the count of unanswered writes per id, and releases barriers.
//
// Lingering: the callers answered by one call tend to write again at once.
// So when a call ends, the batcher aims for a batch as large as that call
// plus the writes already queued (at most MaxBatchSize), and sends once the
// queue holds that many, or after a linger of half the last call's duration
// (at most MaxLinger). Without this, a steady load of n writers splits into
// two alternating batches of n/2 (one in flight, one queueing), paying twice
// the commits; and a fast store is never kept waiting long.
func (f *Front) run() {
	defer close(f.stopped)
	var (
		queue       []*request
		queued      int                       // atomic writes in queue
		pending     = map[string]int{}        // unanswered writes per id
		waiters     = map[string][]*request{} // barriers per id
		target      = 1                       // atomic writes to wait for before sending
		sent        int                       // atomic writes in the call in flight
		lingerFor   time.Duration             // half the last call's duration, capped
		finished    = make(chan callDone, 1)
		busy        bool
		closing     bool
		closeSignal = f.closing
		linger      *time.Timer
		lingerDone  <-chan time.Time
		lingered    bool
	)
	receive := func(r *request) {
		if r.ready != nil {
			if pending[r.barrier] == 0 {
				close(r.ready)
			} else {
				waiters[r.barrier] = append(waiters[r.barrier], r)
			}
			return
		}
		queue = append(queue, r)
		queued += len(r.writes)
		for _, w := range r.writes {
			pending[w.PersistenceID]++
		}
	}
	drain := func() {
		for {
			select {
			case r := <-f.requests:
				receive(r)
			default:
				return
			}
		}
	}
	for {
		if !busy && len(queue) > 0 {
			if queued >= min(target, f.cfg.MaxBatchSize) || lingered || closing || lingerFor == 0 {
				n, size := 0, 0
				for n < len(queue) && (n == 0 || size+len(queue[n].writes) <= f.cfg.MaxBatchSize) {
					size += len(queue[n].writes)
					n++
				}
				batch := queue[:n:n]
				// The ids are read now: once answered, callers own their writes.
				pids := make([]string, 0, size)
				for _, r := range batch {
					for _, w := range r.writes {
						pids = append(pids, w.PersistenceID)
					}
				}
				queue, queued, sent = queue[n:], queued-size, size
				busy, lingered = true, false
				if linger != nil {
					linger.Stop()
					linger, lingerDone = nil, nil
				}
				go func() {
					start := time.Now()
					f.send(batch)
					finished <- callDone{pids: pids, took: time.Since(start)}
				}()
			} else if linger == nil {
				linger = time.NewTimer(lingerFor)
				lingerDone = linger.C
			}
		}
		if closing && !busy && len(queue) == 0 {
			return
		}
		reqs := f.requests
		if closing {
			reqs = nil
		}
		select {
		case r := <-reqs:
			receive(r)
			drain()
		case done := <-finished:
			busy = false
			for _, pid := range done.pids {
				if pending[pid]--; pending[pid] == 0 {
					delete(pending, pid)
					for _, b := range waiters[pid] {
						close(b.ready)
					}
					delete(waiters, pid)
				}
			}
			target = sent + queued
			lingerFor = min(f.cfg.MaxLinger, done.took/2)
		case <-lingerDone:
			linger, lingerDone, lingered = nil, nil, true
		case <-closeSignal:
			closing = true
			closeSignal = nil // a nil channel blocks: stop selecting it
			drain()
		}
	}
}

// send makes one store call for the live requests of batch and answers each.
func (f *Front) send(batch []*request) {
	live := batch[:0:0]
	var writes []journal.AtomicWrite
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.done <- result{err: err}
			continue
		}
		live = append(live, r)
		writes = append(writes, r.writes...)
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.cfg.CallTimeout)
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
	at := 0
	for _, r := range live {
		res := result{err: err}
		if err == nil && errs != nil {
			res.errs = journal.Results(errs[at : at+len(r.writes)])
		}
		at += len(r.writes)
		r.done <- res
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

// guarded runs call on the store with the call timeout and the breaker.
func (f *Front) guarded(ctx context.Context, call func(ctx context.Context) (any, error)) (any, error) {
	cctx, cancel := context.WithTimeout(ctx, f.cfg.CallTimeout)
	defer cancel()
	out, err := f.breaker.Execute(func() (any, error) {
		v, err := call(cctx)
		if err != nil && ctx.Err() == nil {
			err = f.callError(cctx, err)
		}
		return v, err
	})
	return out, breakerError(err)
}

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
	return f.j.Replay(ctx, persistenceID, from, to, max)
}

// Close stops accepting writes, waits until the queued writes have been
// sent and answered, and returns. It does not close the journal behind the
// front. Close is idempotent.
func (f *Front) Close() error {
	f.close.Do(func() {
		f.sendMu.Lock() // waits for senders in flight; later ones see closed
		f.closed = true
		f.sendMu.Unlock()
		close(f.closing)
	})
	<-f.stopped
	return nil
}
