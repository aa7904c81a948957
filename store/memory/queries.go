package memory

import (
	"cmp"
	"context"
	"iter"
	"slices"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
)

// orderRef locates a stored event by its global ordering.
type orderRef struct {
	pid        string
	seq        int64
	ordering   int64
	tags       []string
	slice      int
	entityType string
}

// Queries is the read journal of a Store. Its offsets are sequence offsets
// (the store's global ordering), which grow in commit order: a query that
// has seen ordering n has seen every event below n. Live queries wake at
// once on every write to the store.
type Queries struct{ s *Store }

var (
	_ query.EventsByPersistenceIDQuery = (*Queries)(nil)
	_ query.EventsByTagQuery           = (*Queries)(nil)
	_ query.EventsBySlicesQuery        = (*Queries)(nil)
	_ query.PersistenceIDsQuery        = (*Queries)(nil)
)

// Queries returns the store's read journal.
func (s *Store) Queries() *Queries { return &Queries{s: s} }

func sequenceOf(after query.Offset) (int64, error) {
	switch after.Kind {
	case query.KindNone:
		return 0, nil
	case query.KindSequence:
		return after.Sequence, nil
	}
	return 0, query.ErrUnsupportedOffset
}

// scan yields, in ordering order, the stored events after the offset and at
// or below the ordering the store had when the scan began, that match.
// Deleted events are skipped.
func (q *Queries) scan(ctx context.Context, after query.Offset, match func(orderRef) bool) iter.Seq2[query.Envelope, error] {
	s := q.s
	return pagedScan(ctx, s, after, journal.ErrClosed, func() ([]orderRef, int64) { return s.order, s.ordering },
		func(r orderRef) int64 { return r.ordering },
		func(ref orderRef) (query.Envelope, bool) {
			if !match(ref) {
				return query.Envelope{}, false
			}
			log := s.logs[ref.pid]
			k, found := log.find(ref.seq)
			if !found {
				return query.Envelope{}, false
			}
			return query.FromRepr(cloneRepr(log.events[k]), query.SequenceOffset(ref.ordering)), true
		})
}

// pagedScan yields the envelopes of refs, a list ascending by ordering,
// after the offset and at or below the highest ordering when the scan
// began: pages of up to replayPage envelopes, each found under the read
// lock (which refs and env are called under; refs returns the list and
// its highest ordering) and yielded after it is released. env returns a
// ref's envelope, or false to pass it by. A closed store yields closed.
func pagedScan[R any](ctx context.Context, s *Store, after query.Offset, closed error, refs func() ([]R, int64), ordering func(R) int64, env func(R) (query.Envelope, bool)) iter.Seq2[query.Envelope, error] {
	return func(yield func(query.Envelope, error) bool) {
		from, err := sequenceOf(after)
		if err != nil {
			yield(query.Envelope{}, err)
			return
		}
		s.mu.RLock()
		_, bound := refs()
		s.mu.RUnlock()
		page := make([]query.Envelope, 0, replayPage)
		for {
			if err := ctx.Err(); err != nil {
				yield(query.Envelope{}, err)
				return
			}
			page = page[:0]
			s.mu.RLock()
			if s.closed {
				s.mu.RUnlock()
				yield(query.Envelope{}, closed)
				return
			}
			list, _ := refs()
			i, _ := slices.BinarySearchFunc(list, from+1, func(r R, o int64) int { return cmp.Compare(ordering(r), o) })
			for ; i < len(list) && len(page) < replayPage && ordering(list[i]) <= bound; i++ {
				from = ordering(list[i])
				if e, ok := env(list[i]); ok {
					page = append(page, e)
				}
			}
			done := i >= len(list) || ordering(list[i]) > bound
			s.mu.RUnlock()
			for _, e := range page {
				if !yield(e, nil) {
					return
				}
			}
			if done {
				return
			}
		}
	}
}

// follow makes a live query of a scan.
func (q *Queries) follow(ctx context.Context, after query.Offset, match func(orderRef) bool) *query.Stream[query.Envelope] {
	return query.FollowOffsets(ctx, &q.s.signal, 0, after, func(ctx context.Context, after query.Offset) iter.Seq2[query.Envelope, error] {
		return q.scan(ctx, after, match)
	})
}

