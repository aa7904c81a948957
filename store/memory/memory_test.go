package memory_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/recovery"
	"github.com/annals-go/annals/store/memory"
	"github.com/annals-go/annals/storetest"
)

// kitStore is s as the compliance kit checks it: every value it offers,
// and Open making another store (its data is its own).
func kitStore(s *memory.Store) storetest.Store {
	j, snaps := s.Journal(), s.Snapshots()
	return storetest.Store{
		Journal: j, Snapshots: snaps, Queries: s.Queries(), Recovery: recovery.ThreeCalls(j, snaps),
		Offsets: s.Projections(), Durable: s.DurableState(), Membership: s.Membership(),
		Open: func(context.Context) (storetest.Store, error) {
			o := memory.New()
			return storetest.Store{Journal: o.Journal(), Snapshots: o.Snapshots(), Durable: o.DurableState(), Close: o.Close}, nil
		},
		GlobalOrdering: true,
		Exceptions:     map[string]string{"membership/CloseEndsCalls": "the store's membership is the process's own: its calls do not end with the store's Close"},
	}
}

// TestKit runs every suite of the compliance kit on one store, the
// journal's recoveries read with three calls (recovery.ThreeCalls: the
// journal has no one-call read).
func TestKit(t *testing.T) {
	s := memory.New(memory.WithMaxPayloadSize(storetest.KitMaxPayloadSize))
	t.Cleanup(func() { _ = s.Close() })
	k := kitStore(s)
	k.MaxPayloadSize = storetest.KitMaxPayloadSize
	storetest.Run(t, k)
}

// TestCheck: every suite passes through storetest.Check, the kit's runner
// outside go test, as it does under go test, every suite reported.
func TestCheck(t *testing.T) {
	s := memory.New()
	t.Cleanup(func() { _ = s.Close() })
	k := kitStore(s)
	k.MaxPayloadSize = memory.DefaultMaxPayloadSize
	rep, err := storetest.Check(t.Context(), k, storetest.Options{Short: true})
	if err != nil {
		t.Fatal(err)
	}
	rules := map[string]int{}
	skipped := map[string]bool{}
	for _, r := range rep.Results {
		if r.Failed {
			t.Errorf("%s failed: %q", r.Name, r.Messages)
		}
		if suite, _, ok := strings.Cut(r.Name, "/"); ok && strings.Count(r.Name, "/") == 1 {
			rules[suite]++
		}
		skipped[r.Name] = r.Skipped
	}
	if !skipped["journal/LargeReplayStreams"] || !skipped["membership/CloseEndsCalls"] {
		t.Error("Options.Short did not skip LargeReplayStreams, or the exception membership/CloseEndsCalls did not skip it")
	}
	for _, suite := range []string{"journal", "snapshots", "recovery", "queries", "batch-queries", "offsets", "durable", "membership", "fenced-writes"} {
		if rules[suite] < 2 {
			t.Errorf("suite %s reported %d rules", suite, rules[suite])
		}
	}
}

func TestOptions(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	s := memory.New(memory.WithMaxPayloadSize(4), memory.WithClock(func() time.Time { return at }))
	ev := func(seq int64, payload string) journal.AtomicWrite {
		return journal.AtomicWrite{PersistenceID: "p", Events: []journal.Repr{{PersistenceID: "p", SequenceNr: seq, Payload: []byte(payload)}}}
	}
	res, err := s.Journal().Write(t.Context(), []journal.AtomicWrite{ev(1, "abcd"), ev(2, "abcde")})
	if err != nil || len(res) != 2 || res[0] != nil || !errors.Is(res[1], journal.ErrRejected) {
		t.Fatalf("results %v, %v: want the 5-byte payload rejected", res, err)
	}
	for r, err := range s.Journal().Replay(t.Context(), "p", 1, 1, 1) {
		if err != nil || !r.Timestamp.Equal(at) {
			t.Errorf("timestamp %v (%v), want the clock's %v", r.Timestamp, err, at)
		}
	}
}
