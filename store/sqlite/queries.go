package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"iter"
	"time"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
)

// Queries is the read journal of a Store.
//
// Its offsets are sequence offsets: the journal's ordering column. SQLite
// has one writer, so a transaction's orderings are all above those of every
// transaction committed before it, and no reader sees a row before the rows
// with lower orderings: ordering grows in commit order. A query that has
// returned ordering n has therefore seen every matching event at or below
// n, and resuming after n loses nothing, also with writers in other
// processes.
//
// Live queries wake at once when this Store commits events, and poll every
// WithPollInterval for commits of other processes.
type Queries struct{ s *Store }

var (
	_ query.EventsByPersistenceIDQuery = (*Queries)(nil)
	_ query.EventsByTagQuery           = (*Queries)(nil)
	_ query.EventsBySlicesQuery        = (*Queries)(nil)
	_ query.PersistenceIDsQuery        = (*Queries)(nil)
)

// Queries returns the store's read journal.
func (s *Store) Queries() *Queries { return &Queries{s: s} }

// queryPage is how many rows one query of a scan reads.
const queryPage = 1000

const envelopeColumns = `e.ordering, e.persistence_id, e.sequence_nr, e.timestamp, e.payload, e.serializer_id, e.manifest, e.writer, e.tags, e.metadata, e.slice, e.entity_type`

// envelopeColumnCount is the number of envelopeColumns.
const envelopeColumnCount = 12

// envelopeRow fills env from one row of envelopeColumns as readDriver
// returns it.
func envelopeRow(v []driver.Value, env *query.Envelope) error {
	r := rowValues{v: v}
	env.Offset = query.SequenceOffset(r.int(0))
	env.PersistenceID = r.text(1)
	env.SequenceNr = r.int(2)
	env.Timestamp = time.Unix(0, r.int(3)).UTC()
	env.Payload = r.blob(4)
	env.SerializerID = r.int32(5)
	env.Manifest = r.text(6)
	env.WriterID = r.text(7)
	tags, hasTags := r.nullText(8)
	env.Metadata = r.blob(9)
	env.Slice = int(r.int(10))
	env.EntityType = r.text(11)
	if r.err != nil {
		return fmt.Errorf("sqlite: query: read row: %w", r.err)
	}
	if hasTags {
		var err error
		if env.Tags, err = decodeTags(tags); err != nil {
			return fmt.Errorf("sqlite: query: corrupt tags of %s event %d: %w", env.PersistenceID, env.SequenceNr, err)
		}
	}
	return nil
}

// readEnvelopes reads the envelopes of one page of the select text into
// page (from its start, reusing its array) and returns it.
func (s *Store) readEnvelopes(ctx context.Context, text string, args []driver.NamedValue, page []query.Envelope) ([]query.Envelope, error) {
	page = page[:0]
	dest := make([]driver.Value, envelopeColumnCount)
	err := s.readDriver(ctx, text, args, dest, func(v []driver.Value) error {
		page = append(page, query.Envelope{})
		return envelopeRow(v, &page[len(page)-1])
	})
	return page, err
}

func sequenceOf(after query.Offset) (int64, error) {
	switch after.Kind {
	case query.KindNone:
		return 0, nil
	case query.KindSequence:
		return after.Sequence, nil
	}
	return 0, fmt.Errorf("%w: %s (the SQLite store resumes from sequence offsets)", query.ErrUnsupportedOffset, after)
}

// scan runs the select text (whose last three parameters are: after,
// bound, limit) page by page, from the offset up to the highest ordering
// committed when the scan began. Each page is read whole and its
// connection released before its envelopes are yielded, so a slow consumer
// holds no connection and no read snapshot. The pages of one scan share
// one array.
func (q *Queries) scan(ctx context.Context, after query.Offset, text string, args ...any) iter.Seq2[query.Envelope, error] {
	return q.s.scanOrdered(ctx, after, q.s.stmts.maxOrdering, journal.ErrClosed, text, args...)
}

