package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/internal/wake"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/membership"
)

// Member is one process's place in a cluster: it keeps its membership
// and leases alive, takes its share of the ranges and daemon instances,
// hands off what others need, and knows who owns what. It is safe for
// concurrent use.
type Member struct {
	cfg    Config
	me     membership.Member
	hooks  Hooks
	start  time.Time     // base of the terms, read on the monotonic clock
	margin time.Duration // a term ends this long before the store's lease
	ranges []annals.SliceRange
	sets   [][]string // lease names of each set: the ranges, then each daemon's instances
	units  map[string]unit

	ctx      context.Context // ends when the member has left
	cancel   context.CancelFunc
	loopDone chan struct{}
	poke     chan struct{} // a round now (capacity 1)
	look     chan struct{} // a look at the cluster soon (capacity 1; see lookSoon)
	lastLook atomic.Int64  // when the last look began, after start (nanoseconds)
	// wakeSoon wakes those waiting on Changed a while after a Refresh on
	// a member whose loop has stopped (see Refresh).
	wakeSoon wake.Later
	work     sync.WaitGroup

	mu   sync.Mutex
	held map[string]*held
	// dropped holds when each lease left held (given up or lost): a
	// heartbeat sent before that is no ground to serve it again.
	dropped     map[string]time.Time
	heldChanged chan struct{} // closed when held changes
	view        view
	changed     chan struct{} // closed when the view is read again
	handOffs    int           // hand-offs in progress
	short       bool          // the last plan left the member under its share: others are handing off to it
	leaving     bool
	left        bool
}

// unit is what a lease stands for: a slice range or a daemon's instance.
type unit struct {
	isRange  bool
	r        annals.SliceRange
	daemon   *Daemon
	instance int
}

// held is a lease the member holds.
type held struct {
	lease  membership.Lease
	until  atomic.Int64 // end of the term in nanoseconds after Member.start; 0 ended
	giving bool         // being handed off or dropped (guarded by Member.mu)
	// served: the shards were given the range (a range's lease)
	served bool
	// a daemon instance's run
	stop    context.CancelFunc
	done    chan struct{}
	expires *time.Timer // stops the run when the term ends
}

// view is the cluster as last read from the store.
type view struct {
	live []membership.Member // sorted by name
	// staying are the live members not leaving (no live LeavingLease of
	// theirs): the members the work is shared among.
	staying []membership.Member
	leases  map[string]membership.Lease
	byName  map[string]membership.Member
}

