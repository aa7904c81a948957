package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/journal"
)

// stampSQL is the db_timestamp of row i.n of an insert statement where
// i.floor is the earliest timestamp the row's id allows (1µs per event past
// its previous one; NULL when it has none), the statement follows before
// rows of its transaction, and the transaction's statements insert total
// rows (SQL of bigint parameters; a Write call sends one statement, or one
// per atomic write to find one the server refuses); clock is the
// transaction's time (transaction_timestamp()).
//
// Row p of the transaction (p = before + i.n - 1, from 0) gets
// clock + p µs, or, when the floor is later, the first timestamp at or
// after the floor that is p µs modulo total after clock. So:
//   - no two rows of a call share a timestamp: each is alone in its class
//     modulo total;
//   - no row is earlier than its floor, and an id's rows grow with its
//     sequence numbers: its rows are adjacent in the transaction, also
//     across statements, and along them the floor and p both grow by 1,
//     so they take floor or p alike, 1µs apart;
//   - a row moves less than total µs past its floor, and only a row whose
//     id's previous event is later than the clock moves: one id ahead of
//     the clock carries no other with it.
//
// The arithmetic runs only for rows whose floor is ahead of their time (a
// NULL floor is not); the others cost one comparison. stampOf is the same
// arithmetic in Go: the writer learns the timestamps it stored from the
// clock alone (see knownStamps).
func stampSQL(clock, before, total string) string {
	at := `(` + clock + ` + (` + before + ` + i.n - 1) * interval '1 microsecond')`
	return `CASE WHEN i.floor > ` + at + ` THEN ` + at + ` + (((extract(epoch FROM i.floor - ` + at + `) * 1000000)::bigint + ` + total + ` - 1) / ` + total + ` * ` + total + `) * interval '1 microsecond'
		ELSE ` + at + ` END`
}

// notifySQL is a FROM item that sends the NOTIFY of a write on the
// channel given by param, one row: the insert statements end in it, so
// that a write is one statement. PostgreSQL delivers a notification at
// commit, once per transaction for one channel and payload however many
// of its statements send it (a call sent as one statement per atomic
// write).
func notifySQL(param string) string { return `pg_notify(` + param + `, '') n` }

// chainedInsert is a write's insert statement: the CTEs before (each
// "name AS (...)"), ins as the CTE ins, each of others as a CTE more0,
// more1, ... (they read ins's RETURNING rows), then one row of list (""
// for none), which sends the write's NOTIFY on the channel parameter
// notify unless notify is "". Data-modifying CTEs run to their end
// whether or not the SELECT reads them.
func chainedInsert(before []string, ins string, others []string, list, notify string) string {
	ctes := append(slices.Clone(before), "ins AS (\n\t"+ins+"\n)")
	for k, o := range others {
		ctes = append(ctes, fmt.Sprintf("more%d AS (\n\t%s\n)", k, o))
	}
	q := "WITH " + strings.Join(ctes, ", ") + "\nSELECT"
	if list != "" {
		q += " " + list
	}
	if notify != "" {
		q += " FROM " + notifySQL(notify)
	}
	return q
}

// tagsColumn is an inserted row's tags column: tagsSQL when the call's
// events have tags (tagged), else NULL for every row.
func tagsColumn(tagged bool) string {
	if tagged {
		return tagsSQL
	}
	return "NULL"
}

// tagsSQL is an inserted row's tags column: NULL, or its tags (JSON, see
// insertArgs) as text[].
const tagsSQL = `CASE WHEN i.tags IS NULL THEN NULL ELSE ARRAY(SELECT jsonb_array_elements_text(i.tags::jsonb)) END`

