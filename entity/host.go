package entity

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/engine"
	hookset "github.com/annals-go/annals/internal/hooks"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/recovery"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/snapshot"
)

// Defaults of HostConfig.
const (
	DefaultMailboxCapacity         = 4096
	DefaultStashCapacity           = 4096
	DefaultMaxConcurrentRecoveries = 50
)

// HostConfig wires a Host to its stores. Journal and Registry are required.
type HostConfig struct {
	// Journal stores the events. The host puts a journal front before it
	// (an *engine.Front: group commit, per-id ordering and waits, call
	// timeouts, the circuit breaker), tuned by Front, and closes that
	// front when it has shut down (the journal itself stays open). An
	// *engine.Front given here is used as it is and not closed: the hosts
	// of one store should share one, so that their writes share commits
	// and their reads one bound (engine.Config.MaxReads is sized for one
	// front per connection pool). When the store reads
	// recoveries for Snapshots (SQLite or PostgreSQL, with that store's
	// snapshots or none), an entity recovers in one read: its highest
	// number, snapshot and first events together.
	Journal journal.Journal
	// Front tunes the journal front the host makes (zero: engine's
	// defaults). It must be zero when Journal is already an *engine.Front.
	Front engine.Config
	// Snapshots stores snapshots; nil disables them (recovery replays all
	// events, snapshot policies are ignored).
	Snapshots snapshot.Store
	// Registry serializes events and snapshots.
	Registry *serialization.Registry

	// MailboxCapacity bounds the commands waiting for one entity, including
	// those arriving during recovery, persist or snapshot (default
	// DefaultMailboxCapacity = 4,096). Beyond it Tell and Ask fail with
	// ErrMailboxFull. It is a bound, not an allocation: a mailbox grows
	// with the commands waiting in it and gives the room back when they
	// have been handled.
	MailboxCapacity int
	// StashCapacity bounds the commands one entity stashes explicitly
	// (default DefaultStashCapacity = 4,096).
	StashCapacity int
	// IdleTimeout passivates an entity that received no command for this
	// long (0: never). A passivated entity recovers on its next command.
	// Every id that receives a command becomes live, also an unknown one:
	// set IdleTimeout or MaxLive when ids come from outside.
	IdleTimeout time.Duration
	// MaxLive bounds the live entities (0: unbounded): never more than
	// MaxLive are live at once. A command for an entity that is not live
	// while MaxLive are waits in that entity's mailbox (bounded by
	// MailboxCapacity; Tell does not block, Ask and Send wait) while the
	// least recently used live entity passivates, as soon as no command
	// waits for it; the waiting entity then starts in its place. Entities
	// wait for a place in the order of their first commands, and a
	// passivation is under way for each. An entity whose mailbox never
	// empties does not passivate: keep MaxLive above the number of
	// entities busy at once.
	MaxLive int
	// MaxConcurrentRecoveries bounds the entities recovering at once
	// (default DefaultMaxConcurrentRecoveries = 50).
	MaxConcurrentRecoveries int
	// Restart, when set, restarts an entity whose write failed (outcome
	// unknown) or whose recovery failed, after a backoff, recovering from
	// the journal. During the backoff, commands with a caller (Ask, Send),
	// waiting or arriving, are answered at once with a *RestartingError
	// (the cause and the time of the restart; the command was not
	// handled); commands sent with Tell wait and are handled after the
	// restart, in order. Without Restart such an entity stops and its
	// waiting commands fail. A write that met another writer's sequence
	// number always stops the entity.
	Restart *Backoff
	// Logger receives snapshot failures and entity stops (default
	// slog.Default()).
	Logger *slog.Logger
	// SliceRanges, when set, are the slices this host owns: a command for
	// an entity whose persistence id's slice (annals.Slice) lies outside
	// every range fails at once with a *NotOwnedError, and no instance is
	// made for it. Processes that share a store split the entities this
	// way, each owning its ranges (annals.SliceRanges), so that no two
	// write one id; see NotOwnedError.
	SliceRanges []annals.SliceRange
	// Assigned makes the host serve only the units it is given, slice
	// ranges with ServeRange or other sets of ids with ServeUnit, starting
	// with none, and give them up with HandOffRange and HandOffUnit (a
	// cluster.Member or a kafkacluster.Member gives and takes them as the
	// cluster changes). A command for an id outside every unit given fails
	// at once with a *NotOwnedError. It cannot be set with SliceRanges.
	Assigned bool
	// Hooks are called on the entities' events: each value for the hook
	// interfaces it implements (HookCommandStart, HookCommandEnd,
	// HookPersistStart, HookPersistEnd, HookRecovered, HookPassivated,
	// HookStopped, HookRestartScheduled, HookSnapshot, HookOverflow).
	Hooks []any
}

