package entity

import (
	"context"
	"fmt"
	"slices"

	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/journal"
)

// persistence is how a host's entities recover their state and store what
// their commands persist. A host has one: the journal of events
// (journalPersistence, NewHost) or a durable-state store
// (statePersistence, NewDurableHost).
type persistence[C, E, S any] interface {
	// recover sets inst's state and sequence number (for durable state,
	// its revision) from the store, and returns the highest sequence
	// number stored (deleted events count).
	recover(ctx context.Context, inst *instance[C, E, S]) (int64, error)
	// write stores events as inst's next atomic write, numbered from
	// inst.seq+1, under fence. rejected is the store's refusal of it
	// (definitely not stored; wrapping journal.ErrRejected, and
	// journal.ErrSequenceConflict for another writer's number); err the
	// whole call's failure (outcome unknown, or not sent: ErrFenced).
	write(ctx context.Context, inst *instance[C, E, S], events []E, fence journal.Fence) (rejected, err error)
	// close closes the front the host made, once its entities stopped.
	close() error
}

// journalPersistence keeps an event-sourced host's entities in a journal
// (through its front) and a snapshot store.
type journalPersistence[C, E, S any] struct {
	front *engine.Front
	own   bool // the host made front
}

func (p journalPersistence[C, E, S]) recover(ctx context.Context, inst *instance[C, E, S]) (int64, error) {
	if inst.h.b.Recovery.Disabled {
		highest, err := p.front.HighestSequenceNr(ctx, inst.pid, 0)
		if err != nil {
			return 0, fmt.Errorf("%w of %s: highest sequence number: %w", ErrRecovery, inst.pid, err)
		}
		return highest, nil
	}
	return inst.restore(ctx)
}

func (p journalPersistence[C, E, S]) write(ctx context.Context, inst *instance[C, E, S], events []E, fence journal.Fence) (error, error) {
	h, b := inst.h, &inst.h.b
	w := journal.AtomicWrite{PersistenceID: inst.pid, Events: make([]journal.Repr, len(events))}
	for i, e := range events {
		payload, id, manifest, err := h.cfg.Registry.Serialize(e)
		if err != nil {
			return journal.Reject("event %d of %s: %w", inst.seq+int64(i)+1, inst.pid, err), nil
		}
		var tags []string
		if b.Tagger != nil {
			tags = b.Tagger(e)
		}
		if b.TagsFor != nil {
			tags = slices.Clip(tags) // never into the Tagger's slice
			for _, t := range b.TagsFor(inst.pid, e) {
				if !slices.Contains(tags, t) {
					tags = append(tags, t)
				}
			}
		}
		w.Events[i] = journal.Repr{PersistenceID: inst.pid, SequenceNr: inst.seq + int64(i) + 1, Payload: payload, SerializerID: id, Manifest: manifest, WriterID: inst.writerID(), Tags: tags}
	}
	errs, err := p.front.WriteFenced(ctx, []journal.AtomicWrite{w}, fence)
	if err != nil || errs == nil {
		return nil, err
	}
	return errs[0], nil
}

func (p journalPersistence[C, E, S]) close() error {
	if !p.own {
		return nil
	}
	return p.front.Close()
}
