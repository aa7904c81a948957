package console

import (
	"context"
	"encoding/json"
	"fmt"
	"math"

	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/snapshot"
)

// StateFolder computes an id's state at a sequence number: from the
// latest snapshot at or below it when that snapshot decodes, then its
// events up to the number through the behavior's event handler.
type StateFolder func(ctx context.Context, j journal.Journal, ss snapshot.Store, pid string, upTo int64) (StateAt, error)

// StateAt is a state the console folded.
type StateAt struct {
	// SequenceNr is the number asked for; Applied the last event folded in.
	SequenceNr int64 `json:"sequence_nr"`
	Applied    int64 `json:"applied_to"`
	// FromSnapshot is the snapshot the fold started from (0: none).
	FromSnapshot int64 `json:"from_snapshot"`
	// Events is how many events were applied after it.
	Events int64 `json:"events_applied"`
	// JSON is the state, indented.
	JSON string `json:"state"`
	// Notes say what the fold passed over: a snapshot that does not
	// decode, deleted events.
	Notes []string `json:"notes"`
}

// BehaviorState returns the StateFolder of an entity behavior: events and
// snapshots are decoded as the behavior's recovery decodes them (its
// adapters, then reg), and folded by its Event handler. The state is shown
// as JSON.
func BehaviorState[C, E, S any](b entity.Behavior[C, E, S], reg *serialization.Registry) StateFolder {
	return func(ctx context.Context, j journal.Journal, ss snapshot.Store, pid string, upTo int64) (StateAt, error) {
		out := StateAt{SequenceNr: upTo, Notes: []string{}}
		var state S
		if b.EmptyState != nil {
			state = b.EmptyState()
		}
		from := int64(1)
		if ss != nil {
			sn, ok, err := ss.Load(ctx, pid, snapshot.Criteria{MaxSequenceNr: upTo})
			if err != nil {
				return out, err
			}
			if ok {
				v, err := reg.DeserializeSnapshot(sn)
				s, isS := v.(S)
				switch {
				case err != nil:
					out.Notes = append(out.Notes, fmt.Sprintf("the snapshot at %d does not decode (%v): folded from the first event", sn.Metadata.SequenceNr, err))
				case !isS:
					out.Notes = append(out.Notes, fmt.Sprintf("the snapshot at %d decodes to %T, not the behavior's state: folded from the first event", sn.Metadata.SequenceNr, v))
				default:
					state, from = s, sn.Metadata.SequenceNr+1
					out.FromSnapshot, out.Applied = sn.Metadata.SequenceNr, sn.Metadata.SequenceNr
				}
			}
		}
		next := from
		for r, err := range j.Replay(ctx, pid, from, upTo, math.MaxInt64) {
			if err != nil {
				return out, err
			}
			if r.SequenceNr > next {
				out.Notes = append(out.Notes, fmt.Sprintf("events %d to %d were deleted: the state lacks them", next, r.SequenceNr-1))
			}
			events, err := b.DecodeEvent(reg, r)
			if err != nil {
				return out, fmt.Errorf("event %d does not decode for the behavior: %w", r.SequenceNr, err)
			}
			for _, e := range events {
				state = b.Event(state, e)
			}
			out.Events++
			out.Applied, next = r.SequenceNr, r.SequenceNr+1
		}
		if out.Applied < upTo {
			out.Notes = append(out.Notes, fmt.Sprintf("no stored events after %d: the state is the one at %d", out.Applied, out.Applied))
		}
		js, err := json.MarshalIndent(state, "", "  ")
		if err != nil {
			return out, fmt.Errorf("the state does not encode as JSON: %w", err)
		}
		out.JSON = string(js)
		return out, nil
	}
}
