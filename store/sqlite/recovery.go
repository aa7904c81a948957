package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/recovery"
	"github.com/annals-go/annals/snapshot"
)

var _ recovery.Reader = (*Journal)(nil)

// ReadsSnapshotsOf implements recovery.Reader: true for this store's own
// snapshots (or none).
func (j *Journal) ReadsSnapshotsOf(snaps snapshot.Store) bool {
	if snaps == nil {
		return true
	}
	ss, ok := snaps.(*Snapshots)
	return ok && ss.s == j.s
}

// ReadRecovery implements recovery.Reader: the highest number, the
// snapshot and the events after it in one read transaction on one reader
// connection (one connection taken and one transaction begun, where three
// calls take three of each), so the three agree.
func (j *Journal) ReadRecovery(ctx context.Context, req recovery.Request) (recovery.Result, error) {
	req, err := recovery.Check(req)
	if err != nil {
		return recovery.Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return recovery.Result{}, err
	}
	res, err := j.readRecovery(ctx, req)
	if err != nil {
		return recovery.Result{}, j.s.errs.Map(ctx, "read recovery", err, journal.ErrClosed)
	}
	return res, nil
}

func (j *Journal) readRecovery(ctx context.Context, req recovery.Request) (res recovery.Result, err error) {
	conn, err := j.s.reader.Conn(ctx)
	if err != nil {
		return res, err
	}
	defer conn.Close()
	dctx := context.WithoutCancel(ctx) // as readRows: ctx is checked per row
	tx, err := conn.BeginTx(dctx, nil)
	if err != nil {
		return res, err
	}
	defer func() { _ = tx.Rollback() }()
	pid := req.PersistenceID
	if err := tx.StmtContext(dctx, j.s.stmts.highest).QueryRowContext(dctx, pid).Scan(&res.Highest); err != nil {
		return res, err
	}
	if req.Snapshot != nil {
		snap := snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: pid}}
		var created int64
		err := tx.StmtContext(dctx, j.s.stmts.loadSnap).QueryRowContext(dctx, criteriaArgs(pid, *req.Snapshot)...).
			Scan(&snap.Metadata.SequenceNr, &created, &snap.SerializerID, &snap.Manifest, &snap.Payload)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return res, err
		default:
			snap.Metadata.Timestamp = time.Unix(0, created).UTC()
			res.Snapshot, res.HasSnapshot = snap, true
		}
	}
	from, to := res.Snapshot.Metadata.SequenceNr+1, min(req.ToSequenceNr, res.Highest)
	if from > to {
		return res, nil
	}
	rows, err := tx.StmtContext(dctx, j.s.stmts.replay).QueryContext(dctx, pid, from, to, req.MaxEvents)
	if err != nil {
		return res, err
	}
	defer rows.Close()
	scan := replayScanner(pid)
	for rows.Next() {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		e, err := scan(rows)
		if err != nil {
			return res, err
		}
		res.Events = append(res.Events, e)
	}
	if err := rows.Err(); err != nil {
		return res, err
	}
	if n := len(res.Events); n == req.MaxEvents {
		res.More = res.Events[n-1].SequenceNr < to
	}
	return res, nil
}
