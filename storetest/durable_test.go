package storetest_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/annals-go/annals/durable"
	"github.com/annals-go/annals/storetest"
)

// lastWriterWins is a broken durable-state store: it stores every write,
// whatever its revision, and Delete ignores the revision.
type lastWriterWins struct {
	mu sync.Mutex
	m  map[string]durable.Object
}

func (s *lastWriterWins) Upsert(ctx context.Context, o durable.Object) error {
	if err := durable.Check("upsert", o.PersistenceID, o.Revision); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o.Payload = append([]byte(nil), o.Payload...)
	o.Timestamp = time.Now().UTC()
	s.m[o.PersistenceID] = o
	return nil
}

func (s *lastWriterWins) Get(ctx context.Context, pid string) (durable.Object, bool, error) {
	if err := durable.Check("get", pid, 1); err != nil {
		return durable.Object{}, false, err
	}
	if err := ctx.Err(); err != nil {
		return durable.Object{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.m[pid]
	o.Payload = append([]byte(nil), o.Payload...)
	return o, ok, nil
}

func (s *lastWriterWins) Delete(ctx context.Context, pid string, revision int64) error {
	if err := durable.Check("delete", pid, revision); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, pid)
	return nil
}

func (s *lastWriterWins) Close() error { return nil }

// TestCheckCatchesBrokenDurableStores: a store that lets the last writer
// win fails the revision, delete and race rules, naming them.
func TestCheckCatchesBrokenDurableStores(t *testing.T) {
	rep, err := storetest.Check(t.Context(), storetest.Store{Durable: &lastWriterWins{m: map[string]durable.Object{}}}, storetest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mustFail(t, rep, "durable", []string{"RevisionsFollowOneAnother", "DeleteNeedsNextRevision", "ConcurrentWritersOneWins"},
		"Upsert needs the stored revision plus one (1 first); any other fails with ErrRevisionConflict and changes nothing")
	for _, name := range []string{"UpsertThenGet", "GetUnknownIsEmpty", "IDsAreSeparate", "InvalidArguments"} {
		if r := result(rep, "durable/"+name); r.Name == "" || r.Failed || r.Skipped {
			t.Errorf("durable/%s: %+v, want passed (the broken store keeps that rule)", name, r)
		}
	}
}
