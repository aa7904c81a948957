package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/snapshot"
)

// Snapshots is the store's snapshot store: table snapshot, one row per
// (persistence id, sequence number), timestamps as Unix nanoseconds. On the
// r2dbc layout: one row per persistence id, replaced by every save,
// timestamps as epoch milliseconds (see LayoutR2DBC).
type Snapshots struct{ s *Store }

var _ snapshot.Store = (*Snapshots)(nil)

// Snapshots returns the store's snapshot store.
func (s *Store) Snapshots() *Snapshots { return &Snapshots{s: s} }

// Close closes the store.
func (ss *Snapshots) Close() error { return ss.s.Close() }

// criteriaArgs returns the arguments of criteria c for id pid ($1–$5 of
// the snapshot statements), then more, in one slice.
func criteriaArgs(pid string, c snapshot.Criteria, more ...any) []any {
	minTS, maxTS := c.UnixNanoBounds()
	return append(append(make([]any, 0, 5+len(more)), pid, c.MinSequenceNr, c.MaxSequenceNr, minTS, maxTS), more...)
}

// Load implements snapshot.Store.
func (ss *Snapshots) Load(ctx context.Context, persistenceID string, c snapshot.Criteria) (snapshot.Snapshot, bool, error) {
	if err := snapshot.CheckID("load", persistenceID, 0); err != nil {
		return snapshot.Snapshot{}, false, err
	}
	if ss.s.isClosed() {
		return snapshot.Snapshot{}, false, snapshot.ErrClosed
	}
	snap := snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: persistenceID}}
	var created int64
	err := ss.s.pool.QueryRow(ctx, ss.s.sql.loadSnap, criteriaArgs(persistenceID, c)...).Scan(&snap.Metadata.SequenceNr, &created, &snap.SerializerID, &snap.Manifest, &snap.Payload)
	if errors.Is(err, pgx.ErrNoRows) {
		return snapshot.Snapshot{}, false, nil
	}
	if err != nil {
		return snapshot.Snapshot{}, false, ss.s.errs.Map(ctx, "load snapshot", err, snapshot.ErrClosed)
	}
	snap.Metadata.Timestamp = time.Unix(0, created).UTC()
	return snap, true, nil
}

// Save implements snapshot.Store.
func (ss *Snapshots) Save(ctx context.Context, snap snapshot.Snapshot) error {
	m := snap.Metadata
	if err := snapshot.CheckSave(snap, ss.s.cfg.maxPayload); err != nil {
		return err
	}
	if ss.s.isClosed() {
		return snapshot.ErrClosed
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
	if _, err := ss.s.pool.Exec(ctx, ss.s.sql.saveSnap, annals.Slice(m.PersistenceID), annals.EntityType(m.PersistenceID), m.PersistenceID, m.SequenceNr, nanos, snap.SerializerID, snap.Manifest, payload); err != nil {
		return ss.s.errs.Map(ctx, "save snapshot", err, snapshot.ErrClosed)
	}
	return nil
}

// Delete implements snapshot.Store.
func (ss *Snapshots) Delete(ctx context.Context, m snapshot.Metadata) error {
	if err := snapshot.CheckID("delete", m.PersistenceID, m.SequenceNr); err != nil {
		return err
	}
	if ss.s.isClosed() {
		return snapshot.ErrClosed
	}
	var ts int64
	if !m.Timestamp.IsZero() {
		var ok bool
		if ts, ok = snapshot.UnixNanos(m.Timestamp); !ok {
			return nil // no stored snapshot has such a timestamp
		}
	}
	if _, err := ss.s.pool.Exec(ctx, ss.s.sql.deleteSnap, m.PersistenceID, m.SequenceNr, ts); err != nil {
		return ss.s.errs.Map(ctx, "delete snapshot", err, snapshot.ErrClosed)
	}
	return nil
}

// DeleteMatching implements snapshot.Store.
func (ss *Snapshots) DeleteMatching(ctx context.Context, persistenceID string, c snapshot.Criteria) error {
	if err := snapshot.CheckID("delete", persistenceID, 0); err != nil {
		return err
	}
	if ss.s.isClosed() {
		return snapshot.ErrClosed
	}
	if _, err := ss.s.pool.Exec(ctx, ss.s.sql.deleteSnaps, criteriaArgs(persistenceID, c)...); err != nil {
		return ss.s.errs.Map(ctx, "delete snapshots", err, snapshot.ErrClosed)
	}
	return nil
}
