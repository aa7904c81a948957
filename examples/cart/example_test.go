package cart_test

import (
	"context"
	"fmt"

	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/examples/cart"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/store/memory"
)

// A cart runs through a Host on the in-memory store: once checked out, it
// rejects every change.
func ExampleBehavior() {
	ctx := context.Background()
	store := memory.New()
	defer store.Close()
	reg := serialization.NewRegistry()
	if err := cart.Register(reg); err != nil {
		panic(err)
	}
	h, err := entity.NewHost(cart.Behavior(), entity.HostConfig{Journal: store.Journal(), Snapshots: store.Snapshots(), Registry: reg})
	if err != nil {
		panic(err)
	}
	defer h.Shutdown(ctx)

	send := func(mk func(entity.ReplyTo[cart.Cart]) cart.Command) {
		c, err := entity.Ask(ctx, h, "c-1", mk)
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		fmt.Printf("%v, %d units, checked out: %t\n", c.Items, c.Units(), c.CheckedOut)
	}
	send(func(r entity.ReplyTo[cart.Cart]) cart.Command { return cart.AddItem{SKU: "apple", Qty: 2, Reply: r} })
	send(func(r entity.ReplyTo[cart.Cart]) cart.Command { return cart.AddItem{SKU: "pear", Qty: 1, Reply: r} })
	send(func(r entity.ReplyTo[cart.Cart]) cart.Command { return cart.AdjustQty{SKU: "apple", Qty: 5, Reply: r} })
	send(func(r entity.ReplyTo[cart.Cart]) cart.Command { return cart.RemoveItem{SKU: "plum", Reply: r} })
	send(func(r entity.ReplyTo[cart.Cart]) cart.Command { return cart.Checkout{Reply: r} })
	send(func(r entity.ReplyTo[cart.Cart]) cart.Command { return cart.AddItem{SKU: "plum", Qty: 1, Reply: r} })
	// Output:
	// map[apple:2], 2 units, checked out: false
	// map[apple:2 pear:1], 3 units, checked out: false
	// map[apple:5 pear:1], 6 units, checked out: false
	// error: cart: the item is not in the cart: "plum"
	// map[apple:5 pear:1], 6 units, checked out: true
	// error: cart: the cart is checked out
}