// NotOwnedError answers a command for an entity outside the host's
// HostConfig.SliceRanges: another process owns it. errors.Is matches it
// to ErrNotOwned.
//
// An entity run by two processes at once is not lost or corrupted: the
// second writer of a sequence number gets journal.ErrSequenceConflict and
// its instance stops (its caller gets the error; the next command
// recovers the entity with the other's events). SliceRanges keeps that
// from happening at all.
//
// A command refused because its range (or unit) is being handed off to
// another host has Moving set: it was not handled, and the caller may send
// it again once the range has moved. Owned lists the slice ranges the host
// serves (the units given with ServeUnit are not listed).
type NotOwnedError struct {
	PersistenceID string
	Slice         int
	Owned         []annals.SliceRange
	Moving        bool
}

func (e *NotOwnedError) Error() string {
	if e.Moving {
		return fmt.Sprintf("entity: %s (slice %d) is moving to another host", e.PersistenceID, e.Slice)
	}
	return fmt.Sprintf("entity: %s (slice %d) is not owned by this host (slices %v)", e.PersistenceID, e.Slice, e.Owned)
}

// Unwrap returns ErrNotOwned.
func (e *NotOwnedError) Unwrap() error { return ErrNotOwned }

// Host runs the entities of one Behavior: it spawns an entity on its first
// command, routes commands to it, passivates idle ones, and never runs two
// live instances of one id. An entity handles its commands one at a time,
// in arrival order, on a goroutine that exists while commands wait for it,
// or, for an Ask or Send that finds it idle, on the caller's goroutine (its
// recovery and handler, not its persist). It is safe for concurrent use.
type Host[C, E, S any] struct {
	b   Behavior[C, E, S]
	cfg HostConfig

	recoveries chan struct{} // semaphore of concurrent recoveries
	// p recovers and stores the entities' states: through the journal
	// front (cfg.Journal is the front) or the durable-state front.
	p     persistence[C, E, S]
	hooks hooks
	// yields learns whether idle entities should yield before giving up
	// their goroutines.
	yields yielder
	// reader reads a recovery in one call when the journal offers it for
	// the configured snapshot store (nil: three calls; always nil for
	// durable state).
	reader recovery.Reader
	wg     sync.WaitGroup
	// ctx bounds recoveries and snapshots; Shutdown cancels it once the
	// entities have stopped taking commands. Writes do not use it: a write
	// in flight completes (bounded by the journal front's CallTimeout).
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	closed bool
	// live holds every instance that commands for its id reach: the live
	// ones (started) and, with MaxLive, those waiting for a place.
	live     map[string]*instance[C, E, S]
	started  int        // live entities: started and not yet removed (≤ MaxLive)
	lru      *list.List // of started *instance, most recently used first (with MaxLive)
	waiting  *list.List // of *instance waiting for a place, oldest first (with MaxLive)
	evicting int        // started instances asked to passivate to make room, not yet removed
	// served holds the ranges given with ServeRange (Assigned).
	served []*servedRange
}

// servedRange is a unit an Assigned host serves (a slice range, or a set
// of ids ServeUnit names): writes for its entities pass fence; once
// leaving, commands for them are refused.
type servedRange struct {
	unit    string
	r       *annals.SliceRange              // the slice range of a unit ServeRange gave; nil otherwise
	owns    func(persistenceID string) bool // the ids of a unit ServeUnit gave (r nil)
	fence   journal.Fence
	leaving bool // guarded by Host.mu
}

