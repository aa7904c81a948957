package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/journal"
)

// statements are the store's SQL, with the schema spliced in once at Open
// (as a quoted identifier that passed ValidIdentifier).
type statements struct {
	insert, insertTagged                                       string
	highest, deleteMeta, deleteTags, deleteEvents, replay      string
	recoverEvents                                              string
	loadSnap, saveSnap, deleteSnap, deleteSnaps                string
	bySlices, byTag, byType, byAnyType, earlier, earlierTagged string
	persistenceIDs                                             string
	loadOffset, saveOffset, setPaused, resetOffset             string
}

const eventColumns = `e.persistence_id, e.seq_nr, e.db_timestamp, e.write_timestamp, e.event_ser_id, e.event_ser_manifest, e.event_payload, e.writer, e.tags, e.meta_payload, e.slice, e.entity_type`

func newStatements(schema string, ordering Ordering) statements {
	r := strings.NewReplacer(
		"{journal}", table(schema, "event_journal"),
		"{tag}", table(schema, "event_tag"),
		"{meta}", table(schema, "journal_metadata"),
		"{clock}", table(schema, "journal_clock"),
		"{snapshot}", table(schema, "snapshot"),
		"{offset}", table(schema, "projection_offset_store"),
		"{management}", table(schema, "projection_management"),
		"{columns}", eventColumns,
	)
	return statements{
		// Atomic writes in one statement: rows carry their id, each
		// stamped with a db_timestamp of its own (see insertSQL), and
		// their tags.
		insert:       r.Replace(insertSQL(ordering, false)),
		insertTagged: r.Replace(insertSQL(ordering, true)),
		highest: r.Replace(`SELECT COALESCE(GREATEST(
	(SELECT max(seq_nr) FROM {journal} WHERE persistence_id = $1),
	(SELECT seq_nr FROM {meta} WHERE persistence_id = $1)), 0)`),
		deleteMeta: r.Replace(`INSERT INTO {meta} AS m (persistence_id, entity_type, seq_nr)
	SELECT $1, $2, max(seq_nr) FROM {journal} WHERE persistence_id = $1 AND seq_nr <= $3 HAVING max(seq_nr) IS NOT NULL
	ON CONFLICT (persistence_id) DO UPDATE SET seq_nr = GREATEST(m.seq_nr, excluded.seq_nr)`),
		deleteTags:   r.Replace(`DELETE FROM {tag} WHERE persistence_id = $1 AND seq_nr <= $2`),
		deleteEvents: r.Replace(`DELETE FROM {journal} WHERE persistence_id = $1 AND seq_nr <= $2`),
		replay:       r.Replace(`SELECT {columns} FROM {journal} e WHERE e.persistence_id = $1 AND e.seq_nr >= $2 AND e.seq_nr <= $3 ORDER BY e.seq_nr LIMIT $4`),

		// A recovery's events: those after the youngest snapshot the
		// criteria ($2–$5, as loadSnap's) select, up to $6, at most $7.
		recoverEvents: r.Replace(`SELECT {columns} FROM {journal} e WHERE e.persistence_id = $1
	AND e.seq_nr > COALESCE((SELECT max(seq_nr) FROM {snapshot}
		WHERE persistence_id = $1 AND seq_nr >= $2 AND seq_nr <= $3 AND write_timestamp >= $4 AND write_timestamp <= $5), 0)
	AND e.seq_nr <= $6 ORDER BY e.seq_nr LIMIT $7`),

		loadSnap: r.Replace(`SELECT seq_nr, write_timestamp, ser_id, ser_manifest, snapshot FROM {snapshot}
	WHERE persistence_id = $1 AND seq_nr >= $2 AND seq_nr <= $3 AND write_timestamp >= $4 AND write_timestamp <= $5
	ORDER BY seq_nr DESC LIMIT 1`),
		saveSnap: r.Replace(`INSERT INTO {snapshot} (slice, entity_type, persistence_id, seq_nr, write_timestamp, ser_id, ser_manifest, snapshot)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
	ON CONFLICT (persistence_id, seq_nr) DO UPDATE SET write_timestamp = excluded.write_timestamp, ser_id = excluded.ser_id,
		ser_manifest = excluded.ser_manifest, snapshot = excluded.snapshot`),
		deleteSnap: r.Replace(`DELETE FROM {snapshot} WHERE persistence_id = $1 AND seq_nr = $2 AND ($3::bigint = 0 OR write_timestamp = $3)`),
		deleteSnaps: r.Replace(`DELETE FROM {snapshot}
	WHERE persistence_id = $1 AND seq_nr >= $2 AND seq_nr <= $3 AND write_timestamp >= $4 AND write_timestamp <= $5`),

		// Offset-ordered queries: rows after a key (db_timestamp, seq_nr,
		// persistence_id), up to an upper db_timestamp, in key order.
		bySlices: r.Replace(`SELECT {columns} FROM {journal} e
	WHERE e.entity_type = $1 AND e.slice BETWEEN $2 AND $3
	AND (e.db_timestamp, e.seq_nr, e.persistence_id) > ($4, $5, $6) AND e.db_timestamp <= $7
	ORDER BY e.db_timestamp, e.seq_nr, e.persistence_id LIMIT $8`),
		byTag: r.Replace(`SELECT {columns} FROM {tag} t JOIN {journal} e ON e.persistence_id = t.persistence_id AND e.seq_nr = t.seq_nr
	WHERE t.tag = $1
	AND (t.db_timestamp, t.seq_nr, t.persistence_id) > ($2, $3, $4) AND t.db_timestamp <= $5
	ORDER BY t.db_timestamp, t.seq_nr, t.persistence_id LIMIT $6`),
		byType: r.Replace(`SELECT {columns} FROM {journal} e
	WHERE e.entity_type = $1
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
	SELECT * FROM {journal} j WHERE j.entity_type = types.t
	AND (j.db_timestamp, j.seq_nr, j.persistence_id) > ($1, $2, $3) AND j.db_timestamp <= $4
	ORDER BY j.db_timestamp, j.seq_nr, j.persistence_id LIMIT $5) e
	ORDER BY e.db_timestamp, e.seq_nr, e.persistence_id LIMIT $5`),
		earlier: r.Replace(`SELECT {columns} FROM {journal} e
	WHERE e.persistence_id = ANY($1) AND e.db_timestamp >= $2 AND e.db_timestamp <= $3
	ORDER BY e.persistence_id, e.seq_nr`),
		earlierTagged: r.Replace(`SELECT {columns} FROM {tag} t JOIN {journal} e ON e.persistence_id = t.persistence_id AND e.seq_nr = t.seq_nr
	WHERE t.tag = $4 AND t.persistence_id = ANY($1) AND t.db_timestamp >= $2 AND t.db_timestamp <= $3
	ORDER BY t.persistence_id, t.seq_nr`),
		// Ids after $2, in order: a recursive loose scan of the primary
		// key (one index probe per id, wherever the page is; a DISTINCT
		// read every event row of every later id), with the ids whose
		// events were all deleted from the metadata table.
		persistenceIDs: r.Replace(`WITH RECURSIVE ids(pid) AS (
	(SELECT persistence_id FROM {journal} WHERE persistence_id > $2 AND ($1 = '' OR entity_type = $1) ORDER BY persistence_id LIMIT 1)
	UNION ALL
	SELECT (SELECT j.persistence_id FROM {journal} j WHERE j.persistence_id > ids.pid AND ($1 = '' OR j.entity_type = $1)
		ORDER BY j.persistence_id LIMIT 1)
	FROM ids WHERE ids.pid IS NOT NULL
)
SELECT pid FROM (
	(SELECT pid FROM ids WHERE pid IS NOT NULL LIMIT $3)
	UNION
	(SELECT persistence_id FROM {meta} WHERE persistence_id > $2 AND ($1 = '' OR entity_type = $1) ORDER BY persistence_id LIMIT $3)
) u ORDER BY pid LIMIT $3`),

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

// insertSQL is the statement that inserts the events of atomic writes,
// given as parallel arrays ($1–$11: id, seq, write time, serializer,
// manifest, payload, writer, tags as JSON, metadata, slice, entity type);
// when tagged, it inserts their tags too. In TimestampOrder the events of
// one id are adjacent, in order (see insertArgs).
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
//   - TimestampOrder: stampSQL's, from the transaction's time and, so
//     that they grow per id, its id's latest stored event plus 1µs per
//     event (ord, $12: the event's position among its id's events in the
//     statement; $13: the distinct ids, whose latest events are read once,
//     before any row is inserted; $14: each row's id as an index into
//     $13; $15, $16: stampSQL's rows before and rows in all).
func insertSQL(o Ordering, tagged bool) string {
	base := `WITH base AS (
	UPDATE {clock} SET db_timestamp = GREATEST(statement_timestamp(), db_timestamp + interval '1 microsecond') + (cardinality($1::text[]) - 1) * interval '1 microsecond'
	WHERE id = 1
	RETURNING db_timestamp - (cardinality($1::text[]) - 1) * interval '1 microsecond' AS ts
)`
	ts, arrays, names := `(SELECT ts FROM base) + (i.n - 1) * interval '1 microsecond'`, ``, ``
	if o == TimestampOrder {
		base = `WITH base AS MATERIALIZED (
	SELECT array_agg(COALESCE((SELECT e.db_timestamp FROM {journal} e WHERE e.persistence_id = p.pid ORDER BY e.seq_nr DESC LIMIT 1), '-infinity')
		ORDER BY p.idx) AS latest
	FROM unnest($13::text[]) WITH ORDINALITY AS p(pid, idx)
)`
		ts = stampSQL(`(SELECT latest FROM base)[i.pidx] + i.ord * interval '1 microsecond'`, "$15::bigint", "$16::bigint")
		arrays, names = `, $12::int[], $14::int[]`, `, ord, pidx`
	}
	insert := `INSERT INTO {journal} (slice, entity_type, persistence_id, seq_nr, db_timestamp, write_timestamp, event_ser_id, event_ser_manifest, event_payload, writer, tags, meta_payload)
	SELECT i.slice, i.entity_type, i.pid, i.seq_nr, ` + ts + `,
		i.wts, i.ser_id, i.manifest, i.payload, i.writer,
		CASE WHEN i.tags IS NULL THEN NULL ELSE ARRAY(SELECT jsonb_array_elements_text(i.tags::jsonb)) END, i.meta
	FROM unnest($1::text[], $2::bigint[], $3::timestamptz[], $4::int[], $5::text[], $6::bytea[], $7::text[], $8::text[], $9::bytea[], $10::int[], $11::text[]` + arrays + `)
		WITH ORDINALITY AS i(pid, seq_nr, wts, ser_id, manifest, payload, writer, tags, meta, slice, entity_type` + names + `, n)`
	if !tagged {
		return base + "\n" + insert
	}
	return base + `, ins AS (
	` + insert + `
	RETURNING persistence_id, seq_nr, db_timestamp, tags
)
INSERT INTO {tag} (tag, db_timestamp, seq_nr, persistence_id)
	SELECT DISTINCT t.tag, ins.db_timestamp, ins.seq_nr, ins.persistence_id FROM ins, unnest(ins.tags) AS t(tag)`
}

// stampSQL is the db_timestamp of row i.n of an insert statement where
// the id's rows grow per id from floor (SQL: the earliest timestamp the
// row's id allows, 1µs per event past its previous one), the statement
// follows before rows of its transaction, and the transaction's
// statements insert total rows (SQL of bigint parameters; a Write call
// sends one statement, or one per atomic write to find one the server
// refuses).
//
// Row p of the transaction (p = before + i.n - 1, from 0) gets
// transaction_timestamp() + p µs, or, when floor is later, the first
// timestamp at or after floor that is p µs modulo total after
// transaction_timestamp(). So:
//   - no two rows of a call share a timestamp: each is alone in its class
//     modulo total;
//   - no row is earlier than its floor, and an id's rows grow with its
//     sequence numbers: its rows are adjacent, and along them the floor
//     and p both grow by 1, so they take floor or p alike, 1µs apart;
//     across statements the floor is read from the rows stored before;
//   - a row moves less than total µs past its floor, and only a row whose
//     id's previous event is later than the clock moves: one id ahead of
//     the clock carries no other with it.
func stampSQL(floor, before, total string) string {
	at := `transaction_timestamp() + (` + before + ` + i.n - 1) * interval '1 microsecond'`
	return `CASE WHEN ` + floor + ` > ` + at + ` THEN ` + floor + ` + (((` + before + ` + i.n - 1
		- (extract(epoch FROM ` + floor + ` - transaction_timestamp()) * 1000000)::bigint) % ` + total + ` + ` + total + `) % ` + total + `) * interval '1 microsecond'
		ELSE ` + at + ` END`
}

// Journal is the store's event journal.
type Journal struct{ s *Store }

var _ journal.Journal = (*Journal)(nil)

// Journal returns the store's journal.
func (s *Store) Journal() *Journal { return &Journal{s: s} }

// Close closes the store.
func (j *Journal) Close() error { return j.s.Close() }

// insertColumns are the arguments of an insert statement for some atomic
// writes: the eleven columns, then, when asked for per id, each event's
// position among its id's events in the statement (ords) and each row's
// id as a 1-based index into the distinct ids (pidx, index).
type insertColumns struct {
	cols   []any
	ords   []int32
	pidx   []int32
	index  map[string]int32
	tagged bool // an event has tags
}

// distinct returns the distinct ids, in order of first appearance.
func (c insertColumns) distinct() []string {
	ids := make([]string, len(c.index))
	for pid, at := range c.index {
		ids[at-1] = pid
	}
	return ids
}

// insertArgs returns the arguments of the insert statements for the
// atomic writes writes[pending...]. With perID, the writes of each id are
// made adjacent, in their order, the ids in order of first appearance (as
// stampSQL needs), and the per-id columns are filled.
func insertArgs(perID bool, writes []journal.AtomicWrite, pending []int, now time.Time) insertColumns {
	n := 0
	for _, i := range pending {
		n += len(writes[i].Events)
	}
	var c insertColumns
	if perID {
		pending, c.index = groupByID(writes, pending)
		c.ords, c.pidx = make([]int32, 0, n), make([]int32, 0, n)
	}
	pids, seqs, wts, serIDs := make([]string, 0, n), make([]int64, 0, n), make([]time.Time, 0, n), make([]int32, 0, n)
	manifests, payloads, writers := make([]string, 0, n), make([][]byte, 0, n), make([]string, 0, n)
	tags, metas, slices, types := make([]*string, 0, n), make([][]byte, 0, n), make([]int32, 0, n), make([]string, 0, n)
	var last string // the id of the row before
	var ord int32   // its position among its id's events
	for _, i := range pending {
		w := writes[i]
		slice, et := int32(annals.Slice(w.PersistenceID)), annals.EntityType(w.PersistenceID)
		if w.PersistenceID != last {
			last, ord = w.PersistenceID, 0
		}
		for _, e := range w.Events {
			if perID {
				ord++
				c.ords, c.pidx = append(c.ords, ord), append(c.pidx, c.index[w.PersistenceID])
			}
			ts := e.Timestamp
			if ts.IsZero() {
				ts = now
			}
			payload := e.Payload
			if payload == nil {
				payload = []byte{}
			}
			var tag *string
			if len(e.Tags) > 0 {
				b, _ := json.Marshal(e.Tags) // strings always marshal
				t := string(b)
				tag, c.tagged = &t, true
			}
			pids, seqs, wts, serIDs = append(pids, w.PersistenceID), append(seqs, e.SequenceNr), append(wts, ts), append(serIDs, e.SerializerID)
			manifests, payloads, writers = append(manifests, e.Manifest), append(payloads, payload), append(writers, e.WriterID)
			tags, metas, slices, types = append(tags, tag), append(metas, e.Metadata), append(slices, slice), append(types, et)
		}
	}
	c.cols = []any{pids, seqs, wts, serIDs, manifests, payloads, writers, tags, metas, slices, types}
	return c
}

// groupByID returns pending (indexes into writes) with the writes of each
// id adjacent, in their order, the ids in order of first appearance
// (pending itself when no id has two writes), and each id's 1-based
// position among the ids.
func groupByID(writes []journal.AtomicWrite, pending []int) ([]int, map[string]int32) {
	index := make(map[string]int32, len(pending))
	var counts []int // writes per id
	for _, i := range pending {
		at, ok := index[writes[i].PersistenceID]
		if !ok {
			at = int32(len(counts) + 1)
			index[writes[i].PersistenceID] = at
			counts = append(counts, 0)
		}
		counts[at-1]++
	}
	if len(counts) == len(pending) {
		return pending, index
	}
	next := make([]int, len(counts)) // where each id's next write goes
	for k := 1; k < len(counts); k++ {
		next[k] = next[k-1] + counts[k-1]
	}
	grouped := make([]int, len(pending))
	for _, i := range pending {
		at := index[writes[i].PersistenceID] - 1
		grouped[next[at]] = i
		next[at]++
	}
	return grouped, index
}

// conflictKey reads the (persistence id, sequence number) of a unique
// violation's detail: Key (persistence_id, seq_nr)=(<id>, <seq>) already exists.
func conflictKey(detail string) (string, int64, bool) {
	const prefix, suffix = "Key (persistence_id, seq_nr)=(", ") already exists."
	if !strings.HasPrefix(detail, prefix) || !strings.HasSuffix(detail, suffix) {
		return "", 0, false
	}
	key := detail[len(prefix) : len(detail)-len(suffix)]
	comma := strings.LastIndex(key, ", ")
	if comma < 0 {
		return "", 0, false
	}
	seq, err := strconv.ParseInt(key[comma+2:], 10, 64)
	return key[:comma], seq, err == nil
}

// Write implements journal.Journal. The accepted atomic writes of the call
// are sent in one statement, one transaction, one round trip. When one of
// them collides with another writer's (id, seq), the transaction rolls
// back; that write is reported as a *journal.ConflictError and the others
// are sent again. When the server refuses data it cannot attribute to one
// atomic write from its error, the call is sent again as one statement per
// atomic write, to find which.
func (j *Journal) Write(ctx context.Context, writes []journal.AtomicWrite) ([]error, error) {
	if j.s.isClosed() {
		return nil, journal.ErrClosed
	}
	results := make([]error, len(writes))
	rejected := false
	var pending []int
	for i, w := range writes {
		if err := j.check(w); err != nil {
			results[i], rejected = err, true
			continue
		}
		pending = append(pending, i)
	}
	now := time.Now()
	each := false // one statement per atomic write
	for len(pending) > 0 {
		failed, err := j.send(ctx, writes, pending, now, each)
		if err != nil {
			return nil, err
		}
		if failed.index == unattributed {
			each = true
			continue
		}
		if failed.index < 0 {
			break
		}
		results[pending[failed.index]], rejected = failed.err, true
		pending = append(pending[:failed.index], pending[failed.index+1:]...)
	}
	if !rejected {
		return nil, nil
	}
	return results, nil
}

func (j *Journal) check(w journal.AtomicWrite) error {
	if err := journal.CheckAtomicWrite(w); err != nil {
		return err
	}
	return journal.CheckPayloads(w, j.s.cfg.maxPayload)
}

type failedWrite struct {
	index int // into pending; -1 when every write was stored, or unattributed
	err   error
}

// unattributed is the index of a failure of the one-statement insert that
// names no atomic write.
const unattributed = -2

// send writes the atomic writes writes[pending...] in one transaction: in
// one statement, or one statement per atomic write when each. A failure
// that belongs to one atomic write (a conflict, data the server refuses) is
// returned as failed; any other error means the outcome is unknown.
func (j *Journal) send(ctx context.Context, writes []journal.AtomicWrite, pending []int, now time.Time, each bool) (failedWrite, error) {
	s := j.s
	b := &pgx.Batch{}
	inserts := 1
	var total, before int64 // rows of the transaction, of the statements queued
	for _, i := range pending {
		total += int64(len(writes[i].Events))
	}
	queue := func(pending []int) {
		args, tagged := s.writeArgs(writes, pending, now, before, total)
		if tagged {
			b.Queue(s.sql.insertTagged, args...)
		} else {
			b.Queue(s.sql.insert, args...)
		}
		for _, i := range pending {
			before += int64(len(writes[i].Events))
		}
	}
	if each {
		inserts = len(pending)
		for k := range pending {
			queue(pending[k : k+1])
		}
	} else {
		queue(pending)
	}
	if s.cfg.notify {
		b.Queue(`SELECT pg_notify($1, '')`, s.channel)
	}
	if s.cfg.beforeCommitSQL != "" {
		b.Queue(s.cfg.beforeCommitSQL)
	}
	br := s.pool.SendBatch(ctx, b)
	failed := failedWrite{index: -1}
	var sendErr error
	for k := 0; k < b.Len(); k++ { // the inserts come first
		_, err := br.Exec()
		if err == nil {
			continue
		}
		if k < inserts {
			carried, offset := pending, 0
			if each {
				carried, offset = pending[k:k+1], k
			}
			if f, ok := classify(writes, carried, err); ok {
				if f.index >= 0 {
					f.index += offset
				}
				failed = f
				break
			}
		}
		sendErr = err
		break
	}
	closeErr := br.Close()
	if failed.index != -1 {
		return failed, nil // the batch's transaction rolled back
	}
	if sendErr == nil {
		sendErr = closeErr
	}
	if sendErr != nil {
		return failed, s.errs.Map(ctx, "write", sendErr, journal.ErrClosed)
	}
	s.signal.Notify()
	return failed, nil
}

// classify attributes the error of an insert statement that carried the
// atomic writes writes[carried...]: a conflict to the write its key names,
// data the server refused to the write when it carried one, otherwise to
// none of them (unattributed). ok is false for errors that are not the
// data's: the outcome is unknown.
func classify(writes []journal.AtomicWrite, carried []int, err error) (f failedWrite, ok bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return failedWrite{}, false
	}
	switch {
	case pgErr.Code == "23505" && strings.HasPrefix(pgErr.ConstraintName, "event_journal_pkey"):
		if pid, seq, ok := conflictKey(pgErr.Detail); ok {
			for k, i := range carried {
				w := writes[i]
				if w.PersistenceID == pid && w.Events[0].SequenceNr <= seq && seq <= w.Events[len(w.Events)-1].SequenceNr {
					return failedWrite{index: k, err: &journal.ConflictError{PersistenceID: pid, SequenceNr: seq}}, true
				}
			}
		}
		if len(carried) == 1 {
			w := writes[carried[0]]
			return failedWrite{index: 0, err: &journal.ConflictError{PersistenceID: w.PersistenceID, SequenceNr: w.Events[0].SequenceNr}}, true
		}
		return failedWrite{index: unattributed}, true
	case strings.HasPrefix(pgErr.Code, "22"), pgErr.Code == "54000": // data exceptions, program limits (an id too long to index)
		if len(carried) == 1 {
			w := writes[carried[0]]
			return failedWrite{index: 0, err: journal.Reject("%w: the server refused the events of %q: %s", journal.ErrInvalidArgument, w.PersistenceID, pgErr.Message)}, true
		}
		return failedWrite{index: unattributed}, true
	}
	return failedWrite{}, false
}

// Replay implements journal.Journal with journal.Pager, reading a page of
// rows per round trip and yielding none while it holds a connection.
func (j *Journal) Replay(ctx context.Context, persistenceID string, from, to, max int64) iter.Seq2[journal.Repr, error] {
	if err := journal.CheckReplay(persistenceID, from, to, max); err != nil {
		return func(yield func(journal.Repr, error) bool) { yield(journal.Repr{}, err) }
	}
	return journal.Pager[journal.Repr]{
		Size: replayPages * int64(j.s.cfg.pageSize),
		ReadPage: func(ctx context.Context, p journal.Page, yield func(*journal.Repr) bool) (bool, error) {
			page, err := j.s.readRows(ctx, int(p.Limit), j.s.sql.replay, persistenceID, p.From, p.To, p.Limit)
			if err != nil {
				return true, err
			}
			for i := range page {
				if !yield(&page[i].Repr) {
					return true, nil
				}
			}
			return int64(len(page)) < p.Limit, nil
		},
		SequenceNr: func(e *journal.Repr) int64 { return e.SequenceNr },
		Errors:     j.s.errs,
	}.Replay(ctx, from, to, max)
}

// row is one event row with its db_timestamp.
type row struct {
	journal.Repr
	dbTimestamp time.Time
}

// replayPages is how many query pages a replay reads per round trip: a
// replay reads one id's events, ascending, and rarely stops early.
const replayPages = 2

// orderedPlan is sent before every offset-ordered page query, in the same
// implicit transaction (one pgx batch, one Sync): it turns off sorts and
// bitmap scans for that transaction only, so that PostgreSQL can only plan
// the page as an ordered scan of the index whose order the query asks for
// ((entity_type, db_timestamp, seq_nr, persistence_id) for slices and
// types, the tag table's key for tags) and stop after the page's rows.
//
// Without it the plan depends on statistics and on the plan cache: with no
// statistics (rows written and read at once) or with a generic plan (pgx
// prepares statements; PostgreSQL switches to a generic plan after five
// executions) the planner estimates a handful of matching rows and picks a
// bitmap scan of the slice index followed by a sort of every remaining row
// of the entity type, so each page cost more than the one before it.
const orderedPlan = `SELECT set_config('enable_sort', 'off', true), set_config('enable_bitmapscan', 'off', true)`

// readOrdered runs an offset-ordered page query under orderedPlan and
// collects its rows; size is the number of rows expected at most. When emit
// is not nil, the rows are handed to it in chunks as they arrive instead
// (see scanRows), and none are returned.
func (s *Store) readOrdered(ctx context.Context, size int, emit func([]row) []row, sql string, args ...any) ([]row, error) {
	b := &pgx.Batch{}
	b.Queue(orderedPlan)
	b.Queue(sql, args...)
	br := s.pool.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return nil, err
	}
	out, err := scanRows(rows, size, emit)
	if cerr := br.Close(); err == nil && cerr != nil {
		return nil, cerr
	}
	return out, err
}

