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
//     together in the next call (at most MaxBatchSize). One store call is in
//     flight at a time, so writes reach the store in arrival order, and the
//     writes of one persistence id are never reordered.
//   - HighestSequenceNr and DeleteTo for an id first wait until the writes
//     for that id that were accepted before the call have completed.
//   - Every Write, HighestSequenceNr and DeleteTo store call is bounded by
//     CallTimeout and passes through a circuit breaker; while it is open,
//     calls fail at once with ErrCircuitOpen.
//   - A caller whose context ends while its writes still wait in the queue
//     gets the context's error, and those writes are not sent. Once sent,
//     the outcome of an abandoned write is unknown.
//
// Close does not close the journal behind the front.
type Front struct {
	j       journal.Journal
	cfg     Config
	breaker *gobreaker.CircuitBreaker[any]

	requests chan *request
	closing  chan struct{}
	stopped  chan struct{}
	close    sync.Once

	mu       sync.Mutex
	inflight map[string]*idWrites
}

type request struct {
	ctx    context.Context
	writes []journal.AtomicWrite
	done   chan result
}

type result struct {
	errs []error
	err  error
}

// idWrites counts the accepted, unfinished writes of one id; done closes
// when the count drops to zero.
type idWrites struct {
	n    int
	done chan struct{}
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
		requests: make(chan *request),
		closing:  make(chan struct{}),
		stopped:  make(chan struct{}),
		inflight: map[string]*idWrites{},
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

// Write implements journal.Journal.Write through the group-commit queue: the
// writes of this call are sent in one store call, possibly together with
// other callers' writes. Results follow the journal contract; a whole-call
// error wraps ErrCircuitOpen (not sent), ErrCallTimeout (outcome unknown) or
// the store's error (outcome unknown), or is ctx's error.
func (f *Front) Write(ctx context.Context, writes []journal.AtomicWrite) ([]error, error) {
	if len(writes) == 0 {
		return nil, nil
	}
	req := &request{ctx: ctx, writes: writes, done: make(chan result, 1)}
	f.track(writes, +1)
	select {
	case f.requests <- req:
	case <-ctx.Done():
		f.track(writes, -1)
		return nil, ctx.Err()
	case <-f.closing:
		f.track(writes, -1)
		return nil, ErrClosed
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

// track adds delta to the in-flight count of every id in writes.
func (f *Front) track(writes []journal.AtomicWrite, delta int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range writes {
		s := f.inflight[w.PersistenceID]
		if s == nil {
			s = &idWrites{done: make(chan struct{})}
			f.inflight[w.PersistenceID] = s
		}
		s.n += delta
		if s.n == 0 {
			close(s.done)
			delete(f.inflight, w.PersistenceID)
		}
	}
}

// awaitWrites waits until the writes for pid accepted so far have completed.
func (f *Front) awaitWrites(ctx context.Context, pid string) error {
	f.mu.Lock()
	s := f.inflight[pid]
	f.mu.Unlock()
	if s == nil {
		return nil
	}
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run is the batcher: it sends queued requests to the store, one call at a
// time, and answers them.
func (f *Front) run() {
	defer close(f.stopped)
	var queue []*request
	finished := make(chan struct{}, 1)
	busy, closing := false, false
	closeSignal := f.closing
	for {
		if !busy && len(queue) > 0 {
			n, size := 0, 0
			for n < len(queue) && (n == 0 || size+len(queue[n].writes) <= f.cfg.MaxBatchSize) {
				size += len(queue[n].writes)
				n++
			}
			batch := queue[:n:n]
			queue = queue[n:]
			busy = true
			go func() {
				f.send(batch)
				finished <- struct{}{}
			}()
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
			queue = append(queue, r)
		case <-finished:
			busy = false
		case <-closeSignal:
			closing = true
			closeSignal = nil // a nil channel blocks: stop selecting it
		}
	}
}

// send makes one store call for the live requests of batch and answers each.
func (f *Front) send(batch []*request) {
	live := batch[:0:0]
	var writes []journal.AtomicWrite
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			f.answer(r, result{err: err})
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
		f.answer(r, res)
	}
}

// answer ends a request's tracking, then replies; after the reply the caller
// owns r.writes again.
func (f *Front) answer(r *request, res result) {
	f.track(r.writes, -1)
	r.done <- res
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
	f.close.Do(func() { close(f.closing) })
	<-f.stopped
	return nil
}
