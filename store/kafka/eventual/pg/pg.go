// Package pg is the Kafka journal's eventual store on PostgreSQL, for
// services that have no Cassandra: the Scala replicator's tables (journal,
// metajournal, pointer2, setting) with the same columns and keys, in a
// schema of their own. A Scala service cannot read it (the Scala library's
// eventual store is Cassandra only); Go services share it as they would
// the Cassandra one.
//
// [Store] implements [eventual.Tables]; the replication rules are in
// package eventual.
package pg

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/annals-go/annals/store/kafka/eventual"
)

// SchemaVersion is recorded in the setting table as schema-version, as
// the Scala replicator records its own.
const SchemaVersion = "8"

// Store is an eventual store in one PostgreSQL schema. It is safe for
// concurrent use; it does not own the pool.
type Store struct {
	pool   *pgxpool.Pool
	schema string
	q      statements
}

type statements struct {
	head, insertHead, updateHead, deleteHead string
	insertRecord, deleteRecords, deleteTo    string
	records, pointer, savePointer            string
}

var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Schema returns the statements that create the tables in schema.
func Schema(schema string) []string {
	s := schema
	return []string{
		`CREATE SCHEMA IF NOT EXISTS ` + s,
		`CREATE TABLE IF NOT EXISTS ` + s + `.journal (id text NOT NULL, topic text NOT NULL, segment bigint NOT NULL, seq_nr bigint NOT NULL,
			partition int NOT NULL, "offset" bigint NOT NULL, timestamp timestamptz NOT NULL, origin text, version text, meta_record_id uuid,
			tags text[] NOT NULL DEFAULT '{}', metadata text, payload_type text, payload_txt text, payload_bin bytea, headers jsonb,
			PRIMARY KEY (id, topic, segment, seq_nr, timestamp))`,
		`CREATE TABLE IF NOT EXISTS ` + s + `.metajournal (id text NOT NULL, topic text NOT NULL, segment bigint NOT NULL, partition int NOT NULL,
			"offset" bigint NOT NULL, segment_size int NOT NULL, seq_nr bigint NOT NULL, delete_to bigint, created timestamptz NOT NULL,
			created_date date NOT NULL, updated timestamptz NOT NULL, expire_after interval, expire_on date, record_id uuid, origin text,
			properties jsonb, metadata text, PRIMARY KEY (topic, id))`,
		`CREATE INDEX IF NOT EXISTS metajournal_expire_on_idx ON ` + s + `.metajournal (expire_on) WHERE expire_on IS NOT NULL`,
		`CREATE TABLE IF NOT EXISTS ` + s + `.pointer2 (topic text NOT NULL, partition int NOT NULL, "offset" bigint NOT NULL,
			created timestamptz NOT NULL, updated timestamptz NOT NULL, PRIMARY KEY (topic, partition))`,
		`CREATE TABLE IF NOT EXISTS ` + s + `.setting (key text PRIMARY KEY, value text, timestamp timestamptz, origin text, metadata text)`,
	}
}

