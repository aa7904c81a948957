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

// recoveryArgs returns recoverySQL's arguments for the checked req.
func recoveryArgs(req recovery.Request) []any {
	crit := snapshot.None()
	if req.Snapshot != nil {
		crit = *req.Snapshot
	}
	return append(criteriaArgs(req.PersistenceID, crit), req.ToSequenceNr, req.MaxEvents)
}

// Kinds of the rows of recoverySQL.
const (
	recoveryHighest = iota
	recoverySnapshot
	recoveryEvent
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
	highest := false
	pid := req.PersistenceID
	entityType, slice := annals.EntityType(pid), annals.Slice(pid)
	var (
		kind   int
		e      journal.Repr
		tags   []string
		rowTyp *string
		nanos  int64
	)
	for rows.Next() {
		e, tags, rowTyp = journal.Repr{}, nil, nil // a new slice per row: events keep theirs
		if err := rows.Scan(&kind, &e.SequenceNr, &e.Timestamp, &e.SerializerID, &e.Manifest, &e.Payload, &e.WriterID, &tags, &e.Metadata, &rowTyp, &nanos); err != nil {
			return res, fmt.Errorf("read row: %w", err)
		}
		switch kind {
		case recoveryHighest:
			res.Highest, highest = e.SequenceNr, true
		case recoverySnapshot:
			res.Snapshot = snapshot.Snapshot{
				Metadata:     snapshot.Metadata{PersistenceID: pid, SequenceNr: e.SequenceNr, Timestamp: time.Unix(0, nanos).UTC()},
				SerializerID: e.SerializerID, Manifest: e.Manifest, Payload: e.Payload,
			}
			res.HasSnapshot = true
		case recoveryEvent:
			e.PersistenceID, e.EntityType, e.Slice = pid, entityType, slice
			if rowTyp != nil {
				e.EntityType = *rowTyp
			}
			e.Timestamp = e.Timestamp.UTC()
			if len(tags) > 0 {
				e.Tags = tags
			}
			if res.Events == nil {
				// Room for the events the highest number and the
				// snapshot (their rows come first) leave to read, so
				// that a small entity's are stored without growing the
				// slice; 16 when they did not come first. A larger
				// capacity than needed is memory each recovery clears
				// and the collector sweeps (64 events' worth cost a
				// tenth of a recovery's CPU).
				room := min(req.MaxEvents, 16)
				if highest {
					room = recovery.EventsCap(res.Snapshot.Metadata.SequenceNr+1, min(req.ToSequenceNr, res.Highest), req.MaxEvents)
				}
				res.Events = make([]journal.Repr, 0, room)
			}
			res.Events = append(res.Events, e)
		default:
			return res, fmt.Errorf("a row of kind %d", kind)
		}
	}
	if err := rows.Err(); err != nil {
		return res, err
	}
	if !highest {
		return res, errors.New("no highest sequence number read")
	}
	// The statement's branches come in order from every plan PostgreSQL
	// makes of it; a parallel append may interleave them, so the events
	// are put in order where they are not.
	if !slices.IsSortedFunc(res.Events, bySequenceNr) {
		slices.SortFunc(res.Events, bySequenceNr)
	}
	if n := len(res.Events); n > 0 {
		last := res.Events[n-1].SequenceNr
		res.More = n == req.MaxEvents && last < req.ToSequenceNr && last < res.Highest
	}
	return res, nil
}

func bySequenceNr(a, b journal.Repr) int { return cmp.Compare(a.SequenceNr, b.SequenceNr) }
