// Package snapshot defines the storage contract for snapshot stores: the
// shape of a stored snapshot, selection criteria, and the rules every store
// must keep.
package snapshot

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

var (
	// ErrInvalidArgument marks a call with an argument that breaks the
	// contract (empty id, negative sequence number).
	ErrInvalidArgument = errors.New("snapshot: invalid argument")
	// ErrClosed is returned by calls on a closed store.
	ErrClosed = errors.New("snapshot: closed")
)

// Metadata identifies a snapshot: the entity, the sequence number of the last
// event it includes, and the time it was taken.
type Metadata struct {
	PersistenceID string
	SequenceNr    int64
	// Timestamp is when the snapshot was taken. On Save, a zero Timestamp is
	// replaced by the store's clock. Stores keep at least microsecond
	// precision and return it in UTC.
	Timestamp time.Time
}

// Snapshot is one stored snapshot: its metadata and serialized state.
type Snapshot struct {
	Metadata     Metadata
	Payload      []byte
	SerializerID int32
	Manifest     string
}

// Criteria selects snapshots of one persistence id. A snapshot matches when
// MinSequenceNr ≤ SequenceNr ≤ MaxSequenceNr and MinTimestamp ≤ Timestamp ≤
// MaxTimestamp.
//
// A zero MaxTimestamp means no upper time bound, and a zero MinTimestamp no
// lower one. MaxSequenceNr is always a bound: 0 matches only a snapshot
// saved at sequence number 0 (the state before any event), and a negative
// one matches nothing, as [None] does. Use [Latest] for "the youngest of
// all".
type Criteria struct {
	MaxSequenceNr int64
	MaxTimestamp  time.Time
	MinSequenceNr int64
	MinTimestamp  time.Time
}

// Latest selects the youngest snapshot of all.
func Latest() Criteria { return Criteria{MaxSequenceNr: math.MaxInt64} }

// None selects no snapshot, not even one saved at sequence number 0
// (recovery then replays every event).
func None() Criteria { return Criteria{MaxSequenceNr: -1} }

// Matches reports whether a snapshot with metadata m is selected by c.
func (c Criteria) Matches(m Metadata) bool {
	if m.SequenceNr > c.MaxSequenceNr || m.SequenceNr < c.MinSequenceNr {
		return false
	}
	if !c.MaxTimestamp.IsZero() && m.Timestamp.After(c.MaxTimestamp) {
		return false
	}
	if !c.MinTimestamp.IsZero() && m.Timestamp.Before(c.MinTimestamp) {
		return false
	}
	return true
}

// Store is the contract of a snapshot store.
//
// Rules every implementation keeps (the compliance kit in package storetest
// checks each one):
//
//   - Save stores s. A snapshot with the same persistence id and sequence
//     number is overwritten (payload, serializer, manifest and timestamp).
//   - Load returns the youngest snapshot of persistenceID matching c (the
//     highest sequence number; among equals, the latest timestamp) and true,
//     or false when none matches. The payload is returned byte for byte.
//   - Delete removes the snapshot with m's persistence id and sequence
//     number. A zero m.Timestamp matches any timestamp; otherwise only a
//     snapshot with exactly that timestamp is removed. Deleting what does
//     not exist is not an error.
//   - DeleteMatching removes every snapshot of persistenceID matching c and
//     keeps the others.
//   - Every method fails with an error wrapping [ErrInvalidArgument] for an
//     empty persistence id or a negative sequence number, and changes
//     nothing.
//   - Close releases the store's resources; calls after Close fail with
//     [ErrClosed].
//
// Implementations are safe for concurrent use.
type Store interface {
	Load(ctx context.Context, persistenceID string, c Criteria) (Snapshot, bool, error)
	Save(ctx context.Context, s Snapshot) error
	Delete(ctx context.Context, m Metadata) error
	DeleteMatching(ctx context.Context, persistenceID string, c Criteria) error
	Close() error
}

// CheckID returns an error wrapping [ErrInvalidArgument] when persistenceID
// is empty or seq is negative; op names the operation in the message.
func CheckID(op, persistenceID string, seq int64) error {
	switch {
	case persistenceID == "":
		return fmt.Errorf("%w: %s of an empty persistence id", ErrInvalidArgument, op)
	case seq < 0:
		return fmt.Errorf("%w: %s of %q with negative sequence number %d", ErrInvalidArgument, op, persistenceID, seq)
	}
	return nil
}

// CheckSave returns an error wrapping [ErrInvalidArgument] when snap cannot
// be saved: an empty persistence id, a negative sequence number, or a
// payload larger than maxPayload bytes.
func CheckSave(snap Snapshot, maxPayload int) error {
	m := snap.Metadata
	if err := CheckID("save", m.PersistenceID, m.SequenceNr); err != nil {
		return err
	}
	if len(snap.Payload) > maxPayload {
		return fmt.Errorf("%w: snapshot of %q at %d has a %d-byte payload, above the limit of %d bytes", ErrInvalidArgument, m.PersistenceID, m.SequenceNr, len(snap.Payload), maxPayload)
	}
	return nil
}

// UnixNanos returns t as Unix nanoseconds, for stores that keep timestamps
// as int64 nanoseconds; false when t lies outside the years 1678–2262 an
// int64 holds.
func UnixNanos(t time.Time) (int64, bool) {
	if t.Before(time.Unix(0, math.MinInt64)) || t.After(time.Unix(0, math.MaxInt64)) {
		return 0, false
	}
	return t.UnixNano(), true
}

// UnixNanoBounds returns c's timestamp bounds as Unix nanoseconds, for
// stores that keep timestamps as int64 nanoseconds: a zero bound is the
// int64 extreme, and a bound outside the int64 years is clamped to it
// (no stored timestamp lies beyond it).
func (c Criteria) UnixNanoBounds() (minTS, maxTS int64) {
	clamp := func(t time.Time) int64 {
		if n, ok := UnixNanos(t); ok {
			return n
		}
		if t.Before(time.Unix(0, 0)) {
			return math.MinInt64
		}
		return math.MaxInt64
	}
	minTS, maxTS = math.MinInt64, math.MaxInt64
	if !c.MinTimestamp.IsZero() {
		minTS = clamp(c.MinTimestamp)
	}
	if !c.MaxTimestamp.IsZero() {
		maxTS = clamp(c.MaxTimestamp)
	}
	return minTS, maxTS
}
