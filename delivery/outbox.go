// Package delivery delivers messages from persistent entities to
// destinations at least once: Akka's AtLeastOnceDelivery, the "reliable
// channels" of the original Akka Persistence manual, for Annals entities.
//
// An entity keeps an [Outbox] in its state. Its event handler changes it,
// so a replay rebuilds it exactly:
//
//   - the event that records the intent to deliver (an order was paid,
//     so it must be shipped) calls Outbox.Deliver, which assigns the next
//     delivery id;
//   - the event that records a confirmation calls Outbox.Confirm.
//
// A [Deliverer] follows every entity's outbox (wire it with [Attach]),
// sends each pending message to its [Destination], and, once the
// destination has taken it, asks the entity to persist the confirmation
// (Config.Confirm, typically a Send of a confirm command to the host).
// Until then it redelivers the message every RedeliverInterval.
//
// The guarantees, and what they ask of a destination:
//
//   - A message is delivered at least once: it stays in the outbox, and is
//     redelivered after every restart and every interval, until its
//     confirmation is stored. A confirmed message is never delivered again,
//     since a replay rebuilds the outbox without it.
//   - A crash after the destination took a message and before the
//     confirmation was stored delivers it again. So does a destination that
//     took a message but answered too late. Destinations de-duplicate by
//     ([Delivery].From, [Delivery].ID), which never changes across
//     redeliveries and restarts.
//   - Each entity's outbox is bounded: a command handler checks
//     [Outbox.Check] before persisting a new delivery and answers the
//     caller with its error (ErrTooManyUnconfirmed), as Akka's
//     MaxUnconfirmedMessagesExceededException does.
//
// Akka's "sender resolution" problem (an ActorRef stored in the journal
// that points at a dead incarnation) does not arise: a destination is a
// name resolved in the running process (Config.Destinations), never a
// reference stored with the message. A reply path, where one is needed,
// is part of the message (an entity id, a topic).
//
// Redeliveries continue while an entity is passivated: the Deliverer keeps
// the pending messages it was given. After a process restart it knows of
// an entity's outbox only once the entity recovers; recover the entities
// that may hold pending messages (for example by sending each a command
// at start, from a list the application keeps or from the journal's
// persistence ids).
package delivery

import (
	"errors"
	"fmt"
	"slices"
)

// DefaultMaxUnconfirmed is Akka's max-unconfirmed-messages: the bound a
// command handler gives Outbox.Check when it has no other.
const DefaultMaxUnconfirmed = 100_000

// ErrTooManyUnconfirmed reports an outbox that holds as many unconfirmed
// messages as its bound: the command must not deliver another.
var ErrTooManyUnconfirmed = errors.New("delivery: too many unconfirmed messages")

// Outbox is one entity's unconfirmed deliveries: a value in the entity's
// state (and so in its snapshots), changed only by its event handler.
// Rules:
//   - Delivery ids start at 1, grow by one per Deliver and are never
//     reused, even after confirmation.
//   - Deliver and Confirm return a new Outbox and never change what the
//     one they are called on holds (event handlers must not mutate the
//     state they are given). Deliver appends in place when the slice has
//     room, as append does: keep using the outbox it returns, as a state
//     moving forward does, not two outboxes made from one.
//   - Pending holds the unconfirmed deliveries in id order.
//   - Costs: Deliver is amortized O(1), so a replay of n deliveries is
//     O(n); Confirm of the oldest pending delivery is O(1), of another
//     O(pending).
//
// Its fields are exported so that it serializes with the state.
type Outbox[M any] struct {
	// LastID is the last delivery id assigned (0: none yet).
	LastID int64 `json:"last_id"`
	// Pending are the unconfirmed deliveries, in id order.
	Pending []Pending[M] `json:"pending,omitempty"`
}

// Pending is one unconfirmed delivery.
type Pending[M any] struct {
	ID          int64  `json:"id"`
	Destination string `json:"destination"`
	Message     M      `json:"message"`
}

// Deliver returns the outbox with msg pending for destination under the
// next delivery id, and that id. Call it from the event handler of the
// event that records the intent to deliver.
func (o Outbox[M]) Deliver(destination string, msg M) (Outbox[M], int64) {
	id := o.LastID + 1
	return Outbox[M]{LastID: id, Pending: append(o.Pending, Pending[M]{ID: id, Destination: destination, Message: msg})}, id
}

// Confirm returns the outbox without delivery id. An id that is not
// pending (confirmed already: a duplicate confirmation) leaves it as it
// is. Call it from the event handler of the confirmation event.
func (o Outbox[M]) Confirm(id int64) Outbox[M] {
	i, found := slices.BinarySearchFunc(o.Pending, id, func(p Pending[M], id int64) int {
		switch {
		case p.ID < id:
			return -1
		case p.ID > id:
			return 1
		}
		return 0
	})
	switch {
	case !found:
		return o
	case len(o.Pending) == 1:
		return Outbox[M]{LastID: o.LastID}
	case i == 0: // the oldest, as confirmations usually come
		return Outbox[M]{LastID: o.LastID, Pending: o.Pending[1:]}
	}
	pending := make([]Pending[M], 0, len(o.Pending)-1)
	pending = append(append(pending, o.Pending[:i]...), o.Pending[i+1:]...)
	if len(pending) == 0 {
		pending = nil
	}
	return Outbox[M]{LastID: o.LastID, Pending: pending}
}

// IsPending reports whether delivery id is unconfirmed.
func (o Outbox[M]) IsPending(id int64) bool {
	for _, p := range o.Pending {
		if p.ID == id {
			return true
		}
	}
	return false
}

// Unconfirmed returns the number of unconfirmed deliveries.
func (o Outbox[M]) Unconfirmed() int { return len(o.Pending) }

// Check returns an error wrapping ErrTooManyUnconfirmed when the outbox
// holds max or more unconfirmed deliveries (max < 1: DefaultMaxUnconfirmed).
// A command handler calls it before persisting a new delivery.
func (o Outbox[M]) Check(max int) error {
	if max < 1 {
		max = DefaultMaxUnconfirmed
	}
	if len(o.Pending) >= max {
		return fmt.Errorf("%w: %d unconfirmed, at most %d", ErrTooManyUnconfirmed, len(o.Pending), max)
	}
	return nil
}
