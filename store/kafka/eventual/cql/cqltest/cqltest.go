// Package cqltest gives tests an eventual store on the test Cassandra node
// (see package cassandratest), in a keyspace of their own dropped when the
// test ends.
package cqltest

import (
	"context"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/annals-go/annals/store/cassandra/cassandratest"
	"github.com/annals-go/annals/store/kafka/eventual/cql"
)

// Open returns an eventual store in a new keyspace, the session it uses
// and the keyspace's name. Reads and writes use consistency ONE (one
// node).
func Open(t testing.TB, opts ...cql.Option) (*cql.Store, *gocql.Session, string) {
	t.Helper()
	u, keyspace := cassandratest.URL(t)
	cluster := gocql.NewCluster(strings.TrimSuffix(strings.TrimPrefix(u, "cassandra://"), "/"+keyspace))
	cluster.Timeout = time.Minute
	cluster.DisableInitialHostLookup = true
	cluster.Consistency = gocql.One
	session, err := cluster.CreateSession()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(session.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := cql.New(ctx, session, keyspace, true, "", append([]cql.Option{cql.WithConsistency(gocql.One, gocql.One)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s, session, keyspace
}
