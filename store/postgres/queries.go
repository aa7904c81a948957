package postgres

import (
	"context"
	"fmt"
	"iter"
	"maps"
	"time"

	"github.com/annals-go/annals/durable"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
)

// Queries is the store's read journal. Queries by slices and by tag return
// envelopes in (db_timestamp, seq_nr, persistence_id) order with timestamp
// offsets; events by persistence id carry sequence offsets (the event's
// sequence number).
//
// A current query ends at the database time it started. A live query
// follows new events: it wakes on a commit in this process or a NOTIFY from
// another, or every poll interval. In CommitOrder it reads every event once,
// in order, as it becomes visible. In TimestampOrder it runs the main query
// BehindCurrentTime behind the clock and a backtracking query behind that
// (see the package documentation); within one live query every event is
// delivered once, and the events of one persistence id in ascending order:
// an event whose predecessors the main query passed before they committed
// is preceded by them. An envelope found by backtracking or delivered ahead
// of its successor carries the live query's current offset, so offsets
// never move back.
//
// In TimestampOrder, resuming a live query from an offset starts its
// backtracking at that offset: an event stamped before it whose
// transaction had not committed when the earlier query passed it, and that
// the earlier query's backtracking had not yet found, is not delivered.
type Queries struct {
	s *Store
	// states is the durable-state store whose change queries these are
	// (nil for events): their errors are durable's.
	states *DurableState
}

// closedErr is the error of a query on a closed store.
func (q *Queries) closedErr() error {
	if q.states != nil {
		return durable.ErrClosed
	}
	return journal.ErrClosed
}

// mapErr maps a query's error by the store's rule (journal.StoreErrors);
// a change query's as its DurableState's calls (a missing table is
// ErrSchemaMissing).
func (q *Queries) mapErr(ctx context.Context, op string, err error) error {
	if q.states != nil {
		return q.states.mapErr(ctx, op, err)
	}
	return q.s.errs.Map(ctx, op, err, journal.ErrClosed)
}

var (
	_ query.EventsByPersistenceIDQuery = (*Queries)(nil)
	_ query.EventsByTagQuery           = (*Queries)(nil)
	_ query.EventsBySlicesQuery        = (*Queries)(nil)
	_ query.PersistenceIDsQuery        = (*Queries)(nil)
)

// Queries returns the store's read journal.
func (s *Store) Queries() *Queries { return &Queries{s: s} }

// key is a position in (db_timestamp, seq_nr, persistence_id) order: rows
// after it are read.
type key struct {
	ts  time.Time
	seq int64
	pid string
}

func (k key) of(r row) key { return key{r.dbTimestamp, r.SequenceNr, r.PersistenceID} }

// pageReader reads up to limit rows after k with db_timestamp ≤ upper. With
// a nil emit it returns them; otherwise it hands them to emit in chunks as
// they arrive, filling the slice emit returns next (see scanRows), and
// returns none.
type pageReader func(ctx context.Context, k key, upper time.Time, limit int, emit func([]row) []row) ([]row, error)

func (q *Queries) bySlices(entityType string, minSlice, maxSlice int) pageReader {
	return func(ctx context.Context, k key, upper time.Time, limit int, emit func([]row) []row) ([]row, error) {
		return q.s.readOrdered(ctx, limit, emit, q.s.sql.bySlices, entityType, minSlice, maxSlice, k.ts, k.seq, k.pid, upper, limit)
	}
}

func (q *Queries) byTag(tag string) pageReader {
	return func(ctx context.Context, k key, upper time.Time, limit int, emit func([]row) []row) ([]row, error) {
		return q.s.readOrdered(ctx, limit, emit, q.s.sql.byTag, tag, k.ts, k.seq, k.pid, upper, limit)
	}
}

// byType reads the events of one entity type, or of every type when
// entityType is empty.
func (q *Queries) byType(entityType string) pageReader {
	if entityType == "" {
		return func(ctx context.Context, k key, upper time.Time, limit int, emit func([]row) []row) ([]row, error) {
			return q.s.readOrdered(ctx, limit, emit, q.s.sql.byAnyType, k.ts, k.seq, k.pid, upper, limit)
		}
	}
	return func(ctx context.Context, k key, upper time.Time, limit int, emit func([]row) []row) ([]row, error) {
		return q.s.readOrdered(ctx, limit, emit, q.s.sql.byType, entityType, k.ts, k.seq, k.pid, upper, limit)
	}
}

