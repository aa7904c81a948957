package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/recovery"
	"github.com/annals-go/annals/snapshot"
)

var _ recovery.BatchReader = (*Journal)(nil)

// ReadsSnapshotsOf implements recovery.Reader: true for this store's own
// snapshots (or none).
func (j *Journal) ReadsSnapshotsOf(snaps snapshot.Store) bool {
	if snaps == nil {
		return true
	}
	ss, ok := snaps.(*Snapshots)
	return ok && ss.s == j.s
}

// ReadRecovery implements recovery.Reader, in one round trip as a rule:
// one statement (recoverySQL, or recoveryOpenSQL without ToSequenceNr in
// Annals' layout) reads the highest number, the snapshot and the events
// after it from one snapshot of the database, so the three agree. A read
// of recoveryOpenSQL that cannot tell everything takes a second round
// trip (see recoveryGap): the highest number read after the events (then
// possibly later than them, as recovery.Result allows), or the read again
// with recoverySQL.
func (j *Journal) ReadRecovery(ctx context.Context, req recovery.Request) (recovery.Result, error) {
	req, err := recovery.Check(req)
	if err != nil {
		return recovery.Result{}, err
	}
	if j.s.isClosed() {
		return recovery.Result{}, journal.ErrClosed
	}
	res, err := j.readRecovery(ctx, req)
	if err != nil {
		return recovery.Result{}, j.s.errs.Map(ctx, "read recovery", err, journal.ErrClosed)
	}
	return res, nil
}

// ReadRecoveries implements recovery.BatchReader, in one round trip as a
// rule: the statement of ReadRecovery once per request, sent together as
// one pgx batch (a pipeline on one connection). Each statement reads its
// own request's three parts from one snapshot of the database; what the
// reads of recoveryOpenSQL left unknown is read in one more batch, a
// second round trip (see fillGaps).
func (j *Journal) ReadRecoveries(ctx context.Context, reqs []recovery.Request) ([]recovery.Result, error) {
	if len(reqs) == 0 {
		return nil, fmt.Errorf("read recoveries: no request: %w", journal.ErrInvalidArgument)
	}
	checked := make([]recovery.Request, len(reqs))
	open := make([]bool, len(reqs)) // read by recoveryOpenSQL
	b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(reqs))}
	for i, req := range reqs {
		req, err := recovery.Check(req)
		if err != nil {
			return nil, err
		}
		checked[i] = req
		var sql string
		var args []any
		sql, args, open[i] = j.recoveryStatement(req)
		b.Queue(sql, args...)
	}
	if j.s.isClosed() {
		return nil, journal.ErrClosed
	}
	res, err := j.readRecoveries(ctx, checked, open, b)
	if err != nil {
		return nil, j.s.errs.Map(ctx, "read recoveries", err, journal.ErrClosed)
	}
	return res, nil
}

func (j *Journal) readRecoveries(ctx context.Context, reqs []recovery.Request, open []bool, b *pgx.Batch) ([]recovery.Result, error) {
	res := make([]recovery.Result, len(reqs))
	gaps := make([]recoveryGap, len(reqs))
	err := func() (err error) {
		br := j.s.pool.SendBatch(ctx, b)
		defer func() {
			if cerr := br.Close(); err == nil {
				err = cerr
			}
		}()
		for i, req := range reqs {
			rows, err := br.Query()
			if err != nil {
				return err
			}
			res[i], gaps[i], err = scanRecovery(rows, req, open[i])
			rows.Close()
			if err != nil {
				return fmt.Errorf("recovery of %s: %w", req.PersistenceID, err)
			}
		}
		return nil
	}()
	if err != nil {
		return nil, err
	}
	if err := j.fillGaps(ctx, reqs, res, gaps); err != nil {
		return nil, err
	}
	return res, nil
}

