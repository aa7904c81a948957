package console

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/annals-go/annals/admin"
)

// defaultEstimateAbove is Options.EstimateAbove's default.
const defaultEstimateAbove = 1_000_000

// The SQLite and PostgreSQL stores' admin.StatsReader groups the whole
// journal (counts, payload sums, distinct ids per entity type): on a big
// journal that is a full scan. Before it the console reads a cheap
// estimate of the events, and above Options.EstimateAbove shows that.

type sqliteReader interface {
	ReadTx(ctx context.Context, fn func(tx *sql.Tx) error) error
}

type postgresReader interface {
	Pool() *pgxpool.Pool
	Schema() string
}

// estimate returns a cheap estimate of the store's events and a sentence
// saying how it was read; ok is false when the store offers none.
func (f *figures) estimate(ctx context.Context) (events int64, how string, oldest, newest time.Time, ok bool, err error) {
	switch a := f.s.st.Admin.(type) {
	case sqliteReader:
		if f.s.st.Kind != "sqlite" {
			return 0, "", oldest, newest, false, nil
		}
		err = a.ReadTx(ctx, func(tx *sql.Tx) error {
			var lo, hi sql.NullInt64
			if err := tx.QueryRowContext(ctx, `SELECT (SELECT timestamp FROM event_journal ORDER BY ordering LIMIT 1), (SELECT timestamp FROM event_journal ORDER BY ordering DESC LIMIT 1), coalesce((SELECT max(ordering) FROM event_journal), 0)`).Scan(&lo, &hi, &events); err != nil {
				return err
			}
			if lo.Valid {
				oldest, newest = time.Unix(0, lo.Int64).UTC(), time.Unix(0, hi.Int64).UTC()
			}
			return nil
		})
		return events, "an estimate: the journal's highest ordering (events written, deleted ones included)", oldest, newest, err == nil, err
	case postgresReader:
		if f.s.st.Kind != "postgres" {
			return 0, "", oldest, newest, false, nil
		}
		var n float64
		err = a.Pool().QueryRow(ctx, `SELECT c.reltuples FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
			WHERE c.relname = 'event_journal' AND ns.nspname = coalesce(nullif($1, ''), current_schema())`, a.Schema()).Scan(&n)
		if err != nil || n < 0 { // never analyzed: no estimate
			return 0, "", oldest, newest, false, err
		}
		return int64(n), "an estimate: PostgreSQL's row estimate of event_journal (pg_class.reltuples, as of its last ANALYZE)", oldest, newest, true, nil
	}
	return 0, "", oldest, newest, false, nil
}

// estimated returns the overview's figures from the estimate when it is
// at least the threshold; nil when the statistics are to be read.
func (f *figures) estimated(ctx context.Context) (*storeStats, []admin.TypeStats, error) {
	above := f.s.opt.EstimateAbove
	if above < 0 {
		return nil, nil, nil
	}
	events, how, oldest, newest, ok, err := f.estimate(ctx)
	if err != nil || !ok || events < above {
		return nil, nil, err
	}
	st := &storeStats{Estimate: true, Source: fmt.Sprintf("%s; the store's statistics read the whole journal, which the console does not do above %s events, so ids, payload bytes and snapshots are not counted", how, num(above))}
	st.Total = typeStats{Events: events, Oldest: oldest, Newest: newest}
	return st, nil, nil
}

// orderingMark is a sequence offset no higher than the store's highest,
// to count the events written from (the SQLite journal's highest
// ordering, read by its key; 0 elsewhere), so that the sampler does not
// count a big journal from its start.
func (f *figures) orderingMark(ctx context.Context, br admin.BacklogReader) (int64, error) {
	if f.s.st.Kind == "sqlite" {
		if n, _, _, _, ok, err := f.estimate(ctx); err == nil && ok {
			return highestOrdering(ctx, br, n)
		}
	}
	return highestOrdering(ctx, br, 0)
}