// cursor tracks the offset of an offset-ordered query: the timestamp of the
// last event passed and the (id → seq) pairs passed at exactly it.
type cursor struct {
	key    key
	offset query.Offset
}

// start returns the cursor of a query resuming after o.
func start(o query.Offset) (cursor, error) {
	switch o.Kind {
	case query.KindNone:
		return cursor{key: key{seq: -1}, offset: o}, nil
	case query.KindTimestamp:
		return cursor{key: key{ts: o.Timestamp, seq: -1}, offset: o}, nil
	}
	return cursor{}, fmt.Errorf("%w: %s (the PostgreSQL store resumes from timestamp offsets)", query.ErrUnsupportedOffset, o)
}

// passes moves the cursor over r. It reports false when the offset says r
// was already seen (r is at the offset's timestamp and listed in its seen
// pairs).
func (c *cursor) passes(r row) bool {
	c.key = c.key.of(r)
	o := c.offset
	if o.Kind == query.KindTimestamp && r.dbTimestamp.Equal(o.Timestamp) {
		if seq, ok := o.Seen[r.PersistenceID]; ok && seq >= r.SequenceNr {
			return false
		}
		seen := maps.Clone(o.Seen)
		if seen == nil {
			seen = map[string]int64{}
		}
		seen[r.PersistenceID] = r.SequenceNr
		c.offset = query.Offset{Kind: query.KindTimestamp, Timestamp: o.Timestamp, Seen: seen}
		return true
	}
	// One map per event: TimestampOffset would copy it.
	c.offset = query.Offset{Kind: query.KindTimestamp, Timestamp: r.dbTimestamp, Seen: map[string]int64{r.PersistenceID: r.SequenceNr}}
	return true
}

// maxPageGrowth bounds how far a current query's pages grow.
const maxPageGrowth = 8

// dbNow reads the database clock.
func (s *Store) dbNow(ctx context.Context) (time.Time, error) {
	var now time.Time
	err := s.pool.QueryRow(ctx, `SELECT statement_timestamp()`).Scan(&now)
	return now, err
}

// current returns the events read after `after` up to the database time
// at its start.
func (q *Queries) current(ctx context.Context, after query.Offset, read pageReader) iter.Seq2[query.Envelope, error] {
	return func(yield func(query.Envelope, error) bool) {
		c, err := start(after)
		if err != nil {
			yield(query.Envelope{}, err)
			return
		}
		if q.s.isClosed() {
			yield(query.Envelope{}, q.closedErr())
			return
		}
		upper, err := q.s.dbNow(ctx)
		if err != nil {
			yield(query.Envelope{}, q.mapErr(ctx, "query", err))
			return
		}
		// Pages grow while they come back full (a catch-up), up to
		// maxPageGrowth times the page size, for fewer round trips.
		size := q.s.cfg.pageSize
		free := make(chan []row, maxPageGrowth*size/scanChunk+2)
		for {
			n, stopped, err := streamPage(ctx, read, c.key, upper, size, free, func(r row) bool {
				return !c.passes(r) || yield(query.FromRepr(r.Repr, c.offset), nil)
			})
			if stopped {
				return
			}
			if err != nil {
				yield(query.Envelope{}, q.mapErr(ctx, "query", err))
				return
			}
			if n < size {
				return
			}
			size = min(2*size, maxPageGrowth*q.s.cfg.pageSize)
		}
	}
}

// streamPage reads a page of up to size rows after k on a goroutine of its
// own and passes each row to f as the page arrives, in chunks, until f
// returns false (stopped). n counts the rows read; err is the page's
// error, after the rows read before it.
//
// The reader never waits for f: the channel holds a whole page, so the
// page's connection goes back to the pool as soon as the server has sent
// it, however slow f is, and the server's work and the scanning of the
// rows overlap with f's (with the page read whole before its rows were
// yielded, a catch-up reached 50–60% of a raw streamed select, now about
// 70%). When f stops, streamPage waits for the rest of the page, as when
// pages were read whole: no read outlives the query, and a cancellation
// after it interrupts none. Chunks f is done with go to free, for the
// reader to fill again (the rows' values live on in the envelopes made
// from them; the row structs do not).
func streamPage(ctx context.Context, read pageReader, k key, upper time.Time, size int, free chan []row, f func(row) bool) (n int, stopped bool, err error) {
	chunks := make(chan []row, size/scanChunk+2)
	done := make(chan error, 1)
	go func() {
		_, err := read(ctx, k, upper, size, func(rows []row) []row {
			chunks <- rows
			select {
			case next := <-free:
				return next
			default:
				return make([]row, 0, scanChunk)
			}
		})
		done <- err
		close(chunks)
	}()
	for chunk := range chunks {
		for _, r := range chunk {
			n++
			if !f(r) {
				<-done
				return n, true, nil
			}
		}
		select {
		case free <- chunk:
		default:
		}
	}
	return n, false, <-done
}

