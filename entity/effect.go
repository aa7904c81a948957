package entity

import "slices"

// Effect is what a command handler decides: events to persist (or none), and
// what happens after they are stored. Build effects with [Effects]; chain
// Then, ThenStop and ThenUnstashAll; finish with ThenReply or ThenNoReply to
// get the [ReplyEffect] a command handler returns.
//
// Rules:
//   - Events of one effect are persisted as one atomic write: all or none.
//   - Then-callbacks (side effects and the reply) run once, in order, after
//     the events are stored and applied, with the new state; never during
//     recovery, and not at all when the write fails or is rejected.
type Effect[E, S any] struct {
	events    []E
	persist   bool
	stop      bool
	unstash   bool
	stash     bool
	unhandled bool
	after     []func(S)
}

// ReplyEffect is an Effect whose reply has been decided: a command handler
// returns one, so forgetting to answer a command does not compile. Build it
// with Effect.ThenReply or Effect.ThenNoReply, or with Effects.Unhandled,
// Effects.Stash and Effects.Reply.
type ReplyEffect[E, S any] struct {
	effect Effect[E, S]
}

// Effects builds effects for event type E and state type S. It has no
// state; declare one per behavior:
//
//	var fx entity.Effects[Event, State]
//	... return fx.Persist(Deposited{Amount: 5}).ThenReply(func(s State) { c.Reply.Send(s.Balance) })
type Effects[E, S any] struct{}

// Persist persists events as one atomic write. With no events it is None.
func (Effects[E, S]) Persist(events ...E) Effect[E, S] {
	return Effect[E, S]{events: events, persist: len(events) > 0}
}

// None persists nothing; Then-callbacks run at once with the current state.
func (Effects[E, S]) None() Effect[E, S] { return Effect[E, S]{} }

// Stop persists nothing and stops the entity after the Then-callbacks; the
// next command for its id recovers a new instance from the journal.
func (Effects[E, S]) Stop() Effect[E, S] { return Effect[E, S]{stop: true} }

// UnstashAll persists nothing and, after the Then-callbacks, processes the
// stashed commands, oldest first, before any newer command.
func (Effects[E, S]) UnstashAll() Effect[E, S] { return Effect[E, S]{unstash: true} }

// Unhandled declares the command not handled in this state: nothing is
// persisted and an Ask for it fails with ErrUnhandled.
func (Effects[E, S]) Unhandled() ReplyEffect[E, S] {
	return ReplyEffect[E, S]{Effect[E, S]{unhandled: true}}
}

// Stash keeps the command aside until an effect unstashes it; it is then
// handled again with the state of that time. The stash holds at most the
// host's StashCapacity commands; beyond, the command fails with
// ErrStashOverflow.
func (Effects[E, S]) Stash() ReplyEffect[E, S] { return ReplyEffect[E, S]{Effect[E, S]{stash: true}} }

// Reply persists nothing and replies at once: fn runs with the current state
// and sends the reply.
func (fx Effects[E, S]) Reply(fn func(S)) ReplyEffect[E, S] { return fx.None().ThenReply(fn) }

// Then adds a side effect that runs with the new state after the events are
// stored. Side effects run in the order added.
func (e Effect[E, S]) Then(fn func(S)) Effect[E, S] {
	e.after = append(slices.Clip(e.after), fn) // never shares a tail with e
	return e
}

// ThenStop stops the entity after the events are stored and the
// Then-callbacks have run.
func (e Effect[E, S]) ThenStop() Effect[E, S] { e.stop = true; return e }

// ThenUnstashAll processes the stashed commands after this effect.
func (e Effect[E, S]) ThenUnstashAll() Effect[E, S] { e.unstash = true; return e }

// ThenReply finishes the effect with a reply: fn runs last, with the new
// state, and sends it (typically through a ReplyTo carried by the command).
func (e Effect[E, S]) ThenReply(fn func(S)) ReplyEffect[E, S] {
	return ReplyEffect[E, S]{e.Then(fn)}
}

// ThenNoReply finishes an effect for a command that expects no reply.
func (e Effect[E, S]) ThenNoReply() ReplyEffect[E, S] { return ReplyEffect[E, S]{e} }

// Events returns the events the effect persists (for tests of handlers).
func (r ReplyEffect[E, S]) Events() []E { return r.effect.events }
