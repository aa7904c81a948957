package postgres_test

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
	"github.com/annals-go/annals/storetest"
)

// r2dbcOpts open a store on the r2dbc layout, with the backtracking query
// 1s behind the clock (as the timestamp ordering's kit runs).
var r2dbcOpts = []postgres.Option{postgres.WithLayout(postgres.LayoutR2DBC), postgres.WithBacktracking(postgres.DefaultBacktrackWindow, 1e9)}

// kitConfigs are the stores the compliance kit runs on: every suite on
// Annals' layout in both live-query orderings and on the r2dbc layout,
// also in pgx's exec and simple-protocol modes, and the recovery suite
// through a journal front before the store on
// both layouts (which waits for the id's writes, then reads through the
// store's reader).
var kitConfigs = []struct {
	name  string
	opts  []postgres.Option
	front bool
}{
	{"commit", []postgres.Option{postgres.WithOrdering(postgres.CommitOrder)}, false},
	{"timestamp", []postgres.Option{postgres.WithOrdering(postgres.TimestampOrder), postgres.WithBacktracking(postgres.DefaultBacktrackWindow, 1e9)}, false},
	{"r2dbc", r2dbcOpts, false},
	{"annals-front", nil, true},
	{"r2dbc-front", r2dbcOpts, true},
	// pgx's exec mode (PgBouncer's transaction pooling): pgx encodes each
	// parameter from its Go type, without the statement's description.
	{"commit-exec", []postgres.Option{postgres.WithOrdering(postgres.CommitOrder), execMode}, false},
	{"timestamp-exec", []postgres.Option{postgres.WithOrdering(postgres.TimestampOrder), postgres.WithBacktracking(postgres.DefaultBacktrackWindow, 1e9), execMode}, false},
	// The simple protocol: pgx writes the parameters into the SQL text.
	{"r2dbc-simple", append(slices.Clone(r2dbcOpts), simpleMode), false},
}

// execMode and simpleMode set pgx's default query mode.
var (
	execMode   = postgres.WithPoolConfig(func(pc *pgxpool.Config) { pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec })
	simpleMode = postgres.WithPoolConfig(func(pc *pgxpool.Config) { pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol })
)

// kitStore opens a store with opts and the kit's payload limit in a
// schema of the test's own, and returns it as the kit checks it
// (pgtest.Kit), with Open opening the schema again: a pool of its own, as
// another process's.
func kitStore(t *testing.T, opts ...postgres.Option) (*postgres.Store, storetest.Store) {
	t.Helper()
	dsn, _ := pgtest.Schema(t)
	opts = append([]postgres.Option{postgres.WithMaxPayloadSize(storetest.KitMaxPayloadSize)}, opts...)
	s, err := postgres.Open(context.Background(), dsn, append(opts, postgres.WithMigrate(true))...)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	k := pgtest.Kit(s)
	k.MaxPayloadSize = storetest.KitMaxPayloadSize
	k.Open = func(ctx context.Context) (storetest.Store, error) {
		o, err := postgres.Open(ctx, dsn, opts...)
		if err != nil {
			return storetest.Store{}, err
		}
		return pgtest.Kit(o), nil
	}
	return s, k
}

// TestKit runs the compliance kit on each configuration, every rule of a
// configuration on one schema.
func TestKit(t *testing.T) {
	t.Parallel()
	for _, c := range kitConfigs {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, k := kitStore(t, c.opts...)
			if c.front {
				f, err := engine.NewFront(s.Journal(), engine.Config{})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = f.Close() })
				k.Journal, k.Recovery = f, f
				k.Queries, k.Offsets, k.Durable, k.Membership = nil, nil, nil, nil
				if k.Exceptions == nil {
					k.Exceptions = map[string]string{}
				}
				k.Exceptions["journal"] = "run on the store, and by engine's tests through a front"
				k.Exceptions["snapshots"] = "run on the store"
			}
			storetest.Run(t, k)
			// A second pool on the schema, as another process's.
			o, err := k.Open(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = o.Close() })
			t.Run("across", func(t *testing.T) { storetest.RunJournalAcross(t, k.Journal, o.Journal) })
		})
	}
}

// TestReadsOnlyItsOwnSnapshots: the journal does not claim the snapshot
// store of another schema's store.
func TestReadsOnlyItsOwnSnapshots(t *testing.T) {
	t.Parallel()
	if open(t).Journal().ReadsSnapshotsOf(open(t).Snapshots()) {
		t.Error("ReadsSnapshotsOf(another schema's snapshot store) = true, want false")
	}
}