// scanOrdered is scan over the orderings of any table: bound reads the
// highest committed ordering; a closed store's error is closed.
func (s *Store) scanOrdered(ctx context.Context, after query.Offset, bound *sql.Stmt, closed error, text string, args ...any) iter.Seq2[query.Envelope, error] {
	return func(yield func(query.Envelope, error) bool) {
		from, err := sequenceOf(after)
		if err != nil {
			yield(query.Envelope{}, err)
			return
		}
		var upper int64
		if err := bound.QueryRowContext(ctx).Scan(&upper); err != nil {
			yield(query.Envelope{}, s.errs.Map(ctx, "query", err, closed))
			return
		}
		var page []query.Envelope
		for from < upper {
			nv, err := namedArgs(append(args[:len(args):len(args)], from, upper, queryPage)...)
			if err == nil {
				page, err = s.readEnvelopes(ctx, text, nv, page)
			}
			if err != nil {
				yield(query.Envelope{}, s.errs.Map(ctx, "query", err, closed))
				return
			}
			for _, env := range page {
				if !yield(env, nil) {
					return
				}
			}
			if len(page) < queryPage {
				return
			}
			from = page[len(page)-1].Offset.Sequence
		}
	}
}

// follow makes a live query of a current one.
func (q *Queries) follow(ctx context.Context, after query.Offset, current func(ctx context.Context, after query.Offset) iter.Seq2[query.Envelope, error]) *query.Stream[query.Envelope] {
	return query.FollowOffsets(ctx, &q.s.signal, q.s.cfg.poll, after, current)
}

const byTagSQL = `SELECT ` + envelopeColumns + ` FROM event_tag t JOIN event_journal e ON e.ordering = t.ordering
	WHERE t.tag = ? AND t.ordering > ? AND t.ordering <= ? ORDER BY t.ordering LIMIT +?`

const bySlicesSQL = `SELECT ` + envelopeColumns + ` FROM event_journal e INDEXED BY event_journal_type_ordering_idx
	WHERE e.entity_type = ? AND e.slice BETWEEN ? AND ? AND e.ordering > ? AND e.ordering <= ? ORDER BY e.ordering LIMIT +?`

// CurrentEventsByTag implements query.EventsByTagQuery.
func (q *Queries) CurrentEventsByTag(ctx context.Context, tag string, after query.Offset) iter.Seq2[query.Envelope, error] {
	return q.scan(ctx, after, byTagSQL, tag)
}

// EventsByTag implements query.EventsByTagQuery.
func (q *Queries) EventsByTag(ctx context.Context, tag string, after query.Offset) *query.Stream[query.Envelope] {
	return q.follow(ctx, after, func(ctx context.Context, after query.Offset) iter.Seq2[query.Envelope, error] {
		return q.CurrentEventsByTag(ctx, tag, after)
	})
}

// CurrentEventsBySlices implements query.EventsBySlicesQuery.
func (q *Queries) CurrentEventsBySlices(ctx context.Context, entityType string, minSlice, maxSlice int, after query.Offset) iter.Seq2[query.Envelope, error] {
	return q.scan(ctx, after, bySlicesSQL, entityType, minSlice, maxSlice)
}

// EventsBySlices implements query.EventsBySlicesQuery.
func (q *Queries) EventsBySlices(ctx context.Context, entityType string, minSlice, maxSlice int, after query.Offset) *query.Stream[query.Envelope] {
	return q.follow(ctx, after, func(ctx context.Context, after query.Offset) iter.Seq2[query.Envelope, error] {
		return q.CurrentEventsBySlices(ctx, entityType, minSlice, maxSlice, after)
	})
}

// CurrentEventsByPersistenceID implements query.EventsByPersistenceIDQuery.
func (q *Queries) CurrentEventsByPersistenceID(ctx context.Context, persistenceID string, from, to int64) iter.Seq2[query.Envelope, error] {
	return query.FromReplay(q.s.Journal().Replay(ctx, persistenceID, from, to, to),
		func(r journal.Repr) query.Offset { return query.SequenceOffset(r.Ordering) })
}

// EventsByPersistenceID implements query.EventsByPersistenceIDQuery; it ends
// after the event at to.
func (q *Queries) EventsByPersistenceID(ctx context.Context, persistenceID string, from, to int64) *query.Stream[query.Envelope] {
	return query.FollowByID(ctx, &q.s.signal, q.s.cfg.poll, from, to, func(ctx context.Context, from, to int64) iter.Seq2[query.Envelope, error] {
		return q.CurrentEventsByPersistenceID(ctx, persistenceID, from, to)
	})
}

