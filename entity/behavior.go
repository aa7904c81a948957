// Package entity runs event-sourced entities: Akka's EventSourcedBehavior in
// Go. A Behavior describes one entity type with Go generics over its
// command (C), event (E) and state (S) types; a Host runs many entities of
// that type, persisting their events through a journal and recovering them
// from snapshots and events. A live entity has a goroutine only while it
// has commands to handle (one at a time, in arrival order); an idle live
// entity is its state and an empty mailbox, well under a kilobyte besides
// the state.
//
// The rules, as Akka Persistence keeps them:
//   - A command handler returns an effect; events are persisted as one
//     atomic write, then applied to the state with the event handler, then
//     side effects and the reply run, in that order, once. During recovery
//     only the event handler runs.
//   - Commands that arrive while an entity recovers, persists or snapshots
//     wait in its mailbox (the implicit stash), bounded by MailboxCapacity;
//     beyond it, Tell and Ask fail at once with ErrMailboxFull.
//   - A rejected write (definitely not stored) leaves the entity running and
//     fails the command. A failed write (outcome unknown) or a write that
//     met another writer's sequence number stops the entity; its waiting
//     commands fail, and the next command recovers a new instance from the
//     journal (after a backoff, when Restart is set).
//   - One host never runs two live instances of one id.
package entity

import (
	"errors"
	"fmt"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/restart"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/snapshot"
)

var (
	// ErrUnhandled: the behavior did not handle the command in its state.
	ErrUnhandled = errors.New("entity: command not handled")
	// ErrNoReply: the command was handled but the handler sent no reply.
	ErrNoReply = errors.New("entity: command handled without a reply")
	// ErrMailboxFull: the entity's mailbox (its implicit stash) is full.
	ErrMailboxFull = errors.New("entity: mailbox full")
	// ErrStashOverflow: an explicit Stash found the stash full.
	ErrStashOverflow = errors.New("entity: stash full")
	// ErrStopped: the entity stopped before it handled the command; the
	// wrapped error, if any, says why.
	ErrStopped = errors.New("entity: stopped")
	// ErrHostClosed: the host is shut down.
	ErrHostClosed = errors.New("entity: host shut down")
	// ErrRecovery wraps a recovery failure (the entity stops).
	ErrRecovery = errors.New("entity: recovery failed")
	// ErrRestarting: the entity failed and waits to restart
	// (HostConfig.Restart); the command was not handled. Such errors are
	// *RestartingError values, which say why and when.
	ErrRestarting = errors.New("entity: restarting")
	// ErrNotOwned: the entity's slice lies outside the host's
	// HostConfig.SliceRanges; such errors are *NotOwnedError values.
	ErrNotOwned = errors.New("entity: not owned by this host")
)

// RestartingError answers a command with a caller (Ask, Send) that was
// waiting for, or sent to, an entity waiting to restart after a failure
// (HostConfig.Restart): the command was not handled, and may be sent again.
// errors.Is matches it to ErrRestarting and to its Cause's chain (a store's
// error, engine.ErrCircuitOpen, ...).
type RestartingError struct {
	// PersistenceID is the entity's.
	PersistenceID string
	// Cause is the failure that stopped it: a write whose outcome is
	// unknown, or a recovery that failed.
	Cause error
	// At is when the entity starts recovering again.
	At time.Time
}

func (e *RestartingError) Error() string {
	return fmt.Sprintf("entity: %s is restarting (recovery again at %s) after: %v", e.PersistenceID, e.At.Format("15:04:05.000"), e.Cause)
}

// Unwrap returns ErrRestarting and the cause.
func (e *RestartingError) Unwrap() []error { return []error{ErrRestarting, e.Cause} }

