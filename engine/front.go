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
	"sync"
	"time"

	"github.com/annals-go/annals/durable"
	hookset "github.com/annals-go/annals/internal/hooks"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/recovery"
	"github.com/annals-go/annals/snapshot"
	"github.com/sony/gobreaker/v2"
)

// Defaults of Config: Akka's journal circuit-breaker settings, but for
// the reset timeout (see DefaultResetTimeout).
const (
	DefaultMaxFailures = 10
	DefaultCallTimeout = 10 * time.Second
	// DefaultResetTimeout is 5 s where Akka's is 30 s: a probe is a single
	// call, and writes resume at the first probe after the store is back,
	// so the longer wait only kept writes failing for up to half a minute
	// after the store answered again.
	DefaultResetTimeout = 5 * time.Second
	DefaultMaxBatchSize = 1000
	DefaultMaxLinger    = 5 * time.Millisecond
	DefaultMaxCalls     = 2
	DefaultSplitWrites  = 200
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
	// ErrFenced reports writes WriteFenced did not send because their
	// fence failed: they are definitely not stored. The fence's error is
	// wrapped too. It is journal.ErrFenced, which a store's refusal of a
	// write whose lease it found lost wraps as well.
	ErrFenced = journal.ErrFenced
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
	// least SplitWrites. With 1, batches reach the store one at a time, in
	// arrival order.
	MaxCalls int
	// SplitWrites is the fewest atomic writes each call must carry for the
	// writes the front expects to be split across calls in flight (see
	// MaxCalls). Below it, the commit a second call pays costs more than
	// the wait for the writers it hides. Default: what the journal's
	// SplitWrites reports (see WriteSplit), else DefaultSplitWrites = 200.
	SplitWrites int
	// CallTimeout bounds each Write, HighestSequenceNr and DeleteTo call to
	// the store (default DefaultCallTimeout = 10 s). Replay is not bounded,
	// as in Akka: it can take long and is bounded by the caller's context.
	CallTimeout time.Duration
	// MaxFailures is how many consecutive failed store calls open the
	// circuit breaker (default DefaultMaxFailures = 10). Rejections, invalid
	// arguments and callers' cancellations are not failures.
	MaxFailures uint32
	// ResetTimeout is how long the breaker stays open before it lets one
	// call probe the store (default DefaultResetTimeout = 5 s); while the
	// probe fails, it opens again for as long.
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

// WriteSplit is implemented by a journal that knows how large its write
// calls must be for two in flight to pay. The front uses SplitWrites as
// its default Config.SplitWrites.
type WriteSplit interface {
	// SplitWrites returns the fewest atomic writes each of several write
	// calls in flight must carry for the split to pay, or 0 for the front's
	// default: low where concurrent calls proceed side by side in the
	// store, high where they queue for one lock, so that a second call adds
	// a commit and hides little.
	SplitWrites() int
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
	case c.SplitWrites < 0:
		return fmt.Errorf("engine: SplitWrites %d is negative", c.SplitWrites)
	case c.MaxLinger < 0:
		return fmt.Errorf("engine: MaxLinger %v is negative", c.MaxLinger)
	case c.CallTimeout < 0:
		return fmt.Errorf("engine: CallTimeout %v is negative", c.CallTimeout)
	case c.ResetTimeout < 0:
		return fmt.Errorf("engine: ResetTimeout %v is negative", c.ResetTimeout)
	case c.MaxReads < 0:
		return fmt.Errorf("engine: MaxReads %d is negative", c.MaxReads)
	}
	return hookset.Refuse("engine: Config.Hooks", c.Hooks, isHook)
}

