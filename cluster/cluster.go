// Package cluster shares one service's work out over its processes, on the
// store the service already runs: members join and leave, the entities'
// slice ranges and the instances of daemons (projections) are held through
// leases the store keeps (membership.Store), each running on exactly one
// member at a time and moving, with a graceful hand-off, as members join,
// leave and fail. It is Akka Cluster Sharding and ShardedDaemonProcess
// without a cluster protocol of their own: membership in a table of the
// database, as Microsoft Orleans keeps it.
//
// # Units and defaults
//
// The 1,024 slices (annals.Slice) are split into Config.Ranges fixed ranges
// (default 32, a power of two), each one lease: an entity belongs to the
// range of its persistence id's slice, as in Akka's slice ranges, so one
// projection instance per range reads exactly one member's writes. Each
// live member aims at an even share of the ranges (and of each daemon's
// instances): the members sorted by name, the first Ranges mod n take one
// more. A member takes free ranges up to its share at once, and hands off
// ranges above its share only while another live member is short of its
// own, at most Config.MaxHandOffs at a time (default a tenth of the ranges,
// Akka's rebalance-relative-limit).
//
// A lease lasts Config.LeaseTime (default 10 s) on the store's clock and is
// renewed by heartbeat every Config.Heartbeat (default a fifth of it): a
// member that stops (SIGKILL, a partition) loses its ranges to the others
// within LeaseTime plus one heartbeat.
//
// # Fencing
//
// A member's right to write for a range ends on its own clock before the
// store's lease ends: each heartbeat or acquisition sent at local time t
// and answered with success holds the lease until t + LeaseTime - margin
// (margin a fifth of LeaseTime), measured on the monotonic clock, which
// keeps running while a process is stopped. The store's lease ends no
// sooner than LeaseTime after it received the call, so the member's term
// ends first whatever the clocks of the machines read. Every write of an
// entity of the range passes the range's fence as it leaves for the store
// (engine.Front.WriteFenced): after the term, writes fail with
// engine.ErrFenced and are not sent, so a member paused past its lease
// (SIGSTOP, a long garbage collection) writes nothing for the ranges it
// lost when it resumes.
//
// The fence also carries a fencing token: the lease's name and epoch
// (membership.Lease.Epoch, raised by every change of owner) and the
// member's identity. A journal that keeps the leases in its own database
// (journal.FencedWriter: PostgreSQL, SQLite, memory, each with the
// Membership of the same Store) checks the token in the transaction that
// stores the write and holds the lease's row until it commits, so a write
// that passed the clock check and then stalled (the process stopped right
// after it) is refused with journal.ErrFenced once another member took
// the range, and a take-over waits for writes already committing. The
// Kafka journal's members (package kafkacluster) have the brokers check
// it: each claims its partitions (kafka.Claim). On Cassandra, whose
// lightweight transactions cannot span the journal and the lease table,
// such a stalled write is the one the fence cannot stop; the journal's
// guard against two writers of one sequence number
// (journal.ErrSequenceConflict) refuses whichever write of a number comes
// second.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/membership"
)

// Defaults of Config.
const (
	DefaultCluster   = "default"
	DefaultLeaseTime = 10 * time.Second
	DefaultRanges    = 32
)

// Config configures a Member. Store, Name and Address are required.
type Config struct {
	// Store keeps the members and leases: the service's own store
	// (PostgreSQL, Cassandra, SQLite for processes on one machine).
	Store membership.Store
	// Cluster names the service's cluster in the store (default
	// DefaultCluster): services sharing a store use names of their own.
	Cluster string
	// Name identifies the member: unique among the live members (a pod's
	// name, a host:port). A process that joins under the name of a live
	// member is refused with membership.ErrNameTaken.
	Name string
	// Address is where the member takes forwarded requests (host:port or a
	// URL, see Handler).
	Address string
	// LeaseTime is how long a lease lasts without renewal on the store's
	// clock (default DefaultLeaseTime, at least membership.MinTTL).
	LeaseTime time.Duration
	// Heartbeat is the interval of renewals and of the member's look at
	// the cluster (default LeaseTime/5; less than LeaseTime/2).
	Heartbeat time.Duration
	// Ranges is the number of slice ranges, each a lease (default
	// DefaultRanges; it must divide 1,024). Every member of a cluster must
	// use the same number.
	Ranges int
	// MaxHandOffs bounds the ranges (and daemon instances) a member hands
	// off at once to make room for others (default Ranges/10, at least 1).
	MaxHandOffs int
	// HandOffTimeout bounds a graceful hand-off (default LeaseTime): when
	// it passes, the range's fence closes and its lease is released
	// anyway.
	HandOffTimeout time.Duration
	// Shards serve the ranges the member holds: each is given every range
	// the member gains (ServeRange) and asked to hand off every range it
	// gives up (HandOffRange). An entity.Host made with
	// HostConfig.Assigned is a Shard.
	Shards []Shard
	// DaemonsOnly makes a member that takes no slice range and shares its
	// daemons only (Shards must be empty). Every member of a cluster must
	// set it alike, since each shares the ranges among every live member:
	// Join refuses it with ErrDaemonsOnlyAmongShards while a live member
	// of the cluster holds a range.
	// A daemons-only cluster spreads projections over processes whose
	// entities are shared another way (the Kafka journal's consumer
	// group, or leases in another database); its leases belong in the
	// read model's database, where an exactly-once handler checks them
	// (membership.TxChecker).
	DaemonsOnly bool
	// Daemons run their instances spread over the members.
	Daemons []Daemon
	// Logger receives lease losses and failed store calls (default
	// slog.Default()).
	Logger *slog.Logger
	// Hooks are called on the member's events: each value for the hook
	// interfaces it implements (HookHeartbeat, HookLeaseAcquired,
	// HookLeaseReleased, HookLeaseLost, HookMembersChanged). A value that
	// implements none is refused.
	Hooks []any
}

