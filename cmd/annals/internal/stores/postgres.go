package stores

import (
	"context"
	"errors"

	"github.com/annals-go/annals/admin"
)

// ErrPostgresUnavailable is what postgres:// URLs give until the
// PostgreSQL store is wired in below.
var ErrPostgresUnavailable = errors.New("postgres store not available in this build yet")

// Postgres is the scheme of "postgres://" and "postgresql://" URLs.
//
// THIS IS WHERE store/postgres PLUGS IN. Replace the body with the store's
// Scheme:
//   - Open(ctx, url, mode): open the store; in mode Existing fail, with a
//     message naming "annals init" or "annals migrate", when the database
//     has no schema or an old one, and change nothing; in mode Create,
//     create and migrate the schema. Fill Store with the journal, the
//     snapshot store, the read journal (Queries), the offset store
//     (Offsets), and as Admin a value implementing the admin interfaces
//     the store can offer (StatsReader, ProjectionLister, BacklogReader,
//     Purger, BaselineOpener).
//   - Migrator(ctx, url): an admin.Migrator that changes nothing until
//     Migrate.
//   - Scratch(ctx, url): a place for annals bench beside the given
//     database (for example a new schema in it) and its removal.
func Postgres() Scheme {
	return Scheme{
		Open: func(context.Context, string, Mode) (*Store, error) { return nil, ErrPostgresUnavailable },
		Migrator: func(context.Context, string) (admin.Migrator, error) {
			return nil, ErrPostgresUnavailable
		},
		Scratch: func(context.Context, string) (string, func() error, error) {
			return "", nil, ErrPostgresUnavailable
		},
	}
}
