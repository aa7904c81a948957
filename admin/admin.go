// Package admin holds the operator capabilities of stores: what the annals
// command needs beyond the storage contract to create and upgrade a schema,
// report statistics, list projections, measure a projection's backlog,
// remove test data and measure the raw driver.
//
// Each capability is a small interface with its rules as its doc comment.
// Stores implement the ones they can, and tools find them by type
// assertion, as they find the query capabilities:
//
//	if sr, ok := store.(admin.StatsReader); ok { stats, err := sr.Stats(ctx) ... }
//
// Nothing here is used by entities or projections at run time; none of it
// is part of the contract the compliance kit checks.
package admin

import (
	"context"
	"time"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/offsets"
	"github.com/annals-go/annals/query"
)

// Migration is one step of a store's schema: the statements that take it
// from version From to version To.
type Migration struct {
	From, To int
	// SQL is the text of the statements the step runs, in order, as the
	// store runs them (for a dry run to print).
	SQL string
}

// Migrator creates and upgrades a store's schema (annals init and migrate).
// It works on a store that is not open, since opening may itself migrate.
//
// Rules:
//   - SchemaVersion changes nothing and creates nothing. current is 0 for
//     a database that does not exist or has no schema yet; latest is the
//     version this build writes.
//   - PendingMigrations lists, without changing or creating anything, the
//     steps Migrate would run, in order; empty when the schema is current.
//   - Migrate runs the pending steps (creating the database if the store
//     can) and returns them; on a current schema it runs nothing and
//     returns none. Concurrent migrations of one database are safe: one
//     runs the steps, the other finds the schema current.
//   - A database that is not the store's, or whose schema is newer than
//     this build knows, is an error from every method, and is not changed.
type Migrator interface {
	SchemaVersion(ctx context.Context) (current, latest int, err error)
	PendingMigrations(ctx context.Context) ([]Migration, error)
	Migrate(ctx context.Context) ([]Migration, error)
}

// TypeStats are the figures of one entity type (or, summed, of a store).
type TypeStats struct {
	EntityType string
	// PersistenceIDs counts the ids of the type with stored events or with
	// every event deleted (their highest number is still kept).
	PersistenceIDs int64
	// Events counts the stored events (deleted ones are not counted).
	Events int64
	// PayloadBytes is the sum of the stored events' payload sizes.
	PayloadBytes int64
	// HighestSequenceNr is the highest sequence number of any id of the
	// type, deleted events included.
	HighestSequenceNr int64
	// Oldest and Newest are the write timestamps of the oldest and newest
	// stored events; zero when there are none.
	Oldest, Newest time.Time
	// Snapshots counts the stored snapshots of the type's ids, and
	// SnapshotBytes sums their payload sizes.
	Snapshots     int64
	SnapshotBytes int64
}

// Add adds o's figures to t: counts and bytes summed, the highest number
// the larger, the time range widened (EntityType is kept).
func (t *TypeStats) Add(o TypeStats) {
	t.PersistenceIDs += o.PersistenceIDs
	t.Events += o.Events
	t.PayloadBytes += o.PayloadBytes
	t.HighestSequenceNr = max(t.HighestSequenceNr, o.HighestSequenceNr)
	if !o.Oldest.IsZero() && (t.Oldest.IsZero() || o.Oldest.Before(t.Oldest)) {
		t.Oldest = o.Oldest
	}
	if o.Newest.After(t.Newest) {
		t.Newest = o.Newest
	}
	t.Snapshots += o.Snapshots
	t.SnapshotBytes += o.SnapshotBytes
}

// Stats describes what a store holds.
type Stats struct {
	// EntityTypes holds one entry per entity type with events, deletion
	// records or snapshots, ascending by entity type.
	EntityTypes []TypeStats
	// StorageBytes is the space the store takes (the database file and its
	// log, or the tables and indexes); 0 when unknown.
	StorageBytes int64
}

// StatsReader reports a store's statistics (annals stats).
//
// Rules: Stats changes nothing. Its figures are consistent with one another
// (one snapshot of the data, where the store has snapshots). Entity types
// are those annals.EntityType gives for the persistence ids.
type StatsReader interface {
	Stats(ctx context.Context) (Stats, error)
}

// ProjectionInstance is what an offset store keeps for one projection
// instance.
type ProjectionInstance struct {
	ID offsets.ID
	offsets.State
	// Updated is when the offset or the paused flag last changed; zero
	// when unknown.
	Updated time.Time
}

