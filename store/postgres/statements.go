package postgres

import "strings"

// statements are the SQL of the code both layouts share, with the schema
// spliced in once at Open (as a quoted identifier that passed
// ValidIdentifier). A layout fills them (layout.statements): those that
// differ only in a few fragments from sharedStatements, the others from
// the layout's own file.
type statements struct {
	insert, insertTagged                                   string
	highest, deleteEvents, replay, recoverEvents, recovery string
	// recoveryFirst is the number of the first event after a recovery's
	// snapshot (see recoverySQL).
	recoveryFirst string
	// deletedTable is the table of the ids' highest deleted numbers
	// (persistence_id, seq_nr) in a layout that keeps them apart from the
	// events (Annals': journal_metadata), "" in one that does not;
	// recoverFrom is recoveryOpenSQL's events, and recoveryOpen its
	// statement, "" without deletedTable.
	deletedTable, recoverFrom, recoveryOpen                    string
	loadSnap, saveSnap, deleteSnap, deleteSnaps                string
	bySlices, byTag, byType, byAnyType, earlier, earlierTagged string
	persistenceIDs                                             string
	setPaused                                                  string
	checkLeases, heldLeases                                    string // fencing (fence.go), on both layouts
	// TimestampOrder's writes (see Journal.floors): the latest rows of
	// ids below sequence numbers.
	latestBelow string
}

// fragments are where the layouts' otherwise equal statements differ.
type fragments struct {
	// visible is the condition, with its leading AND, that keeps the
	// event rows of an alias the reads return; empty when they return
	// every row.
	visible func(alias string) string
	// snapTime converts a snapshot time parameter (Unix nanoseconds) to
	// the snapshot table's write_timestamp; snapNanos reads
	// write_timestamp as Unix nanoseconds.
	snapTime  func(param string) string
	snapNanos string
}

// eventColumns are the columns of event rows e that scanRows reads, with
// writeTime as journal.Repr.Timestamp.
func eventColumns(writeTime string) string {
	return `e.persistence_id, e.seq_nr, e.db_timestamp, ` + writeTime + `, e.event_ser_id, e.event_ser_manifest, e.event_payload, e.writer, e.tags, e.meta_payload, e.slice, e.entity_type`
}

// recoveryColumns are the columns of a recovery's event rows e, with
// writeTime as journal.Repr.Timestamp and entityType as its entity type
// (NULL::text: the one annals.EntityType derives from the id): those of
// eventColumns less the ones a recovery knows from its request (the
// persistence id, and the slice every writer derives from it alike) and
// the db_timestamp it does not return.
func recoveryColumns(writeTime, entityType string) string {
	return `e.seq_nr, ` + writeTime + `, e.event_ser_id, e.event_ser_manifest, e.event_payload, e.writer, e.tags, e.meta_payload, ` + entityType
}

// schemaTables replaces the statements' table names ({journal}, ...) with
// the schema's, {columns} with eventColumns(writeTime) and
// {recoveryColumns} with recoveryColumns(writeTime, entityType).
func schemaTables(schema, writeTime, entityType string) *strings.Replacer {
	return strings.NewReplacer(
		"{journal}", table(schema, "event_journal"),
		"{tag}", table(schema, "event_tag"),
		"{meta}", table(schema, "journal_metadata"),
		"{clock}", table(schema, "journal_clock"),
		"{snapshot}", table(schema, "snapshot"),
		"{offset}", table(schema, "projection_offset_store"),
		"{management}", table(schema, "projection_management"),
		"{columns}", eventColumns(writeTime),
		"{recoveryColumns}", recoveryColumns(writeTime, entityType),
	)
}

