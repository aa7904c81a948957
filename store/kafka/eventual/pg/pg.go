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
	"github.com/jackc/pgx/v5/pgconn"
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
	db     querier // the pool, or the transaction of InTx
	schema string
	q      statements
	// Within InTx: writes are queued in queue and sent in one pipelined
	// batch at the end; heads holds the heads read ahead (nil: none).
	queue *pgx.Batch
	heads map[eventual.Key]*eventual.Head
	// bulk, within InTx, holds the event rows and head writes sent as
	// multi-row statements (bulk.go).
	bulk *bulk
}

// querier is what the store runs statements on: *pgxpool.Pool or pgx.Tx.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

type statements struct {
	head, heads, insertHead, updateHead, deleteHead string
	insertRecord, deleteRecords, deleteTo           string
	records, pointer, savePointer                   string
	insertRecords, insertHeads, updateHeads         string // multi-row (bulk.go)
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
	s := &Store{pool: pool, db: pool, schema: schema}
	k := schema
	s.q = statements{
		head: `SELECT partition, "offset", segment_size, seq_nr, delete_to, expire_after, expire_on, record_id, segment FROM ` + k +
			`.metajournal WHERE topic = $1 AND id = $2`,
		heads: `SELECT partition, "offset", segment_size, seq_nr, delete_to, expire_after, expire_on, record_id, segment, topic, id FROM ` + k +
			`.metajournal WHERE (topic, id) IN (SELECT * FROM unnest($1::text[], $2::text[]))`,
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
	s.q.insertRecords, s.q.insertHeads, s.q.updateHeads = bulkStatements(k)
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
	if h, ok := s.heads[key]; ok {
		if h == nil {
			return eventual.Head{}, false, nil
		}
		return *h, true, nil
	}
	h, err := scanHead(s.db.QueryRow(ctx, s.q.head, key.Topic, key.ID))
	if errors.Is(err, pgx.ErrNoRows) {
		return eventual.Head{}, false, nil
	}
	if err != nil {
		return eventual.Head{}, false, err
	}
	return h, true, nil
}

// scanHead reads a head from the columns of s.q.head, and any columns
// after them into extra.
func scanHead(row pgx.Row, extra ...any) (eventual.Head, error) {
	var (
		h           eventual.Head
		deleteTo    *int64
		expireAfter *time.Duration
		expireOn    *time.Time
		recordID    *[16]byte
	)
	dest := append([]any{&h.Partition, &h.Offset, &h.SegmentSize, &h.SeqNr, &deleteTo, &expireAfter, &expireOn, &recordID, &h.MetaSegment}, extra...)
	if err := row.Scan(dest...); err != nil {
		return eventual.Head{}, err
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
	return h, nil
}

// exec runs a write, or queues it within InTx.
func (s *Store) exec(ctx context.Context, sql string, args ...any) error {
	if s.queue != nil {
		s.queue.Queue(sql, args...)
		return nil
	}
	_, err := s.db.Exec(ctx, sql, args...)
	return err
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
	if s.bulk != nil {
		s.bulk.addHead(headWrite{insert: true, key: key, head: h, now: now, origin: origin})
		return nil
	}
	after, on := expiry(h)
	return s.exec(ctx, s.q.insertHead, key.Topic, key.ID, h.MetaSegment, h.Partition, h.Offset, h.SegmentSize, h.SeqNr,
		nullable(h.DeleteTo), now.UTC(), after, on, uuid(h.RecordID), text(origin))
}

// UpdateHead implements eventual.Tables.
func (s *Store) UpdateHead(ctx context.Context, key eventual.Key, h eventual.Head, now time.Time) error {
	if s.bulk != nil {
		s.bulk.addHead(headWrite{key: key, head: h, now: now})
		return nil
	}
	after, on := expiry(h)
	return s.exec(ctx, s.q.updateHead, key.Topic, key.ID, h.Partition, h.Offset, h.SeqNr, nullable(h.DeleteTo), now.UTC(), after, on)
}

// DeleteHead implements eventual.Tables.
func (s *Store) DeleteHead(ctx context.Context, key eventual.Key) error {
	if s.bulk != nil {
		s.bulk.flush(s.queue, s.q)
	}
	return s.exec(ctx, s.q.deleteHead, key.Topic, key.ID)
}

// InsertRecords implements eventual.Tables: one pipelined batch, one
// round trip. The rows are upserts: a batch cut short by a crash is
// applied again whole (the head, written after, still has the old
// offset), so it needs no transaction.
func (s *Store) InsertRecords(ctx context.Context, key eventual.Key, segment int64, recordID [16]byte, records []eventual.Record) error {
	if s.bulk != nil {
		for _, r := range records {
			row, err := r.Row()
			if err != nil {
				return err
			}
			if err := s.bulk.addRecord(key, segment, recordID, r, row); err != nil {
				return err
			}
		}
		return nil
	}
	b := s.queue
	if b == nil {
		b = &pgx.Batch{}
	}
	for _, r := range records {
		row, err := r.Row()
		if err != nil {
			return err
		}
		b.Queue(s.q.insertRecord, key.ID, key.Topic, segment, r.Event.SeqNr, r.Partition, r.Offset, r.Timestamp.UTC(), row.Origin,
			row.Version, uuid(recordID), row.Tags, row.PayloadType, row.PayloadTxt, row.PayloadBin, row.Metadata, row.Headers)
	}
	if s.queue != nil {
		return nil
	}
	return s.db.SendBatch(ctx, b).Close()
}

// DeleteRecords implements eventual.Tables.
func (s *Store) DeleteRecords(ctx context.Context, key eventual.Key, segment int64, to int64) error {
	if s.bulk != nil {
		s.bulk.flush(s.queue, s.q)
	}
	if to < 0 {
		return s.exec(ctx, s.q.deleteRecords, key.ID, key.Topic, segment)
	}
	return s.exec(ctx, s.q.deleteTo, key.ID, key.Topic, segment, to)
}

// Records implements eventual.Tables.
func (s *Store) Records(ctx context.Context, key eventual.Key, segment int64, from, to int64) iter.Seq2[eventual.Record, error] {
	return func(yield func(eventual.Record, error) bool) {
		rows, err := s.db.Query(ctx, s.q.records, key.ID, key.Topic, segment, from, to)
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
	err := s.db.QueryRow(ctx, s.q.pointer, topic, partition).Scan(&off)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	return off, err == nil, err
}

// SavePointer implements eventual.Tables.
func (s *Store) SavePointer(ctx context.Context, topic string, partition int32, offset int64, now time.Time) error {
	return s.exec(ctx, s.q.savePointer, topic, partition, offset, now.UTC())
}

// IDs implements eventual.Tables.
func (s *Store) IDs(ctx context.Context, topic string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		rows, err := s.db.Query(ctx, `SELECT id FROM `+s.schema+`.metajournal WHERE $1 = '' OR topic = $1`, topic)
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
		rows, err := s.db.Query(ctx, `SELECT topic, id FROM `+s.schema+`.metajournal WHERE expire_on <= $1`, on.UTC().Format(time.DateOnly))
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

// InTx implements eventual.TxTables: the heads of keys are read in one
// query, f's writes are queued and sent in one pipelined batch when it
// returns (the event rows and head writes as multi-row statements, see
// bulk), and all of it is one transaction: one round trip for the reads,
// one for the writes and one WAL flush for a poll (or a share of one),
// the pointer committed with the rows it covers when f moves it. Within
// f, a key's head is read once, before its writes (as eventual.Apply
// does). Calls may run concurrently, each on a connection of the pool.
func (s *Store) InTx(ctx context.Context, keys []eventual.Key, f func(eventual.Tables) error) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		ts := &Store{pool: s.pool, db: tx, schema: s.schema, q: s.q, queue: &pgx.Batch{}, heads: make(map[eventual.Key]*eventual.Head, len(keys)),
			bulk: newBulk()}
		if len(keys) > 0 {
			topics, ids := make([]string, len(keys)), make([]string, len(keys))
			for i, k := range keys {
				topics[i], ids[i] = k.Topic, k.ID
				ts.heads[k] = nil
			}
			rows, err := tx.Query(ctx, s.q.heads, topics, ids)
			if err != nil {
				return err
			}
			for rows.Next() {
				var k eventual.Key
				h, err := scanHead(rows, &k.Topic, &k.ID)
				if err != nil {
					rows.Close()
					return err
				}
				ts.heads[k] = &h
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
		}
		if err := f(ts); err != nil {
			return err
		}
		ts.bulk.flush(ts.queue, s.q)
		if ts.queue.Len() == 0 {
			return nil
		}
		return tx.SendBatch(ctx, ts.queue).Close()
	})
}

// Summaries implements eventual.Summarizer, in one query.
func (s *Store) Summaries(ctx context.Context) iter.Seq2[eventual.IDSummary, error] {
	return func(yield func(eventual.IDSummary, error) bool) {
		rows, err := s.db.Query(ctx, `SELECT m.topic, m.id, m.seq_nr, count(j.seq_nr),
			coalesce(sum(coalesce(octet_length(j.payload_bin), octet_length(j.payload_txt), 0)), 0), min(j.timestamp), max(j.timestamp)
			FROM `+s.schema+`.metajournal m LEFT JOIN `+s.schema+`.journal j ON j.topic = m.topic AND j.id = m.id
			GROUP BY m.topic, m.id, m.seq_nr`)
		if err != nil {
			yield(eventual.IDSummary{}, err)
			return
		}
		defer rows.Close()
		for rows.Next() {
			var (
				sm             eventual.IDSummary
				oldest, newest *time.Time
			)
			if err := rows.Scan(&sm.Key.Topic, &sm.Key.ID, &sm.SeqNr, &sm.Events, &sm.PayloadBytes, &oldest, &newest); err != nil {
				yield(eventual.IDSummary{}, err)
				return
			}
			if oldest != nil {
				sm.Oldest, sm.Newest = oldest.UTC(), newest.UTC()
			}
			if !yield(sm, nil) {
				return
			}
		}
		if err := rows.Err(); err != nil {
			yield(eventual.IDSummary{}, err)
		}
	}
}

var (
	_ eventual.TxTables   = (*Store)(nil)
	_ eventual.Summarizer = (*Store)(nil)
)
