package postgres

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/journal"
)

// The r2dbc layout's rows, as Pekko Persistence R2DBC 1.2 writes and reads
// them:
//
//   - An event row has slice and entity_type (annals.Slice,
//     annals.EntityType), writer (journal.Repr.WriterID), an empty
//     adapter_manifest (the plugin never writes another), tags as text[]
//     (NULL when the event has none), deleted false, and meta_ser_id,
//     meta_ser_manifest, meta_payload NULL, or 4 (the bytes serializer,
//     Akka's and Pekko's ByteArraySerializer), the empty string and
//     journal.Repr.Metadata when the event has metadata.
//   - db_timestamp grows per id as the plugin's does: from
//     transaction_timestamp(), never below the db_timestamp of the id's
//     row at the sequence number before the event plus 1µs. Where the
//     plugin gives the rows of one transaction that one timestamp, Annals
//     gives every row of a call its own (see r2dbcInsertSQL): group commit
//     puts many ids in one statement, and Pekko's by-slices query fails
//     when more rows than its buffer share one timestamp.
//   - The layout has no write_timestamp: an event's journal.Repr.Timestamp
//     reads as its db_timestamp (as the plugin's PersistentRepr.timestamp
//     does), and the writer's own is not kept.
//   - Reads skip rows with deleted = true (delete markers): replays,
//     recoveries and queries alike. The highest sequence number counts
//     them, as the plugin does.
//   - Metadata reads back as meta_payload, whatever its meta_ser_id
//     (Pekko's replicated event sourcing writes 40, "RE").
const r2dbcEventColumns = `e.persistence_id, e.seq_nr, e.db_timestamp, e.db_timestamp, e.event_ser_id, e.event_ser_manifest, e.event_payload, e.writer, e.tags, e.meta_payload, e.slice, e.entity_type`

// r2dbcMetaSerializerIDText is the meta_ser_id of the metadata Annals
// writes, as SQL: Akka's and Pekko's ByteArraySerializer
// (serialization.BytesID).
const r2dbcMetaSerializerIDText = "4"

