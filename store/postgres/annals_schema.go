package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// SchemaVersion is the schema version this package writes. Migrate
// upgrades older schemas to it; Open refuses newer ones.
const SchemaVersion = 5

// migrations[i] upgrades a schema from version i to i+1; a step never
// changes once released (a new version is a new step). "{s}" stands for
// the quoted schema name. Column names follow akka-persistence-r2dbc where
// the concept is the same.
var migrations = []string{
	// 0 → 1: journal, tags, metadata, snapshots, projection offsets and
	// management.
	`CREATE TABLE {s}.event_journal (
	slice              INTEGER     NOT NULL,
	entity_type        TEXT        NOT NULL,
	persistence_id     TEXT        NOT NULL,
	seq_nr             BIGINT      NOT NULL,
	db_timestamp       TIMESTAMPTZ NOT NULL, -- grows per persistence id; the order of queries by slices and tag
	write_timestamp    TIMESTAMPTZ NOT NULL, -- the writer's clock (journal.Repr.Timestamp)
	event_ser_id       INTEGER     NOT NULL,
	event_ser_manifest TEXT        NOT NULL,
	event_payload      BYTEA       NOT NULL,
	writer             TEXT        NOT NULL,
	tags               TEXT[],
	meta_payload       BYTEA,
	PRIMARY KEY (persistence_id, seq_nr)
);
CREATE INDEX event_journal_slice_idx ON {s}.event_journal (slice, entity_type, db_timestamp, seq_nr);
CREATE INDEX event_journal_entity_type_idx ON {s}.event_journal (entity_type, db_timestamp, seq_nr, persistence_id);
CREATE TABLE {s}.event_tag (
	tag            TEXT        NOT NULL,
	db_timestamp   TIMESTAMPTZ NOT NULL,
	seq_nr         BIGINT      NOT NULL,
	persistence_id TEXT        NOT NULL,
	PRIMARY KEY (tag, db_timestamp, seq_nr, persistence_id)
);
CREATE INDEX event_tag_persistence_id_idx ON {s}.event_tag (persistence_id, seq_nr);
CREATE TABLE {s}.journal_metadata (
	persistence_id TEXT    NOT NULL PRIMARY KEY,
	entity_type    TEXT    NOT NULL,
	seq_nr         BIGINT  NOT NULL -- the highest sequence number, kept when its event is deleted
);
CREATE TABLE {s}.journal_clock (
	id           INTEGER     PRIMARY KEY CHECK (id = 1),
	db_timestamp TIMESTAMPTZ NOT NULL -- CommitOrder: the latest db_timestamp assigned
);
INSERT INTO {s}.journal_clock VALUES (1, '-infinity');
CREATE TABLE {s}.snapshot (
	slice           INTEGER NOT NULL,
	entity_type     TEXT    NOT NULL,
	persistence_id  TEXT    NOT NULL,
	seq_nr          BIGINT  NOT NULL,
	write_timestamp BIGINT  NOT NULL, -- Unix nanoseconds, UTC
	ser_id          INTEGER NOT NULL,
	ser_manifest    TEXT    NOT NULL,
	snapshot        BYTEA   NOT NULL,
	PRIMARY KEY (persistence_id, seq_nr)
);
CREATE TABLE {s}.projection_offset_store (
	projection_name TEXT    NOT NULL,
	projection_key  TEXT    NOT NULL,
	current_offset  TEXT    NOT NULL, -- query.Offset as JSON
	manifest        TEXT    NOT NULL, -- "annals-json"
	mergeable       BOOLEAN NOT NULL,
	last_updated    BIGINT  NOT NULL, -- Unix milliseconds
	PRIMARY KEY (projection_name, projection_key)
);
CREATE TABLE {s}.projection_management (
	projection_name TEXT    NOT NULL,
	projection_key  TEXT    NOT NULL,
	paused          BOOLEAN NOT NULL,
	last_updated    BIGINT  NOT NULL, -- Unix milliseconds
	PRIMARY KEY (projection_name, projection_key)
);`,
	// 1 → 2: durable state, in the table of Pekko Persistence R2DBC (see
	// DurableState).
	durableStateDDL,
	// 2 → 3: the durable-state change queries' indexes, in their order
	// (the plugin's index leads with the slice, which a page over a slice
	// range can only sort). The r2dbc layout does not get them: its tables
	// are the plugin's.
	`CREATE INDEX durable_state_type_idx ON {s}.durable_state (entity_type, db_timestamp, revision, persistence_id);
CREATE INDEX durable_state_tag_idx ON {s}.durable_state ((tags[1]), db_timestamp, revision, persistence_id)`,
	// 3 → 4: cluster members and leases (see Membership).
	membersDDL + ";\n" + leasesDDL,
	// 4 → 5: the lease epoch's unique index (see WriteFenced).
	leasesEpochDDL,
}

