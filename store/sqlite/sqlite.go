// Package sqlite is the embedded default store: a journal and a snapshot
// store in one SQLite database file.
//
// The file runs in WAL mode with one writer connection and a pool of reader
// connections, so replays and loads run in parallel with writes. Every
// Write call is one transaction, with one sync of the log for the whole
// call. Invalid and oversize atomic writes are rejected before it; one that
// meets a stored sequence number makes the transaction roll back and run
// again without it, so a rejected atomic write changes nothing while its
// neighbours commit together (conflicts need two writers of one id, so the
// usual path pays nothing for per-write atomicity). By default the log
// is synced with synchronous=FULL, so an acknowledged event survives power
// loss; WithSynchronous(SyncNormal) trades that for speed (a power loss may
// lose the last transactions, never corrupt the file).
//
// Because SQLite has one writer, the journal's ordering column grows in
// commit order: a reader that has seen ordering n has seen every event with
// a lower ordering.
//
// The schema (tables event_journal, event_tag, journal_metadata, snapshot,
// the projection and durable-state tables, the membership tables of
// Membership, and the annals_schema version row) is created and migrated
// on Open. Open refuses, without changing the file, a file that is not an
// SQLite database, an SQLite database that is not an Annals database, and
// an Annals database of a newer schema version.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
)

var (
	// ErrNotAnnals reports a file that is not an Annals database: not SQLite
	// at all, or an SQLite database with other tables and no schema row.
	ErrNotAnnals = errors.New("sqlite: not an Annals database")
	// ErrNewerSchema reports an Annals database written by a newer version
	// of this package.
	ErrNewerSchema = errors.New("sqlite: database schema is newer than this version of Annals supports")
)

// Defaults of the options.
const (
	DefaultMaxPayloadSize = 16 << 20
	DefaultBusyTimeout    = 5 * time.Second
)

// Synchronous is SQLite's durability setting for the write-ahead log.
type Synchronous int

const (
	// SyncFull syncs the log at every commit: an acknowledged write survives
	// power loss. The default.
	SyncFull Synchronous = iota
	// SyncNormal syncs the log at checkpoints only: much faster commits, and
	// a power loss (not a process crash) may lose the last transactions.
	SyncNormal
)

func (s Synchronous) pragma() string {
	if s == SyncNormal {
		return "NORMAL"
	}
	return "FULL"
}

// Option configures Open. As everywhere in Annals, zero means the
// default and a negative setting is an error (Open fails with
// ErrInvalidConfig, naming it).
type Option func(*config)

type config struct {
	poll        time.Duration
	sync        Synchronous
	readers     int
	maxPayload  int
	busyTimeout time.Duration
	invalid     []error // negative settings, reported by Open
}

// ErrInvalidConfig reports a negative setting given to Open.
var ErrInvalidConfig = errors.New("sqlite: invalid configuration")

// setting applies a numeric option: zero keeps the default, a negative
// value is recorded as an error.
func setting[T int | time.Duration](c *config, name string, v T, field *T) {
	switch {
	case v < 0:
		c.invalid = append(c.invalid, fmt.Errorf("%w: %s %v is negative", ErrInvalidConfig, name, v))
	case v > 0:
		*field = v
	}
}

// WithSynchronous sets the durability of commits (default SyncFull).
func WithSynchronous(s Synchronous) Option { return func(c *config) { c.sync = s } }

// WithReaders sets the size of the reader pool (default: GOMAXPROCS, at
// least 4).
func WithReaders(n int) Option {
	return func(c *config) { setting(c, "WithReaders", n, &c.readers) }
}

// WithMaxPayloadSize sets the largest event or snapshot payload, in bytes,
// accepted (default DefaultMaxPayloadSize = 16 MiB); larger events are
// rejected.
func WithMaxPayloadSize(n int) Option {
	return func(c *config) { setting(c, "WithMaxPayloadSize", n, &c.maxPayload) }
}

// WithPollInterval sets how often live queries look for events written by
// other processes (default query.DefaultPollInterval). Events written
// through this Store wake them at once.
func WithPollInterval(d time.Duration) Option {
	return func(c *config) { setting(c, "WithPollInterval", d, &c.poll) }
}

