package cassandra

import (
	"context"
	"errors"
	"fmt"
	"strings"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/annals-go/annals/admin"
)

// SchemaVersion is the schema version this package writes: akka-persistence-
// cassandra's tables plus the columns and tables Annals adds (the
// durable_state and cluster_membership tables among them, which Open does
// not require; see optionalTables).
const SchemaVersion = 1

// tables are the tables of a version-1 keyspace, as Pekko Persistence
// Cassandra 1.1 creates them ({ks} stands for the keyspace). Snapshots
// live in the journal's keyspace (Pekko's snapshot.keyspace set to the
// journal's).
var tables = []struct{ name, cql string }{
	{"messages", `CREATE TABLE IF NOT EXISTS {ks}.messages (
  persistence_id text,
  partition_nr bigint,
  sequence_nr bigint,
  timestamp timeuuid,
  timebucket text,
  writer_uuid text,
  ser_id int,
  ser_manifest text,
  event_manifest text,
  event blob,
  meta_ser_id int,
  meta_ser_manifest text,
  meta blob,
  tags set<text>,
  annals_highest bigint static,
  PRIMARY KEY ((persistence_id, partition_nr), sequence_nr, timestamp))
  WITH gc_grace_seconds = 864000
  AND compaction = {'class': 'SizeTieredCompactionStrategy'}`},
	{"tag_views", `CREATE TABLE IF NOT EXISTS {ks}.tag_views (
  tag_name text,
  persistence_id text,
  sequence_nr bigint,
  timebucket bigint,
  timestamp timeuuid,
  tag_pid_sequence_nr bigint,
  writer_uuid text,
  ser_id int,
  ser_manifest text,
  event_manifest text,
  event blob,
  meta_ser_id int,
  meta_ser_manifest text,
  meta blob,
  annals_tags list<text>,
  annals_timestamp timeuuid,
  PRIMARY KEY ((tag_name, timebucket), timestamp, persistence_id, tag_pid_sequence_nr))
  WITH gc_grace_seconds = 864000
  AND compaction = {'class': 'SizeTieredCompactionStrategy'}`},
	{"tag_write_progress", `CREATE TABLE IF NOT EXISTS {ks}.tag_write_progress (
  persistence_id text,
  tag text,
  sequence_nr bigint,
  tag_pid_sequence_nr bigint,
  offset timeuuid,
  PRIMARY KEY (persistence_id, tag))`},
	{"tag_scanning", `CREATE TABLE IF NOT EXISTS {ks}.tag_scanning (
  persistence_id text,
  sequence_nr bigint,
  PRIMARY KEY (persistence_id))`},
	{"metadata", `CREATE TABLE IF NOT EXISTS {ks}.metadata (
  persistence_id text PRIMARY KEY,
  deleted_to bigint,
  properties map<text,text>)`},
	{"all_persistence_ids", `CREATE TABLE IF NOT EXISTS {ks}.all_persistence_ids (
  persistence_id text PRIMARY KEY)`},
	{"annals_settings", `CREATE TABLE IF NOT EXISTS {ks}.annals_settings (
  name text PRIMARY KEY,
  value text)`},
	{"snapshots", `CREATE TABLE IF NOT EXISTS {ks}.snapshots (
  persistence_id text,
  sequence_nr bigint,
  timestamp bigint,
  ser_id int,
  ser_manifest text,
  snapshot_data blob,
  snapshot blob,
  meta_ser_id int,
  meta_ser_manifest text,
  meta blob,
  annals_timestamp_nanos bigint,
  PRIMARY KEY (persistence_id, sequence_nr))
  WITH CLUSTERING ORDER BY (sequence_nr DESC) AND gc_grace_seconds = 864000
  AND compaction = {'class': 'SizeTieredCompactionStrategy'}`},
}

// optionalTables are the tables of Annals' own that Migrate creates (with
// WithMigrate, Migrator.Migrate, `annals init` and `annals migrate`) but
// Open does not require, so keyspaces of earlier Annals versions and of
// Pekko services open without them; a call that needs a missing one fails
// with ErrSchemaMissing. Pekko Persistence Cassandra has no durable state
// and no membership: durable_state (see DurableState),
// cluster_membership (see Membership) and annals_claims (the claims
// guard's, see WithWriteGuard) are Annals' alone.
var optionalTables = []struct{ name, cql string }{
	{claimsTable, claimsTableCQL},
	{durableStateTable, `CREATE TABLE IF NOT EXISTS {ks}.durable_state (
  persistence_id text,
  revision bigint,
  state_payload blob,
  state_ser_id int,
  state_ser_manifest text,
  tag text,
  write_time_micros bigint,
  slice int,
  entity_type text,
  PRIMARY KEY (persistence_id))`},
	{membershipTable, `CREATE TABLE IF NOT EXISTS {ks}.cluster_membership (
  cluster text,
  kind text,
  name text,
  incarnation text,
  address text,
  joined timestamp,
  owner_name text,
  owner_incarnation text,
  epoch bigint,
  live boolean,
  term int,
  PRIMARY KEY ((cluster), kind, name))`},
}

