package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/offsets"
	"github.com/annals-go/annals/query"
)

// Layout is the set of tables a store's schema holds.
type Layout int

const (
	// LayoutDetect (the zero Layout, and Open's default) uses the layout
	// the schema holds: the Annals layout when it holds Annals' version
	// table, the r2dbc layout when it holds an event_journal with the
	// plugin's deleted and meta_payload columns and no Annals version
	// table. A schema that holds neither gets the Annals layout from
	// Migrate.
	LayoutDetect Layout = iota
	// LayoutAnnals is Annals' own layout: event_journal, event_tag,
	// journal_metadata, journal_clock, snapshot (several per id),
	// projection_offset_store, projection_management, durable_state (the
	// plugin's table, from schema version 2), cluster_members and
	// cluster_leases (from schema version 4) and the annals_schema version
	// table.
	LayoutAnnals
	// LayoutR2DBC is the layout of akka-persistence-r2dbc and Pekko
	// Persistence R2DBC 1.2 (ddl-scripts/create_tables_postgres.sql):
	// event_journal, snapshot (one per id), projection_offset_store,
	// projection_timestamp_offset_store and projection_management, with
	// exactly the plugin's columns, types, defaults and indexes, and of
	// Annals' own only the membership tables cluster_members and
	// cluster_leases, which JVM services ignore (Migrate creates the
	// missing ones, durable_state included, and changes none it finds;
	// Open needs only event_journal and snapshot). A JVM service with the
	// plugin and an Annals service share such a schema.
	// The store keeps the plugin's rules there:
	//
	//   - Events are written in the plugin's row shape: slice and
	//     entity_type (the part of the id before the first '|'), writer
	//     (journal.Repr.WriterID), an empty adapter_manifest, tags as text[]
	//     (NULL without tags), deleted false, and metadata NULL, or
	//     meta_ser_id 4 (the bytes serializer), an empty meta_ser_manifest
	//     and journal.Repr.Metadata as meta_payload.
	//   - db_timestamp is the later of transaction_timestamp() and the
	//     db_timestamp of the id's row just before the write plus 1µs, then
	//     1µs more per event of the atomic write. Only TimestampOrder is
	//     offered (the default there; ordering=commit is refused): JVM
	//     writers take no clock row.
	//   - The layout has no write time: journal.Repr.Timestamp and
	//     envelopes' Timestamp read as db_timestamp, as the plugin's do.
	//   - DeleteTo deletes the id's rows up to to and inserts, in the same
	//     transaction, a delete marker at to (deleted true, event_ser_id 0,
	//     empty manifest, payload, writer and adapter_manifest, NULL tags
	//     and metadata), to lowered to the highest number; nothing changes
	//     for an id with no rows or one already deleted up to to. Every
	//     read skips markers; HighestSequenceNr and CurrentPersistenceIDs
	//     count them, as the plugin does.
	//   - Snapshots are one row per id: a save replaces it whatever its
	//     sequence number (the plugin's upsert) and clears its metadata
	//     columns; write_timestamp is epoch milliseconds, so snapshot
	//     timestamps and criteria have millisecond precision.
	//   - Events by tag read the tags array (no index; the plugin offers no
	//     such query).
	//   - The plugin's only query index is (slice, entity_type,
	//     db_timestamp, seq_nr): a page of events by slices, by type or by
	//     tag reads every row of the type after the page's position and
	//     sorts them, as the plugin's own queries do (measured on 500,000
	//     events: 150–300 ms a page, however few rows it returns). An
	//     index the plugin ignores, CREATE INDEX ON event_journal
	//     (entity_type, db_timestamp, seq_nr, persistence_id), makes each
	//     page an ordered index scan (0.4 ms there); the layout is still
	//     detected with it, and Migrate does not create it.
	//   - Durable state is the plugin's durable_state table, one row per
	//     id updated in place, written and read as the plugin's
	//     durable-state store does (see DurableState).
	//   - Projection offsets are stored as the JVM's projection offset
	//     store stores and reads them (see Projections): a projection can
	//     move between a Go and a JVM service.
	LayoutR2DBC
)

