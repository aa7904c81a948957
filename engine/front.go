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
// Leaders and followers: a caller that finds no store call in flight makes
// the call itself, on its own goroutine, for everything queued (a lone
// writer pays no goroutine hand-off). Callers that arrive meanwhile queue
// and wait; when the call ends, a new goroutine takes over as leader for the
// queued writes and stays leader while writes keep coming. The leading
// caller returns once its own call is answered (within CallTimeout), even
// if its context ended earlier.
//
// Close does not close the journal behind the front.
type Front struct {
	j       journal.Journal
	cfg     Config
	breaker *gobreaker.CircuitBreaker[any]

	mu      sync.Mutex
	idle    sync.Cond // signalled when leading turns false
	queue   []*request
	queued  int  // atomic writes in queue
	leading bool // a leader is taking batches
	closed  bool
	pending map[string]int             // unanswered writes per id, queued or in flight
	waiters map[string][]chan struct{} // closed when pending[id] drops to 0
	// Lingering (see run): the leader waits for want queued writes, or for
	// more to close, before taking a batch.
	want int
	more chan struct{}
}

type request struct {
	ctx    context.Context
	writes []journal.AtomicWrite
	done   chan result
	taken  bool // guarded by Front.mu: in a batch, no longer cancellable
}

type result struct {
	errs []error
	err  error
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
		j:       j,
		cfg:     cfg,
		pending: map[string]int{},
		waiters: map[string][]chan struct{}{},
	}
	f.idle.L = &f.mu
	f.breaker = gobreaker.NewCircuitBreaker[any](gobreaker.Settings{
		Name:        "journal",
		MaxRequests: 1,
		Timeout:     cfg.ResetTimeout,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= cfg.MaxFailures },
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
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	req := &request{ctx: ctx, writes: writes, done: make(chan result, 1)}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, ErrClosed
	}
	f.queue = append(f.queue, req)
	f.queued += len(writes)
	for _, w := range writes {
		f.pending[w.PersistenceID]++
	}
	if f.more != nil && f.queued >= f.want {
		close(f.more)
		f.more = nil
	}
	lead := !f.leading
	if lead {
		f.leading = true
		batch := f.take()
		f.mu.Unlock()
		f.send(batch)
		f.handOff()
		r := <-req.done
		return r.errs, r.err
	}
	f.mu.Unlock()
	select {
	case r := <-req.done:
		return r.errs, r.err
	case <-ctx.Done():
		f.mu.Lock()
		defer f.mu.Unlock()
		select {
		case r := <-req.done: // answered meanwhile: the outcome is known
			return r.errs, r.err
		default:
		}
		if req.taken {
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
		return nil, ctx.Err()
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

// take removes the next batch from the queue (at most MaxBatchSize atomic
// writes, never splitting one caller's writes). f.mu is held.
func (f *Front) take() []*request {
	n, size := 0, 0
	for n < len(f.queue) && (n == 0 || size+len(f.queue[n].writes) <= f.cfg.MaxBatchSize) {
		size += len(f.queue[n].writes)
		f.queue[n].taken = true
		n++
	}
	batch := f.queue[:n:n]
	f.queue = f.queue[n:]
	f.queued -= size
	return batch
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

// handOff ends a leader's turn: with writes queued, a new goroutine leads
// them; otherwise the front goes idle.
func (f *Front) handOff() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.queue) > 0 {
		go f.run()
		return
	}
	f.leading = false
	f.idle.Broadcast()
}

// run leads batches while writes keep coming.
//
// Lingering: the callers answered by one call tend to write again at once.
// So after a call, the leader aims for a batch as large as that call plus
// the writes already queued (at most MaxBatchSize), and takes it once the
// queue holds that many, or after a linger of half the last call's duration
// (at most MaxLinger). Without this, a steady load of n writers splits into
// two alternating batches of n/2 (one in flight, one queueing), paying twice
// the commits; and a fast store is never kept waiting long.
func (f *Front) run() {
	var target int
	var lingerFor time.Duration
	for {
		f.mu.Lock()
		if target > 0 && f.queued < min(target, f.cfg.MaxBatchSize) && !f.closed && lingerFor > 0 {
			f.want, f.more = min(target, f.cfg.MaxBatchSize), make(chan struct{})
			more := f.more
			f.mu.Unlock()
			timer := time.NewTimer(lingerFor)
			select {
			case <-more:
			case <-timer.C:
			}
			timer.Stop()
			f.mu.Lock()
			f.more = nil
		}
		if len(f.queue) == 0 {
			f.leading = false
			f.idle.Broadcast()
			f.mu.Unlock()
			return
		}
		batch := f.take()
		f.mu.Unlock()
		start := time.Now()
		size := f.send(batch)
		lingerFor = min(f.cfg.MaxLinger, time.Since(start)/2)
		f.mu.Lock()
		target = size + f.queued
		f.mu.Unlock()
	}
}

// send makes one store call for the live requests of batch, ends their
// in-flight counts and answers each. It returns the number of atomic writes
// sent.
func (f *Front) send(batch []*request) int {
	live := batch[:0:0]
	var writes []journal.AtomicWrite
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			f.finish(r, result{err: err})
			continue
		}
		live = append(live, r)
		writes = append(writes, r.writes...)
	}
	if len(live) == 0 {
		return 0
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
	f.mu.Lock()
	f.answered(writes)
	f.mu.Unlock()
	at := 0
	for _, r := range live {
		res := result{err: err}
		if err == nil && errs != nil {
			res.errs = journal.Results(errs[at : at+len(r.writes)])
		}
		at += len(r.writes)
		r.done <- res
	}
	return len(writes)
}

// finish ends one request's in-flight count and answers it.
func (f *Front) finish(r *request, res result) {
	f.mu.Lock()
	f.answered(r.writes)
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

// guarded runs call on the store with the call timeout and the breaker.
func (f *Front) guarded(ctx context.Context, call func(ctx context.Context) (any, error)) (any, error) {
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

// Close stops accepting writes (later ones fail with ErrClosed), waits until
// the queued writes have been sent and answered, and returns. It does not
// close the journal behind the front. Close is idempotent.
func (f *Front) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	if f.more != nil { // a lingering leader takes its batch now
		close(f.more)
		f.more = nil
	}
	for f.leading {
		f.idle.Wait()
	}
	return nil
}