// Join makes a member of cfg.Cluster: it records the member in the store
// (failing with membership.ErrNameTaken when a live member has its name),
// takes its first share of the work before it returns, and keeps the
// membership and leases up until Leave.
func Join(ctx context.Context, cfg Config) (*Member, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	ranges, _ := annals.SliceRanges(cfg.Ranges)
	hooks, _ := NewHooks("", cfg.Hooks) // checked by cfg.check
	var inc [8]byte
	_, _ = rand.Read(inc[:])
	m := &Member{
		cfg:         cfg,
		me:          membership.Member{Name: cfg.Name, Incarnation: hex.EncodeToString(inc[:]), Address: cfg.Address},
		hooks:       hooks,
		start:       time.Now(),
		margin:      cfg.LeaseTime / 5,
		ranges:      ranges,
		units:       map[string]unit{},
		loopDone:    make(chan struct{}),
		poke:        make(chan struct{}, 1),
		look:        make(chan struct{}, 1),
		held:        map[string]*held{},
		dropped:     map[string]time.Time{},
		heldChanged: make(chan struct{}),
		changed:     make(chan struct{}),
	}
	if !cfg.DaemonsOnly {
		names := make([]string, len(ranges))
		for i, r := range ranges {
			names[i] = RangeLease(r)
			m.units[names[i]] = unit{isRange: true, r: r}
		}
		m.sets = append(m.sets, names)
	}
	for i := range m.cfg.Daemons {
		d := &m.cfg.Daemons[i]
		names := make([]string, d.Instances)
		for j := range names {
			names[j] = DaemonLease(d.Name, j)
			m.units[names[j]] = unit{daemon: d, instance: j}
		}
		m.sets = append(m.sets, names)
	}
	if cfg.DaemonsOnly {
		// A daemons-only member among members with shards would take a
		// share of the ranges' places and leave ranges nobody serves.
		leases, err := cfg.Store.Leases(ctx, cfg.Cluster)
		if err != nil {
			return nil, fmt.Errorf("cluster: join %s as %s: %w", cfg.Cluster, cfg.Name, err)
		}
		for _, l := range leases {
			if l.Live && strings.HasPrefix(l.Name, "slices/") {
				return nil, fmt.Errorf("cluster: join %s as %s: %w: the cluster's members serve slice ranges (%s is held), and a daemons-only member must not join them; give the daemons to those members, or a cluster of their own", cfg.Cluster, cfg.Name, ErrDaemonsOnlyAmongShards, l.Name)
			}
		}
	}
	if err := cfg.Store.Join(ctx, cfg.Cluster, m.me, cfg.LeaseTime); err != nil {
		return nil, fmt.Errorf("cluster: join %s as %s: %w", cfg.Cluster, cfg.Name, err)
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.round()
	go m.loop()
	return m, nil
}

// Name returns the member's name.
func (m *Member) Name() string { return m.me.Name }

// Incarnation returns the member's incarnation: new for each Join.
func (m *Member) Incarnation() string { return m.me.Incarnation }

// Ranges returns the slice ranges, in order; their leases are named by
// RangeLease. A DaemonsOnly member holds none of them, and OwnerOf never
// finds an owner through it.
func (m *Member) Ranges() []annals.SliceRange { return slices.Clone(m.ranges) }

// loop runs a round every heartbeat, and at once when poked, until the
// member has left.
func (m *Member) loop() {
	defer close(m.loopDone)
	t := time.NewTicker(m.cfg.Heartbeat)
	defer t.Stop()
	for {
		// A member under its share looks again four times a heartbeat
		// (reads only), so that leases others release reach it sooner.
		var look <-chan time.Time
		m.mu.Lock()
		short := m.short
		m.mu.Unlock()
		if short {
			look = time.After(m.cfg.Heartbeat / 4)
		}
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
			m.round()
		case <-m.poke:
			m.round()
		case <-look:
			m.lookNow()
		case <-m.look:
			if time.Duration(m.now()-m.lastLook.Load()) >= m.cfg.Heartbeat/4 {
				m.lookNow()
			}
		}
	}
}

// lookNow reads the cluster and acts on it, without a heartbeat.
func (m *Member) lookNow() {
	m.lastLook.Store(m.now())
	if m.readView(context.Background()) {
		m.plan()
	}
}

// lookSoon asks the loop to read the cluster again, at most four times a
// heartbeat: a request waiting for a range to move learns the new owner
// sooner than at the next heartbeat.
func (m *Member) lookSoon() {
	select {
	case m.look <- struct{}{}:
	default:
	}
}

// pokeLoop asks for a round now.
func (m *Member) pokeLoop() {
	select {
	case m.poke <- struct{}{}:
	default:
	}
}

// term returns the time after Member.start at which a lease renewed by a
// call sent at sent ends for this member.
func (m *Member) term(sent time.Time) int64 {
	return int64(sent.Sub(m.start) + m.cfg.LeaseTime - m.margin)
}

// now returns the time after Member.start, on the monotonic clock.
func (m *Member) now() int64 { return int64(time.Since(m.start)) }

// call returns a context for one store call of a round.
func (m *Member) call() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), m.cfg.LeaseTime/2)
}

