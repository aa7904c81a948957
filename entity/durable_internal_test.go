package entity

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/annals-go/annals/durable"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/store/memory"
	"github.com/annals-go/annals/store/sqlite"
)

// TestDurableJournalWriteGroups: the durable host's journal turns one
// group of the front's writes into state changes, through one Apply on a
// durable.Batcher (SQLite) or one call each on a plain store (memory), and
// answers each write alone: a malformed write is rejected before the
// store sees it, a stale revision is a *journal.ConflictError (the
// sequence conflict), an invalid id a rejection, and the others are
// stored; a store that fails the whole call fails the group.
func TestDurableJournalWriteGroups(t *testing.T) {
	reg := serialization.NewRegistry()
	if err := serialization.RegisterJSON[string](reg, "s"); err != nil {
		t.Fatal(err)
	}
	ser := changeSerializer{reg: reg}
	write := func(pid string, seq int64, state string) journal.AtomicWrite {
		t.Helper()
		b, err := ser.Marshal(StateChange[string]{state: state})
		if err != nil {
			t.Fatal(err)
		}
		return journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{{PersistenceID: pid, SequenceNr: seq, Payload: b}}}
	}
	stores := []struct {
		name string
		open func(t *testing.T) durable.Store
	}{
		{"sqlite (a Batcher)", func(t *testing.T) durable.Store {
			s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "d.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s.DurableState()
		}},
		{"memory", func(t *testing.T) durable.Store { return memory.New().DurableState() }},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			store := st.open(t)
			if err := store.Upsert(t.Context(), durable.Object{PersistenceID: "P|held", Revision: 1}); err != nil {
				t.Fatal(err)
			}
			j := &durableJournal{store: store, tag: "tag"}
			twoEvents := write("P|two", 1, "x")
			twoEvents.Events = append(twoEvents.Events, twoEvents.Events[0])
			writes := []journal.AtomicWrite{
				write("P|a", 1, "a"),
				twoEvents,               // rejected before the store
				write("P|held", 1, "h"), // stale: the store holds revision 1
				write("", 1, "empty"),   // an invalid id
				write("P|b", 1, "b"),
			}
			errs, err := j.Write(t.Context(), writes)
			if err != nil {
				t.Fatalf("Write: %v, want one answer per write", err)
			}
			var conflict *journal.ConflictError
			checks := []struct {
				what string
				ok   bool
			}{
				{"P|a stored", errs[0] == nil},
				{"two events rejected", errors.Is(errs[1], journal.ErrRejected) && !errors.As(errs[1], &conflict)},
				{"P|held a sequence conflict", errors.As(errs[2], &conflict) && conflict.PersistenceID == "P|held" && errors.Is(errs[2], durable.ErrRevisionConflict)},
				{"an empty id rejected", errors.Is(errs[3], journal.ErrRejected)},
				{"P|b stored", errs[4] == nil},
			}
			for _, c := range checks {
				if !c.ok {
					t.Errorf("%s: errs %v", c.what, errs)
				}
			}
			for pid, want := range map[string]string{"P|a": `"a"`, "P|b": `"b"`, "P|held": ""} {
				o, ok, err := store.Get(t.Context(), pid)
				if err != nil || !ok || string(o.Payload) != want || (want != "" && o.Tag != "tag") {
					t.Errorf("Get(%s) = %q tag %q (found %v, %v), want %q", pid, o.Payload, o.Tag, ok, err, want)
				}
			}

			// A closed store fails the whole group.
			if err := store.Close(); err != nil {
				t.Fatal(err)
			}
			if errs, err := j.Write(t.Context(), []journal.AtomicWrite{write("P|c", 1, "c")}); !errors.Is(err, durable.ErrClosed) || errs != nil {
				t.Errorf("Write on a closed store: %v, %v; want the call to fail with durable.ErrClosed", errs, err)
			}
		})
	}
}
