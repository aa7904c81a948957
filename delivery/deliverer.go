package delivery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/entity"
)

// Defaults of Config: Akka's at-least-once-delivery settings.
const (
	DefaultRedeliverInterval = 5 * time.Second
	DefaultBurstLimit        = 10_000
	DefaultWarnAfter         = 5
	DefaultAttemptTimeout    = 10 * time.Second
	DefaultConcurrency       = 16
)

// Delivery is what a destination receives.
type Delivery[M any] struct {
	// From is the sending entity's persistence id; with ID it identifies
	// the message across redeliveries and restarts: de-duplicate on both.
	From string
	// EntityID is the sending entity's id (From without its type).
	EntityID string
	// ID is the delivery id the entity's outbox assigned.
	ID int64
	// Destination is the name the message was delivered to.
	Destination string
	Message     M
	// Attempt counts the attempts in this process, from 1.
	Attempt int
}

// Destination takes deliveries. Deliver returns nil once it has taken d
// (stored it, sent it on): the entity is then asked to confirm it. Any
// error leaves d to be delivered again. Deliver may be called again for a
// delivery it already took (a crash, a late answer): the destination
// de-duplicates by (d.From, d.ID).
type Destination[M any] interface {
	Deliver(ctx context.Context, d Delivery[M]) error
}

// DestinationFunc is a function as a Destination.
type DestinationFunc[M any] func(ctx context.Context, d Delivery[M]) error

// Deliver calls f.
func (f DestinationFunc[M]) Deliver(ctx context.Context, d Delivery[M]) error { return f(ctx, d) }

// Unconfirmed describes a delivery that has been attempted WarnAfter
// times without a confirmation (Akka's UnconfirmedWarning).
type Unconfirmed[M any] struct {
	Pending[M]
	Attempts  int
	LastError error
}

// Config configures a Deliverer. Zero numbers take their defaults;
// negative ones are an error.
type Config[M any] struct {
	// Destinations are the destinations by name (Pending.Destination). A
	// delivery to a name not here fails each attempt, naming it.
	Destinations map[string]Destination[M]
	// Confirm asks entity id to persist the confirmation of delivery
	// deliveryID, and returns once it is stored (typically a host.Send of
	// the entity's confirm command, whose event calls Outbox.Confirm). On
	// an error the delivery is attempted again later. Required.
	Confirm func(ctx context.Context, id string, deliveryID int64) error
	// RedeliverInterval is how long after an attempt an unconfirmed
	// delivery is attempted again (default 5 s; Run looks for the ones due
	// every half interval, at most every millisecond).
	RedeliverInterval time.Duration
	// BurstLimit bounds the redeliveries started per RedeliverInterval,
	// across all entities (default 10,000); the oldest attempts go first.
	// First attempts are not counted.
	BurstLimit int
	// WarnAfter is the number of attempts after which a delivery is
	// reported to OnUnconfirmed, once (default 5).
	WarnAfter int
	// OnUnconfirmed is called, from the Deliverer's goroutine, with an
	// entity's deliveries that reached WarnAfter attempts in one interval.
	// It must not block.
	OnUnconfirmed func(id string, warnings []Unconfirmed[M])
	// AttemptTimeout bounds each attempt: the Deliver call and the
	// confirmation after it (default 10 s).
	AttemptTimeout time.Duration
	// Concurrency bounds the attempts in flight at once (default 16).
	Concurrency int
	// Logger receives failed attempts at debug level (default
	// slog.Default()).
	Logger *slog.Logger
}

