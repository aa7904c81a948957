package entity

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"reflect"

	"github.com/annals-go/annals/durable"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/snapshot"
)

// StateChange is what a durable-state command persists: a new state, or
// the deletion of the entity's state. Make one with DurableEffects.
type StateChange[S any] struct {
	state   S
	deleted bool
}

// DurableBehavior describes a durable-state entity type: the whole state
// is stored (durable.Store), replacing the previous revision, instead of
// events (Akka's DurableStateBehavior). Commands run on a Host with the
// same rules as event-sourced ones: one at a time per entity, replies,
// stash, passivation, restarts, hooks.
type DurableBehavior[C, S any] struct {
	// EntityType names the type; persistence ids are "EntityType|id".
	EntityType string
	// EmptyState returns the state of an entity with nothing stored. Nil
	// means the zero S.
	EmptyState func() S
	// Command decides what to do with a command in a state: persist a new
	// state, delete it, reply, stash, stop (DurableEffects).
	Command func(state S, cmd C) ReplyEffect[StateChange[S], S]
	// Tag is stored with every revision, for queries by tag.
	Tag string
	// OnRecovered runs once an entity has read its state, with its id, the
	// state and its revision (0: nothing stored), before its first command.
	OnRecovered func(id string, state S, revision int64)
}

// DurableEffects builds the effects of a durable-state command handler.
// Declare one per behavior: var fx entity.DurableEffects[State].
type DurableEffects[S any] struct{ fx Effects[StateChange[S], S] }

// PersistState stores s as the entity's next revision; the Then-callbacks
// run once it is stored.
func (d DurableEffects[S]) PersistState(s S) Effect[StateChange[S], S] {
	return d.fx.Persist(StateChange[S]{state: s})
}

// Delete deletes the entity's state and then stops the entity: the next
// command starts it again from EmptyState, at revision 0, as a store that
// removes the row (Pekko's) requires.
func (d DurableEffects[S]) Delete() Effect[StateChange[S], S] {
	return d.fx.Persist(StateChange[S]{deleted: true}).ThenStop()
}

// None persists nothing.
func (d DurableEffects[S]) None() Effect[StateChange[S], S] { return d.fx.None() }

// Stop persists nothing and stops the entity after the Then-callbacks.
func (d DurableEffects[S]) Stop() Effect[StateChange[S], S] { return d.fx.Stop() }

// UnstashAll persists nothing and processes the stashed commands next.
func (d DurableEffects[S]) UnstashAll() Effect[StateChange[S], S] { return d.fx.UnstashAll() }

// Unhandled declares the command not handled in this state.
func (d DurableEffects[S]) Unhandled() ReplyEffect[StateChange[S], S] { return d.fx.Unhandled() }

// Stash keeps the command until an effect unstashes it.
func (d DurableEffects[S]) Stash() ReplyEffect[StateChange[S], S] { return d.fx.Stash() }

// Reply persists nothing and replies at once with fn.
func (d DurableEffects[S]) Reply(fn func(S)) ReplyEffect[StateChange[S], S] { return d.fx.Reply(fn) }

// durableManifest is the manifest of state changes between the host and
// the durable journal.
const durableManifest = "annals.durable.change"

// durableChangeID is the serializer id of state changes between the host
// and the durable journal. It is never stored: the store keeps the
// state's own serialization.
const durableChangeID int32 = 99

// change is implemented by every StateChange[S]: the serializer sees any S
// through it.
type change interface{ parts() (any, bool) }

func (c StateChange[S]) parts() (any, bool) { return c.state, c.deleted }

// changeSerializer encodes a state change as the state's own
// serialization (payload, serializer id, manifest) and a deleted flag.
type changeSerializer struct{ reg *serialization.Registry }

func (changeSerializer) ID() int32 { return durableChangeID }

func (changeSerializer) Manifest(any) (string, error) { return durableManifest, nil }

func (s changeSerializer) Marshal(v any) ([]byte, error) {
	c, ok := v.(change)
	if !ok {
		return nil, fmt.Errorf("%w: %T is not a state change", serialization.ErrNotSerializable, v)
	}
	state, deleted := c.parts()
	if deleted {
		return []byte{1}, nil
	}
	payload, id, manifest, err := s.reg.Serialize(state)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 1, 5+binary.MaxVarintLen64+len(manifest)+len(payload)) // one allocation
	b = binary.BigEndian.AppendUint32(b, uint32(id))
	b = binary.AppendUvarint(b, uint64(len(manifest)))
	b = append(b, manifest...)
	return append(b, payload...), nil
}

