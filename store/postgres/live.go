package postgres

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/annals-go/annals/query"
)

// endOfTime is an upper bound after every stored timestamp.
var endOfTime = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// liveQuery is the state of one live offset-ordered query.
type liveQuery struct {
	q    *Queries
	read pageReader
	tag  string // a query by tag: an id's events in it are not consecutive
	// ordering is how the rows read were stamped: the store's ordering for
	// events, TimestampOrder for durable-state changes (their writers take
	// no clock row).
	ordering Ordering
	// states marks a query of durable-state changes: an id's revisions
	// skip by design (only the latest is stored), so skipped ones are not
	// looked for, and a row is a duplicate only when it is the revision
	// and stamp last delivered (revision 1 after a delete is new).
	states bool
	main   cursor // the main query's position and the offset it gives envelopes
	back   key    // the backtracking query's position
	// delivered holds, per persistence id, the last sequence number this
	// query delivered and its db_timestamp; entries older than the
	// backtracking position are dropped (no query reads there again).
	delivered map[string]deliveredAt
}

type deliveredAt struct {
	seq int64
	ts  time.Time
}

// live returns the live form of an offset-ordered query of events.
// tag names the tag of a query by tag, empty for other queries.
func (q *Queries) live(ctx context.Context, after query.Offset, read pageReader, tag string) *query.Stream[query.Envelope] {
	return q.follow(ctx, after, &liveQuery{q: q, read: read, tag: tag, ordering: q.s.cfg.ordering})
}

// follow runs the live query l from after.
func (q *Queries) follow(ctx context.Context, after query.Offset, l *liveQuery) *query.Stream[query.Envelope] {
	return query.NewStream(func(yield func(query.Envelope) bool) error {
		c, err := start(after)
		if err != nil {
			return err
		}
		s := q.s
		s.listen()
		l.main, l.back, l.delivered = c, c.key, map[string]deliveredAt{}
		for id, seq := range after.Seen {
			l.delivered[id] = deliveredAt{seq, after.Timestamp}
		}
		timer := time.NewTimer(s.cfg.poll)
		defer timer.Stop()
		wait := s.cfg.poll
		for {
			if s.isClosed() {
				return q.closedErr()
			}
			wake := s.signal.Wait() // before reading: a commit during the round wakes the next
			full, stop, err := l.round(ctx, yield)
			if err != nil {
				return q.mapErr(ctx, "live query", err)
			}
			if stop {
				return nil
			}
			if full {
				continue // more rows are waiting
			}
			timer.Reset(wait)
			wait = s.cfg.poll
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-wake:
				if l.ordering == TimestampOrder {
					// The new event is younger than the main query's
					// distance behind the clock: look again once it is not.
					wait = min(s.cfg.poll, s.cfg.behind+time.Millisecond)
				}
			case <-timer.C:
			}
		}
	})
}

// round reads what the main and backtracking queries find now. full
// reports that a page came back full; stop that the consumer stopped.
func (l *liveQuery) round(ctx context.Context, yield func(query.Envelope) bool) (full, stop bool, err error) {
	s := l.q.s
	// CommitOrder reads everything visible: no clock reading, no bound.
	upper, now := endOfTime, time.Time{}
	if l.ordering == TimestampOrder {
		var err error
		if now, err = s.dbNow(ctx); err != nil {
			return false, false, err
		}
		upper = now.Add(-s.cfg.behind)
	}
	page, err := l.read(ctx, l.main.key, upper, s.cfg.pageSize, nil)
	if err != nil {
		return false, false, err
	}
	earlier, err := l.earlier(ctx, page, upper)
	if err != nil {
		return false, false, err
	}
	for _, r := range page {
		if !l.main.passes(r) {
			continue
		}
		if l.ordering == CommitOrder {
			// Events become visible in (db_timestamp, seq_nr) order: the
			// main query misses none and sees none twice.
			if !yield(query.FromRepr(r.Repr, l.main.offset)) {
				return false, true, nil
			}
			continue
		}
		if !l.deliver(r, earlier[r.PersistenceID], yield) {
			return false, true, nil
		}
	}
	if len(page) == s.cfg.pageSize {
		return true, false, nil // backtrack once the main query has caught up
	}
	if l.ordering == CommitOrder {
		return false, false, nil
	}

	// Backtracking: from at most the window behind the main position, up to
	// the main position or backtrack-behind the clock, whichever is earlier.
	if floor := l.main.key.ts.Add(-s.cfg.backtrackWindow); l.back.ts.Before(floor) {
		l.back = key{ts: floor, seq: -1}
	}
	backUpper := now.Add(-s.cfg.backtrackBehind)
	if l.main.key.ts.Before(backUpper) {
		backUpper = l.main.key.ts
	}
	if !backUpper.After(l.back.ts) {
		return false, false, nil
	}
	for {
		page, err := l.read(ctx, l.back, backUpper, s.cfg.pageSize, nil)
		if err != nil {
			return false, false, err
		}
		for _, r := range page {
			l.back = l.back.of(r)
			if !l.deliver(r, nil, yield) { // in timestamp order: an id's predecessors came first
				return false, true, nil
			}
		}
		if len(page) < s.cfg.pageSize {
			break
		}
	}
	for id, d := range l.delivered {
		if d.ts.Before(l.back.ts) {
			delete(l.delivered, id)
		}
	}
	return false, false, nil
}

