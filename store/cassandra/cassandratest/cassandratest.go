// Package cassandratest gives tests a Cassandra node: the one at
// ANNALS_TEST_CASSANDRA (host:port), or 127.0.0.1:9042 (what
// `scripts/services up cassandra` starts), and a keyspace of their own that
// is dropped when the test ends.
//
// Creating a keyspace and its tables takes Cassandra a few seconds, so a
// package's tests share one keyspace (Keyspace in a parent test, the store
// passed to its subtests) and use persistence ids of their own.
//
// When no node answers, tests skip with a message saying how to start one,
// except when ANNALS_TEST_REQUIRE lists "cassandra" (as CI sets it): then
// they fail.
//
// Ring gives tests the three-node ring of `scripts/services up
// cassandra-ring` (ANNALS_TEST_CASSANDRA_RING), a keyspace of replication
// factor 3 per test, and the means to kill its nodes and bring them back;
// ANNALS_TEST_REQUIRE lists it as "cassandra-ring".
package cassandratest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/annals-go/annals/store/cassandra"
)

// DefaultAddress is the node `scripts/services up cassandra` starts.
const DefaultAddress = "127.0.0.1:9042"

// Address returns the test node's host:port: ANNALS_TEST_CASSANDRA when
// set, DefaultAddress otherwise.
func Address() string {
	if v := os.Getenv("ANNALS_TEST_CASSANDRA"); v != "" {
		return v
	}
	return DefaultAddress
}

// Required reports whether ANNALS_TEST_REQUIRE lists cassandra.
func Required() bool {
	return slices.Contains(strings.FieldsFunc(os.Getenv("ANNALS_TEST_REQUIRE"), func(r rune) bool { return r == ',' || r == ' ' }), "cassandra")
}

// Server returns the test node's address after checking that it accepts
// connections. When it does not, t is skipped, or failed when Required.
func Server(t testing.TB) string {
	t.Helper()
	addr := Address()
	conn, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		if Required() {
			t.Fatalf("Cassandra at %s is required (ANNALS_TEST_REQUIRE) and does not answer: %v", addr, err)
		}
		t.Skipf("no Cassandra at %s (%v): run `scripts/services up cassandra`, or set ANNALS_TEST_CASSANDRA", addr, err)
	}
	conn.Close()
	return addr
}

// URL returns a store URL for a keyspace name unique to this run (created
// by the caller's Open WithMigrate), and registers the keyspace's removal
// at the end of the test.
func URL(t testing.TB) (rawURL, keyspace string) {
	t.Helper()
	addr := Server(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	keyspace = "annals_test_" + hex.EncodeToString(b[:])
	t.Cleanup(func() { drop(t, addr, keyspace) })
	return "cassandra://" + addr + "/" + keyspace, keyspace
}

// Open returns a store on a new keyspace of its own (see URL), closed and
// dropped when the test ends.
func Open(t testing.TB, opts ...cassandra.Option) *cassandra.Store {
	t.Helper()
	u, _ := URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := cassandra.Open(ctx, u, append([]cassandra.Option{cassandra.WithMigrate(true)}, opts...)...)
	if err != nil {
		t.Fatalf("open %s: %v", u, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// drop removes a keyspace.
func drop(t testing.TB, addr, keyspace string) {
	t.Helper()
	cluster := gocql.NewCluster(addr)
	cluster.Timeout = time.Minute
	cluster.DisableInitialHostLookup = true
	session, err := cluster.CreateSession()
	if err != nil {
		t.Errorf("drop the test's keyspace %s: %v", keyspace, err)
		return
	}
	defer session.Close()
	if err := session.Query(`DROP KEYSPACE IF EXISTS ` + keyspace).Exec(); err != nil {
		t.Errorf("drop the test's keyspace %s: %v", keyspace, err)
	}
}
