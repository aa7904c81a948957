package stores

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"

	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/store/postgres"
)

// Postgres is the scheme of "postgres://" and "postgresql://" URLs: a schema
// of a PostgreSQL database, store/postgres (the URL's parameters are
// postgres.Open's), opened by stacks.Open. The Admin of its stores is the *postgres.Store, which
// implements every capability of package admin.
func Postgres() Scheme {
	return Scheme{Open: openStack, Migrator: postgresMigrator, Scratch: postgresScratch}
}

func postgresMigrator(ctx context.Context, u string) (admin.Migrator, error) {
	m, err := postgres.NewMigrator(ctx, u)
	if err != nil {
		return nil, badURLIf(err, postgres.ErrInvalidConfig)
	}
	return m, nil
}

// postgresScratch makes the scratch store a new schema of the same
// database, dropped by the returned function.
func postgresScratch(ctx context.Context, u string) (string, func() error, error) {
	parsed, err := url.Parse(u)
	if err != nil {
		return "", nil, BadURL(fmt.Errorf("postgres URL: %w", err))
	}
	q := parsed.Query()
	// The schema is replaced: a malformed one would go unnoticed.
	if v, ok := q["schema"]; ok && !postgres.ValidIdentifier(v[len(v)-1]) {
		return "", nil, BadURL(fmt.Errorf("%w: schema %q is not a plain identifier (letters, digits, underscores; not starting with a digit; at most 63)", postgres.ErrInvalidConfig, v[len(v)-1]))
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	q.Set("schema", "annals_scratch_"+hex.EncodeToString(b[:]))
	parsed.RawQuery = q.Encode()
	scratch := parsed.String()
	remove := func() error {
		m, err := postgres.NewMigrator(context.WithoutCancel(ctx), scratch)
		if err != nil {
			return err
		}
		defer m.Close()
		return m.Drop(context.WithoutCancel(ctx))
	}
	return scratch, remove, nil
}
