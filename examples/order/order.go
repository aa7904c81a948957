// Package order is an example entity: a persistent state machine, the
// replacement for Akka's persistent FSM. An order moves
//
//	new ──Create──▶ created ──Pay──▶ paid ──Ship──▶ shipped
//	                   │               │
//	                   └───Cancel──────┴──────────▶ cancelled
//
// and shipped and cancelled are final. The command handler dispatches on the
// order's Status to one handler per state, so each state lists exactly the
// commands it accepts. A command that is not valid in the current state
// fails with an *InvalidTransitionError and persists nothing; Get works in
// every state. Every event is tagged "order".
package order

import (
	"errors"
	"fmt"
	"slices"

	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/serialization"
)

// EntityType is the orders' entity type.
const EntityType = "Order"

// Tag is the tag stored with every order event.
const Tag = "order"

// Status is the state of an order's state machine.
type Status string

// The states of an order. StatusNew is the state of an order with no events;
// StatusShipped and StatusCancelled are final: only Get is accepted there.
const (
	StatusNew       Status = "new"
	StatusCreated   Status = "created"
	StatusPaid      Status = "paid"
	StatusShipped   Status = "shipped"
	StatusCancelled Status = "cancelled"
)

// Final reports whether s is a final state (shipped or cancelled).
func (s Status) Final() bool { return s == StatusShipped || s == StatusCancelled }

var (
	// ErrNoItems is the reply to a Create without items.
	ErrNoItems = errors.New("order: an order needs at least one item")
	// ErrInvalidTotal is the reply to a Create whose total is not positive.
	ErrInvalidTotal = errors.New("order: the total must be positive")
	// ErrNoReason is the reply to a Cancel without a reason.
	ErrNoReason = errors.New("order: a cancellation needs a reason")
)

// InvalidTransitionError is the reply to a command that is not valid in the
// order's current state, From. The command persisted nothing.
type InvalidTransitionError struct {
	// From is the state the order was in.
	From Status
	// Command names the rejected command: "Create", "Pay", "Ship" or
	// "Cancel".
	Command string
}

// Error says which command the state rejected.
func (e *InvalidTransitionError) Error() string {
	return fmt.Sprintf("order: %s is not valid for an order that is %s", e.Command, e.From)
}

// PaymentError is the reply to a Pay whose amount differs from the order's
// total. The command persisted nothing; the order stays created.
type PaymentError struct {
	// Due is the order's total; Paid is the amount offered.
	Due, Paid int64
}

// Error names the amount paid and the amount due.
func (e *PaymentError) Error() string {
	return fmt.Sprintf("order: payment of %d does not match the total of %d", e.Paid, e.Due)
}

// Command is a command to an order. Every command replies with the order as
// it is after the command, or fails; failed commands persist nothing.
type Command interface {
	name() string
	replyTo() entity.ReplyTo[Order]
}

// Create places a new order: valid only in StatusNew. Items must not be
// empty (ErrNoItems) and Total (cents) must be positive (ErrInvalidTotal).
// It persists Created and the order becomes StatusCreated.
type Create struct {
	Items []string
	Total int64
	Reply entity.ReplyTo[Order]
}

// Pay pays a created order: valid only in StatusCreated. Amount (cents) must
// equal the order's total, or Pay fails with a *PaymentError. It persists
// Paid and the order becomes StatusPaid.
type Pay struct {
	Amount int64
	Reply  entity.ReplyTo[Order]
}

// Ship ships a paid order: valid only in StatusPaid. It persists Shipped and
// the order becomes StatusShipped, a final state.
type Ship struct {
	Reply entity.ReplyTo[Order]
}

// Cancel cancels an order that is created or paid (not yet shipped). Reason
// must not be empty (ErrNoReason). It persists Cancelled and the order
// becomes StatusCancelled, a final state.
type Cancel struct {
	Reason string
	Reply  entity.ReplyTo[Order]
}

// Get replies with the order, in every state; it persists nothing.
type Get struct {
	Reply entity.ReplyTo[Order]
}

func (Create) name() string { return "Create" }
func (Pay) name() string    { return "Pay" }
func (Ship) name() string   { return "Ship" }
func (Cancel) name() string { return "Cancel" }
func (Get) name() string    { return "Get" }

func (c Create) replyTo() entity.ReplyTo[Order] { return c.Reply }
func (c Pay) replyTo() entity.ReplyTo[Order]    { return c.Reply }
func (c Ship) replyTo() entity.ReplyTo[Order]   { return c.Reply }
func (c Cancel) replyTo() entity.ReplyTo[Order] { return c.Reply }
func (c Get) replyTo() entity.ReplyTo[Order]    { return c.Reply }

// Event is an order event. Each one moves the order to a new state.
type Event interface{ isEvent() }

// Created records a placed order: the order becomes StatusCreated.
type Created struct {
	Items []string `json:"items"`
	Total int64    `json:"total"`
}

// Paid records a payment of Amount: the order becomes StatusPaid.
type Paid struct {
	Amount int64 `json:"amount"`
}

// Shipped records a shipment: the order becomes StatusShipped.
type Shipped struct{}

// Cancelled records a cancellation: the order becomes StatusCancelled.
type Cancelled struct {
	Reason string `json:"reason"`
}

