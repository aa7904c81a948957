// Package storetest is the compliance kit for Annals stores: the Go
// counterpart of the Akka persistence TCK. A store proves it keeps the
// storage contracts by describing itself as a Store, the values it hands
// out, and running the kit on it from its tests:
//
//	func TestKit(t *testing.T) {
//		s := memory.New(memory.WithMaxPayloadSize(storetest.KitMaxPayloadSize))
//		t.Cleanup(func() { _ = s.Close() })
//		storetest.Run(t, storetest.Store{
//			Journal: s.Journal(), Snapshots: s.Snapshots(), Queries: s.Queries(),
//			GlobalOrdering: true, MaxPayloadSize: storetest.KitMaxPayloadSize,
//		})
//	}
//
// The kit has a suite per contract, named after it: "journal",
// "snapshots", "recovery", "queries", "batch-queries", "offsets",
// "durable", "membership" and "fenced-writes". It runs the suites of the
// values a Store has, each rule as a named, parallel subtest of its suite
// whose failure message states the rule it checks. Every rule uses
// persistence ids (projection ids, cluster names) of its own, so all of
// them share the Store's values.
//
// Run runs the kit under go test; Check runs the same rules without it,
// for a program that checks a store as deployed (annals check), and
// returns a Report of every rule. RunMembershipAcross runs the rules that
// hold between two membership stores on one database.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/annals-go/annals/durable"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/membership"
	"github.com/annals-go/annals/offsets"
	"github.com/annals-go/annals/recovery"
	"github.com/annals-go/annals/snapshot"
)

// Store is a store as the kit checks it: the values it hands out, each
// optional, and what it declares about itself. The rules:
//
//   - The kit runs the suite of each value set (the batch-queries suite
//     when Queries offers events by tag or by slices; the fenced-writes
//     suite when Journal is a journal.FencedWriter and Membership or Claim
//     is set),
//     and no other.
//   - Every rule of every suite shares the values, from parallel
//     goroutines; the kit never closes them.
//   - Queries needs Journal, and Recovery needs Journal and Snapshots: the
//     rules write through them.
type Store struct {
	// Journal is checked by the journal suite.
	Journal journal.Journal
	// Snapshots is checked by the snapshots suite.
	Snapshots snapshot.Store
	// Queries is the read journal over Journal's events, offering any of
	// the query capabilities (query.EventsByTagQuery, ...): the queries
	// suite checks those it offers, and skips the rules of the others.
	Queries any
	// Recovery reads the recoveries of Journal's events and Snapshots'
	// snapshots: the journal itself, recovery.ThreeCalls(Journal,
	// Snapshots), or an engine.Front before the journal (set as Journal
	// too). The recovery suite checks each read against recovery.Read of
	// the same history.
	Recovery recovery.Reader
	// Offsets is checked by the offsets suite; when it is an
	// offsets.TxStore (of any Tx type), its transactions are too.
	Offsets offsets.Store
	// Durable is checked by the durable suite, with its change queries
	// and durable.Batcher where it offers them.
	Durable durable.Store
	// Membership is checked by the membership suite.
	Membership membership.Store
	// Claim, when set, makes a new owner of the unit of ownership that
	// persistenceID belongs to (a Kafka journal's claim of the id's
	// partition, say), fencing off every earlier owner of it, and returns
	// the token the new owner's writes carry in
	// journal.FencedWriter.WriteFenced. The fenced-writes suite's owner
	// rules make owners with it; without it, and with Membership set, they
	// take a lease of Membership over from its holder instead.
	Claim func(ctx context.Context, persistenceID string) (journal.FenceToken, error)

	// Open, when set, opens another instance of the store (a pool,
	// session or file handle of its own, on the same data or not) for one
	// rule: the rules that check calls after Close (CloseEndsCalls of the
	// journal, snapshots, durable and membership suites) close it. The
	// instance must have the values those rules close, and Close set; the
	// kit calls its Close when the rule ends. ctx ends with the rule.
	// Without Open those rules are skipped.
	Open func(ctx context.Context) (Store, error)
	// Close closes the store's values. The kit calls it on the instances
	// Open returns only, never on the Store given to Run or Check, and
	// after a rule may have closed the instance's values itself (so it
	// must then be harmless).
	Close func() error

	// GlobalOrdering declares that Journal assigns journal.Repr.Ordering,
	// positive and growing in write order across all ids; the journal
	// suite checks it.
	GlobalOrdering bool
	// StoreTimestamps declares that Journal keeps its own clock's time of
	// the write as an event's timestamp, not the writer's (the r2dbc
	// layout, as akka-persistence-r2dbc does): FieldsRoundTrip checks
	// that the timestamps are that time, in UTC, and every other field as
	// written.
	StoreTimestamps bool
	// IDsInStoreOrder declares that the persistence ids query lists ids
	// in an order of the store's own (Cassandra's token order) rather
	// than ascending; paging by the last id returned must still list each
	// id once.
	IDsInStoreOrder bool
	// MaxPayloadSize is the largest event payload, in bytes, Journal
	// accepts (its limit option, or its default): the
	// OversizedWriteAmongSmall rule writes one byte more. 0 skips that
	// rule with a message saying so. Under go test, open the store with
	// KitMaxPayloadSize: the rule holds its payload while
	// LargeReplayStreams, in the same process, measures the heap.
	MaxPayloadSize int
	// Exceptions names the rules the kit skips for the store, as
	// "suite/Rule" (such as "snapshots/LoadLatest"), or whole suites, by
	// their names, each with the reason it is skipped with: rules the
	// store cannot keep by design, or suites its tests run elsewhere. A
	// name the kit has no rule or suite of makes the Store invalid, so
	// that a renamed rule is not skipped silently.
	Exceptions map[string]string
}

