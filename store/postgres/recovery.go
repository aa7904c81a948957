package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
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

// ReadRecovery implements recovery.Reader in one round trip: one
// statement (recoverySQL) reads the highest number, the snapshot and the
// events after it from one snapshot of the database, so the three agree.
func (j *Journal) ReadRecovery(ctx context.Context, req recovery.Request) (recovery.Result, error) {
	req, err := recovery.Check(req)
	if err != nil {
		return recovery.Result{}, err
	}
	if j.s.isClosed() {
		return recovery.Result{}, journal.ErrClosed
	}
	res, err := j.readRecovery(ctx, req, recoveryArgs(req))
	if err != nil {
		return recovery.Result{}, j.s.errs.Map(ctx, "read recovery", err, journal.ErrClosed)
	}
	return res, nil
}

// ReadRecoveries implements recovery.BatchReader in one round trip: the
// statement of ReadRecovery once per request, sent together as one pgx
// batch (a pipeline on one connection). Each statement reads its own
// request's three parts from one snapshot of the database.
func (j *Journal) ReadRecoveries(ctx context.Context, reqs []recovery.Request) ([]recovery.Result, error) {
	if len(reqs) == 0 {
		return nil, fmt.Errorf("read recoveries: no request: %w", journal.ErrInvalidArgument)
	}
	checked := make([]recovery.Request, len(reqs))
	b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(reqs))}
	for i, req := range reqs {
		req, err := recovery.Check(req)
		if err != nil {
			return nil, err
		}
		checked[i] = req
		b.Queue(j.s.sql.recovery, recoveryArgs(req)...)
	}
	if j.s.isClosed() {
		return nil, journal.ErrClosed
	}
	res, err := j.readRecoveries(ctx, checked, b)
	if err != nil {
		return nil, j.s.errs.Map(ctx, "read recoveries", err, journal.ErrClosed)
	}
	return res, nil
}

func (j *Journal) readRecoveries(ctx context.Context, reqs []recovery.Request, b *pgx.Batch) (_ []recovery.Result, err error) {
	br := j.s.pool.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}()
	res := make([]recovery.Result, len(reqs))
	for i, req := range reqs {
		rows, err := br.Query()
		if err != nil {
			return nil, err
		}
		res[i], err = scanRecovery(rows, req)
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("recovery of %s: %w", req.PersistenceID, err)
		}
	}
	return res, nil
}

// recoveryArgs returns recoverySQL's arguments for the checked req: without
// snapshot criteria, snapshot.None (which selects no snapshot at all).
func recoveryArgs(req recovery.Request) []any {
	crit := snapshot.None()
	if req.Snapshot != nil {
		crit = *req.Snapshot
	}
	return append(criteriaArgs(req.PersistenceID, crit), req.ToSequenceNr, req.MaxEvents)
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

func (j *Journal) readRecovery(ctx context.Context, req recovery.Request, args []any) (recovery.Result, error) {
	rows, err := j.s.pool.Query(ctx, j.s.sql.recovery, args...)
	if err != nil {
		return recovery.Result{}, err
	}
	defer rows.Close()
	return scanRecovery(rows, req)
}

// scanRecovery reads the rows of recoverySQL for req. An event's
// persistence id is req's, its slice annals.Slice of it (every writer,
// Annals or Pekko, derives it so), and its entity type the row's when the
// layout reads it (the r2dbc layout: a JVM service's rows carry Pekko's),
// else annals.EntityType of the id (Annals' layout, whose every row has
// it): one string for every event instead of columns read per row.
func scanRecovery(rows pgx.Rows, req recovery.Request) (res recovery.Result, err error) {
	pid := req.PersistenceID
	entityType, slice := annals.EntityType(pid), annals.Slice(pid)
	v := newRowValues(rows)
	read, snapSeq := false, int64(0)
	for rows.Next() {
		if err := v.next(rows, recoveryCols); err != nil {
			return res, err
		}
		if !read {
			read = true
			if res.Highest, err = v.int64(colHighest); err != nil {
				return res, err
			}
			if !v.null(colSnapSeqNr) {
				if snapSeq, err = v.int64(colSnapSeqNr); err != nil {
					return res, err
				}
				res.HasSnapshot = true
				meta := snapshot.Metadata{PersistenceID: pid, SequenceNr: snapSeq}
				nanos, err := v.int64(colSnapNanos)
				if err != nil {
					return res, err
				}
				meta.Timestamp = time.Unix(0, nanos).UTC()
				res.Snapshot.Metadata = meta
				if res.Snapshot.SerializerID, err = v.int32(colSnapSerializerID); err != nil {
					return res, err
				}
				if res.Snapshot.Manifest, err = v.text(colSnapManifest); err != nil {
					return res, err
				}
			}
		}
		if res.HasSnapshot && !v.null(colSnapPayload) {
			if res.Snapshot.Payload, err = v.bytes(colSnapPayload); err != nil {
				return res, err
			}
		}
		if v.null(colSeqNr) {
			continue // the row of a recovery without events
		}
		if res.Events == nil {
			// Room for the events the snapshot leaves to read, so that an
			// entity's are stored without growing the slice. A larger
			// capacity than needed is memory each recovery clears and the
			// collector sweeps (64 events' worth cost a tenth of a
			// recovery's CPU).
			res.Events = make([]journal.Repr, 0, recovery.EventsCap(snapSeq+1, min(req.ToSequenceNr, res.Highest), req.MaxEvents))
		}
		e, err := scanRecoveryEvent(&v, pid, entityType, slice)
		if err != nil {
			return res, err
		}
		res.Events = append(res.Events, e)
	}
	if err := rows.Err(); err != nil {
		return res, err
	}
	if !read {
		return res, errors.New("no recovery row read")
	}
	if res.HasSnapshot && res.Snapshot.Payload == nil {
		return res, fmt.Errorf("the snapshot at %d read without its payload", snapSeq)
	}
	// The rows come in order from every plan PostgreSQL makes of the
	// statement; should a plan return them otherwise, the events are put
	// in order.
	if !slices.IsSortedFunc(res.Events, bySequenceNr) {
		slices.SortFunc(res.Events, bySequenceNr)
	}
	if n := len(res.Events); n > 0 {
		last := res.Events[n-1].SequenceNr
		res.More = n == req.MaxEvents && last < req.ToSequenceNr && last < res.Highest
	}
	return res, nil
}

// scanRecoveryEvent reads the event of v's row, of id pid.
func scanRecoveryEvent(v *rowValues, pid, entityType string, slice int) (e journal.Repr, err error) {
	e.PersistenceID, e.EntityType, e.Slice = pid, entityType, slice
	if e.SequenceNr, err = v.int64(colSeqNr); err != nil {
		return e, err
	}
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
