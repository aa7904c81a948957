package stores

import (
	"context"

	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/store/memory"
)

// Memory is the scheme of "memory:": a new, empty store/memory store each
// time, gone when the process ends. It has no schema and no operator
// capabilities; it serves bench, check and copy (as a target, to verify a
// source reads back whole).
func Memory() Scheme {
	return Scheme{
		Open: func(context.Context, string, Mode) (*Store, error) {
			s := memory.New()
			return &Store{Kind: "memory", Where: "memory (nothing survives the process)", MaxPayloadSize: memory.DefaultMaxPayloadSize,
				Journal: s.Journal(), Snapshots: s.Snapshots(), Queries: s.Queries(), Offsets: s.Projections(), Durable: s.DurableState(), Membership: s.Membership(), GlobalOrdering: true,
				Close: s.Close}, nil
		},
		Migrator: func(context.Context, string) (admin.Migrator, error) { return noSchema{}, nil },
		Scratch: func(context.Context, string) (string, func() error, error) {
			return "memory:", func() error { return nil }, nil
		},
	}
}

// noSchema is the migrator of a store without a schema.
type noSchema struct{}

func (noSchema) SchemaVersion(context.Context) (int, int, error) { return 0, 0, nil }
func (noSchema) PendingMigrations(context.Context) ([]admin.Migration, error) {
	return nil, nil
}
func (noSchema) Migrate(context.Context) ([]admin.Migration, error) { return nil, nil }
