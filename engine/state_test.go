package engine_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/annals-go/annals/durable"
	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/memory"
	"github.com/annals-go/annals/store/sqlite"
)

// TestStateFrontAnswersEachChange: each change is answered alone, on a
// durable.Batcher (SQLite: one Apply per group) as on a plain store
// (memory: one call each): a stale revision is the store's revision
// conflict, an invalid id its invalid argument, the others are stored and
// read back through Get; a closed store fails the call.
func TestStateFrontAnswersEachChange(t *testing.T) {
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
	obj := func(pid string, rev int64, payload string) durable.Change {
		return durable.Change{Object: durable.Object{PersistenceID: pid, Revision: rev, Payload: []byte(payload), SerializerID: 1, Manifest: "s", Tag: "tag"}}
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			store := st.open(t)
			ctx := t.Context()
			if err := store.Upsert(ctx, durable.Object{PersistenceID: "P|held", Revision: 1, Payload: []byte("h"), SerializerID: 1}); err != nil {
				t.Fatal(err)
			}
			f, err := engine.NewStateFront(store, engine.Config{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = f.Close() })
			changes := []durable.Change{obj("P|a", 1, "a"), obj("P|held", 1, "stale"), obj("", 1, "empty"), obj("P|b", 1, "b")}
			errs := make([]error, len(changes))
			var wg sync.WaitGroup
			for i, c := range changes {
				wg.Go(func() { errs[i] = f.Apply(ctx, c, journal.Fence{}) })
			}
			wg.Wait()
			checks := []struct {
				what string
				ok   bool
			}{
				{"P|a stored", errs[0] == nil},
				{"P|held a revision conflict", errors.Is(errs[1], durable.ErrRevisionConflict)},
				{"an empty id invalid", errors.Is(errs[2], durable.ErrInvalidArgument)},
				{"P|b stored", errs[3] == nil},
			}
			for _, c := range checks {
				if !c.ok {
					t.Errorf("%s: errs %v", c.what, errs)
				}
			}
			for pid, want := range map[string]string{"P|a": "a", "P|b": "b", "P|held": "h"} {
				o, ok, err := f.Get(ctx, pid)
				if err != nil || !ok || string(o.Payload) != want {
					t.Errorf("Get(%s) = %q (found %v, %v), want %q", pid, o.Payload, ok, err, want)
				}
			}
			if err := store.Close(); err != nil {
				t.Fatal(err)
			}
			if err := f.Apply(ctx, obj("P|c", 1, "c"), journal.Fence{}); !errors.Is(err, durable.ErrClosed) {
				t.Errorf("Apply on a closed store: %v, want the call to fail with durable.ErrClosed", err)
			}
		})
	}
}

// gatedBatcher is a memory durable-state store seen as a durable.Batcher
// whose first Apply waits for release; it records each call's changes.
type gatedBatcher struct {
	durable.Store
	release chan struct{}
	mu      sync.Mutex
	calls   [][]durable.Change
}

func (g *gatedBatcher) Apply(ctx context.Context, changes []durable.Change) ([]error, error) {
	g.mu.Lock()
	g.calls = append(g.calls, changes)
	first := len(g.calls) == 1
	g.mu.Unlock()
	if first {
		<-g.release
	}
	var errs []error
	for i, c := range changes {
		if err := g.Upsert(ctx, c.Object); err != nil {
			if errs == nil {
				errs = make([]error, len(changes))
			}
			errs[i] = err
		}
	}
	return errs, nil
}

// TestStateFrontGroupsChanges: changes that arrive while a call is in
// flight go to the store together, in one Apply; a change's fence that
// closed while it waited keeps it from the store (ErrFenced).
func TestStateFrontGroupsChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &gatedBatcher{Store: memory.New().DurableState(), release: make(chan struct{})}
		f, err := engine.NewStateFront(g, engine.Config{MaxCalls: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		ctx := t.Context()
		apply := func(pid string, fence journal.Fence) chan error {
			done := make(chan error, 1)
			go func() {
				done <- f.Apply(ctx, durable.Change{Object: durable.Object{PersistenceID: pid, Revision: 1, Payload: []byte(pid), SerializerID: 1}}, fence)
			}()
			return done
		}
		first := apply("P|first", journal.Fence{})
		synctest.Wait()
		lost := errors.New("lease lost")
		waiting := []chan error{apply("P|a", journal.Fence{}), apply("P|b", journal.Fence{}), apply("P|c", journal.Fence{})}
		fenced := apply("P|fenced", journal.Fence{Open: func() error { return lost }})
		synctest.Wait()
		close(g.release)
		for i, ch := range append([]chan error{first}, waiting...) {
			if err := <-ch; err != nil {
				t.Errorf("change %d: %v", i, err)
			}
		}
		if err := <-fenced; !errors.Is(err, engine.ErrFenced) || !errors.Is(err, lost) {
			t.Errorf("a change whose fence closed: %v, want ErrFenced and the fence's error", err)
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		if len(g.calls) != 2 || len(g.calls[0]) != 1 || len(g.calls[1]) != 3 {
			sizes := make([]int, len(g.calls))
			for i, c := range g.calls {
				sizes[i] = len(c)
			}
			t.Errorf("Apply calls of sizes %v, want [1 3]: the three queued behind the first go together", sizes)
		}
	})
}

// invalidBatcher refuses every Apply as a whole with an invalid argument.
type invalidBatcher struct{ durable.Store }

func (invalidBatcher) Apply(context.Context, []durable.Change) ([]error, error) {
	return nil, fmt.Errorf("%w: refused whole", durable.ErrInvalidArgument)
}

// TestStateFrontBreakerIgnoresInvalidArguments: calls the store refuses as
// invalid are the callers' mistakes, not the store's failures: however
// many, the breaker stays closed.
func TestStateFrontBreakerIgnoresInvalidArguments(t *testing.T) {
	f, err := engine.NewStateFront(invalidBatcher{memory.New().DurableState()}, engine.Config{MaxFailures: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := durable.Change{Object: durable.Object{PersistenceID: "P|a", Revision: 1, Payload: []byte("a"), SerializerID: 1}}
	for i := range 5 {
		if err := f.Apply(t.Context(), c, journal.Fence{}); !errors.Is(err, durable.ErrInvalidArgument) {
			t.Fatalf("call %d: %v, want the store's invalid argument, not an open breaker", i, err)
		}
	}
}