// KitMaxPayloadSize is the payload limit to open a store with for the
// journal suite under go test (1 MiB): small enough that the
// OversizedWriteAmongSmall rule's payload does not weigh on the heap
// LargeReplayStreams measures in the same process.
const KitMaxPayloadSize = 1 << 20

// Run runs the kit on s under go test: a subtest of t for each suite the
// values of s offer, one parallel subtest of it per rule. Run fails t,
// and runs no rule, when s is invalid (see Store).
func Run(t *testing.T, s Store) {
	t.Helper()
	if err := s.validate(); err != nil {
		t.Fatal(err)
	}
	runStore(testingT{t}, s)
}

// rule is one rule of a suite: the parallel subtest name, whose failure
// ends with its statement.
type rule struct {
	name, statement string
	run             func(t tb)
}

// suite is one contract's rules.
type suite struct {
	name string
	// offered reports whether s has the values the suite checks.
	offered func(s Store) bool
	// rules returns the suite's rules over the values of s. It is called
	// with any Store (the zero one to list the names), and its rules run
	// only when offered.
	rules func(s Store) []rule
}

// suites is the index of the kit's suites, in the order they run.
func suites() []suite {
	return []suite{
		{"journal", func(s Store) bool { return s.Journal != nil }, journalRules},
		{"snapshots", func(s Store) bool { return s.Snapshots != nil }, snapshotRules},
		{"recovery", func(s Store) bool { return s.Recovery != nil }, recoveryRules},
		{"queries", func(s Store) bool { return s.Queries != nil }, queryRules},
		{"batch-queries", func(s Store) bool { return len(offsetQueries(s.Queries, "", "")) > 0 }, batchQueryRules},
		{"offsets", func(s Store) bool { return s.Offsets != nil }, offsetRules},
		{"durable", func(s Store) bool { return s.Durable != nil }, durableRules},
		{"membership", func(s Store) bool { return s.Membership != nil }, membershipRules},
		{"fenced-writes", func(s Store) bool {
			_, fenced := s.Journal.(journal.FencedWriter)
			return fenced && (s.Membership != nil || s.Claim != nil)
		}, fenceRules},
	}
}

// validate returns what makes s invalid, if anything.
func (s Store) validate() error {
	var errs []error
	if s.Queries != nil && s.Journal == nil {
		errs = append(errs, errors.New("storetest: Store.Queries is set and Store.Journal is not: the query rules write through the journal"))
	}
	if s.Recovery != nil && (s.Journal == nil || s.Snapshots == nil) {
		errs = append(errs, errors.New("storetest: Store.Recovery is set without Store.Journal and Store.Snapshots: the recovery rules write through them"))
	}
	known := map[string]bool{}
	for _, su := range suites() {
		known[su.name] = true
		for _, r := range su.rules(Store{}) {
			known[su.name+"/"+r.name] = true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(s.Exceptions)) {
		switch {
		case !known[name]:
			errs = append(errs, fmt.Errorf("storetest: Store.Exceptions names %q, and the kit has no such rule or suite (names are suite/Rule, or suite)", name))
		case s.Exceptions[name] == "":
			errs = append(errs, fmt.Errorf("storetest: Store.Exceptions gives no reason for %q", name))
		}
	}
	return errors.Join(errs...)
}

// runStore runs the suites s offers, each a subtest of t.
func runStore(t tb, s Store) {
	t.Helper()
	for _, su := range suites() {
		if !su.offered(s) {
			continue
		}
		t.Run(su.name, func(t tb) {
			if reason := s.Exceptions[su.name]; reason != "" {
				t.Skipf("unsupported by the store: %s", reason)
			}
			for _, r := range su.rules(s) {
				runRule(t, r, s.Exceptions[su.name+"/"+r.name])
			}
		})
	}
}

// runRule runs r as a parallel subtest of t: skipped with the reason
// exception gives when it gives one, and ended with the rule's statement
// when it fails.
func runRule(t tb, r rule, exception string) {
	t.Helper()
	t.Run(r.name, func(t tb) {
		t.Parallel()
		if exception != "" {
			t.Skipf("unsupported by the store: %s", exception)
		}
		defer func() {
			if t.Failed() {
				t.Logf("rule: %s", r.statement)
			}
		}()
		r.run(t)
	})
}

// own returns an instance of the store of t's own (Store.Open), which is
// closed when t ends; it skips t when s has no Open.
func own(t tb, s Store) Store {
	t.Helper()
	if s.Open == nil {
		t.Skip("Store.Open is nil: the rule needs an instance of its own to close")
	}
	o, err := s.Open(testContext(t))
	if err != nil {
		t.Fatalf("Store.Open: %v", err)
	}
	if o.Close == nil {
		t.Fatal("storetest: the Store that Store.Open returned has no Close")
	}
	t.Cleanup(func() {
		if err := o.Close(); err != nil {
			t.Errorf("closing the instance Store.Open returned: %v", err)
		}
	})
	return o
}

// uniqueID returns a persistence id that no other test uses:
// "Kit<name>|<test>-<random>".
func uniqueID(t tb, entityType string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", ".", " ", "_", "|", "_").Replace(t.Name())
	return fmt.Sprintf("%s|%s-%s", entityType, name, hex.EncodeToString(b[:]))
}

// testContext returns a context that ends with the test, bounded by the
// test's deadline when it has one.
func testContext(t tb) context.Context {
	ctx := t.Context()
	if d, ok := t.deadline(); ok {
		c, cancel := context.WithDeadline(ctx, d.Add(-5*time.Second))
		t.Cleanup(cancel)
		return c
	}
	return ctx
}