// recoveryStatement returns the statement that reads the checked req and
// its arguments, and whether it is recoveryOpenSQL (in Annals' layout,
// without ToSequenceNr) rather than recoverySQL.
func (j *Journal) recoveryStatement(req recovery.Request) (sql string, args []any, open bool) {
	if j.s.sql.recoveryOpen == "" || req.ToSequenceNr != math.MaxInt64 {
		return j.s.sql.recovery, recoveryArgs(req), false
	}
	limit := int64(req.MaxEvents)
	if limit < math.MaxInt64 {
		limit++ // room for the marker
	}
	return j.s.sql.recoveryOpen, recoveryCriteria(req, limit), true
}

// recoveryArgs returns recoverySQL's arguments for the checked req.
func recoveryArgs(req recovery.Request) []any {
	return recoveryCriteria(req, req.ToSequenceNr, req.MaxEvents)
}

// recoveryCriteria returns the snapshot criteria arguments of req's
// statement (without criteria, snapshot.None, which selects no snapshot
// at all), then more.
func recoveryCriteria(req recovery.Request, more ...any) []any {
	crit := snapshot.None()
	if req.Snapshot != nil {
		crit = *req.Snapshot
	}
	return criteriaArgs(req.PersistenceID, crit, more...)
}

// recoveryGap is what a read of recoveryOpenSQL left unknown.
type recoveryGap int

const (
	gapNone recoveryGap = iota
	// gapHighest: the highest number, when the events read stop at the
	// read's limit (MaxEvents of them) before the id's end may be
	// reached. Read afterwards, it is the read's or later: More then
	// says that events follow, which the caller replays.
	gapHighest
	// gapReread: the read cannot stand; recoverySQL reads it again. No
	// row carried the snapshot's payload (events follow a snapshot whose
	// own event is gone, and the deleted number does not reach the
	// snapshot's, or the event right after the deleted number is missing
	// while later ones exist), or no event follows a snapshot whose own
	// event is gone and that is above the deleted number, so the highest
	// event below it is unknown.
	gapReread
)

// fillGaps completes the results res of the checked reqs, read by
// recoveryOpenSQL, with what gaps says they left unknown: the highest
// number read now (see gapHighest), or the whole recovery read again
// with recoverySQL; all of them in one more round trip (a pgx batch), none
// when nothing is unknown.
func (j *Journal) fillGaps(ctx context.Context, reqs []recovery.Request, res []recovery.Result, gaps []recoveryGap) (err error) {
	var fill []int // the indexes of the results to complete
	for i, gap := range gaps {
		if gap != gapNone {
			fill = append(fill, i)
		}
	}
	if len(fill) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for _, i := range fill {
		if gaps[i] == gapHighest {
			b.Queue(j.s.sql.highest, reqs[i].PersistenceID)
		} else {
			b.Queue(j.s.sql.recovery, recoveryArgs(reqs[i])...)
		}
	}
	br := j.s.pool.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}()
	for _, i := range fill {
		req := reqs[i]
		if gaps[i] == gapHighest {
			if err := br.QueryRow().Scan(&res[i].Highest); err != nil {
				return fmt.Errorf("recovery of %s: highest number: %w", req.PersistenceID, err)
			}
			res[i].More = moreEvents(res[i].Events, req, res[i].Highest)
			continue
		}
		rows, err := br.Query()
		if err != nil {
			return fmt.Errorf("recovery of %s: %w", req.PersistenceID, err)
		}
		res[i], _, err = scanRecovery(rows, req, false)
		rows.Close()
		if err != nil {
			return fmt.Errorf("recovery of %s: %w", req.PersistenceID, err)
		}
	}
	return nil
}

// moreEvents is Result.More of events read for req, below highest.
func moreEvents(events []journal.Repr, req recovery.Request, highest int64) bool {
	n := len(events)
	if n == 0 {
		return false
	}
	last := events[n-1].SequenceNr
	return n == req.MaxEvents && last < req.ToSequenceNr && last < highest
}