// Behavior describes an entity type. EntityType, Command and Event are
// required; the rest is optional.
type Behavior[C, E, S any] struct {
	// EntityType names the type; persistence ids are "EntityType|id".
	EntityType string
	// EmptyState returns the state of an entity with no events. Nil means
	// the zero S.
	EmptyState func() S
	// Command decides what to do with a command in a state. It must not
	// block or mutate state: effects do the work.
	Command func(state S, cmd C) ReplyEffect[E, S]
	// Event applies a stored event to the state and returns the new state.
	// It runs both after a persist and during recovery, so it must be pure.
	// It must not modify the state it is given in place: copy maps and
	// slices before changing them, since replies and side effects may still
	// hold the previous state (and replies should send copies, too).
	Event func(state S, event E) S

	// Tagger returns the tags stored with an event (for queries by tag).
	Tagger func(event E) []string
	// TagsFor returns more tags stored with an event of the entity
	// persistenceID, after Tagger's: tags that depend on the entity, as
	// Akka's sharded tags do (an entity type split into N tags by its id,
	// each read by one projection instance, so that the instances can run
	// spread over processes; annals.Slice gives a stable split). A tag
	// both return is stored once.
	TagsFor func(persistenceID string, event E) []string
	// Adapters turn stored events of older shapes into current events:
	// the stored payload of an event whose manifest has an adapter goes to
	// it instead of the serialization registry (whatever its serializer id),
	// and it returns zero or more events to apply (manifest-based
	// upcasting). Give current types new manifests (".v2") so old and new
	// events stay apart.
	Adapters map[string]func(payload []byte) ([]E, error)

	// Snapshots configures when snapshots are taken and kept.
	Snapshots SnapshotPolicy[E, S]
	// Recovery configures how an entity starts.
	Recovery Recovery
	// OnRecovered runs once when an entity's recovery completes, with its
	// id, the recovered state and the highest sequence number, before its
	// first command. It runs on the goroutine handling the entity's
	// commands: it must not block.
	OnRecovered func(id string, state S, seqNr int64)
	// OnPersisted runs after each command's events are stored and applied,
	// with the entity's id, the new state and the events, before the
	// effect's Then-callbacks; never during recovery, and not when the
	// write failed or was rejected. It runs on the goroutine handling the
	// entity's commands: it must not block. With OnRecovered it lets a
	// component follow every entity's state (package delivery does).
	OnPersisted func(id string, state S, events []E)
}

// DecodeEvent turns a stored event into the behavior's current events, as
// recovery does: through the adapter of its manifest when there is one,
// otherwise through reg, whose value must be an E. Read models use it to
// see events exactly as the entity does.
func (b *Behavior[C, E, S]) DecodeEvent(reg *serialization.Registry, r journal.Repr) ([]E, error) {
	if adapt, ok := b.Adapters[r.Manifest]; ok {
		return adaptEvent(adapt, r)
	}
	e, err := b.decodeRegistered(reg, r)
	if err != nil {
		return nil, err
	}
	return []E{e}, nil
}

// applyStored applies the events DecodeEvent decodes from r to s, in
// order, and returns the state; the one event of a manifest without an
// adapter (recovery's common case) goes without a slice to carry it.
func (b *Behavior[C, E, S]) applyStored(reg *serialization.Registry, s S, r journal.Repr) (S, error) {
	if adapt, ok := b.Adapters[r.Manifest]; ok {
		events, err := adaptEvent(adapt, r)
		if err != nil {
			return s, err
		}
		for _, e := range events {
			s = b.Event(s, e)
		}
		return s, nil
	}
	e, err := b.decodeRegistered(reg, r)
	if err != nil {
		return s, err
	}
	return b.Event(s, e), nil
}

// adaptEvent decodes r through adapt, its manifest's adapter.
func adaptEvent[E any](adapt func(payload []byte) ([]E, error), r journal.Repr) ([]E, error) {
	events, err := adapt(r.Payload)
	if err != nil {
		return nil, fmt.Errorf("adapter for manifest %q, event %d of %s: %w", r.Manifest, r.SequenceNr, r.PersistenceID, err)
	}
	return events, nil
}

// decodeRegistered decodes r, whose manifest has no adapter, through reg.
func (b *Behavior[C, E, S]) decodeRegistered(reg *serialization.Registry, r journal.Repr) (E, error) {
	var zero E
	v, err := reg.DeserializeRepr(r)
	if err != nil {
		return zero, err
	}
	e, ok := v.(E)
	if !ok {
		return zero, fmt.Errorf("event %d of %s (manifest %q) decodes to %T, not the behavior's event type", r.SequenceNr, r.PersistenceID, r.Manifest, v)
	}
	return e, nil
}