// newR2DBCStatements returns the store's statements on the r2dbc layout,
// field for field those of newStatements. Snapshot write_timestamp is
// epoch milliseconds there: the statements take and return Unix
// nanoseconds, as the Annals layout's do, and convert (rounding down to
// the millisecond); snapshot criteria compare at millisecond precision.
func newR2DBCStatements(schema string) statements {
	r := strings.NewReplacer(
		"{journal}", table(schema, "event_journal"),
		"{snapshot}", table(schema, "snapshot"),
		"{offset}", table(schema, "projection_offset_store"),
		"{management}", table(schema, "projection_management"),
		"{columns}", r2dbcEventColumns,
	)
	ms := func(param string) string { return `floor(` + param + `::numeric / 1000000)::bigint` }
	criteria := `persistence_id = $1 AND seq_nr >= $2 AND seq_nr <= $3 AND write_timestamp >= ` + ms("$4") + ` AND write_timestamp <= ` + ms("$5")
	insert := r.Replace(r2dbcInsertSQL())
	return statements{
		insert:       insert,
		insertTagged: insert, // tags live in the tags column only
		highest:      r.Replace(`SELECT COALESCE(max(seq_nr), 0) FROM {journal} WHERE persistence_id = $1`),
		deleteEvents: r.Replace(`DELETE FROM {journal} WHERE persistence_id = $1 AND seq_nr <= $2`),
		replay:       r.Replace(`SELECT {columns} FROM {journal} e WHERE e.persistence_id = $1 AND e.seq_nr >= $2 AND e.seq_nr <= $3 AND NOT e.deleted ORDER BY e.seq_nr LIMIT $4`),
		recoverEvents: r.Replace(`SELECT {columns} FROM {journal} e WHERE e.persistence_id = $1
	AND e.seq_nr > COALESCE((SELECT max(seq_nr) FROM {snapshot} WHERE ` + criteria + `), 0)
	AND e.seq_nr <= $6 AND NOT e.deleted ORDER BY e.seq_nr LIMIT $7`),

		loadSnap: r.Replace(`SELECT seq_nr, write_timestamp * 1000000, ser_id, ser_manifest, snapshot FROM {snapshot}
	WHERE ` + criteria),
		// One row per id, overwritten whatever its sequence number, as the
		// plugin's upsert does (an older snapshot replaces a younger one);
		// the metadata columns are cleared, since Annals' snapshots have
		// none.
		saveSnap: r.Replace(`INSERT INTO {snapshot} (slice, entity_type, persistence_id, seq_nr, write_timestamp, ser_id, ser_manifest, snapshot, meta_ser_id, meta_ser_manifest, meta_payload)
	VALUES ($1, $2, $3, $4, ` + ms("$5") + `, $6, $7, $8, NULL, NULL, NULL)
	ON CONFLICT (persistence_id) DO UPDATE SET seq_nr = excluded.seq_nr, write_timestamp = excluded.write_timestamp,
		ser_id = excluded.ser_id, ser_manifest = excluded.ser_manifest, snapshot = excluded.snapshot,
		meta_ser_id = excluded.meta_ser_id, meta_ser_manifest = excluded.meta_ser_manifest, meta_payload = excluded.meta_payload`),
		deleteSnap:  r.Replace(`DELETE FROM {snapshot} WHERE persistence_id = $1 AND seq_nr = $2 AND ($3::bigint = 0 OR write_timestamp = ` + ms("$3") + `)`),
		deleteSnaps: r.Replace(`DELETE FROM {snapshot} WHERE ` + criteria),

		// The plugin's index is (slice, entity_type, db_timestamp, seq_nr):
		// pages across slices are sorted, as the plugin's are.
		bySlices: r.Replace(`SELECT {columns} FROM {journal} e
	WHERE e.entity_type = $1 AND e.slice BETWEEN $2 AND $3 AND NOT e.deleted
	AND (e.db_timestamp, e.seq_nr, e.persistence_id) > ($4, $5, $6) AND e.db_timestamp <= $7
	ORDER BY e.db_timestamp, e.seq_nr, e.persistence_id LIMIT $8`),
		// Events by tag read the tags array; the layout has no index on it,
		// so each page scans the journal (the plugin has no such query).
		byTag: r.Replace(`SELECT {columns} FROM {journal} e
	WHERE $1 = ANY(e.tags) AND NOT e.deleted
	AND (e.db_timestamp, e.seq_nr, e.persistence_id) > ($2, $3, $4) AND e.db_timestamp <= $5
	ORDER BY e.db_timestamp, e.seq_nr, e.persistence_id LIMIT $6`),
		byType: r.Replace(`SELECT {columns} FROM {journal} e
	WHERE e.entity_type = $1 AND NOT e.deleted
	AND (e.db_timestamp, e.seq_nr, e.persistence_id) > ($2, $3, $4) AND e.db_timestamp <= $5
	ORDER BY e.db_timestamp, e.seq_nr, e.persistence_id LIMIT $6`),
		// Every type: Annals' loose scan of the types, a page per type
		// merged (see newStatements); with an index on (entity_type,
		// db_timestamp, seq_nr, persistence_id), which the layout does not
		// create (see LayoutR2DBC), each is an index probe.
		byAnyType: r.Replace(`WITH RECURSIVE types(t) AS (
	SELECT min(entity_type) FROM {journal}
	UNION ALL
	SELECT (SELECT min(entity_type) FROM {journal} WHERE entity_type > types.t) FROM types WHERE types.t IS NOT NULL
)
SELECT {columns} FROM types, LATERAL (
	SELECT * FROM {journal} j WHERE j.entity_type = types.t AND NOT j.deleted
	AND (j.db_timestamp, j.seq_nr, j.persistence_id) > ($1, $2, $3) AND j.db_timestamp <= $4
	ORDER BY j.db_timestamp, j.seq_nr, j.persistence_id LIMIT $5) e
	ORDER BY e.db_timestamp, e.seq_nr, e.persistence_id LIMIT $5`),
		earlier: r.Replace(`SELECT {columns} FROM {journal} e
	WHERE e.persistence_id = ANY($1) AND e.db_timestamp >= $2 AND e.db_timestamp <= $3 AND NOT e.deleted
	ORDER BY e.persistence_id, e.seq_nr`),
		earlierTagged: r.Replace(`SELECT {columns} FROM {journal} e
	WHERE $4 = ANY(e.tags) AND e.persistence_id = ANY($1) AND e.db_timestamp >= $2 AND e.db_timestamp <= $3 AND NOT e.deleted
	ORDER BY e.persistence_id, e.seq_nr`),
		// Ids after $2 in order, by a recursive loose scan of the primary
		// key; an id whose events were all deleted keeps its marker row,
		// so it is listed (as the plugin lists it).
		persistenceIDs: r.Replace(`WITH RECURSIVE ids(pid) AS (
	(SELECT persistence_id FROM {journal} WHERE persistence_id > $2 AND ($1 = '' OR entity_type = $1) ORDER BY persistence_id LIMIT 1)
	UNION ALL
	SELECT (SELECT j.persistence_id FROM {journal} j WHERE j.persistence_id > ids.pid AND ($1 = '' OR j.entity_type = $1)
		ORDER BY j.persistence_id LIMIT 1)
	FROM ids WHERE ids.pid IS NOT NULL
)
SELECT pid FROM ids WHERE pid IS NOT NULL LIMIT $3`),

		loadOffset: r.Replace(`SELECT (SELECT current_offset FROM {offset} WHERE projection_name = $1 AND projection_key = $2),
	(SELECT paused FROM {management} WHERE projection_name = $1 AND projection_key = $2)`),
		saveOffset: r.Replace(`INSERT INTO {offset} (projection_name, projection_key, current_offset, manifest, mergeable, last_updated)
	VALUES ($1, $2, $3, 'annals-json', false, $4)
	ON CONFLICT (projection_name, projection_key) DO UPDATE SET current_offset = excluded.current_offset, last_updated = excluded.last_updated`),
		setPaused: r.Replace(`INSERT INTO {management} (projection_name, projection_key, paused, last_updated) VALUES ($1, $2, $3, $4)
	ON CONFLICT (projection_name, projection_key) DO UPDATE SET paused = excluded.paused, last_updated = excluded.last_updated`),
		resetOffset: r.Replace(`DELETE FROM {offset} WHERE projection_name = $1 AND projection_key = $2`),
	}
}

