package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/store/sqlite"
)

// TestOrderingIsCommitOrderAcrossProcesses writes from two Stores on one
// file (as two processes would), and follows the events live from one of
// them: offsets must grow strictly, every event must arrive (those of the
// other Store through polling), each id in order.
func TestOrderingIsCommitOrderAcrossProcesses(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "shared.db")
	open := func() *sqlite.Store {
		s, err := sqlite.Open(ctx, path, sqlite.WithPollInterval(20*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	a, b := open(), open()
	const ids, perID = 40, 10
	live, stop := context.WithCancel(ctx)
	defer stop()
	stream := a.Queries().EventsBySlices(live, "P", 0, 1023, query.NoOffset())
	var wg sync.WaitGroup
	for w := range 8 {
		store := a
		if w%2 == 1 {
			store = b
		}
		wg.Go(func() {
			for s := int64(1); s <= perID; s++ {
				for i := w; i < ids; i += 8 {
					pid := fmt.Sprintf("P|%02d", i)
					res, err := store.Journal().Write(ctx, []journal.AtomicWrite{{PersistenceID: pid, Events: []journal.Repr{{PersistenceID: pid, SequenceNr: s, Payload: []byte("x")}}}})
					if err == nil && res != nil {
						err = res[0]
					}
					if err != nil {
						t.Errorf("write: %v", err)
						return
					}
				}
			}
		})
	}
	last := map[string]int64{}
	var prev int64
	n := 0
	for env := range stream.All() {
		if env.Offset.Sequence <= prev {
			t.Fatalf("offset %d after %d: orderings must grow in delivery order", env.Offset.Sequence, prev)
		}
		prev = env.Offset.Sequence
		if env.SequenceNr != last[env.PersistenceID]+1 {
			t.Fatalf("%s: event %d after %d", env.PersistenceID, env.SequenceNr, last[env.PersistenceID])
		}
		last[env.PersistenceID] = env.SequenceNr
		if n++; n == ids*perID {
			stop()
		}
	}
	wg.Wait()
	if n != ids*perID {
		t.Errorf("live query delivered %d events, want %d (%v)", n, ids*perID, stream.Err())
	}
}
