package sqlite

// SchemaVersion is the schema version this package writes. Open migrates
// older Annals databases up to it and refuses newer ones.
const SchemaVersion = 6

// migrations[i] upgrades a database from schema version i to i+1. Each runs
// in the same transaction as the update of the schema-version row.
var migrations = []string{
	// 0 → 1: the journal of seed 000 (event_journal with a global ordering,
	// journal_metadata) extended with writer, tags, metadata, slice and
	// entity type; a tag index table; snapshots.
	`
CREATE TABLE event_journal (
	ordering       INTEGER PRIMARY KEY AUTOINCREMENT,
	persistence_id TEXT    NOT NULL,
	sequence_nr    INTEGER NOT NULL,
	timestamp      INTEGER NOT NULL, -- Unix nanoseconds, UTC
	payload        BLOB    NOT NULL,
	serializer_id  INTEGER NOT NULL,
	manifest       TEXT    NOT NULL,
	writer         TEXT    NOT NULL,
	tags           TEXT,             -- JSON array of strings, NULL when none
	metadata       BLOB,
	slice          INTEGER NOT NULL,
	entity_type    TEXT    NOT NULL,
	UNIQUE (persistence_id, sequence_nr)
);
CREATE INDEX event_journal_slice_idx ON event_journal (entity_type, slice, ordering);
CREATE TABLE event_tag (
	tag      TEXT    NOT NULL,
	ordering INTEGER NOT NULL,
	PRIMARY KEY (tag, ordering)
) WITHOUT ROWID;
CREATE TABLE journal_metadata (
	persistence_id TEXT    NOT NULL PRIMARY KEY,
	sequence_nr    INTEGER NOT NULL -- highest sequence number of deleted events
) WITHOUT ROWID;
CREATE TABLE snapshot (
	persistence_id TEXT    NOT NULL,
	sequence_nr    INTEGER NOT NULL,
	created        INTEGER NOT NULL, -- Unix nanoseconds, UTC
	serializer_id  INTEGER NOT NULL,
	manifest       TEXT    NOT NULL,
	payload        BLOB    NOT NULL,
	PRIMARY KEY (persistence_id, sequence_nr)
) WITHOUT ROWID;
`,
	// 1 → 2: events of one entity type in ordering order, for queries by
	// slices over a range of slices (the (entity_type, slice, ordering)
	// index serves a single slice).
	`CREATE INDEX event_journal_type_ordering_idx ON event_journal (entity_type, ordering);`,
	// 2 → 3: projection offsets and management (paused flags), in the same
	// database as the journal so exactly-once handlers commit with them.
	`
CREATE TABLE projection_offset (
	projection_name TEXT    NOT NULL,
	projection_key  TEXT    NOT NULL,
	current_offset  TEXT    NOT NULL, -- query.Offset as JSON
	last_updated    INTEGER NOT NULL, -- Unix nanoseconds, UTC
	PRIMARY KEY (projection_name, projection_key)
) WITHOUT ROWID;
CREATE TABLE projection_management (
	projection_name TEXT    NOT NULL,
	projection_key  TEXT    NOT NULL,
	paused          INTEGER NOT NULL,
	last_updated    INTEGER NOT NULL,
	PRIMARY KEY (projection_name, projection_key)
) WITHOUT ROWID;
`,
	// 3 → 4: durable state, one row per persistence id (a delete removes
	// it); ordering numbers the changes across the table, for queries of
	// changes by slices and by tag.
	`
CREATE TABLE durable_state (
	persistence_id TEXT    NOT NULL PRIMARY KEY,
	revision       INTEGER NOT NULL,
	payload        BLOB    NOT NULL,
	serializer_id  INTEGER NOT NULL,
	manifest       TEXT    NOT NULL,
	tag            TEXT,             -- NULL when none
	timestamp      INTEGER NOT NULL, -- Unix nanoseconds, UTC
	slice          INTEGER NOT NULL,
	entity_type    TEXT    NOT NULL,
	ordering       INTEGER NOT NULL
) WITHOUT ROWID;
CREATE UNIQUE INDEX durable_state_ordering_idx ON durable_state (ordering);
CREATE INDEX durable_state_type_ordering_idx ON durable_state (entity_type, ordering);
CREATE INDEX durable_state_tag_idx ON durable_state (tag, ordering) WHERE tag IS NOT NULL;
`,
	// 4 → 5: the durable-state changes' counter. Taking MAX(ordering) + 1
	// gave a change the ordering of a deleted row that a change query may
	// already have passed; the counter never goes back.
	`
CREATE TABLE durable_state_clock (
	id       INTEGER PRIMARY KEY CHECK (id = 1),
	ordering INTEGER NOT NULL
);
INSERT INTO durable_state_clock SELECT 1, COALESCE(MAX(ordering), 0) FROM durable_state;
`,
	// 5 → 6: cluster members and leases (see Membership). Times are Unix
	// milliseconds of the machine's clock; a free lease has the empty
	// owner (names are never empty).
	`
CREATE TABLE cluster_members (
	cluster     TEXT    NOT NULL,
	name        TEXT    NOT NULL,
	incarnation TEXT    NOT NULL,
	address     TEXT    NOT NULL,
	joined      INTEGER NOT NULL, -- Unix milliseconds of the incarnation's first join
	expires     INTEGER NOT NULL, -- Unix milliseconds at which the membership ends unless renewed
	PRIMARY KEY (cluster, name)
) WITHOUT ROWID;
CREATE TABLE cluster_leases (
	cluster           TEXT    NOT NULL,
	name              TEXT    NOT NULL,
	owner_name        TEXT    NOT NULL, -- '' when free
	owner_incarnation TEXT    NOT NULL, -- '' when free
	epoch             INTEGER NOT NULL, -- +1 on every change of owner
	expires           INTEGER NOT NULL, -- Unix milliseconds at which the lease ends unless renewed (free: when it was released)
	PRIMARY KEY (cluster, name)
) WITHOUT ROWID;
`,
}

// schemaTable holds the one schema-version row of an Annals database.
const schemaTable = `CREATE TABLE annals_schema (
	id      INTEGER PRIMARY KEY CHECK (id = 1),
	version INTEGER NOT NULL
)`
