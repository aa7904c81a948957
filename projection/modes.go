package projection

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/annals-go/annals/query"
)

// AtLeastOnce runs handler for each envelope; offsets are saved after
// cfg.SaveAfter envelopes or cfg.SaveEvery.
func AtLeastOnce(id ID, src Source, store OffsetStore, handler func(ctx context.Context, env query.Envelope) error, cfg Config) (*Projection, error) {
	return newProjection(id, src, store, cfg, func(p *Projection) sink {
		return &atLeastOnce{p: p, handler: handler}
	})
}

type atLeastOnce struct {
	p       *Projection
	handler func(context.Context, query.Envelope) error
	unsaved int
	offset  query.Offset
	written time.Time // when the event at offset was written
}

func (s *atLeastOnce) interval() time.Duration { return s.p.cfg.SaveEvery }
func (s *atLeastOnce) pending() bool           { return s.unsaved > 0 }

func (s *atLeastOnce) take(ctx context.Context, env query.Envelope) error {
	if err := s.p.attempt(ctx, describe(env), func() error { return s.handler(ctx, env) }); err != nil && !errors.Is(err, errSkipped) {
		return err
	}
	s.unsaved++ // a skipped envelope's offset is saved too: it is done with
	s.offset, s.written = env.Offset, env.Timestamp
	if s.unsaved >= s.p.cfg.SaveAfter {
		return s.tick(ctx)
	}
	return nil
}

func (s *atLeastOnce) shutdown(ctx context.Context) error { return s.tick(ctx) }

func (s *atLeastOnce) tick(ctx context.Context) error {
	if s.unsaved == 0 {
		return nil
	}
	if err := s.p.store.SaveOffset(ctx, s.p.id, s.offset); err != nil {
		return fmt.Errorf("projection %s: save offset: %w", s.p.id, err)
	}
	s.unsaved = 0
	s.p.saved(s.offset, s.written)
	return nil
}

// ExactlyOnce runs handler for each envelope inside a transaction of store,
// in which the envelope's offset is saved too: the handler's writes and the
// offset commit together, so each envelope's effect is stored exactly once.
func ExactlyOnce[Tx any](id ID, src Source, store TxOffsetStore[Tx], handler func(ctx context.Context, tx Tx, env query.Envelope) error, cfg Config) (*Projection, error) {
	return newProjection(id, src, store, cfg, func(p *Projection) sink {
		return &exactlyOnce[Tx]{p: p, store: store, handler: handler}
	})
}

type exactlyOnce[Tx any] struct {
	p       *Projection
	store   TxOffsetStore[Tx]
	handler func(context.Context, Tx, query.Envelope) error
}

func (s *exactlyOnce[Tx]) interval() time.Duration { return time.Hour }
func (s *exactlyOnce[Tx]) pending() bool           { return false }

func (s *exactlyOnce[Tx]) take(ctx context.Context, env query.Envelope) error {
	err := s.p.attempt(ctx, describe(env), func() error {
		return s.store.InTx(ctx, func(tx Tx) error {
			if err := s.handler(ctx, tx, env); err != nil {
				return err
			}
			return s.store.SaveOffsetTx(ctx, tx, s.p.id, env.Offset)
		})
	})
	switch {
	case errors.Is(err, errSkipped):
		// Rolled back with the handler's writes: the offset moves with
		// the next envelope's commit.
		return nil
	case err != nil:
		return err
	}
	s.p.saved(env.Offset, env.Timestamp)
	return nil
}

func (s *exactlyOnce[Tx]) tick(context.Context) error     { return nil }
func (s *exactlyOnce[Tx]) shutdown(context.Context) error { return nil }

// Grouped runs handler on groups of up to cfg.GroupSize envelopes, or what
// arrived within cfg.GroupWithin; the offset is saved after each group
// (at least once: a crash between handler and save repeats the group).
func Grouped(id ID, src Source, store OffsetStore, handler func(ctx context.Context, envs []query.Envelope) error, cfg Config) (*Projection, error) {
	return newProjection(id, src, store, cfg, func(p *Projection) sink {
		return &grouped{p: p, handler: handler}
	})
}

type grouped struct {
	p           *Projection
	handler     func(context.Context, []query.Envelope) error
	group       []query.Envelope
	offsetSaved bool // the handler saved the offset in its transaction
}

func (s *grouped) interval() time.Duration { return s.p.cfg.GroupWithin }
func (s *grouped) pending() bool           { return len(s.group) > 0 }

func (s *grouped) take(ctx context.Context, env query.Envelope) error {
	s.group = append(s.group, env)
	if len(s.group) >= s.p.cfg.GroupSize {
		return s.tick(ctx)
	}
	return nil
}

// shutdown drops the pending group: its offset was not saved, so the next
// run handles it.
func (s *grouped) shutdown(context.Context) error { s.group = nil; return nil }

func (s *grouped) tick(ctx context.Context) error {
	if len(s.group) == 0 {
		return nil
	}
	group := s.group
	what := fmt.Sprintf("group of %d from %s", len(group), describe(group[0]))
	err := s.p.attempt(ctx, what, func() error { return s.handler(ctx, group) })
	if err != nil && !errors.Is(err, errSkipped) {
		return err
	}
	last := group[len(group)-1]
	if errors.Is(err, errSkipped) && s.offsetSaved {
		// Rolled back with the handler's writes: the offset moves with
		// the next group's commit.
		s.group = nil
		return nil
	}
	if !s.offsetSaved {
		if err := s.p.store.SaveOffset(ctx, s.p.id, last.Offset); err != nil {
			return fmt.Errorf("projection %s: save offset: %w", s.p.id, err)
		}
	}
	s.group = nil
	s.p.saved(last.Offset, last.Timestamp)
	return nil
}

// ExactlyOnceGrouped runs handler on groups of up to cfg.GroupSize
// envelopes, or what arrived within cfg.GroupWithin, inside one transaction
// of store in which the group's last offset is saved too: exactly once, with
// one commit per group. A failed group is rolled back whole, and the
// recovery strategy applies to the group.
func ExactlyOnceGrouped[Tx any](id ID, src Source, store TxOffsetStore[Tx], handler func(ctx context.Context, tx Tx, envs []query.Envelope) error, cfg Config) (*Projection, error) {
	return newProjection(id, src, store, cfg, func(p *Projection) sink {
		return &grouped{p: p, handler: func(ctx context.Context, envs []query.Envelope) error {
			return store.InTx(ctx, func(tx Tx) error {
				if err := handler(ctx, tx, envs); err != nil {
					return err
				}
				return store.SaveOffsetTx(ctx, tx, p.id, envs[len(envs)-1].Offset)
			})
		}, offsetSaved: true}
	})
}
