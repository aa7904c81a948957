// Package pgtest gives tests a PostgreSQL server: the one at
// ANNALS_TEST_POSTGRES, or postgres://postgres@127.0.0.1:5432/annals_test
// (what `scripts/services up postgres` starts), and a schema of their own
// that is dropped when the test ends.
//
// When no server answers, tests skip with a message saying how to start
// one, except when ANNALS_TEST_REQUIRE lists "postgres" (as CI sets it):
// then they fail.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals/store/postgres"
)

// DefaultDSN is the server `scripts/services up postgres` starts.
const DefaultDSN = "postgres://postgres@127.0.0.1:5432/annals_test"

// DSN returns the test server's URL: ANNALS_TEST_POSTGRES when set,
// DefaultDSN otherwise.
func DSN() string {
	if v := os.Getenv("ANNALS_TEST_POSTGRES"); v != "" {
		return v
	}
	return DefaultDSN
}

// Required reports whether ANNALS_TEST_REQUIRE lists postgres.
func Required() bool {
	return slices.Contains(strings.FieldsFunc(os.Getenv("ANNALS_TEST_REQUIRE"), func(r rune) bool { return r == ',' || r == ' ' }), "postgres")
}

// Server returns the test server's URL after checking that it answers. When
// it does not, t is skipped, or failed when Required.
func Server(t testing.TB) string {
	t.Helper()
	dsn := DSN()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		u, _ := url.Parse(dsn)
		where := dsn
		if u != nil {
			where = u.Redacted()
		}
		if Required() {
			t.Fatalf("PostgreSQL at %s is required (ANNALS_TEST_REQUIRE) and does not answer: %v", where, err)
		}
		t.Skipf("no PostgreSQL at %s (%v): run `scripts/services up postgres`, or set ANNALS_TEST_POSTGRES", where, err)
	}
	conn.Close(ctx)
	return dsn
}

// Schema creates nothing but reserves a schema name unique to this test run,
// registers its removal (DROP SCHEMA … CASCADE) at the end of the test, and
// returns the server's URL with schema=<name> added, and the name.
func Schema(t testing.TB) (dsn, schema string) {
	t.Helper()
	base := Server(t)
	schema = uniqueSchema()
	dsn = WithParam(base, "schema", schema)
	t.Cleanup(func() { drop(t, dsn) })
	return dsn, schema
}

// uniqueSchema returns a schema name unique to this test run.
func uniqueSchema() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "annals_test_" + hex.EncodeToString(b[:])
}

// drop removes the schema of dsn and everything in it.
func drop(t testing.TB, dsn string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := postgres.NewMigrator(ctx, dsn)
	if err != nil {
		t.Errorf("drop the test's schema: %v", err)
		return
	}
	defer m.Close()
	if err := m.Drop(ctx); err != nil {
		t.Error(err)
	}
}

// WithParam returns dsn with the query parameter name set to value.
func WithParam(dsn, name, value string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	q := u.Query()
	q.Set(name, value)
	u.RawQuery = q.Encode()
	return u.String()
}