func (changeSerializer) Unmarshal([]byte, string) (any, error) {
	return nil, errors.New("entity: state changes are never stored, so never decoded")
}

// splitChange returns the parts of an encoded state change.
func splitChange(b []byte) (payload []byte, id int32, manifest string, deleted bool, err error) {
	if len(b) == 1 && b[0] == 1 {
		return nil, 0, "", true, nil
	}
	if len(b) < 5 || b[0] != 0 {
		return nil, 0, "", false, errors.New("entity: malformed state change")
	}
	id = int32(binary.BigEndian.Uint32(b[1:5]))
	n, k := binary.Uvarint(b[5:])
	if k <= 0 || uint64(len(b)-5-k) < n {
		return nil, 0, "", false, errors.New("entity: malformed state change")
	}
	manifest = string(b[5+k : 5+k+int(n)])
	return b[5+k+int(n):], id, manifest, false, nil
}

// NewDurableHost makes a host for durable-state entities on store: cfg's
// Journal and Snapshots must be nil (the host keeps each entity's state in
// store), its Registry serializes the states. It registers and binds the
// host's state-change type in cfg.Registry (serializer id 99, never
// stored). A revision another writer stored first fails the command with
// journal.ErrSequenceConflict wrapping durable.ErrRevisionConflict and
// stops the entity, as a sequence conflict does. The host's front (group
// commit, breaker, timeouts) stands before the store as before a journal.
func NewDurableHost[C, S any](b DurableBehavior[C, S], store durable.Store, cfg HostConfig) (*Host[C, StateChange[S], S], error) {
	switch {
	case store == nil:
		return nil, errors.New("entity: NewDurableHost with a nil store")
	case cfg.Journal != nil || cfg.Snapshots != nil:
		return nil, errors.New("entity: NewDurableHost keeps states in its store: HostConfig.Journal and Snapshots must be nil")
	case cfg.Registry == nil:
		return nil, errors.New("entity: HostConfig.Registry is nil")
	}
	if err := cfg.Registry.Register(changeSerializer{reg: cfg.Registry}); err != nil {
		if s, ok := cfg.Registry.Serializer(durableChangeID); !ok || reflect.TypeOf(s) != reflect.TypeFor[changeSerializer]() {
			return nil, fmt.Errorf("entity: serializer id %d is taken: %w", durableChangeID, err)
		}
	}
	if err := cfg.Registry.Bind(reflect.TypeFor[StateChange[S]](), durableChangeID); err != nil && !errors.Is(err, serialization.ErrDuplicate) {
		return nil, fmt.Errorf("entity: %w", err)
	}
	empty := b.EmptyState
	if empty == nil {
		empty = func() S { var s S; return s }
	}
	eb := Behavior[C, StateChange[S], S]{
		EntityType:  b.EntityType,
		EmptyState:  empty,
		Command:     b.Command,
		OnRecovered: b.OnRecovered,
		Event: func(s S, c StateChange[S]) S {
			if c.deleted {
				return empty()
			}
			return c.state
		},
	}
	cfg.Journal = &durableJournal{store: store, tag: b.Tag}
	cfg.Snapshots = durableSnapshots{store}
	return NewHost(eb, cfg)
}

// durableJournal is the journal a durable host writes to: each atomic
// write of one state change is an upsert (or delete) of the revision equal
// to its sequence number; the highest sequence number is the stored
// revision.
type durableJournal struct {
	store durable.Store
	tag   string
}

var _ journal.Journal = (*durableJournal)(nil)

// Write applies the state changes of writes: through one Apply when the
// store is a durable.Batcher (a group of the front's writers pays for one
// commit), else one Upsert or Delete each.
func (j *durableJournal) Write(ctx context.Context, writes []journal.AtomicWrite) ([]error, error) {
	var errs []error
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(writes))
		}
		errs[i] = err
	}
	changes := make([]durable.Change, 0, len(writes))
	at := make([]int, 0, len(writes)) // the write of each change
	for i, w := range writes {
		c, err := j.change(w)
		if err != nil {
			fail(i, err)
			continue
		}
		changes, at = append(changes, c), append(at, i)
	}
	if b, ok := j.store.(durable.Batcher); ok && len(changes) > 0 {
		cerrs, err := b.Apply(ctx, changes)
		if err != nil {
			return nil, err
		}
		for k, err := range cerrs {
			if err != nil {
				fail(at[k], j.mapErr(writes[at[k]], err))
			}
		}
		return errs, nil
	}
	for k, c := range changes {
		var err error
		if c.Delete {
			err = j.store.Delete(ctx, c.Object.PersistenceID, c.Object.Revision)
		} else {
			err = j.store.Upsert(ctx, c.Object)
		}
		if err == nil {
			continue
		}
		if err = j.mapErr(writes[at[k]], err); ctx.Err() != nil || !errors.Is(err, journal.ErrRejected) {
			return nil, err
		}
		fail(at[k], err)
	}
	return errs, nil
}

