package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/mattn/go-sqlite3"
)

// The raw baselines: the same work done with the driver alone, on a table
// of the same shape as a journal (entity type, persistence id, sequence
// number, manifest, JSON payload, a global ordering), with the same
// durability (SQLite: WAL, synchronous=FULL; PostgreSQL: the server's
// defaults, fsync and synchronous_commit on). Each write is its writer's
// own transaction, as a service without a library would write; each event
// is encoded and decoded with encoding/json, as the libraries do.

// rawSQL is the dialect-independent part: statements and a driver.
type rawDB interface {
	exec(ctx context.Context, sql string, args ...any) error
	// rows calls f for each row of the query, scanning into dest.
	rows(ctx context.Context, q string, args []any, dest []any, f func() error) error
	copyIn(ctx context.Context, rows [][]any) error
	close() error
}

type rawSystem struct {
	db         rawDB
	insert     string // entity_type, pid, seq, manifest, payload
	byPID      string // seq, payload of one pid in order
	byType     string // pid, seq, manifest, payload of an entity type in order
	mu         sync.Mutex
	seqs       map[string]int
	recoveries int
	events     int
}

const manifest = "compare.Deposited"

func (r *rawSystem) Name() string { return "raw" }

func (r *rawSystem) write(ctx context.Context, pid string) error {
	r.mu.Lock()
	r.seqs[pid]++
	seq := r.seqs[pid]
	r.mu.Unlock()
	payload, err := json.Marshal(Deposited{Amount: 1})
	if err != nil {
		return err
	}
	return r.db.exec(ctx, r.insert, accountType, pid, seq, manifest, payload)
}

func (r *rawSystem) Writers(ctx context.Context, writers, each int) error {
	return fanOut(writers, func(w int) error {
		pid := fmt.Sprint(accountType, "|w-", w)
		for range each {
			if err := r.write(ctx, pid); err != nil {
				return err
			}
		}
		return nil
	})
}

func (r *rawSystem) WriteOne(ctx context.Context, n int) error {
	for range n {
		if err := r.write(ctx, accountType+"|one"); err != nil {
			return err
		}
	}
	return nil
}

func (r *rawSystem) seed(ctx context.Context, entityType, prefix string, entities, events int) error {
	payload, err := json.Marshal(Deposited{Amount: 1})
	if err != nil {
		return err
	}
	var rows [][]any
	for e := range entities {
		pid := fmt.Sprint(entityType, "|", prefix, e)
		for s := range events {
			rows = append(rows, []any{entityType, pid, s + 1, manifest, payload})
			if len(rows) == 5000 {
				if err := r.db.copyIn(ctx, rows); err != nil {
					return err
				}
				rows = rows[:0]
			}
		}
	}
	if len(rows) > 0 {
		return r.db.copyIn(ctx, rows)
	}
	return nil
}

func (r *rawSystem) SeedRecovery(ctx context.Context, entities, events int) error {
	r.recoveries, r.events = entities, events
	return r.seed(ctx, accountType, "r-", entities, events)
}

func (r *rawSystem) recoverOne(ctx context.Context, e int) error {
	var seq int64
	var payload []byte
	var acc Account
	n := 0
	err := r.db.rows(ctx, r.byPID, []any{fmt.Sprint(accountType, "|r-", e)}, []any{&seq, &payload}, func() error {
		var d Deposited
		if err := json.Unmarshal(payload, &d); err != nil {
			return err
		}
		acc.Balance += d.Amount
		n++
		return nil
	})
	if err == nil && (acc.Balance != r.events || n != r.events) {
		err = fmt.Errorf("entity %d recovered to %d, want %d", e, acc.Balance, r.events)
	}
	return err
}

func (r *rawSystem) RecoverSequential(ctx context.Context) error {
	for e := range r.recoveries {
		if err := r.recoverOne(ctx, e); err != nil {
			return err
		}
	}
	return nil
}

func (r *rawSystem) RecoverConcurrent(ctx context.Context) error {
	return fanOut(r.recoveries, func(e int) error { return r.recoverOne(ctx, e) })
}

func (r *rawSystem) SeedCatchUp(ctx context.Context, events int) error {
	return r.seed(ctx, readerType, "c-", 1000, events/1000)
}

func (r *rawSystem) CatchUp(ctx context.Context) (int, error) {
	var pid, man string
	var seq int64
	var payload []byte
	n, sum := 0, 0
	err := r.db.rows(ctx, r.byType, []any{readerType}, []any{&pid, &seq, &man, &payload}, func() error {
		var d Deposited
		if err := json.Unmarshal(payload, &d); err != nil {
			return err
		}
		sum += d.Amount
		n++
		return nil
	})
	if err == nil && sum != n {
		err = fmt.Errorf("sum %d of %d events", sum, n)
	}
	return n, err
}

func (r *rawSystem) Close() error { return r.db.close() }

// SQLite through database/sql and mattn/go-sqlite3.

const sqliteSchema = `CREATE TABLE IF NOT EXISTS events (
	ordering    INTEGER PRIMARY KEY AUTOINCREMENT,
	entity_type TEXT    NOT NULL,
	pid         TEXT    NOT NULL,
	seq         INTEGER NOT NULL,
	manifest    TEXT    NOT NULL,
	payload     BLOB    NOT NULL,
	UNIQUE (pid, seq)
);
CREATE INDEX IF NOT EXISTS events_type ON events (entity_type, ordering);`

