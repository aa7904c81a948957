package storetest

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/annals-go/annals/durable"
	"github.com/annals-go/annals/query"
)

type durableRule struct {
	name string
	rule string
	run  func(t tb, s durable.Store)
}

// durableRules is the durable suite: the rules of durable.Store over
// s.Durable (those of Pekko's DurableStateStore spec, and writers
// racing), of its change queries and of durable.Batcher (skipped where it
// offers none), and CloseEndsCalls over an instance of s.Open's.
func durableRules(st Store) []rule {
	var rules []rule
	for _, r := range slices.Concat(durableCases(), changeRules(), batchRules()) {
		rules = append(rules, rule{r.name, r.rule, func(t tb) { r.run(t, st.Durable) }})
	}
	return append(rules, rule{"CloseEndsCalls", "calls and change queries after Close fail with an error wrapping durable.ErrClosed (arguments are checked first), and a second Close is harmless", func(t tb) {
		s := own(t, st).Durable
		if s == nil {
			t.Fatal("storetest: the Store that Store.Open returned has no Durable")
		}
		pid := uniqueID(t, "KitDurable")
		upsert(t, s, obj(pid, 1, "a"))
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("a second Close: %v, want nil", err)
		}
		ctx := testContext(t)
		_, _, getErr := s.Get(ctx, pid)
		for call, err := range map[string]error{
			"Get":    getErr,
			"Upsert": s.Upsert(ctx, obj(pid, 2, "b")),
			"Delete": s.Delete(ctx, pid, 2),
		} {
			if !errors.Is(err, durable.ErrClosed) {
				t.Errorf("%s after Close: %v, want an error wrapping durable.ErrClosed", call, err)
			}
		}
		// Arguments are checked first, also on a closed store.
		if err := s.Upsert(ctx, obj("", 1, "x")); !errors.Is(err, durable.ErrInvalidArgument) {
			t.Errorf("Upsert of an empty id after Close: %v, want an error wrapping durable.ErrInvalidArgument", err)
		}
		// Change queries end with durable.ErrClosed.
		for _, q := range offeredChangeQueries(s, "KitClosed", "kit-closed") {
			var err error
			for _, e := range q.current(ctx, query.NoOffset()) {
				if e != nil {
					err = e
				}
			}
			if !errors.Is(err, durable.ErrClosed) {
				t.Errorf("%s after Close ended with %v, want an error wrapping durable.ErrClosed", q.name, err)
			}
			live := q.live(ctx, query.NoOffset())
			for range live.All() {
			}
			if err := live.Err(); !errors.Is(err, durable.ErrClosed) {
				t.Errorf("live %s after Close ended with %v, want an error wrapping durable.ErrClosed", q.name, err)
			}
		}
	}})
}

func durableCases() []durableRule {
	return []durableRule{
		{"GetUnknownIsEmpty", "Get of an id never written returns ok false and no error", durableGetUnknown},
		{"UpsertThenGet", "Get returns the last object stored: payload, serializer id, manifest, tag and revision as written", durableUpsertThenGet},
		{"RevisionsFollowOneAnother", "Upsert needs the stored revision plus one (1 first); any other fails with ErrRevisionConflict and changes nothing", durableRevisions},
		{"DeleteRemoves", "Delete(id, stored+1) removes the object; the next Upsert starts again at revision 1", durableDelete},
		{"DeleteNeedsNextRevision", "Delete with another revision than stored+1 fails with ErrRevisionConflict and keeps the object", durableDeleteConflict},
		{"DeleteUnknownIsNoop", "Delete of an id that holds nothing succeeds and changes nothing", durableDeleteUnknown},
		{"IDsAreSeparate", "objects of different ids do not affect each other", durableSeparateIDs},
		{"InvalidArguments", "an empty id or a revision below 1 fails with ErrInvalidArgument", durableInvalid},
		{"CancelledContext", "a call with an ended context fails with its error and changes nothing", durableCancelled},
		{"ConcurrentWritersOneWins", "of writers racing for the same revision exactly one succeeds; the others get ErrRevisionConflict", durableRace},
		{"TimestampIsTheStores", "Upsert ignores the object's Timestamp; Get returns when the revision was stored, in UTC", durableTimestamp},
		{"PayloadNotAliased", "the store keeps its own copy of a payload: changing the caller's slice after Upsert or Get changes nothing stored", durableAliasing},
	}
}

