package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

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

// ReadRecovery implements recovery.Reader in one round trip: one pgx batch
// of a read-only repeatable-read transaction that reads the highest
// number, the snapshot and the events after it (the events statement
// selects the same snapshot's number itself), so the three agree.
func (j *Journal) ReadRecovery(ctx context.Context, req recovery.Request) (recovery.Result, error) {
	req, err := recovery.Check(req)
	if err != nil {
		return recovery.Result{}, err
	}
	if j.s.isClosed() {
		return recovery.Result{}, journal.ErrClosed
	}
	crit := snapshot.None()
	if req.Snapshot != nil {
		crit = *req.Snapshot
	}
	snapArgs := criteriaArgs(req.PersistenceID, crit)
	b := &pgx.Batch{}
	b.Queue(`BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY`)
	b.Queue(j.s.sql.highest, req.PersistenceID)
	if req.Snapshot != nil {
		b.Queue(j.s.sql.loadSnap, snapArgs...)
	}
	b.Queue(j.s.sql.recoverEvents, append(snapArgs, req.ToSequenceNr, req.MaxEvents)...)
	b.Queue(`COMMIT`)
	res, err := j.readRecovery(ctx, b, req)
	if err != nil {
		return recovery.Result{}, j.s.errs.Map(ctx, "read recovery", err, journal.ErrClosed)
	}
	return res, nil
}

func (j *Journal) readRecovery(ctx context.Context, b *pgx.Batch, req recovery.Request) (res recovery.Result, err error) {
	br := j.s.pool.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}()
	if _, err := br.Exec(); err != nil {
		return res, err
	}
	if err := br.QueryRow().Scan(&res.Highest); err != nil {
		return res, err
	}
	if req.Snapshot != nil {
		snap := snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: req.PersistenceID}}
		var created int64
		err := br.QueryRow().Scan(&snap.Metadata.SequenceNr, &created, &snap.SerializerID, &snap.Manifest, &snap.Payload)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return res, err
		default:
			snap.Metadata.Timestamp = time.Unix(0, created).UTC()
			res.Snapshot, res.HasSnapshot = snap, true
		}
	}
	rows, err := br.Query()
	if err != nil {
		return res, err
	}
	page, err := scanRows(rows, min(req.MaxEvents, 64), nil)
	if err != nil {
		return res, err
	}
	if len(page) > 0 {
		res.Events = make([]journal.Repr, len(page))
		for i := range page {
			res.Events[i] = page[i].Repr
		}
		last := page[len(page)-1].SequenceNr
		res.More = len(page) == req.MaxEvents && last < req.ToSequenceNr && last < res.Highest
	}
	if _, err := br.Exec(); err != nil {
		return res, err
	}
	return res, nil
}
