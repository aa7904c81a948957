package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/offsets"
	"github.com/annals-go/annals/query"
)

// Projections is the store's projection offset store, in the tables
// projection_offset_store and projection_management of the store's schema
// (on the r2dbc layout, in the JVM projection offset store's form and
// tables: see LayoutR2DBC).
// Exactly-once handlers receive the pgx.Tx in which the offset is saved:
// their read-model writes commit with it.
type Projections struct{ s *Store }

var _ offsets.TxStore[pgx.Tx] = (*Projections)(nil)

// Projections returns the store's projection offset store.
func (s *Store) Projections() *Projections { return &Projections{s: s} }

func nowMillis() int64 { return time.Now().UnixMilli() }

// Load implements offsets.Store.
func (p *Projections) Load(ctx context.Context, id offsets.ID) (offsets.State, error) {
	if p.s.cfg.layout == LayoutR2DBC {
		return p.loadR2DBC(ctx, id)
	}
	var st offsets.State
	var raw *string
	var paused *bool
	if err := p.s.pool.QueryRow(ctx, p.s.sql.loadOffset, id.Name, id.Key).Scan(&raw, &paused); err != nil {
		return st, p.s.errs.Map(ctx, "projection load", err, journal.ErrClosed)
	}
	if raw != nil {
		if err := json.Unmarshal([]byte(*raw), &st.Offset); err != nil {
			return st, fmt.Errorf("postgres: projection %s: stored offset: %w", id, err)
		}
	}
	st.Paused = paused != nil && *paused
	return st, nil
}

func (p *Projections) save(ctx context.Context, tx pgx.Tx, id offsets.ID, o query.Offset) error {
	if err := id.Validate(); err != nil {
		return err
	}
	if p.s.cfg.layout == LayoutR2DBC {
		return p.saveR2DBC(ctx, tx, id, o)
	}
	b, err := json.Marshal(o)
	if err != nil {
		return fmt.Errorf("postgres: projection %s: encode offset: %w", id, err)
	}
	if tx != nil {
		_, err = tx.Exec(ctx, p.s.sql.saveOffset, id.Name, id.Key, string(b), nowMillis())
	} else {
		_, err = p.s.pool.Exec(ctx, p.s.sql.saveOffset, id.Name, id.Key, string(b), nowMillis())
	}
	if err != nil {
		return p.s.errs.Map(ctx, "projection save offset", err, journal.ErrClosed)
	}
	return nil
}

// SaveOffset implements offsets.Store.
func (p *Projections) SaveOffset(ctx context.Context, id offsets.ID, o query.Offset) error {
	return p.save(context.WithoutCancel(ctx), nil, id, o)
}

// SaveOffsetTx implements offsets.TxStore.
func (p *Projections) SaveOffsetTx(ctx context.Context, tx pgx.Tx, id offsets.ID, o query.Offset) error {
	return p.save(ctx, tx, id, o)
}

// SetPaused implements offsets.Store.
func (p *Projections) SetPaused(ctx context.Context, id offsets.ID, paused bool) error {
	if err := id.Validate(); err != nil {
		return err
	}
	if _, err := p.s.pool.Exec(context.WithoutCancel(ctx), p.s.sql.setPaused, id.Name, id.Key, paused, nowMillis()); err != nil {
		return p.s.errs.Map(ctx, "projection set paused", err, journal.ErrClosed)
	}
	return nil
}

// Reset implements offsets.Store.
func (p *Projections) Reset(ctx context.Context, id offsets.ID) error {
	if p.s.cfg.layout == LayoutR2DBC {
		return p.resetR2DBC(context.WithoutCancel(ctx), id)
	}
	if _, err := p.s.pool.Exec(context.WithoutCancel(ctx), p.s.sql.resetOffset, id.Name, id.Key); err != nil {
		return p.s.errs.Map(ctx, "projection reset", err, journal.ErrClosed)
	}
	return nil
}

// InTx implements offsets.TxStore: fn runs in a transaction of the
// pool, committed when fn returns nil and rolled back otherwise.
func (p *Projections) InTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	tx, err := p.s.pool.Begin(ctx)
	if err != nil {
		return p.s.errs.Map(ctx, "projection begin", err, journal.ErrClosed)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit it is a no-op
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return p.s.errs.Map(ctx, "projection commit", err, journal.ErrClosed)
	}
	return nil
}