func obj(pid string, revision int64, value string) durable.Object {
	return durable.Object{PersistenceID: pid, Revision: revision, Payload: []byte(value), SerializerID: 31, Manifest: "kit.State", Tag: "kit-tag"}
}

func upsert(t tb, s durable.Store, o durable.Object) {
	t.Helper()
	if err := s.Upsert(testContext(t), o); err != nil {
		t.Fatalf("Upsert(%s, revision %d): %v", o.PersistenceID, o.Revision, err)
	}
}

// get returns the stored object and whether there is one.
func get(t tb, s durable.Store, pid string) (durable.Object, bool) {
	t.Helper()
	o, ok, err := s.Get(testContext(t), pid)
	if err != nil {
		t.Fatalf("Get(%s): %v", pid, err)
	}
	return o, ok
}

func wantObject(t tb, s durable.Store, pid string, revision int64, value string) {
	t.Helper()
	o, ok := get(t, s, pid)
	switch {
	case revision == 0 && ok:
		t.Errorf("Get(%s) = revision %d %q, want nothing", pid, o.Revision, o.Payload)
	case revision > 0 && (!ok || o.Revision != revision || string(o.Payload) != value):
		t.Errorf("Get(%s) = revision %d %q (ok %v), want revision %d %q", pid, o.Revision, o.Payload, ok, revision, value)
	}
}

func durableGetUnknown(t tb, s durable.Store) {
	wantObject(t, s, uniqueID(t, "KitDurable"), 0, "")
}

func durableUpsertThenGet(t tb, s durable.Store) {
	pid := uniqueID(t, "KitDurable")
	upsert(t, s, obj(pid, 1, "first"))
	want := durable.Object{PersistenceID: pid, Revision: 2, Payload: []byte(`{"name":"ünï 😀"}`), SerializerID: 4, Manifest: "kit.State.v2", Tag: "other"}
	upsert(t, s, want)
	got, ok := get(t, s, pid)
	if !ok || got.PersistenceID != pid || got.Revision != 2 || !bytes.Equal(got.Payload, want.Payload) ||
		got.SerializerID != want.SerializerID || got.Manifest != want.Manifest || got.Tag != want.Tag {
		t.Errorf("Get = %+v, want %+v", got, want)
	}
	if got.Timestamp.IsZero() || got.Timestamp.Location() != got.Timestamp.UTC().Location() {
		t.Errorf("Get's Timestamp %v, want the time it was stored, in UTC", got.Timestamp)
	}
}

func durableRevisions(t tb, s durable.Store) {
	pid := uniqueID(t, "KitDurable")
	ctx := testContext(t)
	for _, c := range []struct {
		revision int64
		ok       bool
	}{{2, false}, {1, true}, {1, false}, {3, false}, {2, true}, {2, false}, {3, true}} {
		err := s.Upsert(ctx, obj(pid, c.revision, "v"+string(rune('0'+c.revision))))
		if c.ok && err != nil {
			t.Fatalf("Upsert revision %d: %v", c.revision, err)
		}
		if !c.ok && !errors.Is(err, durable.ErrRevisionConflict) {
			t.Fatalf("Upsert revision %d: %v, want ErrRevisionConflict", c.revision, err)
		}
	}
	wantObject(t, s, pid, 3, "v3")
}

func durableDelete(t tb, s durable.Store) {
	pid := uniqueID(t, "KitDurable")
	upsert(t, s, obj(pid, 1, "a"))
	upsert(t, s, obj(pid, 2, "b"))
	if err := s.Delete(testContext(t), pid, 3); err != nil {
		t.Fatalf("Delete(revision 3): %v", err)
	}
	wantObject(t, s, pid, 0, "")
	upsert(t, s, obj(pid, 1, "again"))
	wantObject(t, s, pid, 1, "again")
}

func durableDeleteConflict(t tb, s durable.Store) {
	pid := uniqueID(t, "KitDurable")
	upsert(t, s, obj(pid, 1, "a"))
	upsert(t, s, obj(pid, 2, "b"))
	for _, rev := range []int64{1, 2, 4} {
		if err := s.Delete(testContext(t), pid, rev); !errors.Is(err, durable.ErrRevisionConflict) {
			t.Errorf("Delete(revision %d) of revision 2: %v, want ErrRevisionConflict", rev, err)
		}
	}
	wantObject(t, s, pid, 2, "b")
}

