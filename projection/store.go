package projection

import "github.com/annals-go/annals/offsets"

// ID names one projection instance; see offsets.ID.
type ID = offsets.ID

// State is an instance's stored offset and paused flag; see offsets.State.
type State = offsets.State

// OffsetStore keeps offsets and paused flags; see offsets.OffsetStore.
type OffsetStore = offsets.OffsetStore

// TxOffsetStore saves offsets inside a store transaction; see
// offsets.TxOffsetStore.
type TxOffsetStore[Tx any] = offsets.TxOffsetStore[Tx]
