package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
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

// r2dbcTables are the tables of the r2dbc layout, in creation order, as
// ddl-scripts/create_tables_postgres.sql of pekko-persistence-r2dbc 1.2.0
// creates them ("{s}" is the quoted schema), durable_state included (see
// DurableState), then the membership tables, Annals' own (see
// Membership). A table that exists is used as it is.
var r2dbcTables = []struct{ name, ddl string }{
	{"event_journal", `CREATE TABLE IF NOT EXISTS {s}.event_journal(
  slice INT NOT NULL,
  entity_type VARCHAR(255) NOT NULL,
  persistence_id VARCHAR(255) NOT NULL,
  seq_nr BIGINT NOT NULL,
  db_timestamp timestamp with time zone NOT NULL,

  event_ser_id INTEGER NOT NULL,
  event_ser_manifest VARCHAR(255) NOT NULL,
  event_payload BYTEA NOT NULL,

  deleted BOOLEAN DEFAULT FALSE NOT NULL,
  writer VARCHAR(255) NOT NULL,
  adapter_manifest VARCHAR(255),
  tags TEXT ARRAY,

  meta_ser_id INTEGER,
  meta_ser_manifest VARCHAR(255),
  meta_payload BYTEA,

  PRIMARY KEY(persistence_id, seq_nr)
);
CREATE INDEX IF NOT EXISTS event_journal_slice_idx ON {s}.event_journal(slice, entity_type, db_timestamp, seq_nr)`},
	{"snapshot", `CREATE TABLE IF NOT EXISTS {s}.snapshot(
  slice INT NOT NULL,
  entity_type VARCHAR(255) NOT NULL,
  persistence_id VARCHAR(255) NOT NULL,
  seq_nr BIGINT NOT NULL,
  write_timestamp BIGINT NOT NULL,
  ser_id INTEGER NOT NULL,
  ser_manifest VARCHAR(255) NOT NULL,
  snapshot BYTEA NOT NULL,
  meta_ser_id INTEGER,
  meta_ser_manifest VARCHAR(255),
  meta_payload BYTEA,

  PRIMARY KEY(persistence_id)
)`},
	{"durable_state", durableStateDDL},
	{"projection_offset_store", `CREATE TABLE IF NOT EXISTS {s}.projection_offset_store (
  projection_name VARCHAR(255) NOT NULL,
  projection_key VARCHAR(255) NOT NULL,
  current_offset VARCHAR(255) NOT NULL,
  manifest VARCHAR(32) NOT NULL,
  mergeable BOOLEAN NOT NULL,
  last_updated BIGINT NOT NULL,
  PRIMARY KEY(projection_name, projection_key)
)`},
	{"projection_timestamp_offset_store", `CREATE TABLE IF NOT EXISTS {s}.projection_timestamp_offset_store (
  projection_name VARCHAR(255) NOT NULL,
  projection_key VARCHAR(255) NOT NULL,
  slice INT NOT NULL,
  persistence_id VARCHAR(255) NOT NULL,
  seq_nr BIGINT NOT NULL,
  timestamp_offset timestamp with time zone NOT NULL,
  timestamp_consumed timestamp with time zone NOT NULL,
  PRIMARY KEY(slice, projection_name, timestamp_offset, persistence_id, seq_nr)
)`},
	{"projection_management", `CREATE TABLE IF NOT EXISTS {s}.projection_management (
  projection_name VARCHAR(255) NOT NULL,
  projection_key VARCHAR(255) NOT NULL,
  paused BOOLEAN NOT NULL,
  last_updated BIGINT NOT NULL,
  PRIMARY KEY(projection_name, projection_key)
)`},
	{"cluster_members", membersDDL},
	{"cluster_leases", leasesDDL},
}

