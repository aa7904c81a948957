package storetest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/memory"
	"github.com/annals-go/annals/storetest"
)

// Check runs the kit without go test: here the journal and snapshot
// suites against the memory store, one store per rule, the long rules
// left out, the whole run bounded by a context.
func ExampleCheck() {
	newStore := func(t storetest.T) *memory.Store {
		s := memory.New()
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	newJournal := func(t storetest.T) journal.Journal { return newStore(t).Journal() }
	newSnapshots := func(t storetest.T) snapshot.Store { return newStore(t).Snapshots() }

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := storetest.Check(ctx, storetest.Options{Short: true},
		storetest.JournalSuite(storetest.JournalHarnessFor[storetest.T]{
			New: newJournal, Own: newJournal,
			Capabilities:   storetest.Capabilities{GlobalOrdering: true},
			MaxPayloadSize: memory.DefaultMaxPayloadSize,
		}),
		storetest.SnapshotSuite(storetest.SnapshotHarnessFor[storetest.T]{New: newSnapshots, Own: newSnapshots}),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range rep.Results {
		if r.Outcome != storetest.Passed {
			fmt.Println(r.Name, r.Outcome) // r.Messages say why
		}
	}
	fmt.Println("failed:", rep.Failed())
	// Output:
	// journal/LargeReplayStreams skipped
	// failed: false
}
