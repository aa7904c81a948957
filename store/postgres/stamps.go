package postgres

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/annals-go/annals/journal"
)

// maxKnownStamps bounds how many ids a store remembers the last
// db_timestamp of (see knownStamps): some 40 bytes each besides the id's
// string, which the map keeps.
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
// numbers do not follow), after a conflict, a delete or a purge through
// this store (the id is forgotten). Rows of a known event that another
// process deletes leave the floor higher than a read would, never lower. The one case it does not cover
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

// get returns the db_timestamp of each id's event below[k]-1 (ids and
// below parallel) in prevs[k], where known; found[k] tells which.
func (k *knownStamps) get(ids []string, below []int64, prevs []time.Time, found []bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for n, pid := range ids {
		if st, ok := k.latest[pid]; ok && st.seq == below[n]-1 {
			prevs[n], found[n] = time.UnixMicro(st.micros), true
		}
	}
}

// put records that each id's event seqs[k] has db_timestamp stamps[k]
// (parallel slices).
func (k *knownStamps) put(ids []string, seqs []int64, stamps []time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for n, pid := range ids {
		if _, ok := k.latest[pid]; !ok && len(k.latest) >= maxKnownStamps {
			for other := range k.latest {
				delete(k.latest, other)
				break
			}
		}
		k.latest[pid] = knownStamp{seq: seqs[n], micros: stamps[n].UnixMicro()}
	}
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
// a write takes no more statements than in CommitOrder. It sends the
// write's NOTIFY on the channel parameter notify unless notify is "".
func stampedInsert(clock, notify, ins string, others ...string) string {
	return chainedInsert(nil, ins, others, clock, notify)
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
	// The ids of the call and the first sequence number of each: at most
	// one per write.
	ids, firsts := make([]string, 0, len(pending)), make([]int64, 0, len(pending))
	rows := 0
	for k, i := range pending {
		w := writes[i]
		rows += len(w.Events)
		if k == 0 || writes[pending[k-1]].PersistenceID != w.PersistenceID {
			ids, firsts = append(ids, w.PersistenceID), append(firsts, w.Events[0].SequenceNr)
		}
	}
	prevs, found := make([]time.Time, len(ids)), make([]bool, len(ids))
	s.known.get(ids, firsts, prevs, found)
	var look []int // the ids to read, as indexes into ids
	for n := range ids {
		if !found[n] && firsts[n] > 1 {
			look = append(look, n)
		}
	}
	if len(look) > 0 {
		if err := j.readPrevious(ctx, ids, firsts, look, prevs, found); err != nil {
			return nil, err
		}
	}
	floors := make([]pgtype.Timestamptz, 0, rows)
	n := -1
	var ord int64 // the row's position among its id's rows of the call
	for k, i := range pending {
		w := writes[i]
		if k == 0 || writes[pending[k-1]].PersistenceID != w.PersistenceID {
			n, ord = n+1, 0
		}
		for range w.Events {
			ord++
			if found[n] {
				floors = append(floors, pgtype.Timestamptz{Time: prevs[n].Add(time.Duration(ord) * time.Microsecond), Valid: true})
			} else {
				floors = append(floors, pgtype.Timestamptz{})
			}
		}
	}
	return floors, nil
}

// floorCells is the floors' parameter of an insert statement: NULL when
// no row has a floor (the statement's unnest pads it with NULLs).
func floorCells(floors []pgtype.Timestamptz) stampCells {
	for _, f := range floors {
		if f.Valid {
			return stampCells(floors)
		}
	}
	return nil
}

// readPrevious reads, for the ids ids[look...], the latest row below
// their first sequence number in firsts into prevs and found, and records
// them in known.
func (j *Journal) readPrevious(ctx context.Context, ids []string, firsts []int64, look []int, prevs []time.Time, found []bool) error {
	s := j.s
	s.known.reads.Add(int64(len(look)))
	lookIDs, lookBelow := make([]string, len(look)), make([]int64, len(look))
	for k, n := range look {
		lookIDs[k], lookBelow[k] = ids[n], firsts[n]
	}
	r, err := s.pool.Query(ctx, s.sql.latestBelow, lookIDs, lookBelow)
	if err != nil {
		return s.errs.Map(ctx, "write", err, journal.ErrClosed)
	}
	var readIDs []string
	var readSeqs []int64
	var readStamps []time.Time
	for r.Next() {
		var idx, seq int64
		var ts time.Time
		if err := r.Scan(&idx, &seq, &ts); err != nil {
			r.Close()
			return s.errs.Map(ctx, "write", err, journal.ErrClosed)
		}
		n := look[idx-1]
		prevs[n], found[n] = ts, true
		readIDs, readSeqs, readStamps = append(readIDs, ids[n]), append(readSeqs, seq), append(readStamps, ts)
	}
	if err := r.Err(); err != nil {
		return s.errs.Map(ctx, "write", err, journal.ErrClosed)
	}
	s.known.put(readIDs, readSeqs, readStamps)
	return nil
}

// learn records the db_timestamp of each id's last event among the
// committed atomic writes writes[pending...] (their rows in order, rows
// floors, from 0 in a transaction of total rows stamped at t0).
func (j *Journal) learn(writes []journal.AtomicWrite, pending []int, floors []pgtype.Timestamptz, t0 time.Time) {
	total := int64(len(floors))
	// At most one id per write.
	ids, seqs, stamps := make([]string, 0, len(pending)), make([]int64, 0, len(pending)), make([]time.Time, 0, len(pending))
	var p int64
	for k, i := range pending {
		w := writes[i]
		p += int64(len(w.Events))
		if k+1 < len(pending) && writes[pending[k+1]].PersistenceID == w.PersistenceID {
			continue
		}
		f := floors[p-1]
		ids, seqs, stamps = append(ids, w.PersistenceID), append(seqs, w.Events[len(w.Events)-1].SequenceNr), append(stamps, stampOf(t0, p-1, total, f.Time, f.Valid))
	}
	j.s.known.put(ids, seqs, stamps)
}
