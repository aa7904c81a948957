package stores

import (
	"context"

	"github.com/annals-go/annals/store/postgres"
)

// openPostgres opens "postgres://" and "postgresql://" URLs: a schema of
// a PostgreSQL database, store/postgres (the URL's parameters are
// postgres.Open's). Its Store is the *postgres.Store, which implements
// every capability of package admin, and its read model is the schema's
// database (pgx.Tx). Without WithMigrate, postgres.Open itself refuses,
// changing nothing, a schema that is missing or needs migrating, naming
// the command that fixes it.
func openPostgres(ctx context.Context, u string, cfg config) (*Stack, error) {
	s, err := postgres.Open(ctx, u, postgres.WithMigrate(cfg.migrate))
	if err != nil {
		return nil, badURLIf(err, postgres.ErrInvalidConfig)
	}
	return &Stack{
		Kind: "postgres", Where: s.Where(),
		Journal: s.Journal(), Snapshots: s.Snapshots(), Queries: s.Queries(), Offsets: s.Projections(), ReadModelKind: "postgres",
		Durable: s.DurableState(), Membership: s.Membership(), ReadModelMembership: s.Membership(), Store: s,
		closers: []func() error{s.Close},
	}, nil
}

// checkPostgres refuses, creating nothing, a postgres:// URL whose form or
// parameters postgres.Open would refuse (it connects to the server, which
// must answer).
func checkPostgres(ctx context.Context, u string) error {
	m, err := postgres.NewMigrator(ctx, u)
	if err != nil {
		return badURLIf(err, postgres.ErrInvalidConfig)
	}
	return m.Close()
}
