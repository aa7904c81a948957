package main

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/annals-go/annals/durable"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/sqlite"
)

// TestRewriteSerializer: payloads stored under 33 (earlier Annals JSON)
// move to 31 with the defaults; others stay; a dry run and a missing
// confirmation change nothing.
func TestRewriteSerializer(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "old.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	ev := func(seq int64, id int32) journal.Repr {
		return journal.Repr{PersistenceID: "Account|a-1", SequenceNr: seq, Payload: []byte(`{"amount":1}`), SerializerID: id, Manifest: "bank.Deposited"}
	}
	if res, err := s.Journal().Write(ctx, []journal.AtomicWrite{{PersistenceID: "Account|a-1", Events: []journal.Repr{ev(1, 33), ev(2, 33), ev(3, 4)}}}); err != nil || res != nil {
		t.Fatal(res, err)
	}
	if err := s.Snapshots().Save(ctx, snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: "Account|a-1", SequenceNr: 2}, Payload: []byte(`{}`), SerializerID: 33, Manifest: "bank.Account"}); err != nil {
		t.Fatal(err)
	}
	if err := s.DurableState().Upsert(ctx, durable.Object{PersistenceID: "Profile|p-1", Revision: 1, Payload: []byte(`{}`), SerializerID: 33, Manifest: "p"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	url := "sqlite:" + path
	ids := func() []int32 {
		s, err := sqlite.Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var out []int32
		for r, err := range s.Journal().Replay(ctx, "Account|a-1", 1, math.MaxInt64, math.MaxInt64) {
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, r.SerializerID)
		}
		snap, _, _ := s.Snapshots().Load(ctx, "Account|a-1", snapshot.Latest())
		o, _, _ := s.DurableState().Get(ctx, "Profile|p-1")
		return append(out, snap.SerializerID, o.SerializerID)
	}
	same := func(got, want []int32) bool {
		if len(got) != len(want) {
			return false
		}
		for i := range got {
			if got[i] != want[i] {
				return false
			}
		}
		return true
	}
	var plan rewriteJSON
	decode(t, cli(t, nil, "rewrite-serializer", "--store", url, "--dry-run", "--json"), &plan)
	if !plan.DryRun || plan.From != 33 || plan.To != 31 || plan.Events != 2 || plan.Snapshots != 1 || plan.DurableStates != 1 {
		t.Errorf("dry run %+v", plan)
	}
	cli(t, nil, "rewrite-serializer", "--store", url).want(t, 2, nil, []string{"pass --yes"})
	if got := ids(); !same(got, []int32{33, 33, 4, 33, 33}) {
		t.Fatalf("after a dry run and a refusal: ids %v, want them unchanged", got)
	}
	cli(t, nil, "rewrite-serializer", "--store", url, "--yes").want(t, 0, []string{"rewrote 2 events, 1 snapshots and 1 durable states from serializer 33 to 31"}, nil)
	if got := ids(); !same(got, []int32{31, 31, 4, 31, 31}) {
		t.Errorf("after the rewrite: ids %v, want 31 where 33 was and 4 kept", got)
	}
	cli(t, nil, "events", "--store", url, "Account|a-1").want(t, 0, []string{`{"amount":1}`}, nil)
}
