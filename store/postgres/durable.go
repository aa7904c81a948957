package postgres

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/durable"
	"github.com/annals-go/annals/query"
)

// durableStateDDL is the durable_state table of Pekko Persistence R2DBC
// 1.2 (ddl-scripts/create_tables_postgres.sql), on both layouts: the r2dbc
// layout creates it when it is missing, Annals' layout in schema version 2.
const durableStateDDL = `CREATE TABLE IF NOT EXISTS {s}.durable_state (
  slice INT NOT NULL,
  entity_type VARCHAR(255) NOT NULL,
  persistence_id VARCHAR(255) NOT NULL,
  revision BIGINT NOT NULL,
  db_timestamp timestamp with time zone NOT NULL,

  state_ser_id INTEGER NOT NULL,
  state_ser_manifest VARCHAR(255),
  state_payload BYTEA NOT NULL,
  tags TEXT ARRAY,

  PRIMARY KEY(persistence_id, revision)
);
CREATE INDEX IF NOT EXISTS durable_state_slice_idx ON {s}.durable_state(slice, entity_type, db_timestamp, revision)`

// DurableState returns the store's durable-state store, on the
// durable_state table (both layouts). Its Close closes the whole Store.
func (s *Store) DurableState() *DurableState {
	t := table(s.cfg.schema, "durable_state")
	// stored is the id's revision as the statement's snapshot saw it
	// (0: none), for the conflict's message and Delete's no-op.
	stored := `COALESCE((SELECT max(revision) FROM ` + t + ` WHERE persistence_id = $1), 0)`
	return &DurableState{s: s,
		get: `SELECT revision, db_timestamp, state_ser_id, COALESCE(state_ser_manifest, ''), state_payload, COALESCE(tags[1], '')
			FROM ` + t + ` WHERE persistence_id = $1 ORDER BY revision DESC LIMIT 1`,
		insert: `WITH w AS (INSERT INTO ` + t + ` (slice, entity_type, persistence_id, revision, db_timestamp, state_ser_id, state_ser_manifest, state_payload, tags)
			SELECT $2::int, $3::varchar, $1::varchar, 1, transaction_timestamp(), $4::int, $5::varchar, $6::bytea, $7::text[] WHERE NOT EXISTS (SELECT 1 FROM ` + t + ` WHERE persistence_id = $1) RETURNING 1)
			SELECT (SELECT count(*) FROM w), ` + stored,
		update: `WITH w AS (UPDATE ` + t + ` SET revision = $2, db_timestamp = GREATEST(transaction_timestamp(), db_timestamp + interval '1 microsecond'),
			state_ser_id = $4, state_ser_manifest = $5, state_payload = $6, tags = $7
			WHERE persistence_id = $1 AND revision = $3 RETURNING 1)
			SELECT (SELECT count(*) FROM w), ` + stored,
		delete: `WITH w AS (DELETE FROM ` + t + ` WHERE persistence_id = $1 AND revision = $2 RETURNING 1)
			SELECT (SELECT count(*) FROM w), ` + stored,
		bySlices: `SELECT ` + stateColumns + ` FROM ` + t + `
			WHERE entity_type = $1 AND slice BETWEEN $2 AND $3
			AND (db_timestamp, revision, persistence_id) > ($4, $5, $6) AND db_timestamp <= $7
			ORDER BY db_timestamp, revision, persistence_id LIMIT $8`,
		byTag: `SELECT ` + stateColumns + ` FROM ` + t + `
			WHERE tags[1] = $1
			AND (db_timestamp, revision, persistence_id) > ($2, $3, $4) AND db_timestamp <= $5
			ORDER BY db_timestamp, revision, persistence_id LIMIT $6`,
	}
}

// stateColumns are the change queries' columns in the shape of the
// journal's event rows (scanRows): the revision as the sequence number,
// db_timestamp as both timestamps, no writer, no metadata.
const stateColumns = `persistence_id, revision, db_timestamp, db_timestamp, state_ser_id, COALESCE(state_ser_manifest, ''), state_payload, ''::text, tags, NULL::bytea, slice, entity_type`

