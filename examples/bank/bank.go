// Package bank is an example entity: a bank account that accepts deposits
// and withdrawals, rejects overdrafts, and snapshots every 100 events. The
// demo (go run ./cmd/annals demo) runs a thousand of them.
//
// It also shows schema evolution: version 1 of Deposited stored its amount
// as "amt"; the behavior's adapter for manifest "bank.Deposited" reads those
// events as the current Deposited, whose field is "amount" and whose
// manifest is "bank.Deposited.v2".
package bank

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/serialization"
)

// EntityType is the accounts' entity type.
const EntityType = "Account"

// ErrInsufficientFunds is the reply to a withdrawal above the balance.
var ErrInsufficientFunds = errors.New("bank: insufficient funds")

// Command is a command to an account.
type Command interface{ isCommand() }

// Deposit adds Amount (cents, > 0) and replies with the new balance.
type Deposit struct {
	Amount int64
	Reply  entity.ReplyTo[int64]
}

// Withdraw takes Amount (cents, > 0) and replies with the new balance, or
// fails with ErrInsufficientFunds and changes nothing.
type Withdraw struct {
	Amount int64
	Reply  entity.ReplyTo[int64]
}

// GetBalance replies with the balance.
type GetBalance struct{ Reply entity.ReplyTo[int64] }

func (Deposit) isCommand()    {}
func (Withdraw) isCommand()   {}
func (GetBalance) isCommand() {}

// Event is an account event.
type Event interface{ isEvent() }

// Deposited records a deposit.
type Deposited struct {
	Amount int64 `json:"amount"`
}

// Withdrawn records a withdrawal.
type Withdrawn struct {
	Amount int64 `json:"amount"`
}

func (Deposited) isEvent() {}
func (Withdrawn) isEvent() {}

// Account is an account's state.
type Account struct {
	Balance int64 `json:"balance"`
	Ops     int64 `json:"ops"`
}

// Manifests under which events and snapshots are stored.
const (
	ManifestDepositedV1 = "bank.Deposited" // {"amt": n}, read through the adapter
	ManifestDeposited   = "bank.Deposited.v2"
	ManifestWithdrawn   = "bank.Withdrawn"
	ManifestAccount     = "bank.Account"
)

// Register adds the account's events and state to a serialization registry.
func Register(r *serialization.Registry) error {
	return errors.Join(
		serialization.RegisterJSON[Deposited](r, ManifestDeposited),
		serialization.RegisterJSON[Withdrawn](r, ManifestWithdrawn),
		serialization.RegisterJSON[Account](r, ManifestAccount),
	)
}

var fx entity.Effects[Event, Account]

// Behavior returns the account behavior.
func Behavior() entity.Behavior[Command, Event, Account] {
	return entity.Behavior[Command, Event, Account]{
		EntityType: EntityType,
		Command:    handle,
		Event:      apply,
		Snapshots:  entity.SnapshotPolicy[Event, Account]{Every: 100, KeepLast: 2},
		Adapters:   map[string]func([]byte) ([]Event, error){ManifestDepositedV1: depositedV1},
	}
}

func handle(a Account, c Command) entity.ReplyEffect[Event, Account] {
	switch c := c.(type) {
	case Deposit:
		if c.Amount <= 0 {
			return fx.Reply(func(Account) { c.Reply.Fail(fmt.Errorf("bank: deposit of %d: amount must be positive", c.Amount)) })
		}
		return fx.Persist(Deposited{Amount: c.Amount}).ThenReply(func(a Account) { c.Reply.Send(a.Balance) })
	case Withdraw:
		if c.Amount <= 0 {
			return fx.Reply(func(Account) { c.Reply.Fail(fmt.Errorf("bank: withdrawal of %d: amount must be positive", c.Amount)) })
		}
		if c.Amount > a.Balance {
			return fx.Reply(func(Account) { c.Reply.Fail(ErrInsufficientFunds) })
		}
		return fx.Persist(Withdrawn{Amount: c.Amount}).ThenReply(func(a Account) { c.Reply.Send(a.Balance) })
	case GetBalance:
		return fx.Reply(func(a Account) { c.Reply.Send(a.Balance) })
	}
	return fx.Unhandled()
}

func apply(a Account, e Event) Account {
	switch e := e.(type) {
	case Deposited:
		a.Balance += e.Amount
	case Withdrawn:
		a.Balance -= e.Amount
	}
	a.Ops++
	return a
}

// depositedV1 reads a version-1 deposit, {"amt": n}, as a Deposited.
func depositedV1(payload []byte) ([]Event, error) {
	var v1 struct {
		Amt int64 `json:"amt"`
	}
	if err := json.Unmarshal(payload, &v1); err != nil {
		return nil, err
	}
	return []Event{Deposited{Amount: v1.Amt}}, nil
}
