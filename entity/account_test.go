package entity_test

import (
	"context"
	"errors"
	"testing"

	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/entity/entitytest"
	"github.com/annals-go/annals/internal/entitystores"
	"github.com/annals-go/annals/serialization"
)

// The account behavior used by these tests.

type Command interface{ isCommand() }

type Deposit struct {
	Amount int64
	Reply  entity.ReplyTo[int64]
}
type Withdraw struct {
	Amount int64
	Reply  entity.ReplyTo[int64]
}
type GetBalance struct{ Reply entity.ReplyTo[int64] }
type Close struct{}       // persists Closed, then stops
type Hold struct{}        // stashes every command until Release
type Release struct{}     // unstashes
type Panic struct{}       // the handler panics
type DepositMany struct { // persists several events atomically
	Amounts []int64
	Reply   entity.ReplyTo[int64]
}
type Forget struct{} // handled without reply

func (Deposit) isCommand()     {}
func (Withdraw) isCommand()    {}
func (GetBalance) isCommand()  {}
func (Close) isCommand()       {}
func (Hold) isCommand()        {}
func (Release) isCommand()     {}
func (Panic) isCommand()       {}
func (DepositMany) isCommand() {}
func (Forget) isCommand()      {}

type Event interface{ isEvent() }

type Deposited struct{ Amount int64 }
type Withdrawn struct{ Amount int64 }
type Closed struct{}
type Held struct{}
type Released struct{}

func (Deposited) isEvent() {}
func (Withdrawn) isEvent() {}
func (Closed) isEvent()    {}
func (Held) isEvent()      {}
func (Released) isEvent()  {}

type State struct {
	Balance int64
	Closed  bool
	Held    bool
}

var ErrOverdraft = errors.New("insufficient funds")

var fx entity.Effects[Event, State]

func accountBehavior() entity.Behavior[Command, Event, State] {
	return entity.Behavior[Command, Event, State]{
		EntityType: "Account",
		Command: func(s State, c Command) entity.ReplyEffect[Event, State] {
			if s.Held {
				if _, ok := c.(Release); !ok {
					return fx.Stash()
				}
			}
			switch c := c.(type) {
			case Deposit:
				return fx.Persist(Deposited{c.Amount}).ThenReply(func(s State) { c.Reply.Send(s.Balance) })
			case Withdraw:
				if c.Amount > s.Balance {
					return fx.Reply(func(State) { c.Reply.Fail(ErrOverdraft) })
				}
				return fx.Persist(Withdrawn{c.Amount}).ThenReply(func(s State) { c.Reply.Send(s.Balance) })
			case GetBalance:
				return fx.Reply(func(s State) { c.Reply.Send(s.Balance) })
			case DepositMany:
				var evs []Event
				for _, a := range c.Amounts {
					evs = append(evs, Deposited{a})
				}
				return fx.Persist(evs...).ThenReply(func(s State) { c.Reply.Send(s.Balance) })
			case Close:
				if s.Closed {
					return fx.Unhandled()
				}
				return fx.Persist(Closed{}).ThenStop().ThenNoReply()
			case Hold:
				return fx.Persist(Held{}).ThenNoReply()
			case Release:
				return fx.Persist(Released{}).ThenUnstashAll().ThenNoReply()
			case Panic:
				panic("handler exploded")
			case Forget:
				return fx.None().ThenNoReply()
			}
			return fx.Unhandled()
		},
		Event: func(s State, e Event) State {
			switch e := e.(type) {
			case Deposited:
				s.Balance += e.Amount
			case Withdrawn:
				s.Balance -= e.Amount
			case Closed:
				s.Closed = true
			case Held:
				s.Held = true
			case Released:
				s.Held = false
			}
			return s
		},
	}
}

func registry(t testing.TB) *serialization.Registry {
	t.Helper()
	r := serialization.NewRegistry()
	for _, err := range []error{
		serialization.RegisterJSON[Deposited](r, "test.Deposited"),
		serialization.RegisterJSON[Withdrawn](r, "test.Withdrawn"),
		serialization.RegisterJSON[Closed](r, "test.Closed"),
		serialization.RegisterJSON[Held](r, "test.Held"),
		serialization.RegisterJSON[Released](r, "test.Released"),
		serialization.RegisterJSON[State](r, "test.State"),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return r
}

type stores = entitytest.Store

var (
	memoryStores = entitytest.Memory
	sqliteStores = entitystores.SQLite
)

func newHost(t testing.TB, st stores, b entity.Behavior[Command, Event, State], configure ...func(*entity.HostConfig)) *entity.Host[Command, Event, State] {
	t.Helper()
	return entitytest.NewHost(t, st, b, registry(t), configure...)
}

func deposit(ctx context.Context, h *entity.Host[Command, Event, State], id string, amount int64) (int64, error) {
	return entity.Ask(ctx, h, id, func(r entity.ReplyTo[int64]) Command { return Deposit{Amount: amount, Reply: r} })
}

func withdraw(ctx context.Context, h *entity.Host[Command, Event, State], id string, amount int64) (int64, error) {
	return entity.Ask(ctx, h, id, func(r entity.ReplyTo[int64]) Command { return Withdraw{Amount: amount, Reply: r} })
}

func balance(ctx context.Context, h *entity.Host[Command, Event, State], id string) (int64, error) {
	return entity.Ask(ctx, h, id, func(r entity.ReplyTo[int64]) Command { return GetBalance{Reply: r} })
}

func mustBalance(t *testing.T, h *entity.Host[Command, Event, State], id string, want int64) {
	t.Helper()
	got, err := balance(t.Context(), h, id)
	if err != nil || got != want {
		t.Fatalf("balance of %s = %d, %v; want %d", id, got, err, want)
	}
}

func TestPersistReplyAndRecover(t *testing.T) {
	for name, mk := range entitystores.All() {
		t.Run(name, func(t *testing.T) {
			st := mk(t)
			ctx := t.Context()
			h := newHost(t, st, accountBehavior())
			for i, want := range []int64{10, 30, 60} {
				got, err := deposit(ctx, h, "a-1", int64(10*(i+1)))
				if err != nil || got != want {
					t.Fatalf("deposit %d: %d, %v; want %d", i, got, err, want)
				}
			}
			if _, err := withdraw(ctx, h, "a-1", 100); !errors.Is(err, ErrOverdraft) {
				t.Fatalf("overdraft: %v, want ErrOverdraft", err)
			}
			if err := h.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			h2 := newHost(t, st, accountBehavior())
			mustBalance(t, h2, "a-1", 60)
		})
	}
}