// querier is what the schema reads need of a pool or a transaction.
type querier interface {
	QueryRow(context.Context, string, ...any) pgx.Row
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

// useLayout makes the store use layout l: its statements and, for the
// r2dbc layout, TimestampOrder (CommitOrder asked for explicitly is an
// ErrInvalidConfig there: the commit-order clock row is a table of
// Annals' own, and JVM writers would not move it). It runs in Open, before
// the store is shared.
func (s *Store) useLayout(l Layout) error {
	if l == LayoutR2DBC {
		if s.cfg.orderingSet && s.cfg.ordering == CommitOrder {
			return fmt.Errorf("%w: ordering=commit is not available on the r2dbc layout of schema %q (it needs Annals' clock table, which JVM writers do not move); use ordering=timestamp, the r2dbc layout's default", ErrInvalidConfig, s.cfg.schema)
		}
		s.cfg.ordering = TimestampOrder
	}
	s.cfg.layout = l
	s.sql = newLayoutStatements(s.cfg.schema, l, s.cfg.ordering)
	return nil
}

// newLayoutStatements returns the statements of layout l.
func newLayoutStatements(schema string, l Layout, o Ordering) statements {
	if l == LayoutR2DBC {
		return newR2DBCStatements(schema)
	}
	return newStatements(schema, o)
}

// Layout returns the layout the store uses (never LayoutDetect once Open
// returned).
func (s *Store) Layout() Layout { return s.cfg.layout }

// r2dbcMissing returns the r2dbc layout's tables missing from the schema.
func (s *Store) r2dbcMissing(ctx context.Context, q querier) ([]string, error) {
	var missing []string
	for _, t := range r2dbcTables {
		var ok bool
		if err := q.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table(s.cfg.schema, t.name)).Scan(&ok); err != nil {
			return nil, fmt.Errorf("postgres: read the tables of schema %q: %w", s.cfg.schema, err)
		}
		if !ok {
			missing = append(missing, t.name)
		}
	}
	return missing, nil
}

// r2dbcStep is the migration that creates the r2dbc layout's missing
// tables (and their indexes): from version 0 to 1, the layout's only
// version; nil when none is missing.
func (s *Store) r2dbcStep(missing []string) []step {
	if len(missing) == 0 {
		return nil
	}
	st := step{from: 0, to: 1, sql: []string{schemaSQL(s.cfg.schema, `CREATE SCHEMA IF NOT EXISTS {s}`)}}
	for _, t := range r2dbcTables {
		for _, m := range missing {
			if m == t.name {
				st.sql = append(st.sql, schemaSQL(s.cfg.schema, t.ddl))
			}
		}
	}
	return []step{st}
}

// checkR2DBC checks that an r2dbc-layout schema holds the journal and
// snapshot tables (the projection tables are needed by Projections only:
// a JVM service may have left them out).
func (s *Store) checkR2DBC(ctx context.Context) error {
	missing, err := s.r2dbcMissing(ctx, s.pool)
	if err != nil {
		return err
	}
	missing = slices.DeleteFunc(missing, func(name string) bool { return name != "event_journal" && name != "snapshot" })
	if len(missing) > 0 {
		return fmt.Errorf("%w: schema %q holds the r2dbc layout without the tables %v; create them with Store.Migrate, the URL parameter migrate=true, or the plugin's ddl-scripts/create_tables_postgres.sql", ErrSchemaMissing, s.cfg.schema, missing)
	}
	return nil
}

// r2dbcPending reports whether the migrator's schema uses the r2dbc layout
// (asked for, or detected), and if so the step that would create its
// missing tables (none when it has them all).
func (m *Migrator) r2dbcPending(ctx context.Context) (steps []step, r2dbc bool, err error) {
	held, err := m.s.schemaLayout(ctx, m.s.pool)
	if err != nil {
		return nil, false, err
	}
	layout, err := m.s.pickLayout(held)
	if err != nil || layout != LayoutR2DBC {
		return nil, false, err
	}
	missing, err := m.s.r2dbcMissing(ctx, m.s.pool)
	if err != nil {
		return nil, true, err
	}
	return m.s.r2dbcStep(missing), true, nil
}
