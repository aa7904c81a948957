package stores

import (
	"context"

	"github.com/annals-go/annals/store/cassandra"
)

// openCassandra opens "cassandra://" URLs: a keyspace of a Cassandra
// cluster, store/cassandra (the URL's parameters are cassandra.Open's).
// Its Store is the *cassandra.Store, which reports statistics by reading
// the whole keyspace; it keeps no projection offsets (readmodel= names
// their database). Without WithMigrate, cassandra.Open refuses a keyspace
// without the store's tables, naming the command that creates them.
func openCassandra(ctx context.Context, u string, cfg config) (*Stack, error) {
	s, err := cassandra.Open(ctx, u, cassandra.WithMigrate(cfg.migrate))
	if err != nil {
		return nil, badURLIf(err, cassandra.ErrInvalidConfig)
	}
	return &Stack{
		Kind: "cassandra", Where: s.Where(),
		Journal: s.Journal(), Snapshots: s.Snapshots(), Queries: s.ReadJournal(),
		Durable: s.DurableState(), Membership: s.Membership(), Store: s,
		closers: []func() error{s.Close},
	}, nil
}
