package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net/url"

	"github.com/mattn/go-sqlite3"
)

// The driver is mattn/go-sqlite3 (cgo), chosen by measurement: see
// ARCHITECTURE.md. Everything driver-specific lives in this file.

// openPool opens a database/sql pool on path. Every connection of the pool
// gets the same pragmas from the DSN, applied by the driver at connect.
func openPool(path string, mode string, sync Synchronous, busyMillis int64, conns int) (*sql.DB, error) {
	q := url.Values{}
	q.Set("mode", mode)
	q.Set("_busy_timeout", fmt.Sprint(busyMillis))
	if mode != "ro" {
		q.Set("_journal_mode", "WAL")
		q.Set("_synchronous", sync.pragma())
		q.Set("_txlock", "immediate")
	} else {
		q.Set("_query_only", "1")
		q.Set("_stmt_cache_size", fmt.Sprint(readerStmtCache))
	}
	db, err := sql.Open("sqlite3", "file:"+url.PathEscape(path)+"?"+q.Encode())
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	db.SetConnMaxIdleTime(0)
	db.SetConnMaxLifetime(0)
	return db, nil
}

// readerStmtCache is how many statements each reader connection keeps
// prepared for readDriver (the driver's cache, by statement text).
//
// A statement kept prepared is compiled again whenever a parameter whose
// value SQLite plans with is bound anew. A bare LIMIT parameter is one
// (SQLite reads its bound value when it compiles the LIMIT), so the
// statements here write their limit as LIMIT +?: the unary plus keeps the
// value out of the plan and the statement compiled once. A recovery's
// replay of 10 events cost 19 µs with LIMIT ? and 11 µs with LIMIT +?
// (the driver alone, rows not decoded: BenchmarkLimitParameter). The page
// of persistence ids keeps LIMIT ?3, whose value its plan needs.
// TestNoBareLimitParameter holds the rule.
const readerStmtCache = 16

// readDriver runs the select text on a reader connection through the
// driver's own interface, bypassing database/sql's per-row conversions
// (which cost a fifth of a catch-up read): row is called with each row's
// values in dest, as the driver returns them (int64, string, []byte or
// nil), and must not keep dest. Waiting for a connection honours ctx; the
// statement runs without cancellation (see readRows), ctx is checked
// before each row. The statement runs alone, in its own read transaction.
func (s *Store) readDriver(ctx context.Context, text string, args []driver.NamedValue, dest []driver.Value, row func([]driver.Value) error) error {
	return s.withReader(ctx, func(c readConn) error { return c.query(ctx, text, args, dest, row) })
}

// readConn is a reader connection as the driver offers it.
//
// Statements are prepared once per connection, in the driver's statement
// cache (readerStmtCache). mattn/go-sqlite3 returns each row's blobs in new
// slices (C.GoBytes), so a row function may keep a []byte of dest without
// copying it; TestDriverBlobsAreNotReused checks that this driver version
// still does.
type readConn struct {
	q driver.QueryerContext
	e driver.ExecerContext
}

// withReader runs fn with a reader connection, taken waiting with ctx.
func (s *Store) withReader(ctx context.Context, fn func(c readConn) error) error {
	conn, err := s.reader.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		q, ok := dc.(driver.QueryerContext)
		e, ok2 := dc.(driver.ExecerContext)
		if !ok || !ok2 {
			return fmt.Errorf("sqlite: driver connection %T does not query", dc)
		}
		return fn(readConn{q: q, e: e})
	})
}

// exec runs a statement without arguments or results (BEGIN, ROLLBACK).
func (c readConn) exec(text string) error {
	_, err := c.e.ExecContext(context.Background(), text, nil)
	return err
}

// query runs the select text, calling row with each row's values in dest
// (see readDriver).
func (c readConn) query(ctx context.Context, text string, args []driver.NamedValue, dest []driver.Value, row func([]driver.Value) error) error {
	rows, err := c.q.QueryContext(context.Background(), text, args)
	if err != nil {
		return err
	}
	defer rows.Close()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := rows.Next(dest); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if err := row(dest); err != nil {
			return err
		}
	}
}

// namedArgs turns the arguments of a statement into the driver's
// positional values: ints become int64, bools 0 or 1; strings, int64s
// and nil stay.
func namedArgs(args ...any) ([]driver.NamedValue, error) {
	nv := make([]driver.NamedValue, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case int:
			a = int64(v)
		case bool:
			a = int64(0)
			if v {
				a = int64(1)
			}
		case int64, string, nil:
		default:
			return nil, fmt.Errorf("sqlite: argument %d is a %T", i+1, a)
		}
		nv[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
	}
	return nv, nil
}

// openProbe opens one read-only connection that changes nothing in the file
// (no journal-mode switch), to inspect a database before touching it.
func openProbe(path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite3", "file:"+url.PathEscape(path)+"?mode=rw&_query_only=1")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	return db, nil
}

// isUniqueViolation reports a UNIQUE or PRIMARY KEY constraint failure.
func isUniqueViolation(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && (se.ExtendedCode == sqlite3.ErrConstraintUnique || se.ExtendedCode == sqlite3.ErrConstraintPrimaryKey)
}

// isNotADatabase reports a file that is not an SQLite database.
func isNotADatabase(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && se.Code == sqlite3.ErrNotADB
}
