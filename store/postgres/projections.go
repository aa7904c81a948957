package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/offsets"
	"github.com/annals-go/annals/query"
)

// Projections is the store's projection offset store, in the tables
// projection_offset_store and projection_management of the store's schema.
// Exactly-once handlers receive the pgx.Tx in which the offset is saved:
// their read-model writes commit with it.
//
// On the r2dbc layout offsets are stored as the JVM's projection offset
// store (akka-projection-r2dbc's and pekko-projection-r2dbc's
// R2dbcOffsetStore) stores and reads them. A timestamp offset is one
// projection_timestamp_offset_store row per id of its seen map (the
// projection's name and key, the id's slice, sequence number, the offset's
// time, timestamp_consumed the transaction's time); saving deletes the
// rows at or after its time (so an offset may move back, as the JVM's
// management setOffset does) and those more than 5 minutes older (the
// JVM's default time window); loading reads the rows of the projection's
// name in the slice range its key names ("min-max", the key of by-slices
// projections on both sides; otherwise the rows of its name and key) and
// returns the latest time with each id's highest sequence number at it, as
// the JVM does. A sequence offset is a projection_offset_store row with
// manifest "SEQ", a time-based UUID offset one with "TBU" (the JVM's
// "LNG" and "INT" rows load as sequence offsets); a timestamp offset
// without ids, which the JVM's form cannot hold, is stored there as JSON
// under "annals-json". The paused flag is projection_management's row.
//
// InTx's transaction has the store's schema first on its search path, so
// a handler's unqualified table names (CREATE TABLE balances …, INSERT
// INTO balances …) are the store's schema's, not public's: services that
// share a database in schemas of their own keep their read models apart.
type Projections struct {
	s     *Store
	begin string // BEGIN, then the schema first on the transaction's search path
}

var _ offsets.TxStore[pgx.Tx] = (*Projections)(nil)

// Projections returns the store's projection offset store.
func (s *Store) Projections() *Projections {
	return &Projections{s: s, begin: beginInSchema(s.cfg.schema)}
}

// beginInSchema is the statement that begins a read-model transaction:
// BEGIN, then the schema put before the session's search path for the
// transaction only (SET LOCAL semantics: set_config's third argument), in
// one round trip (pgx sends a statement without arguments through the
// simple protocol, which takes several). The schema is a plain identifier
// (Open refuses any other), quoted as one inside the literal.
func beginInSchema(schema string) string {
	return fmt.Sprintf(`BEGIN; SELECT set_config('search_path', concat_ws(', ', '%s', nullif(current_setting('search_path'), '')), true)`,
		pgx.Identifier{schema}.Sanitize())
}

func nowMillis() int64 { return time.Now().UnixMilli() }

// Load implements offsets.Store.
func (p *Projections) Load(ctx context.Context, id offsets.ID) (offsets.State, error) {
	return p.s.layout.loadOffset(ctx, id)
}

func (p *Projections) save(ctx context.Context, tx pgx.Tx, id offsets.ID, o query.Offset) error {
	if err := id.Validate(); err != nil {
		return err
	}
	return p.s.layout.saveOffset(ctx, tx, id, o)
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
	return p.s.layout.resetOffset(ctx, id)
}

// InTx implements offsets.TxStore: fn runs in a transaction of the
// pool, committed when fn returns nil and rolled back otherwise. The
// transaction's search path is the store's schema, then the session's
// (public by default): unqualified names that fn creates land in the
// store's schema, and those it reads are looked up there first.
func (p *Projections) InTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	tx, err := p.s.pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: p.begin})
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
