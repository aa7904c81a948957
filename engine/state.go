package engine

import (
	"context"
	"errors"

	"github.com/annals-go/annals/durable"
	"github.com/annals-go/annals/journal"
)

// StateFront is the durable-state front: it stands before a durable.Store
// as Front stands before a journal, with the same rules for changes as
// Front has for atomic writes:
//
//   - Group commit: the changes of all callers that arrive while the store
//     is busy go to it together, in one Apply call when the store is a
//     durable.Batcher (one commit for the group), else one Upsert or
//     Delete each, in arrival order.
//   - Order: the changes of one persistence id reach the store in the
//     order they arrived, each only after the one before it was answered.
//   - Get for an id first waits until the changes of that id accepted
//     before the call have been answered.
//   - Every store call is bounded by CallTimeout and passes through a
//     circuit breaker; reads take turns among MaxReads.
//
// Close does not close the store behind the front.
type StateFront struct {
	core[durable.Change]
	s durable.Store
}

// NewStateFront starts a durable-state front before s.
func NewStateFront(s durable.Store, cfg Config) (*StateFront, error) {
	if s == nil {
		return nil, errors.New("engine: NewStateFront with a nil store")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	f := &StateFront{s: s}
	f.core.init("durable state", cfg, func(ctx context.Context, changes []durable.Change, _ []journal.FenceToken) ([]error, error) {
		return applyChanges(ctx, s, changes)
	})
	f.idOf = func(c durable.Change) string { return c.Object.PersistenceID }
	f.events = func(durable.Change) int { return 1 }
	return f, nil
}

// applyChanges makes one store call for changes: Apply on a Batcher, else
// an Upsert or Delete each. A change's own failure (a revision conflict,
// an invalid argument) is its result; any other error ends the call with
// its outcome unknown.
func applyChanges(ctx context.Context, s durable.Store, changes []durable.Change) ([]error, error) {
	if b, ok := s.(durable.Batcher); ok {
		return b.Apply(ctx, changes)
	}
	var errs []error
	for i, c := range changes {
		var err error
		if c.Delete {
			err = s.Delete(ctx, c.Object.PersistenceID, c.Object.Revision)
		} else {
			err = s.Upsert(ctx, c.Object)
		}
		switch {
		case err == nil:
		case ctx.Err() == nil && (errors.Is(err, durable.ErrRevisionConflict) || errors.Is(err, durable.ErrInvalidArgument)):
			if errs == nil {
				errs = make([]error, len(changes))
			}
			errs[i] = err
		default:
			return nil, err
		}
	}
	return errs, nil
}

// Apply stores one change through the group-commit queue under fence (the
// zero Fence: none; see Front.WriteFenced: fence.Open is checked as the
// change leaves for the store). It returns nil when the change is stored;
// the store's error for it when it is definitely not (wrapping
// durable.ErrRevisionConflict or durable.ErrInvalidArgument); ErrFenced
// when its fence refused it; any other error when the outcome is unknown
// or the change was not sent.
func (f *StateFront) Apply(ctx context.Context, c durable.Change, fence journal.Fence) error {
	return f.persist(ctx, c, fence)
}

// Get returns the object stored for persistenceID (false when none), once
// the changes of the id accepted before the call have been answered, under
// the call timeout, the breaker and a read turn.
func (f *StateFront) Get(ctx context.Context, persistenceID string) (durable.Object, bool, error) {
	if err := f.awaitWrites(ctx, persistenceID); err != nil {
		return durable.Object{}, false, err
	}
	type got struct {
		o  durable.Object
		ok bool
	}
	g, err := guarded(ctx, &f.core, func(ctx context.Context) (got, error) {
		o, ok, err := f.s.Get(ctx, persistenceID)
		return got{o, ok}, err
	})
	return g.o, g.ok, err
}

// Config returns the front's configuration with defaults filled in.
func (f *StateFront) Config() Config { return f.cfg }

// Close stops accepting changes (later ones fail with ErrClosed), waits
// until the queued ones have been sent and answered, and returns. It does
// not close the store. Close is idempotent.
func (f *StateFront) Close() error { return f.close() }
