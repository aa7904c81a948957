package memory

import (
	"bytes"
	"context"

	"github.com/annals-go/annals/durable"
)

// DurableState returns the store's durable-state store. Its Close closes
// the whole Store.
func (s *Store) DurableState() *DurableState { return &DurableState{s: s} }

// DurableState is the in-memory durable.Store of a Store.
type DurableState struct{ s *Store }

var _ durable.Store = (*DurableState)(nil)

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
	o, ok := d.s.states[persistenceID]
	if !ok {
		return durable.Object{}, false, nil
	}
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
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	if d.s.closed {
		return durable.ErrClosed
	}
	stored := d.s.states[o.PersistenceID].Revision
	if o.Revision != stored+1 {
		return durable.Conflict("upsert", o.PersistenceID, o.Revision, stored)
	}
	o.Payload = bytes.Clone(o.Payload)
	o.Timestamp = d.s.cfg.now().UTC()
	d.s.states[o.PersistenceID] = o
	return nil
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
	o, ok := d.s.states[persistenceID]
	if !ok {
		return nil
	}
	if revision != o.Revision+1 {
		return durable.Conflict("delete", persistenceID, revision, o.Revision)
	}
	delete(d.s.states, persistenceID)
	return nil
}

// Close closes the whole Store.
func (d *DurableState) Close() error { return d.s.Close() }
