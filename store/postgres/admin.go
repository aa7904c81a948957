package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/annals-go/annals"
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

// SchemaVersion implements admin.Migrator. The r2dbc layout has one
// version, 1: all its tables exist.
func (m *Migrator) SchemaVersion(ctx context.Context) (current, latest int, err error) {
	if steps, r2dbc, err := m.r2dbcPending(ctx); r2dbc || err != nil {
		return 1 - len(steps), 1, err
	}
	v, _, err := m.s.schemaVersion(ctx, m.s.pool)
	return v, SchemaVersion, err
}

// PendingMigrations implements admin.Migrator.
func (m *Migrator) PendingMigrations(ctx context.Context) ([]admin.Migration, error) {
	if steps, r2dbc, err := m.r2dbcPending(ctx); r2dbc || err != nil {
		return migrations2admin(steps), err
	}
	v, found, err := m.s.schemaVersion(ctx, m.s.pool)
	if err != nil {
		return nil, err
	}
	if v > SchemaVersion {
		return nil, m.s.newerSchema(v)
	}
	return migrations2admin(m.s.steps(v, found)), nil
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

// stats reads the statistics in one repeatable-read transaction: the
// layout's journal figures through journalStats (get returns a type's
// figures, made on first use), then the snapshots and the schema's size,
// which both layouts read alike.
func (s *Store) stats(ctx context.Context, journalStats func(tx pgx.Tx, sc string, get func(string) *admin.TypeStats) error) (admin.Stats, error) {
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
		if err := journalStats(tx, sc, get); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT entity_type, count(*), COALESCE(sum(octet_length(snapshot)), 0) FROM `+table(sc, "snapshot")+` GROUP BY entity_type`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var et string
			var n, bytes int64
			if err := rows.Scan(&et, &n, &bytes); err != nil {
				return err
			}
			t := get(et)
			t.Snapshots, t.SnapshotBytes = n, bytes
		}
		if err := rows.Err(); err != nil {
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

// Stats implements admin.StatsReader, reading in one repeatable-read
// transaction.
func (s *Store) Stats(ctx context.Context) (admin.Stats, error) {
	if s.cfg.layout == LayoutR2DBC {
		return s.statsR2DBC(ctx)
	}
	return s.stats(ctx, func(tx pgx.Tx, sc string, get func(string) *admin.TypeStats) error {
		rows, err := tx.Query(ctx, `SELECT entity_type, count(*), max(hi) FROM (
				SELECT entity_type, persistence_id, max(seq_nr) AS hi FROM (
					SELECT entity_type, persistence_id, seq_nr FROM `+table(sc, "event_journal")+`
					UNION ALL SELECT entity_type, persistence_id, seq_nr FROM `+table(sc, "journal_metadata")+`) a
				GROUP BY entity_type, persistence_id) ids GROUP BY entity_type`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var et string
			var n, hi int64
			if err := rows.Scan(&et, &n, &hi); err != nil {
				return err
			}
			t := get(et)
			t.PersistenceIDs, t.HighestSequenceNr = n, hi
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT entity_type, count(*), COALESCE(sum(octet_length(event_payload)), 0), min(write_timestamp), max(write_timestamp)
			FROM `+table(sc, "event_journal")+` GROUP BY entity_type`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var et string
			var n, bytes int64
			var lo, hi time.Time
			if err := rows.Scan(&et, &n, &bytes, &lo, &hi); err != nil {
				return err
			}
			t := get(et)
			t.Events, t.PayloadBytes, t.Oldest, t.Newest = n, bytes, lo.UTC(), hi.UTC()
		}
		if err := rows.Err(); err != nil {
			return err
		}
		return nil
	})
}