// snapshotNanos is the column Annals adds to Pekko's snapshots table: the
// snapshot's time in Unix nanoseconds (Pekko's timestamp column holds
// milliseconds, which the snapshot contract's microseconds do not fit).
const snapshotNanos = "annals_timestamp_nanos"

// messagesGuard is the static column Annals adds to Pekko's messages table:
// the highest sequence number Annals wrote in the partition, the condition
// of every write's lightweight transaction (see the package documentation).
const messagesGuard = "annals_highest"

// tagViewsTags is the column Annals adds to Pekko's tag_views table: all
// the tags of the event in the order written (Pekko's rows hold only the
// row's own tag).
const tagViewsTags = "annals_tags"

// tagViewsTime is the column Annals adds to Pekko's tag_views table: the
// event's own timeuuid in messages (the row's timestamp is when the row was
// written; Pekko's rows have none, their timestamp is the event's).
const tagViewsTime = "annals_timestamp"

// pending returns the statements that bring the keyspace to
// SchemaVersion, given the tables and snapshot columns it has: required,
// those Open needs, and optional, the optionalTables it lacks; none when
// it is current.
func (s *Store) pending(ctx context.Context) (required, optional []string, err error) {
	have, cols, ksExists, err := s.inspect(ctx)
	snapCols, msgCols, tagCols := cols["snapshots"], cols["messages"], cols["tag_views"]
	if err != nil {
		return nil, nil, err
	}
	for _, t := range optionalTables {
		if !have[t.name] {
			optional = append(optional, strings.ReplaceAll(t.cql, "{ks}", s.cfg.keyspace))
		}
	}
	var out []string
	if !ksExists {
		out = append(out, fmt.Sprintf("CREATE KEYSPACE IF NOT EXISTS %s WITH replication = %s", s.cfg.keyspace, s.cfg.replication))
	}
	for _, t := range tables {
		if !have[t.name] {
			out = append(out, strings.ReplaceAll(t.cql, "{ks}", s.cfg.keyspace))
		}
	}
	if have["messages"] && !msgCols[messagesGuard] {
		out = append(out, fmt.Sprintf("ALTER TABLE %s.messages ADD %s bigint static", s.cfg.keyspace, messagesGuard))
	}
	if have["tag_views"] && !tagCols[tagViewsTags] {
		out = append(out, fmt.Sprintf("ALTER TABLE %s.tag_views ADD %s list<text>", s.cfg.keyspace, tagViewsTags))
	}
	if have["tag_views"] && !tagCols[tagViewsTime] {
		out = append(out, fmt.Sprintf("ALTER TABLE %s.tag_views ADD %s timeuuid", s.cfg.keyspace, tagViewsTime))
	}
	if have["snapshots"] && !snapCols[snapshotNanos] {
		out = append(out, fmt.Sprintf("ALTER TABLE %s.snapshots ADD %s bigint", s.cfg.keyspace, snapshotNanos))
	}
	return out, optional, nil
}

// inspect reads whether the keyspace exists, its tables, and their
// columns by table.
func (s *Store) inspect(ctx context.Context) (tables map[string]bool, columns map[string]map[string]bool, keyspace bool, err error) {
	tables, columns = map[string]bool{}, map[string]map[string]bool{}
	var n int
	if err := s.session.Query(`SELECT count(*) FROM system_schema.keyspaces WHERE keyspace_name = ?`, s.cfg.keyspace).
		WithContext(ctx).Consistency(gocql.One).Scan(&n); err != nil {
		return nil, nil, false, s.errs.Map(ctx, "read schema", err, errClosed)
	}
	iter := s.session.Query(`SELECT table_name FROM system_schema.tables WHERE keyspace_name = ?`, s.cfg.keyspace).
		WithContext(ctx).Consistency(gocql.One).Iter()
	var name string
	for iter.Scan(&name) {
		tables[name] = true
	}
	if err := iter.Close(); err != nil {
		return nil, nil, false, s.errs.Map(ctx, "read schema", err, errClosed)
	}
	iter = s.session.Query(`SELECT table_name, column_name FROM system_schema.columns WHERE keyspace_name = ?`, s.cfg.keyspace).
		WithContext(ctx).Consistency(gocql.One).Iter()
	var table string
	for iter.Scan(&table, &name) {
		if columns[table] == nil {
			columns[table] = map[string]bool{}
		}
		columns[table][name] = true
	}
	if err := iter.Close(); err != nil {
		return nil, nil, false, s.errs.Map(ctx, "read schema", err, errClosed)
	}
	return tables, columns, n > 0, nil
}

