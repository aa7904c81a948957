package journal

import (
	"context"
	"errors"
	"fmt"
)

// ErrFenced marks writes made under a lease that is no longer the
// writer's: they are definitely not stored. Writers that meet it have lost
// the right to write for the ids concerned (another member may own them)
// and must stop writing for them.
var ErrFenced = errors.New("journal: write fenced off: the writer's lease is not held")

// Fence guards the writes of a writer whose right to write can end, such as
// the holder of a cluster lease (package cluster).
//
// Rules: Open, when set, is called right before the writes leave for the
// store; an error stops them there (not sent). Token, when not zero, names
// the lease, so that a store that keeps the lease itself (a [FencedWriter])
// checks it again where the writes commit. The zero Fence lets every write
// through.
type Fence struct {
	Open  func() error
	Token FenceToken
}

// FenceToken names a lease held at an epoch: a fencing token.
//
// Rules: Store is the membership store that keeps the lease (a
// membership.Store value, compared by the journal with its own); a journal
// checks only tokens of a store it shares a database with, and lets the
// others through (their fence's Open still applies). The zero token names
// no lease.
type FenceToken struct {
	Store                     any
	Cluster, Lease            string
	Holder, HolderIncarnation string
	Epoch                     int64
}

// IsZero reports whether t names no lease.
func (t FenceToken) IsZero() bool { return t.Lease == "" }

// FencedWriter is a Journal that checks fencing tokens where writes commit:
// a writer paused between its own check and the store (a stopped process,
// a long garbage collection) cannot store events under a lease another
// member took meanwhile.
//
// Rules (the compliance kit's fenced-writes suite, storetest.Run, checks
// them), beyond those of Write:
//   - tokens has one entry per atomic write (the zero token: none). A write
//     whose token is the journal's own store's and whose lease is not held
//     by the token's holder at the token's epoch where the call commits is
//     not stored; its result wraps both ErrFenced and ErrRejected. The
//     others are stored or refused as Write would.
//   - Until the call's writes commit, no other member can take a lease
//     whose token was checked: a take-over waits for them.
//   - A lease that expired but that no other member took still counts as
//     held (its holder's own fence ends its writes on its clock).
type FencedWriter interface {
	Journal
	WriteFenced(ctx context.Context, writes []AtomicWrite, tokens []FenceToken) ([]error, error)
}

// FencedError reports an atomic write refused because its lease was not
// held where it would commit. It wraps both [ErrFenced] and [ErrRejected].
type FencedError struct {
	PersistenceID string
	Token         FenceToken
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("journal: write of %q fenced off: lease %q of cluster %q is not held by %q at epoch %d",
		e.PersistenceID, e.Token.Lease, e.Token.Cluster, e.Token.Holder, e.Token.Epoch)
}

// Unwrap returns ErrFenced and ErrRejected.
func (e *FencedError) Unwrap() []error { return []error{ErrFenced, ErrRejected} }