// WithBusyTimeout sets how long a connection waits for another process's
// lock on the file before failing (default DefaultBusyTimeout = 5 s).
func WithBusyTimeout(d time.Duration) Option {
	return func(c *config) { setting(c, "WithBusyTimeout", d, &c.busyTimeout) }
}

// Store is an open Annals SQLite database. It is safe for concurrent use by
// many goroutines; one process should open a file once.
type Store struct {
	path   string
	cfg    config
	writer *sql.DB // one connection
	reader *sql.DB // pool of query-only connections

	stmts  statements
	signal query.Signal        // notified after every commit of events
	errs   journal.StoreErrors // maps every error of the driver

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

func (s *Store) isClosed() bool { return s.closed.Load() }

// Open opens (creating it if needed) the Annals database file named by dsn,
// a path optionally prefixed with "sqlite:" (for example
// "sqlite:./annals.db"). It creates or migrates the schema.
func Open(ctx context.Context, dsn string, opts ...Option) (*Store, error) {
	path := strings.TrimPrefix(strings.TrimPrefix(dsn, "sqlite://"), "sqlite:")
	if path == "" || path == ":memory:" || strings.HasPrefix(path, "file:") {
		return nil, fmt.Errorf("sqlite: %q is not a file path (use a path such as ./annals.db; for an in-memory store use store/memory)", dsn)
	}
	cfg := config{readers: max(4, runtime.GOMAXPROCS(0)), maxPayload: DefaultMaxPayloadSize, busyTimeout: DefaultBusyTimeout, poll: query.DefaultPollInterval}
	for _, o := range opts {
		o(&cfg)
	}
	if err := errors.Join(cfg.invalid...); err != nil {
		return nil, err
	}
	if err := inspect(ctx, path); err != nil {
		return nil, err
	}
	s := &Store{path: path, cfg: cfg}
	s.errs = journal.StoreErrors{Store: "sqlite", Closed: s.isClosed}
	var err error
	if s.writer, err = openPool(path, "rwc", cfg.sync, cfg.busyTimeout.Milliseconds(), 1); err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if err := s.migrate(ctx); err != nil {
		_ = s.writer.Close()
		return nil, err
	}
	if s.reader, err = openPool(path, "ro", cfg.sync, cfg.busyTimeout.Milliseconds(), cfg.readers); err != nil {
		_ = s.writer.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if err := s.stmts.prepare(ctx, s.writer, s.reader); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("sqlite: prepare statements: %w", err)
	}
	return s, nil
}

// inspect refuses, without writing to it, a file that is not an Annals
// database or is of a newer schema. A missing or empty file passes.
func inspect(ctx context.Context, path string) error {
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	if st.IsDir() {
		return fmt.Errorf("sqlite: %s is a directory, not a database file", path)
	}
	if st.Size() == 0 {
		return nil
	}
	db, err := openProbe(path)
	if err != nil {
		return fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	defer db.Close()
	version, err := readVersion(ctx, db)
	switch {
	case isNotADatabase(err):
		return fmt.Errorf("%w: %s is not an SQLite database file", ErrNotAnnals, path)
	case err != nil:
		return fmt.Errorf("sqlite: inspect %s: %w", path, err)
	case version > SchemaVersion:
		return fmt.Errorf("%w: %s has schema version %d, this version of Annals knows up to %d; upgrade Annals", ErrNewerSchema, path, version, SchemaVersion)
	case version < 0:
		return fmt.Errorf("%w: %s is an SQLite database with other tables and no annals_schema table; refusing to add Annals tables to it", ErrNotAnnals, path)
	}
	return nil
}

// querier is what readVersion needs of a *sql.DB or *sql.Tx.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// readVersion returns the schema version: 0 for an empty database, -1 for a
// database with tables but no annals_schema table.
func readVersion(ctx context.Context, q querier) (int, error) {
	var tables, annals int
	err := q.QueryRowContext(ctx, `SELECT count(*), count(*) FILTER (WHERE name = 'annals_schema') FROM sqlite_master WHERE type = 'table'`).Scan(&tables, &annals)
	if err != nil {
		return 0, err
	}
	if annals == 0 {
		if tables > 0 {
			return -1, nil
		}
		return 0, nil
	}
	var v int
	if err := q.QueryRowContext(ctx, `SELECT version FROM annals_schema WHERE id = 1`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}

// migrate brings the schema to SchemaVersion in one transaction. It checks
// the version again under the write lock, since another process may have
// migrated the file meanwhile.
func (s *Store) migrate(ctx context.Context) error {
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: open %s: %w", s.path, err)
	}
	defer tx.Rollback()
	version, err := readVersion(ctx, tx)
	switch {
	case err != nil:
		return fmt.Errorf("sqlite: inspect %s: %w", s.path, err)
	case version < 0:
		return fmt.Errorf("%w: %s has other tables and no annals_schema table", ErrNotAnnals, s.path)
	case version > SchemaVersion:
		return fmt.Errorf("%w: %s has schema version %d, this version of Annals knows up to %d", ErrNewerSchema, s.path, version, SchemaVersion)
	case version == SchemaVersion:
		return nil
	}
	if version == 0 {
		if _, err := tx.ExecContext(ctx, schemaTable); err != nil {
			return fmt.Errorf("sqlite: create schema table: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO annals_schema (id, version) VALUES (1, 0)`); err != nil {
			return fmt.Errorf("sqlite: create schema row: %w", err)
		}
	}
	for v := version; v < SchemaVersion; v++ {
		if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
			return fmt.Errorf("sqlite: migrate schema %d → %d: %w", v, v+1, err)
		}
	}
	if _, err := tx.ExecContext(ctx, `UPDATE annals_schema SET version = ? WHERE id = 1`, SchemaVersion); err != nil {
		return fmt.Errorf("sqlite: record schema version: %w", err)
	}
	return tx.Commit()
}

// readRows runs a streaming query on a reader connection. Waiting for a
// free connection honours ctx. The query runs without cancellation (the
// driver would watch a cancellable context with a goroutine per row), so
// callers check ctx per row. release ends the query and returns the
// connection; call it once, after the rows.
func (s *Store) readRows(ctx context.Context, stmt *sql.Stmt, args ...any) (rows *sql.Rows, release func(), err error) {
	conn, err := s.reader.Conn(ctx)
	if err != nil {
		return nil, nil, err
	}
	dctx := context.WithoutCancel(ctx)
	tx, err := conn.BeginTx(dctx, nil)
	if err != nil {
		_ = conn.Close()
		return nil, nil, err
	}
	rows, err = tx.StmtContext(dctx, stmt).QueryContext(dctx, args...)
	if err != nil {
		_ = tx.Rollback()
		_ = conn.Close()
		return nil, nil, err
	}
	return rows, func() { _ = rows.Close(); _ = tx.Rollback(); _ = conn.Close() }, nil
}

// writeConn takes the writer connection, waiting with ctx, and begins a
// transaction on it that runs without cancellation (see readRows); release
// returns the connection after the transaction ended.
func (s *Store) writeTxn(ctx context.Context) (tx *sql.Tx, release func(), err error) {
	conn, err := s.writer.Conn(ctx)
	if err != nil {
		return nil, nil, err
	}
	tx, err = conn.BeginTx(context.WithoutCancel(ctx), nil)
	if err != nil {
		_ = conn.Close()
		return nil, nil, err
	}
	return tx, func() { _ = tx.Rollback(); _ = conn.Close() }, nil
}

// ReadTx runs fn in a read transaction on a reader connection, for reading
// tables of the same file (read models kept by projections, for example)
// without taking the writer. The connection is query-only; the transaction
// is rolled back when fn returns.
func (s *Store) ReadTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	conn, err := s.reader.Conn(ctx)
	if err != nil {
		return s.errs.Map(ctx, "read", err, journal.ErrClosed)
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return s.errs.Map(ctx, "read", err, journal.ErrClosed)
	}
	defer tx.Rollback()
	return fn(tx)
}

// Path returns the database file's path.
func (s *Store) Path() string { return s.path }

// Journal returns the store's journal. Its Close closes the whole Store.
func (s *Store) Journal() *Journal { return &Journal{s: s} }

// Snapshots returns the store's snapshot store. Its Close closes the whole
// Store.
func (s *Store) Snapshots() *Snapshots { return &Snapshots{s: s} }

// Close closes the database. Calls after Close fail with journal.ErrClosed
// or snapshot.ErrClosed. Close is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.stmts.close()
		var errs []error
		if s.reader != nil {
			errs = append(errs, s.reader.Close())
		}
		errs = append(errs, s.writer.Close())
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}
