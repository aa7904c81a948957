package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/snapshot"
)

// statements are prepared once per Store; database/sql re-prepares them on
// each pooled connection as needed.
type statements struct {
	insert, insertTag, deleteTags, deleteEvents, keepHighest *sql.Stmt // writer
	highest                                                  *sql.Stmt // reader
	saveSnap, deleteSnap, deleteSnaps                        *sql.Stmt // writer
	loadSnap                                                 *sql.Stmt // reader
	maxOrdering, persistenceIDs                              *sql.Stmt // reader
	maxStateOrdering                                         *sql.Stmt // reader
	stateRevision, stateInsert, stateUpdate, stateDelete     *sql.Stmt // writer
	stateTakeOrderings                                       *sql.Stmt // writer
}

const snapshotWhere = `persistence_id = ? AND sequence_nr BETWEEN ? AND ? AND created BETWEEN ? AND ?`

func (st *statements) prepare(ctx context.Context, writer, reader *sql.DB) error {
	for _, p := range []struct {
		db   *sql.DB
		to   **sql.Stmt
		text string
	}{
		{writer, &st.insert, `INSERT INTO event_journal (persistence_id, sequence_nr, timestamp, payload, serializer_id, manifest, writer, tags, metadata, slice, entity_type) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`},
		{writer, &st.insertTag, `INSERT INTO event_tag (tag, ordering) VALUES (?, ?)`},
		{writer, &st.keepHighest, `INSERT INTO journal_metadata (persistence_id, sequence_nr)
			SELECT persistence_id, MAX(sequence_nr) FROM event_journal WHERE persistence_id = ?1 AND sequence_nr <= ?2 GROUP BY persistence_id
			ON CONFLICT (persistence_id) DO UPDATE SET sequence_nr = max(sequence_nr, excluded.sequence_nr)`},
		{writer, &st.deleteTags, `DELETE FROM event_tag WHERE ordering IN (SELECT ordering FROM event_journal WHERE persistence_id = ? AND sequence_nr <= ? AND tags IS NOT NULL)`},
		{writer, &st.deleteEvents, `DELETE FROM event_journal WHERE persistence_id = ? AND sequence_nr <= ?`},
		{reader, &st.highest, `SELECT max(
			coalesce((SELECT MAX(sequence_nr) FROM event_journal WHERE persistence_id = ?1), 0),
			coalesce((SELECT sequence_nr FROM journal_metadata WHERE persistence_id = ?1), 0))`},
		{writer, &st.saveSnap, `INSERT INTO snapshot (persistence_id, sequence_nr, created, serializer_id, manifest, payload) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (persistence_id, sequence_nr) DO UPDATE SET created = excluded.created, serializer_id = excluded.serializer_id, manifest = excluded.manifest, payload = excluded.payload`},
		{writer, &st.deleteSnap, `DELETE FROM snapshot WHERE persistence_id = ?1 AND sequence_nr = ?2 AND (?3 = 0 OR created = ?3)`},
		{writer, &st.deleteSnaps, `DELETE FROM snapshot WHERE ` + snapshotWhere},
		{reader, &st.loadSnap, `SELECT sequence_nr, created, serializer_id, manifest, payload FROM snapshot WHERE ` + snapshotWhere + ` ORDER BY sequence_nr DESC, created DESC LIMIT 1`},
		{reader, &st.maxOrdering, `SELECT coalesce(max(ordering), 0) FROM event_journal`},
		{reader, &st.persistenceIDs, persistenceIDsSQL},
		{reader, &st.maxStateOrdering, `SELECT ordering FROM durable_state_clock`},
		{writer, &st.stateRevision, `SELECT revision FROM durable_state WHERE persistence_id = ?`},
		{writer, &st.stateInsert, `INSERT INTO durable_state (persistence_id, revision, payload, serializer_id, manifest, tag, timestamp, slice, entity_type, ordering)
			VALUES (?, 1, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (persistence_id) DO NOTHING`},
		{writer, &st.stateUpdate, `UPDATE durable_state SET revision = ?2, payload = ?3, serializer_id = ?4, manifest = ?5, tag = ?6, timestamp = ?7, ordering = ?8
			WHERE persistence_id = ?1 AND revision = ?2 - 1`},
		{writer, &st.stateDelete, `DELETE FROM durable_state WHERE persistence_id = ? AND revision = ?`},
		{writer, &st.stateTakeOrderings, `UPDATE durable_state_clock SET ordering = ordering + ? RETURNING ordering`},
	} {
		stmt, err := p.db.PrepareContext(ctx, p.text)
		if err != nil {
			return fmt.Errorf("%w in %s", err, p.text)
		}
		*p.to = stmt
	}
	return nil
}

