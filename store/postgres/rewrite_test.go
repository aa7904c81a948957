package postgres_test

import (
	"math"
	"testing"

	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/durable"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/postgres"
)

// TestRewriteSerializerID: on both layouts, payloads stored under one id
// move to another in one transaction; a dry run counts and changes
// nothing; other ids stay.
func TestRewriteSerializerID(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []postgres.Option
	}{{"annals", nil}, {"r2dbc", r2dbcOpts}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			s := open(t, c.opts...)
			ev := func(seq int64, id int32) journal.Repr {
				return journal.Repr{PersistenceID: "Account|a-1", SequenceNr: seq, Payload: []byte(`{"amount":1}`), SerializerID: id, Manifest: "m"}
			}
			if res, err := s.Journal().Write(ctx, []journal.AtomicWrite{{PersistenceID: "Account|a-1", Events: []journal.Repr{ev(1, 33), ev(2, 33), ev(3, 4)}}}); err != nil || res != nil {
				t.Fatal(res, err)
			}
			if err := s.Snapshots().Save(ctx, snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: "Account|a-1", SequenceNr: 2}, Payload: []byte(`{}`), SerializerID: 33, Manifest: "s"}); err != nil {
				t.Fatal(err)
			}
			if err := s.DurableState().Upsert(ctx, durable.Object{PersistenceID: "Profile|p-1", Revision: 1, Payload: []byte(`{}`), SerializerID: 33, Manifest: "p"}); err != nil {
				t.Fatal(err)
			}
			ids := func() []int32 {
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
			want := admin.Rewritten{Events: 2, Snapshots: 1, DurableStates: 1}
			if r, err := s.RewriteSerializerID(ctx, 33, 31, true); err != nil || r != want {
				t.Fatalf("dry run: %+v, %v; want %+v", r, err, want)
			}
			if got := ids(); got[0] != 33 || got[3] != 33 || got[4] != 33 {
				t.Fatalf("a dry run changed ids: %v", got)
			}
			if r, err := s.RewriteSerializerID(ctx, 33, 31, false); err != nil || r != want {
				t.Fatalf("rewrite: %+v, %v; want %+v", r, err, want)
			}
			got := ids()
			for i, w := range []int32{31, 31, 4, 31, 31} {
				if got[i] != w {
					t.Errorf("after the rewrite: ids %v, want [31 31 4 31 31]", got)
					break
				}
			}
		})
	}
}