func (c Config[M]) withDefaults() (Config[M], error) {
	for _, f := range []struct {
		name     string
		negative bool
	}{
		{"RedeliverInterval", c.RedeliverInterval < 0}, {"BurstLimit", c.BurstLimit < 0}, {"WarnAfter", c.WarnAfter < 0},
		{"AttemptTimeout", c.AttemptTimeout < 0}, {"Concurrency", c.Concurrency < 0},
	} {
		if f.negative {
			return c, fmt.Errorf("delivery: Config.%s is negative", f.name)
		}
	}
	if c.Confirm == nil {
		return c, errors.New("delivery: Config.Confirm is required")
	}
	if c.RedeliverInterval == 0 {
		c.RedeliverInterval = DefaultRedeliverInterval
	}
	if c.BurstLimit == 0 {
		c.BurstLimit = DefaultBurstLimit
	}
	if c.WarnAfter == 0 {
		c.WarnAfter = DefaultWarnAfter
	}
	if c.AttemptTimeout == 0 {
		c.AttemptTimeout = DefaultAttemptTimeout
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// entry is one pending delivery the Deliverer follows.
type entry[M any] struct {
	id       string // the entity's
	p        Pending[M]
	attempts int
	last     time.Time // when the last attempt started
	busy     bool      // queued, or an attempt (or its confirmation) is in flight
	warned   bool
	lastErr  error
}

// followed is one entity's pending deliveries, as its last outbox holds
// them: entries by id, their ids ascending, and the outbox's LastID.
type followed[M any] struct {
	entries map[int64]*entry[M]
	ids     []int64
	lastID  int64
}

// Deliverer sends the pending messages of the outboxes it is given to
// their destinations and asks for their confirmation; see the package
// doc. Track is safe from any goroutine; Run runs the sends.
type Deliverer[M any] struct {
	entityType string
	cfg        Config[M]
	tick       time.Duration // how often Run looks for redeliveries due

	mu       sync.Mutex
	entities map[string]*followed[M] // by entity id
	first    []*entry[M]             // never attempted, in the order tracked
	queue    []*entry[M]             // busy, waiting for a worker
	burst    time.Time               // start of the current burst interval
	started  int                     // redeliveries started in it
	drained  []chan struct{}         // closed when no delivery is pending
	wake     chan struct{}           // 1-buffered: first attempts to start
	work     chan struct{}           // 1-buffered: the queue has entries
}

// New makes a Deliverer for the entities of entityType.
func New[M any](entityType string, cfg Config[M]) (*Deliverer[M], error) {
	if err := annals.CheckEntityType(entityType); err != nil {
		return nil, fmt.Errorf("delivery: %w", err)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Deliverer[M]{entityType: entityType, cfg: cfg, tick: max(cfg.RedeliverInterval/2, time.Millisecond),
		entities: map[string]*followed[M]{}, wake: make(chan struct{}, 1), work: make(chan struct{}, 1)}, nil
}

// Attach makes b hand every entity's outbox (outbox of its state) to d
// when it recovers and after each persist, keeping the OnRecovered and
// OnPersisted b already has (they run first). b's entity type must be
// d's. Attach before giving b to entity.NewHost: the host keeps a copy of
// the behavior it is given.
func Attach[C, E, S, M any](b *entity.Behavior[C, E, S], d *Deliverer[M], outbox func(S) Outbox[M]) error {
	if b.EntityType != d.entityType {
		return fmt.Errorf("delivery: Attach: behavior of %q to a deliverer for %q", b.EntityType, d.entityType)
	}
	recovered, persisted := b.OnRecovered, b.OnPersisted
	b.OnRecovered = func(id string, s S, seq int64) {
		if recovered != nil {
			recovered(id, s, seq)
		}
		d.Track(id, outbox(s))
	}
	b.OnPersisted = func(id string, s S, events []E) {
		if persisted != nil {
			persisted(id, s, events)
		}
		d.Track(id, outbox(s))
	}
	return nil
}

// Track makes o entity id's outbox: its pending deliveries not yet
// followed are attempted at once (once Run runs), those no longer pending
// (confirmed) are forgotten. It does not block. An outbox that did not
// change costs O(1); new deliveries and confirmations of the oldest cost
// what they add or remove; other confirmations O(pending).
func (d *Deliverer[M]) Track(id string, o Outbox[M]) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f := d.entities[id]
	if len(o.Pending) == 0 {
		if f != nil {
			delete(d.entities, id)
			d.checkDrained()
		}
		return
	}
	if f == nil {
		f = &followed[M]{entries: map[int64]*entry[M]{}}
		d.entities[id] = f
	}
	if o.LastID == f.lastID && len(o.Pending) == len(f.ids) {
		return // unchanged (ids are never reused)
	}
	// New deliveries: the ids above the last one seen.
	at, _ := slices.BinarySearchFunc(o.Pending, f.lastID+1, func(p Pending[M], id int64) int { return cmp.Compare(p.ID, id) })
	added := o.Pending[at:]
	// Confirmed ones: usually the oldest; otherwise found by a walk.
	removed := len(f.ids) + len(added) - len(o.Pending)
	if removed > 0 {
		front := 0
		for front < len(f.ids) && f.ids[front] < o.Pending[0].ID {
			front++
		}
		if front == removed {
			for _, gone := range f.ids[:front] {
				delete(f.entries, gone)
			}
			f.ids = f.ids[front:]
		} else {
			keep := make(map[int64]bool, len(o.Pending))
			for _, p := range o.Pending[:at] {
				keep[p.ID] = true
			}
			ids := f.ids[:0]
			for _, old := range f.ids {
				if keep[old] {
					ids = append(ids, old)
				} else {
					delete(f.entries, old)
				}
			}
			f.ids = ids
		}
	}
	for _, p := range added {
		e := &entry[M]{id: id, p: p}
		f.entries[p.ID] = e
		f.ids = append(f.ids, p.ID)
		d.first = append(d.first, e)
	}
	f.lastID = o.LastID
	if len(added) > 0 {
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
}

// current reports whether e is still pending. d.mu is held.
func (d *Deliverer[M]) current(e *entry[M]) bool {
	f := d.entities[e.id]
	return f != nil && f.entries[e.p.ID] == e
}

// checkDrained releases the Drained waiters when nothing is pending.
// d.mu is held.
func (d *Deliverer[M]) checkDrained() {
	if len(d.entities) > 0 {
		return
	}
	for _, ch := range d.drained {
		close(ch)
	}
	d.drained = nil
}

// Unconfirmed returns the number of pending deliveries followed.
func (d *Deliverer[M]) Unconfirmed() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, f := range d.entities {
		n += len(f.ids)
	}
	return n
}

// Drained waits until no delivery is pending (every one followed has been
// confirmed), or ctx ends.
func (d *Deliverer[M]) Drained(ctx context.Context) error {
	d.mu.Lock()
	if len(d.entities) == 0 {
		d.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	d.drained = append(d.drained, ch)
	d.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run attempts the pending deliveries until ctx ends: first attempts at
// once, redeliveries RedeliverInterval after the last attempt (at most
// BurstLimit started per interval), on Concurrency workers; the loop that
// finds them never waits for a worker. It returns ctx's error once the
// attempts in flight have ended; deliveries not attempted yet are
// attempted by the next Run.
func (d *Deliverer[M]) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for range d.cfg.Concurrency {
		wg.Go(func() { d.work1(ctx) })
	}
	defer func() {
		wg.Wait()
		d.requeue()
	}()
	tick := time.NewTicker(d.tick)
	defer tick.Stop()
	for {
		d.enqueue(d.takeFirst())
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-d.wake:
		case now := <-tick.C:
			es, warnings := d.takeDue(now)
			for id, ws := range warnings {
				d.cfg.OnUnconfirmed(id, ws)
			}
			d.enqueue(es)
		}
	}
}

// enqueue hands busy entries to the workers.
func (d *Deliverer[M]) enqueue(es []*entry[M]) {
	if len(es) == 0 {
		return
	}
	d.mu.Lock()
	d.queue = append(d.queue, es...)
	d.mu.Unlock()
	select {
	case d.work <- struct{}{}:
	default:
	}
}

// work1 is one worker: it attempts queued entries until ctx ends.
func (d *Deliverer[M]) work1(ctx context.Context) {
	for ctx.Err() == nil {
		d.mu.Lock()
		var e *entry[M]
		if len(d.queue) > 0 {
			e = d.queue[0]
			d.queue[0] = nil
			d.queue = d.queue[1:]
		}
		more := len(d.queue) > 0
		d.mu.Unlock()
		if more { // pass the signal on to another worker
			select {
			case d.work <- struct{}{}:
			default:
			}
		}
		if e != nil {
			d.attempt(ctx, e)
			continue
		}
		select {
		case <-ctx.Done():
		case <-d.work:
		}
	}
}

// requeue, when Run ends, releases the entries no worker took: first
// attempts go back to be made first by the next Run.
func (d *Deliverer[M]) requeue() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, e := range d.queue {
		e.busy = false
		if e.attempts == 0 && d.current(e) {
			d.first = append(d.first, e)
		}
	}
	clear(d.queue)
	d.queue = d.queue[:0]
}

// takeFirst takes the deliveries never attempted, marking them busy.
func (d *Deliverer[M]) takeFirst() []*entry[M] {
	d.mu.Lock()
	defer d.mu.Unlock()
	var es []*entry[M]
	for _, e := range d.first {
		if d.current(e) && !e.busy {
			e.busy = true
			es = append(es, e)
		}
	}
	clear(d.first)
	d.first = d.first[:0]
	return es
}

// takeDue takes the deliveries whose last attempt is RedeliverInterval
// old, oldest first, as many as the burst interval has left of
// BurstLimit, marking them busy; and the warnings due, by entity.
func (d *Deliverer[M]) takeDue(now time.Time) ([]*entry[M], map[string][]Unconfirmed[M]) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if now.Sub(d.burst) >= d.cfg.RedeliverInterval {
		d.burst, d.started = now, 0
	}
	var due []*entry[M]
	var warnings map[string][]Unconfirmed[M]
	for id, f := range d.entities {
		for _, pid := range f.ids {
			e := f.entries[pid]
			if e.attempts >= d.cfg.WarnAfter && !e.warned && d.cfg.OnUnconfirmed != nil {
				e.warned = true
				if warnings == nil {
					warnings = map[string][]Unconfirmed[M]{}
				}
				warnings[id] = append(warnings[id], Unconfirmed[M]{Pending: e.p, Attempts: e.attempts, LastError: e.lastErr})
			}
			if !e.busy && e.attempts > 0 && now.Sub(e.last) >= d.cfg.RedeliverInterval {
				due = append(due, e)
			}
		}
	}
	slices.SortFunc(due, func(a, b *entry[M]) int {
		if c := a.last.Compare(b.last); c != 0 {
			return c
		}
		if c := cmp.Compare(a.id, b.id); c != 0 {
			return c
		}
		return cmp.Compare(a.p.ID, b.p.ID)
	})
	if left := d.cfg.BurstLimit - d.started; len(due) > left {
		due = due[:left]
	}
	d.started += len(due)
	for _, e := range due {
		e.busy = true
	}
	return due, warnings
}