// The columns of recoverySQL's rows.
const (
	colSeqNr = iota // the event's columns (recoveryColumns)
	colTimestamp
	colSerializerID
	colManifest
	colPayload
	colWriter
	colTags
	colMetadata
	colEntityType
	colHighest
	colSnapSeqNr
	colSnapNanos
	colSnapSerializerID
	colSnapManifest
	colSnapPayload // on one row only
	recoveryCols
)

func (j *Journal) readRecovery(ctx context.Context, req recovery.Request) (recovery.Result, error) {
	sql, args, open := j.recoveryStatement(req)
	rows, err := j.s.pool.Query(ctx, sql, args...)
	if err != nil {
		return recovery.Result{}, err
	}
	res, gap, err := scanRecovery(rows, req, open)
	rows.Close()
	if err != nil || gap == gapNone {
		return res, err
	}
	results := []recovery.Result{res}
	if err := j.fillGaps(ctx, []recovery.Request{req}, results, []recoveryGap{gap}); err != nil {
		return recovery.Result{}, err
	}
	return results[0], nil
}

// scanRecovery reads the rows of recoverySQL for req, or of
// recoveryOpenSQL when open, and what the latter left unknown. An event's
// persistence id is req's, its slice annals.Slice of it (every writer,
// Annals or Pekko, derives it so), and its entity type the row's when the
// layout reads it (the r2dbc layout: a JVM service's rows carry Pekko's),
// else annals.EntityType of the id (Annals' layout, whose every row has
// it): one string for every event instead of columns read per row.
func scanRecovery(rows pgx.Rows, req recovery.Request, open bool) (res recovery.Result, gap recoveryGap, err error) {
	pid := req.PersistenceID
	entityType, slice := annals.EntityType(pid), annals.Slice(pid)
	v := newRowValues(rows)
	read, snapSeq := false, int64(0)
	var deleted int64   // open: the deleted number
	marker := false     // open: the snapshot's own event was read
	gotPayload := false // the snapshot's payload was read
	for rows.Next() {
		if err := v.next(rows, recoveryCols); err != nil {
			return res, gap, err
		}
		if !read {
			read = true
			n, err := v.int64(colHighest)
			if err != nil {
				return res, gap, err
			}
			if open {
				deleted = n
			} else {
				res.Highest = n
			}
			if !v.null(colSnapSeqNr) {
				if snapSeq, err = v.int64(colSnapSeqNr); err != nil {
					return res, gap, err
				}
				res.HasSnapshot = true
				meta := snapshot.Metadata{PersistenceID: pid, SequenceNr: snapSeq}
				nanos, err := v.int64(colSnapNanos)
				if err != nil {
					return res, gap, err
				}
				meta.Timestamp = time.Unix(0, nanos).UTC()
				res.Snapshot.Metadata = meta
				if res.Snapshot.SerializerID, err = v.int32(colSnapSerializerID); err != nil {
					return res, gap, err
				}
				if res.Snapshot.Manifest, err = v.text(colSnapManifest); err != nil {
					return res, gap, err
				}
			}
		}
		if res.HasSnapshot && !v.null(colSnapPayload) {
			if res.Snapshot.Payload, err = v.bytes(colSnapPayload); err != nil {
				return res, gap, err
			}
			gotPayload = true
		}
		if v.null(colSeqNr) {
			continue // the row of a recovery without events
		}
		seq, err := v.int64(colSeqNr)
		if err != nil {
			return res, gap, err
		}
		if open && res.HasSnapshot && seq <= snapSeq {
			marker = true
			continue
		}
		if res.Events == nil {
			// Room for the events the snapshot leaves to read, so that an
			// entity's are stored without growing the slice. A larger
			// capacity than needed is memory each recovery clears and the
			// collector sweeps (64 events' worth cost a tenth of a
			// recovery's CPU). Without the highest number (open), room
			// for openEventsCap; a longer recovery grows the slice.
			to := min(req.ToSequenceNr, res.Highest)
			if open {
				to = snapSeq + openEventsCap
			}
			res.Events = make([]journal.Repr, 0, recovery.EventsCap(snapSeq+1, to, req.MaxEvents))
		}
		e, err := scanRecoveryEvent(&v, pid, entityType, slice, seq)
		if err != nil {
			return res, gap, err
		}
		res.Events = append(res.Events, e)
	}
	if err := rows.Err(); err != nil {
		return res, gap, err
	}
	if !read {
		return res, gap, errors.New("no recovery row read")
	}
	// The rows come in order from every plan PostgreSQL makes of the
	// statement; should a plan return them otherwise, the events are put
	// in order.
	if !slices.IsSortedFunc(res.Events, bySequenceNr) {
		slices.SortFunc(res.Events, bySequenceNr)
	}
	if open {
		gap = settleOpen(&res, req, deleted, marker, gotPayload)
		return res, gap, nil
	}
	if res.HasSnapshot && !gotPayload {
		return res, gap, fmt.Errorf("the snapshot at %d read without its payload", snapSeq)
	}
	res.More = moreEvents(res.Events, req, res.Highest)
	return res, gap, nil
}