func (Created) isEvent()   {}
func (Paid) isEvent()      {}
func (Shipped) isEvent()   {}
func (Cancelled) isEvent() {}

// Order is an order's state. Replies carry a copy: changing it does not
// change the entity.
type Order struct {
	Status Status   `json:"status"`
	Items  []string `json:"items,omitempty"`
	// Total is the amount due, in cents; Paid the amount paid.
	Total int64 `json:"total,omitempty"`
	Paid  int64 `json:"paid,omitempty"`
	// CancelReason is the reason given by Cancel.
	CancelReason string `json:"cancel_reason,omitempty"`
}

// clone returns o with its own Items.
func (o Order) clone() Order {
	o.Items = slices.Clone(o.Items)
	return o
}

// Manifests under which events and snapshots are stored.
const (
	ManifestCreated   = "order.Created"
	ManifestPaid      = "order.Paid"
	ManifestShipped   = "order.Shipped"
	ManifestCancelled = "order.Cancelled"
	ManifestOrder     = "order.Order"
)

// Register adds the order's events and state to a serialization registry.
func Register(r *serialization.Registry) error {
	return errors.Join(
		serialization.RegisterJSON[Created](r, ManifestCreated),
		serialization.RegisterJSON[Paid](r, ManifestPaid),
		serialization.RegisterJSON[Shipped](r, ManifestShipped),
		serialization.RegisterJSON[Cancelled](r, ManifestCancelled),
		serialization.RegisterJSON[Order](r, ManifestOrder),
	)
}

var fx entity.Effects[Event, Order]

// Behavior returns the order behavior: an order starts in StatusNew, its
// commands are handled by the handler of its current state, and every event
// is tagged Tag.
func Behavior() entity.Behavior[Command, Event, Order] {
	return entity.Behavior[Command, Event, Order]{
		EntityType: EntityType,
		EmptyState: func() Order { return Order{Status: StatusNew} },
		Command:    handle,
		Event:      apply,
		Tagger:     func(Event) []string { return []string{Tag} },
	}
}

// handle dispatches to the handler of the order's state.
func handle(o Order, c Command) entity.ReplyEffect[Event, Order] {
	switch o.Status {
	case StatusNew:
		return handleNew(o, c)
	case StatusCreated:
		return handleCreated(o, c)
	case StatusPaid:
		return handlePaid(o, c)
	case StatusShipped, StatusCancelled:
		return handleFinal(o, c)
	}
	return fx.Unhandled() // a state this version does not know
}

// handleNew accepts Create.
func handleNew(o Order, c Command) entity.ReplyEffect[Event, Order] {
	switch c := c.(type) {
	case Create:
		switch {
		case len(c.Items) == 0:
			return fail(c, ErrNoItems)
		case c.Total <= 0:
			return fail(c, ErrInvalidTotal)
		}
		return persist(c, Created{Items: slices.Clone(c.Items), Total: c.Total})
	}
	return otherwise(o, c)
}

// handleCreated accepts Pay and Cancel.
func handleCreated(o Order, c Command) entity.ReplyEffect[Event, Order] {
	switch c := c.(type) {
	case Pay:
		if c.Amount != o.Total {
			return fail(c, &PaymentError{Due: o.Total, Paid: c.Amount})
		}
		return persist(c, Paid{Amount: c.Amount})
	case Cancel:
		return cancel(c)
	}
	return otherwise(o, c)
}

// handlePaid accepts Ship and Cancel.
func handlePaid(o Order, c Command) entity.ReplyEffect[Event, Order] {
	switch c := c.(type) {
	case Ship:
		return persist(c, Shipped{})
	case Cancel:
		return cancel(c)
	}
	return otherwise(o, c)
}

// handleFinal accepts nothing but Get.
func handleFinal(o Order, c Command) entity.ReplyEffect[Event, Order] {
	return otherwise(o, c)
}

// otherwise answers Get, and rejects every other command as an invalid
// transition from o's state.
func otherwise(o Order, c Command) entity.ReplyEffect[Event, Order] {
	if _, ok := c.(Get); ok {
		return fx.Reply(func(o Order) { c.replyTo().Send(o.clone()) })
	}
	return fail(c, &InvalidTransitionError{From: o.Status, Command: c.name()})
}

func cancel(c Cancel) entity.ReplyEffect[Event, Order] {
	if c.Reason == "" {
		return fail(c, ErrNoReason)
	}
	return persist(c, Cancelled{Reason: c.Reason})
}

// persist stores e and replies with the new state.
func persist(c Command, e Event) entity.ReplyEffect[Event, Order] {
	return fx.Persist(e).ThenReply(func(o Order) { c.replyTo().Send(o.clone()) })
}

// fail persists nothing and fails c with err.
func fail(c Command, err error) entity.ReplyEffect[Event, Order] {
	return fx.Reply(func(Order) { c.replyTo().Fail(err) })
}

// apply moves the order to the state the event records. It never changes
// the Items of the state it is given.
func apply(o Order, e Event) Order {
	switch e := e.(type) {
	case Created:
		o.Status, o.Items, o.Total = StatusCreated, e.Items, e.Total
	case Paid:
		o.Status, o.Paid = StatusPaid, e.Amount
	case Shipped:
		o.Status = StatusShipped
	case Cancelled:
		o.Status, o.CancelReason = StatusCancelled, e.Reason
	}
	return o
}
