// Package membership is the storage contract of a cluster's members and
// leases: which processes run one service, and which of them owns each
// unit of work (a range of slices, a projection instance). Stores implement
// it with their own atomic operations (a transaction, a lightweight
// transaction, a write lock), so that a service shares its work out on the
// database it already runs, with no coordination server; package cluster
// runs members on it.
//
// Time is the store's: a lease or a membership expires when the store's
// clock passes its Expires, whatever the clocks of the members say. A
// member keeps its own bound on its own clock (see package cluster).
package membership

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Errors of the contract. Stores return them wrapped or as they are;
// errors.Is matches them.
var (
	// ErrNameTaken refuses a Join under the name of a live member of
	// another incarnation.
	ErrNameTaken = errors.New("membership: member name taken by a live member")
	// ErrNotMember refuses a Heartbeat of a member whose record is gone or
	// belongs to another incarnation: it was removed or replaced and must
	// join again.
	ErrNotMember = errors.New("membership: not a member")
	// ErrHeld refuses an Acquire of a lease another member holds and has
	// not let expire.
	ErrHeld = errors.New("membership: lease held by another member")
	// ErrNotHeld reports a TxChecker check of a lease the member no longer
	// holds at the epoch given: another member took it (or it was
	// released), so work done under it must not commit.
	ErrNotHeld = errors.New("membership: lease not held at this epoch")
	// ErrInvalid reports an argument the contract refuses: an empty name,
	// a lease time under MinTTL.
	ErrInvalid = errors.New("membership: invalid argument")
)

// MinTTL is the shortest lease and membership time a store accepts.
// Stores keep times at millisecond precision or coarser (Cassandra's TTL
// counts whole seconds), so shorter leases would not mean what they say.
const MinTTL = time.Second

// Member is one process of a cluster as the store records it.
type Member struct {
	// Name identifies the member in its cluster: leases are held by name
	// and incarnation.
	Name string
	// Incarnation tells two lives of one name apart: a process makes a
	// new one each time it starts, so that a restarted process never
	// believes it holds what its previous life held.
	Incarnation string
	// Address is where the member takes requests (host:port or a URL),
	// for others to forward to.
	Address string
	// Joined and Expires are the store's times of the member's join and
	// of the end of its last heartbeat's term (filled by reads).
	Joined, Expires time.Time
	// Live reports, at the read, that Expires had not passed on the
	// store's clock (filled by reads).
	Live bool
}

// Holder is the member identity that holds leases.
type Holder struct {
	Name, Incarnation string
}

// Holder returns m's identity as a lease holder.
func (m Member) Holder() Holder { return Holder{Name: m.Name, Incarnation: m.Incarnation} }

// Lease is one unit of work's ownership.
type Lease struct {
	// Name identifies the lease in its cluster.
	Name string
	// Owner holds the lease; zero when it was released or never taken.
	// An owner whose lease expired is still named here until another
	// takes it (Live tells).
	Owner Holder
	// Epoch grows by one on every change of owner (and never otherwise):
	// a fencing token. A lease never acquired has epoch 0.
	Epoch int64
	// Expires is the store's time at which the lease ends unless renewed.
	Expires time.Time
	// Live reports, at the read, that the lease was held and Expires had
	// not passed on the store's clock.
	Live bool
}

// Store keeps the members and leases of clusters, each cluster a name
// whose members and leases are apart from every other's.
//
// Rules (the compliance kit's membership suite, storetest.Run, checks
// them):
//   - Join records m (its name, incarnation and address) live for ttl. A
//     live member of the same name and another incarnation refuses it with
//     ErrNameTaken; a record of an expired one, or of the same
//     incarnation, is replaced.
//   - Heartbeat renews m's membership and every lease m holds (by name and
//     incarnation) for ttl from the store's now, in one atomic step, and
//     returns the leases it renewed, by name. A lease another member took
//     is not renewed and not returned. A record of m that is gone or of
//     another incarnation refuses it with ErrNotMember.
//   - Acquire gives lease name to m for ttl when it is free, expired, or
//     m's already; the epoch grows by one when the owner changes. A live
//     lease of another member refuses it with ErrHeld. It returns the
//     lease as stored.
//   - Release frees lease name if m holds it (Owner zero, epoch kept, so
//     the next owner's is higher); it is no error when m does not.
//   - Leave releases every lease m holds and removes m's record.
//   - Members and Leases read the cluster's records with Live computed on
//     the store's clock, ordered by name.
//   - Every operation is atomic with respect to every other on the same
//     cluster, from any process. Implementations are safe for concurrent
//     use.
type Store interface {
	Join(ctx context.Context, cluster string, m Member, ttl time.Duration) error
	Heartbeat(ctx context.Context, cluster string, m Holder, ttl time.Duration) ([]Lease, error)
	Leave(ctx context.Context, cluster string, m Holder) error
	Acquire(ctx context.Context, cluster, lease string, m Holder, ttl time.Duration) (Lease, error)
	Release(ctx context.Context, cluster, lease string, m Holder) error
	Members(ctx context.Context, cluster string) ([]Member, error)
	Leases(ctx context.Context, cluster string) ([]Lease, error)
}

// TxChecker is a Store whose leases can be checked inside a transaction of
// the store's database (Tx: the store's transaction type), where work done
// under a lease commits: a fencing token checked at the commit.
//
// Rule: CheckHeldTx returns nil when m holds lease at epoch, and an error
// wrapping ErrNotHeld otherwise; after a nil return no other member can
// take the lease until tx ends (the check holds the lease's row, or the
// database's write lock), so what tx commits was done by the lease's
// holder. An expired lease no other member has taken still counts as held.
type TxChecker[Tx any] interface {
	Store
	CheckHeldTx(ctx context.Context, tx Tx, cluster, lease string, m Holder, epoch int64) error
}

// CheckHolder returns an ErrInvalid error for an empty cluster name,
// member name or incarnation; stores call it before any operation.
func CheckHolder(cluster string, m Holder) error {
	switch {
	case cluster == "":
		return fmt.Errorf("%w: empty cluster name", ErrInvalid)
	case m.Name == "":
		return fmt.Errorf("%w: empty member name", ErrInvalid)
	case m.Incarnation == "":
		return fmt.Errorf("%w: member %q has an empty incarnation", ErrInvalid, m.Name)
	}
	return nil
}

// CheckTTL returns an ErrInvalid error for a lease or membership time under
// MinTTL; stores call it in Join, Heartbeat and Acquire.
func CheckTTL(ttl time.Duration) error {
	if ttl < MinTTL {
		return fmt.Errorf("%w: lease time %v is under %v", ErrInvalid, ttl, MinTTL)
	}
	return nil
}

// CheckLease returns an ErrInvalid error for an empty lease name.
func CheckLease(lease string) error {
	if lease == "" {
		return fmt.Errorf("%w: empty lease name", ErrInvalid)
	}
	return nil
}
