package demo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/examples/bank"
	"github.com/annals-go/annals/offsets"
	"github.com/annals-go/annals/projection"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/store/memory"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/sqlite"
)

// balanceTable is where a read model keeps the balances, and how its
// projection instances change them: in the transaction that saves their
// offset (exactly once).
type balanceTable interface {
	// describe names the table for people.
	describe() string
	// create makes the table if it is missing, keeping existing rows.
	create(ctx context.Context) error
	// projection returns the instance of slice range r.
	projection(r annals.SliceRange, cfg projection.Config) (*projection.Projection, error)
	// read returns every row's balance and their total, as of one commit.
	read(ctx context.Context) (map[string]int64, int64, error)
	// queries is the source of the projections.
	queries() query.EventsBySlicesQuery
}

// tableFor returns the balance table the store can keep, found by type
// assertion on what the mux opened: events by slices, and an offset store
// whose transactions can carry the table's changes (SQLite's *sql.Tx with
// the store's reader pool for reads; PostgreSQL's pgx.Tx; memory's Tx).
// Otherwise it returns nil and the reason.
func tableFor(st *stores.Store, reg *serialization.Registry) (balanceTable, string) {
	q, ok := st.Queries.(query.EventsBySlicesQuery)
	if !ok {
		return nil, fmt.Sprintf("the balance projection needs events by slices, which the %s store does not offer", st.Kind)
	}
	switch o := st.Offsets.(type) {
	case offsets.TxStore[*sql.Tx]:
		if s, ok := st.Admin.(*sqlite.Store); ok {
			return &sqliteTable{s: s, reg: reg}, ""
		}
	case offsets.TxStore[pgx.Tx]:
		if s, ok := st.Admin.(*postgres.Store); ok {
			return &pgTable{s: s, q: q, offsets: o, reg: reg, name: pgx.Identifier{s.Schema(), "account_balance"}.Sanitize()}, ""
		}
	case offsets.TxStore[*memory.Tx]:
		return &memoryTable{q: q, offsets: o, reg: reg, rows: map[string]bank.BalanceRow{}}, ""
	}
	return nil, fmt.Sprintf("the balance projection needs exactly-once transactions of SQLite, PostgreSQL or memory, which the %s store does not offer", st.Kind)
}

// sqliteTable is examples/bank's read model: table account_balance in the
// store's file.
type sqliteTable struct {
	s   *sqlite.Store
	reg *serialization.Registry
}

func (t *sqliteTable) describe() string                   { return "table account_balance" }
func (t *sqliteTable) create(ctx context.Context) error   { return bank.CreateReadModel(ctx, t.s) }
func (t *sqliteTable) queries() query.EventsBySlicesQuery { return t.s.Queries() }
func (t *sqliteTable) projection(r annals.SliceRange, cfg projection.Config) (*projection.Projection, error) {
	return bank.BalanceProjection(t.s, t.reg, r, cfg)
}
func (t *sqliteTable) read(ctx context.Context) (map[string]int64, int64, error) {
	return bank.ReadBalances(ctx, t.s)
}

func projectionID(r annals.SliceRange) projection.ID {
	return projection.ID{Name: bank.BalanceProjectionName, Key: r.String()}
}

// pgTable is the read model in the PostgreSQL store's schema: table
// account_balance, changed in the projection's transactions.
type pgTable struct {
	s       *postgres.Store
	q       query.EventsBySlicesQuery
	offsets offsets.TxStore[pgx.Tx]
	reg     *serialization.Registry
	name    string // the table's quoted, schema-qualified name
}

func (t *pgTable) describe() string                   { return "table account_balance" }
func (t *pgTable) queries() query.EventsBySlicesQuery { return t.q }

func (t *pgTable) create(ctx context.Context) error {
	if _, err := t.s.Pool().Exec(ctx, `CREATE TABLE IF NOT EXISTS `+t.name+` (
		account_id TEXT   PRIMARY KEY,
		balance    BIGINT NOT NULL,
		seq_nr     BIGINT NOT NULL)`); err != nil {
		return fmt.Errorf("create read model: %w", err)
	}
	return nil
}

