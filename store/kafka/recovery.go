package kafka

import (
	"context"
	"errors"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/recovery"
	"github.com/annals-go/annals/snapshot"
)

// WithSnapshots names the snapshot store the journal's recoveries read
// (the one in the eventual store's database, as annals opens it): with it
// the journal offers recovery.Reader, whose reads produce one Mark instead
// of two and load the snapshot while the journal's head is read.
func WithSnapshots(s snapshot.Store) Option { return func(c *config) { c.snapshots = s } }

// ReadsSnapshotsOf implements recovery.Reader: true for no store and for
// the one given WithSnapshots.
func (j *Journal) ReadsSnapshotsOf(s snapshot.Store) bool {
	return s == nil || (j.cfg.snapshots != nil && s == j.cfg.snapshots)
}

// ReadRecovery implements recovery.Reader: one read of the id's journal
// (a Mark, the pointer, the head, the topic's unreplicated head when
// needed) while the snapshot is loaded, then the events after the
// snapshot from that same read.
func (j *Journal) ReadRecovery(ctx context.Context, req recovery.Request) (recovery.Result, error) {
	req, err := recovery.Check(req)
	if err != nil {
		return recovery.Result{}, err
	}
	if j.closed.Load() {
		return recovery.Result{}, journal.ErrClosed
	}
	if req.Snapshot != nil && j.cfg.snapshots == nil {
		return recovery.Result{}, errors.New("kafka journal: a snapshot was asked for and the journal has no snapshot store (WithSnapshots)")
	}
	var (
		res     recovery.Result
		snapErr error
		loaded  = make(chan struct{})
	)
	go func() {
		defer close(loaded)
		if req.Snapshot != nil {
			res.Snapshot, res.HasSnapshot, snapErr = j.cfg.snapshots.Load(ctx, req.PersistenceID, *req.Snapshot)
		}
	}()
	v, err := j.read(ctx, req.PersistenceID, true)
	<-loaded
	if err != nil {
		return recovery.Result{}, err
	}
	if snapErr != nil {
		return recovery.Result{}, snapErr
	}
	res.Highest = v.seqNr
	j.remember(req.PersistenceID, v.seqNr)
	from, to := res.Snapshot.Metadata.SequenceNr+1, min(req.ToSequenceNr, res.Highest)
	if from > to {
		return res, nil
	}
	j.stream(ctx, v, req.PersistenceID, from, to, int64(req.MaxEvents), func(e journal.Repr, e2 error) bool {
		if e2 != nil {
			err = e2
			return false
		}
		res.Events = append(res.Events, e)
		return true
	})
	if err != nil {
		return recovery.Result{}, err
	}
	res.More = len(res.Events) == req.MaxEvents && res.Events[len(res.Events)-1].SequenceNr < to
	return res, nil
}

var _ recovery.Reader = (*Journal)(nil)
