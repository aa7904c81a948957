package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/offsets"
	"github.com/annals-go/annals/query"
)

// Projection offsets on the r2dbc layout are stored as akka-projection-r2dbc
// and pekko-projection-r2dbc (R2dbcOffsetStore) store and read them, so that
// a projection can move between a Go and a JVM service:
//
//   - A timestamp offset is rows of projection_timestamp_offset_store, one
//     per (persistence id, sequence number) of its seen map: the projection's
//     name and key, the id's slice, timestamp_offset the offset's time,
//     timestamp_consumed transaction_timestamp(). Loading reads, as the
//     JVM's offset store does, the rows of the projection's name in the
//     slice range its key names ("min-max", the key of by-slices
//     projections on both sides; rows of the name and key when the key is
//     not a range): the offset is the latest timestamp_offset, with the
//     highest sequence number of each id at that time as its seen map.
//     Saving deletes the scope's rows at or after the offset's time (as the
//     JVM's management setOffset does, so an offset may move back) and
//     those older than r2dbcOffsetWindow before it (the JVM's default
//     offset-store.time-window), inserts the seen map's rows, and removes
//     the key's row of projection_offset_store.
//   - A sequence offset is the row of projection_offset_store of the
//     projection's name and key with manifest "SEQ" and the number as
//     current_offset, mergeable false, last_updated epoch milliseconds; a
//     time-based UUID offset has manifest "TBU" and the UUID's canonical
//     text; the JVM's "LNG" and "INT" rows load as sequence offsets. A
//     timestamp offset without seen ids, which the JVM's form cannot hold,
//     is stored there as Annals' JSON under manifest "annals-json". Saving
//     one deletes the scope's timestamp rows.
//   - The paused flag is projection_management's row, as on Annals'
//     layout (the same table and columns).

// r2dbcOffsetWindow is how long timestamp-offset rows are kept behind the
// latest saved: the default offset-store.time-window of the JVM's
// projection offset store, within which it uses the rows to accept each
// id's next event.
const r2dbcOffsetWindow = 5 * time.Minute

// Manifests of projection_offset_store rows (akka-projection's
// OffsetSerialization, and Annals' JSON).
const (
	manifestSequence   = "SEQ"
	manifestTimeUUID   = "TBU"
	manifestLong       = "LNG"
	manifestInt        = "INT"
	manifestAnnalsJSON = "annals-json"
)

// offsetScope is the SQL condition selecting a projection's timestamp
// rows ($1 the name, $2 and $3 the slice range, or $2 the key) and its
// arguments.
func offsetScope(id offsets.ID) (string, []any) {
	if lo, hi, ok := sliceRange(id.Key); ok {
		return `projection_name = $1 AND slice BETWEEN $2 AND $3`, []any{id.Name, lo, hi}
	}
	return `projection_name = $1 AND projection_key = $2`, []any{id.Name, id.Key}
}

// sliceRange reads a key of the form "min-max" naming slices.
func sliceRange(key string) (lo, hi int, ok bool) {
	a, b, found := strings.Cut(key, "-")
	if !found {
		return 0, 0, false
	}
	lo, err1 := strconv.Atoi(a)
	hi, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || lo < 0 || lo > hi || hi >= annals.NumberOfSlices {
		return 0, 0, false
	}
	return lo, hi, true
}

// execer is what a save needs of a pool or a transaction.
type execer interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}

// loadOffset reads the offset as the JVM's offset store does, and the
// paused flag.
func (l r2dbcLayout) loadOffset(ctx context.Context, id offsets.ID) (offsets.State, error) {
	var st offsets.State
	if l.s.isClosed() {
		return st, journal.ErrClosed
	}
	o, err := l.readOffset(ctx, id)
	if err != nil {
		return st, err
	}
	var paused *bool
	err = l.s.pool.QueryRow(ctx, `SELECT paused FROM `+table(l.s.cfg.schema, "projection_management")+` WHERE projection_name = $1 AND projection_key = $2`, id.Name, id.Key).Scan(&paused)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return st, l.s.errs.Map(ctx, "projection load", err, journal.ErrClosed)
	}
	st.Offset, st.Paused = o, paused != nil && *paused
	return st, nil
}

