package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/membership"
)

// Membership is the in-memory membership.Store of a Store: the members and
// leases of the clusters whose processes share this store, which in memory
// means one process. Its clock is the Store's (time.Now unless WithClock).
type Membership struct {
	now func() time.Time

	mu       sync.Mutex
	clusters map[string]*memCluster
}

type memCluster struct {
	members map[string]membership.Member
	leases  map[string]membership.Lease
}

// Membership returns the store's membership store. Every call returns the
// same one.
func (s *Store) Membership() *Membership {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.membership == nil {
		s.membership = &Membership{now: s.cfg.now, clusters: map[string]*memCluster{}}
	}
	return s.membership
}

// cluster returns the records of name, made on first use. m.mu is held.
func (m *Membership) cluster(name string) *memCluster {
	c := m.clusters[name]
	if c == nil {
		c = &memCluster{members: map[string]membership.Member{}, leases: map[string]membership.Lease{}}
		m.clusters[name] = c
	}
	return c
}

// Join implements membership.Store.
func (m *Membership) Join(ctx context.Context, cluster string, mem membership.Member, ttl time.Duration) error {
	if err := membership.CheckHolder(cluster, mem.Holder()); err != nil {
		return err
	}
	if err := membership.CheckTTL(ttl); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	c := m.cluster(cluster)
	old, ok := c.members[mem.Name]
	if ok && old.Incarnation != mem.Incarnation && now.Before(old.Expires) {
		return fmt.Errorf("%w: %q (incarnation %s at %s)", membership.ErrNameTaken, mem.Name, old.Incarnation, old.Address)
	}
	joined := now
	if ok && old.Incarnation == mem.Incarnation {
		joined = old.Joined
	}
	c.members[mem.Name] = membership.Member{Name: mem.Name, Incarnation: mem.Incarnation, Address: mem.Address, Joined: joined, Expires: now.Add(ttl)}
	return nil
}

// Heartbeat implements membership.Store.
func (m *Membership) Heartbeat(ctx context.Context, cluster string, h membership.Holder, ttl time.Duration) ([]membership.Lease, error) {
	if err := membership.CheckHolder(cluster, h); err != nil {
		return nil, err
	}
	if err := membership.CheckTTL(ttl); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	c := m.cluster(cluster)
	mem, ok := c.members[h.Name]
	if !ok || mem.Incarnation != h.Incarnation {
		return nil, fmt.Errorf("%w: %s (incarnation %s)", membership.ErrNotMember, h.Name, h.Incarnation)
	}
	mem.Expires = now.Add(ttl)
	c.members[h.Name] = mem
	var renewed []membership.Lease
	for name, l := range c.leases {
		if l.Owner == h {
			l.Expires = now.Add(ttl)
			c.leases[name] = l
			l.Live = true
			renewed = append(renewed, l)
		}
	}
	slices.SortFunc(renewed, func(a, b membership.Lease) int { return cmp.Compare(a.Name, b.Name) })
	return renewed, nil
}

// Leave implements membership.Store.
func (m *Membership) Leave(ctx context.Context, cluster string, h membership.Holder) error {
	if err := membership.CheckHolder(cluster, h); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.cluster(cluster)
	for name, l := range c.leases {
		if l.Owner == h {
			c.leases[name] = membership.Lease{Name: name, Epoch: l.Epoch}
		}
	}
	if mem, ok := c.members[h.Name]; ok && mem.Incarnation == h.Incarnation {
		delete(c.members, h.Name)
	}
	return nil
}

// Acquire implements membership.Store.
func (m *Membership) Acquire(ctx context.Context, cluster, lease string, h membership.Holder, ttl time.Duration) (membership.Lease, error) {
	if err := membership.CheckLease(lease); err != nil {
		return membership.Lease{}, err
	}
	if err := membership.CheckHolder(cluster, h); err != nil {
		return membership.Lease{}, err
	}
	if err := membership.CheckTTL(ttl); err != nil {
		return membership.Lease{}, err
	}
	if err := ctx.Err(); err != nil {
		return membership.Lease{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	c := m.cluster(cluster)
	l := c.leases[lease]
	if l.Owner != h {
		if l.Owner != (membership.Holder{}) && now.Before(l.Expires) {
			return membership.Lease{}, fmt.Errorf("%w: %s by %s until %s", membership.ErrHeld, lease, l.Owner.Name, l.Expires.Format(time.RFC3339Nano))
		}
		l.Epoch++
	}
	l = membership.Lease{Name: lease, Owner: h, Epoch: l.Epoch, Expires: now.Add(ttl)}
	c.leases[lease] = l
	l.Live = true
	return l, nil
}

// Release implements membership.Store.
func (m *Membership) Release(ctx context.Context, cluster, lease string, h membership.Holder) error {
	if err := membership.CheckLease(lease); err != nil {
		return err
	}
	if err := membership.CheckHolder(cluster, h); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.cluster(cluster)
	if l, ok := c.leases[lease]; ok && l.Owner == h {
		c.leases[lease] = membership.Lease{Name: lease, Epoch: l.Epoch}
	}
	return nil
}

// Members implements membership.Store.
func (m *Membership) Members(ctx context.Context, cluster string) ([]membership.Member, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	var out []membership.Member
	for _, mem := range m.cluster(cluster).members {
		mem.Live = now.Before(mem.Expires)
		out = append(out, mem)
	}
	slices.SortFunc(out, func(a, b membership.Member) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// Leases implements membership.Store.
func (m *Membership) Leases(ctx context.Context, cluster string) ([]membership.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	var out []membership.Lease
	for _, l := range m.cluster(cluster).leases {
		l.Live = l.Owner != (membership.Holder{}) && now.Before(l.Expires)
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b membership.Lease) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

var _ journal.FencedWriter = (*Journal)(nil)

// WriteFenced implements journal.FencedWriter: the writes whose tokens
// name leases of this store's Membership are stored only if those leases
// are held; the membership is locked for the whole call, so no lease
// changes owner until the writes are in.
func (j *Journal) WriteFenced(ctx context.Context, writes []journal.AtomicWrite, tokens []journal.FenceToken) ([]error, error) {
	if len(tokens) != len(writes) {
		return nil, fmt.Errorf("%w: %d fencing tokens for %d atomic writes", journal.ErrInvalidArgument, len(tokens), len(writes))
	}
	m := j.s.Membership()
	m.mu.Lock()
	defer m.mu.Unlock()
	results := make([]error, len(writes))
	var sent []journal.AtomicWrite
	var at []int // the index in writes of each sent write
	for i, t := range tokens {
		if t.Store == m && !t.IsZero() {
			l := m.cluster(t.Cluster).leases[t.Lease]
			if l.Owner != (membership.Holder{Name: t.Holder, Incarnation: t.HolderIncarnation}) || l.Epoch != t.Epoch {
				results[i] = &journal.FencedError{PersistenceID: writes[i].PersistenceID, Token: t}
				continue
			}
		}
		sent, at = append(sent, writes[i]), append(at, i)
	}
	errs, err := j.Write(ctx, sent)
	if err != nil {
		return nil, err
	}
	for k, e := range errs {
		results[at[k]] = e
	}
	return journal.Results(results), nil
}
