package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
)

var (
	_ admin.StatsReader      = (*Store)(nil)
	_ admin.ProjectionLister = (*Store)(nil)
	_ admin.BacklogReader    = (*Store)(nil)
	_ admin.Purger           = (*Store)(nil)
	_ admin.BaselineOpener   = (*Store)(nil)
	_ admin.Migrator         = (*Migrator)(nil)
)

// Migrator is the admin.Migrator of a schema: it connects without
// requiring the schema to exist, and changes nothing until Migrate.
type Migrator struct{ s *Store }

// NewMigrator connects to the server of dsn (see Open for its parameters)
// for the schema's migrator. Close it when done.
func NewMigrator(ctx context.Context, dsn string, opts ...Option) (*Migrator, error) {
	s, err := connect(ctx, dsn, opts)
	if err != nil {
		return nil, err
	}
	return &Migrator{s: s}, nil
}

// Close closes the migrator's connections.
func (m *Migrator) Close() error { m.s.pool.Close(); return nil }

// layout returns the layout of the migrator's schema (asked for, or
// detected).
func (m *Migrator) layout(ctx context.Context) (layout, error) {
	l, err := m.s.layoutOf(ctx, m.s.pool)
	if err != nil {
		return nil, err
	}
	return newLayout(m.s, l), nil
}

// SchemaVersion implements admin.Migrator. The r2dbc layout has one
// version, 1: all its tables exist.
func (m *Migrator) SchemaVersion(ctx context.Context) (current, latest int, err error) {
	l, err := m.layout(ctx)
	if err != nil {
		return 0, 0, err
	}
	return l.version(ctx)
}

// PendingMigrations implements admin.Migrator.
func (m *Migrator) PendingMigrations(ctx context.Context) ([]admin.Migration, error) {
	l, err := m.layout(ctx)
	if err != nil {
		return nil, err
	}
	steps, err := l.pending(ctx, m.s.pool)
	return migrations2admin(steps), err
}

// Migrate implements admin.Migrator.
func (m *Migrator) Migrate(ctx context.Context) ([]admin.Migration, error) {
	ran, err := m.s.migrate(ctx)
	return migrations2admin(ran), err
}

func migrations2admin(steps []step) []admin.Migration {
	var out []admin.Migration
	for _, st := range steps {
		stmts := make([]string, len(st.sql))
		for i, q := range st.sql {
			stmts[i] = strings.TrimSuffix(strings.TrimSpace(q), ";") + ";"
		}
		out = append(out, admin.Migration{From: st.from, To: st.to, SQL: strings.Join(stmts, "\n")})
	}
	return out
}

// Stats implements admin.StatsReader, reading in one repeatable-read
// transaction: the layout's journal figures (layout.journalStats; get
// returns a type's figures, made on first use), then the snapshots and the
// schema's size, which both layouts read alike.
func (s *Store) Stats(ctx context.Context) (admin.Stats, error) {
	var st admin.Stats
	byType := map[string]*admin.TypeStats{}
	get := func(et string) *admin.TypeStats {
		if t, ok := byType[et]; ok {
			return t
		}
		t := &admin.TypeStats{EntityType: et}
		byType[et] = t
		return t
	}
	sc := s.cfg.schema
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := s.layout.journalStats(ctx, tx, get); err != nil {
			return err
		}
		var n, bytes int64
		err := typeFigures(ctx, tx, get, `SELECT entity_type, count(*), COALESCE(sum(octet_length(snapshot)), 0) FROM `+table(sc, "snapshot")+` GROUP BY entity_type`,
			func(t *admin.TypeStats) { t.Snapshots, t.SnapshotBytes = n, bytes }, &n, &bytes)
		if err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT COALESCE(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
			JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r'`, sc).Scan(&st.StorageBytes)
	})
	if err != nil {
		return admin.Stats{}, s.errs.Map(ctx, "stats", err, journal.ErrClosed)
	}
	for _, t := range byType {
		st.EntityTypes = append(st.EntityTypes, *t)
	}
	slices.SortFunc(st.EntityTypes, func(a, b admin.TypeStats) int { return cmp.Compare(a.EntityType, b.EntityType) })
	return st, nil
}

// typeFigures runs sql in tx, whose rows are an entity type then figures:
// it scans each row's figures into dest and has set copy them into the
// type's (get returns them).
func typeFigures(ctx context.Context, tx pgx.Tx, get func(string) *admin.TypeStats, sql string, set func(*admin.TypeStats), dest ...any) error {
	rows, err := tx.Query(ctx, sql)
	if err != nil {
		return err
	}
	defer rows.Close()
	var et string
	dest = append([]any{&et}, dest...)
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		set(get(et))
	}
	return rows.Err()
}

// ListProjections implements admin.ProjectionLister.
func (s *Store) ListProjections(ctx context.Context) ([]admin.ProjectionInstance, error) {
	return s.layout.listProjections(ctx)
}

