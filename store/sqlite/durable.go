package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"iter"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/durable"
	"github.com/annals-go/annals/query"
)

// DurableState returns the store's durable-state store (the durable_state
// table). Its Close closes the whole Store.
func (s *Store) DurableState() *DurableState { return &DurableState{s: s} }

// DurableState is the durable.Store of a Store (a durable.Batcher), and
// its change queries. A call is one transaction on the writer connection,
// whose statements change a row only when its stored revision is the one
// before the change's (an insert of revision 1 when the id holds none), so
// two writers of one revision cannot both succeed.
//
// Each Upsert takes the next value of a counter (durable_state_clock) as
// the row's ordering; the change queries' offsets are sequence offsets of
// it. SQLite has one writer, so orderings grow in commit order, as the
// journal's do (see Queries): a change query that has returned ordering n
// has seen every change at or below n. Live change queries wake at once
// when this Store commits, and poll every WithPollInterval for commits of
// other processes.
type DurableState struct{ s *Store }

var (
	_ durable.Batcher                        = (*DurableState)(nil)
	_ query.DurableStateChangesBySlicesQuery = (*DurableState)(nil)
	_ query.DurableStateChangesByTagQuery    = (*DurableState)(nil)
)

// Get implements durable.Store.Get.
func (d *DurableState) Get(ctx context.Context, persistenceID string) (durable.Object, bool, error) {
	if err := durable.Check("get", persistenceID, 1); err != nil {
		return durable.Object{}, false, err
	}
	if err := ctx.Err(); err != nil {
		return durable.Object{}, false, err
	}
	if d.s.isClosed() {
		return durable.Object{}, false, durable.ErrClosed
	}
	var o durable.Object
	var tag sql.NullString
	var ts int64
	err := d.s.reader.QueryRowContext(ctx, `SELECT revision, payload, serializer_id, manifest, tag, timestamp FROM durable_state WHERE persistence_id = ?`, persistenceID).
		Scan(&o.Revision, &o.Payload, &o.SerializerID, &o.Manifest, &tag, &ts)
	if errors.Is(err, sql.ErrNoRows) {
		return durable.Object{}, false, nil
	}
	if err != nil {
		return durable.Object{}, false, d.s.errs.Map(ctx, "get durable state", err, durable.ErrClosed)
	}
	o.PersistenceID, o.Tag, o.Timestamp = persistenceID, tag.String, time.Unix(0, ts).UTC()
	return o, true, nil
}

// Upsert implements durable.Store.Upsert.
func (d *DurableState) Upsert(ctx context.Context, o durable.Object) error {
	return durable.ApplyOne(ctx, d, durable.Change{Object: o})
}

// Delete implements durable.Store.Delete: it removes the row.
func (d *DurableState) Delete(ctx context.Context, persistenceID string, revision int64) error {
	return durable.ApplyOne(ctx, d, durable.Change{Object: durable.Object{PersistenceID: persistenceID, Revision: revision}, Delete: true})
}

// Apply implements durable.Batcher: the changes are applied in one write
// transaction (one commit) with prepared statements: an insert of
// revision 1 that does nothing when the id holds a row, an update of the
// row of the revision before, a delete of it; the stored revision is read
// only when one of them changed nothing (for the conflict's message, and
// for a delete of an id that holds nothing). The batch's upserts take
// their orderings from the counter in one statement.
func (d *DurableState) Apply(ctx context.Context, changes []durable.Change) ([]error, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if d.s.isClosed() {
		return nil, durable.ErrClosed
	}
	tx, release, err := d.s.writeTxn(ctx)
	if err != nil {
		return nil, d.s.errs.Map(ctx, "write durable state", err, durable.ErrClosed)
	}
	defer release()
	st := &d.s.stmts
	w := stateWriter{revision: tx.Stmt(st.stateRevision), insert: tx.Stmt(st.stateInsert), update: tx.Stmt(st.stateUpdate),
		delete: tx.Stmt(st.stateDelete), now: time.Now().UnixNano()}
	// The batch's upserts take their orderings at once; a conflict leaves
	// a gap, which offsets do not mind (they only grow).
	if n := upserts(changes); n > 0 {
		var last int64
		if err := tx.Stmt(st.stateTakeOrderings).QueryRow(n).Scan(&last); err != nil {
			return nil, d.s.errs.Map(ctx, "write durable state", err, durable.ErrClosed)
		}
		w.ordering = last - n
	}
	var errs []error
	for i, c := range changes {
		err := durable.CheckChange(c)
		if err == nil {
			err = w.apply(c)
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, durable.ErrRevisionConflict) && !errors.Is(err, durable.ErrInvalidArgument) {
			return nil, d.s.errs.Map(ctx, "write durable state", err, durable.ErrClosed)
		}
		if errs == nil {
			errs = make([]error, len(changes))
		}
		errs[i] = err
	}
	if err := tx.Commit(); err != nil {
		return nil, d.s.errs.Map(ctx, "write durable state", err, durable.ErrClosed)
	}
	d.s.signal.Notify()
	return errs, nil
}