// r2dbcInsertSQL inserts the events of atomic writes given as parallel
// arrays ($1–$11 as insertSQL's, the events of one id adjacent, in order;
// $12: each event's position among its id's events in the statement, from
// 1; $13, $14: stampSQL's rows before and rows in all) in the plugin's row
// shape. A row's db_timestamp is stampSQL's: from the transaction's time
// and, so that they grow per id, from the id's row at the sequence number
// before the id's first event in the statement plus 1µs per event. No two
// rows of a call share one. (The plugin stamps every row of its
// transaction transaction_timestamp() unless the id's previous row is
// later, so a whole atomic batch shares one timestamp; group commit puts
// up to 1,000 ids in one statement, and Pekko's by-slices query fails
// when more rows than its buffer share one timestamp.)
func r2dbcInsertSQL() string {
	return `INSERT INTO {journal} (slice, entity_type, persistence_id, seq_nr, db_timestamp, event_ser_id, event_ser_manifest, event_payload,
	deleted, writer, adapter_manifest, tags, meta_ser_id, meta_ser_manifest, meta_payload)
SELECT i.slice, i.entity_type, i.pid, i.seq_nr,
	` + stampSQL(`(SELECT p.db_timestamp FROM {journal} p WHERE p.persistence_id = i.pid AND p.seq_nr = i.seq_nr - i.ord) + i.ord * interval '1 microsecond'`, "$13::bigint", "$14::bigint") + `,
	i.ser_id, i.manifest, i.payload, false, i.writer, '',
	CASE WHEN i.tags IS NULL THEN NULL ELSE ARRAY(SELECT jsonb_array_elements_text(i.tags::jsonb)) END,
	CASE WHEN i.meta IS NULL THEN NULL ELSE ` + r2dbcMetaSerializerIDText + ` END, CASE WHEN i.meta IS NULL THEN NULL ELSE '' END, i.meta
FROM unnest($1::text[], $2::bigint[], $3::timestamptz[], $4::int[], $5::text[], $6::bytea[], $7::text[], $8::text[], $9::bytea[], $10::int[], $11::text[], $12::int[])
	WITH ORDINALITY AS i(pid, seq_nr, wts, ser_id, manifest, payload, writer, tags, meta, slice, entity_type, ord, n)`
}

