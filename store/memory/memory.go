// Package memory is the reference store: a journal and a snapshot store held
// in process memory. It passes the whole compliance kit and is the model
// other stores are checked against.
//
// It is not for production: nothing survives the process, and every event is
// kept in memory. Use it in tests and examples; use store/sqlite for an
// embedded durable store.
package memory

import (
	"bytes"
	"cmp"
	"context"
	"iter"
	"slices"
	"sync"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/snapshot"
)

// DefaultMaxPayloadSize is the largest event or snapshot payload accepted by
// default: 16 MiB.
const DefaultMaxPayloadSize = 16 << 20

// replayPage is how many events Replay copies per lock acquisition; it
// bounds the memory a replay holds.
const replayPage = 256

// Option configures a Store.
type Option func(*config)

type config struct {
	maxPayload int
	now        func() time.Time
}

// WithMaxPayloadSize sets the largest payload, in bytes, that Write and Save
// accept; larger events are rejected (journal.ErrRejected). n ≤ 0 keeps the
// default, DefaultMaxPayloadSize.
func WithMaxPayloadSize(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.maxPayload = n
		}
	}
}

// WithClock sets the clock used for zero timestamps (default time.Now).
func WithClock(now func() time.Time) Option {
	return func(c *config) {
		if now != nil {
			c.now = now
		}
	}
}

// Store holds a journal and a snapshot store in memory. It is safe for
// concurrent use. The zero value is not usable; call New.
type Store struct {
	cfg config

	mu       sync.RWMutex
	closed   bool
	logs     map[string]*idLog
	ordering int64
	order    []orderRef // every stored event, ascending by ordering
	signal   query.Signal

	projections *Projections
	membership  *Membership
	snaps       map[string][]snapshot.Snapshot // ascending by sequence number
	states      map[string]storedState         // durable state by persistence id
	// stateOrdering counts durable-state changes; stateOrder lists them
	// ascending, superseded and deleted ones included until compacted.
	stateOrdering int64
	stateOrder    []stateRef
}

type idLog struct {
	events  []journal.Repr // ascending by sequence number
	highest int64
}

// New returns an empty Store.
func New(opts ...Option) *Store {
	cfg := config{maxPayload: DefaultMaxPayloadSize, now: time.Now}
	for _, o := range opts {
		o(&cfg)
	}
	return &Store{cfg: cfg, logs: map[string]*idLog{}, snaps: map[string][]snapshot.Snapshot{}, states: map[string]storedState{}}
}

// Journal returns the store's journal. Its Close closes the whole Store.
func (s *Store) Journal() *Journal { return &Journal{s: s} }

// Snapshots returns the store's snapshot store. Its Close closes the whole
// Store.
func (s *Store) Snapshots() *Snapshots { return &Snapshots{s: s} }

// Close discards everything the store holds. Later calls fail with
// journal.ErrClosed, snapshot.ErrClosed or durable.ErrClosed. Close is
// idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.logs, s.snaps, s.states, s.stateOrder = nil, nil, nil, nil
	return nil
}

// Journal is the in-memory journal.Journal of a Store.
type Journal struct{ s *Store }

var _ journal.Journal = (*Journal)(nil)

// Write implements journal.Journal.Write.
func (j *Journal) Write(ctx context.Context, writes []journal.AtomicWrite) ([]error, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := j.s
	results := make([]error, len(writes))
	// Validate and copy outside the lock.
	prepared := make([][]journal.Repr, len(writes))
	now := s.cfg.now().UTC()
	for i, w := range writes {
		if err := journal.CheckAtomicWrite(w); err != nil {
			results[i] = err
			continue
		}
		if err := journal.CheckPayloads(w, s.cfg.maxPayload); err != nil {
			results[i] = err
			continue
		}
		evs := make([]journal.Repr, len(w.Events))
		for k, e := range w.Events {
			evs[k] = cloneRepr(e)
			if evs[k].Timestamp.IsZero() {
				evs[k].Timestamp = now
			} else {
				evs[k].Timestamp = evs[k].Timestamp.UTC()
			}
			evs[k].Slice = annals.Slice(e.PersistenceID)
			evs[k].EntityType = annals.EntityType(e.PersistenceID)
		}
		prepared[i] = evs
	}

	stored := false
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, journal.ErrClosed
	}
	for i, evs := range prepared {
		if evs == nil {
			continue
		}
		pid := writes[i].PersistenceID
		log := s.logs[pid]
		if log == nil {
			log = &idLog{}
			s.logs[pid] = log
		}
		if seq, ok := log.firstStored(evs); ok {
			results[i] = &journal.ConflictError{PersistenceID: pid, SequenceNr: seq}
			continue
		}
		for k := range evs {
			s.ordering++
			evs[k].Ordering = s.ordering
			s.order = append(s.order, orderRef{pid: pid, seq: evs[k].SequenceNr, ordering: s.ordering, tags: evs[k].Tags, slice: evs[k].Slice, entityType: evs[k].EntityType})
		}
		log.insert(evs)
		stored = true
	}
	if stored {
		defer s.signal.Notify() // after the lock is released
	}
	return journal.Results(results), nil
}

