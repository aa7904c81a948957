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
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/sqlite"
)

// balanceInstances is the number of instances of the balance projection,
// each a quarter of the slices, spread over the members.
const balanceInstances = 4

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
func balanceDaemon[Tx any](reg *serialization.Registry, q query.EventsBySlicesQuery, offsets projection.TxOffsetStore[Tx], fence membership.TxChecker[Tx], rows func(Tx) bank.BalanceRows) cluster.Daemon {
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
		p, err := projection.ExactlyOnceGrouped(id, projection.BySlices(q, bank.EntityType, ranges[i]), offsets, handler, projection.Config{})
		if err != nil {
			return err
		}
		return p.Run(ctx)
	}}
}

// postgresReadModel keeps the read model in the store's schema.
func postgresReadModel(ctx context.Context, s *postgres.Store, reg *serialization.Registry) (*readModel, error) {
	err := s.Projections().InTx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS account_balance (account_id TEXT PRIMARY KEY, balance BIGINT NOT NULL, seq_nr BIGINT NOT NULL)`)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("create the read model: %w", err)
	}
	return &readModel{
		daemon: balanceDaemon(reg, s.Queries(), s.Projections(), s.Membership(), func(tx pgx.Tx) bank.BalanceRows { return pgRows{tx} }),
		read: func(ctx context.Context) (map[string]int64, error) {
			out := map[string]int64{}
			err := s.Projections().InTx(ctx, func(tx pgx.Tx) error {
				rows, err := tx.Query(ctx, `SELECT account_id, balance FROM account_balance`)
				if err != nil {
					return err
				}
				for rows.Next() {
					var id string
					var b int64
					if err := rows.Scan(&id, &b); err != nil {
						return err
					}
					out[id] = b
				}
				return rows.Err()
			})
			return out, err
		},
	}, nil
}

// sqliteReadModel keeps the read model in the store's file.
func sqliteReadModel(ctx context.Context, s *sqlite.Store, reg *serialization.Registry) (*readModel, error) {
	if err := bank.CreateReadModel(ctx, s); err != nil {
		return nil, err
	}
	return &readModel{
		daemon: balanceDaemon(reg, s.Queries(), s.Projections(), s.Membership(), func(tx *sql.Tx) bank.BalanceRows { return sqlRows{tx} }),
		read: func(ctx context.Context) (map[string]int64, error) {
			b, _, err := bank.ReadBalances(ctx, s)
			return b, err
		},
	}, nil
}

// pgRows are the read model's rows in a PostgreSQL transaction.
type pgRows struct{ tx pgx.Tx }

func (r pgRows) Get(ctx context.Context, account string) (bank.BalanceRow, bool, error) {
	var row bank.BalanceRow
	err := r.tx.QueryRow(ctx, `SELECT balance, seq_nr FROM account_balance WHERE account_id = $1`, account).Scan(&row.Balance, &row.SeqNr)
	if errors.Is(err, pgx.ErrNoRows) {
		return bank.BalanceRow{}, false, nil
	}
	return row, err == nil, err
}

func (r pgRows) Put(ctx context.Context, account string, row bank.BalanceRow) error {
	_, err := r.tx.Exec(ctx, `INSERT INTO account_balance (account_id, balance, seq_nr) VALUES ($1, $2, $3)
		ON CONFLICT (account_id) DO UPDATE SET balance = excluded.balance, seq_nr = excluded.seq_nr`, account, row.Balance, row.SeqNr)
	return err
}

// sqlRows are the read model's rows in a SQLite transaction.
type sqlRows struct{ tx *sql.Tx }

func (r sqlRows) Get(ctx context.Context, account string) (bank.BalanceRow, bool, error) {
	var row bank.BalanceRow
	err := r.tx.QueryRowContext(ctx, `SELECT balance, seq_nr FROM account_balance WHERE account_id = ?`, account).Scan(&row.Balance, &row.SeqNr)
	if errors.Is(err, sql.ErrNoRows) {
		return bank.BalanceRow{}, false, nil
	}
	return row, err == nil, err
}

func (r sqlRows) Put(ctx context.Context, account string, row bank.BalanceRow) error {
	_, err := r.tx.ExecContext(ctx, `INSERT INTO account_balance (account_id, balance, seq_nr) VALUES (?, ?, ?)
		ON CONFLICT (account_id) DO UPDATE SET balance = excluded.balance, seq_nr = excluded.seq_nr`, account, row.Balance, row.SeqNr)
	return err
}
