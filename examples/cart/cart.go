// Package cart is an example entity: a shopping cart. Items are added,
// removed and their quantities adjusted until the cart is checked out;
// a checked-out cart rejects every change but still answers Get. The cart
// snapshots its state every SnapshotEvery events, so recovery reads the
// latest snapshot and only the events after it.
package cart

import (
	"errors"
	"fmt"
	"maps"

	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/serialization"
)

// EntityType is the carts' entity type.
const EntityType = "Cart"

// SnapshotEvery is the snapshot interval: a snapshot is saved after every
// event whose sequence number is a multiple of it.
const SnapshotEvery = 50

// MaxQty is the most units of one SKU a cart holds.
const MaxQty = 999

var (
	// ErrCheckedOut is the reply to any change of a checked-out cart,
	// including a second Checkout.
	ErrCheckedOut = errors.New("cart: the cart is checked out")
	// ErrEmptyCart is the reply to a Checkout of a cart without items.
	ErrEmptyCart = errors.New("cart: the cart is empty")
	// ErrNoSKU is the reply to an AddItem with an empty SKU.
	ErrNoSKU = errors.New("cart: the SKU is empty")
	// ErrInvalidQty is the reply to an AddItem or AdjustQty whose quantity
	// is not positive.
	ErrInvalidQty = errors.New("cart: the quantity must be positive")
	// ErrQtyLimit is the reply to an AddItem or AdjustQty that would put
	// more than MaxQty units of one SKU in the cart.
	ErrQtyLimit = errors.New("cart: too many units of one item")
	// ErrNotInCart is the reply to a RemoveItem or AdjustQty of a SKU that
	// is not in the cart.
	ErrNotInCart = errors.New("cart: the item is not in the cart")
)

// Command is a command to a cart. Every command replies with the cart as it
// is after the command, or fails with one of the errors of this package
// (wrapped, with details); failed commands persist nothing. Every command
// but Get fails with ErrCheckedOut once the cart is checked out.
type Command interface {
	replyTo() entity.ReplyTo[Cart]
}

// AddItem adds Qty (> 0, ErrInvalidQty) units of SKU (not empty, ErrNoSKU)
// to the cart, to those already there; the total for the SKU must not
// exceed MaxQty (ErrQtyLimit). It persists ItemAdded.
type AddItem struct {
	SKU   string
	Qty   int
	Reply entity.ReplyTo[Cart]
}

// RemoveItem removes SKU, which must be in the cart (ErrNotInCart). It
// persists ItemRemoved.
type RemoveItem struct {
	SKU   string
	Reply entity.ReplyTo[Cart]
}

// AdjustQty sets the quantity of SKU, which must be in the cart
// (ErrNotInCart), to Qty, in 1..MaxQty (ErrInvalidQty, ErrQtyLimit; remove
// an item with RemoveItem). It persists QuantityAdjusted, or nothing when
// Qty is the current quantity.
type AdjustQty struct {
	SKU   string
	Qty   int
	Reply entity.ReplyTo[Cart]
}

// Checkout checks the cart out; it must hold at least one item
// (ErrEmptyCart). It persists CheckedOut; from then on the cart rejects
// every change.
type Checkout struct {
	Reply entity.ReplyTo[Cart]
}

// Get replies with the cart, checked out or not; it persists nothing.
type Get struct {
	Reply entity.ReplyTo[Cart]
}

func (c AddItem) replyTo() entity.ReplyTo[Cart]    { return c.Reply }
func (c RemoveItem) replyTo() entity.ReplyTo[Cart] { return c.Reply }
func (c AdjustQty) replyTo() entity.ReplyTo[Cart]  { return c.Reply }
func (c Checkout) replyTo() entity.ReplyTo[Cart]   { return c.Reply }
func (c Get) replyTo() entity.ReplyTo[Cart]        { return c.Reply }

// Event is a cart event.
type Event interface{ isEvent() }

