package shipping

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"

	_ "github.com/mattn/go-sqlite3" // database/sql driver "sqlite3"

	"github.com/annals-go/annals/delivery"
)

// WarehouseDB is the warehouse: a delivery.Destination that keeps ship
// requests in a SQLite file of its own, each once: a request delivered
// again (same From and ID) is recognized and changes nothing. Every
// delivery, duplicates included, is also written to a receipts table with
// Run, an audit trail the example's crash test reads.
type WarehouseDB struct {
	db *sql.DB
	// Run is recorded with each receipt.
	Run int
}

// OpenWarehouse opens (creating if needed) the warehouse file at path.
func OpenWarehouse(ctx context.Context, path string) (*WarehouseDB, error) {
	db, err := sql.Open("sqlite3", "file:"+url.PathEscape(path)+"?_journal_mode=WAL&_busy_timeout=10000&_synchronous=FULL")
	if err != nil {
		return nil, fmt.Errorf("warehouse: %w", err)
	}
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, `
		CREATE TABLE IF NOT EXISTS shipments (sender TEXT NOT NULL, delivery_id INTEGER NOT NULL, items TEXT NOT NULL, PRIMARY KEY (sender, delivery_id));
		CREATE TABLE IF NOT EXISTS receipts (sender TEXT NOT NULL, delivery_id INTEGER NOT NULL, run INTEGER NOT NULL)`); err != nil {
		return nil, errors.Join(fmt.Errorf("warehouse: create tables: %w", err), db.Close())
	}
	return &WarehouseDB{db: db}, nil
}

// Deliver implements delivery.Destination: it stores d's request unless
// it holds it already, in one transaction with its receipt.
func (w *WarehouseDB) Deliver(ctx context.Context, d delivery.Delivery[ShipRequest]) error {
	items, err := json.Marshal(d.Message.Items)
	if err != nil {
		return fmt.Errorf("warehouse: %w", err)
	}
	tx, err := w.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("warehouse: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO shipments (sender, delivery_id, items) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`, d.From, d.ID, string(items)); err != nil {
		return fmt.Errorf("warehouse: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO receipts (sender, delivery_id, run) VALUES (?, ?, ?)`, d.From, d.ID, w.Run); err != nil {
		return fmt.Errorf("warehouse: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("warehouse: %w", err)
	}
	return nil
}

// Shipments returns the number of requests held per sender.
func (w *WarehouseDB) Shipments(ctx context.Context) (map[string]int, error) {
	return w.count(ctx, `SELECT sender, count(*) FROM shipments GROUP BY sender`)
}

// Receipts returns, per "sender#id", the runs in which it was delivered,
// duplicates included.
func (w *WarehouseDB) Receipts(ctx context.Context) (map[string][]int, error) {
	rows, err := w.db.QueryContext(ctx, `SELECT sender, delivery_id, run FROM receipts ORDER BY rowid`)
	if err != nil {
		return nil, fmt.Errorf("warehouse: %w", err)
	}
	defer rows.Close()
	out := map[string][]int{}
	for rows.Next() {
		var sender string
		var id int64
		var run int
		if err := rows.Scan(&sender, &id, &run); err != nil {
			return nil, fmt.Errorf("warehouse: %w", err)
		}
		k := fmt.Sprintf("%s#%d", sender, id)
		out[k] = append(out[k], run)
	}
	return out, rows.Err()
}

func (w *WarehouseDB) count(ctx context.Context, q string) (map[string]int, error) {
	rows, err := w.db.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("warehouse: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			return nil, fmt.Errorf("warehouse: %w", err)
		}
		out[k] = n
	}
	return out, rows.Err()
}

// Close closes the file.
func (w *WarehouseDB) Close() error { return w.db.Close() }