// String returns the layout's URL value: "detect", "annals" or "r2dbc".
func (l Layout) String() string {
	switch l {
	case LayoutAnnals:
		return "annals"
	case LayoutR2DBC:
		return "r2dbc"
	case LayoutDetect:
		return "detect"
	}
	return fmt.Sprintf("Layout(%d)", int(l))
}

// ErrWrongLayout reports a schema that holds another layout than the one
// asked for; its message names both.
var ErrWrongLayout = errors.New("postgres: the schema holds another layout")

// WithLayout chooses the schema's layout (URL: layout=annals,
// layout=r2dbc or layout=detect; default LayoutDetect). Open and Migrate
// fail with ErrWrongLayout when the schema already holds the other one.
func WithLayout(l Layout) Option { return func(c *config) { c.layout = l } }

// parseLayout reads the URL value of the layout parameter.
func parseLayout(v string) (Layout, error) {
	for _, l := range []Layout{LayoutDetect, LayoutAnnals, LayoutR2DBC} {
		if v == l.String() {
			return l, nil
		}
	}
	return 0, fmt.Errorf("%w: layout=%q (want annals, r2dbc or detect)", ErrInvalidConfig, v)
}

// ErrLayoutUnsupported reports an operation the store's layout does not
// offer.
var ErrLayoutUnsupported = errors.New("postgres: not offered on this layout")

// layout is what differs between the two layouts: their SQL and the few
// operations that are not the same statements with other text. Open picks
// one (newLayout) and the rest of the package goes through it: Annals'
// layout is annals*.go, the r2dbc layout r2dbc*.go.
type layout interface {
	// configure adjusts the store's configuration to the layout, before
	// statements: an error when an option asked for cannot be kept.
	configure(c *config) error
	// statements returns the layout's SQL of the code both layouts share.
	statements() statements
	// writeArgs returns the arguments of the insert statement for the
	// atomic writes writes[pending...], in a transaction whose statements
	// insert total rows, before of them ahead of this one, with floors the
	// rows' floors in TimestampOrder (see stampSQL; floorCells), and
	// whether any event has tags (the insert that writes tags, then).
	writeArgs(writes []journal.AtomicWrite, pending []int, now time.Time, floors stampCells, before, total int64) ([]any, bool)
	// deleteTo is Journal.DeleteTo, its arguments checked.
	deleteTo(ctx context.Context, persistenceID string, to int64) error

	// check is Open's check of the schema, without migrating.
	check(ctx context.Context) error
	// pending returns the steps Migrate runs on the schema as q sees it.
	pending(ctx context.Context, q querier) ([]step, error)
	// version is Migrator.SchemaVersion.
	version(ctx context.Context) (current, latest int, err error)

	// journalStats reads Stats' journal figures in tx (see Store.Stats).
	journalStats(ctx context.Context, tx pgx.Tx, get func(string) *admin.TypeStats) error
	// backlog is the start of Backlog's statement: the count, oldest and
	// newest time of the events e at or after $1 of entity type $2 ('':
	// any), slices $3–$4 and tag $5 ('': any).
	backlog() string
	// purged are the tables Purge deletes an id's rows from.
	purged() []string
	// listProjections is Store.ListProjections.
	listProjections(ctx context.Context) ([]admin.ProjectionInstance, error)
	// openBaseline is Store.OpenBaseline.
	openBaseline(ctx context.Context) (admin.Baseline, error)

	// loadOffset, saveOffset (in tx, or in the pool when tx is nil) and
	// resetOffset are Projections' Load, SaveOffset and Reset.
	loadOffset(ctx context.Context, id offsets.ID) (offsets.State, error)
	saveOffset(ctx context.Context, tx pgx.Tx, id offsets.ID, o query.Offset) error
	resetOffset(ctx context.Context, id offsets.ID) error
}