// versionTable is the one-row table holding the schema's version.
const versionTable = `CREATE TABLE IF NOT EXISTS {s}.annals_schema (
	id      INTEGER PRIMARY KEY CHECK (id = 1),
	version INTEGER NOT NULL
)`

// schemaVersion reads the schema's version: 0 with found=false when the
// schema has no annals_schema table (or does not exist).
func (s *Store) schemaVersion(ctx context.Context, q querier) (version int, found bool, err error) {
	var hasVersion, hasJournal bool
	err = q.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL`,
		table(s.cfg.schema, "annals_schema"), table(s.cfg.schema, "event_journal")).Scan(&hasVersion, &hasJournal)
	if err != nil {
		return 0, false, fmt.Errorf("postgres: read schema version: %w", err)
	}
	if !hasVersion {
		if hasJournal {
			return 0, false, fmt.Errorf("%w: %s.event_journal exists without %s.annals_schema", ErrNotAnnals, s.cfg.schema, s.cfg.schema)
		}
		return 0, false, nil
	}
	if err := q.QueryRow(ctx, `SELECT version FROM `+table(s.cfg.schema, "annals_schema")+` WHERE id = 1`).Scan(&version); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, true, nil
		}
		return 0, false, fmt.Errorf("postgres: read schema version: %w", err)
	}
	return version, true, nil
}

// newerSchema is the error for a schema at version v, newer than this
// package writes.
func (s *Store) newerSchema(v int) error {
	return fmt.Errorf("%w: schema %q is at version %d, this Annals writes version %d", ErrNewerSchema, s.cfg.schema, v, SchemaVersion)
}

// steps returns the steps that take a schema at version v (found: its
// version table exists) to SchemaVersion; none when it is current.
func (s *Store) steps(v int, found bool) []step {
	var out []step
	for i := v; i < SchemaVersion; i++ {
		st := step{from: i, to: i + 1}
		if i == v && !found {
			st.sql = append(st.sql, schemaSQL(s.cfg.schema, `CREATE SCHEMA IF NOT EXISTS {s}`), schemaSQL(s.cfg.schema, versionTable))
		}
		st.sql = append(st.sql, schemaSQL(s.cfg.schema, migrations[i]),
			fmt.Sprintf(`INSERT INTO %s (id, version) VALUES (1, %d) ON CONFLICT (id) DO UPDATE SET version = excluded.version`, table(s.cfg.schema, "annals_schema"), i+1))
		out = append(out, st)
	}
	return out
}

// check checks that the schema is at SchemaVersion.
func (l *annalsLayout) check(ctx context.Context) error {
	s := l.s
	v, found, err := s.schemaVersion(ctx, s.pool)
	switch {
	case err != nil:
		return err
	case !found:
		return fmt.Errorf("%w: schema %q has no Annals tables; create them with `annals init --store URL`, Store.Migrate, or the URL parameter migrate=true", ErrSchemaMissing, s.cfg.schema)
	case v > SchemaVersion:
		return s.newerSchema(v)
	case v < SchemaVersion:
		return fmt.Errorf("%w: schema %q is at version %d, this Annals needs version %d; upgrade it with `annals migrate --store URL` or Store.Migrate", ErrSchemaMissing, s.cfg.schema, v, SchemaVersion)
	}
	return nil
}

// pending returns the steps from the schema's version to SchemaVersion;
// a newer schema is an ErrNewerSchema.
func (l *annalsLayout) pending(ctx context.Context, q querier) ([]step, error) {
	v, found, err := l.s.schemaVersion(ctx, q)
	if err != nil {
		return nil, err
	}
	if v > SchemaVersion {
		return nil, l.s.newerSchema(v)
	}
	return l.s.steps(v, found), nil
}

// version returns the schema's version and SchemaVersion.
func (l *annalsLayout) version(ctx context.Context) (current, latest int, err error) {
	v, _, err := l.s.schemaVersion(ctx, l.s.pool)
	return v, SchemaVersion, err
}
