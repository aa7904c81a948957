// Package offsets is the storage contract for projection offsets: the
// offset and paused flag of each projection instance, and transactions in
// which a handler's writes and the offset commit together. Stores implement
// it; package projection uses it.
package offsets

import (
	"context"
	"errors"
	"fmt"

	"github.com/annals-go/annals/query"
)

// ID names one projection instance: Name is the projection, Key the part of
// the work it covers (for example a slice range "0-255").
type ID struct {
	Name, Key string
}

func (id ID) String() string { return id.Name + "/" + id.Key }

// ErrInvalidID reports an ID with an empty name.
var ErrInvalidID = errors.New("offsets: invalid projection id")

// Validate reports an ID with an empty name.
func (id ID) Validate() error {
	if id.Name == "" {
		return fmt.Errorf("%w: empty name (key %q)", ErrInvalidID, id.Key)
	}
	return nil
}

// State is what an offset store keeps for a projection instance.
type State struct {
	Offset query.Offset
	Paused bool
}

// Store keeps each projection instance's offset and paused flag.
//
// Rules: Load of an instance never saved returns the zero State (no offset,
// not paused). SaveOffset keeps the paused flag; SetPaused keeps the offset.
// Reset removes the offset and keeps the paused flag. Implementations are
// safe for concurrent use.
type Store interface {
	Load(ctx context.Context, id ID) (State, error)
	SaveOffset(ctx context.Context, id ID, o query.Offset) error
	SetPaused(ctx context.Context, id ID, paused bool) error
	Reset(ctx context.Context, id ID) error
}

// TxStore is a Store whose offsets can be saved inside a
// transaction of the store, so that a handler's writes and the offset
// commit together (exactly once).
//
// InTx runs fn in a new transaction and commits it when fn returns nil,
// rolls it back otherwise. SaveOffsetTx saves the offset as part of tx.
type TxStore[Tx any] interface {
	Store
	InTx(ctx context.Context, fn func(tx Tx) error) error
	SaveOffsetTx(ctx context.Context, tx Tx, id ID, o query.Offset) error
}