// writesSQL is the FROM clause of an insert statement: the rows i of
// insertArgs' eleven arrays ($1–$11), then of the arrays a layout adds
// (their types and names each with a leading comma), numbered n from 1.
func writesSQL(arrays, names string) string {
	return `FROM unnest($1::text[], $2::bigint[], $3::timestamptz[], $4::int[], $5::text[], $6::bytea[], $7::text[], $8::text[], $9::bytea[], $10::int[], $11::text[]` + arrays + `)
	WITH ORDINALITY AS i(pid, seq_nr, wts, ser_id, manifest, payload, writer, tags, meta, slice, entity_type` + names + `, n)`
}

// Journal is the store's event journal.
type Journal struct{ s *Store }

var _ journal.Journal = (*Journal)(nil)

// Journal returns the store's journal.
func (s *Store) Journal() *Journal { return &Journal{s: s} }

// Close closes the store.
func (j *Journal) Close() error { return j.s.Close() }

// insertArgCap is the most arguments an insert statement takes: the most
// parameters before the NOTIFY channel (the r2dbc layout's, as many as
// TimestampOrder's in Annals' layout: see annalsInsertParams), and the
// channel.
const insertArgCap = r2dbcInsertParams + 1

// insertArgs returns the eleven column arrays of the insert statements for
// the atomic writes writes[pending...], in their order (as cells, which
// pgx encodes without an allocation per element), and whether an event
// has tags. The tags' and metadata's arrays are NULL when no event has
// any: the statements' unnest pads them with NULLs.
func insertArgs(writes []journal.AtomicWrite, pending []int, now time.Time) ([]any, bool) {
	n := 0
	tagged, withMeta := false, false
	for _, i := range pending {
		n += len(writes[i].Events)
		for _, e := range writes[i].Events {
			tagged, withMeta = tagged || len(e.Tags) > 0, withMeta || e.Metadata != nil
		}
	}
	pids, seqs, wts, serIDs := make(textCells, 0, n), make(int8Cells, 0, n), make(timeCells, 0, n), make(int4Cells, 0, n)
	manifests, payloads, writers := make(textCells, 0, n), make(bytesCells, 0, n), make(textCells, 0, n)
	slices, types := make(int4Cells, 0, n), make(textCells, 0, n)
	var tags nullTexts
	var metas bytesCells
	if tagged {
		tags = make(nullTexts, 0, n)
	}
	if withMeta {
		metas = make(bytesCells, 0, n)
	}
	for _, i := range pending {
		w := writes[i]
		slice, et := int4Cell(annals.Slice(w.PersistenceID)), textCell(annals.EntityType(w.PersistenceID))
		for _, e := range w.Events {
			ts := e.Timestamp
			if ts.IsZero() {
				ts = now
			}
			payload := e.Payload
			if payload == nil {
				payload = []byte{}
			}
			if tagged {
				var tag pgtype.Text
				if len(e.Tags) > 0 {
					b, _ := json.Marshal(e.Tags) // strings always marshal
					tag = pgtype.Text{String: string(b), Valid: true}
				}
				tags = append(tags, tag)
			}
			if withMeta {
				metas = append(metas, e.Metadata)
			}
			pids, seqs, wts, serIDs = append(pids, textCell(w.PersistenceID)), append(seqs, int8Cell(e.SequenceNr)), append(wts, timeCell(ts)), append(serIDs, int4Cell(e.SerializerID))
			manifests, payloads, writers = append(manifests, textCell(e.Manifest)), append(payloads, payload), append(writers, textCell(e.WriterID))
			slices, types = append(slices, slice), append(types, et)
		}
	}
	// Room for what the layouts and the NOTIFY channel add after these
	// (writeArgs, send), so that the call's arguments are one slice.
	args := make([]any, 0, insertArgCap)
	return append(args, pids, seqs, wts, serIDs, manifests, payloads, writers, tags, metas, slices, types), tagged
}

