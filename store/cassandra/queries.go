package cassandra

import (
	"context"
	"iter"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
)

// ReadJournal is the store's persistence queries: events by tag (from
// tag_views, with Pekko's eventual-consistency delay and gap detection),
// events by persistence id, and persistence ids. Events by slices is not
// offered: Cassandra could answer it only by reading every partition.
type ReadJournal struct{ s *Store }

var (
	_ query.EventsByTagQuery           = (*ReadJournal)(nil)
	_ query.EventsByPersistenceIDQuery = (*ReadJournal)(nil)
	_ query.PersistenceIDsQuery        = (*ReadJournal)(nil)
)

// ReadJournal returns the store's read journal.
func (s *Store) ReadJournal() *ReadJournal { return &ReadJournal{s: s} }

// CurrentEventsByTag implements query.EventsByTagQuery: the events tagged
// tag whose rows are older than the eventual-consistency delay when it
// starts, bucket by bucket in timeuuid order, each id's events in order.
// From no offset it starts at the first time bucket (WithFirstTimeBucket)
// and expects each id's first tagged event; from an offset
// (query.TimeUUIDOffset) it takes the first event it sees of an id as that
// id's start, after scanning for the lowest when the offset lies in the
// current bucket. A gap in an id's tag sequence numbers is searched for in
// the bucket of the event after it and the one before, until the gap
// timeout, then the query fails with a *MissingEventsError. An envelope's
// offset is the greatest timeuuid delivered so far (an event found in a
// search comes after events with later timeuuids). Tags holds all the
// event's tags when Annals wrote it, and only tag when Pekko did.
// Deletions are not applied to tag_views: deleted events are returned.
func (r *ReadJournal) CurrentEventsByTag(ctx context.Context, tag string, after query.Offset) iter.Seq2[query.Envelope, error] {
	return func(yield func(query.Envelope, error) bool) {
		s := r.s
		if s.isClosed() {
			yield(query.Envelope{}, journal.ErrClosed)
			return
		}
		c, err := s.newTagCursor(tag, after)
		if err != nil {
			yield(query.Envelope{}, err)
			return
		}
		if _, err := c.run(ctx, s.cfg.now().Add(-s.cfg.ecDelay), func(env query.Envelope) bool { return yield(env, nil) }); err != nil {
			yield(query.Envelope{}, err)
		}
	}
}

// StoredEventsByTag reads the events tagged tag whose rows are stored
// after the offset up to the time it starts, including those
// CurrentEventsByTag and EventsByTag still hold back (younger than the
// eventual-consistency delay, or after a tag write of this process in
// flight), and ends. It is for counting what a consumer of EventsByTag
// from that offset has still to receive (projection.Projection.Behind
// reads it through projection.ByTag): rows come in timeuuid order, each
// id's rows numbered above the highest it delivered of that id, without
// the search for missing rows, so an id's rows are not necessarily
// consecutive. Offsets are as CurrentEventsByTag's.
func (r *ReadJournal) StoredEventsByTag(ctx context.Context, tag string, after query.Offset) iter.Seq2[query.Envelope, error] {
	return func(yield func(query.Envelope, error) bool) {
		s := r.s
		if s.isClosed() {
			yield(query.Envelope{}, journal.ErrClosed)
			return
		}
		c, err := s.newTagCursor(tag, after)
		if err != nil {
			yield(query.Envelope{}, err)
			return
		}
		c.stored = true
		if _, err := c.run(ctx, s.cfg.now(), func(env query.Envelope) bool { return yield(env, nil) }); err != nil {
			yield(query.Envelope{}, err)
		}
	}
}

// EventsByTag implements query.EventsByTagQuery: CurrentEventsByTag, then
// the rows that pass the eventual-consistency delay, read again at the
// poll interval, and, with no delay, as soon as a write of this process
// has stored tag rows.
func (r *ReadJournal) EventsByTag(ctx context.Context, tag string, after query.Offset) *query.Stream[query.Envelope] {
	s := r.s
	c, err := s.newTagCursor(tag, after)
	if err != nil {
		return query.NewStream(func(func(query.Envelope) bool) error { return err })
	}
	wake := &s.signal
	if s.cfg.ecDelay > 0 {
		// A write's signal cannot make its rows visible before the delay
		// has passed: polling bounds the lag by the delay plus the
		// interval.
		wake = &query.Signal{}
	}
	return query.Follow(ctx, wake, s.cfg.pollInterval, func(ctx context.Context) iter.Seq2[query.Envelope, error] {
		return func(yield func(query.Envelope, error) bool) {
			if s.isClosed() {
				yield(query.Envelope{}, journal.ErrClosed)
				return
			}
			stopped := false
			_, err := c.run(ctx, s.cfg.now().Add(-s.cfg.ecDelay), func(env query.Envelope) bool {
				stopped = !yield(env, nil)
				return !stopped
			})
			if err != nil && !stopped {
				yield(query.Envelope{}, err)
			}
		}
	}, nil)
}

