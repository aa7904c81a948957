package main

import (
	"context"
	"strings"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/projection"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/snapshot"
)

// Store is what the program uses of a store. SQLite's and PostgreSQL's
// differ only in Tx, the type of the transactions in which a projection
// writes its table with its offset (*sql.Tx, pgx.Tx), and so in how a
// statement runs in one: Exec and QueryRow.
type Store[Tx any] struct {
	Journal   journal.Journal
	Snapshots snapshot.Store
	Queries   Queries
	Offsets   projection.TxOffsetStore[Tx]
	Exec      func(ctx context.Context, tx Tx, sql string, args ...any) error
	QueryRow  func(ctx context.Context, tx Tx, sql string, args ...any) Row
}

// Queries are the read journal's queries the program uses.
type Queries interface {
	query.EventsByPersistenceIDQuery
	query.EventsByTagQuery
}

// Row is a row a query returned (*sql.Row, pgx.Row).
type Row interface{ Scan(dest ...any) error }

// The read model: a row per list, its numbers of open and done items.
// The statements run on SQLite and PostgreSQL alike.
const (
	createTodoLists = `CREATE TABLE IF NOT EXISTS todo_lists (
	list_id    TEXT    PRIMARY KEY,
	open_items INTEGER NOT NULL,
	done_items INTEGER NOT NULL
)`
	itemAdded = `INSERT INTO todo_lists (list_id, open_items, done_items) VALUES ($1, 1, 0)
	ON CONFLICT (list_id) DO UPDATE SET open_items = todo_lists.open_items + 1`
	itemCompleted = `UPDATE todo_lists SET open_items = open_items - 1, done_items = done_items + 1
	WHERE list_id = $1`
	selectList = `SELECT open_items, done_items FROM todo_lists WHERE list_id = $1`
)

// createReadModel creates the table in the store's database, if it is not
// there yet.
func createReadModel[Tx any](ctx context.Context, s Store[Tx]) error {
	return s.Offsets.InTx(ctx, func(tx Tx) error {
		return s.Exec(ctx, tx, createTodoLists)
	})
}

// listsProjection keeps the table from the events tagged TagTodo, exactly
// once: each event's change to its list's row commits with the
// projection's offset, in one transaction of the store.
func listsProjection[Tx any](s Store[Tx], reg *serialization.Registry) (*projection.Projection, error) {
	decode := projection.RegistryDecoder[Event](reg)
	handle := func(ctx context.Context, tx Tx, env query.Envelope, e Event) error {
		list := strings.TrimPrefix(env.PersistenceID, EntityType+annals.Separator)
		switch e.(type) {
		case ItemAdded:
			return s.Exec(ctx, tx, itemAdded, list)
		case ItemCompleted:
			return s.Exec(ctx, tx, itemCompleted, list)
		}
		return nil
	}
	id := projection.ID{Name: "todo-lists", Key: "all"}
	return projection.ExactlyOnce(id, projection.ByTag(s.Queries, TagTodo), s.Offsets,
		projection.TypedTx(decode, handle), projection.Config{})
}

// readList reads a list's row of the read model.
func readList[Tx any](ctx context.Context, s Store[Tx], list string) (open, done int, err error) {
	err = s.Offsets.InTx(ctx, func(tx Tx) error {
		return s.QueryRow(ctx, tx, selectList, list).Scan(&open, &done)
	})
	return open, done, err
}
