package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/annals-go/annals/snapshot"
)

// Snapshots is the snapshot.Store of a Store.
type Snapshots struct{ s *Store }

var _ snapshot.Store = (*Snapshots)(nil)

// criteriaArgs turns c into the arguments of snapshotWhere.
func criteriaArgs(pid string, c snapshot.Criteria) []any {
	minTS, maxTS := c.UnixNanoBounds()
	return []any{pid, c.MinSequenceNr, c.MaxSequenceNr, minTS, maxTS}
}

// Load implements snapshot.Store.Load.
func (ss *Snapshots) Load(ctx context.Context, persistenceID string, c snapshot.Criteria) (snapshot.Snapshot, bool, error) {
	if err := snapshot.CheckID("load", persistenceID, 0); err != nil {
		return snapshot.Snapshot{}, false, err
	}
	snap := snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: persistenceID}}
	var created int64
	err := ss.s.stmts.loadSnap.QueryRowContext(ctx, criteriaArgs(persistenceID, c)...).Scan(&snap.Metadata.SequenceNr, &created, &snap.SerializerID, &snap.Manifest, &snap.Payload)
	if errors.Is(err, sql.ErrNoRows) {
		return snapshot.Snapshot{}, false, nil
	}
	if err != nil {
		return snapshot.Snapshot{}, false, ss.s.errs.Map(ctx, "load snapshot", err, snapshot.ErrClosed)
	}
	snap.Metadata.Timestamp = time.Unix(0, created).UTC()
	return snap, true, nil
}

// Save implements snapshot.Store.Save.
func (ss *Snapshots) Save(ctx context.Context, snap snapshot.Snapshot) error {
	m := snap.Metadata
	if err := snapshot.CheckSave(snap, ss.s.cfg.maxPayload); err != nil {
		return err
	}
	ts := m.Timestamp
	if ts.IsZero() {
		ts = time.Now()
	}
	nanos, ok := snapshot.UnixNanos(ts)
	if !ok {
		return fmt.Errorf("%w: snapshot of %q at %d has timestamp %v, outside the years 1678–2262 this store can hold", snapshot.ErrInvalidArgument, m.PersistenceID, m.SequenceNr, ts)
	}
	payload := snap.Payload
	if payload == nil {
		payload = []byte{}
	}
	if _, err := ss.s.stmts.saveSnap.ExecContext(ctx, m.PersistenceID, m.SequenceNr, nanos, snap.SerializerID, snap.Manifest, payload); err != nil {
		return ss.s.errs.Map(ctx, "save snapshot", err, snapshot.ErrClosed)
	}
	return nil
}

// Delete implements snapshot.Store.Delete.
func (ss *Snapshots) Delete(ctx context.Context, m snapshot.Metadata) error {
	if err := snapshot.CheckID("delete", m.PersistenceID, m.SequenceNr); err != nil {
		return err
	}
	var ts int64
	if !m.Timestamp.IsZero() {
		var ok bool
		if ts, ok = snapshot.UnixNanos(m.Timestamp); !ok {
			return nil // no stored snapshot has such a timestamp
		}
	}
	if _, err := ss.s.stmts.deleteSnap.ExecContext(ctx, m.PersistenceID, m.SequenceNr, ts); err != nil {
		return ss.s.errs.Map(ctx, "delete snapshot", err, snapshot.ErrClosed)
	}
	return nil
}

// DeleteMatching implements snapshot.Store.DeleteMatching.
func (ss *Snapshots) DeleteMatching(ctx context.Context, persistenceID string, c snapshot.Criteria) error {
	if err := snapshot.CheckID("delete", persistenceID, 0); err != nil {
		return err
	}
	if _, err := ss.s.stmts.deleteSnaps.ExecContext(ctx, criteriaArgs(persistenceID, c)...); err != nil {
		return ss.s.errs.Map(ctx, "delete snapshots", err, snapshot.ErrClosed)
	}
	return nil
}

// Close closes the whole Store.
func (ss *Snapshots) Close() error { return ss.s.Close() }