// ProjectionLister lists the projection instances an offset store knows
// (annals projections).
//
// Rules: ListProjections changes nothing. It returns every instance with a
// stored offset or a stored paused flag, once each, ascending by name and
// then key; State is what [offsets.Store.Load] would return for it.
type ProjectionLister interface {
	ListProjections(ctx context.Context) ([]ProjectionInstance, error)
}

// EventFilter selects events: of one entity type (empty: any), carrying
// one tag (empty: any), with slices in MinSlice..MaxSlice (inclusive; pass
// 0 and annals.NumberOfSlices-1 for all).
type EventFilter struct {
	EntityType         string
	Tag                string
	MinSlice, MaxSlice int
}

// Backlog is what lies after an offset.
type Backlog struct {
	// Events counts the stored events after the offset that match the
	// filter.
	Events int64
	// Oldest and Newest are the write timestamps of the oldest and newest
	// of those events; zero when there are none.
	Oldest, Newest time.Time
}

// BacklogReader measures what a projection has still to process (annals
// projections status).
//
// Rules: Backlog changes nothing. It counts the events a query from after
// (exclusive, as queries are) would return that match f, at the time of the
// call: for a timestamp offset, the events at exactly its timestamp that it
// lists as seen are not counted, so a projection that has caught up has a
// backlog of 0. A store that does not resume from after's kind of offset
// returns an error wrapping [query.ErrUnsupportedOffset].
type BacklogReader interface {
	Backlog(ctx context.Context, after query.Offset, f EventFilter) (Backlog, error)
}

// IntegrityChecker checks a store's own files or tables for damage (annals
// verify), as the database's own checker does (SQLite's integrity_check).
//
// Rules: CheckIntegrity changes nothing. It returns one line per problem
// the check found, none when it passed; an error only when the check could
// not run.
type IntegrityChecker interface {
	CheckIntegrity(ctx context.Context) ([]string, error)
}

// Purger removes persistence ids entirely: their events, tag entries,
// deletion records (so their highest sequence number is forgotten) and
// snapshots. It is for tools that clean up the ids they wrote themselves
// (annals check and bench); entities must never use it, since an id that
// forgets its highest number may reuse sequence numbers.
//
// Rules: Purge removes all of each listed id, atomically per call where
// the store can; ids that do not exist are not an error. Other ids are not
// touched.
type Purger interface {
	Purge(ctx context.Context, persistenceIDs []string) error
}

// Rewritten counts what a SerializerRewriter changed.
type Rewritten struct {
	Events, Snapshots, DurableStates int64
}

// SerializerRewriter changes the serializer id stored beside payloads,
// leaving the payloads as they are (annals rewrite-serializer): Annals'
// JSON serializer wrote id 33 before it took jackson-json's 31, and a JVM
// service sharing the store reads 33 as CBOR.
//
// Rules: every event, snapshot and durable state stored under from is
// stored under to afterwards, in one transaction; nothing else changes;
// from equal to to changes nothing. With dryRun nothing changes and the
// counts are what would change.
type SerializerRewriter interface {
	RewriteSerializerID(ctx context.Context, from, to int32, dryRun bool) (Rewritten, error)
}

// Baseline does the store's work with the raw driver and no Annals code,
// on the same database and with the same durability, so that annals bench
// can show the cost of the layers above it. Each method does what its
// counterpart in the store does, the simplest way the driver allows.
type Baseline interface {
	// InsertRaw stores events in one transaction, as the journal stores
	// them (without tags). Events get the store's slice and entity type.
	InsertRaw(ctx context.Context, events []journal.Repr) error
	// ReplayRaw reads the events of persistenceID with sequence numbers up
	// to to, ascending, reading every column a replay returns; it returns
	// how many it read.
	ReplayRaw(ctx context.Context, persistenceID string, to int64) (int64, error)
	// ScanSlicesRaw reads the events of entityType in the slice range, in
	// the order of a query by slices, reading every column an envelope
	// carries; it returns how many it read.
	ScanSlicesRaw(ctx context.Context, entityType string, minSlice, maxSlice int) (int64, error)
	// Close releases the driver's connections.
	Close() error
}

// BaselineOpener opens a [Baseline] on the store's database.
type BaselineOpener interface {
	OpenBaseline(ctx context.Context) (Baseline, error)
}
