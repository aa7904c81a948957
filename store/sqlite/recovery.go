package sqlite

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

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

// ReadRecovery implements recovery.Reader: the highest number and the
// snapshot (one statement), then the events after it, in one read
// transaction on one reader connection, through the driver (see
// readDriver), so the three agree.
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

// recoveryHeadSQL reads the head of a recovery of id ?1 in rows of six
// columns, the first of which tells the row's kind: 0, one row, the
// highest number (the greater of the highest stored event and the highest
// deleted one); 1, at most one row, the youngest snapshot the criteria
// (?3–?6) select, when ?2 is true.
const recoveryHeadSQL = `
	SELECT 0, max(
			coalesce((SELECT MAX(sequence_nr) FROM event_journal WHERE persistence_id = ?1), 0),
			coalesce((SELECT sequence_nr FROM journal_metadata WHERE persistence_id = ?1), 0)),
		NULL, NULL, NULL, NULL
	UNION ALL
	SELECT * FROM (SELECT 1, sequence_nr, created, serializer_id, manifest, payload FROM snapshot
		WHERE ?2 AND persistence_id = ?1 AND sequence_nr BETWEEN ?3 AND ?4 AND created BETWEEN ?5 AND ?6
		ORDER BY sequence_nr DESC, created DESC LIMIT 1)`

// replaySQL reads the events of id ?1 from ?2 to ?3, at most ?4,
// ascending. It leaves out the slice and entity type: every row of an id
// has the ones its id gives (the journal's writes store annals.Slice and
// annals.EntityType of it), which replayID holds.
const replaySQL = `SELECT ordering, sequence_nr, timestamp, payload, serializer_id, manifest, writer, tags, metadata
	FROM event_journal WHERE persistence_id = ? AND sequence_nr BETWEEN ? AND ? ORDER BY sequence_nr LIMIT +?`

// replayColumns is the number of replaySQL's columns.
const replayColumns = 9

// replayID is what a replay's events share: their persistence id, and the
// slice and entity type derived from it once per replay rather than read
// from every row.
type replayID struct {
	pid, entityType string
	slice           int
}

func newReplayID(pid string) replayID {
	return replayID{pid: pid, entityType: annals.EntityType(pid), slice: annals.Slice(pid)}
}

// replayRow reads one row of replaySQL, an event of id.
func replayRow(id replayID, v []driver.Value) (journal.Repr, error) {
	pid := id.pid
	r := rowValues{v: v}
	e := journal.Repr{PersistenceID: pid, Ordering: r.int(0), SequenceNr: r.int(1), Timestamp: time.Unix(0, r.int(2)).UTC(),
		Payload: r.blob(3), SerializerID: r.int32(4), Manifest: r.text(5), WriterID: r.text(6), Metadata: r.blob(8),
		Slice: id.slice, EntityType: id.entityType}
	if r.err != nil {
		return e, fmt.Errorf("sqlite: replay %q: read row: %w", pid, r.err)
	}
	if tags, ok := r.nullText(7); ok {
		var err error
		if e.Tags, err = decodeTags(tags); err != nil {
			return e, fmt.Errorf("sqlite: replay %q: corrupt tags of event %d: %w", pid, e.SequenceNr, err)
		}
	}
	return e, nil
}

func (j *Journal) readRecovery(ctx context.Context, req recovery.Request) (res recovery.Result, err error) {
	err = j.s.withReader(ctx, func(c readConn) error {
		if err := c.exec("BEGIN"); err != nil {
			return err
		}
		defer func() { _ = c.exec("ROLLBACK") }()
		res, err = readRecoveryOn(ctx, c, req)
		return err
	})
	if err != nil {
		return recovery.Result{}, err
	}
	return res, nil
}

// ReadRecoveries implements recovery.BatchReader: the reads of
// ReadRecovery, one after another in one read transaction on one reader
// connection.
func (j *Journal) ReadRecoveries(ctx context.Context, reqs []recovery.Request) ([]recovery.Result, error) {
	if len(reqs) == 0 {
		return nil, fmt.Errorf("sqlite: read recoveries: no request: %w", journal.ErrInvalidArgument)
	}
	checked := make([]recovery.Request, len(reqs))
	for i, req := range reqs {
		var err error
		if checked[i], err = recovery.Check(req); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res := make([]recovery.Result, len(checked))
	err := j.s.withReader(ctx, func(c readConn) error {
		if err := c.exec("BEGIN"); err != nil {
			return err
		}
		defer func() { _ = c.exec("ROLLBACK") }()
		for i, req := range checked {
			var err error
			if res[i], err = readRecoveryOn(ctx, c, req); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, j.s.errs.Map(ctx, "read recoveries", err, journal.ErrClosed)
	}
	return res, nil
}

// readRecoveryOn reads req's recovery in c's open read transaction.
func readRecoveryOn(ctx context.Context, c readConn, req recovery.Request) (res recovery.Result, err error) {
	pid := req.PersistenceID
	crit := snapshot.Criteria{}
	if req.Snapshot != nil {
		crit = *req.Snapshot
	}
	minTS, maxTS := crit.UnixNanoBounds()
	args, err := namedArgs(pid, req.Snapshot != nil, crit.MinSequenceNr, crit.MaxSequenceNr, minTS, maxTS)
	if err != nil {
		return res, err
	}
	highest := false
	err = c.query(ctx, recoveryHeadSQL, args, make([]driver.Value, 6), func(v []driver.Value) error {
		r := rowValues{v: v}
		switch kind := r.int(0); {
		case r.err != nil:
		case kind == 0:
			res.Highest, highest = r.int(1), true
		case kind == 1:
			res.Snapshot = snapshot.Snapshot{
				Metadata:     snapshot.Metadata{PersistenceID: pid, SequenceNr: r.int(1), Timestamp: time.Unix(0, r.int(2)).UTC()},
				SerializerID: r.int32(3), Manifest: r.text(4), Payload: r.blob(5),
			}
			res.HasSnapshot = true
		default:
			return fmt.Errorf("a row of kind %d", kind)
		}
		if r.err != nil {
			return fmt.Errorf("read row: %w", r.err)
		}
		return nil
	})
	if err == nil && !highest {
		err = errors.New("no highest sequence number read")
	}
	if err != nil {
		return recovery.Result{}, fmt.Errorf("sqlite: read recovery of %q: %w", pid, err)
	}
	from, to := res.Snapshot.Metadata.SequenceNr+1, min(req.ToSequenceNr, res.Highest)
	if from > to {
		return res, nil
	}
	if args, err = namedArgs(pid, from, to, req.MaxEvents); err != nil {
		return recovery.Result{}, err
	}
	res.Events = make([]journal.Repr, 0, recovery.EventsCap(from, to, req.MaxEvents))
	id := newReplayID(pid)
	err = c.query(ctx, replaySQL, args, make([]driver.Value, replayColumns), func(v []driver.Value) error {
		e, err := replayRow(id, v)
		res.Events = append(res.Events, e)
		return err
	})
	if err != nil {
		return recovery.Result{}, err
	}
	if n := len(res.Events); n == req.MaxEvents {
		res.More = res.Events[n-1].SequenceNr < min(req.ToSequenceNr, res.Highest)
	}
	return res, nil
}