// JournalDefaults returns c with the zero fields that j gives a default
// for set from j: MaxReads from ReadCapacity, SplitWrites from WriteSplit.
// NewFront applies it; a wrapper of a journal that hides those methods
// applies it before wrapping.
func (c Config) JournalDefaults(j journal.Journal) Config {
	if rc, ok := j.(ReadCapacity); ok && c.MaxReads == 0 {
		c.MaxReads = max(1, rc.ConcurrentReads())
	}
	if ws, ok := j.(WriteSplit); ok && c.SplitWrites == 0 {
		c.SplitWrites = max(0, ws.SplitWrites()) // 0: the front's default
	}
	return c
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
	if c.SplitWrites == 0 {
		c.SplitWrites = DefaultSplitWrites
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
//     more than one only under loads of at least SplitWrites writes per
//     call.
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
	core[journal.AtomicWrite]
	j      journal.Journal
	groups recoveryQueue // recoveries waiting for a grouped read
}

// core is the group commit and the guards a front puts before its store,
// for writes of type W.
type core[W any] struct {
	name    string // the store's kind, in the breaker's log lines
	cfg     Config
	breaker *gobreaker.CircuitBreaker[any]
	reads   chan struct{} // turns of the guarded reads; nil: unbounded
	calls   *callTimer    // the call timeout of every store call
	hooks   hooks

	// store makes one store call for writes; tokens, when not nil, holds
	// one fencing token per write (only when tokens is true).
	store  func(ctx context.Context, writes []W, tokens []journal.FenceToken) ([]error, error)
	tokens bool           // the store checks fencing tokens
	idOf   func(W) string // a write's persistence id
	events func(W) int    // a write's events, for the write-call hook

	mu     sync.Mutex // guards closed, q, ids and fl
	idle   sync.Cond  // signalled when fl.leaders drops to 0
	closed bool
	q      writeQueue[W]
	ids    idWrites
	fl     flights

	requests sync.Pool // of *request[W]
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
	cfg = cfg.JournalDefaults(j)
	f := &Front{j: j}
	fw, tokens := j.(journal.FencedWriter)
	f.core.init("journal", cfg, func(ctx context.Context, writes []journal.AtomicWrite, t []journal.FenceToken) ([]error, error) {
		if t != nil {
			return fw.WriteFenced(ctx, writes, t)
		}
		return j.Write(ctx, writes)
	})
	f.tokens = tokens
	f.idOf = func(w journal.AtomicWrite) string { return w.PersistenceID }
	f.events = func(w journal.AtomicWrite) int { return len(w.Events) }
	return f, nil
}

// init sets c up to call store, under cfg (validated) with its defaults.
func (c *core[W]) init(name string, cfg Config, store func(context.Context, []W, []journal.FenceToken) ([]error, error)) {
	cfg = cfg.withDefaults()
	c.name, c.cfg, c.store = name, cfg, store
	c.calls = newCallTimer(cfg.CallTimeout)
	c.ids = idWrites{pending: map[string]int{}, waiters: map[string][]chan struct{}{}, inFlight: map[string]int{}}
	if cfg.MaxReads > 0 {
		c.reads = make(chan struct{}, cfg.MaxReads)
	}
	c.hooks = newHooks(cfg.Hooks)
	c.idle.L = &c.mu
	c.requests.New = func() any { return &request[W]{done: make(chan result, 1)} }
	c.breaker = gobreaker.NewCircuitBreaker[any](gobreaker.Settings{
		Name:        name,
		MaxRequests: 1,
		Timeout:     cfg.ResetTimeout,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= cfg.MaxFailures },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			c.breakerChanged(breakerState(from), breakerState(to))
		},
		IsExcluded: func(err error) bool {
			var gone *callerGone
			return errors.As(err, &gone) || errors.Is(err, context.Canceled) ||
				errors.Is(err, journal.ErrInvalidArgument) || errors.Is(err, durable.ErrInvalidArgument)
		},
	})
}

// Write implements journal.Journal.Write through the group-commit queue: the
// writes of this call are sent in one store call, possibly together with
// other callers' writes. Results follow the journal contract; a whole-call
// error wraps ErrCircuitOpen (not sent), ErrCallTimeout (outcome unknown) or
// the store's error (outcome unknown), or is ErrClosed or ctx's error.
func (f *Front) Write(ctx context.Context, writes []journal.AtomicWrite) ([]error, error) {
	return f.submit(ctx, writes, journal.Fence{})
}

// WriteFenced is Write for a writer whose right to write can end (a
// holder of a lease, package cluster):
//   - fence.Open is called right before the writes leave for the store
//     (after any wait in the queue); when it returns an error the writes
//     are not sent and the call returns an error wrapping ErrFenced and
//     that error (the writes are definitely not stored);
//   - when the store is a journal.FencedWriter and fence.Token is not
//     zero, the store checks the token again where the writes commit: a
//     write whose lease is no longer held gets a result wrapping ErrFenced
//     (a *journal.FencedError), also definitely not stored.
func (f *Front) WriteFenced(ctx context.Context, writes []journal.AtomicWrite, fence journal.Fence) ([]error, error) {
	return f.submit(ctx, writes, fence)
}

// Persist writes one atomic write and returns nil when it is stored; an
// error wrapping journal.ErrRejected when it is definitely not stored; any
// other error when the outcome is unknown or the write was not sent.
func (f *Front) Persist(ctx context.Context, w journal.AtomicWrite) error {
	return f.persist(ctx, w, journal.Fence{})
}

// Config returns the front's configuration with defaults filled in.
func (f *Front) Config() Config { return f.cfg }

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

// Close stops accepting writes (later ones fail with ErrClosed), waits until
// the queued writes have been sent and answered, and returns. It does not
// close the journal behind the front. Close is idempotent.
func (f *Front) Close() error { return f.close() }

// close stops accepting writes and waits for the queued ones.
func (f *core[W]) close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	f.wakeLingering(true) // lingering leaders take their batches now
	for f.fl.leaders > 0 {
		f.idle.Wait()
	}
	return nil
}