func hasTag(tag string) func(orderRef) bool {
	return func(r orderRef) bool { return slices.Contains(r.tags, tag) }
}

func inSlices(entityType string, minSlice, maxSlice int) func(orderRef) bool {
	return func(r orderRef) bool {
		return r.entityType == entityType && r.slice >= minSlice && r.slice <= maxSlice
	}
}

// CurrentEventsByTag implements query.EventsByTagQuery.
func (q *Queries) CurrentEventsByTag(ctx context.Context, tag string, after query.Offset) iter.Seq2[query.Envelope, error] {
	return q.scan(ctx, after, hasTag(tag))
}

// EventsByTag implements query.EventsByTagQuery.
func (q *Queries) EventsByTag(ctx context.Context, tag string, after query.Offset) *query.Stream[query.Envelope] {
	return q.follow(ctx, after, hasTag(tag))
}

// CurrentEventsBySlices implements query.EventsBySlicesQuery.
func (q *Queries) CurrentEventsBySlices(ctx context.Context, entityType string, minSlice, maxSlice int, after query.Offset) iter.Seq2[query.Envelope, error] {
	return q.scan(ctx, after, inSlices(entityType, minSlice, maxSlice))
}

// EventsBySlices implements query.EventsBySlicesQuery.
func (q *Queries) EventsBySlices(ctx context.Context, entityType string, minSlice, maxSlice int, after query.Offset) *query.Stream[query.Envelope] {
	return q.follow(ctx, after, inSlices(entityType, minSlice, maxSlice))
}

// CurrentEventsByPersistenceID implements query.EventsByPersistenceIDQuery.
func (q *Queries) CurrentEventsByPersistenceID(ctx context.Context, persistenceID string, from, to int64) iter.Seq2[query.Envelope, error] {
	return query.FromReplay(q.s.Journal().Replay(ctx, persistenceID, from, to, to),
		func(r journal.Repr) query.Offset { return query.SequenceOffset(r.Ordering) })
}

// EventsByPersistenceID implements query.EventsByPersistenceIDQuery; it ends
// after the event at to.
func (q *Queries) EventsByPersistenceID(ctx context.Context, persistenceID string, from, to int64) *query.Stream[query.Envelope] {
	return query.FollowByID(ctx, &q.s.signal, 0, from, to, func(ctx context.Context, from, to int64) iter.Seq2[query.Envelope, error] {
		return q.CurrentEventsByPersistenceID(ctx, persistenceID, from, to)
	})
}

// CurrentPersistenceIDs implements query.PersistenceIDsQuery. Ids whose
// events were all deleted are still listed.
func (q *Queries) CurrentPersistenceIDs(ctx context.Context, entityType, afterID string, limit int) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	q.s.mu.RLock()
	if q.s.closed {
		q.s.mu.RUnlock()
		return nil, journal.ErrClosed
	}
	var ids []string
	for pid := range q.s.logs {
		if pid > afterID && (entityType == "" || annals.EntityType(pid) == entityType) {
			ids = append(ids, pid)
		}
	}
	q.s.mu.RUnlock()
	slices.Sort(ids)
	if limit > 0 && len(ids) > limit {
		ids = ids[:limit]
	}
	return ids, nil
}

// PersistenceIDs implements query.PersistenceIDsQuery.
func (q *Queries) PersistenceIDs(ctx context.Context, entityType string) *query.Stream[string] {
	q.s.mu.RLock()
	after := q.s.ordering
	q.s.mu.RUnlock()
	ids, err := q.CurrentPersistenceIDs(ctx, entityType, "", 0)
	if err != nil {
		return query.NewStream(func(func(string) bool) error { return err })
	}
	events := q.follow(ctx, query.SequenceOffset(after), func(r orderRef) bool {
		return entityType == "" || r.entityType == entityType
	})
	return query.FollowPersistenceIDs(ids, events)
}
