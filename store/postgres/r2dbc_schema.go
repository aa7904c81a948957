package postgres

import (
	"context"
	"fmt"
	"slices"
)

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
	{"cluster_leases_epoch_idx", leasesEpochDDL},
}

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

// check checks that the schema holds the journal and snapshot tables (the
// projection tables are needed by Projections only: a JVM service may have
// left them out).
func (l r2dbcLayout) check(ctx context.Context) error {
	s := l.s
	missing, err := s.r2dbcMissing(ctx, s.pool)
	if err != nil {
		return err
	}
	if slices.Contains(missing, "cluster_leases_epoch_idx") && !slices.Contains(missing, "cluster_leases") {
		// Without it a take-over does not wait for the writes committing
		// under the old owner (see WriteFenced): refuse, as Annals' own
		// layout refuses a schema at an older version.
		return fmt.Errorf("%w: schema %q holds the lease table cluster_leases without its index cluster_leases_epoch_idx (an older Annals made it); add it with `annals migrate --store URL`, Store.Migrate or the URL parameter migrate=true", ErrSchemaMissing, s.cfg.schema)
	}
	missing = slices.DeleteFunc(missing, func(name string) bool { return name != "event_journal" && name != "snapshot" })
	if len(missing) > 0 {
		return fmt.Errorf("%w: schema %q holds the r2dbc layout without the tables %v; create them with Store.Migrate, the URL parameter migrate=true, or the plugin's ddl-scripts/create_tables_postgres.sql", ErrSchemaMissing, s.cfg.schema, missing)
	}
	return nil
}

// pending returns the step that creates the layout's missing tables
// (none when it has them all).
func (l r2dbcLayout) pending(ctx context.Context, q querier) ([]step, error) {
	missing, err := l.s.r2dbcMissing(ctx, q)
	if err != nil {
		return nil, err
	}
	return l.s.r2dbcStep(missing), nil
}

// version returns the layout's one version, 1, as current when all its
// tables exist (0 otherwise).
func (l r2dbcLayout) version(ctx context.Context) (current, latest int, err error) {
	steps, err := l.pending(ctx, l.s.pool)
	return 1 - len(steps), 1, err
}