// firstStored returns the first sequence number of evs already in the log.
func (l *idLog) firstStored(evs []journal.Repr) (int64, bool) {
	for _, e := range evs {
		if _, found := l.find(e.SequenceNr); found {
			return e.SequenceNr, true
		}
	}
	return 0, false
}

func (l *idLog) find(seq int64) (int, bool) {
	return slices.BinarySearchFunc(l.events, seq, func(e journal.Repr, seq int64) int {
		return cmp.Compare(e.SequenceNr, seq)
	})
}

func (l *idLog) insert(evs []journal.Repr) {
	last := evs[len(evs)-1].SequenceNr
	if n := len(l.events); n == 0 || l.events[n-1].SequenceNr < evs[0].SequenceNr {
		l.events = append(l.events, evs...)
	} else {
		at, _ := l.find(evs[0].SequenceNr)
		l.events = slices.Insert(l.events, at, evs...)
	}
	l.highest = max(l.highest, last)
}

// Replay implements journal.Journal.Replay with journal.Pager. It copies
// at most 256 events at a time under the store's lock, so a replay holds
// bounded memory and never blocks writers while the consumer runs.
func (j *Journal) Replay(ctx context.Context, persistenceID string, from, to, limit int64) iter.Seq2[journal.Repr, error] {
	if err := journal.CheckReplay(persistenceID, from, to, limit); err != nil {
		return func(yield func(journal.Repr, error) bool) { yield(journal.Repr{}, err) }
	}
	var page []journal.Repr // reused: a page is yielded before the next is read
	return journal.Pager[journal.Repr]{
		Size: replayPage,
		ReadPage: func(_ context.Context, p journal.Page, yield func(*journal.Repr) bool) (bool, error) {
			page = j.page(page[:0], persistenceID, p)
			if page == nil {
				return true, journal.ErrClosed
			}
			for i := range page {
				if !yield(&page[i]) {
					return true, nil
				}
			}
			return int64(len(page)) < p.Limit, nil
		},
		SequenceNr: func(e *journal.Repr) int64 { return e.SequenceNr },
		Errors:     journal.StoreErrors{Store: "memory"},
	}.Replay(ctx, from, to, limit)
}

// page appends to buf copies of the events of persistenceID the page p
// asks for, taken under the read lock; nil when the store is closed.
func (j *Journal) page(buf []journal.Repr, persistenceID string, p journal.Page) []journal.Repr {
	j.s.mu.RLock()
	defer j.s.mu.RUnlock()
	if j.s.closed {
		return nil
	}
	if buf == nil {
		buf = make([]journal.Repr, 0, min(p.Limit, 256)) // a bound, not a size: grow as events come
	}
	if log := j.s.logs[persistenceID]; log != nil {
		i, _ := log.find(p.From)
		for ; i < len(log.events) && int64(len(buf)) < p.Limit; i++ {
			e := log.events[i]
			if e.SequenceNr > p.To {
				break
			}
			buf = append(buf, cloneRepr(e))
		}
	}
	return buf
}

// HighestSequenceNr implements journal.Journal.HighestSequenceNr.
func (j *Journal) HighestSequenceNr(ctx context.Context, persistenceID string, from int64) (int64, error) {
	if err := journal.CheckID("highest sequence number", persistenceID, from); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	j.s.mu.RLock()
	defer j.s.mu.RUnlock()
	if j.s.closed {
		return 0, journal.ErrClosed
	}
	if log := j.s.logs[persistenceID]; log != nil {
		return log.highest, nil
	}
	return 0, nil
}