// CurrentEventsByPersistenceID implements
// query.EventsByPersistenceIDQuery: a replay, each envelope at the
// sequence offset of its number.
func (r *ReadJournal) CurrentEventsByPersistenceID(ctx context.Context, persistenceID string, from, to int64) iter.Seq2[query.Envelope, error] {
	return query.FromReplay(r.s.Journal().Replay(ctx, persistenceID, max(from, 1), to, 1<<62), func(e journal.Repr) query.Offset {
		return query.SequenceOffset(e.SequenceNr)
	})
}

// EventsByPersistenceID implements query.EventsByPersistenceIDQuery: the
// current query, again after each write of this process and at the poll
// interval, until the event at to.
func (r *ReadJournal) EventsByPersistenceID(ctx context.Context, persistenceID string, from, to int64) *query.Stream[query.Envelope] {
	return query.FollowByID(ctx, &r.s.written, r.s.cfg.pollInterval, max(from, 1), to, func(ctx context.Context, from, to int64) iter.Seq2[query.Envelope, error] {
		return r.CurrentEventsByPersistenceID(ctx, persistenceID, from, to)
	})
}

// CurrentPersistenceIDs implements query.PersistenceIDsQuery over
// all_persistence_ids, in Cassandra's token order (not ascending: the
// table's keys have no other order); a page resumes after the token of
// afterID. With an entity type, rows of other types are read and skipped.
func (r *ReadJournal) CurrentPersistenceIDs(ctx context.Context, entityType, afterID string, limit int) ([]string, error) {
	s := r.s
	if s.isClosed() {
		return nil, journal.ErrClosed
	}
	var ids []string
	err := s.scanIDs(ctx, afterID, func(id string) bool {
		if entityType == "" || annals.EntityType(id) == entityType {
			ids = append(ids, id)
		}
		return limit <= 0 || len(ids) < limit
	})
	return ids, err
}

// scanIDs calls f with the ids after afterID's token, until it returns
// false.
func (s *Store) scanIDs(ctx context.Context, afterID string, f func(string) bool) error {
	q := s.session.Query(s.sql.allIDs)
	if afterID != "" {
		q = s.session.Query(s.sql.allIDsAfter, afterID)
	}
	it := q.WithContext(ctx).Consistency(s.cfg.readCL).Iter()
	var id string
	for it.Scan(&id) {
		if !f(id) {
			break
		}
	}
	if err := it.Close(); err != nil {
		return s.errs.Map(ctx, "persistence ids", err, journal.ErrClosed)
	}
	return nil
}

// PersistenceIDs implements query.PersistenceIDsQuery: the ids of the
// type in all_persistence_ids, then new ones as a read of the whole table
// after each write of this process and at the poll interval finds them
// (as Pekko's live query does, each read costs the whole table).
func (r *ReadJournal) PersistenceIDs(ctx context.Context, entityType string) *query.Stream[string] {
	s := r.s
	return query.NewStream(func(yield func(string) bool) error {
		seen := map[string]bool{}
		timer := time.NewTimer(s.cfg.pollInterval)
		defer timer.Stop()
		for {
			if s.isClosed() {
				return journal.ErrClosed
			}
			wake := s.written.Wait()
			stopped := false
			err := s.scanIDs(ctx, "", func(id string) bool {
				if seen[id] || (entityType != "" && annals.EntityType(id) != entityType) {
					return true
				}
				seen[id] = true
				stopped = !yield(id)
				return !stopped
			})
			if err != nil {
				return err
			}
			if stopped {
				return nil
			}
			timer.Reset(s.cfg.pollInterval)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-timer.C:
			case <-wake:
			}
		}
	})
}
