package cart_test

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/entity/behaviortest"
	"github.com/annals-go/annals/entity/entitytest"
	"github.com/annals-go/annals/examples/cart"
	"github.com/annals-go/annals/internal/entitystores"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/snapshot"
)

type host = entity.Host[cart.Command, cart.Event, cart.Cart]

type kit = behaviortest.Kit[cart.Command, cart.Event, cart.Cart]

type mkCommand = func(entity.ReplyTo[cart.Cart]) cart.Command

func newRegistry(t testing.TB) *serialization.Registry {
	t.Helper()
	reg := serialization.NewRegistry()
	if err := cart.Register(reg); err != nil {
		t.Fatal(err)
	}
	return reg
}

func newKit(t testing.TB) *kit {
	t.Helper()
	return behaviortest.New(t, cart.Behavior(), newRegistry(t))
}

// mustRun runs a command on the kit and fails the test if it fails.
func mustRun(t testing.TB, k *kit, id string, mk mkCommand) behaviortest.Result[cart.Event, cart.Cart, cart.Cart] {
	t.Helper()
	r := behaviortest.Run(k, id, mk)
	if r.Err != nil {
		t.Fatalf("%s: %v", id, r.Err)
	}
	return r
}

func newHost(t testing.TB, st entitytest.Store) *host {
	t.Helper()
	return entitytest.NewHost(t, st, cart.Behavior(), newRegistry(t))
}

func mustAsk(t testing.TB, h *host, id string, mk mkCommand) cart.Cart {
	t.Helper()
	c, err := entity.Ask(t.Context(), h, id, mk)
	if err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	return c
}

func pid(id string) string { return annals.PersistenceID(cart.EntityType, id) }

func highest(t testing.TB, j journal.Journal, id string) int64 {
	t.Helper()
	n, err := j.HighestSequenceNr(t.Context(), pid(id), 0)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func add(sku string, qty int) mkCommand {
	return func(r entity.ReplyTo[cart.Cart]) cart.Command { return cart.AddItem{SKU: sku, Qty: qty, Reply: r} }
}

func remove(sku string) mkCommand {
	return func(r entity.ReplyTo[cart.Cart]) cart.Command { return cart.RemoveItem{SKU: sku, Reply: r} }
}

func adjust(sku string, qty int) mkCommand {
	return func(r entity.ReplyTo[cart.Cart]) cart.Command { return cart.AdjustQty{SKU: sku, Qty: qty, Reply: r} }
}

func checkout(r entity.ReplyTo[cart.Cart]) cart.Command { return cart.Checkout{Reply: r} }

func get(r entity.ReplyTo[cart.Cart]) cart.Command { return cart.Get{Reply: r} }

func items(kv ...any) map[string]int {
	m := map[string]int{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1].(int)
	}
	return m
}

