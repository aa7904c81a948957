package postgres

import (
	"context"
	"fmt"
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
//
// Its admin operations are in r2dbc_admin.go, its projection offsets in
// r2dbc_projections.go, its schema in r2dbc_schema.go.
type r2dbcLayout struct{ s *Store }

// r2dbcWriteTime is the column journal.Repr.Timestamp reads in the r2dbc
// layout: db_timestamp.
const r2dbcWriteTime = "e.db_timestamp"

// r2dbcRecoveryType is the entity type of a recovery's event rows in the
// r2dbc layout (see recoveryColumns): the row's own, since a JVM
// service's rows carry Pekko's PersistenceId.extractEntityType, which is
// "" for an id without a separator where annals.EntityType is the whole
// id.
const r2dbcRecoveryType = "e.entity_type"

// r2dbcMetaSerializerIDText is the meta_ser_id of the metadata Annals
// writes, as SQL: Akka's and Pekko's ByteArraySerializer
// (serialization.BytesID).
const r2dbcMetaSerializerIDText = "4"

// configure makes the store use TimestampOrder (CommitOrder asked for
// explicitly is an ErrInvalidConfig: the commit-order clock row is a table
// of Annals' own, and JVM writers would not move it).
func (l r2dbcLayout) configure(c *config) error {
	if c.orderingSet && c.ordering == CommitOrder {
		return fmt.Errorf("%w: ordering=commit is not available on the r2dbc layout of schema %q (it needs Annals' clock table, which JVM writers do not move); use ordering=timestamp, the r2dbc layout's default", ErrInvalidConfig, c.schema)
	}
	c.ordering = TimestampOrder
	return nil
}

// statements returns the store's statements on the r2dbc layout. Reads
// skip delete markers. Snapshot write_timestamp is epoch milliseconds
// there: the statements take and return Unix nanoseconds, as the Annals
// layout's do, and convert (rounding down to the millisecond); snapshot
// criteria compare at millisecond precision.
func (l r2dbcLayout) statements() statements {
	r := schemaTables(l.s.cfg.schema, r2dbcWriteTime, r2dbcRecoveryType)
	st := sharedStatements(r, fragments{
		visible:   func(alias string) string { return " AND NOT " + alias + ".deleted" },
		snapTime:  r2dbcMillis,
		snapNanos: "write_timestamp * 1000000",
	})
	notify := l.s.cfg.notifyParam(r2dbcInsertParams)
	st.insert = r.Replace(r2dbcInsertSQL(l.s.cfg.writeClock(), false, notify))
	st.insertTagged = r.Replace(r2dbcInsertSQL(l.s.cfg.writeClock(), true, notify)) // tags live in the tags column only
	st.highest = r.Replace(`SELECT COALESCE(max(seq_nr), 0) FROM {journal} WHERE persistence_id = $1`)
	// One row per id, overwritten whatever its sequence number, as the
	// plugin's upsert does (an older snapshot replaces a younger one); the
	// metadata columns are cleared, since Annals' snapshots have none.
	st.saveSnap = r.Replace(`INSERT INTO {snapshot} (slice, entity_type, persistence_id, seq_nr, write_timestamp, ser_id, ser_manifest, snapshot, meta_ser_id, meta_ser_manifest, meta_payload)
	VALUES ($1, $2, $3, $4, ` + r2dbcMillis("$5") + `, $6, $7, $8, NULL, NULL, NULL)
	ON CONFLICT (persistence_id) DO UPDATE SET seq_nr = excluded.seq_nr, write_timestamp = excluded.write_timestamp,
		ser_id = excluded.ser_id, ser_manifest = excluded.ser_manifest, snapshot = excluded.snapshot,
		meta_ser_id = excluded.meta_ser_id, meta_ser_manifest = excluded.meta_ser_manifest, meta_payload = excluded.meta_payload`)
	// Events by tag read the tags array; the layout has no index on it,
	// so each page scans the journal (the plugin has no such query). The
	// plugin's index is (slice, entity_type, db_timestamp, seq_nr): pages
	// by type and across slices are sorted, as the plugin's are; with an
	// index on (entity_type, db_timestamp, seq_nr, persistence_id), which
	// the layout does not create (see LayoutR2DBC), each is an index
	// probe.
	st.byTag = r.Replace(`SELECT {columns} FROM {journal} e
	WHERE $1 = ANY(e.tags) AND NOT e.deleted
	AND (e.db_timestamp, e.seq_nr, e.persistence_id) > ($2, $3, $4) AND e.db_timestamp <= $5
	ORDER BY e.db_timestamp, e.seq_nr, e.persistence_id LIMIT $6`)
	st.earlierTagged = r.Replace(`SELECT {columns} FROM {journal} e
	WHERE $4 = ANY(e.tags) AND e.persistence_id = ANY($1) AND e.db_timestamp >= $2 AND e.db_timestamp <= $3 AND NOT e.deleted
	ORDER BY e.persistence_id, e.seq_nr`)
	// An id whose events were all deleted keeps its marker row, so it is
	// listed (as the plugin lists it).
	st.persistenceIDs = r.Replace(idsSQL + `SELECT pid FROM ids WHERE pid IS NOT NULL LIMIT $3`)
	return st
}

// r2dbcMillis converts a snapshot time parameter of Unix nanoseconds to
// the layout's epoch milliseconds, rounding down.
func r2dbcMillis(param string) string { return `floor(` + param + `::numeric / 1000000)::bigint` }

// r2dbcInsertSQL inserts the events of atomic writes given as parallel
// arrays ($1–$11 as insertSQL's, the events of one id adjacent, in order;
// $12: each row's floor, see Journal.floors; $13, $14: stampSQL's rows
// before and rows in all) in the plugin's row shape. A row's db_timestamp
// is stampSQL's: from clock (the transaction's time) and, so that they
// grow per id, from the id's row before the id's first event in the
// statement (an event or a delete marker) plus 1µs per event. No two rows
// of a call share one. (The plugin stamps every row of its transaction
// transaction_timestamp() unless the id's previous row is later, so a
// whole atomic batch shares one timestamp; group commit puts up to 1,000
// ids in one statement, and Pekko's by-slices query fails when more rows
// than its buffer share one timestamp.) It returns clock (see
// stampedInsert), and sends the write's NOTIFY on the channel parameter
// notify unless it is "". Unless tagged, it stores no tags (no event of
// the call has any).
func r2dbcInsertSQL(clock string, tagged bool, notify string) string {
	return stampedInsert(clock, notify, `INSERT INTO {journal} (slice, entity_type, persistence_id, seq_nr, db_timestamp, event_ser_id, event_ser_manifest, event_payload,
	deleted, writer, adapter_manifest, tags, meta_ser_id, meta_ser_manifest, meta_payload)
SELECT i.slice, i.entity_type, i.pid, i.seq_nr,
	`+stampSQL(clock, "$13::bigint", "$14::bigint")+`,
	i.ser_id, i.manifest, i.payload, false, i.writer, '', `+tagsColumn(tagged)+`,
	CASE WHEN i.meta IS NULL THEN NULL ELSE `+r2dbcMetaSerializerIDText+` END, CASE WHEN i.meta IS NULL THEN NULL ELSE '' END, i.meta
`+writesSQL(`, $12::timestamptz[]`, `, floor`))
}

// r2dbcInsertParams is how many parameters r2dbcInsertSQL takes before
// the NOTIFY channel's: insertArgs' eleven, the floors, rows before and
// rows in all (the layout writes in TimestampOrder only).
const r2dbcInsertParams = 14

// writeArgs returns r2dbcInsertSQL's arguments.
func (l r2dbcLayout) writeArgs(writes []journal.AtomicWrite, pending []int, now time.Time, floors stampCells, before, total int64) ([]any, bool) {
	cols, tagged := insertArgs(writes, pending, now)
	return append(cols, floors, before, total), tagged
}

// deleteTo deletes as the plugin does: in
// one transaction, the id's rows up to to are deleted and one marker row
// is inserted at to (deleted = true, event_ser_id 0, an empty
// event_ser_manifest, event_payload, writer and adapter_manifest, tags and
// metadata NULL, db_timestamp transaction_timestamp()), which keeps the
// highest sequence number. Where the plugin's caller never passes a to
// above the highest number (Pekko's Eventsourced refuses it, and resolves
// Long.MaxValue to the highest), to is lowered to the highest number; an
// id with no rows, or whose rows up to to were already deleted (a marker
// at or above to), is left as it is.
func (l r2dbcLayout) deleteTo(ctx context.Context, persistenceID string, to int64) error {
	s := l.s
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
	VALUES ($1, $2, $3, $4, `+s.cfg.writeClock()+`, '', '', 0, '', '\x'::bytea, true)`,
			annals.Slice(persistenceID), annals.EntityType(persistenceID), persistenceID, *target)
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return s.errs.Map(ctx, "delete", err, journal.ErrClosed)
	}
	return nil
}
