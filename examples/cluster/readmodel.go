package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/cluster"
	"github.com/annals-go/annals/examples/bank"
	"github.com/annals-go/annals/membership"
	"github.com/annals-go/annals/projection"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/stores"
)

// balanceInstances is the number of instances of the balance projection,
// each a quarter of the slices, spread over the members.
const balanceInstances = 4

// balanceTag is the tag of the accounts whose slices lie in the instance's
// range that slice is in, for stores that answer events by tag only
// (Cassandra): Akka's sharded tags.
func balanceTag(slice int) string {
	per := annals.NumberOfSlices / balanceInstances
	return fmt.Sprintf("balances-%d", slice/per)
}

// readModel is the balance read model of one store: the daemon that keeps
// it and a read of it.
type readModel struct {
	daemon cluster.Daemon
	read   func(ctx context.Context) (map[string]int64, error)
}

// balanceDaemon makes the daemon of the balance projection: instance i
// runs the projection of the i-th quarter of the slices, exactly once
// (the rows and the offset in one transaction), and each transaction
// first checks, in the database, that the instance still holds its lease
// at its epoch (membership.TxChecker): an instance that lost its lease
// without knowing it commits nothing, so no event is applied twice when
// an instance moves.
func balanceDaemon[Tx any](reg *serialization.Registry, source func(i int) projection.Source, offsets projection.TxOffsetStore[Tx], fence membership.TxChecker[Tx], rows func(Tx) bank.BalanceRows) cluster.Daemon {
	ranges, _ := annals.SliceRanges(balanceInstances)
	return cluster.Daemon{Name: "balances", Instances: balanceInstances, Run: func(ctx context.Context, i int) error {
		handler := func(ctx context.Context, tx Tx, envs []query.Envelope) error {
			l, ok := cluster.LeaseOf(ctx)
			if !ok {
				return errors.New("balances: the projection runs outside its daemon instance's lease")
			}
			if err := fence.CheckHeldTx(ctx, tx, l.Cluster, l.Name, l.Holder, l.Epoch); err != nil {
				return err
			}
			return bank.ApplyBalances(ctx, reg, rows(tx), envs)
		}
		id := projection.ID{Name: "balances", Key: ranges[i].String()}
		p, err := projection.ExactlyOnceGrouped(id, source(i), offsets, handler, projection.Config{})
		if err != nil {
			return err
		}
		return p.Run(ctx)
	}}
}

// balanceTable is the read model's table, in SQLite and PostgreSQL alike.
const balanceTable = `CREATE TABLE IF NOT EXISTS account_balance (account_id TEXT PRIMARY KEY, balance BIGINT NOT NULL, seq_nr BIGINT NOT NULL)`

// newReadModel keeps the read model in the stack's read-model database
// (the store's own on PostgreSQL and SQLite, the readmodel= database's on
// the Kafka journal), the projection's instances holding their leases in
// that database too.
func newReadModel(ctx context.Context, st *stores.Stack, source func(i int) projection.Source, reg *serialization.Registry) (*readModel, error) {
	switch st.ReadModelKind {
	case "postgres":
		return sqlReadModel(ctx, st, source, reg, func(tx pgx.Tx) sqlTx { return pgTx{tx} })
	case "sqlite":
		return sqlReadModel(ctx, st, source, reg, func(tx *sql.Tx) sqlTx { return stdTx{tx} })
	}
	return nil, fmt.Errorf("the read model's database is %q; the example keeps its read model on PostgreSQL or SQLite", st.ReadModelKind)
}