// round renews the member and its leases, reads the cluster, and acts on
// it: leases lost are dropped, free ones taken up to the member's share,
// ranges above it handed off when others need them.
func (m *Member) round() {
	ctx, cancel := m.call()
	sent := time.Now()
	renewed, err := m.cfg.Store.Heartbeat(ctx, m.cfg.Cluster, m.me.Holder(), m.cfg.LeaseTime)
	cancel()
	m.hooks.Heartbeat(time.Since(sent), len(renewed), err)
	switch {
	case err == nil:
		m.renew(renewed, sent)
	case errors.Is(err, membership.ErrNotMember):
		// Removed, or replaced by another process under this name: what
		// this member held is not its own any more.
		m.dropAll(err)
		ctx, cancel := m.call()
		if jerr := m.cfg.Store.Join(ctx, m.cfg.Cluster, m.me, m.cfg.LeaseTime); jerr != nil {
			m.cfg.Logger.Warn("cluster: member not recorded, and joining again failed", "cluster", m.cfg.Cluster, "member", m.me.Name, "err", jerr)
		}
		cancel()
	default:
		m.cfg.Logger.Warn("cluster: heartbeat failed", "cluster", m.cfg.Cluster, "member", m.me.Name, "err", err)
	}
	m.dropEnded()
	if m.readView(context.Background()) {
		m.plan()
	}
}

// readView reads the members and leases into the view, each read ending
// after LeaseTime/2 or with parent; false when the store could not be
// read.
func (m *Member) readView(parent context.Context) bool {
	ctx, cancel := context.WithTimeout(parent, m.cfg.LeaseTime/2)
	members, err := m.cfg.Store.Members(ctx, m.cfg.Cluster)
	var leases []membership.Lease
	if err == nil {
		leases, err = m.cfg.Store.Leases(ctx, m.cfg.Cluster)
	}
	cancel()
	if err != nil {
		m.cfg.Logger.Warn("cluster: reading the cluster failed", "cluster", m.cfg.Cluster, "member", m.me.Name, "err", err)
		return false
	}
	m.setView(members, leases)
	return true
}

// renew extends the terms of the leases the heartbeat renewed; a lease
// held and not renewed (another member took it) is dropped. A lease the
// store renewed for this member that it does not serve (it dropped it
// when its term ended, and no other member took it since) is served
// again on the new term.
func (m *Member) renew(renewed []membership.Lease, sent time.Time) {
	until := m.term(sent)
	got := map[string]bool{}
	var adopt []membership.Lease
	m.mu.Lock()
	for _, l := range renewed {
		got[l.Name] = true
		h := m.held[l.Name]
		switch {
		case h == nil:
			// Only a heartbeat sent after the lease left held shows it
			// still this member's: one sent before may have renewed it
			// just before its release, and another may hold it now.
			if _, known := m.units[l.Name]; known && !sent.Before(m.dropped[l.Name]) {
				adopt = append(adopt, l)
			}
		case !h.giving && l.Epoch == h.lease.Epoch && h.until.Load() > m.now():
			// A term that ended is not extended: what ran for it stopped
			// (its fence closed, its daemon run was cancelled), so the
			// lease is dropped and served afresh (dropEnded, then adopt).
			h.until.Store(until)
			if h.expires != nil {
				h.expires.Reset(time.Duration(until - m.now()))
			}
		}
	}
	for name, h := range m.held {
		if !got[name] && !h.giving {
			m.lose(name, h, fmt.Errorf("cluster: lease %s (epoch %d) was not renewed: another member holds it", name, h.lease.Epoch))
		}
	}
	m.mu.Unlock()
	for _, l := range adopt {
		m.serve(l, sent)
	}
}

// dropEnded drops the leases whose term has ended.
func (m *Member) dropEnded() {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	for name, h := range m.held {
		if !h.giving && h.until.Load() <= now {
			m.lose(name, h, &LeaseLostError{Lease: name, Epoch: h.lease.Epoch})
		}
	}
}

// dropAll drops every lease held.
func (m *Member) dropAll(cause error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, h := range m.held {
		if !h.giving {
			m.lose(name, h, cause)
		}
	}
}

// lose stops serving a lease the member did not give up: its fence closes
// at once, then what runs for it stops. m.mu is held.
func (m *Member) lose(name string, h *held, cause error) {
	h.until.Store(0)
	m.cfg.Logger.Warn("cluster: lease lost", "cluster", m.cfg.Cluster, "member", m.me.Name, "lease", name, "epoch", h.lease.Epoch, "cause", cause)
	m.hooks.LeaseLost(name, cause)
	m.giveUp(name, h, false)
}

