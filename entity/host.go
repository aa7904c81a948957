package entity

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/journal"
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
	// Journal stores the events. Use an *engine.Front before the store, for
	// group commit, per-id ordering, timeouts and the circuit breaker.
	Journal journal.Journal
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
	// MaxLive bounds the live entities: beyond it, the least recently used
	// passivates as soon as its mailbox is empty (0: unbounded).
	MaxLive int
	// MaxConcurrentRecoveries bounds the entities recovering at once
	// (default DefaultMaxConcurrentRecoveries = 50).
	MaxConcurrentRecoveries int
	// Restart, when set, restarts an entity whose write failed (outcome
	// unknown) or whose recovery failed, after a backoff, recovering from
	// the journal and keeping its waiting commands. Without it such an
	// entity stops and its waiting commands fail. A write that met another
	// writer's sequence number always stops the entity.
	Restart *Backoff
	// Logger receives snapshot failures and entity stops (default
	// slog.Default()).
	Logger *slog.Logger
}

// Host runs the entities of one Behavior: it spawns an entity on its first
// command, routes commands to it, passivates idle ones, and never runs two
// live instances of one id. An entity handles its commands one at a time,
// in arrival order, on a goroutine that exists while commands wait for it.
// It is safe for concurrent use.
type Host[C, E, S any] struct {
	b   Behavior[C, E, S]
	cfg HostConfig

	recoveries chan struct{} // semaphore of concurrent recoveries
	wg         sync.WaitGroup
	// ctx bounds recoveries and snapshots; Shutdown cancels it once the
	// entities have stopped taking commands. Writes do not use it: a write
	// in flight completes (bounded by the journal front's CallTimeout).
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	closed bool
	live   map[string]*instance[C, E, S]
	lru    *list.List // of *instance, most recently used first (with MaxLive)
}

// NewHost returns a host for b. It checks b and cfg and fills defaults.
func NewHost[C, E, S any](b Behavior[C, E, S], cfg HostConfig) (*Host[C, E, S], error) {
	if err := b.validate(); err != nil {
		return nil, err
	}
	switch {
	case cfg.Journal == nil:
		return nil, errors.New("entity: HostConfig.Journal is nil")
	case cfg.Registry == nil:
		return nil, errors.New("entity: HostConfig.Registry is nil")
	case cfg.MailboxCapacity < 0 || cfg.StashCapacity < 0 || cfg.MaxLive < 0 || cfg.MaxConcurrentRecoveries < 0 || cfg.IdleTimeout < 0:
		return nil, errors.New("entity: HostConfig has a negative setting")
	case cfg.Restart != nil && (cfg.Restart.Min <= 0 || cfg.Restart.Max < cfg.Restart.Min):
		return nil, errors.New("entity: HostConfig.Restart needs 0 < Min ≤ Max")
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
	ctx, cancel := context.WithCancel(context.Background())
	return &Host[C, E, S]{
		ctx:        ctx,
		cancel:     cancel,
		b:          b,
		cfg:        cfg,
		recoveries: make(chan struct{}, cfg.MaxConcurrentRecoveries),
		live:       map[string]*instance[C, E, S]{},
		lru:        list.New(),
	}, nil
}

// Tell sends cmd to entity id without waiting. It fails at once with
// ErrMailboxFull or ErrHostClosed; otherwise the command will be handled.
func (h *Host[C, E, S]) Tell(id string, cmd C) error {
	return h.deliver(id, envelope[C]{cmd: cmd})
}

// Send sends cmd to entity id and waits until it has been handled: nil when
// its effect completed, the rejection or failure of its write, ErrUnhandled,
// or ctx's error (the command is still handled, as with Ask).
func (h *Host[C, E, S]) Send(ctx context.Context, id string, cmd C) error {
	done := make(chan error, 1)
	if err := h.deliver(id, envelope[C]{cmd: cmd, done: done}); err != nil {
		return err
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
// bounds the wait, not the command.
func Ask[R, C, E, S any](ctx context.Context, h *Host[C, E, S], id string, mk func(ReplyTo[R]) C) (R, error) {
	var zero R
	reply := newReplyTo[R]()
	done := make(chan error, 1)
	if err := h.deliver(id, envelope[C]{cmd: mk(reply), done: done}); err != nil {
		return zero, err
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

// Live returns the number of live entities.
func (h *Host[C, E, S]) Live() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.live)
}

// Shutdown stops the host: new commands fail with ErrHostClosed; each
// entity finishes the command it is handling (an in-flight persist
// completes and its reply is sent), its waiting commands fail with
// ErrHostClosed, and it stops. Shutdown returns when every entity has
// stopped, or with ctx's error.
func (h *Host[C, E, S]) Shutdown(ctx context.Context) error {
	h.mu.Lock()
	h.closed = true
	var idle []*instance[C, E, S]
	for _, inst := range h.live {
		if inst.mailbox.signal(signalShutdown) {
			idle = append(idle, inst)
		}
	}
	h.mu.Unlock()
	// Idle entities stop on one goroutine, not one each: stopping runs no
	// user code and no I/O.
	go func() {
		for _, inst := range idle {
			inst.run()
		}
	}()
	done := make(chan struct{})
	go func() { h.wg.Wait(); h.cancel(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		h.cancel() // abandon recoveries and snapshots still running
		return ctx.Err()
	}
}

// deliver routes env to id's live instance, spawning it if needed.
func (h *Host[C, E, S]) deliver(id string, env envelope[C]) error {
	if id == "" {
		return errors.New("entity: empty entity id")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return ErrHostClosed
	}
	inst := h.live[id]
	if inst == nil {
		inst = h.spawn(id)
	}
	if !inst.put(env) {
		return fmt.Errorf("%w: %d commands wait for %s", ErrMailboxFull, h.cfg.MailboxCapacity, inst.pid)
	}
	if h.cfg.MaxLive > 0 {
		h.lru.MoveToFront(inst.elem)
	}
	return nil
}

// spawn starts an instance for id. h.mu is held.
func (h *Host[C, E, S]) spawn(id string) *instance[C, E, S] {
	inst := &instance[C, E, S]{
		h:       h,
		id:      id,
		pid:     annals.PersistenceID(h.b.EntityType, id),
		mailbox: mailbox[C]{active: true, wg: &h.wg}, // active until run starts below
	}
	h.live[id] = inst
	if h.cfg.MaxLive > 0 {
		inst.elem = h.lru.PushFront(inst)
	}
	if h.cfg.MaxLive > 0 && len(h.live) > h.cfg.MaxLive {
		for e := h.lru.Back(); e != nil; e = e.Prev() {
			if old := e.Value.(*instance[C, E, S]); old != inst && !old.passivating {
				old.passivating = true
				old.raise(signalPassivate)
				break
			}
		}
	}
	h.wg.Add(1)
	go inst.run()
	return inst
}

// remove takes inst out of the host if its mailbox is empty, or always when
// force is set. It returns whether inst was removed; once removed, no
// command can reach its mailbox.
func (h *Host[C, E, S]) remove(inst *instance[C, E, S], force bool) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !force && inst.mailbox.len() > 0 {
		return false
	}
	if h.live[inst.id] == inst {
		delete(h.live, inst.id)
		if inst.elem != nil {
			h.lru.Remove(inst.elem)
		}
	}
	return true
}