func durableDeleteUnknown(t tb, s durable.Store) {
	pid := uniqueID(t, "KitDurable")
	if err := s.Delete(testContext(t), pid, 1); err != nil {
		t.Errorf("Delete of an id never written: %v", err)
	}
	upsert(t, s, obj(pid, 1, "a"))
	wantObject(t, s, pid, 1, "a")
}

func durableSeparateIDs(t tb, s durable.Store) {
	a, b := uniqueID(t, "KitDurable"), uniqueID(t, "KitDurable")
	upsert(t, s, obj(a, 1, "a1"))
	upsert(t, s, obj(b, 1, "b1"))
	upsert(t, s, obj(a, 2, "a2"))
	if err := s.Delete(testContext(t), b, 2); err != nil {
		t.Fatal(err)
	}
	wantObject(t, s, a, 2, "a2")
	wantObject(t, s, b, 0, "")
}

func durableInvalid(t tb, s durable.Store) {
	ctx := testContext(t)
	pid := uniqueID(t, "KitDurable")
	_, _, getErr := s.Get(ctx, "")
	for call, err := range map[string]error{
		"Get with an empty id":    getErr,
		"Upsert with an empty id": s.Upsert(ctx, obj("", 1, "a")),
		"Upsert with revision 0":  s.Upsert(ctx, obj(pid, 0, "a")),
		"Upsert with revision -1": s.Upsert(ctx, obj(pid, -1, "a")),
		"Delete with an empty id": s.Delete(ctx, "", 1),
		"Delete with revision 0":  s.Delete(ctx, pid, 0),
	} {
		if !errors.Is(err, durable.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", call, err)
		}
	}
	wantObject(t, s, pid, 0, "")
}

func durableCancelled(t tb, s durable.Store) {
	pid := uniqueID(t, "KitDurable")
	upsert(t, s, obj(pid, 1, "a"))
	ctx, cancel := context.WithCancel(testContext(t))
	cancel()
	_, _, getErr := s.Get(ctx, pid)
	for call, err := range map[string]error{
		"Get":    getErr,
		"Upsert": s.Upsert(ctx, obj(pid, 2, "b")),
		"Delete": s.Delete(ctx, pid, 2),
	} {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context: %v, want context.Canceled", call, err)
		}
	}
	wantObject(t, s, pid, 1, "a")
}

func durableRace(t tb, s durable.Store) {
	pid := uniqueID(t, "KitDurable")
	upsert(t, s, obj(pid, 1, "a"))
	const writers = 8
	ctx := testContext(t)
	errs := make([]error, writers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range writers {
		wg.Go(func() {
			<-start
			errs[i] = s.Upsert(ctx, obj(pid, 2, "w"+string(rune('a'+i))))
		})
	}
	close(start)
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won >= 0:
			t.Errorf("writers %d and %d both stored revision 2", won, i)
		case err == nil:
			won = i
		case !errors.Is(err, durable.ErrRevisionConflict):
			t.Errorf("writer %d: %v, want nil or ErrRevisionConflict", i, err)
		}
	}
	if won < 0 {
		t.Fatal("no writer stored revision 2")
	}
	wantObject(t, s, pid, 2, "w"+string(rune('a'+won)))
}

func durableAliasing(t tb, s durable.Store) {
	pid := uniqueID(t, "KitDurable")
	o := obj(pid, 1, "abc")
	upsert(t, s, o)
	o.Payload[0] = 'X'
	got, _ := get(t, s, pid)
	got.Payload[1] = 'Y'
	wantObject(t, s, pid, 1, "abc")
}

func durableTimestamp(t tb, s durable.Store) {
	pid := uniqueID(t, "KitDurable")
	before := time.Now().Add(-time.Minute)
	o := obj(pid, 1, "a")
	o.Timestamp = time.Date(1999, 1, 2, 3, 4, 5, 6, time.UTC)
	upsert(t, s, o)
	got, _ := get(t, s, pid)
	after := time.Now().Add(time.Minute)
	if got.Timestamp.Before(before) || got.Timestamp.After(after) || got.Timestamp.Location() != time.UTC {
		t.Errorf("Timestamp %v, want the time of the Upsert (between %v and %v), in UTC", got.Timestamp, before, after)
	}
}
