package entity_test

// Recovery of many small entities, one after another, on SQLite and
// PostgreSQL:
//
//	go test -run '^$' -bench RecoverOneAfterAnother -benchtime 3x ./entity/

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/recovery"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
	"github.com/annals-go/annals/store/sqlite"
)

// threeCalls hides the journal's recovery reader: a host before it
// recovers with three calls (highest number, snapshot, replay), as it did
// before stores read recoveries in one round trip.
type threeCalls struct{ journal.Journal }

// recoveryBenchStore is a store for the recovery benchmark: its journal
// behind a front, its snapshots, and a raw-driver baseline on its database.
type recoveryBenchStore struct {
	journal  journal.Journal // the store's, behind front
	front    *engine.Front
	snaps    snapshot.Store
	baseline admin.Baseline
	closers  []func() error // the baseline, the front, the store
}

// close closes what the store opened, once.
func (st *recoveryBenchStore) close() {
	for _, c := range st.closers {
		_ = c()
	}
	st.closers = nil
}

// openRecoveryBenchStore opens a new store of kind in a place of the
// benchmark's own (recoveryBenchLocation); it is closed at the
// benchmark's end.
func openRecoveryBenchStore(b *testing.B, kind string) *recoveryBenchStore {
	return openRecoveryBenchStoreAt(b, kind, recoveryBenchLocation(b, kind))
}

// recoveryBenchLocation returns where a new store of kind for the
// benchmark is kept: a file in a directory of the test's for SQLite, a
// schema of the test's own (dropped at its end) for PostgreSQL.
func recoveryBenchLocation(tb testing.TB, kind string) string {
	if kind == "postgres" {
		dsn, _ := pgtest.Schema(tb)
		return dsn
	}
	return filepath.Join(tb.TempDir(), "recovery.db")
}

