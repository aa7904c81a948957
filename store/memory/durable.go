package memory

import (
	"bytes"
	"context"
	"iter"
	"slices"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/durable"
	"github.com/annals-go/annals/query"
)

// storedState is an id's durable state and the ordering of its last
// change.
type storedState struct {
	obj      durable.Object
	ordering int64
}

// stateRef locates a durable-state change by its ordering.
type stateRef struct {
	pid      string
	ordering int64
}

// DurableState returns the store's durable-state store. Its Close closes
// the whole Store.
func (s *Store) DurableState() *DurableState { return &DurableState{s: s} }

// DurableState is the in-memory durable.Store of a Store, and its change
// queries. Each Upsert takes the next of the store's durable-state
// orderings; the change queries' offsets are sequence offsets of them,
// which grow in commit order (the store's lock orders the writes), so a
// query that has returned ordering n has seen every change below n. Live
// change queries wake at once on every write to the store.
type DurableState struct{ s *Store }

var (
	_ durable.Store                          = (*DurableState)(nil)
	_ query.DurableStateChangesBySlicesQuery = (*DurableState)(nil)
	_ query.DurableStateChangesByTagQuery    = (*DurableState)(nil)
)

// Get implements durable.Store.Get.
func (d *DurableState) Get(ctx context.Context, persistenceID string) (durable.Object, bool, error) {
	if err := durable.Check("get", persistenceID, 1); err != nil {
		return durable.Object{}, false, err
	}
	if err := ctx.Err(); err != nil {
		return durable.Object{}, false, err
	}
	d.s.mu.RLock()
	defer d.s.mu.RUnlock()
	if d.s.closed {
		return durable.Object{}, false, durable.ErrClosed
	}
	st, ok := d.s.states[persistenceID]
	if !ok {
		return durable.Object{}, false, nil
	}
	o := st.obj
	o.Payload = bytes.Clone(o.Payload)
	return o, true, nil
}

// Upsert implements durable.Store.Upsert.
func (d *DurableState) Upsert(ctx context.Context, o durable.Object) error {
	if err := durable.Check("upsert", o.PersistenceID, o.Revision); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return durable.ErrClosed
	}
	stored := s.states[o.PersistenceID].obj.Revision
	if o.Revision != stored+1 {
		return durable.Conflict("upsert", o.PersistenceID, o.Revision, stored)
	}
	o.Payload = bytes.Clone(o.Payload)
	o.Timestamp = s.cfg.now().UTC()
	s.stateOrdering++
	s.states[o.PersistenceID] = storedState{obj: o, ordering: s.stateOrdering}
	s.stateOrder = append(s.stateOrder, stateRef{pid: o.PersistenceID, ordering: s.stateOrdering})
	s.compactStates()
	defer s.signal.Notify() // after the lock is released
	return nil
}

// compactStates drops the superseded and deleted changes from stateOrder
// once they are the greater part of it, so it stays within twice the
// number of objects.
func (s *Store) compactStates() {
	if len(s.stateOrder) < 64 || len(s.stateOrder) < 2*len(s.states) {
		return
	}
	s.stateOrder = slices.DeleteFunc(s.stateOrder, func(r stateRef) bool {
		st, ok := s.states[r.pid]
		return !ok || st.ordering != r.ordering
	})
}

// Delete implements durable.Store.Delete.
func (d *DurableState) Delete(ctx context.Context, persistenceID string, revision int64) error {
	if err := durable.Check("delete", persistenceID, revision); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	if d.s.closed {
		return durable.ErrClosed
	}
	st, ok := d.s.states[persistenceID]
	if !ok {
		return nil
	}
	if revision != st.obj.Revision+1 {
		return durable.Conflict("delete", persistenceID, revision, st.obj.Revision)
	}
	delete(d.s.states, persistenceID)
	d.s.compactStates()
	return nil
}

// Close closes the whole Store.
func (d *DurableState) Close() error { return d.s.Close() }

// CurrentChangesBySlices implements query.DurableStateChangesBySlicesQuery.
func (d *DurableState) CurrentChangesBySlices(ctx context.Context, entityType string, minSlice, maxSlice int, after query.Offset) iter.Seq2[query.Envelope, error] {
	return d.scan(ctx, after, func(o durable.Object) bool {
		if annals.EntityType(o.PersistenceID) != entityType {
			return false
		}
		slice := annals.Slice(o.PersistenceID)
		return slice >= minSlice && slice <= maxSlice
	})
}

// ChangesBySlices implements query.DurableStateChangesBySlicesQuery.
func (d *DurableState) ChangesBySlices(ctx context.Context, entityType string, minSlice, maxSlice int, after query.Offset) *query.Stream[query.Envelope] {
	return query.FollowOffsets(ctx, &d.s.signal, 0, after, func(ctx context.Context, after query.Offset) iter.Seq2[query.Envelope, error] {
		return d.CurrentChangesBySlices(ctx, entityType, minSlice, maxSlice, after)
	})
}

// CurrentChangesByTag implements query.DurableStateChangesByTagQuery.
func (d *DurableState) CurrentChangesByTag(ctx context.Context, tag string, after query.Offset) iter.Seq2[query.Envelope, error] {
	return d.scan(ctx, after, func(o durable.Object) bool { return o.Tag == tag })
}

// ChangesByTag implements query.DurableStateChangesByTagQuery.
func (d *DurableState) ChangesByTag(ctx context.Context, tag string, after query.Offset) *query.Stream[query.Envelope] {
	return query.FollowOffsets(ctx, &d.s.signal, 0, after, func(ctx context.Context, after query.Offset) iter.Seq2[query.Envelope, error] {
		return d.CurrentChangesByTag(ctx, tag, after)
	})
}

// scan yields, in ordering order, the objects whose last change is after
// the offset and at or below the ordering the store had when the scan
// began, that match.
func (d *DurableState) scan(ctx context.Context, after query.Offset, match func(durable.Object) bool) iter.Seq2[query.Envelope, error] {
	s := d.s
	return pagedScan(ctx, s, after, durable.ErrClosed, func() ([]stateRef, int64) { return s.stateOrder, s.stateOrdering },
		func(r stateRef) int64 { return r.ordering },
		func(ref stateRef) (query.Envelope, bool) {
			st, ok := s.states[ref.pid]
			if !ok || st.ordering != ref.ordering || !match(st.obj) {
				return query.Envelope{}, false
			}
			return stateEnvelope(st.obj, query.SequenceOffset(ref.ordering)), true
		})
}

// stateEnvelope is the envelope of o's change at offset at.
func stateEnvelope(o durable.Object, at query.Offset) query.Envelope {
	var tags []string
	if o.Tag != "" {
		tags = []string{o.Tag}
	}
	return query.Envelope{Offset: at, PersistenceID: o.PersistenceID, SequenceNr: o.Revision, Timestamp: o.Timestamp,
		EntityType: annals.EntityType(o.PersistenceID), Slice: annals.Slice(o.PersistenceID), Tags: tags,
		Payload: bytes.Clone(o.Payload), SerializerID: o.SerializerID, Manifest: o.Manifest}
}
