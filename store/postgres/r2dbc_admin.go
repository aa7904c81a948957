package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals/admin"
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

// baselineR2DBC is OpenBaseline's answer on the r2dbc layout.
func (s *Store) baselineR2DBC() error {
	return fmt.Errorf("%w: the raw baseline writes Annals' own columns (write_timestamp); schema %q has the r2dbc layout", ErrLayoutUnsupported, s.cfg.schema)
}
