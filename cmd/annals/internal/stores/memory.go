package stores

import (
	"context"
	"fmt"
	"strings"

	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/store/memory"
)

// Memory is the scheme of "memory:": a new, empty store/memory store each
// time, gone when the process ends. It has no schema and no operator
// capabilities; it serves bench, check and copy (as a target, to verify a
// source reads back whole).
func Memory() Scheme {
	return Scheme{
		Open: func(_ context.Context, url string, _ Mode) (*Store, error) {
			if err := memoryURL(url); err != nil {
				return nil, err
			}
			s := memory.New()
			return &Store{Kind: "memory", Where: "memory (nothing survives the process)", MaxPayloadSize: memory.DefaultMaxPayloadSize,
				Journal: s.Journal(), Snapshots: s.Snapshots(), Queries: s.Queries(), Offsets: s.Projections(), Durable: s.DurableState(), Membership: s.Membership(), GlobalOrdering: true,
				Close: s.Close}, nil
		},
		Migrator: func(_ context.Context, url string) (admin.Migrator, error) {
			if err := memoryURL(url); err != nil {
				return nil, err
			}
			return noSchema{}, nil
		},
		Scratch: func(_ context.Context, url string) (string, func() error, error) {
			if err := memoryURL(url); err != nil {
				return "", nil, err
			}
			return "memory:", func() error { return nil }, nil
		},
	}
}

// memoryURL refuses anything after "memory:": the store has no place or
// parameters, so text there is a mistake (a path meant for sqlite:).
func memoryURL(url string) error {
	if _, rest, _ := strings.Cut(url, ":"); rest != "" {
		return BadURL(fmt.Errorf("memory URL %q: want memory: alone (the memory store has no path or parameters; sqlite:PATH is a file)", url))
	}
	return nil
}

// noSchema is the migrator of a store without a schema.
type noSchema struct{}

func (noSchema) SchemaVersion(context.Context) (int, int, error) { return 0, 0, nil }
func (noSchema) PendingMigrations(context.Context) ([]admin.Migration, error) {
	return nil, nil
}
func (noSchema) Migrate(context.Context) ([]admin.Migration, error) { return nil, nil }
