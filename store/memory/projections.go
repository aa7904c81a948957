package memory

import (
	"context"
	"sync"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/offsets"
	"github.com/annals-go/annals/query"
)

// Projections is the projection offset store of a Store: offsets and paused
// flags kept in memory. Its transactions (Tx) make exactly-once handlers
// possible for in-memory read models: changes registered with Tx.OnCommit
// are applied, together with the offset, only when the handler succeeds.
type Projections struct {
	s *Store

	mu       sync.Mutex // guards states
	states   map[offsets.ID]offsets.State
	commitMu sync.Mutex // serializes commits; held (not mu) while OnCommit callbacks run
}

var _ offsets.TxStore[*Tx] = (*Projections)(nil)

// Tx is an in-memory projection transaction.
type Tx struct {
	commits []func()
}

// OnCommit registers fn to run when the transaction commits; it does not
// run if the handler fails.
func (tx *Tx) OnCommit(fn func()) { tx.commits = append(tx.commits, fn) }

// Projections returns the store's projection offset store. Every call
// returns the same one.
func (s *Store) Projections() *Projections {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.projections == nil {
		s.projections = &Projections{s: s, states: map[offsets.ID]offsets.State{}}
	}
	return s.projections
}

func (p *Projections) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.s.mu.RLock()
	defer p.s.mu.RUnlock()
	if p.s.closed {
		return journal.ErrClosed
	}
	return nil
}

// Load implements offsets.Store.
func (p *Projections) Load(ctx context.Context, id offsets.ID) (offsets.State, error) {
	if err := p.check(ctx); err != nil {
		return offsets.State{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.states[id], nil
}

func (p *Projections) update(ctx context.Context, id offsets.ID, fn func(*offsets.State)) error {
	if err := p.check(ctx); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.states[id]
	fn(&st)
	p.states[id] = st
	return nil
}

// SaveOffset implements offsets.Store.
func (p *Projections) SaveOffset(ctx context.Context, id offsets.ID, o query.Offset) error {
	return p.update(ctx, id, func(st *offsets.State) { st.Offset = o })
}

// SetPaused implements offsets.Store.
func (p *Projections) SetPaused(ctx context.Context, id offsets.ID, paused bool) error {
	return p.update(ctx, id, func(st *offsets.State) { st.Paused = paused })
}

// Reset implements offsets.Store.
func (p *Projections) Reset(ctx context.Context, id offsets.ID) error {
	return p.update(ctx, id, func(st *offsets.State) { st.Offset = query.NoOffset() })
}

// InTx implements offsets.TxStore: fn's registered changes and
// saved offsets apply together when it returns nil.
func (p *Projections) InTx(ctx context.Context, fn func(tx *Tx) error) error {
	tx := &Tx{}
	if err := fn(tx); err != nil {
		return err
	}
	if err := p.check(ctx); err != nil {
		return err
	}
	p.commitMu.Lock()
	defer p.commitMu.Unlock()
	for _, c := range tx.commits {
		c()
	}
	return nil
}

// SaveOffsetTx implements offsets.TxStore.
func (p *Projections) SaveOffsetTx(_ context.Context, tx *Tx, id offsets.ID, o query.Offset) error {
	tx.OnCommit(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		st := p.states[id]
		st.Offset = o
		p.states[id] = st
	})
	return nil
}