// setView records what the store holds and reports member changes.
func (m *Member) setView(members []membership.Member, leases []membership.Lease) {
	v := view{leases: make(map[string]membership.Lease, len(leases)), byName: make(map[string]membership.Member, len(members))}
	for _, mem := range members {
		if mem.Live {
			v.live = append(v.live, mem)
			v.byName[mem.Name] = mem
		}
	}
	for _, l := range leases {
		v.leases[l.Name] = l
	}
	for _, mem := range v.live {
		if l := v.leases[LeavingLease(mem.Name)]; !l.Live || l.Owner != mem.Holder() {
			v.staying = append(v.staying, mem)
		}
	}
	m.mu.Lock()
	old := m.view.live
	m.view = v
	m.changedView()
	m.mu.Unlock()
	m.hooks.MembersChanged(old, v.live)
}

// plan takes free leases up to the member's share of each set, and hands
// off leases above it while other members are short; a leaving member
// hands off everything.
func (m *Member) plan() {
	m.mu.Lock()
	if m.leaving {
		for name, h := range m.held {
			if !h.giving {
				m.giveUp(name, h, true)
			}
		}
		m.mu.Unlock()
		return
	}
	v := m.view
	// A leaving member is handing everything off: the others share the
	// work as if it were gone, so that what it releases first is taken at
	// once rather than when its slowest hand-off ends.
	idx := slices.IndexFunc(v.staying, func(x membership.Member) bool { return x.Name == m.me.Name && x.Incarnation == m.me.Incarnation })
	if idx < 0 {
		m.mu.Unlock()
		return // not live in the store's eyes: take nothing
	}
	n := len(v.staying)
	var acquire []string
	m.short = false
	for _, set := range m.sets {
		k := len(set)
		share := func(i int) int {
			s := k / n
			if i < k%n {
				s++
			}
			return s
		}
		count := make([]int, n)
		var free []string
		mine := 0
		var ours []string
		for _, name := range set {
			if h := m.held[name]; h != nil {
				if !h.giving {
					mine++
					ours = append(ours, name)
				}
				continue
			}
			l := v.leases[name]
			owner := -1
			if l.Live {
				owner = slices.IndexFunc(v.staying, func(x membership.Member) bool { return x.Holder() == l.Owner })
			}
			switch {
			case owner >= 0 && owner != idx:
				count[owner]++
			case !l.Live:
				free = append(free, name)
			}
		}
		want := share(idx)
		switch {
		case mine < want:
			// Start the search at this member's place so that members
			// joining together do not all reach for the same leases.
			if len(free) > 0 {
				at := idx * len(free) / n
				free = append(free[at:], free[:at]...)
			}
			acquire = append(acquire, free[:min(len(free), want-mine)]...)
			if len(free) < want-mine {
				m.short = true
			}
		case mine > want:
			short := -len(free)
			for i := range n {
				if i != idx {
					short += max(0, share(i)-count[i])
				}
			}
			moves := min(mine-want, short, m.cfg.MaxHandOffs-m.handOffs)
			for i := range max(0, moves) {
				name := ours[len(ours)-1-i]
				m.giveUp(name, m.held[name], true)
			}
		}
	}
	m.mu.Unlock()
	for _, name := range acquire {
		m.acquire(name)
	}
}

// acquire takes lease name and serves it.
func (m *Member) acquire(name string) {
	ctx, cancel := m.call()
	sent := time.Now()
	l, err := m.cfg.Store.Acquire(ctx, m.cfg.Cluster, name, m.me.Holder(), m.cfg.LeaseTime)
	cancel()
	if err != nil {
		if !errors.Is(err, membership.ErrHeld) {
			m.cfg.Logger.Warn("cluster: acquiring a lease failed", "cluster", m.cfg.Cluster, "member", m.me.Name, "lease", name, "err", err)
		}
		return
	}
	m.serve(l, sent)
}