var errClosed = errors.New("cassandra: closed")

// migrate runs the pending statements, optional tables included, and
// waits for the cluster to agree on the schema.
func (s *Store) migrate(ctx context.Context) error {
	required, optional, err := s.pending(ctx)
	if err != nil {
		return err
	}
	stmts := append(required, optional...)
	for _, st := range stmts {
		if err := s.session.Query(st).WithContext(ctx).Consistency(gocql.All).Exec(); err != nil {
			return s.errs.Map(ctx, "migrate", fmt.Errorf("%s: %w", firstLine(st), err), errClosed)
		}
	}
	if len(stmts) > 0 {
		if err := s.session.AwaitSchemaAgreement(ctx); err != nil {
			return s.errs.Map(ctx, "migrate: schema agreement", err, errClosed)
		}
	}
	return nil
}

// checkSchema fails with ErrSchemaMissing when the keyspace lacks a table
// or column of SchemaVersion (optionalTables aside).
func (s *Store) checkSchema(ctx context.Context) error {
	stmts, _, err := s.pending(ctx)
	if err != nil {
		return err
	}
	if len(stmts) > 0 {
		return fmt.Errorf("%w: keyspace %s needs %d statement(s), starting with %q; run `annals init` or open with WithMigrate",
			ErrSchemaMissing, s.cfg.keyspace, len(stmts), firstLine(stmts[0]))
	}
	return nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// Migrator creates the keyspace and its tables (annals init and migrate)
// without opening the store.
type Migrator struct{ s *Store }

var _ admin.Migrator = (*Migrator)(nil)

// NewMigrator connects to the cluster the URL names (see Open) without
// checking the keyspace. Close it after use.
func NewMigrator(ctx context.Context, rawURL string, opts ...Option) (*Migrator, error) {
	s, err := dial(ctx, rawURL, opts)
	if err != nil {
		return nil, err
	}
	return &Migrator{s: s}, nil
}

// Close closes the migrator's session.
func (m *Migrator) Close() error { return m.s.Close() }

// SchemaVersion implements admin.Migrator: 1 when every table and column
// Open requires is there, else 0. A missing optional table (durable_state,
// cluster_membership) does not lower it: PendingMigrations lists it as a
// step from 1 to 1.
func (m *Migrator) SchemaVersion(ctx context.Context) (current, latest int, err error) {
	required, _, err := m.s.pending(ctx)
	if err != nil {
		return 0, SchemaVersion, err
	}
	if len(required) == 0 {
		return SchemaVersion, SchemaVersion, nil
	}
	return 0, SchemaVersion, nil
}

// PendingMigrations implements admin.Migrator: the CQL statements Migrate
// would run, changing nothing, as one step: from 0 when a table or column
// Open requires is missing, else from SchemaVersion (only optional tables
// are missing, as in a keyspace of an earlier Annals).
func (m *Migrator) PendingMigrations(ctx context.Context) ([]admin.Migration, error) {
	required, optional, err := m.s.pending(ctx)
	if err != nil || len(required)+len(optional) == 0 {
		return nil, err
	}
	from := 0
	if len(required) == 0 {
		from = SchemaVersion
	}
	return []admin.Migration{{From: from, To: SchemaVersion, SQL: strings.Join(append(required, optional...), ";\n\n") + ";"}}, nil
}

// Migrate implements admin.Migrator: creates what is missing (the keyspace
// with the configured replication, tables, optional ones included, the
// columns Annals adds) and waits for schema agreement. A write guard the
// Migrator was opened with (write_guard, WithWriteGuard) is then recorded
// as the keyspace's, or must match the recorded one (ErrInvalidConfig).
func (m *Migrator) Migrate(ctx context.Context) ([]admin.Migration, error) {
	done, err := m.PendingMigrations(ctx)
	if err != nil {
		return nil, err
	}
	if err := m.s.migrate(ctx); err != nil {
		return nil, err
	}
	if m.s.cfg.guard != 0 {
		// A guard named in the URL or options is recorded now (or checked
		// against the recorded one), so that the keyspace's first Open
		// does not choose another (see WithWriteGuard).
		if err := m.s.fixWriteGuard(ctx); err != nil {
			return nil, err
		}
	}
	return done, nil
}