// readOffset reads a projection's offset: its timestamp rows first, as the
// JVM's offset store reads them, then its projection_offset_store row.
func (l r2dbcLayout) readOffset(ctx context.Context, id offsets.ID) (query.Offset, error) {
	scope, args := offsetScope(id)
	tsTable := table(l.s.cfg.schema, "projection_timestamp_offset_store")
	rows, err := l.s.pool.Query(ctx, `SELECT persistence_id, max(seq_nr), timestamp_offset FROM `+tsTable+` WHERE `+scope+`
		AND timestamp_offset = (SELECT max(timestamp_offset) FROM `+tsTable+` WHERE `+scope+`)
		GROUP BY persistence_id, timestamp_offset`, args...)
	if err != nil {
		return query.Offset{}, l.s.errs.Map(ctx, "projection load", err, journal.ErrClosed)
	}
	var latest time.Time
	seen := map[string]int64{}
	for rows.Next() {
		var pid string
		var seq int64
		if err := rows.Scan(&pid, &seq, &latest); err != nil {
			rows.Close()
			return query.Offset{}, fmt.Errorf("postgres: projection %s: timestamp offset: %w", id, err)
		}
		seen[pid] = seq
	}
	if err := rows.Err(); err != nil {
		return query.Offset{}, l.s.errs.Map(ctx, "projection load", err, journal.ErrClosed)
	}
	if len(seen) > 0 {
		return query.TimestampOffset(latest.UTC(), seen), nil
	}
	var current, manifest string
	err = l.s.pool.QueryRow(ctx, `SELECT current_offset, manifest FROM `+table(l.s.cfg.schema, "projection_offset_store")+`
		WHERE projection_name = $1 AND projection_key = $2`, id.Name, id.Key).Scan(&current, &manifest)
	if errors.Is(err, pgx.ErrNoRows) {
		return query.NoOffset(), nil
	}
	if err != nil {
		return query.Offset{}, l.s.errs.Map(ctx, "projection load", err, journal.ErrClosed)
	}
	return decodeR2DBCOffset(id, current, manifest)
}

// decodeR2DBCOffset reads a projection_offset_store row's offset.
func decodeR2DBCOffset(id offsets.ID, current, manifest string) (query.Offset, error) {
	switch manifest {
	case manifestSequence, manifestLong, manifestInt:
		n, err := strconv.ParseInt(current, 10, 64)
		if err != nil {
			return query.Offset{}, fmt.Errorf("postgres: projection %s: stored offset %q (%s): %w", id, current, manifest, err)
		}
		return query.SequenceOffset(n), nil
	case manifestTimeUUID:
		u, err := uuid.Parse(current)
		if err != nil {
			return query.Offset{}, fmt.Errorf("postgres: projection %s: stored offset: %w", id, err)
		}
		return query.TimeUUIDOffset(u), nil
	case manifestAnnalsJSON:
		var o query.Offset
		if err := json.Unmarshal([]byte(current), &o); err != nil {
			return query.Offset{}, fmt.Errorf("postgres: projection %s: stored offset: %w", id, err)
		}
		return o, nil
	}
	return query.Offset{}, fmt.Errorf("%w: projection %s: stored offset %q has manifest %q, which Annals does not read (it reads SEQ, LNG, INT, TBU and timestamp offsets)", query.ErrUnsupportedOffset, id, current, manifest)
}

