package projection

import (
	"context"
	"fmt"

	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/serialization"
)

// Decoder turns an envelope's stored event into the values a typed handler
// takes: usually one; an event adapter may make several, or none.
//
// For an entity's events, decode as its recovery does, through the
// behavior's adapters:
//
//	projection.Decoder[Event](func(env query.Envelope) ([]Event, error) {
//		return behavior.DecodeEvent(reg, env.Repr())
//	})
type Decoder[E any] func(env query.Envelope) ([]E, error)

// RegistryDecoder decodes with reg (serializer id and manifest of the
// envelope); a value that is not an E is an error naming its type.
func RegistryDecoder[E any](reg *serialization.Registry) Decoder[E] {
	return func(env query.Envelope) ([]E, error) {
		v, err := reg.DeserializeRepr(env.Repr())
		if err != nil {
			return nil, err
		}
		e, ok := v.(E)
		if !ok {
			var want *E
			return nil, fmt.Errorf("decodes to %T, not %T", v, want)
		}
		return []E{e}, nil
	}
}

// Event is a decoded event with its envelope (offset, persistence id,
// sequence number, tags, ...), as grouped typed handlers take them.
type Event[E any] struct {
	query.Envelope
	Event E
}

// decode decodes env with d, wrapping an error with the event it is.
func (d Decoder[E]) decode(env query.Envelope) ([]E, error) {
	es, err := d(env)
	if err != nil {
		return nil, fmt.Errorf("projection: decode event %d of %s (serializer %d, manifest %q): %w", env.SequenceNr, env.PersistenceID, env.SerializerID, env.Manifest, err)
	}
	return es, nil
}

// decodeAll decodes envs in order.
func (d Decoder[E]) decodeAll(envs []query.Envelope) ([]Event[E], error) {
	out := make([]Event[E], 0, len(envs))
	for _, env := range envs {
		es, err := d.decode(env)
		if err != nil {
			return nil, err
		}
		for _, e := range es {
			out = append(out, Event[E]{Envelope: env, Event: e})
		}
	}
	return out, nil
}

// Typed makes a handler for AtLeastOnce of one that takes decoded events:
// h is called with each value decode makes of an envelope, in order. A
// decoding error is the handler's error (the Recovery strategy decides).
func Typed[E any](decode Decoder[E], h func(ctx context.Context, env query.Envelope, event E) error) func(context.Context, query.Envelope) error {
	return func(ctx context.Context, env query.Envelope) error {
		es, err := decode.decode(env)
		if err != nil {
			return err
		}
		for _, e := range es {
			if err := h(ctx, env, e); err != nil {
				return err
			}
		}
		return nil
	}
}

// TypedTx is Typed for ExactlyOnce: h also gets the offset store's
// transaction.
func TypedTx[Tx, E any](decode Decoder[E], h func(ctx context.Context, tx Tx, env query.Envelope, event E) error) func(context.Context, Tx, query.Envelope) error {
	return func(ctx context.Context, tx Tx, env query.Envelope) error {
		es, err := decode.decode(env)
		if err != nil {
			return err
		}
		for _, e := range es {
			if err := h(ctx, tx, env, e); err != nil {
				return err
			}
		}
		return nil
	}
}

// TypedGroup is Typed for Grouped: h gets a group's decoded events, in
// order.
func TypedGroup[E any](decode Decoder[E], h func(ctx context.Context, events []Event[E]) error) func(context.Context, []query.Envelope) error {
	return func(ctx context.Context, envs []query.Envelope) error {
		events, err := decode.decodeAll(envs)
		if err != nil {
			return err
		}
		return h(ctx, events)
	}
}

// TypedGroupTx is Typed for ExactlyOnceGrouped: h gets a group's decoded
// events and the transaction they commit in with the offset.
func TypedGroupTx[Tx, E any](decode Decoder[E], h func(ctx context.Context, tx Tx, events []Event[E]) error) func(context.Context, Tx, []query.Envelope) error {
	return func(ctx context.Context, tx Tx, envs []query.Envelope) error {
		events, err := decode.decodeAll(envs)
		if err != nil {
			return err
		}
		return h(ctx, tx, events)
	}
}
