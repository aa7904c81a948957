package eventual

import (
	"slices"

	"github.com/annals-go/annals/store/kafka/wire"
)

// BatchKind is what a Batch does to a journal.
type BatchKind int

// The kinds of batches.
const (
	// Appends stores the events of one or more Append actions.
	Appends BatchKind = iota + 1
	// DeleteBatch deletes events up to DeleteTo.
	DeleteBatch
	// PurgeBatch removes the journal.
	PurgeBatch
)

// Batch is one change to apply to a journal: appends (Records, oldest
// first), a delete or a purge. Offset is the Kafka offset recorded as the
// journal's last action.
type Batch struct {
	Kind     BatchKind
	Offset   int64
	Records  []ActionRecord
	DeleteTo int64
	Origin   string
}

// Batches folds the actions of one key, in offset order, into the batches
// that leave the journal as applying every action one by one would, as
// the Scala replicator does. Working from the youngest action back:
// marks are dropped; everything before a purge is dropped; consecutive
// appends merge into one batch (recorded at the youngest append's
// offset); an append wholly covered by a later delete is dropped; a delete
// that a later delete covers is dropped or merged.
func Batches(records []ActionRecord) []Batch {
	// out holds the batches youngest first; out[len-1] is the batch that
	// follows the action being folded.
	var out []Batch
	next := func() *Batch {
		if len(out) == 0 {
			return nil
		}
		return &out[len(out)-1]
	}
	// oldestDelete is the delete batch closest after the action.
	oldestDelete := func() *Batch {
		for i := len(out) - 1; i >= 0; i-- {
			if out[i].Kind == DeleteBatch {
				return &out[i]
			}
		}
		return nil
	}
	for i := len(records) - 1; i >= 0; i-- {
		r := records[i]
		h := r.Action.Header
		n := next()
		switch h.Kind {
		case wire.Purge:
			if n == nil || n.Kind != PurgeBatch {
				out = append(out, Batch{Kind: PurgeBatch, Offset: r.Offset, Origin: h.Origin})
			}
		case wire.Delete:
			del := Batch{Kind: DeleteBatch, Offset: r.Offset, DeleteTo: h.To, Origin: h.Origin}
			switch {
			case n == nil:
				out = append(out, del)
			case n.Kind == PurgeBatch:
			case n.Kind == Appends:
				if d := oldestDelete(); d == nil || d.DeleteTo < h.To {
					out = append(out, del)
				}
			case n.Kind == DeleteBatch:
				if h.To >= n.DeleteTo {
					*n = del
				}
			}
		case wire.Append:
			switch {
			case n == nil || n.Kind == DeleteBatch:
				out = append(out, Batch{Kind: Appends, Offset: r.Offset, Records: append(make([]ActionRecord, 0, min(i+1, 256)), r)}) // at most the i+1 records left
			case n.Kind == PurgeBatch:
			case n.Kind == Appends:
				if d := oldestDelete(); d == nil || d.DeleteTo < h.To {
					n.Records = append(n.Records, r) // reversed below
				}
			}
		}
	}
	slices.Reverse(out)
	for _, b := range out {
		slices.Reverse(b.Records) // gathered last first
	}
	return out
}