// readRows runs a query returning event rows and collects them; size is
// the number of rows expected at most.
func (s *Store) readRows(ctx context.Context, size int, sql string, args ...any) ([]row, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return scanRows(rows, size, nil)
}

// scanChunk is how many rows scanRows hands over at a time when it emits.
const scanChunk = 256

// scanRows collects event rows and closes rows; size is the number of rows
// expected at most. When emit is not nil, it hands the rows to emit in
// chunks of at most scanChunk as they are scanned, fills the slice emit
// returns next (emptied), and returns no rows. Each row is scanned in
// place, into the slice's element: a row scanned into a local variable
// escapes (Scan takes its fields' addresses), which cost an allocation and
// a copy per row.
func scanRows(rows pgx.Rows, size int, emit func([]row) []row) ([]row, error) {
	chunk := size
	if emit != nil {
		chunk = min(size, scanChunk)
	}
	out := make([]row, 0, chunk)
	var tags []string
	for rows.Next() {
		if emit != nil && len(out) == chunk {
			out = emit(out)[:0]
		}
		out = append(out, row{})
		r := &out[len(out)-1]
		tags = nil // a new slice per row: rows keep theirs
		if err := rows.Scan(&r.PersistenceID, &r.SequenceNr, &r.dbTimestamp, &r.Timestamp, &r.SerializerID, &r.Manifest, &r.Payload, &r.WriterID, &tags, &r.Metadata, &r.Slice, &r.EntityType); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read row: %w", err)
		}
		r.Timestamp, r.dbTimestamp = r.Timestamp.UTC(), r.dbTimestamp.UTC()
		if len(tags) > 0 {
			r.Tags = tags
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if emit != nil {
		if len(out) > 0 {
			emit(out)
		}
		return nil, nil
	}
	return out, nil
}

// ConcurrentReads implements engine.ReadCapacity: the pool's connections
// less two for writes (the journal front's default MaxCalls), at least 1.
// A front before the journal then queues a burst of reads itself, instead
// of letting them wait for a connection inside its call timeout.
func (j *Journal) ConcurrentReads() int {
	return max(1, int(j.s.pool.Config().MaxConns)-2)
}

// HighestSequenceNr implements journal.Journal.
func (j *Journal) HighestSequenceNr(ctx context.Context, persistenceID string, from int64) (int64, error) {
	if err := journal.CheckID("highest sequence number", persistenceID, from); err != nil {
		return 0, err
	}
	if j.s.isClosed() {
		return 0, journal.ErrClosed
	}
	var n int64
	if err := j.s.pool.QueryRow(ctx, j.s.sql.highest, persistenceID).Scan(&n); err != nil {
		return 0, j.s.errs.Map(ctx, "highest sequence number", err, journal.ErrClosed)
	}
	return n, nil
}

// DeleteTo implements journal.Journal: in one transaction, the highest
// number among the deleted events is recorded in journal_metadata, then the
// events and their tags are removed. On the r2dbc layout it deletes as the
// plugin does, leaving a delete marker (see LayoutR2DBC).
func (j *Journal) DeleteTo(ctx context.Context, persistenceID string, to int64) error {
	if err := journal.CheckID("delete", persistenceID, to); err != nil {
		return err
	}
	if j.s.isClosed() {
		return journal.ErrClosed
	}
	if j.s.cfg.layout == LayoutR2DBC {
		return j.deleteR2DBC(ctx, persistenceID, to)
	}
	b := &pgx.Batch{}
	b.Queue(j.s.sql.deleteMeta, persistenceID, annals.EntityType(persistenceID), to)
	b.Queue(j.s.sql.deleteTags, persistenceID, to)
	b.Queue(j.s.sql.deleteEvents, persistenceID, to)
	if err := j.s.pool.SendBatch(ctx, b).Close(); err != nil {
		return j.s.errs.Map(ctx, "delete", err, journal.ErrClosed)
	}
	return nil
}
