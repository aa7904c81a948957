package stores

import (
	"context"

	"github.com/annals-go/annals/admin"
)

// Memory is the scheme of "memory:": a new, empty store/memory store each
// time, gone when the process ends. It has no schema and no operator
// capabilities; it serves bench, check and copy (as a target, to verify a
// source reads back whole).
func Memory() Scheme {
	return Scheme{
		Open: openStack,
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

// memoryURL refuses anything after "memory:", as stacks.Open does.
func memoryURL(url string) error {
	st, err := openStack(context.Background(), url, Existing)
	if err != nil {
		return err
	}
	return st.Close()
}

// noSchema is the migrator of a store without a schema.
type noSchema struct{}

func (noSchema) SchemaVersion(context.Context) (int, int, error) { return 0, 0, nil }
func (noSchema) PendingMigrations(context.Context) ([]admin.Migration, error) {
	return nil, nil
}
func (noSchema) Migrate(context.Context) ([]admin.Migration, error) { return nil, nil }
