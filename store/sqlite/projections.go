package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/offsets"
	"github.com/annals-go/annals/query"
)

// Projections is the projection offset store of a Store, in the tables
// projection_offset and projection_management of the same file as the
// journal. Exactly-once handlers receive a *sql.Tx on the store's writer
// connection: their read-model writes and the offset commit together. While
// such a transaction is open, the journal's writes wait for it (SQLite has
// one writer), so keep handlers short.
type Projections struct{ s *Store }

var _ offsets.TxStore[*sql.Tx] = (*Projections)(nil)

// Projections returns the store's projection offset store.
func (s *Store) Projections() *Projections { return &Projections{s: s} }

// Load implements offsets.Store.
func (p *Projections) Load(ctx context.Context, id offsets.ID) (offsets.State, error) {
	var st offsets.State
	var raw sql.NullString
	var paused sql.NullBool
	err := p.s.reader.QueryRowContext(context.WithoutCancel(ctx), `
		SELECT (SELECT current_offset FROM projection_offset WHERE projection_name = ?1 AND projection_key = ?2),
		       (SELECT paused FROM projection_management WHERE projection_name = ?1 AND projection_key = ?2)`,
		id.Name, id.Key).Scan(&raw, &paused)
	if err != nil {
		return st, p.s.errs.Map(ctx, "projection load", err, journal.ErrClosed)
	}
	if raw.Valid {
		if err := json.Unmarshal([]byte(raw.String), &st.Offset); err != nil {
			return st, fmt.Errorf("sqlite: projection %s: stored offset: %w", id, err)
		}
	}
	st.Paused = paused.Valid && paused.Bool
	return st, nil
}

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func saveOffset(ctx context.Context, db execer, id offsets.ID, o query.Offset) error {
	b, err := json.Marshal(o)
	if err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, `INSERT INTO projection_offset (projection_name, projection_key, current_offset, last_updated) VALUES (?, ?, ?, ?)
		ON CONFLICT (projection_name, projection_key) DO UPDATE SET current_offset = excluded.current_offset, last_updated = excluded.last_updated`,
		id.Name, id.Key, string(b), time.Now().UnixNano())
	return err
}

// SaveOffset implements offsets.Store.
func (p *Projections) SaveOffset(ctx context.Context, id offsets.ID, o query.Offset) error {
	if err := saveOffset(context.WithoutCancel(ctx), p.s.writer, id, o); err != nil {
		return p.s.errs.Map(ctx, "projection save offset", err, journal.ErrClosed)
	}
	return nil
}

// SetPaused implements offsets.Store.
func (p *Projections) SetPaused(ctx context.Context, id offsets.ID, paused bool) error {
	_, err := p.s.writer.ExecContext(context.WithoutCancel(ctx), `INSERT INTO projection_management (projection_name, projection_key, paused, last_updated) VALUES (?, ?, ?, ?)
		ON CONFLICT (projection_name, projection_key) DO UPDATE SET paused = excluded.paused, last_updated = excluded.last_updated`,
		id.Name, id.Key, paused, time.Now().UnixNano())
	if err != nil {
		return p.s.errs.Map(ctx, "projection set paused", err, journal.ErrClosed)
	}
	return nil
}

// Reset implements offsets.Store.
func (p *Projections) Reset(ctx context.Context, id offsets.ID) error {
	if _, err := p.s.writer.ExecContext(context.WithoutCancel(ctx), `DELETE FROM projection_offset WHERE projection_name = ? AND projection_key = ?`, id.Name, id.Key); err != nil {
		return p.s.errs.Map(ctx, "projection reset", err, journal.ErrClosed)
	}
	return nil
}

// InTx implements offsets.TxStore: fn runs in a transaction on the
// writer connection, committed when fn returns nil.
func (p *Projections) InTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, release, err := p.s.writeTxn(ctx)
	if err != nil {
		return p.s.errs.Map(ctx, "projection begin", err, journal.ErrClosed)
	}
	defer release()
	if err := fn(tx); err != nil {
		return err // release rolls back
	}
	if err := tx.Commit(); err != nil {
		return p.s.errs.Map(ctx, "projection commit", err, journal.ErrClosed)
	}
	return nil
}

// SaveOffsetTx implements offsets.TxStore.
func (p *Projections) SaveOffsetTx(ctx context.Context, tx *sql.Tx, id offsets.ID, o query.Offset) error {
	if err := saveOffset(context.WithoutCancel(ctx), tx, id, o); err != nil {
		return p.s.errs.Map(ctx, "projection save offset", err, journal.ErrClosed)
	}
	return nil
}
