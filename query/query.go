// Package query defines persistence queries: envelopes, offsets, and the
// read-journal capabilities a store may offer, each as a small interface
// found by type assertion. Every query comes in two forms: a current query
// ends at the present (events stored before it started), a live query
// follows new events until its context ends.
//
// Offsets are exclusive: a query from offset o returns the events after o,
// so a consumer that stores the offset of the last envelope it handled
// resumes without repeats or gaps.
package query

import (
	"context"
	"errors"
	"iter"
	"time"

	"github.com/annals-go/annals/journal"
)

// ErrUnsupportedOffset: the store cannot resume from this kind of offset.
var ErrUnsupportedOffset = errors.New("query: unsupported offset")

// Envelope is one event as a query returns it: the stored event and the
// offset to resume after it. The payload is not decoded: decode it with a
// serialization.Registry (DeserializeRepr(env.Repr())).
type Envelope struct {
	Offset        Offset
	PersistenceID string
	SequenceNr    int64
	Timestamp     time.Time
	EntityType    string
	Slice         int
	Tags          []string
	Payload       []byte
	SerializerID  int32
	Manifest      string
	WriterID      string
	Metadata      []byte
}

// FromRepr builds the envelope of a stored event at offset o.
func FromRepr(r journal.Repr, o Offset) Envelope {
	return Envelope{Offset: o, PersistenceID: r.PersistenceID, SequenceNr: r.SequenceNr, Timestamp: r.Timestamp, EntityType: r.EntityType, Slice: r.Slice, Tags: r.Tags, Payload: r.Payload, SerializerID: r.SerializerID, Manifest: r.Manifest, WriterID: r.WriterID, Metadata: r.Metadata}
}

// FromReplay turns a journal replay into the envelopes of a current query
// by persistence id, each at the offset offset gives its event; an error
// ends the sequence as the replay's does.
func FromReplay(replay iter.Seq2[journal.Repr, error], offset func(journal.Repr) Offset) iter.Seq2[Envelope, error] {
	return func(yield func(Envelope, error) bool) {
		for r, err := range replay {
			if err != nil {
				yield(Envelope{}, err)
				return
			}
			if !yield(FromRepr(r, offset(r)), nil) {
				return
			}
		}
	}
}

// Repr returns the stored event of the envelope (Ordering is the sequence
// offset's value, or 0).
func (e Envelope) Repr() journal.Repr {
	return journal.Repr{PersistenceID: e.PersistenceID, SequenceNr: e.SequenceNr, Payload: e.Payload, SerializerID: e.SerializerID, Manifest: e.Manifest, Timestamp: e.Timestamp, WriterID: e.WriterID, Tags: e.Tags, Metadata: e.Metadata, Ordering: e.Offset.Sequence, Slice: e.Slice, EntityType: e.EntityType}
}

// EventsByPersistenceIDQuery reads one entity's events in sequence order.
// Deleted events are not returned. from and to are inclusive sequence
// numbers; to = math.MaxInt64 means no upper bound. The live form ends when
// it has returned the event at to.
type EventsByPersistenceIDQuery interface {
	CurrentEventsByPersistenceID(ctx context.Context, persistenceID string, from, to int64) iter.Seq2[Envelope, error]
	EventsByPersistenceID(ctx context.Context, persistenceID string, from, to int64) *Stream[Envelope]
}

// EventsByTagQuery reads the events carrying a tag, in the store's offset
// order, after an offset.
type EventsByTagQuery interface {
	CurrentEventsByTag(ctx context.Context, tag string, after Offset) iter.Seq2[Envelope, error]
	EventsByTag(ctx context.Context, tag string, after Offset) *Stream[Envelope]
}

// EventsBySlicesQuery reads the events of one entity type whose slices lie
// in [minSlice, maxSlice], in the store's offset order, after an offset.
// Within one persistence id, events come in sequence order.
type EventsBySlicesQuery interface {
	CurrentEventsBySlices(ctx context.Context, entityType string, minSlice, maxSlice int, after Offset) iter.Seq2[Envelope, error]
	EventsBySlices(ctx context.Context, entityType string, minSlice, maxSlice int, after Offset) *Stream[Envelope]
}

// PersistenceIDsQuery lists persistence ids, each once. The current form
// pages: ids greater than afterID, ascending, at most limit (limit ≤ 0: no
// limit); an empty entityType lists every type. The live form lists the ids
// known when it starts, then each new id as its first event is stored.
type PersistenceIDsQuery interface {
	CurrentPersistenceIDs(ctx context.Context, entityType, afterID string, limit int) ([]string, error)
	PersistenceIDs(ctx context.Context, entityType string) *Stream[string]
}

// DurableStateChangesBySlicesQuery reads the changes of durable-state
// objects (durable.Store) of one entity type whose slices lie in
// [minSlice, maxSlice], in the store's offset order, after an offset
// (Akka's DurableStateStoreBySliceQuery). An envelope is an object's state
// at one revision: SequenceNr is the revision, Payload, SerializerID and
// Manifest the stored state, Tags its tag (none when it has none), and
// Timestamp when it was stored. Rules, besides those of the event queries:
//
//   - A change query returns each object's latest revision: a revision
//     replaced before the query reached it is not returned (objects are
//     stored in place), so consecutive envelopes of one id may skip
//     revisions. Of one id, a query never returns a change older than
//     one it returned, nor one twice: revisions ascend, except that an
//     object written again after a delete starts again at revision 1.
//   - Once a revision is stored, a live query returns it or a later
//     revision of its id, within the store's rule for late commits (the
//     same as its event queries': on PostgreSQL, changes whose
//     transactions commit within the backtracking distance); a current
//     query returns at least the revisions stored before it started that
//     are still stored.
//   - Deleted objects are not returned: a delete removes the object, as
//     Pekko's store does, and leaves no change to read.
type DurableStateChangesBySlicesQuery interface {
	CurrentChangesBySlices(ctx context.Context, entityType string, minSlice, maxSlice int, after Offset) iter.Seq2[Envelope, error]
	ChangesBySlices(ctx context.Context, entityType string, minSlice, maxSlice int, after Offset) *Stream[Envelope]
}

// DurableStateChangesByTagQuery reads the changes of the durable-state
// objects whose tag is tag, in the store's offset order, after an offset
// (Akka's DurableStateStoreQuery changes), under the rules of
// DurableStateChangesBySlicesQuery.
type DurableStateChangesByTagQuery interface {
	CurrentChangesByTag(ctx context.Context, tag string, after Offset) iter.Seq2[Envelope, error]
	ChangesByTag(ctx context.Context, tag string, after Offset) *Stream[Envelope]
}
