package profile_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/annals-go/annals/durable"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/examples/profile"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/store/memory"
	"github.com/annals-go/annals/store/sqlite"
)

type host = entity.Host[profile.Command, entity.StateChange[profile.Profile], profile.Profile]

func newHost(t testing.TB, store durable.Store, b entity.DurableBehavior[profile.Command, profile.Profile]) *host {
	t.Helper()
	reg := serialization.NewRegistry()
	if err := profile.Register(reg); err != nil {
		t.Fatal(err)
	}
	h, err := entity.NewDurableHost(b, store, entity.HostConfig{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Shutdown(context.Background()) })
	return h
}

func update(ctx context.Context, h *host, id, name string) (profile.Profile, error) {
	return entity.Ask(ctx, h, id, func(r entity.ReplyTo[profile.Profile]) profile.Command {
		return profile.Update{Name: name, Email: name + "@example.com", Reply: r}
	})
}

func get(ctx context.Context, h *host, id string) (profile.Profile, error) {
	return entity.Ask(ctx, h, id, func(r entity.ReplyTo[profile.Profile]) profile.Command { return profile.Get{Reply: r} })
}

// TestDurableProfile: updates store whole revisions (the store holds the
// state's own JSON under its manifest, with the tag); a new host recovers
// the last one; Erase deletes the row and stops the entity, whose next
// update starts again at revision 1; a revision another writer stored
// first fails the command with a conflict and the entity then recovers
// the other writer's state.
func TestDurableProfile(t *testing.T) {
	for _, c := range []struct {
		name string
		open func(t *testing.T) durable.Store
	}{
		{"memory", func(t *testing.T) durable.Store {
			s := memory.New()
			t.Cleanup(func() { s.Close() })
			return s.DurableState()
		}},
		{"sqlite", func(t *testing.T) durable.Store {
			s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "profiles.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s.DurableState()
		}},
	} {
		t.Run(c.name, func(t *testing.T) { testDurableProfile(t, c.open(t)) })
	}
}

func testDurableProfile(t *testing.T, store durable.Store) {
	ctx := t.Context()
	h := newHost(t, store, profile.Behavior())
	for i, name := range []string{"Ada", "Ada Lovelace"} {
		p, err := update(ctx, h, "p-1", name)
		if err != nil || p.Name != name || p.Updates != i+1 {
			t.Fatalf("update %d: %+v, %v", i+1, p, err)
		}
	}
	if _, err := update(ctx, h, "p-1", ""); !errors.Is(err, profile.ErrNoName) {
		t.Fatalf("an update without a name: %v", err)
	}
	o, ok, err := store.Get(ctx, "Profile|p-1")
	if err != nil || !ok || o.Revision != 2 || o.SerializerID != serialization.JSONID || o.Manifest != "profile.Profile" || o.Tag != profile.Tag ||
		string(o.Payload) != `{"name":"Ada Lovelace","email":"Ada Lovelace@example.com","updates":2}` {
		t.Fatalf("stored %+v %q (%v, %v)", o, o.Payload, ok, err)
	}

	var recovered []string
	b := profile.Behavior()
	b.OnRecovered = func(id string, p profile.Profile, revision int64) {
		recovered = append(recovered, fmt.Sprintf("%s %s revision %d", id, p.Name, revision))
	}
	h.Shutdown(ctx)
	h2 := newHost(t, store, b)
	if p, err := get(ctx, h2, "p-1"); err != nil || p.Name != "Ada Lovelace" || p.Updates != 2 {
		t.Fatalf("recovered %+v, %v", p, err)
	}
	if len(recovered) != 1 || recovered[0] != "p-1 Ada Lovelace revision 2" {
		t.Errorf("OnRecovered saw %q", recovered)
	}

	if p, err := entity.Ask(ctx, h2, "p-1", func(r entity.ReplyTo[profile.Profile]) profile.Command { return profile.Erase{Reply: r} }); err != nil || p != (profile.Profile{}) {
		t.Fatalf("erase: %+v, %v", p, err)
	}
	if _, ok, _ := store.Get(ctx, "Profile|p-1"); ok {
		t.Fatal("the erased profile is still stored")
	}
	if p, err := update(ctx, h2, "p-1", "Grace"); err != nil || p.Updates != 1 {
		t.Fatalf("an update after erasing: %+v, %v", p, err)
	}
	if o, _, _ := store.Get(ctx, "Profile|p-1"); o.Revision != 1 {
		t.Errorf("revision after erasing and updating: %d, want 1", o.Revision)
	}

	// Another writer stores revision 2 first.
	if err := store.Upsert(ctx, durable.Object{PersistenceID: "Profile|p-1", Revision: 2, Payload: []byte(`{"name":"Other","updates":7}`), SerializerID: serialization.JSONID, Manifest: "profile.Profile"}); err != nil {
		t.Fatal(err)
	}
	if _, err := update(ctx, h2, "p-1", "Mine"); !errors.Is(err, journal.ErrSequenceConflict) || !errors.Is(err, durable.ErrRevisionConflict) {
		t.Fatalf("an update that meets another writer's revision: %v, want a sequence and revision conflict", err)
	}
	if p, err := get(ctx, h2, "p-1"); err != nil || p.Name != "Other" || p.Updates != 7 {
		t.Errorf("after the conflict: %+v, %v; want the other writer's state", p, err)
	}
}