// New returns the eventual store in schema, reached through pool. With
// create true it creates the schema and tables when missing and records
// the schema version.
func New(ctx context.Context, pool *pgxpool.Pool, schema string, create bool) (*Store, error) {
	if !schemaName.MatchString(schema) {
		return nil, fmt.Errorf("kafka journal: schema %q is not a plain PostgreSQL name (lower-case letters, digits, _)", schema)
	}
	s := &Store{pool: pool, schema: schema}
	k := schema
	s.q = statements{
		head: `SELECT partition, "offset", segment_size, seq_nr, delete_to, expire_after, expire_on, record_id, segment FROM ` + k +
			`.metajournal WHERE topic = $1 AND id = $2`,
		insertHead: `INSERT INTO ` + k + `.metajournal (topic, id, segment, partition, "offset", segment_size, seq_nr, delete_to, created,
			created_date, updated, expire_after, expire_on, record_id, origin) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, ($9 AT TIME ZONE 'UTC')::date, $9, $10, $11, $12, $13)
			ON CONFLICT (topic, id) DO UPDATE SET segment = EXCLUDED.segment, partition = EXCLUDED.partition, "offset" = EXCLUDED."offset",
			segment_size = EXCLUDED.segment_size, seq_nr = EXCLUDED.seq_nr, delete_to = EXCLUDED.delete_to, created = EXCLUDED.created,
			created_date = EXCLUDED.created_date, updated = EXCLUDED.updated, expire_after = EXCLUDED.expire_after,
			expire_on = EXCLUDED.expire_on, record_id = EXCLUDED.record_id, origin = EXCLUDED.origin`,
		updateHead: `UPDATE ` + k + `.metajournal SET partition = $3, "offset" = $4, seq_nr = $5, delete_to = $6, updated = $7,
			expire_after = $8, expire_on = $9 WHERE topic = $1 AND id = $2`,
		deleteHead: `DELETE FROM ` + k + `.metajournal WHERE topic = $1 AND id = $2`,
		insertRecord: `INSERT INTO ` + k + `.journal (id, topic, segment, seq_nr, partition, "offset", timestamp, origin, version, meta_record_id,
			tags, payload_type, payload_txt, payload_bin, metadata, headers) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
			ON CONFLICT (id, topic, segment, seq_nr, timestamp) DO UPDATE SET partition = EXCLUDED.partition, "offset" = EXCLUDED."offset",
			origin = EXCLUDED.origin, version = EXCLUDED.version, meta_record_id = EXCLUDED.meta_record_id, tags = EXCLUDED.tags,
			payload_type = EXCLUDED.payload_type, payload_txt = EXCLUDED.payload_txt, payload_bin = EXCLUDED.payload_bin,
			metadata = EXCLUDED.metadata, headers = EXCLUDED.headers`,
		deleteRecords: `DELETE FROM ` + k + `.journal WHERE id = $1 AND topic = $2 AND segment = $3`,
		deleteTo:      `DELETE FROM ` + k + `.journal WHERE id = $1 AND topic = $2 AND segment = $3 AND seq_nr <= $4`,
		records: `SELECT seq_nr, partition, "offset", timestamp, origin, version, tags, payload_type, payload_txt, payload_bin, metadata, headers FROM ` + k +
			`.journal WHERE id = $1 AND topic = $2 AND segment = $3 AND seq_nr BETWEEN $4 AND $5 ORDER BY seq_nr, timestamp`,
		pointer: `SELECT "offset" FROM ` + k + `.pointer2 WHERE topic = $1 AND partition = $2`,
		savePointer: `INSERT INTO ` + k + `.pointer2 (topic, partition, "offset", created, updated) VALUES ($1, $2, $3, $4, $4)
			ON CONFLICT (topic, partition) DO UPDATE SET "offset" = EXCLUDED."offset", updated = EXCLUDED.updated`,
	}
	if create {
		for _, stmt := range Schema(schema) {
			if _, err := pool.Exec(ctx, stmt); err != nil {
				return nil, fmt.Errorf("kafka journal: creating the eventual store in schema %s: %w", schema, err)
			}
		}
		if _, err := pool.Exec(ctx, `INSERT INTO `+k+`.setting (key, value, timestamp, origin) VALUES ('schema-version', $1, now(), 'annals')
			ON CONFLICT (key) DO NOTHING`, SchemaVersion); err != nil {
			return nil, fmt.Errorf("kafka journal: recording the schema version in %s: %w", schema, err)
		}
	}
	var v string
	if err := pool.QueryRow(ctx, `SELECT value FROM `+k+`.setting WHERE key = 'schema-version'`).Scan(&v); err != nil {
		return nil, fmt.Errorf("kafka journal: schema %s holds no eventual store (create it with create true): %w", schema, err)
	}
	if v != SchemaVersion {
		return nil, fmt.Errorf("kafka journal: schema %s has eventual store version %s; this build uses %s", schema, v, SchemaVersion)
	}
	return s, nil
}

// Head implements eventual.Tables.
func (s *Store) Head(ctx context.Context, key eventual.Key) (eventual.Head, bool, error) {
	var (
		h           eventual.Head
		deleteTo    *int64
		expireAfter *time.Duration
		expireOn    *time.Time
		recordID    *[16]byte
	)
	err := s.pool.QueryRow(ctx, s.q.head, key.Topic, key.ID).Scan(&h.Partition, &h.Offset, &h.SegmentSize, &h.SeqNr, &deleteTo,
		&expireAfter, &expireOn, &recordID, &h.MetaSegment)
	if errors.Is(err, pgx.ErrNoRows) {
		return eventual.Head{}, false, nil
	}
	if err != nil {
		return eventual.Head{}, false, err
	}
	if deleteTo != nil {
		h.DeleteTo = *deleteTo
	}
	if expireAfter != nil && expireOn != nil {
		h.Expiry = &eventual.Expiry{After: *expireAfter, On: expireOn.UTC()}
	}
	if recordID != nil {
		h.RecordID = *recordID
	}
	return h, true, nil
}

func expiry(h eventual.Head) (after, on any) {
	if h.Expiry == nil {
		return nil, nil
	}
	return h.Expiry.After, h.Expiry.On
}

func nullable(v int64) any {
	if v == 0 {
		return nil
	}
	return v
}

func uuid(id [16]byte) any {
	if id == ([16]byte{}) {
		return nil
	}
	return id
}

