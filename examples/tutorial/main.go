// Command tutorial is the program of docs/tutorial.md: to-do lists as
// entities whose events carry tags, a projection that keeps a read-model
// table, and queries by persistence id and by tag, on SQLite or on
// PostgreSQL.
//
//	go run ./examples/tutorial                        # ./todo.db
//	go run ./examples/tutorial -store sqlite:/tmp/todo.db
//	go run ./examples/tutorial -store 'postgres://postgres@127.0.0.1:5432/annals_test?schema=todo'
//
// Each run adds the same items again: run it on a new file or schema to
// see the output the tutorial shows.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/sqlite"
)

func main() {
	dsn := flag.String("store", "sqlite:todo.db", "the store: sqlite:FILE or postgres://…?schema=NAME")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout, *dsn); err != nil {
		fmt.Fprintln(os.Stderr, "tutorial:", err)
		os.Exit(1)
	}
}

// run makes the registry, opens the store dsn names and runs the program
// on it, writing what it does to out.
func run(ctx context.Context, out io.Writer, dsn string) error {
	reg := serialization.NewRegistry()
	if err := Register(reg); err != nil {
		return err
	}
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		return onPostgres(ctx, out, reg, dsn)
	}
	return onSQLite(ctx, out, reg, dsn)
}

// onSQLite runs the program on an SQLite file.
func onSQLite(ctx context.Context, out io.Writer, reg *serialization.Registry, dsn string) error {
	store, err := sqlite.Open(ctx, dsn) // creates the file and its tables
	if err != nil {
		return err
	}
	defer store.Close()
	return runOn(ctx, out, reg, Store[*sql.Tx]{
		Journal:   store.Journal(),
		Snapshots: store.Snapshots(),
		Queries:   store.Queries(),
		Offsets:   store.Projections(),
		Exec: func(ctx context.Context, tx *sql.Tx, sql string, args ...any) error {
			_, err := tx.ExecContext(ctx, sql, args...)
			return err
		},
		QueryRow: func(ctx context.Context, tx *sql.Tx, sql string, args ...any) Row {
			return tx.QueryRowContext(ctx, sql, args...)
		},
	})
}

// onPostgres runs the program in a schema of a PostgreSQL database.
func onPostgres(ctx context.Context, out io.Writer, reg *serialization.Registry, dsn string) error {
	store, err := postgres.Open(ctx, dsn, postgres.WithMigrate(true)) // creates the schema and its tables
	if err != nil {
		return err
	}
	defer store.Close()
	return runOn(ctx, out, reg, Store[pgx.Tx]{
		Journal:   store.Journal(),
		Snapshots: store.Snapshots(),
		Queries:   store.Queries(),
		Offsets:   store.Projections(),
		Exec: func(ctx context.Context, tx pgx.Tx, sql string, args ...any) error {
			_, err := tx.Exec(ctx, sql, args...)
			return err
		},
		QueryRow: func(ctx context.Context, tx pgx.Tx, sql string, args ...any) Row {
			return tx.QueryRow(ctx, sql, args...)
		},
	})
}

// runOn is the program: commands to two lists, the read model, the
// queries. The caller closes the store after it.
func runOn[Tx any](ctx context.Context, out io.Writer, reg *serialization.Registry, s Store[Tx]) error {
	host, err := entity.NewHost(Behavior(), entity.HostConfig{
		Journal:   s.Journal,
		Snapshots: s.Snapshots,
		Registry:  reg,
	})
	if err != nil {
		return err
	}
	defer host.Shutdown(context.WithoutCancel(ctx))

	add := func(list, title string) (List, error) {
		return entity.Ask(ctx, host, list, func(r entity.ReplyTo[List]) Command {
			return AddItem{Title: title, Reply: r}
		})
	}
	complete := func(list string, id int) (List, error) {
		return entity.Ask(ctx, host, list, func(r entity.ReplyTo[List]) Command {
			return CompleteItem{ID: id, Reply: r}
		})
	}
	ids := map[string]int{} // item title → its ID, the position add replied
	for _, it := range []struct{ list, title string }{
		{"groceries", "milk"}, {"groceries", "bread"}, {"chores", "laundry"}, {"groceries", "eggs"},
	} {
		l, err := add(it.list, it.title)
		if err != nil {
			return err
		}
		ids[it.title] = len(l.Items)
	}
	if _, err := complete("groceries", ids["bread"]); err != nil {
		return err
	}
	if _, err := complete("chores", ids["laundry"]); err != nil {
		return err
	}
	groceries, err := complete("groceries", ids["milk"])
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "groceries: %+v\n", groceries.Items)
	_, err = complete("groceries", ids["milk"])
	fmt.Fprintf(out, "complete milk again: %v\n", err)

	if err := createReadModel(ctx, s); err != nil {
		return err
	}
	p, err := listsProjection(s, reg)
	if err != nil {
		return err
	}
	pctx, stop := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() { defer close(stopped); p.Run(pctx) }()
	defer func() { stop(); <-stopped }() // Run returns once it has saved its offset

	for { // until the projection has handled every event stored
		n, err := p.Behind(ctx, 1)
		if err != nil {
			return err // a *projection.FailingError says why it does not move
		}
		if n == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, list := range []string{"chores", "groceries"} {
		open, done, err := readList(ctx, s, list)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "read model: %s has %d open, %d done\n", list, open, done)
	}

	fmt.Fprintln(out, "events of TodoList|groceries:")
	pid := annals.PersistenceID(EntityType, "groceries")
	for env, err := range s.Queries.CurrentEventsByPersistenceID(ctx, pid, 1, math.MaxInt64) {
		if err != nil {
			return err
		}
		e, err := reg.DeserializeRepr(env.Repr())
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "  #%d %T %+v tags %v\n", env.SequenceNr, e, e, slices.Sorted(slices.Values(env.Tags)))
	}

	fmt.Fprintf(out, "events tagged %s:\n", TagDone)
	for env, err := range s.Queries.CurrentEventsByTag(ctx, TagDone, query.NoOffset()) {
		if err != nil {
			return err
		}
		e, err := reg.DeserializeRepr(env.Repr())
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "  %s #%d %+v\n", env.PersistenceID, env.SequenceNr, e)
	}

	return nil // the deferred calls stop the projection, then the host
}
