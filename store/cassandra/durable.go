package cassandra

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/durable"
)

// durableStateTable is the durable-state store's table, one of
// optionalTables.
const durableStateTable = "durable_state"

// DurableState returns the store's durable-state store, on the
// durable_state table of the keyspace. Its Close closes the whole Store.
func (s *Store) DurableState() *DurableState {
	t := s.cfg.keyspace + "." + durableStateTable
	return &DurableState{s: s,
		get: `SELECT revision, state_payload, state_ser_id, state_ser_manifest, tag, write_time_micros FROM ` + t + ` WHERE persistence_id = ?`,
		insert: `INSERT INTO ` + t + ` (persistence_id, revision, state_payload, state_ser_id, state_ser_manifest, tag, write_time_micros, slice, entity_type)
	VALUES (?, 1, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS`,
		update: `UPDATE ` + t + ` SET revision = ?, state_payload = ?, state_ser_id = ?, state_ser_manifest = ?, tag = ?, write_time_micros = ?
	WHERE persistence_id = ? IF revision = ?`,
		delete: `DELETE FROM ` + t + ` WHERE persistence_id = ? IF revision = ?`,
	}
}

// DurableState is the durable.Store of a Store, in a table of Annals' own
// (Pekko Persistence Cassandra has no durable state):
//
//	CREATE TABLE durable_state (persistence_id text PRIMARY KEY, revision bigint,
//	  state_payload blob, state_ser_id int, state_ser_manifest text, tag text,
//	  write_time_micros bigint, slice int, entity_type text)
//
// The rules, besides durable.Store's:
//
//   - An id's object is one row (one partition), changed in place by
//     lightweight transactions: revision 1 is an INSERT … IF NOT EXISTS,
//     revision n an UPDATE … IF revision = n-1, Delete(id, n) a DELETE …
//     IF revision = n-1. Paxos orders racing transactions of one id, so of
//     writers racing for one revision exactly one is applied; a
//     transaction that is not applied is durable.ErrRevisionConflict,
//     naming the revision the transaction read (0: none). Revision 1 on an
//     id that holds an object is a conflict too.
//   - Delete removes the row: no tombstone revision is kept, so the id's
//     next Upsert is revision 1. A DELETE not applied because the id holds
//     nothing is the contract's no-op.
//   - The transactions run at the store's write consistency (LOCAL_QUORUM
//     by default) with LOCAL_SERIAL as their serial consistency, as the
//     journal's conditional batches do; Get reads at the store's read
//     consistency (LOCAL_QUORUM by default). A write that returned was
//     committed at the write consistency, so Get sees it when read and
//     write quorums overlap (the defaults do). Get does not read at SERIAL:
//     no write depends on it (each write's condition is checked in its own
//     transaction, so a stale Get leads to a conflict, never to an
//     overwrite), and a SERIAL read is a Paxos round.
//   - Timestamp is the store's clock (time.Now, or WithClock's) when the
//     revision was written, kept in Unix microseconds (write_time_micros)
//     and returned in UTC. Revisions written in the same microsecond, or
//     by writers whose clocks disagree, may carry equal or decreasing
//     times.
//   - slice and entity_type are annals.Slice and annals.EntityType of the
//     id, written with revision 1; tag and state_ser_manifest are Tag and
//     Manifest ("" is stored as an empty text, not as null).
//   - An error other than the conflict (a timeout among them) leaves the
//     outcome unknown: the write may have been applied.
//   - Open does not require the table (keyspaces of earlier Annals
//     versions and of Pekko services open without it); Migrate creates
//     it. Calls on a keyspace without it fail with an error wrapping
//     ErrSchemaMissing.
//
// Errors are mapped as the store's others are (journal.StoreErrors), with
// durable.ErrClosed as the closed error; arguments are checked first with
// durable.Check, then ctx, then whether the store is closed.
type DurableState struct {
	s                           *Store
	get, insert, update, delete string
}

var _ durable.Store = (*DurableState)(nil)

// Get implements durable.Store.Get: the id's row, read at the store's read
// consistency.
func (d *DurableState) Get(ctx context.Context, persistenceID string) (durable.Object, bool, error) {
	if err := d.ready(ctx, "get", persistenceID, 1); err != nil {
		return durable.Object{}, false, err
	}
	o := durable.Object{PersistenceID: persistenceID}
	var micros int64
	err := d.s.session.Query(d.get, persistenceID).WithContext(ctx).Consistency(d.s.cfg.readCL).
		Scan(&o.Revision, &o.Payload, &o.SerializerID, &o.Manifest, &o.Tag, &micros)
	if errors.Is(err, gocql.ErrNotFound) {
		return durable.Object{}, false, nil
	}
	if err != nil {
		return durable.Object{}, false, d.mapErr(ctx, "get durable state", err)
	}
	o.Payload = slices.Clone(o.Payload)
	if o.Payload == nil {
		o.Payload = []byte{}
	}
	o.Timestamp = time.UnixMicro(micros).UTC()
	return o, true, nil
}

