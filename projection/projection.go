// Package projection runs handlers over persistence queries to build read
// models: a projection reads the events of a source after a stored offset,
// hands each to a handler, and stores the offset it reached.
//
// Delivery modes:
//   - ExactlyOnce: the handler receives the offset store's transaction; its
//     writes and the offset commit together.
//   - AtLeastOnce: the offset is saved after SaveAfter envelopes or
//     SaveEvery, whichever comes first; after a crash, the envelopes since
//     the last save are handled again.
//   - Grouped: the handler receives envelopes in groups of up to GroupSize,
//     or what arrived within GroupWithin; the offset is saved after each
//     group.
//   - ExactlyOnceGrouped: groups as in Grouped, each handled in one
//     transaction with its offset (one commit per group).
//
// Rules every mode keeps:
//   - Within a run, a persistence id's events reach the handler once each,
//     in sequence order: duplicates from the source are dropped. A source
//     of durable-state changes (ChangesBySlices, ChangesByTag) gives each
//     id's changes in order, once each, and skipped revisions are not
//     looked for.
//   - A gap in an id's sequence numbers (an event the source has not
//     delivered yet) is filled by reading that id's missing events before
//     going on, when the source can read by id.
//   - A handler error is met with the Recovery strategy (fail, skip,
//     retry-then-fail, retry-then-skip); a failure restarts the projection
//     from its stored offset after a backoff, up to Config.MaxRestarts
//     failed runs in a row (no bound by default).
//   - A failing projection is visible without its logs: Status reports its
//     run state and last error, and Behind returns a *FailingError (with
//     the count) while it fails and has events still to handle.
//   - Pause, Resume, Offset and ResetOffset work through the offset store,
//     so the paused state survives restarts; a running projection in this
//     process obeys them at once.
package projection

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/annals-go/annals"
	hookset "github.com/annals-go/annals/internal/hooks"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/restart"
)

// Source is where a projection reads: a live query after an offset, and
// optionally the events of one id, for filling gaps.
type Source struct {
	// Events follows the source's events after an offset.
	Events func(ctx context.Context, after query.Offset) *query.Stream[query.Envelope]
	// Current, when not nil, reads every event stored after an offset and
	// ends, including those Events still holds back (a store whose live
	// query waits out a delay before it delivers an event); Projection.Behind
	// counts with it, so it must not hold events back.
	Current func(ctx context.Context, after query.Offset) iter.Seq2[query.Envelope, error]
	// ByID, when not nil, reads an id's events to fill gaps.
	ByID query.EventsByPersistenceIDQuery
	// Changes marks a source of durable-state changes: an id's revisions
	// skip by design and start again at 1 after a delete, so the
	// projection neither fills gaps nor drops lower revisions as
	// duplicates; the change queries return no change twice.
	Changes bool
}

// BySlices is the source of the events of entityType in the slice range r.
// If q also reads by persistence id, gaps are filled through it.
func BySlices(q query.EventsBySlicesQuery, entityType string, r annals.SliceRange) Source {
	byID, _ := q.(query.EventsByPersistenceIDQuery)
	return Source{
		Events: func(ctx context.Context, after query.Offset) *query.Stream[query.Envelope] {
			return q.EventsBySlices(ctx, entityType, r.Min, r.Max, after)
		},
		Current: func(ctx context.Context, after query.Offset) iter.Seq2[query.Envelope, error] {
			return q.CurrentEventsBySlices(ctx, entityType, r.Min, r.Max, after)
		},
		ByID: byID,
	}
}

// StoredEventsByTagQuery is a read journal whose tag queries hold events
// back after they are stored (the Cassandra store's eventual-consistency
// delay). StoredEventsByTag reads every event tagged tag stored after the
// offset when it starts, those held back included, and ends; it is for
// counting what a consumer has still to receive, not for consuming.
type StoredEventsByTagQuery interface {
	StoredEventsByTag(ctx context.Context, tag string, after query.Offset) iter.Seq2[query.Envelope, error]
}