// Shard serves slice ranges as a member gives and takes them.
type Shard interface {
	// ServeRange starts serving r; each write for it must pass fence:
	// fence.Open as it leaves for the store, and fence.Token where it
	// commits when the store keeps the member's leases
	// (journal.FencedWriter).
	ServeRange(r annals.SliceRange, fence journal.Fence) error
	// HandOffRange stops serving r gracefully and returns when nothing of
	// r runs any more, or with ctx's error.
	HandOffRange(ctx context.Context, r annals.SliceRange) error
}

// Daemon is work split into Instances parts, each run by exactly one
// member at a time (Akka's ShardedDaemonProcess): for example a
// projection's slice ranges.
type Daemon struct {
	// Name identifies the daemon in the cluster.
	Name string
	// Instances is the number of parts (at least 1).
	Instances int
	// Run runs one instance until ctx ends, which happens when the member
	// gives the instance up (a hand-off, Leave) or may have lost it (its
	// lease's term ended). When Run returns earlier, it is run again after
	// a heartbeat while the member holds the instance; its error is
	// logged. LeaseOf(ctx) names the instance's lease: work that commits
	// in the store's database checks it there (membership.TxChecker), as
	// the instance's context may end a moment after the lease did.
	Run func(ctx context.Context, instance int) error
}

// Owner is the member that holds a lease, as the member last read it.
type Owner struct {
	// Member and Address are the owner's name and address.
	Member, Address string
	// Epoch is the lease's epoch.
	Epoch int64
	// Local reports that the owner is this member and the lease's term
	// has not ended.
	Local bool
}

// LeaseLostError is the error of a fence whose lease's term has ended on
// the member's clock, or which the member gave up.
type LeaseLostError struct {
	Lease string
	Epoch int64
}

func (e *LeaseLostError) Error() string {
	return fmt.Sprintf("cluster: lease %s (epoch %d) is no longer held by this member", e.Lease, e.Epoch)
}

// Unwrap returns ErrLeaseLost.
func (e *LeaseLostError) Unwrap() error { return ErrLeaseLost }

// ErrLeaseLost is matched by every *LeaseLostError.
var ErrLeaseLost = errors.New("cluster: lease lost")

// ErrLeft is returned by calls on a Member that has left.
var ErrLeft = errors.New("cluster: member has left")

// check validates cfg and fills its defaults.
func (cfg *Config) check() error {
	switch {
	case cfg.Store == nil:
		return errors.New("cluster: Config.Store is nil")
	case cfg.Name == "":
		return errors.New("cluster: Config.Name is empty")
	case cfg.LeaseTime < 0 || cfg.Heartbeat < 0 || cfg.Ranges < 0 || cfg.MaxHandOffs < 0 || cfg.HandOffTimeout < 0:
		return errors.New("cluster: Config has a negative setting")
	}
	if cfg.Cluster == "" {
		cfg.Cluster = DefaultCluster
	}
	if cfg.LeaseTime == 0 {
		cfg.LeaseTime = DefaultLeaseTime
	}
	if cfg.LeaseTime < membership.MinTTL {
		return fmt.Errorf("cluster: Config.LeaseTime %v is under %v", cfg.LeaseTime, membership.MinTTL)
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = cfg.LeaseTime / 5
	}
	if cfg.Heartbeat >= cfg.LeaseTime/2 {
		return fmt.Errorf("cluster: Config.Heartbeat %v must be under half of LeaseTime %v", cfg.Heartbeat, cfg.LeaseTime)
	}
	if cfg.Ranges == 0 {
		cfg.Ranges = DefaultRanges
	}
	if _, err := annals.SliceRanges(cfg.Ranges); err != nil {
		return fmt.Errorf("cluster: Config.Ranges: %w", err)
	}
	if cfg.MaxHandOffs == 0 {
		cfg.MaxHandOffs = max(1, cfg.Ranges/10)
	}
	if cfg.HandOffTimeout == 0 {
		cfg.HandOffTimeout = cfg.LeaseTime
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.DaemonsOnly && len(cfg.Shards) > 0 {
		return errors.New("cluster: Config.DaemonsOnly with Shards: a daemons-only member serves no range")
	}
	names := map[string]bool{}
	for _, d := range cfg.Daemons {
		switch {
		case d.Name == "" || d.Run == nil || d.Instances < 1:
			return fmt.Errorf("cluster: Daemon %q needs a name, a Run function and at least one instance", d.Name)
		case names[d.Name]:
			return fmt.Errorf("cluster: two daemons are named %q", d.Name)
		}
		names[d.Name] = true
	}
	_, err := NewHooks("cluster: Config.Hooks", cfg.Hooks)
	return err
}

// ErrDaemonsOnlyAmongShards reports a DaemonsOnly member joining a cluster
// whose members serve slice ranges.
var ErrDaemonsOnlyAmongShards = errors.New("a daemons-only member among members with shards")

// RangeLease returns the name of the lease of slice range r.
func RangeLease(r annals.SliceRange) string {
	return fmt.Sprintf("slices/%04d-%04d", r.Min, r.Max)
}

// LeavingLease returns the name of the lease a member holds while it
// leaves (Member.Leave): the other members share the work without it from
// then on.
func LeavingLease(member string) string { return "leaving/" + member }

// DaemonLease returns the name of the lease of a daemon's instance.
func DaemonLease(daemon string, instance int) string {
	return fmt.Sprintf("daemon/%s/%d", daemon, instance)
}
