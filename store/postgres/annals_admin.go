package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/journal"
)

// The admin operations of Annals' layout (see annalsLayout).

// journalStats reads the ids and highest numbers of the events and of
// journal_metadata (the highest numbers of deleted events), then the
// events' count, size and write times.
func (l *annalsLayout) journalStats(ctx context.Context, tx pgx.Tx, get func(string) *admin.TypeStats) error {
	sc := l.s.cfg.schema
	var ids, hi, n, bytes int64
	err := typeFigures(ctx, tx, get, `SELECT entity_type, count(*), max(hi) FROM (
			SELECT entity_type, persistence_id, max(seq_nr) AS hi FROM (
				SELECT entity_type, persistence_id, seq_nr FROM `+table(sc, "event_journal")+`
				UNION ALL SELECT entity_type, persistence_id, seq_nr FROM `+table(sc, "journal_metadata")+`) a
			GROUP BY entity_type, persistence_id) ids GROUP BY entity_type`,
		func(t *admin.TypeStats) { t.PersistenceIDs, t.HighestSequenceNr = ids, hi }, &ids, &hi)
	if err != nil {
		return err
	}
	var lo, last time.Time
	return typeFigures(ctx, tx, get, `SELECT entity_type, count(*), COALESCE(sum(octet_length(event_payload)), 0), min(write_timestamp), max(write_timestamp)
		FROM `+table(sc, "event_journal")+` GROUP BY entity_type`,
		func(t *admin.TypeStats) {
			t.Events, t.PayloadBytes, t.Oldest, t.Newest = n, bytes, lo.UTC(), last.UTC()
		}, &n, &bytes, &lo, &last)
}

// listProjections lists the rows of projection_offset_store and
// projection_management, offsets as JSON.
func (l *annalsLayout) listProjections(ctx context.Context) ([]admin.ProjectionInstance, error) {
	s := l.s
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

// backlog counts the events by their write times, tags from event_tag.
func (l *annalsLayout) backlog() string {
	return `SELECT count(*), min(e.write_timestamp), max(e.write_timestamp) FROM ` + table(l.s.cfg.schema, "event_journal") + ` e
		WHERE e.db_timestamp >= $1 AND ($2 = '' OR e.entity_type = $2) AND e.slice BETWEEN $3 AND $4
		AND ($5 = '' OR EXISTS (SELECT 1 FROM ` + table(l.s.cfg.schema, "event_tag") + ` t WHERE t.tag = $5 AND t.persistence_id = e.persistence_id AND t.seq_nr = e.seq_nr))`
}

// purged are the journal's tables, with tags and metadata, and snapshots.
func (l *annalsLayout) purged() []string {
	return []string{"event_tag", "event_journal", "journal_metadata", "snapshot"}
}

// openBaseline opens a pgx pool of its own (see Store.OpenBaseline).
func (l *annalsLayout) openBaseline(ctx context.Context) (admin.Baseline, error) {
	pool, err := pgxpool.NewWithConfig(ctx, l.s.pool.Config().Copy())
	if err != nil {
		return nil, err
	}
	return &baseline{pool: pool, schema: l.s.cfg.schema}, nil
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
	return b.count(ctx, `SELECT `+annalsColumns+` FROM `+table(b.schema, "event_journal")+` e
		WHERE e.persistence_id = $1 AND e.seq_nr BETWEEN 1 AND $2 ORDER BY e.seq_nr`, persistenceID, to)
}

// ScanSlicesRaw implements admin.Baseline.
func (b *baseline) ScanSlicesRaw(ctx context.Context, entityType string, minSlice, maxSlice int) (int64, error) {
	return b.count(ctx, `SELECT `+annalsColumns+` FROM `+table(b.schema, "event_journal")+` e
		WHERE e.entity_type = $1 AND e.slice BETWEEN $2 AND $3 ORDER BY e.db_timestamp, e.seq_nr, e.persistence_id`, entityType, minSlice, maxSlice)
}