// serve starts serving lease l, held on a term from a call sent at sent;
// a leaving member releases it instead.
func (m *Member) serve(l membership.Lease, sent time.Time) {
	name := l.Name
	h := &held{lease: l}
	h.until.Store(m.term(sent))
	u := m.units[name]
	m.mu.Lock()
	if m.leaving {
		m.held[name] = h
		m.changedHeld()
		m.giveUp(name, h, true)
		m.mu.Unlock()
		return
	}
	m.held[name] = h
	m.changedHeld()
	if u.daemon != nil {
		m.startDaemon(name, h, u)
	}
	m.mu.Unlock()
	if u.isRange {
		fence := m.fence(name, h)
		var refused error
		for _, s := range m.cfg.Shards {
			if err := s.ServeRange(u.r, fence); err != nil {
				refused = errors.Join(refused, err)
			}
		}
		m.mu.Lock()
		h.served = true
		if refused != nil {
			// Holding a range a shard does not serve would keep it from
			// the other members: give it back.
			m.cfg.Logger.Error("cluster: a shard refused a range; releasing it", "cluster", m.cfg.Cluster, "member", m.me.Name, "range", u.r, "err", refused)
			if !h.giving {
				m.giveUp(name, h, true)
			}
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
	}
	m.hooks.LeaseAcquired(l)
}

// fence returns the fence of a held lease: its Open passes until the
// lease's term ends, and its token names the lease at its epoch in the
// membership store, for a journal that keeps the leases too.
func (m *Member) fence(name string, h *held) journal.Fence {
	me := m.me.Holder()
	return journal.Fence{
		Open: func() error {
			if m.now() < h.until.Load() {
				return nil
			}
			return &LeaseLostError{Lease: name, Epoch: h.lease.Epoch}
		},
		Token: journal.FenceToken{Store: m.cfg.Store, Cluster: m.cfg.Cluster, Lease: name,
			Holder: me.Name, HolderIncarnation: me.Incarnation, Epoch: h.lease.Epoch},
	}
}

// HeldLease names the lease a daemon instance runs under: what work done
// under it checks where it commits (membership.TxChecker), so that an
// instance that lost its lease without knowing it commits nothing.
type HeldLease struct {
	Cluster, Name string
	Holder        membership.Holder
	Epoch         int64
}

type leaseKey struct{}

// LeaseOf returns the lease of the daemon instance whose Run got ctx (or a
// context made from it); false for any other context.
func LeaseOf(ctx context.Context) (HeldLease, bool) {
	l, ok := ctx.Value(leaseKey{}).(HeldLease)
	return l, ok
}

// startDaemon runs a daemon instance while h is held; its context ends
// when the member gives it up or its term ends. m.mu is held.
func (m *Member) startDaemon(name string, h *held, u unit) {
	ctx, stop := context.WithCancel(context.WithValue(context.Background(), leaseKey{},
		HeldLease{Cluster: m.cfg.Cluster, Name: name, Holder: m.me.Holder(), Epoch: h.lease.Epoch}))
	h.stop, h.done = stop, make(chan struct{})
	h.expires = time.AfterFunc(time.Duration(h.until.Load()-m.now()), stop)
	m.work.Go(func() {
		defer close(h.done)
		for ctx.Err() == nil {
			err := u.daemon.Run(ctx, u.instance)
			if ctx.Err() != nil {
				return
			}
			m.cfg.Logger.Warn("cluster: daemon instance returned; it runs again after a heartbeat", "daemon", u.daemon.Name, "instance", u.instance, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(m.cfg.Heartbeat):
			}
		}
	})
}

// giveUp stops what runs for a held lease, then, when release is set,
// closes its fence and releases it; the lease then leaves held. m.mu is
// held.
func (m *Member) giveUp(name string, h *held, release bool) {
	h.giving = true
	m.handOffs++
	u := m.units[name]
	m.work.Go(func() {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), m.cfg.HandOffTimeout)
		err := m.stopServing(ctx, u, h)
		cancel()
		h.until.Store(0) // no write passes once the lease may be another's
		if err != nil && !release && h.done != nil {
			// A daemon run that outlived the hand-off keeps its lease
			// here until it returns: taken again at the same epoch, a
			// second run would pass the same in-transaction check.
			<-h.done
		}
		if release {
			ctx, cancel := m.call()
			if rerr := m.cfg.Store.Release(ctx, m.cfg.Cluster, name, m.me.Holder()); rerr != nil {
				err = errors.Join(err, fmt.Errorf("cluster: release %s: %w", name, rerr))
			}
			cancel()
		}
		m.mu.Lock()
		delete(m.held, name)
		m.dropped[name] = time.Now()
		m.handOffs--
		m.changedHeld()
		m.mu.Unlock()
		if release {
			m.hooks.LeaseReleased(name, time.Since(start), err)
			if err != nil {
				m.cfg.Logger.Warn("cluster: hand-off incomplete; the lease was given up", "lease", name, "err", err)
			}
		}
		m.pokeLoop()
	})
}