// Backlog implements admin.BacklogReader. Of the events at exactly a
// timestamp offset's timestamp, those it lists as seen are not counted.
func (s *Store) Backlog(ctx context.Context, after query.Offset, f admin.EventFilter) (admin.Backlog, error) {
	var from time.Time // the zero time: before every event
	switch after.Kind {
	case query.KindNone:
	case query.KindTimestamp:
		from = after.Timestamp
	default:
		return admin.Backlog{}, fmt.Errorf("%w: %s (the PostgreSQL store resumes from timestamp offsets)", query.ErrUnsupportedOffset, after)
	}
	seenIDs, seenSeqs := make([]string, 0, len(after.Seen)), make([]int64, 0, len(after.Seen))
	for pid, seq := range after.Seen {
		seenIDs, seenSeqs = append(seenIDs, pid), append(seenSeqs, seq)
	}
	// The events after the offset, less those at its timestamp it lists
	// as seen.
	text := s.layout.backlog()
	text += `
		AND NOT (e.db_timestamp = $1 AND EXISTS (SELECT 1 FROM unnest($6::text[], $7::bigint[]) AS seen(pid, seq)
			WHERE seen.pid = e.persistence_id AND e.seq_nr <= seen.seq))`
	var b admin.Backlog
	var lo, hi *time.Time
	err := s.pool.QueryRow(ctx, text, from, f.EntityType, f.MinSlice, f.MaxSlice, f.Tag, seenIDs, seenSeqs).Scan(&b.Events, &lo, &hi)
	if err != nil {
		return admin.Backlog{}, s.errs.Map(ctx, "backlog", err, journal.ErrClosed)
	}
	if lo != nil {
		b.Oldest, b.Newest = lo.UTC(), hi.UTC()
	}
	return b, nil
}

// Purge implements admin.Purger, in one transaction.
func (s *Store) Purge(ctx context.Context, persistenceIDs []string) error {
	if len(persistenceIDs) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for _, name := range s.layout.purged() {
		b.Queue(`DELETE FROM `+table(s.cfg.schema, name)+` WHERE persistence_id = ANY($1)`, persistenceIDs)
	}
	defer s.known.forget(persistenceIDs...)
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return s.errs.Map(ctx, "purge", err, journal.ErrClosed)
	}
	return nil
}

// RewriteSerializerID implements admin.SerializerRewriter in one
// transaction (rolled back for a dry run), on either layout (their column
// names are the same). Rows of a JVM service sharing the schema are
// rewritten too: they are stored under the same ids.
func (s *Store) RewriteSerializerID(ctx context.Context, from, to int32, dryRun bool) (admin.Rewritten, error) {
	var r admin.Rewritten
	if from == to {
		return r, nil
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for _, u := range []struct {
			table, column string
			n             *int64
		}{{"event_journal", "event_ser_id", &r.Events}, {"snapshot", "ser_id", &r.Snapshots}, {"durable_state", "state_ser_id", &r.DurableStates}} {
			if u.table == "durable_state" {
				var exists bool
				if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table(s.cfg.schema, u.table)).Scan(&exists); err != nil || !exists {
					return err
				}
			}
			tag, err := tx.Exec(ctx, `UPDATE `+table(s.cfg.schema, u.table)+` SET `+u.column+` = $1 WHERE `+u.column+` = $2`, to, from)
			if err != nil {
				return err
			}
			*u.n = tag.RowsAffected()
		}
		if dryRun {
			return errDryRun
		}
		return nil
	})
	if err != nil && !errors.Is(err, errDryRun) {
		return admin.Rewritten{}, s.errs.Map(ctx, "rewrite serializer", err, journal.ErrClosed)
	}
	return r, nil
}

// errDryRun rolls back a dry run's transaction.
var errDryRun = errors.New("postgres: dry run")

// OpenBaseline implements admin.BaselineOpener: a pgx pool of its own on the
// store's server and schema (the same settings), doing the store's work with
// plain statements: COPY for inserts, one streamed SELECT for reads (Annals'
// layout only: ErrLayoutUnsupported on the r2dbc layout).
func (s *Store) OpenBaseline(ctx context.Context) (admin.Baseline, error) {
	return s.layout.openBaseline(ctx)
}

// Drop removes the migrator's schema and everything in it (DROP SCHEMA …
// CASCADE): for scratch schemas that tools create and remove, never for a
// schema that holds data anyone needs.
func (m *Migrator) Drop(ctx context.Context) error {
	if _, err := m.s.pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{m.s.cfg.schema}.Sanitize()+` CASCADE`); err != nil {
		return fmt.Errorf("postgres: drop schema %q: %w", m.s.cfg.schema, err)
	}
	return nil
}

// Where names the store for people: host, port, database and schema.
func (s *Store) Where() string {
	c := s.pool.Config().ConnConfig
	return fmt.Sprintf("%s:%d/%s (schema %s)", c.Host, c.Port, c.Database, s.cfg.schema)
}
