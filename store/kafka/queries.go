package kafka

import (
	"context"
	"iter"
	"time"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
)

// ReadJournal is the Kafka journal's read journal: events by persistence
// id, current and live (query.EventsByPersistenceIDQuery), read as Replay
// reads them. Events by tag, by slices and persistence ids are not
// offered: the topic and the eventual store keep no order across ids.
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

var _ query.EventsByPersistenceIDQuery = (*ReadJournal)(nil)
