package journal

import (
	"context"
	"errors"
	"fmt"
)

// StoreErrors is the one rule by which a store maps the error of a failed
// call to the error the call returns. A store keeps one StoreErrors and
// passes every error of its driver (database, network, file) through
// [StoreErrors.Map], for its journal, snapshot, query, offset and operator
// calls alike. Classification only the store can make comes first, in the
// store (PostgreSQL's unique violation as a [*ConflictError], data the
// server refuses as a rejection, a Cassandra batch the node calls invalid
// as a rejection); its answers pass Map unchanged.
//
// The zero value names no store and is never closed.
type StoreErrors struct {
	// Store names the store in the errors Map wraps: "sqlite",
	// "postgres", "cassandra", "kafka journal".
	Store string
	// Closed reports whether the store's Close has been called; nil for a
	// store that cannot be closed under a call.
	Closed func() bool
}

// Map returns the error a call of operation op reports when it failed with
// err. closed is the closed error of the contract the call belongs to:
// [ErrClosed] for journal, query and offset calls, snapshot.ErrClosed for
// snapshot calls (nil means [ErrClosed]). The rules, the first that
// applies:
//
//  1. A nil err is nil.
//  2. An err that is already an answer of the contract is returned
//     unchanged: one that wraps [ErrRejected] (a rejection stays a
//     rejection: the write is definitely not stored, also when ctx ended
//     or the store was closed meanwhile; a [*ConflictError] wraps it too),
//     [ErrInvalidArgument], [ErrClosed] or closed.
//  3. When ctx has ended, ctx.Err() itself (context.Canceled or
//     context.DeadlineExceeded), not wrapped and not combined with err:
//     errors.Is matches it, and the caller's own cancellation or deadline
//     is not reported as a failure of the store (the engine's circuit
//     breaker does not count it).
//  4. When the store is closed (Closed reports true), closed itself: a
//     call that failed because Close released the driver reports that,
//     whatever the driver said.
//  5. Otherwise err wrapped with %w as "<Store>: <op>: <err>", naming the
//     store and the operation; errors.Is and errors.As still reach the
//     driver's error. The result is an outcome the store does not know
//     (for Write: some, all or none of the writes may be stored).
func (r StoreErrors) Map(ctx context.Context, op string, err, closed error) error {
	if closed == nil {
		closed = ErrClosed
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrRejected), errors.Is(err, ErrInvalidArgument), errors.Is(err, ErrClosed),
		errors.Is(err, closed):
		return err
	case ctx.Err() != nil:
		return ctx.Err()
	case r.Closed != nil && r.Closed():
		return closed
	case r.Store == "":
		return fmt.Errorf("%s: %w", op, err)
	}
	return fmt.Errorf("%s: %s: %w", r.Store, op, err)
}
