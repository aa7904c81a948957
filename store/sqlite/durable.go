package sqlite

import (
	"bytes"
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

// DurableState is the durable.Store of a Store, and its change queries.
// An Upsert or Delete is one transaction on the writer connection, which
// reads the stored revision and writes the next, so two writers of one
// revision cannot both succeed.
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
	return d.one(ctx, durable.Change{Object: o})
}

// Delete implements durable.Store.Delete: it removes the row.
func (d *DurableState) Delete(ctx context.Context, persistenceID string, revision int64) error {
	return d.one(ctx, durable.Change{Object: durable.Object{PersistenceID: persistenceID, Revision: revision}, Delete: true})
}

// one applies one change in a transaction of its own.
func (d *DurableState) one(ctx context.Context, c durable.Change) error {
	if err := checkChange(c); err != nil {
		return err
	}
	errs, err := d.Apply(ctx, []durable.Change{c})
	if err != nil {
		return err
	}
	if errs != nil {
		return errs[0]
	}
	return nil
}

// Apply implements durable.Batcher: the changes are applied in one write
// transaction (one commit), each after reading its id's stored revision.
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
	var errs []error
	now := time.Now().UnixNano()
	for i, c := range changes {
		err := checkChange(c)
		if err == nil {
			err = apply(tx, c, now)
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

// checkChange checks a change's arguments, naming its call.
func checkChange(c durable.Change) error {
	if c.Delete {
		return durable.Check("delete", c.Object.PersistenceID, c.Object.Revision)
	}
	return durable.Check("upsert", c.Object.PersistenceID, c.Object.Revision)
}

// apply applies c in tx once its id's stored revision is c's minus one (a
// conflict otherwise; a delete of an id that holds nothing does nothing):
// an upsert takes the next ordering and writes the row, a delete removes
// it.
func apply(tx *sql.Tx, c durable.Change, now int64) error {
	o := c.Object
	var stored int64
	if err := tx.QueryRow(`SELECT revision FROM durable_state WHERE persistence_id = ?`, o.PersistenceID).Scan(&stored); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	call := "upsert"
	if c.Delete {
		call = "delete"
	}
	switch {
	case c.Delete && stored == 0:
		return nil
	case o.Revision != stored+1:
		return durable.Conflict(call, o.PersistenceID, o.Revision, stored)
	case c.Delete:
		_, err := tx.Exec(`DELETE FROM durable_state WHERE persistence_id = ?`, o.PersistenceID)
		return err
	}
	payload := o.Payload
	if payload == nil {
		payload = []byte{}
	}
	var tag any
	if o.Tag != "" {
		tag = o.Tag
	}
	if _, err := tx.Exec(`UPDATE durable_state_clock SET ordering = ordering + 1`); err != nil {
		return err
	}
	_, err := tx.Exec(`INSERT INTO durable_state (persistence_id, revision, payload, serializer_id, manifest, tag, timestamp, slice, entity_type, ordering)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, (SELECT ordering FROM durable_state_clock))
		ON CONFLICT (persistence_id) DO UPDATE SET revision = excluded.revision, payload = excluded.payload, serializer_id = excluded.serializer_id,
			manifest = excluded.manifest, tag = excluded.tag, timestamp = excluded.timestamp, ordering = excluded.ordering`,
		o.PersistenceID, o.Revision, bytes.Clone(payload), o.SerializerID, o.Manifest, tag, now,
		annals.Slice(o.PersistenceID), annals.EntityType(o.PersistenceID))
	return err
}

// Close closes the whole Store.
func (d *DurableState) Close() error { return d.s.Close() }

// stateColumns are the change queries' columns in envelopeColumns' shape:
// the revision as the sequence number, the tag as a one-element JSON
// array, no writer, no metadata.
const stateColumns = `ordering, persistence_id, revision, timestamp, payload, serializer_id, manifest, '',
	CASE WHEN tag IS NULL THEN NULL ELSE json_array(tag) END, NULL, slice, entity_type`

const changesBySlicesSQL = `SELECT ` + stateColumns + ` FROM durable_state INDEXED BY durable_state_type_ordering_idx
	WHERE entity_type = ? AND slice BETWEEN ? AND ? AND ordering > ? AND ordering <= ? ORDER BY ordering LIMIT ?`

const changesByTagSQL = `SELECT ` + stateColumns + ` FROM durable_state INDEXED BY durable_state_tag_idx
	WHERE tag = ? AND ordering > ? AND ordering <= ? ORDER BY ordering LIMIT ?`

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
