package postgres_test

import (
	"context"
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

// open opens a store in a schema of the test's own, migrated, closed and
// dropped when the test ends.
func open(t testing.TB, opts ...postgres.Option) *postgres.Store {
	t.Helper()
	dsn, _ := pgtest.Schema(t)
	s, err := postgres.Open(context.Background(), dsn, append([]postgres.Option{postgres.WithMigrate(true)}, opts...)...)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestCallersAfterConnectRuns: the store's own connection setup (the
// write parameters' types, which pgx's exec mode needs) does not replace
// the AfterConnect hook a caller sets through WithPoolConfig: in exec mode, a write with tags and metadata is stored and
// read back whole, and the caller's hook ran.
func TestCallersAfterConnectRuns(t *testing.T) {
	t.Parallel()
	var ran atomic.Int64
	s := open(t, postgres.WithOrdering(postgres.TimestampOrder), postgres.WithPoolConfig(func(pc *pgxpool.Config) {
		pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
		pc.AfterConnect = func(context.Context, *pgx.Conn) error { ran.Add(1); return nil }
	}))
	ctx := t.Context()
	pid := "Exec|a"
	events := []journal.Repr{
		{PersistenceID: pid, SequenceNr: 1, Payload: []byte("one"), SerializerID: 4, Manifest: "m", WriterID: "w", Tags: []string{"t1", "t2"}, Metadata: []byte("meta")},
		{PersistenceID: pid, SequenceNr: 2, Payload: []byte{}, SerializerID: 4, Manifest: "m", WriterID: "w"},
	}
	for _, e := range events { // the second write has a floor: the first's stamp
		if res, err := s.Journal().Write(ctx, []journal.AtomicWrite{{PersistenceID: pid, Events: []journal.Repr{e}}}); err != nil || res != nil {
			t.Fatalf("write %d: %v %v", e.SequenceNr, res, err)
		}
	}
	var got []journal.Repr
	for e, err := range s.Journal().Replay(ctx, pid, 1, 2, 10) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, journal.Repr{PersistenceID: e.PersistenceID, SequenceNr: e.SequenceNr, Payload: e.Payload, SerializerID: e.SerializerID, Manifest: e.Manifest, WriterID: e.WriterID, Tags: e.Tags, Metadata: e.Metadata})
	}
	if !reflect.DeepEqual(got, events) {
		t.Errorf("replayed %+v, want %+v", got, events)
	}
	if ran.Load() == 0 {
		t.Error("the caller's AfterConnect never ran")
	}
}

// frontConfig returns the configuration of a journal front put before s
// with the zero engine.Config: the defaults it takes from s's journal.
func frontConfig(t *testing.T, s *postgres.Store) engine.Config {
	t.Helper()
	f, err := engine.NewFront(s.Journal(), engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return f.Config()
}

// TestFrontSplitsWritesByOrdering: a journal front before the store
// splits its writes across two calls in flight from 50 writes a call in
// TimestampOrder, whose calls do not queue for one another, and keeps its
// default (200) in CommitOrder, whose calls queue for the clock row.
func TestFrontSplitsWritesByOrdering(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		ordering postgres.Ordering
		want     int
	}{
		{"commit", postgres.CommitOrder, engine.DefaultSplitWrites},
		{"timestamp", postgres.TimestampOrder, 50},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := open(t, postgres.WithOrdering(c.ordering))
			var _ engine.WriteSplit = s.Journal()
			if got := frontConfig(t, s).SplitWrites; got != c.want {
				t.Errorf("the front's SplitWrites = %d, want %d", got, c.want)
			}
		})
	}
}

// TestFrontReadsFitThePool: a journal front before the store takes its
// read bound from the pool (its connections less the front's two write
// calls), so a burst of recoveries queues in the front, not in the pool.
func TestFrontReadsFitThePool(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ conns, want int }{{6, 4}, {3, 1}, {1, 1}} {
		t.Run(fmt.Sprint(c.conns), func(t *testing.T) {
			s := open(t, postgres.WithPoolConfig(func(pc *pgxpool.Config) { pc.MaxConns = int32(c.conns) }))
			var _ engine.ReadCapacity = s.Journal()
			if got := frontConfig(t, s).MaxReads; got != c.want {
				t.Errorf("pool of %d: the front's MaxReads = %d, want %d", c.conns, got, c.want)
			}
		})
	}
}
