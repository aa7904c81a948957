// Package shipping is an example of at-least-once delivery (package
// delivery): an order, once placed, asks a warehouse to ship it, and keeps
// asking until the warehouse has taken the request and the order has
// stored the confirmation. The request rides in the order's outbox, part
// of its state, so a crash at any moment loses no request and a
// confirmed one is never sent again; the warehouse de-duplicates the
// requests sent more than once (a crash between its answer and the
// confirmation, an answer that came too late).
package shipping

import (
	"errors"
	"slices"

	"github.com/annals-go/annals/delivery"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/serialization"
)

// EntityType is the orders' entity type.
const EntityType = "Order"

// Warehouse is the destination name of ship requests.
const Warehouse = "warehouse"

// MaxUnconfirmed bounds an order's unconfirmed requests (one per
// placement; a reorder adds one).
const MaxUnconfirmed = 16

// ShipRequest is the message delivered to the warehouse.
type ShipRequest struct {
	Items []string `json:"items"`
}

// Order is an order's state; Outbox holds its unconfirmed ship requests.
type Order struct {
	Items   []string                     `json:"items"`
	Placed  bool                         `json:"placed"`
	Shipped int                          `json:"shipped"` // confirmed ship requests
	Outbox  delivery.Outbox[ShipRequest] `json:"outbox"`
}

// Commands.
type (
	// Command is an order command.
	Command interface{ isCommand() }
	// Place places the order (again, for a reorder: Reorder true); an
	// order placed already answers with its state unless Reorder.
	Place struct {
		Items   []string
		Reorder bool
		Reply   entity.ReplyTo[Order]
	}
	// ConfirmShipment stores the warehouse's confirmation of a request;
	// Run is recorded with it (the example's crash test uses it).
	ConfirmShipment struct {
		DeliveryID int64
		Run        int
	}
	// Get replies with the order.
	Get struct{ Reply entity.ReplyTo[Order] }
)

func (Place) isCommand()           {}
func (ConfirmShipment) isCommand() {}
func (Get) isCommand()             {}

// Events.
type (
	// Event is an order event.
	Event interface{ isEvent() }
	// Placed records a placement and the ship request it owes.
	Placed struct {
		Items []string `json:"items"`
	}
	// ShipmentConfirmed records the warehouse's confirmation of a request.
	ShipmentConfirmed struct {
		DeliveryID int64 `json:"delivery_id"`
		Run        int   `json:"run,omitempty"`
	}
)

func (Placed) isEvent()            {}
func (ShipmentConfirmed) isEvent() {}

// ErrNoItems is the reply to a Place without items.
var ErrNoItems = errors.New("shipping: an order needs at least one item")

// Register registers the events and the state in r.
func Register(r *serialization.Registry) error {
	return errors.Join(
		serialization.RegisterJSON[Placed](r, "shipping.Placed"),
		serialization.RegisterJSON[ShipmentConfirmed](r, "shipping.ShipmentConfirmed"),
		serialization.RegisterJSON[Order](r, "shipping.Order"),
	)
}

var fx entity.Effects[Event, Order]

// Behavior returns the order behavior. Attach a Deliverer to it
// (delivery.Attach with Outbox) before making its host.
func Behavior() entity.Behavior[Command, Event, Order] {
	return entity.Behavior[Command, Event, Order]{
		EntityType: EntityType,
		Command: func(o Order, c Command) entity.ReplyEffect[Event, Order] {
			switch c := c.(type) {
			case Place:
				switch {
				case len(c.Items) == 0:
					return fx.Reply(func(Order) { c.Reply.Fail(ErrNoItems) })
				case o.Placed && !c.Reorder:
					return fx.Reply(func(o Order) { c.Reply.Send(o) })
				}
				if err := o.Outbox.Check(MaxUnconfirmed); err != nil {
					return fx.Reply(func(Order) { c.Reply.Fail(err) })
				}
				return fx.Persist(Placed{Items: c.Items}).ThenReply(func(o Order) { c.Reply.Send(o) })
			case ConfirmShipment:
				if !o.Outbox.IsPending(c.DeliveryID) {
					return fx.None().ThenNoReply() // confirmed before: a duplicate
				}
				return fx.Persist(ShipmentConfirmed{DeliveryID: c.DeliveryID, Run: c.Run}).ThenNoReply()
			case Get:
				return fx.Reply(func(o Order) { c.Reply.Send(o) })
			}
			return fx.Unhandled()
		},
		Event: func(o Order, e Event) Order {
			switch e := e.(type) {
			case Placed:
				o.Items, o.Placed = slices.Clone(e.Items), true
				o.Outbox, _ = o.Outbox.Deliver(Warehouse, ShipRequest{Items: slices.Clone(e.Items)})
			case ShipmentConfirmed:
				o.Outbox = o.Outbox.Confirm(e.DeliveryID)
				o.Shipped++
			}
			return o
		},
		Snapshots: entity.SnapshotPolicy[Event, Order]{Every: 3},
	}
}

// Outbox is the order's outbox, for delivery.Attach.
func Outbox(o Order) delivery.Outbox[ShipRequest] { return o.Outbox }
