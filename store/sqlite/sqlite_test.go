package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/store/sqlite"
	"github.com/annals-go/annals/storetest"
)

// openTemp opens a store on a new file in the test's temporary directory.
func openTemp(t testing.TB, opts ...sqlite.Option) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "annals.db"), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// kitStore opens a store on a new file with the kit's payload limit, and
// returns it as the compliance kit checks it: every value it offers, and
// Open opening the file again.
func kitStore(t testing.TB) (*sqlite.Store, storetest.Store) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "annals.db")
	open := func(ctx context.Context) (*sqlite.Store, error) {
		return sqlite.Open(ctx, path, sqlite.WithMaxPayloadSize(storetest.KitMaxPayloadSize))
	}
	s, err := open(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, storetest.Store{
		Journal: s.Journal(), Snapshots: s.Snapshots(), Queries: s.Queries(), Recovery: s.Journal(),
		Offsets: s.Projections(), Durable: s.DurableState(), Membership: s.Membership(),
		Open: func(ctx context.Context) (storetest.Store, error) {
			o, err := open(ctx)
			if err != nil {
				return storetest.Store{}, err
			}
			return storetest.Store{Journal: o.Journal(), Snapshots: o.Snapshots(), Durable: o.DurableState(), Membership: o.Membership(), Close: o.Close}, nil
		},
		GlobalOrdering: true,
		MaxPayloadSize: storetest.KitMaxPayloadSize,
	}
}

// TestKit runs every suite of the compliance kit with every rule on one
// database file, in parallel: the single writer and the reader pool
// under concurrent load.
func TestKit(t *testing.T) {
	_, k := kitStore(t)
	storetest.Run(t, k)
}

// TestJournalAcross runs the kit's rules between two stores on one file,
// as two processes open it.
func TestJournalAcross(t *testing.T) {
	_, k := kitStore(t)
	o, err := k.Open(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = o.Close() })
	storetest.RunJournalAcross(t, k.Journal, o.Journal)
}

// TestKitThroughFront runs the journal, snapshot and recovery suites
// through a journal front before the store (which waits for an id's
// writes, then reads its recoveries through the store's reader).
func TestKitThroughFront(t *testing.T) {
	s, _ := kitStore(t)
	f, err := engine.NewFront(s.Journal(), engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	storetest.Run(t, storetest.Store{Journal: f, Snapshots: s.Snapshots(), Recovery: f, GlobalOrdering: true, MaxPayloadSize: storetest.KitMaxPayloadSize})
}

// TestReadsOnlyItsOwnSnapshots: the journal does not claim the snapshot
// store of another file's store.
func TestReadsOnlyItsOwnSnapshots(t *testing.T) {
	if openTemp(t).Journal().ReadsSnapshotsOf(openTemp(t).Snapshots()) {
		t.Error("ReadsSnapshotsOf(another file's snapshot store) = true, want false")
	}
}

// TestFrontReadsFitThePool: a journal front before the store takes its
// read bound from the read pool.
func TestFrontReadsFitThePool(t *testing.T) {
	for _, readers := range []int{1, 7} {
		s := openTemp(t, sqlite.WithReaders(readers))
		var _ engine.ReadCapacity = s.Journal()
		f, err := engine.NewFront(s.Journal(), engine.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		if got := f.Config().MaxReads; got != readers {
			t.Errorf("%d readers: the front's MaxReads = %d, want %d", readers, got, readers)
		}
	}
}