// openEventsCap is the events a recoveryOpenSQL read makes room for
// before it knows how many there are (see recovery.EventsCap).
const openEventsCap = 16

// settleOpen completes res, read by recoveryOpenSQL for req (no
// ToSequenceNr; at most MaxEvents + 1 rows, the marker's included): its
// highest number is the greater of the deleted number and the id's
// highest event, which is the last event read unless the read stopped at
// its limit, or the marker when no event follows it. It returns what the
// read could not tell.
func settleOpen(res *recovery.Result, req recovery.Request, deleted int64, marker, gotPayload bool) recoveryGap {
	if res.HasSnapshot && !gotPayload {
		return gapReread
	}
	n := len(res.Events)
	if n > req.MaxEvents { // the limit's row beyond MaxEvents: more follow
		res.Events = res.Events[:req.MaxEvents]
		return gapHighest
	}
	if n == req.MaxEvents && marker { // at the limit: more may follow
		return gapHighest
	}
	var top int64 // the highest event's number
	switch snap := res.Snapshot.Metadata.SequenceNr; {
	case n > 0:
		top = res.Events[n-1].SequenceNr
	case marker:
		top = snap
	case res.HasSnapshot && snap > deleted:
		return gapReread // no event from the snapshot's on: one below it may be the highest
	}
	res.Highest = max(top, deleted)
	res.More = moreEvents(res.Events, req, res.Highest)
	return gapNone
}

// scanRecoveryEvent reads the event of v's row, of id pid, numbered seq.
func scanRecoveryEvent(v *rowValues, pid, entityType string, slice int, seq int64) (e journal.Repr, err error) {
	e.PersistenceID, e.EntityType, e.Slice, e.SequenceNr = pid, entityType, slice, seq
	if e.Timestamp, err = v.time(colTimestamp); err != nil {
		return e, err
	}
	if e.SerializerID, err = v.int32(colSerializerID); err != nil {
		return e, err
	}
	if e.Manifest, err = v.text(colManifest); err != nil {
		return e, err
	}
	if e.Payload, err = v.bytes(colPayload); err != nil {
		return e, err
	}
	if e.WriterID, err = v.text(colWriter); err != nil {
		return e, err
	}
	if tags, err := v.strings(colTags); err != nil {
		return e, err
	} else if len(tags) > 0 {
		e.Tags = tags
	}
	if e.Metadata, err = v.bytes(colMetadata); err != nil {
		return e, err
	}
	if !v.null(colEntityType) {
		if e.EntityType, err = v.text(colEntityType); err != nil {
			return e, err
		}
	}
	return e, nil
}

func bySequenceNr(a, b journal.Repr) int { return cmp.Compare(a.SequenceNr, b.SequenceNr) }