// CurrentEventsByTag implements query.EventsByTagQuery.
func (q *Queries) CurrentEventsByTag(ctx context.Context, tag string, after query.Offset) iter.Seq2[query.Envelope, error] {
	return q.current(ctx, after, q.byTag(tag))
}

// EventsByTag implements query.EventsByTagQuery.
func (q *Queries) EventsByTag(ctx context.Context, tag string, after query.Offset) *query.Stream[query.Envelope] {
	return q.live(ctx, after, q.byTag(tag), tag)
}

// CurrentEventsBySlices implements query.EventsBySlicesQuery.
func (q *Queries) CurrentEventsBySlices(ctx context.Context, entityType string, minSlice, maxSlice int, after query.Offset) iter.Seq2[query.Envelope, error] {
	return q.current(ctx, after, q.bySlices(entityType, minSlice, maxSlice))
}

// EventsBySlices implements query.EventsBySlicesQuery.
func (q *Queries) EventsBySlices(ctx context.Context, entityType string, minSlice, maxSlice int, after query.Offset) *query.Stream[query.Envelope] {
	return q.live(ctx, after, q.bySlices(entityType, minSlice, maxSlice), "")
}

// CurrentEventsByPersistenceID implements query.EventsByPersistenceIDQuery.
func (q *Queries) CurrentEventsByPersistenceID(ctx context.Context, persistenceID string, from, to int64) iter.Seq2[query.Envelope, error] {
	return query.FromReplay(q.s.Journal().Replay(ctx, persistenceID, from, to, to),
		func(r journal.Repr) query.Offset { return query.SequenceOffset(r.SequenceNr) })
}

// EventsByPersistenceID implements query.EventsByPersistenceIDQuery.
func (q *Queries) EventsByPersistenceID(ctx context.Context, persistenceID string, from, to int64) *query.Stream[query.Envelope] {
	q.s.listen()
	return query.FollowByID(ctx, &q.s.signal, q.s.cfg.poll, from, to, func(ctx context.Context, from, to int64) iter.Seq2[query.Envelope, error] {
		return q.CurrentEventsByPersistenceID(ctx, persistenceID, from, to)
	})
}

// CurrentPersistenceIDs implements query.PersistenceIDsQuery: ids of
// entityType (every type when empty), ascending, after afterID, at most
// limit (no limit when ≤ 0), including ids whose events were all deleted.
func (q *Queries) CurrentPersistenceIDs(ctx context.Context, entityType, afterID string, limit int) ([]string, error) {
	if q.s.isClosed() {
		return nil, journal.ErrClosed
	}
	var lim any // NULL: no limit
	if limit > 0 {
		lim = limit
	}
	rows, err := q.s.pool.Query(ctx, q.s.sql.persistenceIDs, entityType, afterID, lim)
	if err != nil {
		return nil, q.s.errs.Map(ctx, "persistence ids", err, journal.ErrClosed)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("postgres: persistence ids: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, q.s.errs.Map(ctx, "persistence ids", err, journal.ErrClosed)
	}
	return ids, nil
}

// PersistenceIDs implements query.PersistenceIDsQuery: the ids stored now,
// then each new one once as its first event arrives.
func (q *Queries) PersistenceIDs(ctx context.Context, entityType string) *query.Stream[string] {
	fail := func(err error) *query.Stream[string] {
		return query.NewStream(func(func(string) bool) error { return err })
	}
	if q.s.isClosed() {
		return fail(journal.ErrClosed)
	}
	now, err := q.s.dbNow(ctx)
	if err != nil {
		return fail(q.s.errs.Map(ctx, "persistence ids", err, journal.ErrClosed))
	}
	ids, err := q.CurrentPersistenceIDs(ctx, entityType, "", 0)
	if err != nil {
		return fail(err)
	}
	return query.FollowPersistenceIDs(ids, q.live(ctx, query.TimestampOffset(now, nil), q.byType(entityType), ""))
}