// change returns the state change of an atomic write (one event: the
// change, at the revision of its sequence number), or its rejection.
func (j *durableJournal) change(w journal.AtomicWrite) (durable.Change, error) {
	if len(w.Events) != 1 {
		return durable.Change{}, journal.Reject("durable state of %s: %d changes in one write, want 1", w.PersistenceID, len(w.Events))
	}
	r := w.Events[0]
	payload, id, manifest, deleted, err := splitChange(r.Payload)
	if err != nil {
		return durable.Change{}, journal.Reject("durable state of %s: %w", w.PersistenceID, err)
	}
	if deleted {
		return durable.Change{Object: durable.Object{PersistenceID: w.PersistenceID, Revision: r.SequenceNr}, Delete: true}, nil
	}
	return durable.Change{Object: durable.Object{PersistenceID: w.PersistenceID, Revision: r.SequenceNr, Payload: payload, SerializerID: id, Manifest: manifest, Tag: j.tag}}, nil
}

// mapErr turns a change's revision conflict into the journal's sequence
// conflict (another writer of the id) and an invalid argument into a
// rejection.
func (j *durableJournal) mapErr(w journal.AtomicWrite, err error) error {
	switch {
	case errors.Is(err, durable.ErrRevisionConflict):
		return fmt.Errorf("%w: %w", &journal.ConflictError{PersistenceID: w.PersistenceID, SequenceNr: w.Events[0].SequenceNr}, err)
	case errors.Is(err, durable.ErrInvalidArgument):
		return journal.Reject("durable state of %s: %w", w.PersistenceID, err)
	}
	return err
}

func (j *durableJournal) HighestSequenceNr(ctx context.Context, persistenceID string, _ int64) (int64, error) {
	o, ok, err := j.store.Get(ctx, persistenceID)
	if err != nil || !ok {
		return 0, err
	}
	return o.Revision, nil
}

// Replay yields nothing: a durable host recovers its state from the
// stored object, which durableSnapshots presents as the snapshot at its
// revision.
func (j *durableJournal) Replay(ctx context.Context, persistenceID string, from, to, max int64) iter.Seq2[journal.Repr, error] {
	return func(yield func(journal.Repr, error) bool) {
		if err := ctx.Err(); err != nil {
			yield(journal.Repr{}, err)
		}
	}
}

// durableSnapshots presents each stored object as the snapshot at its
// revision, so a durable host recovers the stored state as an
// event-sourced one recovers from a snapshot with no events after it.
type durableSnapshots struct{ store durable.Store }

var _ snapshot.Store = durableSnapshots{}

func (s durableSnapshots) Load(ctx context.Context, persistenceID string, c snapshot.Criteria) (snapshot.Snapshot, bool, error) {
	o, ok, err := s.store.Get(ctx, persistenceID)
	if err != nil || !ok {
		return snapshot.Snapshot{}, false, err
	}
	m := snapshot.Metadata{PersistenceID: persistenceID, SequenceNr: o.Revision, Timestamp: o.Timestamp}
	if !c.Matches(m) {
		return snapshot.Snapshot{}, false, nil
	}
	return snapshot.Snapshot{Metadata: m, Payload: o.Payload, SerializerID: o.SerializerID, Manifest: o.Manifest}, true, nil
}

// Save, Delete and DeleteMatching are not used: durable behaviors take no
// snapshots.
func (durableSnapshots) Save(context.Context, snapshot.Snapshot) error { return nil }

func (durableSnapshots) Delete(context.Context, snapshot.Metadata) error { return nil }

func (durableSnapshots) DeleteMatching(context.Context, string, snapshot.Criteria) error { return nil }

// Close does nothing: the store belongs to the caller.
func (durableSnapshots) Close() error { return nil }

// DeleteTo is not used by durable hosts (they take no snapshots).
func (j *durableJournal) DeleteTo(context.Context, string, int64) error { return nil }

// Close does nothing: the store belongs to the caller.
func (j *durableJournal) Close() error { return nil }
