// Package durable defines the storage contract for durable state: entities
// whose whole state is stored, replacing the previous one, instead of the
// events that led to it (Akka's and Pekko's DurableStateStore).
//
// Each persistence id holds at most one object: a serialized value with a
// revision, counted from 1 by the writes that stored it. A write names the
// revision it creates, and fails with a conflict unless the stored
// revision is the one before it, so two writers of one id cannot silently
// overwrite each other (Pekko's assert-single-writer).
package durable

import (
	"context"
	"errors"
	"fmt"
	"time"
)

var (
	// ErrInvalidArgument marks a call with an argument that breaks the
	// contract (empty id, revision below 1).
	ErrInvalidArgument = errors.New("durable: invalid argument")
	// ErrRevisionConflict marks a write or delete whose revision does not
	// follow the stored one: another writer was first, or the caller's
	// revision is stale. Nothing was changed.
	ErrRevisionConflict = errors.New("durable: revision conflict")
	// ErrClosed is returned by calls on a closed store.
	ErrClosed = errors.New("durable: closed")
)

// Object is one stored state.
type Object struct {
	PersistenceID string
	// Revision counts the writes of the id: 1 for the first.
	Revision     int64
	Payload      []byte
	SerializerID int32
	Manifest     string
	// Tag is the object's tag for queries by tag ("" for none).
	Tag string
	// Timestamp is when the revision was stored (the store's clock; on
	// Upsert it is ignored). Stores keep at least microsecond precision
	// and return it in UTC.
	Timestamp time.Time
}

// Store is a durable-state store. Rules every implementation keeps (the
// compliance kit's durable suite, storetest.Run, checks each):
//
//   - Get of an id never written, or deleted, returns ok false and no error.
//   - Upsert stores o as the id's object when o.Revision is the stored
//     revision plus one (1 when there is none); otherwise it returns an
//     error wrapping ErrRevisionConflict and changes nothing. Of two
//     writers racing for one revision, exactly one succeeds.
//   - Get returns the last object stored: payload, serializer id, manifest,
//     tag and revision as written.
//   - Delete(id, revision) removes the object when revision is the stored
//     revision plus one, as Pekko's deleteObject does; otherwise it returns
//     ErrRevisionConflict. Deleting an id that holds nothing is a no-op.
//     A deleted id keeps no revision: its next Upsert starts again at 1
//     (Pekko 1.2's r2dbc plugin removes the row; there is no tombstone).
//   - Every call checks its arguments first (ErrInvalidArgument: an empty
//     id, a revision below 1) and fails with ctx's error once ctx ends.
//   - After Close every call fails with an error wrapping ErrClosed, and
//     a second Close does nothing.
//   - Methods are safe for concurrent use.
type Store interface {
	Upsert(ctx context.Context, o Object) error
	Get(ctx context.Context, persistenceID string) (Object, bool, error)
	Delete(ctx context.Context, persistenceID string, revision int64) error
	Close() error
}

// Check returns an error wrapping ErrInvalidArgument when id is empty or
// revision is below 1, naming the call; stores call it first.
func Check(call, persistenceID string, revision int64) error {
	switch {
	case persistenceID == "":
		return fmt.Errorf("%w: %s: empty persistence id", ErrInvalidArgument, call)
	case revision < 1:
		return fmt.Errorf("%w: %s %s: revision %d is below 1", ErrInvalidArgument, call, persistenceID, revision)
	}
	return nil
}

// Conflict returns the error of a write or delete of revision on an id
// whose stored revision is stored (0: none).
func Conflict(call, persistenceID string, revision, stored int64) error {
	return fmt.Errorf("%w: %s %s revision %d: the stored revision is %d (a write must name %d)",
		ErrRevisionConflict, call, persistenceID, revision, stored, stored+1)
}

// Change is one change of a Batcher's batch: an upsert of Object, or, when
// Delete is set, a delete of Object.PersistenceID at Object.Revision (the
// other fields unused).
type Change struct {
	Object Object
	Delete bool
}

// Batcher is a Store that applies many changes in one call, in one
// transaction where the store has them, so that a group of writers pays
// for one commit (the durable host's front hands it each group). Rules,
// besides Store's:
//
//   - The changes are applied in order, each under Upsert's or Delete's
//     rule, as if by that call: a later change of an id sees an earlier
//     one's revision.
//   - errs has one entry per change, nil when it was applied; an entry
//     wrapping ErrRevisionConflict or ErrInvalidArgument changed nothing,
//     and the other changes are applied as if it had not been given.
//     errs is nil when every change was applied.
//   - err reports a failure of the call: then errs is nil, and, as after a
//     failed Upsert, the changes may or may not be stored (a store that
//     commits them in one transaction stores all of them or none).
type Batcher interface {
	Store
	Apply(ctx context.Context, changes []Change) (errs []error, err error)
}

// CheckChange checks a change's arguments as Check does, naming the call
// the change stands for (upsert or delete).
func CheckChange(c Change) error {
	if c.Delete {
		return Check("delete", c.Object.PersistenceID, c.Object.Revision)
	}
	return Check("upsert", c.Object.PersistenceID, c.Object.Revision)
}

// ApplyOne applies one change through b.Apply, with Store's order of
// checks: the change's arguments first, then the call. Batchers implement
// Upsert and Delete with it.
func ApplyOne(ctx context.Context, b Batcher, c Change) error {
	if err := CheckChange(c); err != nil {
		return err
	}
	errs, err := b.Apply(ctx, []Change{c})
	if err != nil {
		return err
	}
	if errs != nil {
		return errs[0]
	}
	return nil
}
