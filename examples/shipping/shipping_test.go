package shipping_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/annals-go/annals/delivery"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/examples/shipping"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/memory"
)

type orders = entity.Host[shipping.Command, shipping.Event, shipping.Order]

// wire makes the orders' host on the stores and its deliverer to dest
// (cfg gives the deliverer's settings; its Destinations and Confirm are
// set here): confirmations go back to the order as ConfirmShipment,
// recorded with run. The deliverer is not running.
func wire(t testing.TB, j journal.Journal, snaps snapshot.Store, dest delivery.Destination[shipping.ShipRequest], cfg delivery.Config[shipping.ShipRequest], run int) (*orders, *delivery.Deliverer[shipping.ShipRequest]) {
	t.Helper()
	reg := serialization.NewRegistry()
	if err := shipping.Register(reg); err != nil {
		t.Fatal(err)
	}
	var host *orders
	cfg.Destinations = map[string]delivery.Destination[shipping.ShipRequest]{shipping.Warehouse: dest}
	cfg.Confirm = func(ctx context.Context, id string, deliveryID int64) error {
		return host.Send(ctx, id, shipping.ConfirmShipment{DeliveryID: deliveryID, Run: run})
	}
	d, err := delivery.New(shipping.EntityType, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b := shipping.Behavior()
	if err := delivery.Attach(&b, d, shipping.Outbox); err != nil {
		t.Fatal(err)
	}
	host, err = entity.NewHost(b, entity.HostConfig{Journal: j, Snapshots: snaps, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	return host, d
}

// start makes a host and a running deliverer to dest on store.
func start(t *testing.T, store *memory.Store, dest delivery.Destination[shipping.ShipRequest]) (*orders, *delivery.Deliverer[shipping.ShipRequest]) {
	t.Helper()
	host, d := wire(t, store.Journal(), store.Snapshots(), dest, delivery.Config[shipping.ShipRequest]{}, 0)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; host.Shutdown(context.Background()) })
	return host, d
}

func place(ctx context.Context, h *orders, id string, reorder bool) (shipping.Order, error) {
	return entity.Ask(ctx, h, id, func(r entity.ReplyTo[shipping.Order]) shipping.Command {
		return shipping.Place{Items: []string{"book"}, Reorder: reorder, Reply: r}
	})
}

// TestOutboxIsBoundedAndSurvivesRestarts: with the warehouse down, an
// order's requests pile up to MaxUnconfirmed and the next placement is
// refused with ErrTooManyUnconfirmed; a new host recovers the pending
// requests (from the snapshot and the events after it) and delivers every
// one once the warehouse is back.
func TestOutboxIsBoundedAndSurvivesRestarts(t *testing.T) {
	ctx := t.Context()
	store := memory.New()
	defer store.Close()
	down := delivery.DestinationFunc[shipping.ShipRequest](func(context.Context, delivery.Delivery[shipping.ShipRequest]) error {
		return errors.New("warehouse down")
	})
	h, _ := start(t, store, down)
	for i := range shipping.MaxUnconfirmed {
		if _, err := place(ctx, h, "o-1", i > 0); err != nil {
			t.Fatalf("placement %d: %v", i+1, err)
		}
	}
	if _, err := place(ctx, h, "o-1", true); !errors.Is(err, delivery.ErrTooManyUnconfirmed) {
		t.Fatalf("placement %d: %v, want ErrTooManyUnconfirmed", shipping.MaxUnconfirmed+1, err)
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := store.Snapshots().Load(ctx, shipping.EntityType+"|o-1", snapshot.Latest()); err != nil || !ok {
		t.Fatalf("no snapshot of o-1 (%v): the outbox should be in one", err)
	}

	warehouse, err := shipping.OpenWarehouse(ctx, filepath.Join(t.TempDir(), "w.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer warehouse.Close()
	h2, d2 := start(t, store, warehouse)
	o, err := entity.Ask(ctx, h2, "o-1", func(r entity.ReplyTo[shipping.Order]) shipping.Command { return shipping.Get{Reply: r} })
	if err != nil || o.Outbox.Unconfirmed() != shipping.MaxUnconfirmed {
		t.Fatalf("recovered order: %d unconfirmed (%v), want %d", o.Outbox.Unconfirmed(), err, shipping.MaxUnconfirmed)
	}
	if err := d2.Drained(ctx); err != nil {
		t.Fatal(err)
	}
	held, err := warehouse.Shipments(ctx)
	if err != nil || held[shipping.EntityType+"|o-1"] != shipping.MaxUnconfirmed {
		t.Errorf("warehouse holds %v (%v), want %d requests of o-1", held, err, shipping.MaxUnconfirmed)
	}
	o, _ = entity.Ask(ctx, h2, "o-1", func(r entity.ReplyTo[shipping.Order]) shipping.Command { return shipping.Get{Reply: r} })
	if o.Shipped != shipping.MaxUnconfirmed || o.Outbox.Unconfirmed() != 0 {
		t.Errorf("after delivery: %d shipped, %d unconfirmed", o.Shipped, o.Outbox.Unconfirmed())
	}
}
