package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/annals-go/annals/recovery"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/postgres"
)

// roundTrips counts the statements and batches sent for one of a set of
// persistence ids: each is a round trip to the server.
type roundTrips struct {
	pids  map[string]bool
	trips atomic.Int64
}

func (r *roundTrips) ours(args []any) bool {
	if len(args) == 0 {
		return false
	}
	pid, ok := args[0].(string)
	return ok && r.pids[pid]
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if r.ours(d.Args) {
		r.trips.Add(1)
	}
	return ctx
}

func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	for _, q := range d.Batch.QueuedQueries {
		if r.ours(q.Arguments) {
			r.trips.Add(1)
			break
		}
	}
	return ctx
}

func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// openCounted opens a store whose round trips for the ids rt.pids holds
// rt counts.
func openCounted(t *testing.T) (*postgres.Journal, *postgres.Snapshots, *roundTrips) {
	t.Helper()
	rt := &roundTrips{pids: map[string]bool{}}
	s := open(t, postgres.WithPoolConfig(func(pc *pgxpool.Config) { pc.ConnConfig.Tracer = rt }))
	return s.Journal(), s.Snapshots(), rt
}

// TestReadRecoveriesRoundTripsDoNotGrowWithTheBatch: ReadRecoveries
// reads a group of recoveries in one round trip, and what recoveryOpenSQL
// left unknown of several of them in one more, not one each: a group of
// ids whose reads leave nothing unknown (among them snapshots followed by
// DeleteTo of their number) takes one round trip; the same with ids whose
// snapshot is above their events (read again with recoverySQL) and ids
// whose events reach MaxEvents (the highest number read after them)
// takes two.
func TestReadRecoveriesRoundTripsDoNotGrowWithTheBatch(t *testing.T) {
	t.Parallel()
	j, snaps, rt := openCounted(t)
	ctx := context.Background()
	latest := snapshot.Latest()
	save := func(pid string, seq int64) {
		t.Helper()
		if err := snaps.Save(ctx, snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: pid, SequenceNr: seq}, Payload: []byte("state"), SerializerID: 1}); err != nil {
			t.Fatal(err)
		}
	}
	type kind struct {
		name      string
		setup     func(pid string)
		maxEvents int
		events    int
	}
	settled := []kind{
		{"deleted to the snapshot", func(pid string) {
			save(pid, 3)
			if err := j.DeleteTo(ctx, pid, 3); err != nil {
				t.Fatal(err)
			}
		}, 0, 2},
		{"snapshot", func(pid string) { save(pid, 2) }, 0, 3},
		{"events only", func(string) {}, 0, 5},
	}
	unsettled := []kind{
		{"snapshot above the events", func(pid string) { save(pid, 9) }, 0, 0},
		{"events reach MaxEvents", func(string) {}, 3, 3},
	}
	for _, c := range []struct {
		kinds []kind
		trips int64
	}{
		{settled, 1},
		{append(slices.Clone(settled), unsettled...), 2},
	} {
		var reqs []recovery.Request
		var want []kind
		for i := range 4 {
			for _, k := range c.kinds {
				pid := fmt.Sprintf("Recovery|trips-%d-%d-%s", len(c.kinds), i, k.name)
				writeSeqs(t, j, pid, 1, 2, 3, 4, 5)
				k.setup(pid)
				rt.pids[pid] = true
				reqs = append(reqs, recovery.Request{PersistenceID: pid, Snapshot: &latest, MaxEvents: k.maxEvents})
				want = append(want, k)
			}
		}
		rt.trips.Store(0)
		res, err := j.ReadRecoveries(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			if r.Highest != 5 || len(r.Events) != want[i].events {
				t.Errorf("%s: highest %d, %d events; want 5, %d", want[i].name, r.Highest, len(r.Events), want[i].events)
			}
		}
		if n := rt.trips.Load(); n != c.trips {
			t.Errorf("ReadRecoveries of %d recoveries of %d kinds took %d round trips, want %d", len(reqs), len(c.kinds), n, c.trips)
		}
	}
}

// TestRecoveryRoundTrips: a recovery to the end of an id reads in one
// round trip the histories a service meets (no snapshot; a snapshot with
// or without events after it; a snapshot whose events were deleted up to
// it or beyond, with events written after), and in two when its events
// reach MaxEvents (the highest number read after them).
func TestRecoveryRoundTrips(t *testing.T) {
	t.Parallel()
	j, snaps, rt := openCounted(t)
	ctx := context.Background()
	latest := snapshot.Latest()
	for _, c := range []struct {
		name              string
		snapshot, deleted int64 // 0: none
		maxEvents         int
		trips             int64
		events            int
	}{
		{"events only", 0, 0, 0, 1, 8},
		{"snapshot, events after", 3, 0, 0, 1, 5},
		{"snapshot at the end", 8, 0, 0, 1, 0},
		{"snapshot, deleted to it", 3, 3, 0, 1, 5},
		{"snapshot, deleted beyond it", 3, 5, 0, 1, 3},
		{"deleted, no snapshot", 0, 4, 0, 1, 4},
		{"events reach MaxEvents", 3, 0, 5, 2, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			pid := "Recovery|trips-" + c.name
			writeSeqs(t, j, pid, 1, 2, 3, 4, 5, 6, 7, 8)
			if c.snapshot > 0 {
				if err := snaps.Save(ctx, snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: pid, SequenceNr: c.snapshot}, Payload: []byte("state"), SerializerID: 1}); err != nil {
					t.Fatal(err)
				}
			}
			if c.deleted > 0 {
				if err := j.DeleteTo(ctx, pid, c.deleted); err != nil {
					t.Fatal(err)
				}
			}
			rt.pids[pid] = true // no other subtest runs meanwhile
			defer delete(rt.pids, pid)
			rt.trips.Store(0)
			res, err := j.ReadRecovery(ctx, recovery.Request{PersistenceID: pid, Snapshot: &latest, MaxEvents: c.maxEvents})
			if err != nil {
				t.Fatal(err)
			}
			if res.Highest != 8 || len(res.Events) != c.events || res.HasSnapshot != (c.snapshot > 0) || (res.HasSnapshot && string(res.Snapshot.Payload) != "state") {
				t.Fatalf("read highest %d, %d events, snapshot %v %q; want 8, %d, %v", res.Highest, len(res.Events), res.HasSnapshot, res.Snapshot.Payload, c.events, c.snapshot > 0)
			}
			if n := rt.trips.Load(); n != c.trips {
				t.Errorf("%d round trips, want %d", n, c.trips)
			}
		})
	}
}