// saveOffset stores the offset in the JVM's form: in tx, or in one
// implicit transaction of the pool when tx is nil.
func (l r2dbcLayout) saveOffset(ctx context.Context, tx pgx.Tx, id offsets.ID, o query.Offset) error {
	if l.s.isClosed() {
		return journal.ErrClosed
	}
	sc := l.s.cfg.schema
	tsTable, offTable := table(sc, "projection_timestamp_offset_store"), table(sc, "projection_offset_store")
	scope, args := offsetScope(id)
	b := &pgx.Batch{}
	if o.Kind == query.KindTimestamp && len(o.Seen) > 0 {
		slices, pids, seqs := make([]int32, 0, len(o.Seen)), make([]string, 0, len(o.Seen)), make([]int64, 0, len(o.Seen))
		for pid, seq := range o.Seen {
			slices, pids, seqs = append(slices, int32(annals.Slice(pid))), append(pids, pid), append(seqs, seq)
		}
		n := len(args)
		at := "$" + strconv.Itoa(n+1)
		b.Queue(`DELETE FROM `+tsTable+` WHERE `+scope+` AND (timestamp_offset >= `+at+`::timestamptz OR timestamp_offset < `+at+`::timestamptz - $`+strconv.Itoa(n+2)+`::interval)`,
			append(args, o.Timestamp, fmt.Sprintf("%d microseconds", r2dbcOffsetWindow.Microseconds()))...)
		b.Queue(`INSERT INTO `+tsTable+` (projection_name, projection_key, slice, persistence_id, seq_nr, timestamp_offset, timestamp_consumed)
			SELECT $1, $2, s.slice, s.pid, s.seq, $3, transaction_timestamp() FROM unnest($4::int[], $5::text[], $6::bigint[]) AS s(slice, pid, seq)
			ON CONFLICT DO NOTHING`, id.Name, id.Key, o.Timestamp, slices, pids, seqs)
		b.Queue(`DELETE FROM `+offTable+` WHERE projection_name = $1 AND projection_key = $2`, id.Name, id.Key)
	} else {
		current, manifest := "", manifestAnnalsJSON
		switch o.Kind {
		case query.KindSequence:
			current, manifest = strconv.FormatInt(o.Sequence, 10), manifestSequence
		case query.KindTimeUUID:
			current, manifest = uuid.UUID(o.TimeUUID).String(), manifestTimeUUID
		default:
			raw, err := json.Marshal(o)
			if err != nil {
				return fmt.Errorf("postgres: projection %s: encode offset: %w", id, err)
			}
			current = string(raw)
		}
		b.Queue(`DELETE FROM `+tsTable+` WHERE `+scope, args...)
		b.Queue(`INSERT INTO `+offTable+` (projection_name, projection_key, current_offset, manifest, mergeable, last_updated)
			VALUES ($1, $2, $3, $4, false, $5)
			ON CONFLICT (projection_name, projection_key) DO UPDATE SET current_offset = excluded.current_offset, manifest = excluded.manifest,
				mergeable = excluded.mergeable, last_updated = excluded.last_updated`, id.Name, id.Key, current, manifest, nowMillis())
	}
	var on execer = l.s.pool
	if tx != nil {
		on = tx
	}
	if err := on.SendBatch(ctx, b).Close(); err != nil {
		return l.s.errs.Map(ctx, "projection save offset", err, journal.ErrClosed)
	}
	return nil
}

// resetOffset deletes the projection's timestamp rows and its
// projection_offset_store row, in one transaction, whether or not ctx
// ends.
func (l r2dbcLayout) resetOffset(ctx context.Context, id offsets.ID) error {
	ctx = context.WithoutCancel(ctx)
	if l.s.isClosed() {
		return journal.ErrClosed
	}
	scope, args := offsetScope(id)
	b := &pgx.Batch{}
	b.Queue(`DELETE FROM `+table(l.s.cfg.schema, "projection_timestamp_offset_store")+` WHERE `+scope, args...)
	b.Queue(`DELETE FROM `+table(l.s.cfg.schema, "projection_offset_store")+` WHERE projection_name = $1 AND projection_key = $2`, id.Name, id.Key)
	if err := l.s.pool.SendBatch(ctx, b).Close(); err != nil {
		return l.s.errs.Map(ctx, "projection reset", err, journal.ErrClosed)
	}
	return nil
}

// listProjections lists every (name, key) of the three projection
// tables, with its offset as Load reads it.
func (l r2dbcLayout) listProjections(ctx context.Context) ([]admin.ProjectionInstance, error) {
	s := l.s
	sc := s.cfg.schema
	rows, err := s.pool.Query(ctx, `SELECT projection_name, projection_key, max(updated) FROM (
		SELECT projection_name, projection_key, last_updated AS updated FROM `+table(sc, "projection_offset_store")+`
		UNION ALL SELECT projection_name, projection_key, (extract(epoch FROM max(timestamp_consumed)) * 1000)::bigint FROM `+table(sc, "projection_timestamp_offset_store")+` GROUP BY 1, 2
		UNION ALL SELECT projection_name, projection_key, last_updated FROM `+table(sc, "projection_management")+`) u
		GROUP BY 1, 2 ORDER BY 1, 2`)
	if err != nil {
		return nil, s.errs.Map(ctx, "list projections", err, journal.ErrClosed)
	}
	type listed struct {
		id      offsets.ID
		updated *int64
	}
	var ids []listed
	for rows.Next() {
		var x listed
		if err := rows.Scan(&x.id.Name, &x.id.Key, &x.updated); err != nil {
			rows.Close()
			return nil, fmt.Errorf("postgres: list projections: %w", err)
		}
		ids = append(ids, x)
	}
	if err := rows.Err(); err != nil {
		return nil, s.errs.Map(ctx, "list projections", err, journal.ErrClosed)
	}
	out := make([]admin.ProjectionInstance, 0, len(ids))
	for _, id := range ids {
		st, err := l.loadOffset(ctx, id.id)
		if err != nil {
			return nil, err
		}
		p := admin.ProjectionInstance{ID: id.id, State: st}
		if id.updated != nil {
			p.Updated = time.UnixMilli(*id.updated).UTC()
		}
		out = append(out, p)
	}
	return out, nil
}
