package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals/admin"
)

// journalStats reads the journal's figures in one statement: events are
// the rows that are not delete markers, the highest number counts the
// markers, and the oldest and newest are db_timestamps (the layout has no
// write time).
func (l r2dbcLayout) journalStats(ctx context.Context, tx pgx.Tx, get func(string) *admin.TypeStats) error {
	sc := l.s.cfg.schema
	var ids, hi, n, bytes int64
	var lo, last *time.Time
	return typeFigures(ctx, tx, get, `SELECT entity_type, count(DISTINCT persistence_id), max(seq_nr),
		count(*) FILTER (WHERE NOT deleted), COALESCE(sum(octet_length(event_payload)) FILTER (WHERE NOT deleted), 0),
		min(db_timestamp) FILTER (WHERE NOT deleted), max(db_timestamp) FILTER (WHERE NOT deleted)
		FROM `+table(sc, "event_journal")+` GROUP BY entity_type`,
		func(t *admin.TypeStats) {
			t.PersistenceIDs, t.HighestSequenceNr, t.Events, t.PayloadBytes = ids, hi, n, bytes
			if lo != nil {
				t.Oldest, t.Newest = lo.UTC(), last.UTC()
			}
		}, &ids, &hi, &n, &bytes, &lo, &last)
}

// backlog counts the events that are not delete markers, by their
// db_timestamps (the plugin's write_timestamp is milliseconds), tags read
// from the tags column.
func (l r2dbcLayout) backlog() string {
	return `SELECT count(*), min(e.db_timestamp), max(e.db_timestamp) FROM ` + table(l.s.cfg.schema, "event_journal") + ` e
		WHERE NOT e.deleted AND e.db_timestamp >= $1 AND ($2 = '' OR e.entity_type = $2) AND e.slice BETWEEN $3 AND $4
		AND ($5 = '' OR $5 = ANY(e.tags))`
}

// purged are the journal and the snapshots: markers are rows of
// event_journal.
func (l r2dbcLayout) purged() []string { return []string{"event_journal", "snapshot"} }

// openBaseline is not offered: the raw baseline writes Annals' own
// columns.
func (l r2dbcLayout) openBaseline(context.Context) (admin.Baseline, error) {
	return nil, fmt.Errorf("%w: the raw baseline writes Annals' own columns (write_timestamp); schema %q has the r2dbc layout", ErrLayoutUnsupported, l.s.cfg.schema)
}