// stopServing stops what runs for h: the shards' entities of a range, or
// a daemon's instance.
func (m *Member) stopServing(ctx context.Context, u unit, h *held) error {
	m.mu.Lock()
	started := h.stop != nil || h.served
	m.mu.Unlock()
	if !started {
		return nil // given up before it was served (acquired while leaving)
	}
	if u.daemon != nil {
		if h.expires != nil {
			h.expires.Stop()
		}
		h.stop()
		select {
		case <-h.done:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("cluster: daemon %s instance %d did not stop: %w", u.daemon.Name, u.instance, ctx.Err())
		}
	}
	errs := make([]error, len(m.cfg.Shards))
	var wg sync.WaitGroup
	for i, s := range m.cfg.Shards {
		wg.Go(func() { errs[i] = s.HandOffRange(ctx, u.r) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// changedView wakes those waiting on Changed. m.mu is held.
func (m *Member) changedView() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// wakeWaiting wakes those waiting on Changed, to try the view again.
func (m *Member) wakeWaiting() {
	m.mu.Lock()
	m.changedView()
	m.mu.Unlock()
}

// changedHeld wakes those waiting for held to change. m.mu is held.
func (m *Member) changedHeld() {
	close(m.heldChanged)
	m.heldChanged = make(chan struct{})
}

// Leave hands off everything the member holds (gracefully: each range's
// entities finish what they were given and passivate, each daemon instance
// stops), releases its leases so that the other members take them at once,
// and removes the member from the store. The member keeps renewing its
// leases while it hands them off, and after removing itself it reads the
// cluster every half heartbeat for one heartbeat and a half, while the
// other members see it gone, and then until it reads that the other
// members hold the ranges it held (at most LeaseTime in all; not when no
// other member stays), so that requests reaching it meanwhile (Handler)
// are forwarded on a current view: a service stops taking requests after
// Leave returns. The requests it still has then go to the owners of its
// last view, sent again a quarter heartbeat after each 421 (Refresh)
// rather than waiting out their MoveWait. It returns ctx's error if ctx
// ends first (the leases then expire on their own). Later calls return
// nil.
func (m *Member) Leave(ctx context.Context) error {
	m.mu.Lock()
	if m.left {
		m.mu.Unlock()
		return nil
	}
	m.leaving = true
	var ranges []string // the ranges handed off: the others are to hold them
	for name := range m.held {
		if m.units[name].isRange {
			ranges = append(ranges, name)
		}
	}
	m.mu.Unlock()
	// Tell the others first: they stop counting this member in their
	// shares (the heartbeat renews the mark with the member's leases, and
	// Store.Leave releases it with them). Without it they take what it
	// releases only once it has left.
	actx, cancel := m.call()
	if _, err := m.cfg.Store.Acquire(actx, m.cfg.Cluster, LeavingLease(m.me.Name), m.me.Holder(), m.cfg.LeaseTime); err != nil {
		m.cfg.Logger.Warn("cluster: marking the member leaving failed", "cluster", m.cfg.Cluster, "member", m.me.Name, "err", err)
	}
	cancel()
	m.pokeLoop()
	for {
		m.mu.Lock()
		n, ch := len(m.held), m.heldChanged
		m.mu.Unlock()
		if n == 0 {
			break
		}
		select {
		case <-ch:
		case <-ctx.Done():
			m.cancel() // stop renewing: the leases expire on their own
			return fmt.Errorf("cluster: leave: %d leases not handed off: %w", n, ctx.Err())
		}
	}
	m.cancel()
	stopped := make(chan struct{})
	go func() {
		<-m.loopDone
		m.work.Wait()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-ctx.Done():
		return fmt.Errorf("cluster: leave: a daemon run did not return: %w", ctx.Err())
	}
	m.mu.Lock()
	m.left = true
	m.mu.Unlock()
	err := m.cfg.Store.Leave(ctx, m.cfg.Cluster, m.me.Holder())
	// Linger, reading the cluster still, while the others see this member
	// gone, and until the view names the ranges' new owners: requests that
	// reach it meanwhile, and those it still has when Leave returns, are
	// forwarded on a current view.
	start := time.Now()
	tick := time.NewTicker(m.cfg.Heartbeat / 2)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		m.readView(ctx) // ends with ctx: Leave keeps its deadline
		since := time.Since(start)
		if since >= m.cfg.LeaseTime || since >= m.cfg.Heartbeat+m.cfg.Heartbeat/2 && (err != nil || m.handedOver(ranges)) {
			break // a member the store kept (err) hands nothing over
		}
	}
	if err != nil {
		return fmt.Errorf("cluster: leave: %w", err)
	}
	return nil
}

// handedOver reports whether the view names another live member as the
// owner of each of ranges, or names no other member staying (none is to
// take them).
func (m *Member) handedOver(ranges []string) bool {
	m.mu.Lock()
	others := slices.ContainsFunc(m.view.staying, func(x membership.Member) bool { return x.Holder() != m.me.Holder() })
	m.mu.Unlock()
	if !others {
		return true
	}
	for _, name := range ranges {
		if o, ok := m.ownerOfLease(name); !ok || o.Local {
			return false
		}
	}
	return true
}

// Held returns the names of the leases the member holds and serves (not
// those it is handing off), sorted.
func (m *Member) Held() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for name, h := range m.held {
		if !h.giving {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// OwnerOf returns the owner of persistenceID's range as the member last
// read the cluster, or false while the range has no live owner (it is
// moving, or its owner's term ended and no member has taken it yet).
// Local is set when the owner is this member and its term has not ended.
func (m *Member) OwnerOf(persistenceID string) (Owner, bool) {
	return m.ownerOfLease(RangeLease(m.rangeOf(annals.Slice(persistenceID))))
}

// rangeOf returns the range of slice.
func (m *Member) rangeOf(slice int) annals.SliceRange {
	return m.ranges[slice/(annals.NumberOfSlices/len(m.ranges))]
}

func (m *Member) ownerOfLease(name string) (Owner, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h := m.held[name]; h != nil {
		if h.giving || h.until.Load() <= m.now() {
			return Owner{}, false
		}
		return Owner{Member: m.me.Name, Address: m.me.Address, Epoch: h.lease.Epoch, Local: true}, true
	}
	l, ok := m.view.leases[name]
	if !ok || !l.Live || l.Owner == m.me.Holder() {
		return Owner{}, false // this member's in the view: it was just given up
	}
	owner, ok := m.view.byName[l.Owner.Name]
	if !ok || owner.Incarnation != l.Owner.Incarnation {
		return Owner{}, false
	}
	return Owner{Member: owner.Name, Address: owner.Address, Epoch: l.Epoch}, true
}

// Changed returns a channel closed the next time the member reads the
// cluster (every heartbeat; every half heartbeat while Leave lingers), or,
// once Leave has stopped its loop, a quarter heartbeat after the next
// Refresh: a caller waiting for a range to move waits on it and asks
// OwnerOf again.
func (m *Member) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

// String describes the member.
func (m *Member) String() string {
	return fmt.Sprintf("member %s (%s) of cluster %s holding %s", m.me.Name, m.me.Address, m.cfg.Cluster, strings.Join(m.Held(), ", "))
}
