package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/journal"
)

// ErrLayoutUnsupported reports an operation the store's layout does not
// offer.
var ErrLayoutUnsupported = errors.New("postgres: not offered on this layout")

// statsR2DBC is Stats on the r2dbc layout, in one repeatable-read
// transaction: events are the rows that are not delete markers, the
// highest number counts the markers, and the oldest and newest are
// db_timestamps (the layout has no write time).
func (s *Store) statsR2DBC(ctx context.Context) (admin.Stats, error) {
	return s.stats(ctx, func(tx pgx.Tx, sc string, get func(string) *admin.TypeStats) error {
		rows, err := tx.Query(ctx, `SELECT entity_type, count(DISTINCT persistence_id), max(seq_nr),
			count(*) FILTER (WHERE NOT deleted), COALESCE(sum(octet_length(event_payload)) FILTER (WHERE NOT deleted), 0),
			min(db_timestamp) FILTER (WHERE NOT deleted), max(db_timestamp) FILTER (WHERE NOT deleted)
			FROM `+table(sc, "event_journal")+` GROUP BY entity_type`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var et string
			var ids, hi, n, bytes int64
			var lo, last *time.Time
			if err := rows.Scan(&et, &ids, &hi, &n, &bytes, &lo, &last); err != nil {
				return err
			}
			t := get(et)
			t.PersistenceIDs, t.HighestSequenceNr, t.Events, t.PayloadBytes = ids, hi, n, bytes
			if lo != nil {
				t.Oldest, t.Newest = lo.UTC(), last.UTC()
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		return nil
	})
}

// backlogR2DBC is Backlog on the r2dbc layout: delete markers are not
// counted, tags are read from the tags column, and the oldest and newest
// are db_timestamps.
func (s *Store) backlogR2DBC(ctx context.Context, from time.Time, f admin.EventFilter, seenIDs []string, seenSeqs []int64) (admin.Backlog, error) {
	var b admin.Backlog
	var lo, hi *time.Time
	err := s.pool.QueryRow(ctx, `SELECT count(*), min(e.db_timestamp), max(e.db_timestamp) FROM `+table(s.cfg.schema, "event_journal")+` e
		WHERE NOT e.deleted AND e.db_timestamp >= $1 AND ($2 = '' OR e.entity_type = $2) AND e.slice BETWEEN $3 AND $4
		AND ($5 = '' OR $5 = ANY(e.tags))
		AND NOT (e.db_timestamp = $1 AND EXISTS (SELECT 1 FROM unnest($6::text[], $7::bigint[]) AS seen(pid, seq)
			WHERE seen.pid = e.persistence_id AND e.seq_nr <= seen.seq))`,
		from, f.EntityType, f.MinSlice, f.MaxSlice, f.Tag, seenIDs, seenSeqs).Scan(&b.Events, &lo, &hi)
	if err != nil {
		return admin.Backlog{}, s.errs.Map(ctx, "backlog", err, journal.ErrClosed)
	}
	if lo != nil {
		b.Oldest, b.Newest = lo.UTC(), hi.UTC()
	}
	return b, nil
}

// purgeR2DBC is Purge on the r2dbc layout: the ids' rows (markers
// included) and snapshots, in one transaction.
func (s *Store) purgeR2DBC(ctx context.Context, persistenceIDs []string) error {
	b := &pgx.Batch{}
	for _, name := range []string{"event_journal", "snapshot"} {
		b.Queue(`DELETE FROM `+table(s.cfg.schema, name)+` WHERE persistence_id = ANY($1)`, persistenceIDs)
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return s.errs.Map(ctx, "purge", err, journal.ErrClosed)
	}
	return nil
}

// baselineR2DBC is OpenBaseline's answer on the r2dbc layout.
func (s *Store) baselineR2DBC() error {
	return fmt.Errorf("%w: the raw baseline writes Annals' own columns (write_timestamp); schema %q has the r2dbc layout", ErrLayoutUnsupported, s.cfg.schema)
}