// DurableState is the durable.Store of a Store, in the row shape and with
// the statements of Pekko Persistence R2DBC 1.2's durable-state store
// (assert-single-writer on), so a JVM service and an Annals service can
// share its objects. The rules, besides durable.Store's:
//
//   - An id's object is one row, changed in place: revision 1 is an
//     INSERT (a unique violation, another writer's revision 1, is
//     durable.ErrRevisionConflict), revision n an UPDATE of the row whose
//     revision is n-1 (no such row: durable.ErrRevisionConflict). Unlike
//     the plugin, revision 1 is not inserted beside an existing row of
//     another revision: that is a conflict too.
//   - slice and entity_type are annals.Slice and annals.EntityType of the
//     id; tags is NULL, or {Tag}; state_ser_manifest is Manifest.
//   - db_timestamp is transaction_timestamp(), on an update the later of
//     it and the previous revision's plus 1µs; Get returns it in UTC as
//     the object's Timestamp.
//   - Delete(id, n) deletes the row whose revision is n-1, as the
//     plugin's deleteObject does: no tombstone is left. When no row was
//     deleted it is a no-op if the id holds nothing and a conflict if it
//     holds another revision.
//   - Get reads the highest revision of the id (the plugin keeps one
//     row); Tag is the first element of tags ("" when NULL or empty: a
//     JVM writer's tags are a set, of one tag for a DurableStateBehavior).
//   - The table must exist: Migrate creates it on both layouts. Calls on
//     a schema without it fail with an error wrapping ErrSchemaMissing.
//
// Errors are mapped as the store's others are (journal.StoreErrors), with
// durable.ErrClosed as the closed error; arguments are checked first with
// durable.Check.
//
// # Change queries
//
// Changes by slices and by tag are read in (db_timestamp, revision,
// persistence_id) order with timestamp offsets whose seen pairs are
// (id, revision), the offsets of Pekko's durable-state queries. Writers
// stamp their rows without the journal's clock row, so the change queries
// follow TimestampOrder's rules on both orderings (see Queries): a live
// query stays BehindCurrentTime behind the database clock and backtracks
// for late commits, and never delivers a revision of an id at or below
// one it delivered. Upserts NOTIFY as event writes do. Changes by tag
// compare the first element of tags (a DurableStateBehavior writes one
// tag). Annals' layout has an index in each query's order (schema version
// 3); the r2dbc layout has the plugin's indexes only, so its pages sort the
// matching rows of the slice range, or scan the table by tag.
type DurableState struct {
	s                           *Store
	get, insert, update, delete string
	bySlices, byTag             string
}

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
	o := durable.Object{PersistenceID: persistenceID}
	err := d.s.pool.QueryRow(ctx, d.get, persistenceID).Scan(&o.Revision, &o.Timestamp, &o.SerializerID, &o.Manifest, &o.Payload, &o.Tag)
	if errors.Is(err, pgx.ErrNoRows) {
		return durable.Object{}, false, nil
	}
	if err != nil {
		return durable.Object{}, false, d.mapErr(ctx, "get durable state", err)
	}
	if o.Payload == nil {
		o.Payload = []byte{}
	}
	o.Timestamp = o.Timestamp.UTC()
	return o, true, nil
}

// Upsert implements durable.Store.Upsert.
func (d *DurableState) Upsert(ctx context.Context, o durable.Object) error {
	return d.one(ctx, durable.Change{Object: o})
}

// Delete implements durable.Store.Delete.
func (d *DurableState) Delete(ctx context.Context, persistenceID string, revision int64) error {
	return d.one(ctx, durable.Change{Object: durable.Object{PersistenceID: persistenceID, Revision: revision}, Delete: true})
}

// one applies one change.
func (d *DurableState) one(ctx context.Context, c durable.Change) error {
	errs, err := d.Apply(ctx, []durable.Change{c})
	if err != nil {
		return err
	}
	if errs != nil {
		return errs[0]
	}
	return nil
}

// Apply implements durable.Batcher: the changes' statements go in one
// round trip and one implicit transaction (one commit), with the NOTIFY.
// A change whose revision does not follow the stored one changes no row
// and fails alone. Only a race for revision 1 with another writer (a
// unique violation) aborts the transaction; then each change is applied
// again in a transaction of its own.
func (d *DurableState) Apply(ctx context.Context, changes []durable.Change) ([]error, error) {
	var errs []error
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(changes))
		}
		errs[i] = err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if d.s.isClosed() {
		return nil, durable.ErrClosed
	}
	type result struct{ changed, stored int64 }
	results := make([]result, len(changes))
	sent := make([]bool, len(changes))
	b := &pgx.Batch{}
	for i, c := range changes {
		if err := checkChange(c); err != nil {
			fail(i, err)
			continue
		}
		stmt, args := d.statement(c)
		r := &results[i]
		b.Queue(stmt, args...).QueryRow(func(row pgx.Row) error { return row.Scan(&r.changed, &r.stored) })
		sent[i] = true
	}
	if b.Len() == 0 {
		return errs, nil
	}
	if d.s.cfg.notify {
		b.Queue(`SELECT pg_notify($1, '')`, d.s.channel)
	}
	err := d.s.pool.SendBatch(ctx, b).Close()
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "23505": // another writer's revision 1
		if n := slices.Index(sent, true); !slices.Contains(sent[n+1:], true) {
			fail(n, durable.Conflict("upsert", changes[n].Object.PersistenceID, 1, 1))
			return errs, nil
		}
		// It aborted the whole transaction: each change again on its
		// own, so that only the one that raced fails.
		for i, c := range changes {
			if !sent[i] {
				continue
			}
			if err := d.one(ctx, c); err != nil {
				if !errors.Is(err, durable.ErrRevisionConflict) {
					return nil, err
				}
				fail(i, err)
			}
		}
		return errs, nil
	case err != nil:
		return nil, d.mapErr(ctx, "write durable state", err)
	}
	d.s.signal.Notify()
	for i, c := range changes {
		r := results[i]
		if sent[i] && r.changed == 0 && !(c.Delete && r.stored == 0) {
			fail(i, durable.Conflict(callOf(c), c.Object.PersistenceID, c.Object.Revision, r.stored))
		}
	}
	return errs, nil
}