// attempt delivers e once and, when its destination took it, asks for its
// confirmation.
func (d *Deliverer[M]) attempt(ctx context.Context, e *entry[M]) {
	d.mu.Lock()
	e.attempts++
	e.last = time.Now()
	dl := Delivery[M]{From: annals.PersistenceID(d.entityType, e.id), EntityID: e.id, ID: e.p.ID,
		Destination: e.p.Destination, Message: e.p.Message, Attempt: e.attempts}
	d.mu.Unlock()
	actx, cancel := context.WithTimeout(ctx, d.cfg.AttemptTimeout)
	err := d.deliver(actx, dl)
	if err == nil {
		err = d.cfg.Confirm(actx, e.id, e.p.ID)
		if err != nil {
			err = fmt.Errorf("delivery: confirm %s #%d: %w", dl.From, dl.ID, err)
		}
	}
	cancel()
	d.mu.Lock()
	e.busy = false
	e.lastErr = err
	d.mu.Unlock()
	if err != nil && ctx.Err() == nil {
		d.cfg.Logger.Debug("delivery attempt failed", "persistence_id", dl.From, "delivery_id", dl.ID,
			"destination", dl.Destination, "attempt", dl.Attempt, "err", err)
	}
}

// deliver hands dl to its destination.
func (d *Deliverer[M]) deliver(ctx context.Context, dl Delivery[M]) error {
	dest, ok := d.cfg.Destinations[dl.Destination]
	if !ok {
		return fmt.Errorf("delivery: no destination named %q (delivery %s #%d)", dl.Destination, dl.From, dl.ID)
	}
	if err := dest.Deliver(ctx, dl); err != nil {
		return fmt.Errorf("delivery: %s #%d to %s: %w", dl.From, dl.ID, dl.Destination, err)
	}
	return nil
}