// NewHost returns a host for b. It checks b and cfg and fills defaults.
func NewHost[C, E, S any](b Behavior[C, E, S], cfg HostConfig) (*Host[C, E, S], error) {
	if cfg.Journal == nil {
		return nil, errors.New("entity: HostConfig.Journal is nil")
	}
	return newHost(b, cfg, nil)
}

// newHost checks b and cfg, fills defaults and makes the host, on the
// durable-state persistence state when not nil, else on cfg.Journal
// behind a front.
func newHost[C, E, S any](b Behavior[C, E, S], cfg HostConfig, state func(HostConfig) (persistence[C, E, S], error)) (*Host[C, E, S], error) {
	if err := b.validate(); err != nil {
		return nil, err
	}
	switch {
	case cfg.Registry == nil:
		return nil, errors.New("entity: HostConfig.Registry is nil")
	case cfg.MailboxCapacity < 0 || cfg.StashCapacity < 0 || cfg.MaxLive < 0 || cfg.MaxConcurrentRecoveries < 0 || cfg.IdleTimeout < 0:
		return nil, errors.New("entity: HostConfig has a negative setting")
	}
	if cfg.Restart != nil {
		r, err := cfg.Restart.CheckWith(DefaultRestartMin, DefaultRestartMax)
		if err != nil {
			return nil, fmt.Errorf("entity: HostConfig.Restart: %w", err)
		}
		cfg.Restart = &r
	}
	if err := hookset.Refuse("entity: HostConfig.Hooks", cfg.Hooks, isHook); err != nil {
		return nil, err
	}
	if cfg.Assigned && len(cfg.SliceRanges) > 0 {
		return nil, errors.New("entity: HostConfig.Assigned and HostConfig.SliceRanges are both set: a host's ranges are either fixed or given")
	}
	for _, r := range cfg.SliceRanges {
		if r.Min < 0 || r.Max >= annals.NumberOfSlices || r.Min > r.Max {
			return nil, fmt.Errorf("entity: HostConfig.SliceRanges: %v is not a range of slices 0-%d", r, annals.NumberOfSlices-1)
		}
	}
	cfg.SliceRanges = slices.Clone(cfg.SliceRanges)
	if cfg.Snapshots != nil && (b.Snapshots.Every > 0 || b.Snapshots.When != nil) {
		// Every snapshot would fail: say so now, not in a warning per
		// snapshot. (A state whose zero value is nil has no type to check
		// until it is set.)
		if st := any(b.empty()); st != nil {
			if _, _, _, err := cfg.Registry.Serialize(st); err != nil {
				return nil, fmt.Errorf("entity: Behavior %q takes snapshots, and its state cannot be serialized (register the state type in HostConfig.Registry): %w", b.EntityType, err)
			}
		}
	}
	if cfg.MailboxCapacity == 0 {
		cfg.MailboxCapacity = DefaultMailboxCapacity
	}
	if cfg.StashCapacity == 0 {
		cfg.StashCapacity = DefaultStashCapacity
	}
	if cfg.MaxConcurrentRecoveries == 0 {
		cfg.MaxConcurrentRecoveries = DefaultMaxConcurrentRecoveries
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	untuned := reflect.DeepEqual(cfg.Front, engine.Config{})
	if cfg.Front.Logger == nil {
		cfg.Front.Logger = cfg.Logger
	}
	var p persistence[C, E, S]
	var reader recovery.Reader
	if state != nil {
		var err error
		if p, err = state(cfg); err != nil {
			return nil, err
		}
	} else {
		jp := journalPersistence[C, E, S]{}
		if f, ok := cfg.Journal.(*engine.Front); ok {
			if !untuned {
				return nil, errors.New("entity: HostConfig.Front tunes the front the host makes, and HostConfig.Journal is already an *engine.Front: configure that one")
			}
			jp.front = f
		} else {
			f, err := engine.NewFront(cfg.Journal, cfg.Front)
			if err != nil {
				return nil, fmt.Errorf("entity: HostConfig.Front: %w", err)
			}
			jp.front, jp.own, cfg.Journal = f, true, f
		}
		p = jp
		if r, ok := cfg.Journal.(recovery.Reader); ok && r.ReadsSnapshotsOf(cfg.Snapshots) {
			reader = r
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Host[C, E, S]{
		p:          p,
		hooks:      newHooks(cfg.Hooks),
		reader:     reader,
		ctx:        ctx,
		cancel:     cancel,
		b:          b,
		cfg:        cfg,
		recoveries: make(chan struct{}, cfg.MaxConcurrentRecoveries),
		live:       map[string]*instance[C, E, S]{},
		lru:        list.New(),
		waiting:    list.New(),
	}, nil
}

// Tell sends cmd to entity id without waiting. It fails at once with
// ErrMailboxFull or ErrHostClosed; otherwise the command will be handled.
func (h *Host[C, E, S]) Tell(id string, cmd C) error {
	inst, err := h.submit(nil, id, envelope[C]{cmd: cmd})
	if inst != nil {
		go inst.run()
	}
	return err
}

// Send sends cmd to entity id and waits until it has been handled: nil when
// its effect completed, the rejection or failure of its write, ErrUnhandled,
// or ctx's error (the command is still handled, as with Ask).
func (h *Host[C, E, S]) Send(ctx context.Context, id string, cmd C) error {
	done := make(chan error, 1)
	inst, err := h.submit(ctx, id, envelope[C]{cmd: cmd, done: done})
	if err != nil {
		return err
	}
	if inst != nil {
		inst.runInline(ctx, done)
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Ask sends the command that mk builds around a new ReplyTo to entity id,
// and returns the reply. It fails with the command's error (a rejected or
// failed write, ErrUnhandled, ErrStopped, ...), with ErrNoReply when the
// command was handled without a reply, or with ctx's error. As with Akka's
// ask timeout, a command whose Ask gave up on ctx is still handled: ctx
// bounds the wait, not the command. When the entity is idle, the caller's
// goroutine recovers it if needed and runs the command's handler (see
// Host); ctx's end stops that work at the next step (a recovery read is
// started again on the entity's goroutine), but a handler runs to its end
// first: handlers must not block, as in any actor.
func Ask[R, C, E, S any](ctx context.Context, h *Host[C, E, S], id string, mk func(ReplyTo[R]) C) (R, error) {
	var zero R
	reply := newReplyTo[R]()
	done := make(chan error, 1)
	inst, err := h.submit(ctx, id, envelope[C]{cmd: mk(reply), done: done})
	if err != nil {
		return zero, err
	}
	if inst != nil {
		inst.runInline(ctx, done)
	}
	select {
	case <-reply.c.sent:
		return reply.c.value, reply.c.err
	case err := <-done:
		select {
		case <-reply.c.sent:
			return reply.c.value, reply.c.err
		default:
		}
		if err == nil {
			err = ErrNoReply
		}
		return zero, err
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// EntityType returns the entity type of the host's Behavior.
func (h *Host[C, E, S]) EntityType() string { return h.b.EntityType }

// Live returns the number of live entities: started (recovering, serving
// or idle) and not yet passivated or stopped. It is never more than
// MaxLive; entities waiting for a place are not counted.
func (h *Host[C, E, S]) Live() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.started
}

// Shutdown stops the host: new commands fail with ErrHostClosed; each
// entity finishes the command it is handling (an in-flight persist
// completes and its reply is sent), its waiting commands fail with
// ErrHostClosed, and it stops; so do the commands of entities waiting for
// a place under MaxLive. Shutdown returns when every entity has stopped,
// or with ctx's error.
func (h *Host[C, E, S]) Shutdown(ctx context.Context) error {
	h.mu.Lock()
	h.closed = true
	var idle, never []*instance[C, E, S]
	for id, inst := range h.live {
		if !inst.started {
			delete(h.live, id)
			never = append(never, inst)
			continue
		}
		if inst.mailbox.signal(signalShutdown) {
			idle = append(idle, inst)
		}
	}
	h.waiting.Init()
	h.mu.Unlock()
	for _, inst := range never { // outside the lock: the answers run hooks
		inst.failWaiting(ErrHostClosed)
	}
	// Idle entities stop on one goroutine, not one each: stopping runs no
	// user code and no I/O.
	go func() {
		for _, inst := range idle {
			inst.run()
		}
	}()
	done := make(chan struct{})
	go func() {
		h.wg.Wait()
		h.cancel()
		_ = h.p.close() // sends and answers what is queued
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		h.cancel() // abandon recoveries and snapshots still running
		return ctx.Err()
	}
}

// submit delivers env with the sender's context ctx (nil for Tell): the
// command's persist runs with its values. With command hooks, it reports
// the command's start, and its end when it is refused here. It returns the
// instance the caller must work for (see deliver).
func (h *Host[C, E, S]) submit(ctx context.Context, id string, env envelope[C]) (*instance[C, E, S], error) {
	if !h.hooks.commands() {
		env.ctx = ctx
		return h.deliver(id, env)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	pid := annals.PersistenceID(h.b.EntityType, id)
	env.ctx = h.hooks.commandStarted(ctx, pid)
	inst, err := h.deliver(id, env)
	if err != nil {
		h.hooks.commandEnded(env.ctx, pid, err)
	}
	return inst, err
}

// deliver routes env to id's live instance, spawning it if needed. When no
// goroutine works for the instance, it returns it: the caller must then
// work for it, with run on a goroutine of its own or runInline (the wait
// group counts that work already). Otherwise it returns nil.
func (h *Host[C, E, S]) deliver(id string, env envelope[C]) (*instance[C, E, S], error) {
	if id == "" {
		return nil, errors.New("entity: empty entity id")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrHostClosed
	}
	inst := h.live[id]
	fresh := false // inst was spawned and started here: no goroutine works for it yet
	switch {
	case inst == nil && h.cfg.Assigned:
		rng, err := h.servedFor(id)
		if err != nil {
			return nil, err
		}
		inst, fresh = h.spawn(id)
		inst.rng = rng
	case inst == nil:
		// Only owned entities have instances: the check is made once, when
		// one is made.
		if len(h.cfg.SliceRanges) > 0 {
			if err := h.owns(id); err != nil {
				return nil, err
			}
		}
		inst, fresh = h.spawn(id)
	case inst.rng != nil && inst.rng.leaving:
		return nil, &NotOwnedError{PersistenceID: inst.pid, Slice: annals.Slice(inst.pid), Moving: true}
	}
	added, start := inst.mailbox.put(env, h.cfg.MailboxCapacity)
	if !added {
		h.hooks.overflowed(inst.pid, OverflowMailbox)
		// Never a fresh instance: its mailbox is empty, and capacities are
		// at least 1.
		return nil, fmt.Errorf("%w: %d commands wait for %s", ErrMailboxFull, h.cfg.MailboxCapacity, inst.pid)
	}
	if h.cfg.MaxLive > 0 && inst.started {
		h.lru.MoveToFront(inst.elem)
	}
	if fresh || start {
		return inst, nil
	}
	return nil, nil
}

// owns returns a *NotOwnedError unless id's slice lies in the host's
// SliceRanges.
func (h *Host[C, E, S]) owns(id string) error {
	pid := annals.PersistenceID(h.b.EntityType, id)
	slice := annals.Slice(pid)
	for _, r := range h.cfg.SliceRanges {
		if r.Contains(slice) {
			return nil
		}
	}
	return &NotOwnedError{PersistenceID: pid, Slice: slice, Owned: slices.Clone(h.cfg.SliceRanges)}
}

// servedFor returns the served unit of id, or a *NotOwnedError when it is
// in none or its unit is leaving. h.mu is held.
func (h *Host[C, E, S]) servedFor(id string) (*servedRange, error) {
	pid := annals.PersistenceID(h.b.EntityType, id)
	slice := annals.Slice(pid)
	for _, sr := range h.served {
		if (sr.r != nil && sr.r.Contains(slice)) || (sr.r == nil && sr.owns(pid)) {
			if sr.leaving {
				return nil, &NotOwnedError{PersistenceID: pid, Slice: slice, Moving: true}
			}
			return sr, nil
		}
	}
	owned := make([]annals.SliceRange, 0, len(h.served))
	for _, sr := range h.served {
		if sr.r != nil {
			owned = append(owned, *sr.r)
		}
	}
	return nil, &NotOwnedError{PersistenceID: pid, Slice: slice, Owned: owned}
}

// ServeRange makes an Assigned host serve the entities whose slices lie in
// r, as ServeUnit does under the unit name r.String(): commands for them
// are taken, and each write of theirs passes fence (the zero Fence: every
// write passes). r must not overlap a range the host serves or is handing
// off.
func (h *Host[C, E, S]) ServeRange(r annals.SliceRange, fence journal.Fence) error {
	if r.Min < 0 || r.Max >= annals.NumberOfSlices || r.Min > r.Max {
		return fmt.Errorf("entity: ServeRange: %v is not a range of slices 0-%d", r, annals.NumberOfSlices-1)
	}
	return h.serve(&servedRange{unit: r.String(), r: &r, fence: fence})
}

// ServeUnit makes an Assigned host serve the entities whose persistence
// ids owns reports, under the name unit (for example a Kafka partition's
// ids: see package store/kafka/kafkacluster): commands for them are taken,
// and each write of theirs passes fence (the zero Fence: every write
// passes): it is sent only while fence.Open returns nil, checked as the
// write leaves for the store, and a store that keeps fence.Token's lease
// checks it again where the write commits (engine.Front.WriteFenced). A
// write refused by its fence fails its command and stops (or restarts) its
// entity.
//
// Rules: unit must be a name the host does not serve yet; owns must be
// fast and safe for concurrent use, and no two units served at once may
// own one id (the host takes the first that does).
func (h *Host[C, E, S]) ServeUnit(unit string, owns func(persistenceID string) bool, fence journal.Fence) error {
	if unit == "" || owns == nil {
		return errors.New("entity: ServeUnit needs a unit name and an owns function")
	}
	return h.serve(&servedRange{unit: unit, owns: owns, fence: fence})
}

// serve adds u to the served units.
func (h *Host[C, E, S]) serve(u *servedRange) error {
	if !h.cfg.Assigned {
		return errors.New("entity: ServeRange or ServeUnit on a host without HostConfig.Assigned")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return ErrHostClosed
	}
	for _, sr := range h.served {
		switch {
		case sr.unit == u.unit:
			return fmt.Errorf("entity: the host already serves %s", u.unit)
		case u.r != nil && sr.r != nil && sr.r.Min <= u.r.Max && u.r.Min <= sr.r.Max:
			return fmt.Errorf("entity: ServeRange: %v overlaps %v, which the host serves", *u.r, *sr.r)
		}
	}
	h.served = append(h.served, u)
	return nil
}

// HandOffRange hands off r, a range given with ServeRange, as HandOffUnit
// does.
func (h *Host[C, E, S]) HandOffRange(ctx context.Context, r annals.SliceRange) error {
	return h.HandOffUnit(ctx, r.String())
}

// HandOffUnit stops serving unit, given with ServeUnit or ServeRange (whose
// unit name is the range's String), gracefully: commands for its entities
// are refused from now on with a *NotOwnedError with Moving set (not
// handled: the caller may send them to the unit's next owner); each live
// entity of the unit handles the commands already in its mailbox (its
// persists complete and their replies are sent) and then passivates;
// entities that were waiting for a place under MaxLive never start, and
// their commands are refused in the same way. HandOffUnit returns when
// every entity of the unit has stopped, or with ctx's error while some
// still run (they go on refusing new commands and stop when they are
// done); either way the unit is no longer served and may be served again.
func (h *Host[C, E, S]) HandOffUnit(ctx context.Context, unit string) error {
	h.mu.Lock()
	var sr *servedRange
	for _, x := range h.served {
		if x.unit == unit {
			sr = x
		}
	}
	if sr == nil {
		h.mu.Unlock()
		return fmt.Errorf("entity: HandOffUnit: the host does not serve %s", unit)
	}
	sr.leaving = true
	var gone []chan struct{}
	var never []*instance[C, E, S]
	for id, inst := range h.live {
		if inst.rng != sr {
			continue
		}
		if !inst.started {
			delete(h.live, id)
			h.waiting.Remove(inst.elem)
			never = append(never, inst)
			continue
		}
		if inst.gone == nil {
			inst.gone = make(chan struct{})
		}
		gone = append(gone, inst.gone)
		inst.raise(signalPassivate)
	}
	h.mu.Unlock()
	for _, inst := range never {
		inst.failWaiting(&NotOwnedError{PersistenceID: inst.pid, Slice: annals.Slice(inst.pid), Moving: true})
	}
	var err error
	for _, c := range gone {
		select {
		case <-c:
			continue
		case <-ctx.Done():
			err = fmt.Errorf("entity: HandOffUnit %s: entities still running: %w", unit, ctx.Err())
		}
		break
	}
	// The unit is no longer served even when entities of it still run:
	// they keep refusing commands (their unit stays leaving), and it may
	// be served again at once.
	h.mu.Lock()
	h.served = slices.DeleteFunc(h.served, func(x *servedRange) bool { return x == sr })
	h.mu.Unlock()
	return err
}

// spawn makes the instance of id and starts it, or, when MaxLive entities
// are live, queues it for a place and has one passivate. It reports
// whether it started it: the caller must then work for it (see start).
// h.mu is held.
func (h *Host[C, E, S]) spawn(id string) (*instance[C, E, S], bool) {
	inst := &instance[C, E, S]{
		h:       h,
		id:      id,
		pid:     annals.PersistenceID(h.b.EntityType, id),
		mailbox: mailbox[C]{active: true, wg: &h.wg}, // active: no goroutine starts before start's
	}
	h.live[id] = inst
	if h.cfg.MaxLive > 0 && h.started >= h.cfg.MaxLive {
		inst.elem = h.waiting.PushBack(inst)
		h.evict()
		return inst, false
	}
	h.start(inst)
	return inst, true
}

// start makes inst live and counts the work for it in the wait group: the
// caller must start that work (run on a goroutine, or runInline). h.mu is
// held.
func (h *Host[C, E, S]) start(inst *instance[C, E, S]) {
	inst.started = true
	h.started++
	if h.cfg.MaxLive > 0 {
		inst.elem = h.lru.PushFront(inst)
	}
	h.wg.Add(1)
}

// evict asks the least recently used live entities to passivate until a
// passivation is under way for every waiting instance (or every live
// entity is passivating). h.mu is held.
func (h *Host[C, E, S]) evict() {
	for h.evicting < h.waiting.Len() {
		var victim *instance[C, E, S]
		for e := h.lru.Back(); e != nil && victim == nil; e = e.Prev() {
			if inst := e.Value.(*instance[C, E, S]); !inst.passivating {
				victim = inst
			}
		}
		if victim == nil {
			return
		}
		victim.passivating = true
		h.evicting++
		victim.raise(signalPassivate)
	}
}

// remove takes a started inst out of the host if its mailbox is empty, or
// always when force is set, and starts the oldest waiting instance in its
// place. It returns whether inst is out (also when it was already); once
// out, no command can reach its mailbox.
func (h *Host[C, E, S]) remove(inst *instance[C, E, S], force bool) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !force && inst.mailbox.len() > 0 {
		return false
	}
	if h.live[inst.id] != inst {
		return true
	}
	delete(h.live, inst.id)
	if inst.gone != nil {
		close(inst.gone)
	}
	h.started--
	if h.cfg.MaxLive > 0 {
		h.lru.Remove(inst.elem)
		if inst.passivating {
			h.evicting--
		}
		for !h.closed && h.waiting.Len() > 0 && h.started < h.cfg.MaxLive {
			next := h.waiting.Remove(h.waiting.Front()).(*instance[C, E, S])
			h.start(next)
			go next.run()
		}
		// More may wait than were asked to make room when they came: the
		// entity that just started (after its waiting commands) or another
		// must make room in turn.
		if !h.closed {
			h.evict()
		}
	}
	return true
}