// SnapshotPolicy decides when a snapshot of the state is saved and which are
// kept. The state is serialized with the host's registry, so S must be
// serializable there (for example registered with RegisterJSON).
//
// A snapshot is taken after the reply to the command whose events asked for
// it, at the sequence number of that command's last event (which, for an
// atomic write of several events, need not be a multiple of Every). The
// entity's next command waits for it; a failed snapshot is logged and the
// entity goes on.
type SnapshotPolicy[E, S any] struct {
	// Every saves a snapshot when an event's sequence number is a multiple
	// of Every (0: never).
	Every int64
	// When saves a snapshot after an event for which it returns true.
	When func(state S, event E, seqNr int64) bool
	// KeepLast, with Every, deletes snapshots older than the last KeepLast
	// after each snapshot (0: keep all): those with sequence number ≤
	// seqNr − KeepLast·Every.
	KeepLast int
	// DeleteEvents, with KeepLast, also deletes the events up to that same
	// sequence number.
	DeleteEvents bool
	// Optional: when a snapshot cannot be decoded, recover from the next
	// older one instead of failing (three are tried, the youngest first,
	// as Akka does); when none can be used, or the snapshot store fails,
	// recover from all events. Recovery still fails when the snapshot
	// passed over covered deleted events: when the event after the older
	// snapshot used (event 1 without one) was deleted, whether or not
	// events remain after the deletion.
	Optional bool
}

// Recovery configures how an entity starts.
//
// A recovery rebuilds the state from what the journal keeps, as Akka and
// Pekko do: events deleted with no snapshot covering them are skipped, the
// events that remain are applied to the snapshot's state (the empty state
// without one), and (without ToSequenceNr) the entity's sequence number is
// the highest the id ever stored, deleted events included, so its next
// event follows it. An id whose events were all deleted recovers the
// snapshot's state (or the empty state) at that number; once it has
// written again, it recovers that state with its new events applied.
type Recovery struct {
	// Disabled starts entities from the empty state and sequence number 0
	// without reading the journal or snapshots (for entities whose history
	// does not matter). Their writes still start at the highest number.
	Disabled bool
	// Snapshot selects the snapshot to start from; nil means
	// snapshot.Latest(). Use snapshot.None() to replay all events.
	Snapshot *snapshot.Criteria
	// ToSequenceNr, when positive, replays events only up to it.
	ToSequenceNr int64
}

func (b *Behavior[C, E, S]) validate() error {
	if err := annals.CheckEntityType(b.EntityType); err != nil {
		return fmt.Errorf("entity: Behavior.EntityType: %w", err)
	}
	switch {
	case b.Command == nil:
		return fmt.Errorf("entity: Behavior %q has no Command handler", b.EntityType)
	case b.Event == nil:
		return fmt.Errorf("entity: Behavior %q has no Event handler", b.EntityType)
	case b.Snapshots.Every < 0 || b.Snapshots.KeepLast < 0:
		return fmt.Errorf("entity: Behavior %q has a negative snapshot setting", b.EntityType)
	case b.Snapshots.KeepLast > 0 && b.Snapshots.Every == 0:
		return fmt.Errorf("entity: Behavior %q: Snapshots.KeepLast needs Snapshots.Every", b.EntityType)
	}
	return nil
}

func (b *Behavior[C, E, S]) empty() S {
	if b.EmptyState != nil {
		return b.EmptyState()
	}
	var s S
	return s
}

// Backoff is the restart schedule of HostConfig.Restart, the one
// projections use too: the delay starts at Min, doubles per consecutive
// failure up to Max, and is stretched by a random share of up to
// RandomFactor (Akka's RestartSettings). Zero Min and Max take
// DefaultRestartMin and DefaultRestartMax.
type Backoff = restart.Backoff

// The restart schedule's defaults, as projection's.
const (
	DefaultRestartMin = time.Second
	DefaultRestartMax = 30 * time.Second
)

// isConflict reports a write that met another writer's sequence number.
func isConflict(err error) bool { return errors.Is(err, journal.ErrSequenceConflict) }
