package profile_test

// BenchmarkDurableUpserts: durable-state entities updating concurrently
// through a durable host, beside the raw driver doing the same upserts,
// in the same run, on the same machine and durability (SQLite: WAL,
// synchronous=FULL; PostgreSQL: fsync and synchronous_commit on, as
// scripts/services configures it):
//
//	go test -run '^$' -bench DurableUpserts -benchtime 20000x ./examples/profile/
//
// The PostgreSQL half skips when no server answers.

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/durable"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/examples/profile"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
	"github.com/annals-go/annals/store/sqlite"
)

// rawUpserter is the baseline's store: upsert writes one revision in a
// transaction of its own, as a hand-rolled durable-state table would be
// written; round writes one revision of every id in one transaction, the
// most the host's group commit could put in one call.
type rawUpserter struct {
	upsert func(ctx context.Context, pid string, revision int64, payload []byte) error
	round  func(ctx context.Context, pids []string, revision int64, payload []byte) error
}

// BenchmarkDurableUpserts: 1,000 durable-state entities (examples/profile)
// each updated by a goroutine of its own, one Update at a time (b.N in
// all): each update stores the entity's whole state at its next revision,
// with the revision check. ids=1 is the worst case for the host: one
// entity, whose updates follow one another, so no two share a commit. The baselines use the raw driver on a store of
// their own with the same table:
//
//   - raw: 1,000 goroutines, each upserting its id's next revision with
//     one conditional statement in a transaction of its own (what a service
//     without Annals would write);
//   - batched: one transaction per round, upserting one revision of every
//     id (the ceiling of group commit: each entity has one update in
//     flight at a time).
//
// The sides take turns, a fifth of the work each time, so that all see the
// same machine. annals/raw and annals/batched are ratios of rates.
func BenchmarkDurableUpserts(b *testing.B) {
	const turns = 5
	payload, _ := json.Marshal(profile.Profile{Name: "name-000000", Email: "name-000000@example.com", Updates: 1})
	stores := []struct {
		name string
		open func(b *testing.B) (durable.Store, rawUpserter)
	}{
		{"sqlite", sqliteStores},
		{"postgres", postgresStores},
	}
	for _, st := range stores {
		for _, ids := range []int{1, 1000} {
			b.Run(fmt.Sprintf("store=%s/ids=%d", st.name, ids), func(b *testing.B) {
				store, raw := st.open(b)
				reg := serialization.NewRegistry()
				if err := profile.Register(reg); err != nil {
					b.Fatal(err)
				}
				h, err := entity.NewDurableHost(profile.Behavior(), store, entity.HostConfig{Registry: reg})
				if err != nil {
					b.Fatal(err)
				}
				defer h.Shutdown(context.Background())
				pids, batched := make([]string, ids), make([]string, ids)
				for i := range pids {
					pids[i] = fmt.Sprintf("%s|bench-%06d", profile.EntityType, i)
					batched[i] = pids[i] + "-batched"
				}
				ctx := b.Context()
				perID := max(1, b.N/ids)
				var annalsTime, rawTime, batchTime time.Duration
				b.ResetTimer()
				for turn := range turns {
					from, to := int64(perID*turn/turns), int64(perID*(turn+1)/turns)
					start := time.Now()
					var wg sync.WaitGroup
					for _, pid := range pids {
						wg.Go(func() {
							for n := from + 1; n <= to; n++ {
								_, err := entity.Ask(ctx, h, pid, func(r entity.ReplyTo[profile.Profile]) profile.Command {
									return profile.Update{Name: fmt.Sprintf("name-%06d", n), Email: "x@example.com", Reply: r}
								})
								if err != nil {
									b.Error(err)
									return
								}
							}
						})
					}
					wg.Wait()
					annalsTime += time.Since(start)

					start = time.Now()
					for _, pid := range pids {
						wg.Go(func() {
							for rev := from + 1; rev <= to; rev++ {
								if err := raw.upsert(ctx, pid, rev, payload); err != nil {
									b.Error(err)
									return
								}
							}
						})
					}
					wg.Wait()
					rawTime += time.Since(start)

					start = time.Now()
					for rev := from + 1; rev <= to; rev++ {
						if err := raw.round(ctx, batched, rev, payload); err != nil {
							b.Fatal(err)
						}
					}
					batchTime += time.Since(start)
				}
				n := float64(perID * ids)
				b.ReportMetric(n/annalsTime.Seconds(), "states/s")
				b.ReportMetric(n/rawTime.Seconds(), "raw-states/s")
				b.ReportMetric(n/batchTime.Seconds(), "batched-states/s")
				b.ReportMetric(rawTime.Seconds()/annalsTime.Seconds(), "annals/raw")
				b.ReportMetric(batchTime.Seconds()/annalsTime.Seconds(), "annals/batched")
			})
		}
	}
}