// ItemAdded records Qty more units of SKU.
type ItemAdded struct {
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

// ItemRemoved records the removal of SKU.
type ItemRemoved struct {
	SKU string `json:"sku"`
}

// QuantityAdjusted records SKU's new quantity, Qty.
type QuantityAdjusted struct {
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

// CheckedOut records the checkout.
type CheckedOut struct{}

func (ItemAdded) isEvent()        {}
func (ItemRemoved) isEvent()      {}
func (QuantityAdjusted) isEvent() {}
func (CheckedOut) isEvent()       {}

// Cart is a cart's state, also stored in its snapshots. Replies carry a
// copy: changing it does not change the entity.
type Cart struct {
	// Items holds the quantity of each SKU in the cart; nil when empty.
	Items map[string]int `json:"items,omitempty"`
	// CheckedOut is set by Checkout; the cart then rejects every change.
	CheckedOut bool `json:"checked_out,omitempty"`
}

// Units returns the number of units in the cart, over all SKUs.
func (c Cart) Units() int {
	n := 0
	for _, q := range c.Items {
		n += q
	}
	return n
}

func (c Cart) clone() Cart {
	c.Items = maps.Clone(c.Items)
	return c
}

// Manifests under which events and snapshots are stored.
const (
	ManifestItemAdded        = "cart.ItemAdded"
	ManifestItemRemoved      = "cart.ItemRemoved"
	ManifestQuantityAdjusted = "cart.QuantityAdjusted"
	ManifestCheckedOut       = "cart.CheckedOut"
	ManifestCart             = "cart.Cart"
)

// Register adds the cart's events and state to a serialization registry.
func Register(r *serialization.Registry) error {
	return errors.Join(
		serialization.RegisterJSON[ItemAdded](r, ManifestItemAdded),
		serialization.RegisterJSON[ItemRemoved](r, ManifestItemRemoved),
		serialization.RegisterJSON[QuantityAdjusted](r, ManifestQuantityAdjusted),
		serialization.RegisterJSON[CheckedOut](r, ManifestCheckedOut),
		serialization.RegisterJSON[Cart](r, ManifestCart),
	)
}

var fx entity.Effects[Event, Cart]

// Behavior returns the cart behavior, which snapshots every SnapshotEvery
// events.
func Behavior() entity.Behavior[Command, Event, Cart] {
	return entity.Behavior[Command, Event, Cart]{
		EntityType: EntityType,
		Command:    handle,
		Event:      apply,
		Snapshots:  entity.SnapshotPolicy[Event, Cart]{Every: SnapshotEvery},
	}
}

func handle(c Cart, cmd Command) entity.ReplyEffect[Event, Cart] {
	if _, ok := cmd.(Get); ok {
		return reply(cmd)
	}
	if c.CheckedOut {
		return fail(cmd, ErrCheckedOut)
	}
	switch cmd := cmd.(type) {
	case AddItem:
		switch {
		case cmd.SKU == "":
			return fail(cmd, ErrNoSKU)
		case cmd.Qty <= 0:
			return fail(cmd, fmt.Errorf("%w: adding %d of %q", ErrInvalidQty, cmd.Qty, cmd.SKU))
		case cmd.Qty > MaxQty-c.Items[cmd.SKU]:
			return fail(cmd, fmt.Errorf("%w: adding %d of %q to %d, above %d", ErrQtyLimit, cmd.Qty, cmd.SKU, c.Items[cmd.SKU], MaxQty))
		}
		return persist(cmd, ItemAdded{SKU: cmd.SKU, Qty: cmd.Qty})
	case RemoveItem:
		if _, ok := c.Items[cmd.SKU]; !ok {
			return fail(cmd, fmt.Errorf("%w: %q", ErrNotInCart, cmd.SKU))
		}
		return persist(cmd, ItemRemoved{SKU: cmd.SKU})
	case AdjustQty:
		qty, ok := c.Items[cmd.SKU]
		switch {
		case !ok:
			return fail(cmd, fmt.Errorf("%w: %q", ErrNotInCart, cmd.SKU))
		case cmd.Qty <= 0:
			return fail(cmd, fmt.Errorf("%w: setting %q to %d", ErrInvalidQty, cmd.SKU, cmd.Qty))
		case cmd.Qty > MaxQty:
			return fail(cmd, fmt.Errorf("%w: setting %q to %d, above %d", ErrQtyLimit, cmd.SKU, cmd.Qty, MaxQty))
		case cmd.Qty == qty:
			return reply(cmd)
		}
		return persist(cmd, QuantityAdjusted{SKU: cmd.SKU, Qty: cmd.Qty})
	case Checkout:
		if len(c.Items) == 0 {
			return fail(cmd, ErrEmptyCart)
		}
		return persist(cmd, CheckedOut{})
	}
	return fx.Unhandled()
}

// reply persists nothing and replies with the cart.
func reply(cmd Command) entity.ReplyEffect[Event, Cart] {
	return fx.Reply(func(c Cart) { cmd.replyTo().Send(c.clone()) })
}

// persist stores e and replies with the new cart.
func persist(cmd Command, e Event) entity.ReplyEffect[Event, Cart] {
	return fx.Persist(e).ThenReply(func(c Cart) { cmd.replyTo().Send(c.clone()) })
}

// fail persists nothing and fails cmd with err.
func fail(cmd Command, err error) entity.ReplyEffect[Event, Cart] {
	return fx.Reply(func(Cart) { cmd.replyTo().Fail(err) })
}

// apply returns the cart after e. It never changes the Items of the cart it
// is given (copy on write), so no state handed out is changed later.
func apply(c Cart, e Event) Cart {
	switch e := e.(type) {
	case ItemAdded:
		c.Items = edit(c.Items, func(m map[string]int) { m[e.SKU] += e.Qty })
	case ItemRemoved:
		c.Items = edit(c.Items, func(m map[string]int) { delete(m, e.SKU) })
	case QuantityAdjusted:
		c.Items = edit(c.Items, func(m map[string]int) { m[e.SKU] = e.Qty })
	case CheckedOut:
		c.CheckedOut = true
	}
	return c
}

// edit returns a copy of items changed by fn; an empty result is nil, as an
// empty cart decodes from a snapshot.
func edit(items map[string]int, fn func(map[string]int)) map[string]int {
	m := make(map[string]int, len(items)+1)
	maps.Copy(m, items)
	fn(m)
	if len(m) == 0 {
		return nil
	}
	return m
}