// sqlReadModel is the read model in a database whose transactions are Tx.
func sqlReadModel[Tx any](ctx context.Context, st *stores.Stack, source func(i int) projection.Source, reg *serialization.Registry, wrap func(Tx) sqlTx) (*readModel, error) {
	offsets, err := stores.ReadModelOf[Tx](st)
	if err != nil {
		return nil, err
	}
	fence, ok := st.ReadModelMembership.(membership.TxChecker[Tx])
	if !ok {
		return nil, fmt.Errorf("the read model's database (%s) checks no lease in its transactions", st.ReadModelKind)
	}
	if err := offsets.InTx(ctx, func(tx Tx) error { return wrap(tx).exec(ctx, balanceTable) }); err != nil {
		return nil, fmt.Errorf("create the read model: %w", err)
	}
	return &readModel{
		daemon: balanceDaemon(reg, source, offsets, fence, func(tx Tx) bank.BalanceRows { return wrap(tx) }),
		read: func(ctx context.Context) (map[string]int64, error) {
			var out map[string]int64
			err := offsets.InTx(ctx, func(tx Tx) (err error) {
				out, err = wrap(tx).balances(ctx)
				return err
			})
			return out, err
		},
	}, nil
}

// sqlTx is a read-model transaction: the rows the projection keeps
// (bank.BalanceRows) and the statements the service runs.
type sqlTx interface {
	bank.BalanceRows
	exec(ctx context.Context, stmt string) error
	balances(ctx context.Context) (map[string]int64, error)
}

// pgTx is a PostgreSQL transaction of the read model.
type pgTx struct{ tx pgx.Tx }

func (r pgTx) Get(ctx context.Context, account string) (bank.BalanceRow, bool, error) {
	var row bank.BalanceRow
	err := r.tx.QueryRow(ctx, `SELECT balance, seq_nr FROM account_balance WHERE account_id = $1`, account).Scan(&row.Balance, &row.SeqNr)
	if errors.Is(err, pgx.ErrNoRows) {
		return bank.BalanceRow{}, false, nil
	}
	return row, err == nil, err
}

func (r pgTx) Put(ctx context.Context, account string, row bank.BalanceRow) error {
	_, err := r.tx.Exec(ctx, `INSERT INTO account_balance (account_id, balance, seq_nr) VALUES ($1, $2, $3)
		ON CONFLICT (account_id) DO UPDATE SET balance = excluded.balance, seq_nr = excluded.seq_nr`, account, row.Balance, row.SeqNr)
	return err
}

// stdTx is a SQLite transaction of the read model.
type stdTx struct{ tx *sql.Tx }

func (r stdTx) Get(ctx context.Context, account string) (bank.BalanceRow, bool, error) {
	var row bank.BalanceRow
	err := r.tx.QueryRowContext(ctx, `SELECT balance, seq_nr FROM account_balance WHERE account_id = ?`, account).Scan(&row.Balance, &row.SeqNr)
	if errors.Is(err, sql.ErrNoRows) {
		return bank.BalanceRow{}, false, nil
	}
	return row, err == nil, err
}

func (r stdTx) Put(ctx context.Context, account string, row bank.BalanceRow) error {
	_, err := r.tx.ExecContext(ctx, `INSERT INTO account_balance (account_id, balance, seq_nr) VALUES (?, ?, ?)
		ON CONFLICT (account_id) DO UPDATE SET balance = excluded.balance, seq_nr = excluded.seq_nr`, account, row.Balance, row.SeqNr)
	return err
}

func (r pgTx) exec(ctx context.Context, stmt string) error {
	_, err := r.tx.Exec(ctx, stmt)
	return err
}

func (r pgTx) balances(ctx context.Context) (map[string]int64, error) {
	rows, err := r.tx.Query(ctx, `SELECT account_id, balance FROM account_balance`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanBalances(rows)
}

func (r stdTx) exec(ctx context.Context, stmt string) error {
	_, err := r.tx.ExecContext(ctx, stmt)
	return err
}

func (r stdTx) balances(ctx context.Context) (map[string]int64, error) {
	rows, err := r.tx.QueryContext(ctx, `SELECT account_id, balance FROM account_balance`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanBalances(rows)
}

// scanBalances reads (account_id, balance) rows of either driver.
func scanBalances(rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}) (map[string]int64, error) {
	out := map[string]int64{}
	for rows.Next() {
		var id string
		var b int64
		if err := rows.Scan(&id, &b); err != nil {
			return nil, err
		}
		out[id] = b
	}
	return out, rows.Err()
}