// sqliteStores opens the store and, on a second file with the same
// schema, the baseline: mattn/go-sqlite3 through database/sql with the
// store's pragmas and its one writer connection.
func sqliteStores(b *testing.B) (durable.Store, rawUpserter) {
	dir := b.TempDir()
	s, err := sqlite.Open(b.Context(), filepath.Join(dir, "annals.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	rawPath := filepath.Join(dir, "raw.db")
	rs, err := sqlite.Open(b.Context(), rawPath)
	if err != nil {
		b.Fatal(err)
	}
	_ = rs.Close()
	db, err := sql.Open("sqlite3", "file:"+rawPath+"?_journal_mode=WAL&_synchronous=FULL&_busy_timeout=5000&_txlock=immediate")
	if err != nil {
		b.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	b.Cleanup(func() { _ = db.Close() })
	// The upsert changes the row only when the stored revision is the one
	// before (ON CONFLICT … WHERE); each change takes the next ordering.
	const upsert = `INSERT INTO durable_state (persistence_id, revision, payload, serializer_id, manifest, tag, timestamp, slice, entity_type, ordering)
		VALUES (?, ?, ?, 31, 'profile.Profile', 'profiles', ?, ?, ?, ?)
		ON CONFLICT (persistence_id) DO UPDATE SET revision = excluded.revision, payload = excluded.payload, timestamp = excluded.timestamp, ordering = excluded.ordering
		WHERE durable_state.revision = excluded.revision - 1`
	stmt, err := db.Prepare(upsert)
	if err != nil {
		b.Fatal(err)
	}
	var ordering atomic.Int64
	exec := func(ctx context.Context, st *sql.Stmt, pid string, revision int64, payload []byte) error {
		res, err := st.ExecContext(ctx, pid, revision, payload, time.Now().UnixNano(), annals.Slice(pid), annals.EntityType(pid), ordering.Add(1))
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return fmt.Errorf("raw upsert of %s revision %d: a conflict", pid, revision)
		}
		return nil
	}
	return s.DurableState(), rawUpserter{
		upsert: func(ctx context.Context, pid string, revision int64, payload []byte) error {
			return exec(ctx, stmt, pid, revision, payload)
		},
		round: func(ctx context.Context, pids []string, revision int64, payload []byte) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			st := tx.Stmt(stmt)
			for _, pid := range pids {
				if err := exec(ctx, st, pid, revision, payload); err != nil {
					return err
				}
			}
			return tx.Commit()
		},
	}
}

// postgresStores opens the store in a schema of its own and the baseline
// in another with the same tables: a pgx pool of the store's size.
func postgresStores(b *testing.B) (durable.Store, rawUpserter) {
	dsn, _ := pgtest.Schema(b)
	s, err := postgres.Open(b.Context(), dsn, postgres.WithMigrate(true))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	rawDSN, rawSchema := pgtest.Schema(b)
	rs, err := postgres.Open(b.Context(), rawDSN, postgres.WithMigrate(true))
	if err != nil {
		b.Fatal(err)
	}
	_ = rs.Close()
	cfg, err := pgxpool.ParseConfig(pgtest.DSN())
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = s.Pool().Config().MaxConns
	pool, err := pgxpool.NewWithConfig(b.Context(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	t := pgx.Identifier{rawSchema, "durable_state"}.Sanitize()
	insert := `INSERT INTO ` + t + ` (slice, entity_type, persistence_id, revision, db_timestamp, state_ser_id, state_ser_manifest, state_payload, tags)
		VALUES ($1, $2, $3, 1, now(), 31, 'profile.Profile', $4, '{profiles}')`
	update := `UPDATE ` + t + ` SET revision = $2, db_timestamp = now(), state_payload = $3 WHERE persistence_id = $1 AND revision = $2 - 1`
	insertAll := `INSERT INTO ` + t + ` (slice, entity_type, persistence_id, revision, db_timestamp, state_ser_id, state_ser_manifest, state_payload, tags)
		SELECT u.slice, u.entity_type, u.pid, 1, now(), 31, 'profile.Profile', $4, '{profiles}' FROM unnest($1::int[], $2::text[], $3::text[]) AS u(slice, entity_type, pid)`
	updateAll := `UPDATE ` + t + ` AS d SET revision = $2, db_timestamp = now(), state_payload = $3 FROM unnest($1::text[]) AS u(pid) WHERE d.persistence_id = u.pid AND d.revision = $2 - 1`
	return s.DurableState(), rawUpserter{
		upsert: func(ctx context.Context, pid string, revision int64, payload []byte) error {
			var tag pgconn.CommandTag
			var err error
			if revision == 1 {
				tag, err = pool.Exec(ctx, insert, annals.Slice(pid), annals.EntityType(pid), pid, payload)
			} else {
				tag, err = pool.Exec(ctx, update, pid, revision, payload)
			}
			if err == nil && tag.RowsAffected() != 1 {
				err = fmt.Errorf("raw upsert of %s revision %d: a conflict", pid, revision)
			}
			return err
		},
		round: func(ctx context.Context, pids []string, revision int64, payload []byte) error {
			var tag pgconn.CommandTag
			var err error
			if revision == 1 {
				slices, types := make([]int32, len(pids)), make([]string, len(pids))
				for i, pid := range pids {
					slices[i], types[i] = int32(annals.Slice(pid)), annals.EntityType(pid)
				}
				tag, err = pool.Exec(ctx, insertAll, slices, types, pids, payload)
			} else {
				tag, err = pool.Exec(ctx, updateAll, pids, revision, payload)
			}
			if err == nil && tag.RowsAffected() != int64(len(pids)) {
				err = fmt.Errorf("raw round of revision %d: %d of %d rows changed", revision, tag.RowsAffected(), len(pids))
			}
			return err
		},
	}
}