// writeArgs returns the arguments of the store's insert statement for the
// atomic writes writes[pending...], in a transaction whose statements
// insert total rows, before of them ahead of this one (see stampSQL), and
// whether any event has tags.
func (s *Store) writeArgs(writes []journal.AtomicWrite, pending []int, now time.Time, before, total int64) ([]any, bool) {
	switch {
	case s.cfg.layout == LayoutR2DBC:
		c := insertArgs(true, writes, pending, now)
		return append(c.cols, c.ords, before, total), c.tagged
	case s.cfg.ordering == TimestampOrder:
		c := insertArgs(true, writes, pending, now)
		return append(c.cols, c.ords, c.distinct(), c.pidx, before, total), c.tagged
	}
	c := insertArgs(false, writes, pending, now)
	return c.cols, c.tagged
}

// deleteR2DBC is DeleteTo on the r2dbc layout, as the plugin deletes: in
// one transaction, the id's rows up to to are deleted and one marker row
// is inserted at to (deleted = true, event_ser_id 0, an empty
// event_ser_manifest, event_payload, writer and adapter_manifest, tags and
// metadata NULL, db_timestamp transaction_timestamp()), which keeps the
// highest sequence number. Where the plugin's caller never passes a to
// above the highest number (Pekko's Eventsourced refuses it, and resolves
// Long.MaxValue to the highest), to is lowered to the highest number; an
// id with no rows, or whose rows up to to were already deleted (a marker
// at or above to), is left as it is.
func (j *Journal) deleteR2DBC(ctx context.Context, persistenceID string, to int64) error {
	s := j.s
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var target *int64
		var done bool
		err := tx.QueryRow(ctx, `SELECT h.seq, EXISTS (SELECT 1 FROM `+table(s.cfg.schema, "event_journal")+` m
			WHERE m.persistence_id = $1 AND m.deleted AND m.seq_nr >= h.seq)
		FROM (SELECT CASE WHEN max(seq_nr) IS NULL THEN NULL ELSE LEAST($2::bigint, max(seq_nr)) END AS seq FROM `+table(s.cfg.schema, "event_journal")+` WHERE persistence_id = $1) h`,
			persistenceID, to).Scan(&target, &done)
		if err != nil || target == nil || done {
			return err
		}
		b := &pgx.Batch{}
		b.Queue(s.sql.deleteEvents, persistenceID, *target)
		b.Queue(`INSERT INTO `+table(s.cfg.schema, "event_journal")+`
	(slice, entity_type, persistence_id, seq_nr, db_timestamp, writer, adapter_manifest, event_ser_id, event_ser_manifest, event_payload, deleted)
	VALUES ($1, $2, $3, $4, transaction_timestamp(), '', '', 0, '', '\x'::bytea, true)`,
			annals.Slice(persistenceID), annals.EntityType(persistenceID), persistenceID, *target)
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return s.errs.Map(ctx, "delete", err, journal.ErrClosed)
	}
	return nil
}
