package postgres

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/annals-go/annals/journal"
)

// maxKnownStamps bounds how many ids a store remembers the last
// db_timestamp of (see knownStamps): about 100 bytes each besides the id.
// Beyond it, an arbitrary id is forgotten for each new one; a forgotten
// id's next write reads its previous event's db_timestamp again.
const maxKnownStamps = 100_000

// knownStamps is what a store in TimestampOrder knows of the rows it
// stored: per id, the sequence number and db_timestamp of the last event
// it wrote (or read before a write). A row's db_timestamp never changes
// once committed, so the pair stays true while the row exists; a write
// whose first event follows that sequence number takes its floor from it
// without reading the journal. Any other write reads the id's latest row
// below its first event (latestBelow): after a restart, after another
// writer wrote the id (it wrote the events after the known one, so the
// numbers do not follow), after a conflict or a delete (the id is
// forgotten). Rows of a known event that are deleted leave the floor
// higher than a read would, never lower. The one case it does not cover
// is an id purged and written again from its first event by another
// process while this one still knows it: then two processes wrote one id
// (see journal.Journal's single writer), and a later event of this
// process may be stamped below the other's rows when the clock stepped
// back meanwhile.
type knownStamps struct {
	mu     sync.Mutex
	latest map[string]knownStamp
	reads  atomic.Int64 // ids read with latestBelow, for tests
}

// knownStamp is an id's last known event: its sequence number and
// db_timestamp (Unix microseconds).
type knownStamp struct {
	seq, micros int64
}

func newKnownStamps() *knownStamps {
	return &knownStamps{latest: map[string]knownStamp{}}
}

// get returns the db_timestamp of persistenceID's event seq, when known.
func (k *knownStamps) get(persistenceID string, seq int64) (time.Time, bool) {
	k.mu.Lock()
	st, ok := k.latest[persistenceID]
	k.mu.Unlock()
	if !ok || st.seq != seq {
		return time.Time{}, false
	}
	return time.UnixMicro(st.micros), true
}

// put records that persistenceID's event seq has db_timestamp ts.
func (k *knownStamps) put(persistenceID string, seq int64, ts time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.latest[persistenceID]; !ok && len(k.latest) >= maxKnownStamps {
		for other := range k.latest {
			delete(k.latest, other)
			break
		}
	}
	k.latest[persistenceID] = knownStamp{seq: seq, micros: ts.UnixMicro()}
}

// forget drops what is known of the ids.
func (k *knownStamps) forget(persistenceIDs ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, pid := range persistenceIDs {
		delete(k.latest, pid)
	}
}

// stampedInsert is the statement of TimestampOrder's inserts: ins, an
// INSERT stamping its rows from clock (with RETURNING when others follow),
// then the data-modifying statements others, which read its rows as ins;
// it returns one row, clock, the transaction's time (see stampOf), so that
// a write takes no more statements than in CommitOrder.
func stampedInsert(clock, ins string, others ...string) string {
	q := `WITH ins AS (
	` + ins + `
)`
	for k, o := range others {
		q += fmt.Sprintf(`, more%d AS (
	%s
)`, k, o)
	}
	return q + `
SELECT ` + clock
}

// latestBelowSQL reads, for ids $1 and sequence numbers $2 (parallel
// arrays), each id's row with the highest sequence number below its
// number, an event or (r2dbc layout) a delete marker: the position of the
// id in $1 (from 1), the row's sequence number and db_timestamp; nothing
// for an id with no such row. One backward scan of the primary key per id.
func latestBelowSQL(journalTable string) string {
	return `SELECT p.idx, e.seq_nr, e.db_timestamp FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS p(pid, below, idx)
	CROSS JOIN LATERAL (SELECT e.seq_nr, e.db_timestamp FROM ` + journalTable + ` e
		WHERE e.persistence_id = p.pid AND e.seq_nr < p.below ORDER BY e.seq_nr DESC LIMIT 1) e`
}

