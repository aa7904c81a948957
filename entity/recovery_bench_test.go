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
	"testing"
	"time"

	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/journal"
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
	front    *engine.Front
	snaps    snapshot.Store
	baseline admin.Baseline
}

func openRecoveryBenchStore(b *testing.B, kind string) recoveryBenchStore {
	ctx := context.Background()
	var j journal.Journal
	var snaps snapshot.Store
	var opener admin.BaselineOpener
	switch kind {
	case "sqlite":
		s, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "recovery.db"))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		j, snaps, opener = s.Journal(), s.Snapshots(), s
	case "postgres":
		dsn, _ := pgtest.Schema(b)
		s, err := postgres.Open(ctx, dsn, postgres.WithMigrate(true))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		j, snaps, opener = s.Journal(), s.Snapshots(), s
	}
	f, err := engine.NewFront(j, engine.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = f.Close() })
	bl, err := opener.OpenBaseline(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = bl.Close() })
	return recoveryBenchStore{front: f, snaps: snaps, baseline: bl}
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
			st := openRecoveryBenchStore(b, kind)
			ctx := context.Background()
			reg := registry(b)
			payload, ser, manifest, err := reg.Serialize(Deposited{Amount: 1})
			if err != nil {
				b.Fatal(err)
			}
			var writes []journal.AtomicWrite
			for e := range entities {
				w := journal.AtomicWrite{PersistenceID: fmt.Sprint("Account|rec-", e)}
				for s := range events {
					w.Events = append(w.Events, journal.Repr{PersistenceID: w.PersistenceID, SequenceNr: int64(s + 1), Payload: payload, SerializerID: ser, Manifest: manifest})
				}
				writes = append(writes, w)
			}
			if res, err := st.front.Write(ctx, writes); err != nil || res != nil {
				b.Fatal(res, err)
			}
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