func (t *pgTable) projection(r annals.SliceRange, cfg projection.Config) (*projection.Projection, error) {
	handler := func(ctx context.Context, tx pgx.Tx, envs []query.Envelope) error {
		return bank.ApplyBalances(ctx, t.reg, pgRows{tx: tx, name: t.name}, envs)
	}
	return projection.ExactlyOnceGrouped(projectionID(r), projection.BySlices(t.q, bank.EntityType, r), t.offsets, handler, cfg)
}

func (t *pgTable) read(ctx context.Context) (map[string]int64, int64, error) {
	out := map[string]int64{}
	var total int64
	rs, err := t.s.Pool().Query(ctx, `SELECT account_id, balance FROM `+t.name)
	if err != nil {
		return nil, 0, fmt.Errorf("read balances: %w", err)
	}
	defer rs.Close()
	for rs.Next() {
		var id string
		var b int64
		if err := rs.Scan(&id, &b); err != nil {
			return nil, 0, fmt.Errorf("read balances: %w", err)
		}
		out[id] = b
		total += b
	}
	if err := rs.Err(); err != nil {
		return nil, 0, fmt.Errorf("read balances: %w", err)
	}
	return out, total, nil
}

// pgRows are the rows as a projection's transaction sees them.
type pgRows struct {
	tx   pgx.Tx
	name string
}

func (r pgRows) Get(ctx context.Context, account string) (bank.BalanceRow, bool, error) {
	var row bank.BalanceRow
	err := r.tx.QueryRow(ctx, `SELECT balance, seq_nr FROM `+r.name+` WHERE account_id = $1`, account).Scan(&row.Balance, &row.SeqNr)
	if errors.Is(err, pgx.ErrNoRows) {
		return bank.BalanceRow{}, false, nil
	}
	return row, err == nil, err
}

func (r pgRows) Put(ctx context.Context, account string, row bank.BalanceRow) error {
	_, err := r.tx.Exec(ctx, `INSERT INTO `+r.name+` (account_id, balance, seq_nr) VALUES ($1, $2, $3)
		ON CONFLICT (account_id) DO UPDATE SET balance = excluded.balance, seq_nr = excluded.seq_nr`, account, row.Balance, row.SeqNr)
	return err
}

// memoryTable is the read model of the memory store: a map in this
// process, changed when a projection's transaction commits.
type memoryTable struct {
	q       query.EventsBySlicesQuery
	offsets offsets.TxStore[*memory.Tx]
	reg     *serialization.Registry

	mu   sync.Mutex
	rows map[string]bank.BalanceRow
}

func (t *memoryTable) describe() string                   { return "a map in memory" }
func (t *memoryTable) create(context.Context) error       { return nil }
func (t *memoryTable) queries() query.EventsBySlicesQuery { return t.q }

func (t *memoryTable) projection(r annals.SliceRange, cfg projection.Config) (*projection.Projection, error) {
	handler := func(ctx context.Context, tx *memory.Tx, envs []query.Envelope) error {
		staged := &memoryRows{t: t, staged: map[string]bank.BalanceRow{}}
		if err := bank.ApplyBalances(ctx, t.reg, staged, envs); err != nil {
			return err
		}
		tx.OnCommit(func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			for id, row := range staged.staged {
				t.rows[id] = row
			}
		})
		return nil
	}
	return projection.ExactlyOnceGrouped(projectionID(r), projection.BySlices(t.q, bank.EntityType, r), t.offsets, handler, cfg)
}

func (t *memoryTable) read(context.Context) (map[string]int64, int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]int64, len(t.rows))
	var total int64
	for id, row := range t.rows {
		out[id] = row.Balance
		total += row.Balance
	}
	return out, total, nil
}

// memoryRows are the rows as one transaction sees them: its own changes
// over the committed rows.
type memoryRows struct {
	t      *memoryTable
	staged map[string]bank.BalanceRow
}

func (r *memoryRows) Get(_ context.Context, account string) (bank.BalanceRow, bool, error) {
	if row, ok := r.staged[account]; ok {
		return row, true, nil
	}
	r.t.mu.Lock()
	defer r.t.mu.Unlock()
	row, ok := r.t.rows[account]
	return row, ok, nil
}

func (r *memoryRows) Put(_ context.Context, account string, row bank.BalanceRow) error {
	r.staged[account] = row
	return nil
}