// TestRules runs on the behavior test kit: each command's reply or error,
// the event it persists (a failed one persists none) and the cart after
// it; the kit checks that every event, and the cart it snapshots, round-trip
// through the registry.
func TestRules(t *testing.T) {
	k := newKit(t)
	twoItems := []mkCommand{add("apple", 2), add("pear", 1)}
	checkedOut := []mkCommand{add("apple", 2), checkout}
	tests := []struct {
		name  string
		path  []mkCommand // brings the cart to the state the command meets
		cmd   mkCommand
		err   error      // the error the command fails with, or nil
		want  cart.Cart  // the cart after the command
		event cart.Event // the event the command persists, or nil
	}{
		{name: "add to an empty cart", cmd: add("apple", 2), want: cart.Cart{Items: items("apple", 2)}, event: cart.ItemAdded{SKU: "apple", Qty: 2}},
		{name: "add another item", path: twoItems, cmd: add("plum", 4), want: cart.Cart{Items: items("apple", 2, "pear", 1, "plum", 4)}, event: cart.ItemAdded{SKU: "plum", Qty: 4}},
		{name: "add more of an item", path: twoItems, cmd: add("apple", 3), want: cart.Cart{Items: items("apple", 5, "pear", 1)}, event: cart.ItemAdded{SKU: "apple", Qty: 3}},
		{name: "add up to the limit", path: twoItems, cmd: add("apple", cart.MaxQty-2), want: cart.Cart{Items: items("apple", cart.MaxQty, "pear", 1)}, event: cart.ItemAdded{SKU: "apple", Qty: cart.MaxQty - 2}},
		{name: "add beyond the limit", path: twoItems, cmd: add("apple", cart.MaxQty-1), err: cart.ErrQtyLimit, want: cart.Cart{Items: items("apple", 2, "pear", 1)}},
		{name: "add too many at once", cmd: add("apple", cart.MaxQty+1), err: cart.ErrQtyLimit},
		{name: "add zero", path: twoItems, cmd: add("apple", 0), err: cart.ErrInvalidQty, want: cart.Cart{Items: items("apple", 2, "pear", 1)}},
		{name: "add a negative quantity", cmd: add("apple", -1), err: cart.ErrInvalidQty},
		{name: "add without SKU", cmd: add("", 1), err: cart.ErrNoSKU},

		{name: "remove an item", path: twoItems, cmd: remove("apple"), want: cart.Cart{Items: items("pear", 1)}, event: cart.ItemRemoved{SKU: "apple"}},
		{name: "remove the last item", path: twoItems[:1], cmd: remove("apple"), want: cart.Cart{}, event: cart.ItemRemoved{SKU: "apple"}},
		{name: "remove an item not in the cart", path: twoItems, cmd: remove("plum"), err: cart.ErrNotInCart, want: cart.Cart{Items: items("apple", 2, "pear", 1)}},
		{name: "remove from an empty cart", cmd: remove("apple"), err: cart.ErrNotInCart},

		{name: "adjust up", path: twoItems, cmd: adjust("pear", 7), want: cart.Cart{Items: items("apple", 2, "pear", 7)}, event: cart.QuantityAdjusted{SKU: "pear", Qty: 7}},
		{name: "adjust down", path: twoItems, cmd: adjust("apple", 1), want: cart.Cart{Items: items("apple", 1, "pear", 1)}, event: cart.QuantityAdjusted{SKU: "apple", Qty: 1}},
		{name: "adjust to the limit", path: twoItems, cmd: adjust("apple", cart.MaxQty), want: cart.Cart{Items: items("apple", cart.MaxQty, "pear", 1)}, event: cart.QuantityAdjusted{SKU: "apple", Qty: cart.MaxQty}},
		{name: "adjust to the current quantity", path: twoItems, cmd: adjust("apple", 2), want: cart.Cart{Items: items("apple", 2, "pear", 1)}},
		{name: "adjust beyond the limit", path: twoItems, cmd: adjust("apple", cart.MaxQty+1), err: cart.ErrQtyLimit, want: cart.Cart{Items: items("apple", 2, "pear", 1)}},
		{name: "adjust to zero", path: twoItems, cmd: adjust("apple", 0), err: cart.ErrInvalidQty, want: cart.Cart{Items: items("apple", 2, "pear", 1)}},
		{name: "adjust to a negative quantity", path: twoItems, cmd: adjust("apple", -2), err: cart.ErrInvalidQty, want: cart.Cart{Items: items("apple", 2, "pear", 1)}},
		{name: "adjust an item not in the cart", path: twoItems, cmd: adjust("plum", 1), err: cart.ErrNotInCart, want: cart.Cart{Items: items("apple", 2, "pear", 1)}},

		{name: "checkout", path: twoItems, cmd: checkout, want: cart.Cart{Items: items("apple", 2, "pear", 1), CheckedOut: true}, event: cart.CheckedOut{}},
		{name: "checkout an empty cart", cmd: checkout, err: cart.ErrEmptyCart},
		{name: "checkout an emptied cart", path: []mkCommand{add("apple", 1), remove("apple")}, cmd: checkout, err: cart.ErrEmptyCart},

		{name: "add after checkout", path: checkedOut, cmd: add("pear", 1), err: cart.ErrCheckedOut, want: cart.Cart{Items: items("apple", 2), CheckedOut: true}},
		{name: "add more after checkout", path: checkedOut, cmd: add("apple", 1), err: cart.ErrCheckedOut, want: cart.Cart{Items: items("apple", 2), CheckedOut: true}},
		{name: "remove after checkout", path: checkedOut, cmd: remove("apple"), err: cart.ErrCheckedOut, want: cart.Cart{Items: items("apple", 2), CheckedOut: true}},
		{name: "adjust after checkout", path: checkedOut, cmd: adjust("apple", 5), err: cart.ErrCheckedOut, want: cart.Cart{Items: items("apple", 2), CheckedOut: true}},
		{name: "checkout twice", path: checkedOut, cmd: checkout, err: cart.ErrCheckedOut, want: cart.Cart{Items: items("apple", 2), CheckedOut: true}},
		{name: "get after checkout", path: checkedOut, cmd: get, want: cart.Cart{Items: items("apple", 2), CheckedOut: true}},
		{name: "get an empty cart", cmd: get},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := fmt.Sprintf("c-%d", i)
			for _, mk := range tt.path {
				mustRun(t, k, id, mk)
			}
			r := behaviortest.Run(k, id, tt.cmd)
			switch {
			case tt.err == nil && r.Err != nil:
				t.Fatalf("err = %v, want none", r.Err)
			case tt.err == nil && !reflect.DeepEqual(r.Reply, tt.want):
				t.Fatalf("reply = %+v, want %+v", r.Reply, tt.want)
			case tt.err != nil && !errors.Is(r.Err, tt.err):
				t.Fatalf("err = %v, want %v", r.Err, tt.err)
			}
			var want []cart.Event
			if tt.event != nil {
				want = []cart.Event{tt.event}
			}
			if !slices.Equal(r.Events, want) {
				t.Fatalf("persisted %#v, want %#v", r.Events, want)
			}
			if !reflect.DeepEqual(r.State, tt.want) {
				t.Fatalf("cart after the command = %+v, want %+v", r.State, tt.want)
			}
		})
	}
}