// stampOf is the db_timestamp stampSQL gives row p of a transaction (from
// 0) that inserts total rows, at transaction time t0, with floor (none when
// !hasFloor): the SQL's arithmetic, in Go, so that a store knows the
// db_timestamps it wrote without reading them back.
func stampOf(t0 time.Time, p, total int64, floor time.Time, hasFloor bool) time.Time {
	at := t0.Add(time.Duration(p) * time.Microsecond)
	if !hasFloor || !floor.After(at) {
		return at
	}
	ahead := int64(floor.Sub(at) / time.Microsecond)
	return at.Add(time.Duration((ahead+total-1)/total*total) * time.Microsecond)
}

// floors returns the floor of each row of the atomic writes
// writes[pending...] (each id's writes adjacent, in order, as groupByID
// leaves them), in their order: the db_timestamp of the id's event before
// its first one in the call, plus 1µs per event of the id up to the row;
// NULL for an id with no earlier event. The earlier events' db_timestamps
// come from known, or from one read of the journal for the ids it does
// not know, which known then records.
func (j *Journal) floors(ctx context.Context, writes []journal.AtomicWrite, pending []int) ([]pgtype.Timestamptz, error) {
	s := j.s
	prevs := make(map[string]time.Time) // the ids' earlier events, where they have one
	var lookIDs []string
	var lookBelow []int64
	last := ""
	rows := 0
	for _, i := range pending {
		w := writes[i]
		rows += len(w.Events)
		if w.PersistenceID == last {
			continue
		}
		last = w.PersistenceID
		first := w.Events[0].SequenceNr
		if first == 1 {
			continue
		}
		if ts, ok := s.known.get(w.PersistenceID, first-1); ok {
			prevs[w.PersistenceID] = ts
			continue
		}
		lookIDs, lookBelow = append(lookIDs, w.PersistenceID), append(lookBelow, first)
	}
	if len(lookIDs) > 0 {
		s.known.reads.Add(int64(len(lookIDs)))
		r, err := s.pool.Query(ctx, s.sql.latestBelow, lookIDs, lookBelow)
		if err != nil {
			return nil, s.errs.Map(ctx, "write", err, journal.ErrClosed)
		}
		var idx int
		var seq int64
		var ts time.Time
		for r.Next() {
			if err := r.Scan(&idx, &seq, &ts); err != nil {
				r.Close()
				return nil, s.errs.Map(ctx, "write", err, journal.ErrClosed)
			}
			prevs[lookIDs[idx-1]] = ts
			s.known.put(lookIDs[idx-1], seq, ts)
		}
		if err := r.Err(); err != nil {
			return nil, s.errs.Map(ctx, "write", err, journal.ErrClosed)
		}
	}
	floors := make([]pgtype.Timestamptz, 0, rows)
	last = ""
	var ord int64 // the row's position among its id's rows of the call
	for _, i := range pending {
		w := writes[i]
		if w.PersistenceID != last {
			last, ord = w.PersistenceID, 0
		}
		prev, ok := prevs[w.PersistenceID]
		for range w.Events {
			ord++
			if ok {
				floors = append(floors, pgtype.Timestamptz{Time: prev.Add(time.Duration(ord) * time.Microsecond), Valid: true})
			} else {
				floors = append(floors, pgtype.Timestamptz{})
			}
		}
	}
	return floors, nil
}

// learn records the db_timestamp of each id's last event among the
// committed atomic writes writes[pending...] (their rows in order, rows
// floors, from 0 in a transaction of total rows stamped at t0).
func (j *Journal) learn(writes []journal.AtomicWrite, pending []int, floors []pgtype.Timestamptz, t0 time.Time) {
	total := int64(len(floors))
	var p int64
	for k, i := range pending {
		w := writes[i]
		p += int64(len(w.Events))
		if k+1 < len(pending) && writes[pending[k+1]].PersistenceID == w.PersistenceID {
			continue
		}
		f := floors[p-1]
		j.s.known.put(w.PersistenceID, w.Events[len(w.Events)-1].SequenceNr, stampOf(t0, p-1, total, f.Time, f.Valid))
	}
}
