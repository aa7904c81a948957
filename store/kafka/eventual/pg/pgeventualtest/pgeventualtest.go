// Package pgeventualtest gives tests an eventual store on the test
// PostgreSQL server (see package pgtest), in a schema of their own dropped
// when the test ends.
package pgeventualtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/annals-go/annals/store/kafka/eventual/pg"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

// Open returns an eventual store in a new schema.
func Open(t testing.TB) *pg.Store {
	t.Helper()
	_, schema := pgtest.Schema(t)
	return OpenIn(t, schema)
}

// OpenIn returns an eventual store created in schema (a name from
// pgtest.Schema, which drops it at the end of the test).
func OpenIn(t testing.TB, schema string) *pg.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, pgtest.Server(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s, err := pg.New(ctx, pool, schema, true)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
