package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/offsets"
	"github.com/annals-go/annals/query"
)

// annalsLayout is Annals' own layout (LayoutAnnals): the tables of
// migrations, tags in event_tag, the highest number of deleted events in
// journal_metadata, several snapshots per id with Unix-nanosecond times,
// and projection offsets as JSON. Its admin operations are in
// annals_admin.go, its schema in annals_schema.go.
type annalsLayout struct {
	s   *Store
	sql annalsStatements
}

// annalsStatements are the statements of Annals' layout's own operations:
// DeleteTo's and the projection offsets'.
type annalsStatements struct {
	deleteTo, loadOffset, saveOffset, resetOffset string
}

// annalsWriteTime is the column journal.Repr.Timestamp reads in Annals'
// layout, and annalsColumns its event columns (see eventColumns).
const annalsWriteTime = "e.write_timestamp"

// annalsRecoveryType is the entity type of a recovery's event rows in
// Annals' layout (see recoveryColumns): none read, since every row of the
// layout has annals.EntityType of its id (Write and Baseline.InsertRaw
// derive it so).
const annalsRecoveryType = "NULL::text"

var annalsColumns = eventColumns(annalsWriteTime)

func newAnnalsLayout(s *Store) *annalsLayout {
	r := schemaTables(s.cfg.schema, annalsWriteTime, annalsRecoveryType)
	return &annalsLayout{s: s, sql: annalsStatements{
		// One statement, so one snapshot of the database: the number
		// recorded is the highest of the events it deletes, and the
		// tags it deletes are theirs. As separate statements (read
		// committed), an event committed between them could be deleted
		// without being counted, or keep its event and lose its tags.
		deleteTo: r.Replace(`WITH d AS (DELETE FROM {journal} WHERE persistence_id = $1 AND seq_nr <= $3 RETURNING seq_nr),
	t AS (DELETE FROM {tag} WHERE persistence_id = $1 AND seq_nr IN (SELECT seq_nr FROM d))
	INSERT INTO {meta} AS m (persistence_id, entity_type, seq_nr)
	SELECT $1, $2, max(seq_nr) FROM d HAVING max(seq_nr) IS NOT NULL
	ON CONFLICT (persistence_id) DO UPDATE SET seq_nr = GREATEST(m.seq_nr, excluded.seq_nr)`),
		loadOffset: r.Replace(`SELECT (SELECT current_offset FROM {offset} WHERE projection_name = $1 AND projection_key = $2),
	(SELECT paused FROM {management} WHERE projection_name = $1 AND projection_key = $2)`),
		saveOffset: r.Replace(`INSERT INTO {offset} (projection_name, projection_key, current_offset, manifest, mergeable, last_updated)
	VALUES ($1, $2, $3, 'annals-json', false, $4)
	ON CONFLICT (projection_name, projection_key) DO UPDATE SET current_offset = excluded.current_offset, last_updated = excluded.last_updated`),
		resetOffset: r.Replace(`DELETE FROM {offset} WHERE projection_name = $1 AND projection_key = $2`),
	}}
}

// configure keeps the configuration: both orderings are offered.
func (l *annalsLayout) configure(*config) error { return nil }

