package kafka

import (
	"context"
	"iter"
	"slices"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
)

// ReadJournal is the Kafka journal's read journal: events by persistence
// id, current and live (query.EventsByPersistenceIDQuery), read as Replay
// reads them; persistence ids (query.PersistenceIDsQuery); and events by
// slices (query.EventsBySlicesQuery) read from the topic with
// per-partition offsets, for projections. Events by tag are not offered:
// the topic and the eventual store keep no order across ids.
type ReadJournal struct {
	j    *Journal
	poll time.Duration
}

// ReadJournal returns the journal's read journal; live queries look for
// other processes' writes every poll (query.DefaultPollInterval when 0)
// and for this journal's at once.
func (j *Journal) ReadJournal(poll time.Duration) *ReadJournal {
	return &ReadJournal{j: j, poll: poll}
}

// CurrentEventsByPersistenceID implements query.EventsByPersistenceIDQuery,
// each envelope at its sequence number's offset.
func (r *ReadJournal) CurrentEventsByPersistenceID(ctx context.Context, persistenceID string, from, to int64) iter.Seq2[query.Envelope, error] {
	return query.FromReplay(r.j.Replay(ctx, persistenceID, max(from, 1), to, 1<<62), func(e journal.Repr) query.Offset {
		return query.SequenceOffset(e.SequenceNr)
	})
}

// EventsByPersistenceID implements query.EventsByPersistenceIDQuery: the
// current query again after each write of this journal and every poll,
// until the event at to.
func (r *ReadJournal) EventsByPersistenceID(ctx context.Context, persistenceID string, from, to int64) *query.Stream[query.Envelope] {
	return query.FollowByID(ctx, &r.j.written, r.poll, max(from, 1), to, func(ctx context.Context, from, to int64) iter.Seq2[query.Envelope, error] {
		return r.CurrentEventsByPersistenceID(ctx, persistenceID, from, to)
	})
}

// CurrentPersistenceIDs implements query.PersistenceIDsQuery: the ids with
// a head in the eventual store (on the entity type's topic, or every
// topic), and those this journal wrote or read since it opened, ascending.
// An id another process started appears once the replicator has copied
// its first append. A purged id is not listed.
func (r *ReadJournal) CurrentPersistenceIDs(ctx context.Context, entityType, afterID string, limit int) ([]string, error) {
	ids, err := r.ids(ctx, entityType)
	if err != nil {
		return nil, err
	}
	i, _ := slices.BinarySearch(ids, afterID)
	if i < len(ids) && ids[i] == afterID {
		i++
	}
	ids = ids[i:]
	if limit > 0 && len(ids) > limit {
		ids = ids[:limit]
	}
	return ids, nil
}

// ids lists the ids of an entity type ("" for all), sorted.
func (r *ReadJournal) ids(ctx context.Context, entityType string) ([]string, error) {
	j := r.j
	if j.closed.Load() {
		return nil, journal.ErrClosed
	}
	topic := ""
	if entityType != "" {
		key, err := j.key(entityType + "|")
		if err != nil {
			return nil, err
		}
		topic = key.Topic
	}
	set := map[string]bool{}
	for id, err := range j.tables.IDs(ctx, topic) {
		if err != nil {
			return nil, err
		}
		set[id] = true
	}
	j.mu.Lock()
	for id := range j.known {
		set[id] = true
	}
	j.mu.Unlock()
	out := make([]string, 0, len(set))
	for id := range set {
		if entityType == "" || annals.EntityType(id) == entityType {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out, nil
}

// PersistenceIDs implements query.PersistenceIDsQuery: the current ids,
// then new ones as the listing is read again after each write of this
// journal and every poll.
func (r *ReadJournal) PersistenceIDs(ctx context.Context, entityType string) *query.Stream[string] {
	return query.NewStream(func(yield func(string) bool) error {
		poll := r.poll
		if poll <= 0 {
			poll = query.DefaultPollInterval
		}
		seen := map[string]bool{}
		timer := time.NewTimer(poll)
		defer timer.Stop()
		for {
			wake := r.j.written.Wait()
			ids, err := r.ids(ctx, entityType)
			if err != nil {
				return err
			}
			for _, id := range ids {
				if seen[id] {
					continue
				}
				seen[id] = true
				if !yield(id) {
					return nil
				}
			}
			timer.Reset(poll)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-timer.C:
			case <-wake:
			}
		}
	})
}

var (
	_ query.EventsByPersistenceIDQuery = (*ReadJournal)(nil)
	_ query.PersistenceIDsQuery        = (*ReadJournal)(nil)
)