// earlier reads, in TimestampOrder, the events stamped since the
// backtracking position of the ids in page whose rows skip sequence
// numbers: after the last one this query delivered, or from 1 for an id it
// has not delivered since that position. Those the main query passed
// before their transactions committed; they are committed now, since an
// id's writes commit in order, and stamped after the id's last delivered
// event, so after the backtracking position. For a query by tag every id
// in page is read, since an id's tagged events are not consecutive. In
// CommitOrder the main query passes no event uncommitted. A query of
// durable-state changes reads none: a revision replaced is gone.
func (l *liveQuery) earlier(ctx context.Context, page []row, upper time.Time) (map[string][]row, error) {
	if l.ordering != TimestampOrder || l.states {
		return nil, nil
	}
	// next[id] is the sequence number the id's next row must have for
	// nothing to be missing before it; 0 once the id is asked for.
	var ids []string
	next := map[string]int64{}
	for _, r := range page {
		want, seen := next[r.PersistenceID]
		if !seen {
			want = 1 // an id this query has not delivered since the backtracking position
			if d, known := l.delivered[r.PersistenceID]; known {
				want = d.seq + 1
			}
		}
		if want != 0 && (l.tag != "" || r.SequenceNr > want) {
			ids, want = append(ids, r.PersistenceID), 0
		} else if want != 0 {
			want = r.SequenceNr + 1
		}
		next[r.PersistenceID] = want
	}
	if len(ids) == 0 {
		return nil, nil
	}
	var rows []row
	var err error
	if l.tag != "" {
		rows, err = l.q.s.readOrdered(ctx, 0, nil, l.q.s.sql.earlierTagged, ids, l.back.ts, upper, l.tag)
	} else {
		rows, err = l.q.s.readOrdered(ctx, 0, nil, l.q.s.sql.earlier, ids, l.back.ts, upper)
	}
	if err != nil {
		return nil, err
	}
	out := map[string][]row{}
	for _, r := range rows {
		out[r.PersistenceID] = append(out[r.PersistenceID], r)
	}
	return out, nil
}

// deliver yields r unless this query delivered it (or, for durable-state
// changes, a later change of its id) already, preceded by the
// events of earlier (its id's events the main query passed before they
// committed, ascending) that come after the last one it delivered. It
// reports false when the consumer stopped.
func (l *liveQuery) deliver(r row, earlier []row, yield func(query.Envelope) bool) bool {
	d, known := l.delivered[r.PersistenceID]
	switch {
	case l.states:
		// A state row read again is the one delivered (same revision and
		// stamp): a row never goes back, since rows are changed in place
		// and rounds read ever later snapshots. Any other is a new change,
		// revision 1 after a delete included, whatever its stamp.
		if known && r.SequenceNr == d.seq && r.dbTimestamp.Equal(d.ts) {
			return true
		}
	case r.SequenceNr <= d.seq:
		return true
	}
	for _, m := range earlier {
		if m.SequenceNr >= r.SequenceNr {
			break
		}
		if m.SequenceNr > d.seq && !yield(query.FromRepr(m.Repr, l.main.offset)) {
			return false
		}
	}
	l.delivered[r.PersistenceID] = deliveredAt{r.SequenceNr, r.dbTimestamp}
	return yield(query.FromRepr(r.Repr, l.main.offset))
}

// channelName returns the NOTIFY channel of a schema (at most 63 bytes).
func channelName(schema string) string {
	if name := "annals_" + schema; len(name) <= 63 {
		return name
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(lockKey(schema)))
	return "annals_" + hex.EncodeToString(b[:])
}

// listen starts, once, the goroutine that LISTENs on the schema's channel
// and wakes live queries on each notification. It holds one connection of
// the pool until Close.
func (s *Store) listen() {
	if !s.cfg.notify {
		return
	}
	s.listenMu.Lock()
	defer s.listenMu.Unlock()
	if s.stopListen != nil || s.isClosed() {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stopListen, s.listenDone = cancel, make(chan struct{})
	go func() {
		defer close(s.listenDone)
		retry := 100 * time.Millisecond
		for ctx.Err() == nil {
			listened, standby := s.listenOnce(ctx)
			wait := retry
			switch {
			case standby:
				// A hot standby takes no LISTEN (notifications are not
				// replicated): its live queries poll. Try again now and
				// then, in case it was promoted.
				wait = standbyListenRetry
			case listened:
				retry = 100 * time.Millisecond
				wait = retry
			}
			s.signal.Notify() // a notification may have been missed
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
			retry = min(2*retry, 5*time.Second)
		}
	}()
}

// standbyListenRetry is how long a store whose server refused LISTEN as a
// hot standby waits before it tries again.
const standbyListenRetry = time.Minute

// listenOnce listens on one connection until it fails or ctx ends. It
// reports whether it got as far as listening, and whether the server
// refused LISTEN as a hot standby does (SQLSTATE 25006,
// read_only_sql_transaction).
func (s *Store) listenOnce(ctx context.Context) (listened, standby bool) {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, false
	}
	conn := pc.Hijack() // never returned to the pool in LISTEN state
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize()); err != nil {
		var pgErr *pgconn.PgError
		return false, errors.As(err, &pgErr) && pgErr.Code == "25006"
	}
	s.signal.Notify()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return true, false
		}
		s.signal.Notify()
	}
}