// sharedStatements returns the statements the layouts write alike but for
// f; the layout fills the others.
func sharedStatements(r *strings.Replacer, f fragments) statements {
	e, j := f.visible("e"), f.visible("j")
	// afterSnapshot selects the rows of alias a a recovery reads: those
	// after the snapshot recoverySQL's CTE s selected, up to $6.
	afterSnapshot := func(a string) string {
		return a + `.persistence_id = $1 AND ` + a + `.seq_nr > COALESCE((SELECT seq_nr FROM s), 0) AND ` + a + `.seq_nr <= $6` + f.visible(a)
	}
	criteria := `persistence_id = $1 AND seq_nr >= $2 AND seq_nr <= $3 AND write_timestamp >= ` + f.snapTime("$4") + ` AND write_timestamp <= ` + f.snapTime("$5")
	return statements{
		deleteEvents: r.Replace(`DELETE FROM {journal} WHERE persistence_id = $1 AND seq_nr <= $2`),
		replay:       r.Replace(`SELECT {columns} FROM {journal} e WHERE e.persistence_id = $1 AND e.seq_nr >= $2 AND e.seq_nr <= $3` + e + ` ORDER BY e.seq_nr LIMIT $4`),

		// A recovery's events, in recoverySQL: those after the snapshot
		// its CTE s selected (loadSnap's, by the criteria $2–$5), up to $6,
		// at most $7.
		recoverEvents: r.Replace(`SELECT {recoveryColumns} FROM {journal} e WHERE ` + afterSnapshot("e") + ` ORDER BY e.seq_nr LIMIT $7`),
		recoveryFirst: r.Replace(`(SELECT min(n.seq_nr) FROM {journal} n WHERE ` + afterSnapshot("n") + `)`),

		loadSnap: r.Replace(`SELECT seq_nr, ` + f.snapNanos + `, ser_id, ser_manifest, snapshot FROM {snapshot}
	WHERE ` + criteria + `
	ORDER BY seq_nr DESC LIMIT 1`),
		deleteSnap:  r.Replace(`DELETE FROM {snapshot} WHERE persistence_id = $1 AND seq_nr = $2 AND ($3::bigint = 0 OR write_timestamp = ` + f.snapTime("$3") + `)`),
		deleteSnaps: r.Replace(`DELETE FROM {snapshot} WHERE ` + criteria),

		// Offset-ordered queries: rows after a key (db_timestamp, seq_nr,
		// persistence_id), up to an upper db_timestamp, in key order.
		bySlices: r.Replace(`SELECT {columns} FROM {journal} e
	WHERE e.entity_type = $1 AND e.slice BETWEEN $2 AND $3` + e + `
	AND (e.db_timestamp, e.seq_nr, e.persistence_id) > ($4, $5, $6) AND e.db_timestamp <= $7
	ORDER BY e.db_timestamp, e.seq_nr, e.persistence_id LIMIT $8`),
		byType: r.Replace(`SELECT {columns} FROM {journal} e
	WHERE e.entity_type = $1` + e + `
	AND (e.db_timestamp, e.seq_nr, e.persistence_id) > ($2, $3, $4) AND e.db_timestamp <= $5
	ORDER BY e.db_timestamp, e.seq_nr, e.persistence_id LIMIT $6`),
		// Every type: the stored types found one index probe each (a
		// recursive loose scan of the entity type index), a page per type
		// read in index order, and the pages merged: a page costs the
		// number of types times the page size, however long the journal.
		byAnyType: r.Replace(`WITH RECURSIVE types(t) AS (
	SELECT min(entity_type) FROM {journal}
	UNION ALL
	SELECT (SELECT min(entity_type) FROM {journal} WHERE entity_type > types.t) FROM types WHERE types.t IS NOT NULL
)
SELECT {columns} FROM types, LATERAL (
	SELECT * FROM {journal} j WHERE j.entity_type = types.t` + j + `
	AND (j.db_timestamp, j.seq_nr, j.persistence_id) > ($1, $2, $3) AND j.db_timestamp <= $4
	ORDER BY j.db_timestamp, j.seq_nr, j.persistence_id LIMIT $5) e
	ORDER BY e.db_timestamp, e.seq_nr, e.persistence_id LIMIT $5`),
		earlier: r.Replace(`SELECT {columns} FROM {journal} e
	WHERE e.persistence_id = ANY($1) AND e.db_timestamp >= $2 AND e.db_timestamp <= $3` + e + `
	ORDER BY e.persistence_id, e.seq_nr`),

		setPaused: r.Replace(`INSERT INTO {management} (projection_name, projection_key, paused, last_updated) VALUES ($1, $2, $3, $4)
	ON CONFLICT (projection_name, projection_key) DO UPDATE SET paused = excluded.paused, last_updated = excluded.last_updated`),
	}
}