// ByTag is the source of the events tagged tag. It fills no gaps: an id's
// tagged events need not have consecutive sequence numbers (telling a
// missing tagged event from an untagged one would take per-(id, tag)
// sequence numbers, which the stores do not keep). When q is also a
// StoredEventsByTagQuery, Source.Current is its StoredEventsByTag (so
// Behind counts the events the delay holds back), otherwise its
// CurrentEventsByTag.
func ByTag(q query.EventsByTagQuery, tag string) Source {
	current := func(ctx context.Context, after query.Offset) iter.Seq2[query.Envelope, error] {
		return q.CurrentEventsByTag(ctx, tag, after)
	}
	if s, ok := q.(StoredEventsByTagQuery); ok {
		current = func(ctx context.Context, after query.Offset) iter.Seq2[query.Envelope, error] {
			return s.StoredEventsByTag(ctx, tag, after)
		}
	}
	return Source{
		Events: func(ctx context.Context, after query.Offset) *query.Stream[query.Envelope] {
			return q.EventsByTag(ctx, tag, after)
		},
		Current: current,
	}
}

// ChangesBySlices is the source of the durable-state changes of
// entityType in the slice range r: each envelope is an object's state at
// a revision (SequenceNr), the latest when the query reached it (see
// query.DurableStateChangesBySlicesQuery). Decode its payload as the
// state's type.
func ChangesBySlices(q query.DurableStateChangesBySlicesQuery, entityType string, r annals.SliceRange) Source {
	return Source{
		Events: func(ctx context.Context, after query.Offset) *query.Stream[query.Envelope] {
			return q.ChangesBySlices(ctx, entityType, r.Min, r.Max, after)
		},
		Current: func(ctx context.Context, after query.Offset) iter.Seq2[query.Envelope, error] {
			return q.CurrentChangesBySlices(ctx, entityType, r.Min, r.Max, after)
		},
		Changes: true,
	}
}

// ChangesByTag is the source of the durable-state changes of the objects
// tagged tag, as ChangesBySlices.
func ChangesByTag(q query.DurableStateChangesByTagQuery, tag string) Source {
	return Source{
		Events: func(ctx context.Context, after query.Offset) *query.Stream[query.Envelope] {
			return q.ChangesByTag(ctx, tag, after)
		},
		Current: func(ctx context.Context, after query.Offset) iter.Seq2[query.Envelope, error] {
			return q.CurrentChangesByTag(ctx, tag, after)
		},
		Changes: true,
	}
}

// Strategy says what to do when a handler fails.
type Strategy struct {
	retries int
	delay   time.Duration
	skip    bool
}

// Fail fails the projection (which restarts from its stored offset).
func Fail() Strategy { return Strategy{} }

// Skip drops the envelope (or group) and goes on.
func Skip() Strategy { return Strategy{skip: true} }

// RetryThenFail retries up to n times, delay apart, then fails.
func RetryThenFail(n int, delay time.Duration) Strategy { return Strategy{retries: n, delay: delay} }

// RetryThenSkip retries up to n times, delay apart, then skips.
func RetryThenSkip(n int, delay time.Duration) Strategy {
	return Strategy{retries: n, delay: delay, skip: true}
}

// Defaults of Config.
const (
	DefaultSaveAfter     = 100
	DefaultSaveEvery     = time.Second
	DefaultGroupSize     = 20
	DefaultGroupWithin   = 100 * time.Millisecond
	DefaultRestartMin    = time.Second
	DefaultRestartMax    = 30 * time.Second
	DefaultPausedRecheck = time.Second
)

// Config tunes a projection. Zero fields take their defaults.
type Config struct {
	// Recovery is the strategy for handler errors (default Fail()).
	Recovery Strategy
	// Restart is the backoff before a failed run restarts from the stored
	// offset: it doubles per consecutive failure from Restart.Min up to
	// Restart.Max (defaults DefaultRestartMin and DefaultRestartMax),
	// stretched by up to Restart.RandomFactor (default 0). It is the
	// schedule entity hosts use (entity.HostConfig.Restart).
	Restart restart.Backoff
	// MaxRestarts bounds the restarts of failed runs, as Akka Projections'
	// RestartSettings maxRestarts: when a run fails MaxRestarts+1 times in
	// a row (a run that handled an envelope before it failed starts the
	// count again), Run stops and returns a *FailingError with GaveUp set,
	// and Status reports RunFailed. 0 (the default) sets no bound: Run
	// restarts until its context ends.
	MaxRestarts int
	// SaveAfter and SaveEvery: at-least-once offsets are saved after this
	// many envelopes or this long, whichever first (defaults 100 and 1 s).
	SaveAfter int
	SaveEvery time.Duration
	// GroupSize and GroupWithin bound the groups of a grouped handler
	// (defaults 20 and 100 ms).
	GroupSize   int
	GroupWithin time.Duration
	// Hooks are called on the projection's events: each value for the hook
	// interfaces it implements (HookStarted, HookStopped,
	// HookHandlerError, HookOffsetSaved, HookPaused, HookResumed,
	// HookRestartScheduled).
	Hooks []any
	// PausedRecheck is how often a paused projection reads its paused flag,
	// for pauses and resumes made by other processes (default 1 s).
	PausedRecheck time.Duration
	// Logger receives handler failures and restarts (default
	// slog.Default()).
	Logger *slog.Logger
}

