package bank

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/projection"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/store/sqlite"
)

// The read model: one row per account that has events, in the same SQLite
// file as the journal, kept by BalanceProjection.
//
// balance is the sum of the account's deposits minus its withdrawals up to
// seq_nr, the sequence number of the last event applied.
const readModelSchema = `CREATE TABLE IF NOT EXISTS account_balance (
	account_id TEXT    PRIMARY KEY,
	balance    INTEGER NOT NULL,
	seq_nr     INTEGER NOT NULL
)`

// BalanceProjectionName is the name of the balance projection; each
// instance's key is its slice range ("0-511").
const BalanceProjectionName = "bank-balances"

// CreateReadModel creates the read model's table, account_balance
// (account_id TEXT PRIMARY KEY, balance INTEGER NOT NULL, seq_nr INTEGER NOT
// NULL), in store's file if it is missing. It is idempotent: an existing
// table and its rows are kept. Call it before running a BalanceProjection.
func CreateReadModel(ctx context.Context, store *sqlite.Store) error {
	err := store.Projections().InTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, readModelSchema)
		return err
	})
	if err != nil {
		return fmt.Errorf("bank: create read model: %w", err)
	}
	return nil
}

// BalanceProjection returns the instance of the balance projection that
// covers the accounts whose slices lie in r; run it with Run. Its id is
// {Name: BalanceProjectionName, Key: r.String()}: instances of different
// ranges share the table and never touch the same row, and a new instance of
// the same range resumes from the offset the previous one committed.
//
// Rules:
//   - Exactly once: the effects of a group of events (up to cfg.GroupSize,
//     or what arrived within cfg.GroupWithin) on their accounts' rows and
//     the projection's offset commit in one transaction of store (the
//     store's one writer connection: journal writes wait while it is open).
//   - Events are decoded as the behavior decodes them on recovery: a
//     manifest with an adapter in Behavior().Adapters (version-1
//     "bank.Deposited") goes through that adapter, anything else through
//     reg.DeserializeRepr. reg must have the account's types (Register).
//   - An account's events are applied in sequence order, each once: an
//     event at or below the row's seq_nr (already applied), or one that
//     skips a sequence number, fails the handler instead of making the row
//     wrong. The projection's gap filling and exactly-once commits keep
//     that from happening; cfg.Recovery says what a failure does (a Skip
//     strategy leaves the account's row behind for good, so prefer Fail, the
//     default, or RetryThenFail).
//   - The account id is the persistence id after "Account|"; an event of
//     another entity type is an error.
//
// CreateReadModel must have created the table. The projection does not
// rebuild the table: to replay from the start, delete the rows and reset
// every instance's offset together.
func BalanceProjection(store *sqlite.Store, reg *serialization.Registry, r annals.SliceRange, cfg projection.Config) (*projection.Projection, error) {
	if store == nil || reg == nil {
		return nil, errors.New("bank: balance projection: store and registry are required")
	}
	// A group of events and its offset commit in one transaction: one sync
	// per group instead of one per event keeps up with the journal.
	handler := func(ctx context.Context, tx *sql.Tx, envs []query.Envelope) error {
		return ApplyBalances(ctx, reg, sqlRows{tx}, envs)
	}
	id := projection.ID{Name: BalanceProjectionName, Key: r.String()}
	return projection.ExactlyOnceGrouped(id, projection.BySlices(store.Queries(), EntityType, r), store.Projections(), handler, cfg)
}

// BalanceRow is an account's row of the read model: its balance up to the
// event SeqNr, the last one applied.
type BalanceRow struct{ Balance, SeqNr int64 }

// BalanceRows are the read model's rows as one projection transaction
// sees them, wherever they are kept (the SQLite table here; a PostgreSQL
// table or a map in annals demo).
type BalanceRows interface {
	// Get returns account's row; found is false when it has none.
	Get(ctx context.Context, account string) (row BalanceRow, found bool, err error)
	// Put stores account's row.
	Put(ctx context.Context, account string, row BalanceRow) error
}

// ApplyBalances applies a group of account envelopes to rows, the rules of
// the balance read model: each event once, in sequence order per account
// (an account without a row is at 0); an event already applied, or one
// after a gap, fails the group.
func ApplyBalances(ctx context.Context, reg *serialization.Registry, rows BalanceRows, envs []query.Envelope) error {
	behavior := Behavior()
	for _, env := range envs {
		account, ok := strings.CutPrefix(env.PersistenceID, EntityType+annals.Separator)
		if !ok {
			return fmt.Errorf("bank: balance projection: %s is not an account", env.PersistenceID)
		}
		events, err := behavior.DecodeEvent(reg, env.Repr())
		if err != nil {
			return fmt.Errorf("bank: balance projection: %w", err)
		}
		var delta int64
		for _, e := range events {
			switch e := e.(type) {
			case Deposited:
				delta += e.Amount
			case Withdrawn:
				delta -= e.Amount
			}
		}
		row, _, err := rows.Get(ctx, account)
		switch {
		case err != nil:
			return fmt.Errorf("bank: balance projection: read %s: %w", account, err)
		case env.SequenceNr <= row.SeqNr:
			return fmt.Errorf("bank: balance projection: event %d of %s is already applied (row at %d)", env.SequenceNr, env.PersistenceID, row.SeqNr)
		case env.SequenceNr != row.SeqNr+1:
			return fmt.Errorf("bank: balance projection: event %d of %s follows %d: events %d..%d are missing", env.SequenceNr, env.PersistenceID, row.SeqNr, row.SeqNr+1, env.SequenceNr-1)
		}
		if err := rows.Put(ctx, account, BalanceRow{Balance: row.Balance + delta, SeqNr: env.SequenceNr}); err != nil {
			return fmt.Errorf("bank: balance projection: write %s: %w", account, err)
		}
	}
	return nil
}

// sqlRows are the rows of the SQLite table in a projection's transaction.
type sqlRows struct{ tx *sql.Tx }

func (r sqlRows) Get(ctx context.Context, account string) (BalanceRow, bool, error) {
	var row BalanceRow
	err := r.tx.QueryRowContext(ctx, `SELECT balance, seq_nr FROM account_balance WHERE account_id = ?`, account).Scan(&row.Balance, &row.SeqNr)
	if errors.Is(err, sql.ErrNoRows) {
		return BalanceRow{}, false, nil
	}
	return row, err == nil, err
}

func (r sqlRows) Put(ctx context.Context, account string, row BalanceRow) error {
	_, err := r.tx.ExecContext(ctx, `INSERT INTO account_balance (account_id, balance, seq_nr) VALUES (?, ?, ?)
		ON CONFLICT (account_id) DO UPDATE SET balance = excluded.balance, seq_nr = excluded.seq_nr`, account, row.Balance, row.SeqNr)
	return err
}

// ReadBalances returns the read model: the balance of every account it
// holds (accounts without events have no row and are absent), and their
// total. It reads one committed state: never half of a projection's
// transaction.
//
// It reads through store.ReadTx, on a reader connection: journal writes and
// projection transactions go on meanwhile.
func ReadBalances(ctx context.Context, store *sqlite.Store) (balances map[string]int64, total int64, err error) {
	balances = make(map[string]int64)
	err = store.ReadTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT account_id, balance FROM account_balance`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var b int64
			if err := rows.Scan(&id, &b); err != nil {
				return err
			}
			balances[id] = b
			total += b
		}
		return rows.Err()
	})
	if err != nil {
		return nil, 0, fmt.Errorf("bank: read balances: %w", err)
	}
	return balances, total, nil
}