// idsSQL is the start of a persistenceIDs statement: ids, the ids of the
// journal after $2 (of entity type $1, or any when it is ”), in order, by
// a recursive loose scan of the primary key (one index probe per id,
// wherever the page is; a DISTINCT reads every event row of every later
// id). The layout selects at most $3 of them.
const idsSQL = `WITH RECURSIVE ids(pid) AS (
	(SELECT persistence_id FROM {journal} WHERE persistence_id > $2 AND ($1 = '' OR entity_type = $1) ORDER BY persistence_id LIMIT 1)
	UNION ALL
	SELECT (SELECT j.persistence_id FROM {journal} j WHERE j.persistence_id > ids.pid AND ($1 = '' OR j.entity_type = $1)
		ORDER BY j.persistence_id LIMIT 1)
	FROM ids WHERE ids.pid IS NOT NULL
)
`

// recoverySQL returns the statement that reads a recovery, made of st's
// loadSnap (as its CTE s), recoverEvents (its parameters are
// recoverEvents'), highest and recoveryFirst. Its rows are the events after
// the snapshot, one row each, or one row without an event when there is
// none; every row has the columns of recoveryColumns (NULL without an
// event) and then the highest number, and the snapshot's number, Unix
// nanoseconds, serializer and manifest (NULL without one), and its
// payload on one row only: the one without an event, or the first event's.
//
// The subqueries are PostgreSQL init plans, each run at most once: the
// first event's number (one more index probe) only when a snapshot is
// selected and a row other than the one right after it is evaluated. One
// statement reads all of it from one snapshot of the database, so the
// parts agree without a transaction: on a write between them a batch of
// statements could read an older snapshot row and events after a younger
// one.
func recoverySQL(st statements) string {
	return `WITH s(seq_nr, nanos, ser_id, ser_manifest, snapshot) AS (` + st.loadSnap + `)
SELECT e.*, (` + st.highest + `), s.seq_nr, s.nanos, s.ser_id, s.ser_manifest,
	CASE WHEN s.seq_nr IS NULL THEN NULL
		WHEN e.seq_nr IS NULL OR e.seq_nr = s.seq_nr + 1 OR e.seq_nr = ` + st.recoveryFirst + ` THEN s.snapshot END
FROM (SELECT) o LEFT JOIN s ON true LEFT JOIN LATERAL (` + st.recoverEvents + `) e ON true`
}

// recoveryOpenSQL returns the statement of a recovery with no
// ToSequenceNr, in a layout with st.deletedTable: recoverySQL's rows,
// except that they read no highest number. It leaves out recoverySQL's
// probes of the highest event's number and of the first event's after the
// snapshot, which the events it reads tell, and joins the snapshot and
// the deleted number rather than reading them in subqueries
// (docs/performance.md: a PostgreSQL plan pays for a subquery's nodes
// whether it runs or not).
//   - The events read are recoverFrom's: from the snapshot's number, so
//     that the event the snapshot was taken at, when it is kept, comes
//     first (the marker: not an event of the recovery); at most $6 rows,
//     the marker's included (MaxEvents + 1).
//   - The column of the highest number holds the deleted number (0 for
//     none) instead.
//   - The snapshot's payload is on the row without an event, on the
//     marker's (event 1's for a snapshot at 0), or, when the deleted
//     number reaches the snapshot's (its own event was deleted), on the
//     event after the deleted number; with none of these, on no row.
//
// scanRecovery derives the highest number from the events and the deleted
// number, and says what it cannot (see recoveryGap).
func recoveryOpenSQL(st statements) string {
	return `SELECT e.*, COALESCE(m.seq_nr, 0), s.seq_nr, s.nanos, s.ser_id, s.ser_manifest,
	CASE WHEN e.seq_nr IS NULL OR e.seq_nr <= GREATEST(s.seq_nr, 1) OR (e.seq_nr = m.seq_nr + 1 AND m.seq_nr >= s.seq_nr) THEN s.snapshot END
FROM (SELECT) o LEFT JOIN ` + st.deletedTable + ` m ON m.persistence_id = $1
	LEFT JOIN LATERAL (` + st.loadSnap + `) s(seq_nr, nanos, ser_id, ser_manifest, snapshot) ON true
	LEFT JOIN LATERAL (` + st.recoverFrom + `) e ON true`
}