// Upsert implements durable.Store.Upsert with one lightweight transaction:
// INSERT … IF NOT EXISTS for revision 1, UPDATE … IF revision = n-1 for
// revision n.
func (d *DurableState) Upsert(ctx context.Context, o durable.Object) error {
	if err := d.ready(ctx, "upsert", o.PersistenceID, o.Revision); err != nil {
		return err
	}
	payload := o.Payload
	if payload == nil {
		payload = []byte{} // an empty blob, not a null
	}
	now := d.s.cfg.now().UnixMicro()
	var q *gocql.Query
	if o.Revision == 1 {
		q = d.s.session.Query(d.insert, o.PersistenceID, payload, o.SerializerID, o.Manifest, o.Tag, now,
			annals.Slice(o.PersistenceID), annals.EntityType(o.PersistenceID))
	} else {
		q = d.s.session.Query(d.update, o.Revision, payload, o.SerializerID, o.Manifest, o.Tag, now,
			o.PersistenceID, o.Revision-1)
	}
	applied, stored, err := d.cas(ctx, q)
	if err != nil {
		return d.mapErr(ctx, "upsert durable state", err)
	}
	if !applied {
		return durable.Conflict("upsert", o.PersistenceID, o.Revision, stored)
	}
	return nil
}

// Delete implements durable.Store.Delete with one lightweight transaction,
// DELETE … IF revision = n-1: not applied, it is a no-op when the id holds
// nothing and a conflict when it holds another revision.
func (d *DurableState) Delete(ctx context.Context, persistenceID string, revision int64) error {
	if err := d.ready(ctx, "delete", persistenceID, revision); err != nil {
		return err
	}
	applied, stored, err := d.cas(ctx, d.s.session.Query(d.delete, persistenceID, revision-1))
	if err != nil {
		return d.mapErr(ctx, "delete durable state", err)
	}
	if !applied && stored != 0 {
		return durable.Conflict("delete", persistenceID, revision, stored)
	}
	return nil
}

// Close closes the whole Store.
func (d *DurableState) Close() error { return d.s.Close() }

// cas runs the lightweight transaction q: whether it was applied, and when
// it was not, the revision it read (0: no row).
func (d *DurableState) cas(ctx context.Context, q *gocql.Query) (applied bool, stored int64, err error) {
	var revision *int64
	// A not-applied INSERT … IF NOT EXISTS returns the whole row, UPDATE
	// and DELETE the condition's column: both hold revision.
	applied, err = q.WithContext(ctx).Consistency(d.s.cfg.writeCL).SerialConsistency(d.s.cfg.serialCL).
		MapScanCAS(map[string]any{"revision": &revision})
	if err != nil || applied || revision == nil {
		return applied, 0, err
	}
	return false, *revision, nil
}

// ready checks a call's arguments, its context and the store, in that
// order.
func (d *DurableState) ready(ctx context.Context, call, persistenceID string, revision int64) error {
	if err := durable.Check(call, persistenceID, revision); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if d.s.isClosed() {
		return durable.ErrClosed
	}
	return nil
}

// mapErr maps a driver error of operation op: a missing durable_state
// table is ErrSchemaMissing, then the store's rules (journal.StoreErrors)
// apply with durable.ErrClosed.
func (d *DurableState) mapErr(ctx context.Context, op string, err error) error {
	var re gocql.RequestError
	if errors.As(err, &re) && re.Code() == gocql.ErrCodeInvalid && missingTable(re.Message(), durableStateTable) {
		err = fmt.Errorf("%w: keyspace %s has no %s table; create it with Migrator.Migrate, WithMigrate or `annals migrate --store URL`: %w",
			ErrSchemaMissing, d.s.cfg.keyspace, durableStateTable, err)
	}
	return d.s.errs.Map(ctx, op, err, durable.ErrClosed)
}

// missingTable reports whether a server message of an invalid request
// says that table does not exist (Cassandra 4 and 5: "table durable_state
// does not exist", 3: "unconfigured table durable_state").
func missingTable(msg, table string) bool {
	return strings.Contains(msg, table) && (strings.Contains(msg, "does not exist") || strings.Contains(msg, "unconfigured table"))
}
