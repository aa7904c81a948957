package order_test

import (
	"context"
	"fmt"

	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/examples/order"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/store/memory"
)

// An order runs through a Host on the in-memory store: commands that are
// not valid in the order's state fail and change nothing.
func ExampleBehavior() {
	ctx := context.Background()
	store := memory.New()
	defer store.Close()
	reg := serialization.NewRegistry()
	if err := order.Register(reg); err != nil {
		panic(err)
	}
	h, err := entity.NewHost(order.Behavior(), entity.HostConfig{Journal: store.Journal(), Snapshots: store.Snapshots(), Registry: reg})
	if err != nil {
		panic(err)
	}
	defer h.Shutdown(ctx)

	send := func(mk func(entity.ReplyTo[order.Order]) order.Command) {
		o, err := entity.Ask(ctx, h, "o-1", mk)
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		fmt.Printf("%s: %v, total %d, paid %d\n", o.Status, o.Items, o.Total, o.Paid)
	}
	send(func(r entity.ReplyTo[order.Order]) order.Command {
		return order.Create{Items: []string{"book", "pen"}, Total: 1500, Reply: r}
	})
	send(func(r entity.ReplyTo[order.Order]) order.Command { return order.Ship{Reply: r} })
	send(func(r entity.ReplyTo[order.Order]) order.Command { return order.Pay{Amount: 1000, Reply: r} })
	send(func(r entity.ReplyTo[order.Order]) order.Command { return order.Pay{Amount: 1500, Reply: r} })
	send(func(r entity.ReplyTo[order.Order]) order.Command { return order.Ship{Reply: r} })
	send(func(r entity.ReplyTo[order.Order]) order.Command { return order.Cancel{Reason: "too late", Reply: r} })
	send(func(r entity.ReplyTo[order.Order]) order.Command { return order.Get{Reply: r} })
	// Output:
	// created: [book pen], total 1500, paid 0
	// error: order: Ship is not valid for an order that is created
	// error: order: payment of 1000 does not match the total of 1500
	// paid: [book pen], total 1500, paid 1500
	// shipped: [book pen], total 1500, paid 1500
	// error: order: Cancel is not valid for an order that is shipped
	// shipped: [book pen], total 1500, paid 1500
}