// upserts counts the changes that are not deletes.
func upserts(changes []durable.Change) int64 {
	var n int64
	for _, c := range changes {
		if !c.Delete {
			n++
		}
	}
	return n
}

// stateWriter applies the changes of one Apply with its transaction's
// statements.
type stateWriter struct {
	revision, insert, update, delete *sql.Stmt
	now                              int64
	ordering                         int64 // the last ordering used
}

// apply applies c once its id's stored revision is c's minus one (a
// conflict otherwise; a delete of an id that holds nothing does nothing).
func (w *stateWriter) apply(c durable.Change) error {
	o := c.Object
	var res sql.Result
	var err error
	switch {
	case c.Delete:
		res, err = w.delete.Exec(o.PersistenceID, o.Revision-1)
	default:
		payload := o.Payload
		if payload == nil {
			payload = []byte{}
		}
		var tag any
		if o.Tag != "" {
			tag = o.Tag
		}
		w.ordering++ // taken, applied or not
		if o.Revision == 1 {
			res, err = w.insert.Exec(o.PersistenceID, payload, o.SerializerID, o.Manifest, tag, w.now,
				annals.Slice(o.PersistenceID), annals.EntityType(o.PersistenceID), w.ordering)
		} else {
			res, err = w.update.Exec(o.PersistenceID, o.Revision, payload, o.SerializerID, o.Manifest, tag, w.now, w.ordering)
		}
	}
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 1 {
		return nil
	}
	var stored int64
	if err := w.revision.QueryRow(o.PersistenceID).Scan(&stored); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if c.Delete {
		if stored == 0 {
			return nil
		}
		return durable.Conflict("delete", o.PersistenceID, o.Revision, stored)
	}
	return durable.Conflict("upsert", o.PersistenceID, o.Revision, stored)
}

// Close closes the whole Store.
func (d *DurableState) Close() error { return d.s.Close() }

// stateColumns are the change queries' columns in envelopeColumns' shape:
// the revision as the sequence number, the tag as a one-element JSON
// array, no writer, no metadata.
const stateColumns = `ordering, persistence_id, revision, timestamp, payload, serializer_id, manifest, '',
	CASE WHEN tag IS NULL THEN NULL ELSE json_array(tag) END, NULL, slice, entity_type`

const changesBySlicesSQL = `SELECT ` + stateColumns + ` FROM durable_state INDEXED BY durable_state_type_ordering_idx
	WHERE entity_type = ? AND slice BETWEEN ? AND ? AND ordering > ? AND ordering <= ? ORDER BY ordering LIMIT +?`

const changesByTagSQL = `SELECT ` + stateColumns + ` FROM durable_state INDEXED BY durable_state_tag_idx
	WHERE tag = ? AND ordering > ? AND ordering <= ? ORDER BY ordering LIMIT +?`

// CurrentChangesBySlices implements query.DurableStateChangesBySlicesQuery.
func (d *DurableState) CurrentChangesBySlices(ctx context.Context, entityType string, minSlice, maxSlice int, after query.Offset) iter.Seq2[query.Envelope, error] {
	return d.s.scanOrdered(ctx, after, d.s.stmts.maxStateOrdering, durable.ErrClosed, changesBySlicesSQL, entityType, minSlice, maxSlice)
}

// ChangesBySlices implements query.DurableStateChangesBySlicesQuery.
func (d *DurableState) ChangesBySlices(ctx context.Context, entityType string, minSlice, maxSlice int, after query.Offset) *query.Stream[query.Envelope] {
	return query.FollowOffsets(ctx, &d.s.signal, d.s.cfg.poll, after, func(ctx context.Context, after query.Offset) iter.Seq2[query.Envelope, error] {
		return d.CurrentChangesBySlices(ctx, entityType, minSlice, maxSlice, after)
	})
}

// CurrentChangesByTag implements query.DurableStateChangesByTagQuery.
func (d *DurableState) CurrentChangesByTag(ctx context.Context, tag string, after query.Offset) iter.Seq2[query.Envelope, error] {
	return d.s.scanOrdered(ctx, after, d.s.stmts.maxStateOrdering, durable.ErrClosed, changesByTagSQL, tag)
}

// ChangesByTag implements query.DurableStateChangesByTagQuery.
func (d *DurableState) ChangesByTag(ctx context.Context, tag string, after query.Offset) *query.Stream[query.Envelope] {
	return query.FollowOffsets(ctx, &d.s.signal, d.s.cfg.poll, after, func(ctx context.Context, after query.Offset) iter.Seq2[query.Envelope, error] {
		return d.CurrentChangesByTag(ctx, tag, after)
	})
}
