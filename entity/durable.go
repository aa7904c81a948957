package entity

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/annals-go/annals/durable"
	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/journal"
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

// NewDurableHost makes a host for durable-state entities on store: cfg's
// Journal and Snapshots must be nil (the host keeps each entity's state in
// store), its Registry serializes the states. A revision another writer
// stored first fails the command with journal.ErrSequenceConflict wrapping
// durable.ErrRevisionConflict and stops the entity, as a sequence conflict
// does. The host puts a durable-state front (engine.StateFront: group
// commit, breaker, timeouts, tuned by cfg.Front) before the store, which
// it closes on Shutdown; the store stays open.
func NewDurableHost[C, S any](b DurableBehavior[C, S], store durable.Store, cfg HostConfig) (*Host[C, StateChange[S], S], error) {
	switch {
	case store == nil:
		return nil, errors.New("entity: NewDurableHost with a nil store")
	case cfg.Journal != nil || cfg.Snapshots != nil:
		return nil, errors.New("entity: NewDurableHost keeps states in its store: HostConfig.Journal and Snapshots must be nil")
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
	return newHost(eb, cfg, func(cfg HostConfig) (persistence[C, StateChange[S], S], error) {
		f, err := engine.NewStateFront(store, cfg.Front)
		if err != nil {
			return nil, fmt.Errorf("entity: HostConfig.Front: %w", err)
		}
		return statePersistence[C, S]{front: f, tag: b.Tag}, nil
	})
}

// statePersistence keeps a durable host's entities in a durable-state
// store: each persist is one change (an upsert or a delete) at the
// revision following the entity's, and a recovery reads the stored
// object.
type statePersistence[C, S any] struct {
	front *engine.StateFront
	tag   string
}

func (p statePersistence[C, S]) recover(ctx context.Context, inst *instance[C, StateChange[S], S]) (int64, error) {
	o, ok, err := p.front.Get(ctx, inst.pid)
	if err != nil {
		return 0, fmt.Errorf("%w of %s: %w", ErrRecovery, inst.pid, err)
	}
	if !ok {
		return 0, nil
	}
	v, err := inst.h.cfg.Registry.Deserialize(o.Payload, o.SerializerID, o.Manifest)
	if err != nil {
		return 0, fmt.Errorf("%w of %s: state at revision %d: %w", ErrRecovery, inst.pid, o.Revision, err)
	}
	s, ok := v.(S)
	if !ok {
		return 0, fmt.Errorf("%w of %s: state at revision %d is a %T, want %v", ErrRecovery, inst.pid, o.Revision, v, reflect.TypeFor[S]())
	}
	inst.state, inst.seq, inst.fromSnapshot = s, o.Revision, o.Revision
	return o.Revision, nil
}

func (p statePersistence[C, S]) write(ctx context.Context, inst *instance[C, StateChange[S], S], changes []StateChange[S], fence journal.Fence) (error, error) {
	if len(changes) != 1 {
		return journal.Reject("durable state of %s: %d changes in one persist, want 1", inst.pid, len(changes)), nil
	}
	c := durable.Change{Object: durable.Object{PersistenceID: inst.pid, Revision: inst.seq + 1}, Delete: changes[0].deleted}
	if !c.Delete {
		payload, id, manifest, err := inst.h.cfg.Registry.Serialize(changes[0].state)
		if err != nil {
			return journal.Reject("state of %s at revision %d: %w", inst.pid, inst.seq+1, err), nil
		}
		c.Object.Payload, c.Object.SerializerID, c.Object.Manifest, c.Object.Tag = payload, id, manifest, p.tag
	}
	switch err := p.front.Apply(ctx, c, fence); {
	case err == nil:
		return nil, nil
	case errors.Is(err, durable.ErrRevisionConflict):
		return fmt.Errorf("%w: %w", &journal.ConflictError{PersistenceID: inst.pid, SequenceNr: inst.seq + 1}, err), nil
	case errors.Is(err, durable.ErrInvalidArgument):
		return journal.Reject("durable state of %s: %w", inst.pid, err), nil
	default:
		return nil, err
	}
}

func (p statePersistence[C, S]) close() error { return p.front.Close() }
