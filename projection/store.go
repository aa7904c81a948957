package projection

import "github.com/annals-go/annals/offsets"

// ID names one projection instance; see offsets.ID.
type ID = offsets.ID

// State is an instance's stored offset and paused flag; see offsets.State.
type State = offsets.State

// OffsetStore keeps offsets and paused flags; see offsets.Store.
type OffsetStore = offsets.Store

// TxOffsetStore saves offsets inside a store transaction; see
// offsets.TxStore.
type TxOffsetStore[Tx any] = offsets.TxStore[Tx]