type sqliteDB struct {
	w, r *sql.DB // the writer (one connection, as SQLite has one writer) and the readers
}

func openRawSQLite(ctx context.Context, dir string) (*rawSystem, error) {
	file := filepath.Join(dir, "raw.db")
	params := "?_journal_mode=WAL&_synchronous=FULL&_busy_timeout=10000"
	w, err := sql.Open("sqlite3", "file:"+file+params+"&_txlock=immediate")
	if err != nil {
		return nil, err
	}
	w.SetMaxOpenConns(1)
	if _, err := w.ExecContext(ctx, sqliteSchema); err != nil {
		_ = w.Close()
		return nil, err
	}
	rd, err := sql.Open("sqlite3", "file:"+file+params)
	if err != nil {
		_ = w.Close()
		return nil, err
	}
	return &rawSystem{
		db:     &sqliteDB{w: w, r: rd},
		insert: `INSERT INTO events (entity_type, pid, seq, manifest, payload) VALUES (?, ?, ?, ?, ?)`,
		byPID:  `SELECT seq, payload FROM events WHERE pid = ? ORDER BY seq`,
		byType: `SELECT pid, seq, manifest, payload FROM events WHERE entity_type = ? ORDER BY ordering`,
		seqs:   map[string]int{},
	}, nil
}

func (d *sqliteDB) exec(ctx context.Context, q string, args ...any) error {
	_, err := d.w.ExecContext(ctx, q, args...)
	return err
}

func (d *sqliteDB) rows(ctx context.Context, q string, args []any, dest []any, f func() error) error {
	rows, err := d.r.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		if err := f(); err != nil {
			return err
		}
	}
	return rows.Err()
}

func (d *sqliteDB) copyIn(ctx context.Context, rows [][]any) error {
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	st, err := tx.PrepareContext(ctx, `INSERT INTO events (entity_type, pid, seq, manifest, payload) VALUES (?, ?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	for _, r := range rows {
		if _, err := st.ExecContext(ctx, r...); err != nil {
			return err
		}
	}
	return tx.Commit()
}

func (d *sqliteDB) close() error { _ = d.r.Close(); return d.w.Close() }

// PostgreSQL through pgx's pool, with its defaults.

type pgDB struct {
	pool *pgxpool.Pool
	drop func() error
}

func openRawPostgres(ctx context.Context, url string) (*rawSystem, error) {
	schema, drop, err := scratchSchema(ctx, url, "raw")
	if err != nil {
		return nil, err
	}
	pool, err := schemaPool(ctx, url, schema)
	if err != nil {
		_ = drop()
		return nil, err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE events (
	ordering    BIGSERIAL PRIMARY KEY,
	entity_type TEXT   NOT NULL,
	pid         TEXT   NOT NULL,
	seq         BIGINT NOT NULL,
	manifest    TEXT   NOT NULL,
	payload     BYTEA  NOT NULL,
	UNIQUE (pid, seq)
);
CREATE INDEX events_type ON events (entity_type, ordering);`); err != nil {
		pool.Close()
		_ = drop()
		return nil, err
	}
	return &rawSystem{
		db:     &pgDB{pool: pool, drop: drop},
		insert: `INSERT INTO events (entity_type, pid, seq, manifest, payload) VALUES ($1, $2, $3, $4, $5)`,
		byPID:  `SELECT seq, payload FROM events WHERE pid = $1 ORDER BY seq`,
		byType: `SELECT pid, seq, manifest, payload FROM events WHERE entity_type = $1 ORDER BY ordering`,
		seqs:   map[string]int{},
	}, nil
}

func (d *pgDB) exec(ctx context.Context, q string, args ...any) error {
	_, err := d.pool.Exec(ctx, q, args...)
	return err
}

func (d *pgDB) rows(ctx context.Context, q string, args []any, dest []any, f func() error) error {
	rows, err := d.pool.Query(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		if err := f(); err != nil {
			return err
		}
	}
	return rows.Err()
}

func (d *pgDB) copyIn(ctx context.Context, rows [][]any) error {
	_, err := d.pool.CopyFrom(ctx, pgx.Identifier{"events"}, []string{"entity_type", "pid", "seq", "manifest", "payload"}, pgx.CopyFromRows(rows))
	return err
}

func (d *pgDB) close() error { d.pool.Close(); return d.drop() }

// scratchSchema creates a schema of its own for one system and returns its
// name and a function that drops it.
func scratchSchema(ctx context.Context, url, system string) (string, func() error, error) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	schema := "compare_" + system + "_" + hex.EncodeToString(b[:])
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return "", nil, err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return "", nil, err
	}
	return schema, func() error {
		conn, err := pgx.Connect(context.Background(), url)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		_, err = conn.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		return err
	}, nil
}

// schemaPool is a pgx pool with pgx's defaults whose connections use schema.
func schemaPool(ctx context.Context, url, schema string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	return pgxpool.NewWithConfig(ctx, cfg)
}