// check refuses negative settings, naming the first.
func (c Config) check() error {
	for _, f := range []struct {
		name     string
		negative bool
	}{
		{"SaveAfter", c.SaveAfter < 0}, {"SaveEvery", c.SaveEvery < 0},
		{"GroupSize", c.GroupSize < 0}, {"GroupWithin", c.GroupWithin < 0},
		{"PausedRecheck", c.PausedRecheck < 0}, {"MaxRestarts", c.MaxRestarts < 0},
	} {
		if f.negative {
			return fmt.Errorf("projection: Config.%s is negative", f.name)
		}
	}
	if _, err := c.Restart.CheckWith(DefaultRestartMin, DefaultRestartMax); err != nil {
		return fmt.Errorf("projection: Config.Restart: %w", err)
	}
	return nil
}

func (c Config) withDefaults() Config {
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.SaveEvery, DefaultSaveEvery)
	def(&c.GroupWithin, DefaultGroupWithin)
	def(&c.PausedRecheck, DefaultPausedRecheck)
	c.Restart = c.Restart.WithDefaults(DefaultRestartMin, DefaultRestartMax)
	if c.SaveAfter == 0 {
		c.SaveAfter = DefaultSaveAfter
	}
	if c.GroupSize == 0 {
		c.GroupSize = DefaultGroupSize
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// sink is a delivery mode: it takes envelopes in order and saves offsets.
type sink interface {
	// take handles env, or buffers it and handles the buffered group at
	// once when it is full.
	take(ctx context.Context, env query.Envelope) error
	// tick is called when the mode's timer fires and at the end of a run.
	tick(ctx context.Context) error
	// shutdown is called instead of tick when the context ended: it may
	// save offsets of envelopes already handled, and calls no handler.
	shutdown(ctx context.Context) error
	// interval is how long after the first pending envelope tick is due.
	interval() time.Duration
	// pending reports envelopes taken but not yet saved or handled.
	pending() bool
}

// Projection is one projection instance. Run it with Run; manage it with
// Pause, Resume, Offset and ResetOffset (from any goroutine).
type Projection struct {
	mu      sync.Mutex
	running bool         // Run is running in this process
	resets  []chan error // ResetOffset calls waiting for the run to stop
	id      ID
	src     Source
	store   OffsetStore
	cfg     Config
	newSink func() sink
	control query.Signal // pause, resume or reset happened in this process
	hooks   hooks
	paused  bool // the last run found the projection paused (for the hooks)

	// What Run is doing, for Status and Behind (guarded by mu).
	runState    RunState
	lastErr     error     // the last handler error or failed run
	lastErrAt   time.Time // when lastErr happened
	failures    int       // failed runs in a row
	nextRestart time.Time // when RunRestarting: the next run's start
	// failing: a handler error or failed run since the last envelope (or
	// group) handled. Written under mu; read without it on the hot path.
	failing atomic.Bool
}

func newProjection(id ID, src Source, store OffsetStore, cfg Config, newSink func(*Projection) sink) (*Projection, error) {
	if err := id.Validate(); err != nil {
		return nil, err
	}
	if src.Events == nil || store == nil {
		return nil, fmt.Errorf("projection %s: source and offset store are required", id)
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if err := hookset.Refuse(fmt.Sprintf("projection %s: Config.Hooks", id), cfg.Hooks, isHook); err != nil {
		return nil, err
	}
	p := &Projection{id: id, src: src, store: store, cfg: cfg.withDefaults(), hooks: newHooks(cfg.Hooks)}
	p.newSink = func() sink { return newSink(p) }
	return p, nil
}

// ID returns the projection's id.
func (p *Projection) ID() ID { return p.id }

// Pause stores the paused flag; a running projection stops handling at
// once (after its current envelope or group) and waits.
func (p *Projection) Pause(ctx context.Context) error {
	if err := p.store.SetPaused(ctx, p.id, true); err != nil {
		return err
	}
	p.control.Notify()
	return nil
}

// Resume clears the paused flag; a waiting projection goes on at once.
func (p *Projection) Resume(ctx context.Context) error {
	if err := p.store.SetPaused(ctx, p.id, false); err != nil {
		return err
	}
	p.control.Notify()
	return nil
}

// Offset returns the stored offset.
func (p *Projection) Offset(ctx context.Context) (query.Offset, error) {
	st, err := p.store.Load(ctx, p.id)
	return st.Offset, err
}

// ErrNoCurrentQuery reports a projection whose Source has no Current
// query, so that what it has still to handle cannot be read.
var ErrNoCurrentQuery = errors.New("projection: the source has no current query (Source.Current)")

// Behind returns how many events of the source are stored after the
// projection's stored offset, up to max (max ≤ 0: no bound): the events it
// has still to handle and save. 0 means its read model reflects every
// event stored before the call (for AtLeastOnce: once the offset is saved),
// on every store, also where the live query holds events back for a delay
// (Source.Current counts those). It reads those events through
// Source.Current, so its cost grows with the count: pass max 1 to ask only
// whether the projection has caught up. It fails with ErrNoCurrentQuery
// when the source has no current query.
//
// When the count is above 0 and the projection's Run in this process is
// failing (Status().Failing: a handler error or failed run since it last
// handled an envelope, or Run gave up), Behind returns the count with a
// *FailingError naming the last error, so a caller waiting for 0 sees why
// it does not come. The projection may still recover (a transient error):
// GaveUp tells a final stop. A projection run by another process is
// counted only.
func (p *Projection) Behind(ctx context.Context, max int64) (int64, error) {
	if p.src.Current == nil {
		return 0, fmt.Errorf("projection %s: %w", p.id, ErrNoCurrentQuery)
	}
	o, err := p.Offset(ctx)
	if err != nil {
		return 0, fmt.Errorf("projection %s: %w", p.id, err)
	}
	var n int64
	for _, err := range p.src.Current(ctx, o) {
		if err != nil {
			return 0, fmt.Errorf("projection %s: events after %s: %w", p.id, o, err)
		}
		if n++; n == max {
			break
		}
	}
	if n > 0 {
		if err := p.failingError(); err != nil {
			return n, err
		}
	}
	return n, nil
}

// ResetOffset removes the stored offset: the projection starts again from
// the beginning of its source. A projection running in this process first
// stops handling (its pending offset is saved), then the offset is removed,
// then it restarts; ResetOffset returns when the offset is gone. A
// projection instance running in another process must be paused first, or
// its next save overwrites the reset.
func (p *Projection) ResetOffset(ctx context.Context) error {
	p.mu.Lock()
	if !p.running {
		p.mu.Unlock()
		if err := p.store.Reset(ctx, p.id); err != nil {
			return err
		}
		p.control.Notify()
		return nil
	}
	done := make(chan error, 1)
	p.resets = append(p.resets, done)
	p.mu.Unlock()
	p.control.Notify()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// applyResets removes the stored offset for the resets requested while the
// projection was running, and answers them.
func (p *Projection) applyResets(ctx context.Context) {
	p.mu.Lock()
	resets := p.resets
	p.resets = nil
	p.mu.Unlock()
	if len(resets) == 0 {
		return
	}
	err := p.store.Reset(context.WithoutCancel(ctx), p.id)
	for _, done := range resets {
		done <- err
	}
}

// Run runs the projection until ctx ends (and returns ctx's error) or, for
// a source that ends, until it has handled everything (and returns nil). A
// failed run restarts from the stored offset after a backoff that doubles
// per consecutive failure (Config.Restart).
//
// With Config.MaxRestarts, Run returns a *FailingError (GaveUp set) once
// runs have failed MaxRestarts+1 times in a row. Status reports what Run
// is doing meanwhile.
func (p *Projection) Run(ctx context.Context) (err error) {
	p.mu.Lock()
	p.running = true
	p.runState, p.failures, p.nextRestart = RunActive, 0, time.Time{}
	p.failing.Store(false)
	p.mu.Unlock()
	for _, x := range p.hooks.started {
		x.OnProjectionStarted(p.id)
	}
	defer func() {
		p.mu.Lock()
		p.running = false
		if p.runState != RunFailed {
			p.runState = RunStopped
			p.failing.Store(false)
		}
		p.mu.Unlock()
		p.applyResets(ctx)
		for _, x := range p.hooks.stopped {
			x.OnProjectionStopped(p.id, err)
		}
	}()
	for {
		ended, progressed, err := p.runOnce(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err == nil {
			if ended {
				return nil
			}
			p.mu.Lock()
			p.failures = 0
			p.mu.Unlock()
			continue // paused, resumed or reset: start again from the store
		}
		delay, gaveUp := p.runFailed(err, progressed)
		if gaveUp != nil {
			p.cfg.Logger.Error("projection failed; giving up (Config.MaxRestarts)", "projection", p.id.String(), "err", err, "failures", gaveUp.Failures)
			return gaveUp
		}
		p.cfg.Logger.Warn("projection failed; restarting", "projection", p.id.String(), "err", err, "in", delay)
		for _, x := range p.hooks.restart {
			x.OnProjectionRestartScheduled(p.id, err, delay)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		p.mu.Lock()
		p.runState, p.nextRestart = RunActive, time.Time{}
		p.mu.Unlock()
	}
}

// runFailed records a failed run: the delay before the next, or, past
// Config.MaxRestarts, the error Run returns.
func (p *Projection) runFailed(err error, progressed bool) (time.Duration, *FailingError) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if progressed {
		p.failures = 0
	}
	p.failures++
	p.lastErr, p.lastErrAt = err, now
	p.failing.Store(true)
	if p.cfg.MaxRestarts > 0 && p.failures > p.cfg.MaxRestarts {
		p.runState, p.nextRestart = RunFailed, time.Time{}
		return 0, &FailingError{ID: p.id, Err: err, At: now, Failures: p.failures, GaveUp: true}
	}
	delay := p.cfg.Restart.Delay(p.failures)
	p.runState, p.nextRestart = RunRestarting, now.Add(delay)
	return delay, nil
}

// accept drops duplicates, fills gaps, and passes env on to the sink.
func (p *Projection) accept(ctx context.Context, s sink, last map[string]int64, streamOffset *query.Offset, env query.Envelope) error {
	prev, known := last[env.PersistenceID]
	if p.src.Changes {
		known = false // revisions skip and restart; no duplicates come
	}
	if known && env.SequenceNr <= prev {
		return nil // a duplicate
	}
	if known && env.SequenceNr > prev+1 && p.src.ByID != nil {
		for missing, err := range p.src.ByID.CurrentEventsByPersistenceID(ctx, env.PersistenceID, prev+1, env.SequenceNr-1) {
			if err != nil {
				return fmt.Errorf("projection %s: fill gap of %s: %w", p.id, env.PersistenceID, err)
			}
			missing.Offset = *streamOffset // never move the stored offset back
			if err := s.take(ctx, missing); err != nil {
				return err
			}
			last[env.PersistenceID] = missing.SequenceNr
		}
	}
	if err := s.take(ctx, env); err != nil {
		return err
	}
	last[env.PersistenceID] = env.SequenceNr
	*streamOffset = env.Offset
	return nil
}

// errSkipped is what attempt returns when the strategy skipped: the
// caller goes on, without counting the envelope (or group) as handled.
var errSkipped = errors.New("projection: skipped")

// attempt runs fn under the recovery strategy. It returns nil when fn
// succeeded, errSkipped when the strategy skips, the last error when it
// fails.
func (p *Projection) attempt(ctx context.Context, what string, fn func() error) error {
	r := p.cfg.Recovery
	var err error
	for try := 0; try <= r.retries; try++ {
		if try > 0 {
			t := time.NewTimer(r.delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
		if err = fn(); err == nil {
			p.handled()
			return nil
		}
		p.handlerFailed(err)
		if len(p.hooks.handlerError) > 0 {
			decision := DecisionRetry
			if try == r.retries {
				decision = DecisionFail
				if r.skip {
					decision = DecisionSkip
				}
			}
			for _, x := range p.hooks.handlerError {
				x.OnHandlerError(p.id, what, err, decision)
			}
		}
	}
	if r.skip {
		p.cfg.Logger.Warn("projection handler failed; skipping", "projection", p.id.String(), "envelope", what, "err", err)
		p.handled() // skipped: the projection goes on
		return errSkipped
	}
	return fmt.Errorf("projection %s: handler failed on %s: %w", p.id, what, err)
}

func describe(env query.Envelope) string {
	return fmt.Sprintf("%s#%d", env.PersistenceID, env.SequenceNr)
}