func text(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// InsertHead implements eventual.Tables.
func (s *Store) InsertHead(ctx context.Context, key eventual.Key, h eventual.Head, now time.Time, origin string) error {
	after, on := expiry(h)
	_, err := s.pool.Exec(ctx, s.q.insertHead, key.Topic, key.ID, h.MetaSegment, h.Partition, h.Offset, h.SegmentSize, h.SeqNr,
		nullable(h.DeleteTo), now.UTC(), after, on, uuid(h.RecordID), text(origin))
	return err
}

// UpdateHead implements eventual.Tables.
func (s *Store) UpdateHead(ctx context.Context, key eventual.Key, h eventual.Head, now time.Time) error {
	after, on := expiry(h)
	_, err := s.pool.Exec(ctx, s.q.updateHead, key.Topic, key.ID, h.Partition, h.Offset, h.SeqNr, nullable(h.DeleteTo), now.UTC(), after, on)
	return err
}

// DeleteHead implements eventual.Tables.
func (s *Store) DeleteHead(ctx context.Context, key eventual.Key) error {
	_, err := s.pool.Exec(ctx, s.q.deleteHead, key.Topic, key.ID)
	return err
}

// InsertRecords implements eventual.Tables: one batch in one transaction.
func (s *Store) InsertRecords(ctx context.Context, key eventual.Key, segment int64, recordID [16]byte, records []eventual.Record) error {
	var b pgx.Batch
	for _, r := range records {
		row, err := r.Row()
		if err != nil {
			return err
		}
		b.Queue(s.q.insertRecord, key.ID, key.Topic, segment, r.Event.SeqNr, r.Partition, r.Offset, r.Timestamp.UTC(), row.Origin,
			row.Version, uuid(recordID), row.Tags, row.PayloadType, row.PayloadTxt, row.PayloadBin, row.Metadata, row.Headers)
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return tx.SendBatch(ctx, &b).Close() })
}

// DeleteRecords implements eventual.Tables.
func (s *Store) DeleteRecords(ctx context.Context, key eventual.Key, segment int64, to int64) error {
	var err error
	if to < 0 {
		_, err = s.pool.Exec(ctx, s.q.deleteRecords, key.ID, key.Topic, segment)
	} else {
		_, err = s.pool.Exec(ctx, s.q.deleteTo, key.ID, key.Topic, segment, to)
	}
	return err
}

// Records implements eventual.Tables.
func (s *Store) Records(ctx context.Context, key eventual.Key, segment int64, from, to int64) iter.Seq2[eventual.Record, error] {
	return func(yield func(eventual.Record, error) bool) {
		rows, err := s.pool.Query(ctx, s.q.records, key.ID, key.Topic, segment, from, to)
		if err != nil {
			yield(eventual.Record{}, err)
			return
		}
		defer rows.Close()
		var (
			lastHeaders []byte
			lastParsed  map[string]string
		)
		for rows.Next() {
			var (
				r                         eventual.Record
				origin, version, typ, txt *string
				bin                       []byte
				meta                      *string
				headers                   []byte
			)
			if err := rows.Scan(&r.Event.SeqNr, &r.Partition, &r.Offset, &r.Timestamp, &origin, &version, &r.Event.Tags, &typ, &txt, &bin,
				&meta, &headers); err != nil {
				yield(eventual.Record{}, err)
				return
			}
			r.FillFromRow(origin, version, typ, txt, bin, meta)
			switch {
			case headers == nil:
			case bytes.Equal(headers, lastHeaders):
				// The events of one Kafka record share its headers: parse
				// them once (the map is shared; readers do not change it).
				r.Headers = lastParsed
			default:
				if err := json.Unmarshal(headers, &r.Headers); err != nil {
					yield(eventual.Record{}, fmt.Errorf("%q event %d: headers: %w", key.ID, r.Event.SeqNr, err))
					return
				}
				lastHeaders, lastParsed = headers, r.Headers
			}
			if !yield(r, nil) {
				return
			}
		}
		if err := rows.Err(); err != nil {
			yield(eventual.Record{}, err)
		}
	}
}

// Pointer implements eventual.Tables.
func (s *Store) Pointer(ctx context.Context, topic string, partition int32) (int64, bool, error) {
	var off int64
	err := s.pool.QueryRow(ctx, s.q.pointer, topic, partition).Scan(&off)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	return off, err == nil, err
}

// SavePointer implements eventual.Tables.
func (s *Store) SavePointer(ctx context.Context, topic string, partition int32, offset int64, now time.Time) error {
	_, err := s.pool.Exec(ctx, s.q.savePointer, topic, partition, offset, now.UTC())
	return err
}

// IDs implements eventual.Tables.
func (s *Store) IDs(ctx context.Context, topic string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		rows, err := s.pool.Query(ctx, `SELECT id FROM `+s.schema+`.metajournal WHERE $1 = '' OR topic = $1`, topic)
		if err != nil {
			yield("", err)
			return
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				yield("", err)
				return
			}
			if !yield(id, nil) {
				return
			}
		}
		if err := rows.Err(); err != nil {
			yield("", err)
		}
	}
}

// Expired implements eventual.Tables (through the expire_on index).
func (s *Store) Expired(ctx context.Context, on time.Time) iter.Seq2[eventual.Key, error] {
	return func(yield func(eventual.Key, error) bool) {
		rows, err := s.pool.Query(ctx, `SELECT topic, id FROM `+s.schema+`.metajournal WHERE expire_on <= $1`, on.UTC().Format(time.DateOnly))
		if err != nil {
			yield(eventual.Key{}, err)
			return
		}
		defer rows.Close()
		for rows.Next() {
			var k eventual.Key
			if err := rows.Scan(&k.Topic, &k.ID); err != nil {
				yield(eventual.Key{}, err)
				return
			}
			if !yield(k, nil) {
				return
			}
		}
		if err := rows.Err(); err != nil {
			yield(eventual.Key{}, err)
		}
	}
}

var _ eventual.Tables = (*Store)(nil)