func (l *annalsLayout) statements() statements {
	r := schemaTables(l.s.cfg.schema, annalsWriteTime, annalsRecoveryType)
	st := sharedStatements(r, fragments{
		visible:   func(string) string { return "" },
		snapTime:  func(param string) string { return param },
		snapNanos: "write_timestamp",
	})
	// Atomic writes in one statement: rows carry their id, each stamped
	// with a db_timestamp of its own (see insertSQL), and their tags.
	notify := l.s.cfg.notifyParam(annalsInsertParams(l.s.cfg.ordering))
	st.insert = r.Replace(insertSQL(l.s.cfg.ordering, l.s.cfg.writeClock(), false, notify))
	st.insertTagged = r.Replace(insertSQL(l.s.cfg.ordering, l.s.cfg.writeClock(), true, notify))
	// The highest number: the greater of the highest stored event's and
	// the highest deleted one's (journal_metadata). Both are read: a
	// stored event may be below the deleted number (a write of a number a
	// deletion freed, or a write of a lower number committing after a
	// deletion that took a higher one), and the highest number never
	// decreases (journal.Journal's contract).
	st.deletedTable = r.Replace(`{meta}`)
	// The events of recoveryOpenSQL: from the number of its snapshot s
	// (the event it was taken at, when it is kept), at most $6.
	st.recoverFrom = r.Replace(`SELECT {recoveryColumns} FROM {journal} e WHERE e.persistence_id = $1 AND e.seq_nr >= COALESCE(s.seq_nr, 1) ORDER BY e.seq_nr LIMIT $6`)
	st.highest = r.Replace(`SELECT COALESCE(GREATEST(
	(SELECT max(seq_nr) FROM {journal} WHERE persistence_id = $1),
	(SELECT seq_nr FROM {meta} WHERE persistence_id = $1)), 0)`)
	st.saveSnap = r.Replace(`INSERT INTO {snapshot} (slice, entity_type, persistence_id, seq_nr, write_timestamp, ser_id, ser_manifest, snapshot)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
	ON CONFLICT (persistence_id, seq_nr) DO UPDATE SET write_timestamp = excluded.write_timestamp, ser_id = excluded.ser_id,
		ser_manifest = excluded.ser_manifest, snapshot = excluded.snapshot`)
	// Events by tag: the tag table's key, joined to the events.
	st.byTag = r.Replace(`SELECT {columns} FROM {tag} t JOIN {journal} e ON e.persistence_id = t.persistence_id AND e.seq_nr = t.seq_nr
	WHERE t.tag = $1
	AND (t.db_timestamp, t.seq_nr, t.persistence_id) > ($2, $3, $4) AND t.db_timestamp <= $5
	ORDER BY t.db_timestamp, t.seq_nr, t.persistence_id LIMIT $6`)
	st.earlierTagged = r.Replace(`SELECT {columns} FROM {tag} t JOIN {journal} e ON e.persistence_id = t.persistence_id AND e.seq_nr = t.seq_nr
	WHERE t.tag = $4 AND t.persistence_id = ANY($1) AND t.db_timestamp >= $2 AND t.db_timestamp <= $3
	ORDER BY t.persistence_id, t.seq_nr`)
	// The journal's ids, with those whose events were all deleted from
	// the metadata table.
	st.persistenceIDs = r.Replace(idsSQL + `SELECT pid FROM (
	(SELECT pid FROM ids WHERE pid IS NOT NULL LIMIT $3)
	UNION
	(SELECT persistence_id FROM {meta} WHERE persistence_id > $2 AND ($1 = '' OR entity_type = $1) ORDER BY persistence_id LIMIT $3)
) u ORDER BY pid LIMIT $3`)
	return st
}

// insertSQL is the statement that inserts the events of atomic writes,
// given as parallel arrays ($1–$11: id, seq, write time, serializer,
// manifest, payload, writer, tags as JSON, metadata, slice, entity type);
// when tagged, it inserts their tags too, and otherwise stores no tags
// (every event of the call has none). With notify it sends the write's
// NOTIFY (notifySQL; the channel is the parameter after the others).
//
// Every row gets a db_timestamp of its own, at least 1µs apart from every
// other row of the call, so that the rows of a call (up to 1,000 atomic
// writes of different ids under group commit) do not share one: Pekko's
// by-slices query fails when more events than its buffer share one
// timestamp, a timestamp offset lists every id seen at its timestamp, and
// equal timestamps make every index insertion compare persistence ids,
// which costs more than the insertion itself:
//   - CommitOrder: from the schema's clock row, 1µs per row of the
//     statement, which the statement moves past the last timestamp it
//     assigns. The row's lock, held to the commit, orders the writers:
//     timestamps grow with commits across all ids, also when the server's
//     clock steps back.
//   - TimestampOrder: stampSQL's, from clock (the transaction's time) and,
//     so that they grow per id, each row's floor ($12: its id's previous
//     event's db_timestamp plus 1µs per event, NULL for an id with none;
//     see Journal.floors; the events of one id adjacent, in order), $13,
//     $14: stampSQL's rows before and rows in all. The statement reads no
//     other row, and returns clock (see stampedInsert).
func insertSQL(o Ordering, clock string, tagged bool, notify string) string {
	insert := func(ts, arrays, names string) string {
		return `INSERT INTO {journal} (slice, entity_type, persistence_id, seq_nr, db_timestamp, write_timestamp, event_ser_id, event_ser_manifest, event_payload, writer, tags, meta_payload)
	SELECT i.slice, i.entity_type, i.pid, i.seq_nr, ` + ts + `,
		i.wts, i.ser_id, i.manifest, i.payload, i.writer, ` + tagsColumn(tagged) + `, i.meta
	` + writesSQL(arrays, names)
	}
	var others []string // the tags' insert, reading ins's rows
	returning := ""
	if tagged {
		others = []string{`INSERT INTO {tag} (tag, db_timestamp, seq_nr, persistence_id)
	SELECT DISTINCT t.tag, ins.db_timestamp, ins.seq_nr, ins.persistence_id FROM ins, unnest(ins.tags) AS t(tag)`}
		returning = `
	RETURNING persistence_id, seq_nr, db_timestamp, tags`
	}
	if o == TimestampOrder {
		return stampedInsert(clock, notify, insert(stampSQL(clock, "$13::bigint", "$14::bigint"), `, $12::timestamptz[]`, `, floor`)+returning, others...)
	}
	base := `base AS (
	UPDATE {clock} SET db_timestamp = GREATEST(statement_timestamp(), db_timestamp + interval '1 microsecond') + (cardinality($1::text[]) - 1) * interval '1 microsecond'
	WHERE id = 1
	RETURNING db_timestamp - (cardinality($1::text[]) - 1) * interval '1 microsecond' AS ts
)`
	return chainedInsert([]string{base}, insert(`(SELECT ts FROM base) + (i.n - 1) * interval '1 microsecond'`, ``, ``)+returning, others, "", notify)
}

