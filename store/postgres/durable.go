package postgres

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strings"
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
	// A tag travels as one text per row (NULL: none) and is stored as a
	// one-element array, as the plugin writes it. The rows of one Apply
	// are stamped 1µs apart (the statement's last parameter: how many rows
	// its earlier statements stamped), so that they do not share one
	// timestamp: a change query's offset lists the ids seen at its
	// timestamp, and 1,000 ids at one timestamp made every offset of the
	// batch a copy of a map of up to 1,000 entries.
	tags := `CASE WHEN u.tag IS NULL THEN NULL ELSE ARRAY[u.tag] END`
	return &DurableState{s: s,
		get: `SELECT revision, db_timestamp, state_ser_id, COALESCE(state_ser_manifest, ''), state_payload, COALESCE(tags[1], '')
			FROM ` + t + ` WHERE persistence_id = $1 ORDER BY revision DESC LIMIT 1`,
		insert: `INSERT INTO ` + t + ` (slice, entity_type, persistence_id, revision, db_timestamp, state_ser_id, state_ser_manifest, state_payload, tags)
			SELECT u.slice, u.entity_type, u.pid, 1, transaction_timestamp() + ($8 + u.n - 1) * interval '1 microsecond', u.ser_id, u.manifest, u.payload, ` + tags + `
			FROM unnest($1::text[], $2::int[], $3::text[], $4::int[], $5::text[], $6::bytea[], $7::text[]) WITH ORDINALITY AS u(pid, slice, entity_type, ser_id, manifest, payload, tag, n)
			WHERE NOT EXISTS (SELECT 1 FROM ` + t + ` d WHERE d.persistence_id = u.pid)
			ON CONFLICT DO NOTHING
			RETURNING persistence_id`,
		update: `UPDATE ` + t + ` AS d SET revision = u.rev,
				db_timestamp = GREATEST(transaction_timestamp() + ($7 + u.n - 1) * interval '1 microsecond', d.db_timestamp + interval '1 microsecond'),
				state_ser_id = u.ser_id, state_ser_manifest = u.manifest, state_payload = u.payload, tags = ` + tags + `
			FROM unnest($1::text[], $2::bigint[], $3::int[], $4::text[], $5::bytea[], $6::text[]) WITH ORDINALITY AS u(pid, rev, ser_id, manifest, payload, tag, n)
			WHERE d.persistence_id = u.pid AND d.revision = u.rev - 1
			RETURNING d.persistence_id`,
		delete: `DELETE FROM ` + t + ` AS d USING unnest($1::text[], $2::bigint[]) AS u(pid, rev)
			WHERE d.persistence_id = u.pid AND d.revision = u.rev - 1
			RETURNING d.persistence_id`,
		stored: `SELECT persistence_id, max(revision) FROM ` + t + ` WHERE persistence_id = ANY($1) GROUP BY persistence_id`,
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
// stamp their rows without the journal's clock row (the rows of one Apply
// 1µs apart, from the transaction's time; an update at least 1µs after
// the row it replaces), so the change queries follow TimestampOrder's
// rules on both orderings (see Queries): a live query stays
// BehindCurrentTime behind the database clock and backtracks for late
// commits (within WithBacktracking's window and distance), delivers no
// change twice, and a revision of an id only after the lower ones it
// delivered, except revision 1 of an object written again after a
// delete. Upserts NOTIFY as event writes do. Changes by tag compare the
// first element of tags (a DurableStateBehavior writes one tag). Annals'
// layout has an index in each query's order (schema version 3); the r2dbc
// layout has the plugin's indexes only, so its pages sort the matching
// rows of the slice range, or scan the table by tag.
type DurableState struct {
	s                                   *Store
	get, insert, update, delete, stored string
	bySlices, byTag                     string
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
	return durable.ApplyOne(ctx, d, durable.Change{Object: o})
}

// Delete implements durable.Store.Delete.
func (d *DurableState) Delete(ctx context.Context, persistenceID string, revision int64) error {
	return durable.ApplyOne(ctx, d, durable.Change{Object: durable.Object{PersistenceID: persistenceID, Revision: revision}, Delete: true})
}

// Apply implements durable.Batcher: the changes go in one round trip and
// one implicit transaction (one commit), with the NOTIFY, as at most three
// set-based statements (the inserts of revision 1, the updates of the row
// of the revision before, the deletes of it) per run of changes whose ids
// are distinct; a later change of an id starts a new run. A change whose
// revision does not follow the stored one changes no row; the stored
// revisions of those are read afterwards, for the conflicts' messages and
// for deletes of ids that hold nothing. Two writers inserting revision 1
// of an id do not fail each other's transactions: the second does
// nothing (ON CONFLICT DO NOTHING) and its change is a conflict.
func (d *DurableState) Apply(ctx context.Context, changes []durable.Change) ([]error, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if d.s.isClosed() {
		return nil, durable.ErrClosed
	}
	var errs []error
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(changes))
		}
		errs[i] = err
	}
	applied := make([]bool, len(changes))
	b := &pgx.Batch{}
	stamped := 0
	for start := 0; start < len(changes); {
		// One run: the changes from start up to the next repeated id.
		run := map[string]int{} // id → its change's index
		end := start
		for ; end < len(changes); end++ {
			pid := changes[end].Object.PersistenceID
			if _, again := run[pid]; again {
				break
			}
			if err := durable.CheckChange(changes[end]); err != nil {
				fail(end, err)
				continue
			}
			run[pid] = end
		}
		d.queueRun(b, changes, run, applied, &stamped)
		start = end
	}
	if b.Len() == 0 {
		return errs, nil
	}
	if d.s.cfg.notify {
		b.Queue(`SELECT FROM `+notifySQL("$1"), d.s.channel) // a statement of its own: the batch's statements each return their changes
	}
	if err := d.s.pool.SendBatch(ctx, b).Close(); err != nil {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || !refused(pgErr) {
			return nil, d.mapErr(ctx, "write durable state", err)
		}
		// A value the server refuses (too long, not valid text) rolled the
		// whole batch back: with several changes, each goes again on its
		// own, so that only the refused one fails; alone, it is invalid.
		if n := len(changes) - countErrs(errs); n > 1 {
			for i, c := range changes {
				if errs != nil && errs[i] != nil {
					continue
				}
				if err := durable.ApplyOne(ctx, d, c); err != nil {
					if !errors.Is(err, durable.ErrRevisionConflict) && !errors.Is(err, durable.ErrInvalidArgument) {
						return nil, err
					}
					fail(i, err)
				}
			}
			return errs, nil
		}
		for i := range changes {
			if errs == nil || errs[i] == nil {
				fail(i, fmt.Errorf("%w: %s %s revision %d: the server refused a value: %w", durable.ErrInvalidArgument,
					callOf(changes[i]), changes[i].Object.PersistenceID, changes[i].Object.Revision, err))
			}
		}
		return errs, nil
	}
	d.s.signal.Notify()
	var missed []string
	for i, c := range changes {
		if !applied[i] && (errs == nil || errs[i] == nil) {
			missed = append(missed, c.Object.PersistenceID)
		}
	}
	if len(missed) == 0 {
		return errs, nil
	}
	stored := map[string]int64{}
	rows, err := d.s.pool.Query(ctx, d.stored, missed)
	if err == nil {
		var pid string
		var rev int64
		_, err = pgx.ForEachRow(rows, []any{&pid, &rev}, func() error { stored[pid] = rev; return nil })
	}
	for i, c := range changes {
		if applied[i] || (errs != nil && errs[i] != nil) {
			continue
		}
		switch rev := stored[c.Object.PersistenceID]; {
		case err != nil:
			// The batch is committed; what is known of this change is that
			// it changed no row.
			fail(i, fmt.Errorf("%w: %s %s revision %d: not applied (the stored revision could not be read: %w)",
				durable.ErrRevisionConflict, callOf(c), c.Object.PersistenceID, c.Object.Revision, d.mapErr(ctx, "read durable state revisions", err)))
		case !(c.Delete && rev == 0):
			fail(i, durable.Conflict(callOf(c), c.Object.PersistenceID, c.Object.Revision, rev))
		}
	}
	return errs, nil
}

