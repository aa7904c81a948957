package cassandra

import (
	"context"
	"slices"
	"time"

	"github.com/annals-go/annals/snapshot"
)

// Snapshots is the store's snapshot store: Pekko's snapshots table, with
// the time kept to the nanosecond in a column of Annals' own beside Pekko's
// milliseconds.
type Snapshots struct{ s *Store }

var _ snapshot.Store = (*Snapshots)(nil)

// Snapshots returns the store's snapshot store.
func (s *Store) Snapshots() *Snapshots { return &Snapshots{s: s} }

// Close closes the store.
func (ss *Snapshots) Close() error { return ss.s.Close() }

// Load implements snapshot.Store: the youngest snapshot matching c, read
// from the highest sequence number down (the table's clustering order).
// A row Pekko wrote has no nanosecond time: its milliseconds are used.
func (ss *Snapshots) Load(ctx context.Context, persistenceID string, c snapshot.Criteria) (snapshot.Snapshot, bool, error) {
	if err := snapshot.CheckID("load", persistenceID, 0); err != nil {
		return snapshot.Snapshot{}, false, err
	}
	if ss.s.isClosed() {
		return snapshot.Snapshot{}, false, snapshot.ErrClosed
	}
	if c.MaxSequenceNr < c.MinSequenceNr || c.MaxSequenceNr < 0 {
		return snapshot.Snapshot{}, false, nil
	}
	iter := ss.s.session.Query(ss.s.sql.loadSnaps, persistenceID, max(c.MinSequenceNr, 0), c.MaxSequenceNr).
		WithContext(ctx).Consistency(ss.s.cfg.readCL).Iter()
	var (
		snap   snapshot.Snapshot
		millis int64
		nanos  *int64
	)
	for iter.Scan(&snap.Metadata.SequenceNr, &millis, &nanos, &snap.SerializerID, &snap.Manifest, &snap.Payload) {
		snap.Metadata.PersistenceID = persistenceID
		snap.Metadata.Timestamp = snapshotTime(millis, nanos)
		if c.Matches(snap.Metadata) {
			snap.Payload = slices.Clone(snap.Payload)
			if snap.Payload == nil {
				snap.Payload = []byte{}
			}
			_ = iter.Close()
			return snap, true, nil
		}
	}
	if err := iter.Close(); err != nil {
		return snapshot.Snapshot{}, false, ss.s.errs.Map(ctx, "load snapshot", err, snapshot.ErrClosed)
	}
	return snapshot.Snapshot{}, false, nil
}

// snapshotTime is a snapshot's time: Annals' nanoseconds when they agree
// with Pekko's milliseconds (a row Pekko overwrote keeps a stale value in
// Annals' column), else the milliseconds.
func snapshotTime(millis int64, nanos *int64) time.Time {
	if nanos != nil && time.Unix(0, *nanos).UnixMilli() == millis {
		return time.Unix(0, *nanos).UTC()
	}
	return time.UnixMilli(millis).UTC()
}

// Save implements snapshot.Store.
func (ss *Snapshots) Save(ctx context.Context, snap snapshot.Snapshot) error {
	if err := snapshot.CheckSave(snap, ss.s.cfg.maxPayload); err != nil {
		return err
	}
	if ss.s.isClosed() {
		return snapshot.ErrClosed
	}
	ts := snap.Metadata.Timestamp
	if ts.IsZero() {
		ts = time.Now()
	}
	nanos, ok := snapshot.UnixNanos(ts)
	var np *int64
	if ok {
		np = &nanos
	}
	payload := snap.Payload
	if payload == nil {
		payload = []byte{}
	}
	m := snap.Metadata
	if err := ss.s.session.Query(ss.s.sql.saveSnap, m.PersistenceID, m.SequenceNr, ts.UnixMilli(), np, snap.SerializerID, snap.Manifest, payload).
		WithContext(ctx).Consistency(ss.s.cfg.writeCL).Exec(); err != nil {
		return ss.s.errs.Map(ctx, "save snapshot", err, snapshot.ErrClosed)
	}
	return nil
}

// Delete implements snapshot.Store. With a timestamp, the snapshot is
// removed only when its time is exactly that.
func (ss *Snapshots) Delete(ctx context.Context, m snapshot.Metadata) error {
	if err := snapshot.CheckID("delete", m.PersistenceID, m.SequenceNr); err != nil {
		return err
	}
	if ss.s.isClosed() {
		return snapshot.ErrClosed
	}
	if !m.Timestamp.IsZero() {
		got, ok, err := ss.Load(ctx, m.PersistenceID, snapshot.Criteria{MinSequenceNr: m.SequenceNr, MaxSequenceNr: m.SequenceNr})
		if err != nil {
			return err
		}
		if !ok || !got.Metadata.Timestamp.Equal(m.Timestamp) {
			return nil
		}
	}
	if err := ss.s.session.Query(ss.s.sql.deleteSnap, m.PersistenceID, m.SequenceNr).
		WithContext(ctx).Consistency(ss.s.cfg.writeCL).Exec(); err != nil {
		return ss.s.errs.Map(ctx, "delete snapshot", err, snapshot.ErrClosed)
	}
	return nil
}

// DeleteMatching implements snapshot.Store: without time bounds, one range
// deletion; with them, each matching snapshot.
func (ss *Snapshots) DeleteMatching(ctx context.Context, persistenceID string, c snapshot.Criteria) error {
	if err := snapshot.CheckID("delete", persistenceID, max(c.MaxSequenceNr, 0)); err != nil {
		return err
	}
	if c.MinSequenceNr < 0 {
		return snapshot.CheckID("delete", persistenceID, c.MinSequenceNr)
	}
	if ss.s.isClosed() {
		return snapshot.ErrClosed
	}
	if c.MaxSequenceNr < c.MinSequenceNr {
		return nil
	}
	if c.MinTimestamp.IsZero() && c.MaxTimestamp.IsZero() {
		if err := ss.s.session.Query(ss.s.sql.deleteSnaps, persistenceID, c.MinSequenceNr, c.MaxSequenceNr).
			WithContext(ctx).Consistency(ss.s.cfg.writeCL).Exec(); err != nil {
			return ss.s.errs.Map(ctx, "delete snapshots", err, snapshot.ErrClosed)
		}
		return nil
	}
	iter := ss.s.session.Query(ss.s.sql.loadSnaps, persistenceID, c.MinSequenceNr, c.MaxSequenceNr).
		WithContext(ctx).Consistency(ss.s.cfg.readCL).Iter()
	var (
		seq, millis int64
		nanos       *int64
		serID       int32
		manifest    string
		payload     []byte
		doomed      []int64
	)
	for iter.Scan(&seq, &millis, &nanos, &serID, &manifest, &payload) {
		if c.Matches(snapshot.Metadata{PersistenceID: persistenceID, SequenceNr: seq, Timestamp: snapshotTime(millis, nanos)}) {
			doomed = append(doomed, seq)
		}
	}
	if err := iter.Close(); err != nil {
		return ss.s.errs.Map(ctx, "delete snapshots", err, snapshot.ErrClosed)
	}
	for _, seq := range doomed {
		if err := ss.s.session.Query(ss.s.sql.deleteSnap, persistenceID, seq).
			WithContext(ctx).Consistency(ss.s.cfg.writeCL).Exec(); err != nil {
			return ss.s.errs.Map(ctx, "delete snapshots", err, snapshot.ErrClosed)
		}
	}
	return nil
}