// ListProjections implements admin.ProjectionLister.
func (s *Store) ListProjections(ctx context.Context) ([]admin.ProjectionInstance, error) {
	if s.cfg.layout == LayoutR2DBC {
		return s.listProjectionsR2DBC(ctx)
	}
	rows, err := s.pool.Query(ctx, `SELECT COALESCE(o.projection_name, m.projection_name), COALESCE(o.projection_key, m.projection_key),
			o.current_offset, m.paused, GREATEST(o.last_updated, m.last_updated)
		FROM `+table(s.cfg.schema, "projection_offset_store")+` o
		FULL JOIN `+table(s.cfg.schema, "projection_management")+` m ON m.projection_name = o.projection_name AND m.projection_key = o.projection_key
		ORDER BY 1, 2`)
	if err != nil {
		return nil, s.errs.Map(ctx, "list projections", err, journal.ErrClosed)
	}
	defer rows.Close()
	var out []admin.ProjectionInstance
	for rows.Next() {
		var p admin.ProjectionInstance
		var raw *string
		var paused *bool
		var updated *int64
		if err := rows.Scan(&p.ID.Name, &p.ID.Key, &raw, &paused, &updated); err != nil {
			return nil, fmt.Errorf("postgres: list projections: %w", err)
		}
		if raw != nil {
			if err := json.Unmarshal([]byte(*raw), &p.Offset); err != nil {
				return nil, fmt.Errorf("postgres: projection %s: stored offset: %w", p.ID, err)
			}
		}
		p.Paused = paused != nil && *paused
		if updated != nil {
			p.Updated = time.UnixMilli(*updated).UTC()
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, s.errs.Map(ctx, "list projections", err, journal.ErrClosed)
	}
	return out, nil
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
	// as seen; on the r2dbc layout delete markers do not count, times are
	// db_timestamps (the plugin's write_timestamp is milliseconds), and
	// tags are read from the tags column.
	text := `SELECT count(*), min(e.write_timestamp), max(e.write_timestamp) FROM ` + table(s.cfg.schema, "event_journal") + ` e
		WHERE e.db_timestamp >= $1 AND ($2 = '' OR e.entity_type = $2) AND e.slice BETWEEN $3 AND $4
		AND ($5 = '' OR EXISTS (SELECT 1 FROM ` + table(s.cfg.schema, "event_tag") + ` t WHERE t.tag = $5 AND t.persistence_id = e.persistence_id AND t.seq_nr = e.seq_nr))`
	if s.cfg.layout == LayoutR2DBC {
		text = `SELECT count(*), min(e.db_timestamp), max(e.db_timestamp) FROM ` + table(s.cfg.schema, "event_journal") + ` e
		WHERE NOT e.deleted AND e.db_timestamp >= $1 AND ($2 = '' OR e.entity_type = $2) AND e.slice BETWEEN $3 AND $4
		AND ($5 = '' OR $5 = ANY(e.tags))`
	}
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
	tables := []string{"event_tag", "event_journal", "journal_metadata", "snapshot"}
	if s.cfg.layout == LayoutR2DBC {
		tables = []string{"event_journal", "snapshot"} // markers are rows of event_journal
	}
	b := &pgx.Batch{}
	for _, name := range tables {
		b.Queue(`DELETE FROM `+table(s.cfg.schema, name)+` WHERE persistence_id = ANY($1)`, persistenceIDs)
	}
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
// plain statements: COPY for inserts, one streamed SELECT for reads.
func (s *Store) OpenBaseline(ctx context.Context) (admin.Baseline, error) {
	if s.cfg.layout == LayoutR2DBC {
		return nil, s.baselineR2DBC()
	}
	pool, err := pgxpool.NewWithConfig(ctx, s.pool.Config().Copy())
	if err != nil {
		return nil, err
	}
	return &baseline{pool: pool, schema: s.cfg.schema}, nil
}

type baseline struct {
	pool   *pgxpool.Pool
	schema string
}

func (b *baseline) Close() error { b.pool.Close(); return nil }

// InsertRaw implements admin.Baseline with COPY in one transaction.
func (b *baseline) InsertRaw(ctx context.Context, events []journal.Repr) error {
	now := time.Now()
	return pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := tx.CopyFrom(ctx, pgx.Identifier{b.schema, "event_journal"},
			[]string{"slice", "entity_type", "persistence_id", "seq_nr", "db_timestamp", "write_timestamp", "event_ser_id", "event_ser_manifest", "event_payload", "writer", "meta_payload"},
			pgx.CopyFromSlice(len(events), func(i int) ([]any, error) {
				e := events[i]
				return []any{annals.Slice(e.PersistenceID), annals.EntityType(e.PersistenceID), e.PersistenceID, e.SequenceNr, now, now, e.SerializerID, e.Manifest, e.Payload, e.WriterID, e.Metadata}, nil
			}))
		return err
	})
}

func (b *baseline) count(ctx context.Context, sql string, args ...any) (int64, error) {
	rows, err := b.pool.Query(ctx, sql, args...)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var n int64
	for rows.Next() {
		var r row
		var tags []string
		if err := rows.Scan(&r.PersistenceID, &r.SequenceNr, &r.dbTimestamp, &r.Timestamp, &r.SerializerID, &r.Manifest, &r.Payload, &r.WriterID, &tags, &r.Metadata, &r.Slice, &r.EntityType); err != nil {
			return n, err
		}
		n++
	}
	return n, rows.Err()
}

// ReplayRaw implements admin.Baseline.
func (b *baseline) ReplayRaw(ctx context.Context, persistenceID string, to int64) (int64, error) {
	return b.count(ctx, `SELECT `+eventColumns+` FROM `+table(b.schema, "event_journal")+` e
		WHERE e.persistence_id = $1 AND e.seq_nr BETWEEN 1 AND $2 ORDER BY e.seq_nr`, persistenceID, to)
}

// ScanSlicesRaw implements admin.Baseline.
func (b *baseline) ScanSlicesRaw(ctx context.Context, entityType string, minSlice, maxSlice int) (int64, error) {
	return b.count(ctx, `SELECT `+eventColumns+` FROM `+table(b.schema, "event_journal")+` e
		WHERE e.entity_type = $1 AND e.slice BETWEEN $2 AND $3 ORDER BY e.db_timestamp, e.seq_nr, e.persistence_id`, entityType, minSlice, maxSlice)
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
