// Package journal defines the storage contract for event journals: the shape
// of a stored event, atomic writes, and the rules every store must keep.
//
// Stores implement [Journal]; the engine and entities above use it through
// the engine's journal front, never directly. A store moves bytes: it never
// serializes or deserializes user types.
package journal

import (
	"context"
	"iter"
	"time"
)

// Repr is one stored event: its identity, its serialized payload and the
// information the store keeps beside it.
//
// The writer fills PersistenceID, SequenceNr, Payload, SerializerID,
// Manifest, Timestamp, WriterID, Tags and Metadata. The store assigns
// Ordering, Slice and EntityType when it stores the event and returns them on
// replay; values a writer puts there are ignored.
type Repr struct {
	// PersistenceID names the entity's journal, "EntityType|EntityID" by
	// default. Never empty; valid UTF-8 without NUL bytes (every store
	// refuses other ids, see CheckPersistenceID).
	PersistenceID string
	// SequenceNr is the event's position in its journal: 1 for the first
	// event, growing by 1 per event.
	SequenceNr int64
	// Payload is the serialized event; stores keep it byte for byte.
	Payload []byte
	// SerializerID names the serializer that produced Payload.
	SerializerID int32
	// Manifest tells the serializer which type Payload holds; may be empty.
	Manifest string
	// Timestamp is the wall-clock time of the write. A zero Timestamp is
	// replaced by the store's clock. Stores keep at least microsecond
	// precision and return it in UTC.
	Timestamp time.Time
	// WriterID identifies the writer instance (an entity incarnation), so
	// that events from two writers of one id can be told apart.
	WriterID string
	// Tags label the event for queries by tag. Stores return them in the
	// order written; nil and empty are equivalent.
	Tags []string
	// Metadata is optional opaque bytes stored beside the event and returned
	// unchanged (nil when none).
	Metadata []byte

	// Ordering is the store's global position of the event, assigned at
	// write; 0 where the store has none. Where a store assigns it, it grows
	// in commit order and is never reused.
	Ordering int64
	// Slice is annals.Slice(PersistenceID), assigned by the store.
	Slice int
	// EntityType is annals.EntityType(PersistenceID), assigned by the store.
	EntityType string
}

// AtomicWrite holds the events of one persist call for one persistence id.
// They are stored all or none.
//
// Rules (checked by [CheckAtomicWrite]): PersistenceID is not empty; Events
// is not empty; every event carries the same PersistenceID; sequence numbers
// are positive and consecutive, ascending.
type AtomicWrite struct {
	PersistenceID string
	Events        []Repr
}

// Journal is the contract of an event journal store.
//
// Rules every implementation keeps (the compliance kit in package storetest
// checks each one):
//
//   - Write stores a batch of atomic writes. Each [AtomicWrite] is stored all
//     or nothing. The first result is nil when every write was stored, or has
//     exactly one entry per atomic write, in order: nil for stored, non-nil
//     for not stored. A non-nil entry wraps [ErrRejected] (the write was
//     refused and is definitely not stored: invalid, too large, ...); when
//     another writer already stored one of its sequence numbers it is a
//     [*ConflictError], which wraps both [ErrSequenceConflict] and
//     [ErrRejected]. A rejected write does not affect its neighbours. The
//     second result, when non-nil, means the outcome of the whole call is
//     unknown (connection lost, timeout, context ended): some, all or none of
//     the writes may be stored, and it is never reported as a rejection.
//     Write returns nil, nil only when every event will be seen by a later
//     Replay.
//   - Writes for one persistence id are applied in the order given, within a
//     call and across calls made one after another. The store enforces the
//     uniqueness of (persistence id, sequence number): a second write of a
//     stored number fails with a [*ConflictError], never a silent skip, and
//     leaves the stored event unchanged.
//   - Replay yields the events of persistenceID with from ≤ SequenceNr ≤ to,
//     ascending, at most max of them. from > to, or max = 0, yields nothing;
//     from below 1 is treated as 1. Deleted events are never yielded.
//     Replay streams: it holds a bounded number of events in memory whatever
//     the journal's length, and stops reading when the consumer stops. An
//     error is yielded once, as the last pair, with a zero Repr. Negative
//     to or max, or an empty id, yield an error wrapping [ErrInvalidArgument].
//     Replay honours ctx: once it ends, the iteration ends with ctx's error.
//   - HighestSequenceNr returns the largest sequence number ever stored for
//     persistenceID, 0 if none. It never decreases, also after DeleteTo
//     removed every event. from is a hint (the number the caller already
//     knows is stored); stores may use it to read less, never to return less
//     than the truth. It reflects every write the store has acknowledged.
//   - DeleteTo removes the events of persistenceID with SequenceNr ≤ to,
//     atomically. The highest sequence number is kept. Deleting what is
//     already gone, or beyond the highest number, is not an error.
//   - Every method fails with an error wrapping [ErrInvalidArgument] for an
//     empty persistence id, one that is not valid UTF-8 or holds a NUL byte
//     ([CheckPersistenceID]), or a negative bound, and stores nothing.
//   - Close releases the store's resources; calls after Close fail with
//     [ErrClosed].
//
// Implementations are safe for concurrent use.
type Journal interface {
	Write(ctx context.Context, writes []AtomicWrite) ([]error, error)
	Replay(ctx context.Context, persistenceID string, from, to, max int64) iter.Seq2[Repr, error]
	HighestSequenceNr(ctx context.Context, persistenceID string, from int64) (int64, error)
	DeleteTo(ctx context.Context, persistenceID string, to int64) error
	Close() error
}