// newLayout returns the layout value of l for s (l is LayoutAnnals or
// LayoutR2DBC): the one place the layout is chosen.
func newLayout(s *Store, l Layout) layout {
	if l == LayoutR2DBC {
		return r2dbcLayout{s: s}
	}
	return newAnnalsLayout(s)
}

// schemaLayout reads the layout the schema holds: LayoutAnnals when its
// annals_schema table exists, LayoutR2DBC when event_journal has the
// plugin's deleted and meta_payload columns and there is no annals_schema,
// LayoutDetect when it holds neither table. An event_journal of neither
// layout is an ErrNotAnnals.
func (s *Store) schemaLayout(ctx context.Context, q querier) (Layout, error) {
	var hasVersion, hasJournal, hasDeleted, hasMeta bool
	err := q.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL,
	EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = $3 AND table_name = 'event_journal' AND column_name = 'deleted'),
	EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = $3 AND table_name = 'event_journal' AND column_name = 'meta_payload')`,
		table(s.cfg.schema, "annals_schema"), table(s.cfg.schema, "event_journal"), s.cfg.schema).Scan(&hasVersion, &hasJournal, &hasDeleted, &hasMeta)
	switch {
	case err != nil:
		return 0, fmt.Errorf("postgres: read the layout of schema %q: %w", s.cfg.schema, err)
	case hasVersion:
		return LayoutAnnals, nil
	case hasJournal && hasDeleted && hasMeta:
		return LayoutR2DBC, nil
	case hasJournal:
		return 0, fmt.Errorf("%w: %s.event_journal exists without %s.annals_schema, and without the deleted and meta_payload columns of the r2dbc layout", ErrNotAnnals, s.cfg.schema, s.cfg.schema)
	}
	return LayoutDetect, nil
}

// pickLayout returns the layout a store uses on a schema that holds held
// (LayoutDetect: neither): the configured layout, or when none was
// configured the one the schema holds (Annals' for an empty schema). A
// configured layout that differs from the one the schema holds is an
// ErrWrongLayout naming both.
func (s *Store) pickLayout(held Layout) (Layout, error) {
	want := s.cfg.layout
	switch {
	case want == LayoutDetect && held == LayoutDetect:
		return LayoutAnnals, nil
	case want == LayoutDetect:
		return held, nil
	case held != LayoutDetect && held != want:
		return 0, fmt.Errorf("%w: schema %q holds the %s layout, and layout %s was asked for (open it with layout=%s, or use another schema)",
			ErrWrongLayout, s.cfg.schema, held, want, held)
	}
	return want, nil
}

// layoutOf returns the layout the store uses on the schema as q sees it
// (see schemaLayout and pickLayout).
func (s *Store) layoutOf(ctx context.Context, q querier) (Layout, error) {
	held, err := s.schemaLayout(ctx, q)
	if err != nil {
		return 0, err
	}
	return s.pickLayout(held)
}

// useLayout makes the store use layout l: its configuration (see
// layout.configure) and statements. It runs in Open, before the store is
// shared.
func (s *Store) useLayout(l Layout) error {
	lay := newLayout(s, l)
	if err := lay.configure(&s.cfg); err != nil {
		return err
	}
	s.cfg.layout, s.layout, s.sql = l, lay, lay.statements()
	s.sql.recovery = recoverySQL(s.sql)
	if s.sql.deletedTable != "" {
		s.sql.recoveryOpen = recoveryOpenSQL(s.sql)
	}
	leases := table(s.cfg.schema, "cluster_leases")
	s.sql.checkLeases, s.sql.heldLeases = checkLeasesSQL(leases), heldLeasesSQL(leases)
	s.sql.latestBelow = latestBelowSQL(table(s.cfg.schema, "event_journal"))
	return nil
}

// Layout returns the layout the store uses (never LayoutDetect once Open
// returned).
func (s *Store) Layout() Layout { return s.cfg.layout }