// Replies do not share memory with the entity's state.
func TestRepliesAreCopies(t *testing.T) {
	k := newKit(t)
	got := mustRun(t, k, "c-1", add("apple", 1)).Reply
	got.Items["apple"] = 100
	got = mustRun(t, k, "c-1", get).Reply
	got.Items["pear"] = 3
	if got := mustRun(t, k, "c-1", get).Reply; !reflect.DeepEqual(got, cart.Cart{Items: items("apple", 1)}) {
		t.Fatalf("Get = %+v after the replies were changed, want apple: 1", got)
	}
}

// TestSnapshotRecovery stays on a host over each store: it reads the
// snapshot the store holds and deletes the events it covers, which the
// behavior test kit (on a memory store of its own) does not reach.
func TestSnapshotRecovery(t *testing.T) {
	for name, mk := range entitystores.All() {
		t.Run(name, func(t *testing.T) {
			st := mk(t)
			ctx := t.Context()
			h := newHost(t, st)

			// 62 events: 60 additions, a removal and an adjustment, with
			// the cart they should make at event 50 and at the end.
			model := map[string]int{}
			var at50 map[string]int
			for i := range 60 {
				sku := fmt.Sprintf("sku-%d", i%6)
				mustAsk(t, h, "big", add(sku, 1))
				model[sku]++
				if i+1 == cart.SnapshotEvery {
					at50 = maps.Clone(model)
				}
			}
			mustAsk(t, h, "big", remove("sku-5"))
			delete(model, "sku-5")
			mustAsk(t, h, "big", adjust("sku-0", 42))
			model["sku-0"] = 42
			want := cart.Cart{Items: model}
			if got := mustAsk(t, h, "big", get); !reflect.DeepEqual(got, want) {
				t.Fatalf("cart = %+v, want %+v", got, want)
			}
			mustAsk(t, h, "small", add("apple", 1))

			// One snapshot, at event 50, holding the cart of that time.
			snap, ok, err := st.Snapshots.Load(ctx, pid("big"), snapshot.Latest())
			if err != nil || !ok {
				t.Fatalf("Load: %v, %v; want a snapshot", ok, err)
			}
			if snap.Metadata.SequenceNr != cart.SnapshotEvery || snap.Manifest != cart.ManifestCart {
				t.Fatalf("snapshot at %d with manifest %q, want at %d with %q", snap.Metadata.SequenceNr, snap.Manifest, cart.SnapshotEvery, cart.ManifestCart)
			}
			v, err := newRegistry(t).DeserializeSnapshot(snap)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(v, cart.Cart{Items: at50}) {
				t.Fatalf("snapshot holds %+v, want %+v", v, cart.Cart{Items: at50})
			}
			if _, ok, err := st.Snapshots.Load(ctx, pid("small"), snapshot.Latest()); ok || err != nil {
				t.Fatalf("a cart with one event has a snapshot (%v, %v)", ok, err)
			}

			if err := h.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			// Without the events the snapshot covers, recovery can only
			// succeed from the snapshot and the 12 events after it.
			if err := st.Journal.DeleteTo(ctx, pid("big"), cart.SnapshotEvery); err != nil {
				t.Fatal(err)
			}
			h2 := newHost(t, st)
			if got := mustAsk(t, h2, "big", get); !reflect.DeepEqual(got, want) {
				t.Fatalf("recovered cart = %+v, want %+v", got, want)
			}
			if got := mustAsk(t, h2, "small", get); !reflect.DeepEqual(got, cart.Cart{Items: items("apple", 1)}) {
				t.Fatalf("recovered small cart = %+v, want apple: 1", got)
			}
			// The recovered cart goes on at the next sequence number.
			got := mustAsk(t, h2, "big", checkout)
			if !got.CheckedOut || got.Units() != 42+4*10 {
				t.Fatalf("checkout after recovery = %+v, want checked out with 82 units", got)
			}
			if n := highest(t, st.Journal, "big"); n != 63 {
				t.Fatalf("highest sequence number %d, want 63", n)
			}
		})
	}
}