// queueRun queues the statements of one run of changes (run: each id's
// change index, the ids distinct), which mark applied the changes whose
// rows they changed.
func (d *DurableState) queueRun(b *pgx.Batch, changes []durable.Change, run map[string]int, applied []bool, stamped *int) {
	// Each statement changes its rows in id order, so that two batches of
	// overlapping ids (two processes, or a JVM writer) lock them in one
	// order and wait for each other instead of deadlocking.
	order := slices.SortedFunc(maps.Values(run), func(a, b int) int {
		return strings.Compare(changes[a].Object.PersistenceID, changes[b].Object.PersistenceID)
	})
	var ins, upd, del []int
	for _, i := range order {
		switch c := changes[i]; {
		case c.Delete:
			del = append(del, i)
		case c.Object.Revision == 1:
			ins = append(ins, i)
		default:
			upd = append(upd, i)
		}
	}
	mark := func(rows pgx.Rows) error {
		var pid string
		_, err := pgx.ForEachRow(rows, []any{&pid}, func() error { applied[run[pid]] = true; return nil })
		return err
	}
	columns := func(idx []int) (pids, manifests []string, serIDs []int32, payloads [][]byte, tags []*string) {
		for _, i := range idx {
			o := changes[i].Object
			payload := o.Payload
			if payload == nil {
				payload = []byte{} // state_payload is NOT NULL
			}
			var tag *string // NULL without a tag, as the plugin writes it
			if o.Tag != "" {
				tag = &o.Tag
			}
			pids, manifests, serIDs = append(pids, o.PersistenceID), append(manifests, o.Manifest), append(serIDs, o.SerializerID)
			payloads, tags = append(payloads, payload), append(tags, tag)
		}
		return
	}
	if len(ins) > 0 {
		pids, manifests, serIDs, payloads, tags := columns(ins)
		slices, types := make([]int32, len(ins)), make([]string, len(ins))
		for k, pid := range pids {
			slices[k], types[k] = int32(annals.Slice(pid)), annals.EntityType(pid)
		}
		b.Queue(d.insert, pids, slices, types, serIDs, manifests, payloads, tags, *stamped).Query(mark)
		*stamped += len(ins)
	}
	if len(upd) > 0 {
		pids, manifests, serIDs, payloads, tags := columns(upd)
		revs := make([]int64, len(upd))
		for k, i := range upd {
			revs[k] = changes[i].Object.Revision
		}
		b.Queue(d.update, pids, revs, serIDs, manifests, payloads, tags, *stamped).Query(mark)
		*stamped += len(upd)
	}
	if len(del) > 0 {
		pids, revs := make([]string, len(del)), make([]int64, len(del))
		for k, i := range del {
			pids[k], revs[k] = changes[i].Object.PersistenceID, changes[i].Object.Revision
		}
		b.Queue(d.delete, pids, revs).Query(mark)
	}
}

// refused reports a server error that refuses a value of the statement
// (SQLSTATE class 22, data exception, such as a value too long for its
// column or text that is not valid UTF-8, or 54, a program limit).
func refused(e *pgconn.PgError) bool {
	return strings.HasPrefix(e.Code, "22") || strings.HasPrefix(e.Code, "54")
}

// countErrs counts the changes that failed before the batch was sent.
func countErrs(errs []error) int {
	n := 0
	for _, err := range errs {
		if err != nil {
			n++
		}
	}
	return n
}

func callOf(c durable.Change) string {
	if c.Delete {
		return "delete"
	}
	return "upsert"
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

func (d *DurableState) queries() *Queries { return &Queries{s: d.s, states: d} }

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
