package sqlite

import (
	"database/sql"
	"errors"
	"fmt"
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