func (st *statements) close() {
	for _, s := range []*sql.Stmt{st.insert, st.insertTag, st.deleteTags, st.deleteEvents, st.keepHighest, st.highest, st.saveSnap, st.deleteSnap, st.deleteSnaps, st.loadSnap, st.maxOrdering, st.persistenceIDs, st.maxStateOrdering,
		st.stateRevision, st.stateInsert, st.stateUpdate, st.stateDelete, st.stateTakeOrderings} {
		if s != nil {
			_ = s.Close()
		}
	}
}

// Journal is the journal.Journal of a Store.
type Journal struct{ s *Store }

var _ journal.Journal = (*Journal)(nil)

// Write implements journal.Journal.Write: the whole call is one
// transaction with one sync of the log. When an atomic write meets a
// sequence number that is already stored, the transaction is rolled back and
// run again without that write (conflicts are rare: they need two writers of
// one id), so the usual path pays nothing for per-write atomicity. A write
// that breaks the contract or the payload limit is rejected before the
// transaction. An error of the transaction itself is returned as the
// whole-call error: the outcome is unknown.
func (j *Journal) Write(ctx context.Context, writes []journal.AtomicWrite) ([]error, error) {
	return j.write(ctx, writes, nil)
}

var _ journal.FencedWriter = (*Journal)(nil)

// WriteFenced implements journal.FencedWriter: the writes whose tokens
// name leases of this store's Membership (one made by Store.Membership of
// this Store) are stored only if those leases are held in the write's
// transaction, which holds the file's write lock: no member of any process
// can take a lease until it commits.
func (j *Journal) WriteFenced(ctx context.Context, writes []journal.AtomicWrite, tokens []journal.FenceToken) ([]error, error) {
	if len(tokens) != len(writes) {
		return nil, fmt.Errorf("%w: %d fencing tokens for %d atomic writes", journal.ErrInvalidArgument, len(tokens), len(writes))
	}
	return j.write(ctx, writes, tokens)
}

// write is Write, and WriteFenced when tokens is not nil.
func (j *Journal) write(ctx context.Context, writes []journal.AtomicWrite, tokens []journal.FenceToken) ([]error, error) {
	s := j.s
	results := make([]error, len(writes))
	live := 0
	for i, w := range writes {
		if results[i] = s.checkWrite(w); results[i] == nil {
			live++
		}
	}
	for live > 0 {
		conflict, err := s.writeTx(ctx, writes, tokens, results)
		if err != nil {
			return nil, err
		}
		if conflict < 0 {
			break
		}
		live--
	}
	return journal.Results(results), nil
}