// DeleteTo implements journal.Journal.DeleteTo.
func (j *Journal) DeleteTo(ctx context.Context, persistenceID string, to int64) error {
	if err := journal.CheckID("delete", persistenceID, to); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	j.s.mu.Lock()
	defer j.s.mu.Unlock()
	if j.s.closed {
		return journal.ErrClosed
	}
	if log := j.s.logs[persistenceID]; log != nil {
		i, found := log.find(to)
		if found {
			i++
		}
		log.events = slices.Delete(log.events, 0, i)
	}
	return nil
}

// Close closes the whole Store.
func (j *Journal) Close() error { return j.s.Close() }

// Snapshots is the in-memory snapshot.Store of a Store.
type Snapshots struct{ s *Store }

var _ snapshot.Store = (*Snapshots)(nil)

// Load implements snapshot.Store.Load.
func (ss *Snapshots) Load(ctx context.Context, persistenceID string, c snapshot.Criteria) (snapshot.Snapshot, bool, error) {
	if err := snapshot.CheckID("load", persistenceID, 0); err != nil {
		return snapshot.Snapshot{}, false, err
	}
	if err := ctx.Err(); err != nil {
		return snapshot.Snapshot{}, false, err
	}
	ss.s.mu.RLock()
	defer ss.s.mu.RUnlock()
	if ss.s.closed {
		return snapshot.Snapshot{}, false, snapshot.ErrClosed
	}
	list := ss.s.snaps[persistenceID]
	for i := len(list) - 1; i >= 0; i-- {
		if c.Matches(list[i].Metadata) {
			return cloneSnapshot(list[i]), true, nil
		}
	}
	return snapshot.Snapshot{}, false, nil
}

// Save implements snapshot.Store.Save.
func (ss *Snapshots) Save(ctx context.Context, snap snapshot.Snapshot) error {
	m := snap.Metadata
	if err := snapshot.CheckSave(snap, ss.s.cfg.maxPayload); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	snap = cloneSnapshot(snap)
	if snap.Metadata.Timestamp.IsZero() {
		snap.Metadata.Timestamp = ss.s.cfg.now()
	}
	snap.Metadata.Timestamp = snap.Metadata.Timestamp.UTC()
	ss.s.mu.Lock()
	defer ss.s.mu.Unlock()
	if ss.s.closed {
		return snapshot.ErrClosed
	}
	list := ss.s.snaps[m.PersistenceID]
	i, found := slices.BinarySearchFunc(list, m.SequenceNr, func(x snapshot.Snapshot, seq int64) int {
		return cmp.Compare(x.Metadata.SequenceNr, seq)
	})
	if found {
		list[i] = snap
	} else {
		list = slices.Insert(list, i, snap)
	}
	ss.s.snaps[m.PersistenceID] = list
	return nil
}

// Delete implements snapshot.Store.Delete.
func (ss *Snapshots) Delete(ctx context.Context, m snapshot.Metadata) error {
	if err := snapshot.CheckID("delete", m.PersistenceID, m.SequenceNr); err != nil {
		return err
	}
	return ss.deleteWhere(ctx, m.PersistenceID, func(x snapshot.Metadata) bool {
		return x.SequenceNr == m.SequenceNr && (m.Timestamp.IsZero() || x.Timestamp.Equal(m.Timestamp))
	})
}

// DeleteMatching implements snapshot.Store.DeleteMatching.
func (ss *Snapshots) DeleteMatching(ctx context.Context, persistenceID string, c snapshot.Criteria) error {
	if err := snapshot.CheckID("delete", persistenceID, 0); err != nil {
		return err
	}
	return ss.deleteWhere(ctx, persistenceID, c.Matches)
}

func (ss *Snapshots) deleteWhere(ctx context.Context, pid string, match func(snapshot.Metadata) bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ss.s.mu.Lock()
	defer ss.s.mu.Unlock()
	if ss.s.closed {
		return snapshot.ErrClosed
	}
	ss.s.snaps[pid] = slices.DeleteFunc(ss.s.snaps[pid], func(x snapshot.Snapshot) bool { return match(x.Metadata) })
	return nil
}

// Close closes the whole Store.
func (ss *Snapshots) Close() error { return ss.s.Close() }

func cloneRepr(e journal.Repr) journal.Repr {
	e.Payload = bytes.Clone(e.Payload)
	e.Metadata = bytes.Clone(e.Metadata)
	e.Tags = slices.Clone(e.Tags)
	return e
}

func cloneSnapshot(s snapshot.Snapshot) snapshot.Snapshot {
	s.Payload = bytes.Clone(s.Payload)
	return s
}
