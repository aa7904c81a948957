package journal

import (
	"errors"
	"fmt"
)

var (
	// ErrRejected marks an atomic write that the store refused: it is
	// definitely not stored and will never be replayed.
	ErrRejected = errors.New("journal: write rejected")
	// ErrSequenceConflict marks a write of a sequence number that is already
	// stored for the persistence id, usually by another writer of that id.
	ErrSequenceConflict = errors.New("journal: sequence number already stored")
	// ErrInvalidArgument marks a call with an argument that breaks the
	// contract (empty id, negative bound, non-consecutive events, ...).
	ErrInvalidArgument = errors.New("journal: invalid argument")
	// ErrClosed is returned by calls on a closed journal.
	ErrClosed = errors.New("journal: closed")
)

// ConflictError reports that SequenceNr is already stored for
// PersistenceID. It wraps both [ErrSequenceConflict] and [ErrRejected]: the
// write that met it is definitely not stored.
type ConflictError struct {
	PersistenceID string
	SequenceNr    int64
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("journal: sequence number %d of %q is already stored (another writer of this id?)", e.SequenceNr, e.PersistenceID)
}

// Unwrap returns ErrSequenceConflict and ErrRejected.
func (e *ConflictError) Unwrap() []error { return []error{ErrSequenceConflict, ErrRejected} }

// Reject returns an error wrapping [ErrRejected] with a message formatted
// from format and args; %w in format wraps further causes.
func Reject(format string, args ...any) error {
	return &rejection{err: fmt.Errorf(format, args...)}
}

type rejection struct{ err error }

func (r *rejection) Error() string   { return "journal: write rejected: " + r.err.Error() }
func (r *rejection) Unwrap() []error { return []error{ErrRejected, r.err} }

// invalid returns an error wrapping ErrInvalidArgument.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}
