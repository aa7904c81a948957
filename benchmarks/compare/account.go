package main

import (
	"errors"

	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/serialization"
)

// The model every system runs: an account whose events are deposits and
// whose state is the balance. Each event's payload is JSON, so every system
// (the raw baselines included) encodes and decodes the same bytes.

// Deposited is the one event.
type Deposited struct {
	Amount int `json:"amount"`
}

// Account is the state: the sum of the deposits.
type Account struct {
	Balance int `json:"balance"`
}

// Command is a command to an Annals account.
type Command interface{ isCommand() }

// Deposit persists one Deposited and replies with the account.
type Deposit struct {
	Amount int
	Reply  entity.ReplyTo[Account]
}

// Get replies with the account: on an entity that is not live, the
// recovery is this command's cost.
type Get struct {
	Reply entity.ReplyTo[Account]
}

func (Deposit) isCommand() {}
func (Get) isCommand()     {}

// Entity types: the workloads' accounts, and the entity type whose events
// the catch-up read reads.
const (
	accountType = "Account"
	readerType  = "Reader"
)

// behavior is the Annals entity of an account.
func behavior(entityType string) entity.Behavior[Command, Deposited, Account] {
	var fx entity.Effects[Deposited, Account]
	return entity.Behavior[Command, Deposited, Account]{
		EntityType: entityType,
		Command: func(a Account, c Command) entity.ReplyEffect[Deposited, Account] {
			switch c := c.(type) {
			case Deposit:
				return fx.Persist(Deposited{Amount: c.Amount}).ThenReply(func(a Account) { c.Reply.Send(a) })
			case Get:
				return fx.Reply(func(a Account) { c.Reply.Send(a) })
			}
			return fx.Unhandled()
		},
		Event: func(a Account, e Deposited) Account { return Account{Balance: a.Balance + e.Amount} },
	}
}

// registry is the Annals serialization registry of the model.
func registry() (*serialization.Registry, error) {
	reg := serialization.NewRegistry()
	return reg, errors.Join(
		serialization.RegisterJSON[Deposited](reg, "compare.Deposited"),
		serialization.RegisterJSON[Account](reg, "compare.Account"),
	)
}