// writeTx stores the writes whose result is nil in one transaction, but
// first refuses those whose token (tokens[i], when tokens is not nil)
// names a lease of the store's membership that is not held (a
// *journal.FencedError in results). On a sequence conflict it rolls back,
// records the conflict in results and returns the index of the write that
// met it; otherwise it commits and returns -1.
//
// Driver calls run on a context without cancellation (the driver would
// otherwise start a goroutine per statement to watch it); ctx is checked
// between atomic writes and before the commit instead.
func (s *Store) writeTx(ctx context.Context, writes []journal.AtomicWrite, tokens []journal.FenceToken, results []error) (int, error) {
	dctx := context.WithoutCancel(ctx)
	tx, release, err := s.writeTxn(ctx)
	if err != nil {
		return -1, s.errs.Map(ctx, "begin write", err, journal.ErrClosed)
	}
	defer release()
	if err := s.checkTokens(dctx, tx, writes, tokens, results); err != nil {
		return -1, s.errs.Map(ctx, "check leases", err, journal.ErrClosed)
	}
	insert := tx.StmtContext(dctx, s.stmts.insert)
	var insertTag *sql.Stmt
	now := time.Now().UnixNano()
	for i, w := range writes {
		if results[i] != nil {
			continue
		}
		if err := ctx.Err(); err != nil {
			return -1, err
		}
		slice, entityType := annals.Slice(w.PersistenceID), annals.EntityType(w.PersistenceID)
		for _, e := range w.Events {
			ts := now
			if !e.Timestamp.IsZero() {
				ts, _ = snapshot.UnixNanos(e.Timestamp) // checked by checkWrite
			}
			var tags, meta any
			if len(e.Tags) > 0 {
				b, err := json.Marshal(e.Tags)
				if err != nil {
					return -1, fmt.Errorf("sqlite: encode tags: %w", err)
				}
				tags = string(b)
			}
			if e.Metadata != nil {
				meta = e.Metadata
			}
			payload := e.Payload
			if payload == nil {
				payload = []byte{}
			}
			res, err := insert.ExecContext(dctx, e.PersistenceID, e.SequenceNr, ts, payload, e.SerializerID, e.Manifest, e.WriterID, tags, meta, slice, entityType)
			if isUniqueViolation(err) {
				results[i] = &journal.ConflictError{PersistenceID: e.PersistenceID, SequenceNr: e.SequenceNr}
				return i, nil // the deferred rollback undoes the transaction
			}
			if err != nil {
				return -1, s.errs.Map(ctx, "write", err, journal.ErrClosed)
			}
			if len(e.Tags) == 0 {
				continue
			}
			ordering, err := res.LastInsertId()
			if err != nil {
				return -1, s.errs.Map(ctx, "write", err, journal.ErrClosed)
			}
			if insertTag == nil {
				insertTag = tx.StmtContext(dctx, s.stmts.insertTag)
			}
			for _, tag := range uniqueTags(e.Tags) {
				if _, err := insertTag.ExecContext(dctx, tag, ordering); err != nil {
					return -1, s.errs.Map(ctx, "write tags", err, journal.ErrClosed)
				}
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return -1, err
	}
	if err := tx.Commit(); err != nil {
		return -1, s.errs.Map(ctx, "commit", err, journal.ErrClosed)
	}
	s.signal.Notify() // wake live queries of this process
	return -1, nil
}

// checkTokens sets the result of each write whose result is nil and whose
// token names a lease of the store's membership that tx does not find held
// by the token's holder at its epoch.
func (s *Store) checkTokens(ctx context.Context, tx *sql.Tx, writes []journal.AtomicWrite, tokens []journal.FenceToken, results []error) error {
	held := map[journal.FenceToken]bool{}
	for i, t := range tokens {
		if m, ok := t.Store.(*Membership); !ok || t.IsZero() || m.s != s || results[i] != nil {
			continue
		}
		h, known := held[t]
		if !known {
			var one int
			err := tx.QueryRowContext(ctx, checkHeldSQL, t.Cluster, t.Lease, t.Holder, t.HolderIncarnation, t.Epoch).Scan(&one)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			h = err == nil
			held[t] = h
		}
		if !h {
			results[i] = &journal.FencedError{PersistenceID: writes[i].PersistenceID, Token: t}
		}
	}
	return nil
}

// checkWrite applies the contract's rules and the payload limit.
func (s *Store) checkWrite(w journal.AtomicWrite) error {
	if err := journal.CheckAtomicWrite(w); err != nil {
		return err
	}
	for _, e := range w.Events {
		if _, ok := snapshot.UnixNanos(e.Timestamp); !ok && !e.Timestamp.IsZero() {
			return journal.Reject("event %d of %q has timestamp %v, outside the years 1678–2262 this store can hold", e.SequenceNr, e.PersistenceID, e.Timestamp)
		}
	}
	return journal.CheckPayloads(w, s.cfg.maxPayload)
}

// uniqueTags drops repeated tags; the tag index holds one row per tag.
func uniqueTags(tags []string) []string {
	if len(tags) < 2 {
		return tags
	}
	return slices.Compact(slices.Sorted(slices.Values(tags)))
}

// replayPage is how many events Replay reads per query.
const replayPage = 1000

// Replay implements journal.Journal.Replay with journal.Pager. It reads
// pages of at most replayPage events, each in a short read transaction
// that ends before the events are yielded: memory stays bounded whatever
// the journal's length, and a slow consumer holds no connection and no
// read snapshot (which would keep the write-ahead log from being reset).
func (j *Journal) Replay(ctx context.Context, persistenceID string, from, to, limit int64) iter.Seq2[journal.Repr, error] {
	if err := journal.CheckReplay(persistenceID, from, to, limit); err != nil {
		return func(yield func(journal.Repr, error) bool) { yield(journal.Repr{}, err) }
	}
	return func(yield func(journal.Repr, error) bool) {
		j.replay(ctx, persistenceID, from, to, limit)(yield)
	}
}

// replay is one run of Replay: its pages share one array.
func (j *Journal) replay(ctx context.Context, persistenceID string, from, to, limit int64) iter.Seq2[journal.Repr, error] {
	var page []journal.Repr
	id := newReplayID(persistenceID)
	return journal.Pager[journal.Repr]{
		Size: replayPage,
		ReadPage: func(ctx context.Context, p journal.Page, yield func(*journal.Repr) bool) (bool, error) {
			args, err := namedArgs(persistenceID, p.From, p.To, p.Limit)
			if err != nil {
				return true, err
			}
			page = page[:0]
			err = j.s.readDriver(ctx, replaySQL, args, make([]driver.Value, replayColumns), func(v []driver.Value) error {
				e, err := replayRow(id, v)
				page = append(page, e)
				return err
			})
			if err != nil {
				return true, err
			}
			for i := range page {
				if !yield(&page[i]) {
					return true, nil
				}
			}
			return int64(len(page)) < p.Limit, nil
		},
		SequenceNr: func(e *journal.Repr) int64 { return e.SequenceNr },
		Errors:     j.s.errs,
	}.Replay(ctx, from, to, limit)
}

// ConcurrentReads implements engine.ReadCapacity: the connections of the
// read pool (WithReaders). A front before the journal then queues a burst
// of reads itself, instead of letting them wait for a connection inside
// its call timeout.
func (j *Journal) ConcurrentReads() int { return j.s.cfg.readers }

// HighestSequenceNr implements journal.Journal.HighestSequenceNr: the
// greater of the highest stored event and the highest deleted one, kept in
// journal_metadata.
func (j *Journal) HighestSequenceNr(ctx context.Context, persistenceID string, from int64) (int64, error) {
	if err := journal.CheckID("highest sequence number", persistenceID, from); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var n int64
	if err := j.s.stmts.highest.QueryRowContext(ctx, persistenceID).Scan(&n); err != nil {
		return 0, j.s.errs.Map(ctx, "highest sequence number", err, journal.ErrClosed)
	}
	return n, nil
}

// DeleteTo implements journal.Journal.DeleteTo in one transaction: it
// records the highest deleted sequence number in journal_metadata, then
// removes the events and their tag rows.
func (j *Journal) DeleteTo(ctx context.Context, persistenceID string, to int64) error {
	if err := journal.CheckID("delete", persistenceID, to); err != nil {
		return err
	}
	s := j.s
	tx, release, err := s.writeTxn(ctx)
	if err != nil {
		return s.errs.Map(ctx, "begin delete", err, journal.ErrClosed)
	}
	defer release()
	dctx := context.WithoutCancel(ctx)
	for _, st := range []*sql.Stmt{s.stmts.keepHighest, s.stmts.deleteTags, s.stmts.deleteEvents} {
		if _, err := tx.StmtContext(dctx, st).ExecContext(dctx, persistenceID, to); err != nil {
			return s.errs.Map(ctx, "delete", err, journal.ErrClosed)
		}
	}
	if err := tx.Commit(); err != nil {
		return s.errs.Map(ctx, "commit delete", err, journal.ErrClosed)
	}
	return nil
}

// Close closes the whole Store.
func (j *Journal) Close() error { return j.s.Close() }