// writeArgs returns insertSQL's arguments: the floors in TimestampOrder
// only.
func (l *annalsLayout) writeArgs(writes []journal.AtomicWrite, pending []int, now time.Time, floors stampCells, before, total int64) ([]any, bool) {
	cols, tagged := insertArgs(writes, pending, now)
	if l.s.cfg.ordering == TimestampOrder {
		cols = append(cols, floors, before, total)
	}
	return cols, tagged
}

// annalsInsertParams is how many parameters insertSQL's statements take
// before the NOTIFY channel's: insertArgs' eleven, and TimestampOrder's
// floors, rows before and rows in all.
func annalsInsertParams(o Ordering) int {
	if o == TimestampOrder {
		return 14
	}
	return 11
}

// deleteTo deletes the events up to to and their tags, and records the
// highest number among them in journal_metadata, in one statement.
func (l *annalsLayout) deleteTo(ctx context.Context, persistenceID string, to int64) error {
	if _, err := l.s.pool.Exec(ctx, l.sql.deleteTo, persistenceID, annals.EntityType(persistenceID), to); err != nil {
		return l.s.errs.Map(ctx, "delete", err, journal.ErrClosed)
	}
	return nil
}

// loadOffset reads the offset as JSON, and the paused flag.
func (l *annalsLayout) loadOffset(ctx context.Context, id offsets.ID) (offsets.State, error) {
	var st offsets.State
	var raw *string
	var paused *bool
	if err := l.s.pool.QueryRow(ctx, l.sql.loadOffset, id.Name, id.Key).Scan(&raw, &paused); err != nil {
		return st, l.s.errs.Map(ctx, "projection load", err, journal.ErrClosed)
	}
	if raw != nil {
		if err := json.Unmarshal([]byte(*raw), &st.Offset); err != nil {
			return st, fmt.Errorf("postgres: projection %s: stored offset: %w", id, err)
		}
	}
	st.Paused = paused != nil && *paused
	return st, nil
}

// saveOffset stores the offset as JSON.
func (l *annalsLayout) saveOffset(ctx context.Context, tx pgx.Tx, id offsets.ID, o query.Offset) error {
	b, err := json.Marshal(o)
	if err != nil {
		return fmt.Errorf("postgres: projection %s: encode offset: %w", id, err)
	}
	if tx != nil {
		_, err = tx.Exec(ctx, l.sql.saveOffset, id.Name, id.Key, string(b), nowMillis())
	} else {
		_, err = l.s.pool.Exec(ctx, l.sql.saveOffset, id.Name, id.Key, string(b), nowMillis())
	}
	if err != nil {
		return l.s.errs.Map(ctx, "projection save offset", err, journal.ErrClosed)
	}
	return nil
}

// resetOffset deletes the offset's row, whether or not ctx ends.
func (l *annalsLayout) resetOffset(ctx context.Context, id offsets.ID) error {
	if _, err := l.s.pool.Exec(context.WithoutCancel(ctx), l.sql.resetOffset, id.Name, id.Key); err != nil {
		return l.s.errs.Map(ctx, "projection reset", err, journal.ErrClosed)
	}
	return nil
}