// CurrentPersistenceIDs implements query.PersistenceIDsQuery. Ids whose
// events were all deleted are still listed (journal_metadata keeps them).
func (q *Queries) CurrentPersistenceIDs(ctx context.Context, entityType, afterID string, limit int) ([]string, error) {
	// Ids of a type are "type|…" (sharing the prefix "type|"; '}' follows
	// '|'), or the type itself for an id without a separator.
	lo, hi, exact := "", "\U0010FFFF", ""
	if entityType != "" {
		lo, hi, exact = entityType+"|", entityType+"}", entityType
	}
	if limit <= 0 {
		limit = -1
	}
	rows, release, err := q.s.readRows(ctx, q.s.stmts.persistenceIDs, lo, hi, limit, exact, afterID)
	if err != nil {
		return nil, q.s.errs.Map(ctx, "persistence ids", err, journal.ErrClosed)
	}
	defer release()
	var ids []string
	for rows.Next() {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("sqlite: persistence ids: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, q.s.errs.Map(ctx, "persistence ids", err, journal.ErrClosed)
	}
	return ids, nil
}

// persistenceIDsSQL: ids after ?5 in the range [?1, ?2) or equal to ?4,
// at most ?3 (-1: all). The journal's ids in the range are found by a
// recursive loose scan of its primary key, one index probe per id, so a
// page costs the same wherever it is (a GROUP BY read every event row of
// every later id); the id equal to ?4 by one probe of its own (an OR in the
// scan's probe would make each a sort of every row); ids whose events were
// all deleted come from journal_metadata.
const persistenceIDsSQL = `
	WITH RECURSIVE ids(pid) AS (
		SELECT (SELECT persistence_id FROM event_journal
			WHERE persistence_id > ?5 AND persistence_id >= ?1 AND persistence_id < ?2
			ORDER BY persistence_id LIMIT 1)
		UNION ALL
		SELECT (SELECT j.persistence_id FROM event_journal j
			WHERE j.persistence_id > ids.pid AND j.persistence_id < ?2
			ORDER BY j.persistence_id LIMIT 1)
		FROM ids WHERE ids.pid IS NOT NULL
		LIMIT ?3
	)
	SELECT pid FROM ids WHERE pid IS NOT NULL
	UNION SELECT * FROM (SELECT persistence_id FROM event_journal WHERE persistence_id = ?4 AND persistence_id > ?5 LIMIT 1)
	UNION SELECT * FROM (SELECT persistence_id FROM journal_metadata
		WHERE ((persistence_id >= ?1 AND persistence_id < ?2) OR persistence_id = ?4) AND persistence_id > ?5
		ORDER BY persistence_id LIMIT ?3)
	ORDER BY 1 LIMIT ?3`

const newIDsSQL = `SELECT ` + envelopeColumns + ` FROM event_journal e
	WHERE (?1 = '' OR e.entity_type = ?1) AND e.ordering > ? AND e.ordering <= ? ORDER BY e.ordering LIMIT +?`

// PersistenceIDs implements query.PersistenceIDsQuery.
func (q *Queries) PersistenceIDs(ctx context.Context, entityType string) *query.Stream[string] {
	var after int64
	if err := q.s.stmts.maxOrdering.QueryRowContext(ctx).Scan(&after); err != nil {
		err = q.s.errs.Map(ctx, "persistence ids", err, journal.ErrClosed)
		return query.NewStream(func(func(string) bool) error { return err })
	}
	ids, err := q.CurrentPersistenceIDs(ctx, entityType, "", 0)
	if err != nil {
		return query.NewStream(func(func(string) bool) error { return err })
	}
	events := q.follow(ctx, query.SequenceOffset(after), func(ctx context.Context, after query.Offset) iter.Seq2[query.Envelope, error] {
		return q.scan(ctx, after, newIDsSQL, entityType)
	})
	return query.FollowPersistenceIDs(ids, events)
}