// statement returns the statement of a change and its arguments: the
// insert of revision 1 ($2 and $3: slice and entity type), the update of
// revision n ($2 and $3: the new and the stored revision), or the delete
// of the row of revision n-1.
func (d *DurableState) statement(c durable.Change) (string, []any) {
	o := c.Object
	if c.Delete {
		return d.delete, []any{o.PersistenceID, o.Revision - 1}
	}
	payload := o.Payload
	if payload == nil {
		payload = []byte{} // state_payload is NOT NULL
	}
	var tags any // NULL without a tag, as the plugin writes it
	if o.Tag != "" {
		tags = []string{o.Tag}
	}
	if o.Revision == 1 {
		return d.insert, []any{o.PersistenceID, annals.Slice(o.PersistenceID), annals.EntityType(o.PersistenceID), o.SerializerID, o.Manifest, payload, tags}
	}
	return d.update, []any{o.PersistenceID, o.Revision, o.Revision - 1, o.SerializerID, o.Manifest, payload, tags}
}

func callOf(c durable.Change) string {
	if c.Delete {
		return "delete"
	}
	return "upsert"
}

// checkChange checks a change's arguments, naming its call.
func checkChange(c durable.Change) error {
	return durable.Check(callOf(c), c.Object.PersistenceID, c.Object.Revision)
}

// Close closes the whole Store.
func (d *DurableState) Close() error { return d.s.Close() }

// CurrentChangesBySlices implements query.DurableStateChangesBySlicesQuery.
func (d *DurableState) CurrentChangesBySlices(ctx context.Context, entityType string, minSlice, maxSlice int, after query.Offset) iter.Seq2[query.Envelope, error] {
	return d.queries().current(ctx, after, d.bySlicesReader(entityType, minSlice, maxSlice))
}

// ChangesBySlices implements query.DurableStateChangesBySlicesQuery.
func (d *DurableState) ChangesBySlices(ctx context.Context, entityType string, minSlice, maxSlice int, after query.Offset) *query.Stream[query.Envelope] {
	q := d.queries()
	return q.follow(ctx, after, &liveQuery{q: q, read: d.bySlicesReader(entityType, minSlice, maxSlice), ordering: TimestampOrder, states: true})
}

// CurrentChangesByTag implements query.DurableStateChangesByTagQuery.
func (d *DurableState) CurrentChangesByTag(ctx context.Context, tag string, after query.Offset) iter.Seq2[query.Envelope, error] {
	return d.queries().current(ctx, after, d.byTagReader(tag))
}

// ChangesByTag implements query.DurableStateChangesByTagQuery.
func (d *DurableState) ChangesByTag(ctx context.Context, tag string, after query.Offset) *query.Stream[query.Envelope] {
	q := d.queries()
	return q.follow(ctx, after, &liveQuery{q: q, read: d.byTagReader(tag), tag: tag, ordering: TimestampOrder, states: true})
}

func (d *DurableState) queries() *Queries { return &Queries{s: d.s} }

func (d *DurableState) bySlicesReader(entityType string, minSlice, maxSlice int) pageReader {
	return func(ctx context.Context, k key, upper time.Time, limit int, emit func([]row) []row) ([]row, error) {
		return d.s.readOrdered(ctx, limit, emit, d.bySlices, entityType, minSlice, maxSlice, k.ts, k.seq, k.pid, upper, limit)
	}
}

func (d *DurableState) byTagReader(tag string) pageReader {
	return func(ctx context.Context, k key, upper time.Time, limit int, emit func([]row) []row) ([]row, error) {
		return d.s.readOrdered(ctx, limit, emit, d.byTag, tag, k.ts, k.seq, k.pid, upper, limit)
	}
}

// mapErr maps a driver error of operation op: a missing durable_state
// table is ErrSchemaMissing, then the store's rules (journal.StoreErrors)
// apply with durable.ErrClosed.
func (d *DurableState) mapErr(ctx context.Context, op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		err = fmt.Errorf("%w: schema %q has no durable_state table; create it with Store.Migrate or `annals migrate --store URL`: %w", ErrSchemaMissing, d.s.cfg.schema, err)
	}
	return d.s.errs.Map(ctx, op, err, durable.ErrClosed)
}