// groupByID returns pending (indexes into writes) with the writes of each
// id adjacent, in their order, the ids in order of first appearance
// (pending itself when no id has two writes).
func groupByID(writes []journal.AtomicWrite, pending []int) []int {
	index := make(map[string]int, len(pending))
	var counts []int // writes per id
	for _, i := range pending {
		at, ok := index[writes[i].PersistenceID]
		if !ok {
			at = len(counts)
			index[writes[i].PersistenceID] = at
			counts = append(counts, 0)
		}
		counts[at]++
	}
	if len(counts) == len(pending) {
		return pending
	}
	next := make([]int, len(counts)) // where each id's next write goes
	for k := 1; k < len(counts); k++ {
		next[k] = next[k-1] + counts[k-1]
	}
	grouped := make([]int, len(pending))
	for _, i := range pending {
		at := index[writes[i].PersistenceID]
		grouped[next[at]] = i
		next[at]++
	}
	return grouped
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
	return j.write(ctx, writes, nil)
}

// write is Write, and WriteFenced when tokens is not nil.
func (j *Journal) write(ctx context.Context, writes []journal.AtomicWrite, tokens []journal.FenceToken) ([]error, error) {
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
	stamped := j.s.cfg.ordering == TimestampOrder
	if stamped && len(pending) > 0 {
		pending = groupByID(writes, pending) // as floors and stampSQL need
	}
	for len(pending) > 0 {
		var floors []pgtype.Timestamptz
		if stamped {
			var err error
			if floors, err = j.floors(ctx, writes, pending); err != nil {
				return nil, err
			}
		}
		check := j.newLeaseCheck(tokens, pending)
		failed, err := j.send(ctx, writes, pending, now, floors, each, check)
		if err != nil {
			return nil, err
		}
		if failed.index == fencedOff {
			var lost bool
			if pending, lost, err = j.fenced(ctx, writes, tokens, pending, check, results); err != nil {
				return nil, err
			}
			if !lost { // epochs only grow: a lease lost at the check stays lost
				return nil, fmt.Errorf("postgres: write: the leases check failed, then found every lease held: outcome unknown")
			}
			rejected = true
			continue
		}
		if failed.index == unattributed {
			each = true
			continue
		}
		if failed.index < 0 {
			break
		}
		results[pending[failed.index]], rejected = failed.err, true
		if stamped && errors.As(failed.err, new(*journal.ConflictError)) {
			j.s.known.forget(writes[pending[failed.index]].PersistenceID)
		}
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
// names no atomic write; fencedOff of a failed lease check (fence.go).
const (
	unattributed = -2
	fencedOff    = -3
)

// send writes the atomic writes writes[pending...] in one transaction: in
// one statement, or one statement per atomic write when each, after the
// lease check check when not nil (fence.go: its failure is failed with
// index fencedOff, nothing stored). In TimestampOrder, floors are the
// rows' floors (see Journal.floors), and once committed the store knows
// each id's last db_timestamp (Journal.learn). A failure that belongs to
// one atomic write (a conflict, data the server refuses) is returned as
// failed; any other error means the outcome is unknown.
func (j *Journal) send(ctx context.Context, writes []journal.AtomicWrite, pending []int, now time.Time, floors []pgtype.Timestamptz, each bool, check *leaseCheck) (failedWrite, error) {
	s := j.s
	b := &pgx.Batch{}
	first, checkAt := 0, -1 // the first insert's statement, the lease check's
	stamped := s.cfg.ordering == TimestampOrder
	if check != nil {
		b.Queue(s.sql.checkLeases, check.args()...)
		checkAt, first = first, first+1
	}
	inserts := 1
	var total, before int64 // rows of the transaction, of the statements queued
	for _, i := range pending {
		total += int64(len(writes[i].Events))
	}
	queue := func(pending []int) {
		rows := int64(0)
		for _, i := range pending {
			rows += int64(len(writes[i].Events))
		}
		var stmtFloors stampCells
		if stamped {
			stmtFloors = floorCells(floors[before : before+rows])
		}
		args, tagged := s.layout.writeArgs(writes, pending, now, stmtFloors, before, total)
		if s.cfg.notify {
			args = append(args, s.channel) // the statements' last parameter (config.notifyParam)
		}
		if tagged {
			b.Queue(s.sql.insertTagged, args...)
		} else {
			b.Queue(s.sql.insert, args...)
		}
		before += rows
	}
	if each {
		inserts = len(pending)
		for k := range pending {
			queue(pending[k : k+1])
		}
	} else {
		queue(pending)
	}
	if s.cfg.beforeCommitSQL != "" {
		b.Queue(s.cfg.beforeCommitSQL)
	}
	br := s.pool.SendBatch(ctx, b)
	failed := failedWrite{index: -1}
	var sendErr error
	var t0 time.Time // the transaction's time, in TimestampOrder
	// The lease check, then the inserts come first.
	for k := 0; k < b.Len(); k++ {
		var err error
		if stamped && k >= first && k < first+inserts {
			err = br.QueryRow().Scan(&t0)
		} else {
			_, err = br.Exec()
		}
		if err == nil {
			continue
		}
		if k == checkAt && isLeaseCheckFailure(err) {
			failed = failedWrite{index: fencedOff}
			break
		}
		if i := k - first; i >= 0 && i < inserts {
			carried, offset := pending, 0
			if each {
				carried, offset = pending[i:i+1], i
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
	if stamped {
		j.learn(writes, pending, floors, t0)
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

// scanChunk is how many rows scanRows hands over at a time when it emits;
// scanStart the rows it makes room for first.
const (
	scanChunk = 256
	scanStart = 16
)

// scanRows collects event rows and closes rows; size is the number of rows
// expected at most. When emit is not nil, it hands the rows to emit in
// chunks of at most scanChunk as they are scanned, fills the slice emit
// returns next (emptied), and returns no rows. Each row is scanned in
// place, into the slice's element: a row scanned into a local variable
// escapes (Scan takes its fields' addresses), which cost an allocation and
// a copy per row. The slice starts at most scanStart rows long and grows
// as rows come: size is a bound, and a replay of a few events under a
// bound of thousands allocated the whole bound.
func scanRows(rows pgx.Rows, size int, emit func([]row) []row) ([]row, error) {
	chunk := size
	if emit != nil {
		chunk = min(size, scanChunk)
	}
	out := make([]row, 0, min(chunk, scanStart))
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

// timestampSplitWrites is TimestampOrder's SplitWrites. Its write calls
// read no row that another call writes, so two in flight proceed side by
// side: with 100 writers persisting one event at a time each, two calls
// of about 50 in flight wrote 1.07–1.11 times as fast as one call of 100
// (BenchmarkWriteSplit, three runs). CommitOrder's calls queue for the
// clock row, whose lock each holds to its commit: there the split wrote
// 0.90–0.92 times as fast, so CommitOrder keeps the front's default.
const timestampSplitWrites = 50

// SplitWrites implements engine.WriteSplit: timestampSplitWrites in
// TimestampOrder, the front's default (0) in CommitOrder.
func (j *Journal) SplitWrites() int {
	if j.s.cfg.ordering == TimestampOrder {
		return timestampSplitWrites
	}
	return 0
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

// DeleteTo implements journal.Journal, in one transaction: on Annals'
// layout the highest number among the deleted events is recorded in
// journal_metadata, then the events and their tags are removed; on the
// r2dbc layout it deletes as the plugin does, leaving a delete marker (see
// LayoutR2DBC).
func (j *Journal) DeleteTo(ctx context.Context, persistenceID string, to int64) error {
	if err := journal.CheckID("delete", persistenceID, to); err != nil {
		return err
	}
	if j.s.isClosed() {
		return journal.ErrClosed
	}
	defer j.s.known.forget(persistenceID) // a delete marker may take the last event's place
	return j.s.layout.deleteTo(ctx, persistenceID, to)
}