// openRecoveryBenchStoreAt opens the store of kind at where (a file for
// SQLite, a DSN for PostgreSQL), creating its tables when missing; it is
// closed at the test's end.
func openRecoveryBenchStoreAt(tb testing.TB, kind, where string) *recoveryBenchStore {
	tb.Helper()
	ctx := context.Background()
	st := &recoveryBenchStore{}
	tb.Cleanup(st.close)
	var opener admin.BaselineOpener
	switch kind {
	case "sqlite":
		s, err := sqlite.Open(ctx, where)
		if err != nil {
			tb.Fatal(err)
		}
		st.closers = append(st.closers, s.Close)
		st.journal, st.snaps, opener = s.Journal(), s.Snapshots(), s
	case "postgres":
		s, err := postgres.Open(ctx, where, postgres.WithMigrate(true))
		if err != nil {
			tb.Fatal(err)
		}
		st.closers = append(st.closers, s.Close)
		st.journal, st.snaps, opener = s.Journal(), s.Snapshots(), s
	default:
		tb.Fatalf("no store of kind %q", kind)
	}
	// Each closer goes first, so that they close in the order opposite to
	// their opening.
	f, err := engine.NewFront(st.journal, engine.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	st.front = f
	st.closers = append([]func() error{f.Close}, st.closers...)
	bl, err := opener.OpenBaseline(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	st.baseline = bl
	st.closers = append([]func() error{bl.Close}, st.closers...)
	return st
}

// BenchmarkRecoverOneAfterAnother recovers 1,000 entities of 10 events one
// after another (each a GetBalance Ask to an entity that is not live, on a
// host with the store's snapshots configured, as an application runs it):
//
//   - one-read: the host as it runs, reading each recovery in one round
//     trip (recovery.Reader through the front);
//   - three-calls: the same host before a journal that hides the reader:
//     highest number, snapshot load and replay, one after another;
//   - raw: one select of each entity's events with the raw driver
//     (admin.Baseline.ReplayRaw), reading every column a replay returns.
//
// The three take turns in each iteration. It reports entities/s of each,
// one-read/raw and one-read/three-calls.
func BenchmarkRecoverOneAfterAnother(b *testing.B) {
	const entities, events = 1000, 10
	for _, kind := range []string{"sqlite", "postgres"} {
		b.Run(kind, func(b *testing.B) {
			st, reg := seededRecoveryBenchStore(b, kind, entities, events)
			ctx := context.Background()
			recoverAll := func(j journal.Journal) func() error {
				return func() error {
					h, err := entity.NewHost(accountBehavior(), entity.HostConfig{Journal: j, Snapshots: st.snaps, Registry: reg, Logger: slog.New(slog.DiscardHandler)})
					if err != nil {
						return err
					}
					defer func() { _ = h.Shutdown(ctx) }()
					for e := range entities {
						if got, err := balance(ctx, h, fmt.Sprint("rec-", e)); err != nil || got != events {
							return fmt.Errorf("entity %d recovered to %d, %v; want %d", e, got, err, events)
						}
					}
					return nil
				}
			}
			sides := []struct {
				name string
				run  func() error
			}{
				{"one-read", recoverAll(st.front)},
				{"three-calls", recoverAll(threeCalls{st.front})},
				{"raw", func() error {
					for e := range entities {
						if n, err := st.baseline.ReplayRaw(ctx, fmt.Sprint("Account|rec-", e), math.MaxInt64); err != nil || n != events {
							return fmt.Errorf("raw read of entity %d: %d events, %v", e, n, err)
						}
					}
					return nil
				}},
			}
			for _, s := range sides { // a first round outside the timing
				if err := s.run(); err != nil {
					b.Fatal(err)
				}
			}
			took := make([]time.Duration, len(sides))
			i := 0
			for b.Loop() {
				for k := range sides {
					side := (k + i) % len(sides)
					start := time.Now()
					if err := sides[side].run(); err != nil {
						b.Fatal(err)
					}
					took[side] += time.Since(start)
				}
				i++
			}
			rate := func(d time.Duration) float64 { return float64(i*entities) / d.Seconds() }
			b.ReportMetric(rate(took[0]), "entities/s")
			b.ReportMetric(rate(took[1]), "three-calls-entities/s")
			b.ReportMetric(rate(took[2]), "raw-entities/s")
			b.ReportMetric(rate(took[0])/rate(took[2]), "annals/raw")
			b.ReportMetric(rate(took[0])/rate(took[1]), "one-read/three-calls")
		})
	}
}

// BenchmarkRecoveryLayers recovers the same 1,000 entities of 10 events
// one after another through each layer a recovery passes, so that the
// cost of each shows as the difference from the one below it:
//
//   - raw: one select of each entity's events with the raw driver
//     (admin.Baseline.ReplayRaw), no decoding;
//   - store: the store's recovery.Reader (highest number, snapshot and
//     events in one round trip), no decoding;
//   - front: the same through the journal front (its circuit breaker,
//     call timeout and read limit);
//   - host: a GetBalance Ask to an entity of a new host: the instance and
//     its mailbox, the read through the front on the caller's goroutine,
//     each event decoded and applied, the handler and the reply.
//
// The layers take turns in each iteration. It reports each layer's wall
// time and this process's CPU time (getrusage: the client's, not the
// database server's) per recovery, in microseconds:
//
//	go test -run '^$' -bench RecoveryLayers -benchtime 10x ./entity/
func BenchmarkRecoveryLayers(b *testing.B) {
	const entities, events = 1000, 10
	for _, kind := range []string{"sqlite", "postgres"} {
		b.Run(kind, func(b *testing.B) {
			st, reg := seededRecoveryBenchStore(b, kind, entities, events)
			layers := recoveryLayers(b, st, reg, events)
			for _, l := range layers { // a first round outside the timing
				if _, _, err := l.round(entities); err != nil {
					b.Fatal(err)
				}
			}
			wall := make([]time.Duration, len(layers))
			cpu := make([]time.Duration, len(layers))
			i := 0
			for b.Loop() {
				for k := range layers {
					layer := (k + i) % len(layers)
					w, c, err := layers[layer].round(entities)
					if err != nil {
						b.Fatal(err)
					}
					wall[layer] += w
					cpu[layer] += c
				}
				i++
			}
			per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(i*entities) }
			for k, l := range layers {
				b.ReportMetric(per(wall[k]), l.name+"-µs/rec")
				b.ReportMetric(per(cpu[k]), l.name+"-cpu-µs/rec")
			}
		})
	}
}

// recoveryLayer is one layer a recovery passes (see
// BenchmarkRecoveryLayers): round recovers entities 0 to n-1 through it,
// each on a host of its own, and returns the wall and client CPU time the
// recoveries took.
type recoveryLayer struct {
	name  string
	round func(n int) (wall, cpu time.Duration, err error)
}

// recoveryLayers returns the layers of a recovery over st, whose entities
// have events events each, from the raw select to the host's Ask.
func recoveryLayers(tb testing.TB, st *recoveryBenchStore, reg *serialization.Registry, events int) []recoveryLayer {
	tb.Helper()
	ctx := context.Background()
	reader, ok := st.journal.(recovery.Reader)
	if !ok {
		tb.Fatalf("the journal %T reads no recovery", st.journal)
	}
	crit := snapshot.Latest()
	read := func(r recovery.Reader) func(e int) error {
		return func(e int) error {
			res, err := r.ReadRecovery(ctx, recovery.Request{PersistenceID: fmt.Sprint("Account|rec-", e), Snapshot: &crit})
			if err == nil && len(res.Events) != events {
				err = fmt.Errorf("entity %d: %d events read, want %d", e, len(res.Events), events)
			}
			return err
		}
	}
	var h *entity.Host[Command, Event, State]
	layers := []struct {
		name string
		one  func(e int) error
	}{
		{"raw", func(e int) error {
			n, err := st.baseline.ReplayRaw(ctx, fmt.Sprint("Account|rec-", e), math.MaxInt64)
			if err == nil && n != int64(events) {
				err = fmt.Errorf("raw read of entity %d: %d events", e, n)
			}
			return err
		}},
		{"store", read(reader)},
		{"front", read(st.front)},
		{"host", func(e int) error {
			got, err := balance(ctx, h, fmt.Sprint("rec-", e))
			if err == nil && got != int64(events) {
				err = fmt.Errorf("entity %d recovered to %d, want %d", e, got, events)
			}
			return err
		}},
	}
	out := make([]recoveryLayer, len(layers))
	for k, l := range layers {
		out[k] = recoveryLayer{name: l.name, round: func(n int) (wall, cpu time.Duration, err error) {
			h, err = entity.NewHost(accountBehavior(), entity.HostConfig{Journal: st.front, Snapshots: st.snaps, Registry: reg, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				return 0, 0, err
			}
			defer func() { _ = h.Shutdown(ctx) }()
			start, cpu0 := time.Now(), processCPU()
			for e := range n {
				if err := l.one(e); err != nil {
					return 0, 0, err
				}
			}
			return time.Since(start), processCPU() - cpu0, nil
		}}
	}
	return out
}

// seededRecoveryBenchStore opens a store of kind and writes entities
// accounts of events deposits each; it returns the store and the registry
// of the accounts' events.
func seededRecoveryBenchStore(b *testing.B, kind string, entities, events int) (*recoveryBenchStore, *serialization.Registry) {
	b.Helper()
	st := openRecoveryBenchStore(b, kind)
	reg := registry(b)
	seedRecoveries(b, st.front, reg, entities, events)
	return st, reg
}

// seedRecoveries writes entities accounts (Account|rec-0, …) of events
// deposits each through j.
func seedRecoveries(tb testing.TB, j journal.Journal, reg *serialization.Registry, entities, events int) {
	tb.Helper()
	payload, ser, manifest, err := reg.Serialize(Deposited{Amount: 1})
	if err != nil {
		tb.Fatal(err)
	}
	var writes []journal.AtomicWrite
	for e := range entities {
		w := journal.AtomicWrite{PersistenceID: fmt.Sprint("Account|rec-", e)}
		for s := range events {
			w.Events = append(w.Events, journal.Repr{PersistenceID: w.PersistenceID, SequenceNr: int64(s + 1), Payload: payload, SerializerID: ser, Manifest: manifest})
		}
		writes = append(writes, w)
	}
	if res, err := j.Write(context.Background(), writes); err != nil || res != nil {
		tb.Fatal(res, err)
	}
}

// processCPU returns this process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
