package shipping_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/annals-go/annals/delivery"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/examples/shipping"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/store/memory"
)

// An order delivers its ship request to the warehouse at least once: the
// deliverer sends it, the warehouse takes it, the order stores the
// confirmation and its outbox empties.
func ExampleBehavior() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "shipping")
	defer os.RemoveAll(dir)
	warehouse, err := shipping.OpenWarehouse(ctx, filepath.Join(dir, "warehouse.db"))
	if err != nil {
		panic(err)
	}
	defer warehouse.Close()

	store := memory.New()
	defer store.Close()
	reg := serialization.NewRegistry()
	if err := shipping.Register(reg); err != nil {
		panic(err)
	}
	var host *entity.Host[shipping.Command, shipping.Event, shipping.Order]
	d, err := delivery.New(shipping.EntityType, delivery.Config[shipping.ShipRequest]{
		Destinations: map[string]delivery.Destination[shipping.ShipRequest]{shipping.Warehouse: warehouse},
		Confirm: func(ctx context.Context, id string, deliveryID int64) error {
			return host.Send(ctx, id, shipping.ConfirmShipment{DeliveryID: deliveryID})
		},
	})
	if err != nil {
		panic(err)
	}
	b := shipping.Behavior()
	if err := delivery.Attach(&b, d, shipping.Outbox); err != nil {
		panic(err)
	}
	host, err = entity.NewHost(b, entity.HostConfig{Journal: store.Journal(), Snapshots: store.Snapshots(), Registry: reg})
	if err != nil {
		panic(err)
	}
	defer host.Shutdown(ctx)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go d.Run(runCtx)

	o, err := entity.Ask(ctx, host, "o-1", func(r entity.ReplyTo[shipping.Order]) shipping.Command {
		return shipping.Place{Items: []string{"book", "pen"}, Reply: r}
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("placed", o.Items, "unconfirmed requests:", o.Outbox.Unconfirmed())
	if err := d.Drained(ctx); err != nil {
		panic(err)
	}
	o, _ = entity.Ask(ctx, host, "o-1", func(r entity.ReplyTo[shipping.Order]) shipping.Command { return shipping.Get{Reply: r} })
	held, _ := warehouse.Shipments(ctx)
	fmt.Println("confirmed shipments:", o.Shipped, "unconfirmed:", o.Outbox.Unconfirmed(), "warehouse holds:", held)
	// Output:
	// placed [book pen] unconfirmed requests: 1
	// confirmed shipments: 1 unconfirmed: 0 warehouse holds: map[Order|o-1:1]
}
