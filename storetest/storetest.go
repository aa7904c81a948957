// Package storetest is the compliance kit for Annals stores: the Go
// counterpart of the Akka persistence TCK. A store plugin proves it keeps the
// storage contract by running the suites from its own tests:
//
//	func TestJournal(t *testing.T) {
//		storetest.RunJournal(t, storetest.JournalHarness{
//			New: func(t *testing.T) journal.Journal { ... a fresh or shared store ... },
//			Capabilities: storetest.Capabilities{GlobalOrdering: true},
//		})
//	}
//
// Each rule is one named subtest; a failure message states the rule it
// checks. Every subtest uses persistence ids of its own, so the suites may
// share one store (or one database) and run in parallel.
//
// Check runs the same rules without go test, for a program that checks a
// store as deployed (annals check): the suites are bound to their stores
// by JournalSuite and the others, whose harnesses' functions get a T (the
// part of *testing.T the kit uses) instead of a *testing.T, and Check
// returns a Report of every rule's outcome and messages.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Capabilities declares the optional behaviour a store has, so the kit
// checks it where present and skips it with a message where absent.
type Capabilities struct {
	// GlobalOrdering: the store assigns journal.Repr.Ordering, positive and
	// growing in write order across all ids.
	GlobalOrdering bool
	// SkipLargeReplay skips the 100,000-event replay rule (for stores whose
	// test servers are too slow for it); the rule still runs by default.
	SkipLargeReplay bool
	// StoreTimestamps: the store keeps its own clock's time of the write
	// as an event's timestamp, not the writer's (the r2dbc layout, as
	// akka-persistence-r2dbc does); FieldsRoundTrip checks that the
	// timestamps are that time, in UTC, and every other field as written.
	StoreTimestamps bool
}

// skipUnsupported skips t, the rule named name, when unsupported gives a
// reason for it.
// ruleTest runs run as the parallel subtest name of t, the way every
// suite runs its rules: a rule named in unsupported is skipped with the
// reason, and a failure ends with the rule's statement.
func ruleTest(t T, name, rule string, unsupported map[string]string, run func(t T)) {
	t.Helper()
	t.Run(name, func(t T) {
		t.Parallel()
		skipUnsupported(t, unsupported, name)
		defer func() {
			if t.Failed() {
				t.Logf("rule: %s", rule)
			}
		}()
		run(t)
	})
}

func skipUnsupported(t T, unsupported map[string]string, name string) {
	t.Helper()
	if reason, ok := unsupported[name]; ok {
		t.Skipf("unsupported by the store: %s", reason)
	}
}

// checkUnsupported fails t when unsupported names a rule the suite does
// not have.
func checkUnsupported(t T, unsupported map[string]string, names []string) {
	t.Helper()
	for name := range unsupported {
		if !slices.Contains(names, name) {
			t.Errorf("storetest: the harness declares rule %q unsupported, and the suite has no such rule", name)
		}
	}
}

// uniqueID returns a persistence id that no other test uses:
// "Kit<name>|<test>-<random>".
func uniqueID(t T, entityType string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", ".", " ", "_", "|", "_").Replace(t.Name())
	return fmt.Sprintf("%s|%s-%s", entityType, name, hex.EncodeToString(b[:]))
}

// testContext returns a context that ends with the test, bounded by the
// test's deadline when it has one.
func testContext(t T) context.Context {
	ctx := t.Context()
	if d, ok := t.deadline(); ok {
		c, cancel := context.WithDeadline(ctx, d.Add(-5*time.Second))
		t.Cleanup(cancel)
		return c
	}
	return ctx
}
