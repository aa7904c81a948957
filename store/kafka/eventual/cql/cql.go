// Package cql is the Kafka journal's eventual store on Cassandra, in the
// keyspace layout of the Scala Kafka Journal's replicator (schema version
// 8): tables journal, metajournal, pointer2 and setting, with the same
// columns, keys, segments and values, so that a Go replicator and a Scala
// one can serve the same keyspace and either side's readers can read it.
//
// [Store] implements [eventual.Tables]; the replication rules are in
// package eventual.
package cql

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"regexp"
	"sync"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/annals-go/annals/store/kafka/eventual"
)

// SchemaVersion is the Scala schema version this layout is (the `setting`
// row schema-version).
const SchemaVersion = "8"

// Store is an eventual store in one keyspace. It is safe for concurrent
// use; it does not own the session.
type Store struct {
	session  *gocql.Session
	keyspace string
	read     gocql.Consistency
	write    gocql.Consistency
	origin   string
	q        statements
	// pointers holds the partitions whose pointer row this store read or
	// wrote: SavePointer updates them without reading first.
	pointers sync.Map // topicPartition → struct{}
}

type topicPartition struct {
	topic     string
	partition int32
}

type statements struct {
	head, insertHead, updateHead, deleteHead       string
	insertRecord, deleteRecords, deleteRecordsTo   string
	records, pointer, insertPointer, updatePointer string
	insertSetting, ids, expiring                   string
}

// Option configures a Store.
type Option func(*Store)

// WithConsistency sets the consistency of reads and writes (default
// LOCAL_QUORUM for both, as the Scala library).
func WithConsistency(read, write gocql.Consistency) Option {
	return func(s *Store) { s.read, s.write = read, write }
}

// WithOrigin names this replicator in the rows it writes for itself (the
// schema-version setting); default "annals".
func WithOrigin(origin string) Option { return func(s *Store) { s.origin = origin } }

var keyspaceName = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_]{0,47}$`)

// New returns the eventual store in keyspace, reached through session.
// With create true it creates the keyspace (with replication, a CQL map
// such as {'class':'SimpleStrategy','replication_factor':1}) and the
// tables when missing, and records the schema version as the Scala
// replicator does.
func New(ctx context.Context, session *gocql.Session, keyspace string, create bool, replication string, opts ...Option) (*Store, error) {
	if !keyspaceName.MatchString(keyspace) {
		return nil, fmt.Errorf("kafka journal: keyspace %q is not a Cassandra name (letters, digits, _; 48 at most)", keyspace)
	}
	s := &Store{session: session, keyspace: keyspace, read: gocql.LocalQuorum, write: gocql.LocalQuorum, origin: "annals"}
	for _, o := range opts {
		o(s)
	}
	k := keyspace
	s.q = statements{
		head:            `SELECT segment, partition, offset, segment_size, seq_nr, delete_to, expire_after, expire_on, record_id FROM ` + k + `.metajournal WHERE topic = ? AND segment IN (?, ?) AND id = ?`,
		insertHead:      `INSERT INTO ` + k + `.metajournal (topic, segment, id, partition, offset, segment_size, seq_nr, delete_to, created, created_date, updated, expire_after, expire_on, record_id, origin, properties) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		updateHead:      `UPDATE ` + k + `.metajournal SET partition = ?, offset = ?, seq_nr = ?, delete_to = ?, updated = ?, expire_after = ?, expire_on = ? WHERE id = ? AND topic = ? AND segment = ?`,
		deleteHead:      `DELETE FROM ` + k + `.metajournal WHERE id = ? AND topic = ? AND segment = ?`,
		insertRecord:    `INSERT INTO ` + k + `.journal (id, topic, segment, seq_nr, partition, offset, timestamp, origin, version, meta_record_id, tags, payload_type, payload_txt, payload_bin, metadata, headers) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		deleteRecords:   `DELETE FROM ` + k + `.journal WHERE id = ? AND topic = ? AND segment = ?`,
		deleteRecordsTo: `DELETE FROM ` + k + `.journal WHERE id = ? AND topic = ? AND segment = ? AND seq_nr <= ?`,
		records:         `SELECT seq_nr, partition, offset, timestamp, origin, version, tags, payload_type, payload_txt, payload_bin, metadata, headers FROM ` + k + `.journal WHERE id = ? AND topic = ? AND segment = ? AND seq_nr >= ? AND seq_nr <= ?`,
		pointer:         `SELECT offset FROM ` + k + `.pointer2 WHERE topic = ? AND partition = ?`,
		insertPointer:   `INSERT INTO ` + k + `.pointer2 (topic, partition, offset, created, updated) VALUES (?, ?, ?, ?, ?)`,
		updatePointer:   `UPDATE ` + k + `.pointer2 SET offset = ?, updated = ? WHERE topic = ? AND partition = ?`,
		insertSetting:   `INSERT INTO ` + k + `.setting (key, value, timestamp, origin) VALUES (?, ?, ?, ?) IF NOT EXISTS`,
		ids:             `SELECT topic, id FROM ` + k + `.metajournal`,
		expiring:        `SELECT topic, id, expire_on FROM ` + k + `.metajournal`,
	}
	if create {
		if err := s.create(ctx, replication); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Schema returns the statements that create the keyspace's tables, as
// the Scala library's.
func Schema(keyspace string) []string {
	k := keyspace
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + k + `.journal (id TEXT, topic TEXT, segment BIGINT, seq_nr BIGINT, partition INT, offset BIGINT, timestamp TIMESTAMP, origin TEXT, version TEXT, meta_record_id UUID, tags SET<TEXT>, metadata TEXT, payload_type TEXT, payload_txt TEXT, payload_bin BLOB, headers MAP<TEXT, TEXT>, PRIMARY KEY ((id, topic, segment), seq_nr, timestamp))`,
		`CREATE TABLE IF NOT EXISTS ` + k + `.pointer2 (topic TEXT, partition INT, offset BIGINT, created TIMESTAMP, updated TIMESTAMP, PRIMARY KEY ((topic, partition)))`,
		`CREATE TABLE IF NOT EXISTS ` + k + `.setting (key TEXT PRIMARY KEY, value TEXT, timestamp TIMESTAMP, origin TEXT, metadata TEXT)`,
		`CREATE TABLE IF NOT EXISTS ` + k + `.metajournal (id TEXT, topic TEXT, segment BIGINT, partition INT, offset BIGINT, segment_size INT, seq_nr BIGINT, delete_to BIGINT, created TIMESTAMP, created_date DATE, updated TIMESTAMP, expire_after DURATION, expire_on DATE, record_id UUID, origin TEXT, properties MAP<TEXT,TEXT>, metadata TEXT, PRIMARY KEY ((topic, segment), id))`,
		`CREATE INDEX IF NOT EXISTS metajournal_created_date_idx ON ` + k + `.metajournal (created_date)`,
		`CREATE INDEX IF NOT EXISTS metajournal_expire_on_idx ON ` + k + `.metajournal (expire_on)`,
	}
}

func (s *Store) create(ctx context.Context, replication string) error {
	if replication == "" {
		replication = `{'class': 'SimpleStrategy', 'replication_factor': 1}`
	}
	stmts := append([]string{`CREATE KEYSPACE IF NOT EXISTS ` + s.keyspace + ` WITH replication = ` + replication}, Schema(s.keyspace)...)
	for _, q := range stmts {
		if err := s.session.Query(q).WithContext(ctx).Exec(); err != nil {
			return fmt.Errorf("kafka journal: creating the eventual store in %s: %w", s.keyspace, err)
		}
	}
	prev := map[string]any{}
	if _, err := s.session.Query(s.q.insertSetting, "schema-version", SchemaVersion, time.Now(), s.origin).
		WithContext(ctx).SerialConsistency(gocql.LocalSerial).MapScanCAS(prev); err != nil {
		return fmt.Errorf("kafka journal: recording the schema version in %s: %w", s.keyspace, err)
	}
	if v, ok := prev["value"].(string); ok && v != SchemaVersion {
		return fmt.Errorf("kafka journal: keyspace %s has schema version %s; this build uses %s", s.keyspace, v, SchemaVersion)
	}
	return nil
}

func (s *Store) query(ctx context.Context, c gocql.Consistency, stmt string, args ...any) *gocql.Query {
	return s.session.Query(stmt, args...).WithContext(ctx).Consistency(c)
}

// Head implements eventual.Tables: the head in the id's segment, or in
// its segment of older Scala versions, both read in one query (the first
// preferred when both hold one).
func (s *Store) Head(ctx context.Context, key eventual.Key) (eventual.Head, bool, error) {
	first, old := eventual.MetaSegment(key.ID, eventual.MetaSegments), eventual.MetaSegment(key.ID, eventual.OldMetaSegments)
	it := s.query(ctx, s.read, s.q.head, key.Topic, first, old, key.ID).Iter()
	var (
		found       bool
		h, row      eventual.Head
		deleteTo    *int64
		expireAfter *gocql.Duration
		expireOn    time.Time
		recordID    *gocql.UUID
	)
	for it.Scan(&row.MetaSegment, &row.Partition, &row.Offset, &row.SegmentSize, &row.SeqNr, &deleteTo, &expireAfter, &expireOn, &recordID) {
		if found && h.MetaSegment == first {
			continue
		}
		found, h = true, row
		if deleteTo != nil {
			h.DeleteTo = *deleteTo
		}
		if expireAfter != nil { // as written: an expire-after of 0 too
			h.Expiry = &eventual.Expiry{After: fromCQLDuration(*expireAfter), On: expireOn.UTC()}
		}
		if recordID != nil {
			h.RecordID = *recordID
		}
		row, deleteTo, expireAfter, expireOn, recordID = eventual.Head{}, nil, nil, time.Time{}, nil
	}
	if err := it.Close(); err != nil {
		return eventual.Head{}, false, err
	}
	return h, found, nil
}

// toCQLDuration gives whole days as days and the rest as nanoseconds.
func toCQLDuration(d time.Duration) gocql.Duration {
	const day = 24 * time.Hour
	return gocql.Duration{Days: int32(d / day), Nanoseconds: int64(d % day)}
}

func fromCQLDuration(d gocql.Duration) time.Duration {
	return time.Duration(d.Days)*24*time.Hour + time.Duration(d.Nanoseconds)
}

// expiry returns the expire_after and expire_on values (nil for none).
func expiry(h eventual.Head) (after, on any) {
	if h.Expiry == nil {
		return nil, nil
	}
	return toCQLDuration(h.Expiry.After), h.Expiry.On
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
	return gocql.UUID(id)
}

// InsertHead implements eventual.Tables.
func (s *Store) InsertHead(ctx context.Context, key eventual.Key, h eventual.Head, now time.Time, origin string) error {
	after, on := expiry(h)
	now = now.UTC().Truncate(time.Millisecond)
	date := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	var org any
	if origin != "" {
		org = origin
	}
	return s.query(ctx, s.write, s.q.insertHead, key.Topic, h.MetaSegment, key.ID, h.Partition, h.Offset, h.SegmentSize,
		h.SeqNr, nullable(h.DeleteTo), now, date, now, after, on, uuid(h.RecordID), org, nil).Exec()
}

// UpdateHead implements eventual.Tables.
func (s *Store) UpdateHead(ctx context.Context, key eventual.Key, h eventual.Head, now time.Time) error {
	after, on := expiry(h)
	return s.query(ctx, s.write, s.q.updateHead, h.Partition, h.Offset, h.SeqNr, nullable(h.DeleteTo), now.UTC(), after, on,
		key.ID, key.Topic, h.MetaSegment).Exec()
}

// DeleteHead implements eventual.Tables. It removes the head from both
// of the id's possible segments.
func (s *Store) DeleteHead(ctx context.Context, key eventual.Key) error {
	first, old := eventual.MetaSegment(key.ID, eventual.MetaSegments), eventual.MetaSegment(key.ID, eventual.OldMetaSegments)
	for _, seg := range []int64{first, old} {
		if err := s.query(ctx, s.write, s.q.deleteHead, key.ID, key.Topic, seg).Exec(); err != nil {
			return err
		}
		if first == old {
			break
		}
	}
	return nil
}

// InsertRecords implements eventual.Tables: one statement, or a logged
// batch (one partition) for several records.
func (s *Store) InsertRecords(ctx context.Context, key eventual.Key, segment int64, recordID [16]byte, records []eventual.Record) error {
	b := s.session.Batch(gocql.LoggedBatch).WithContext(ctx)
	b.SetConsistency(s.write)
	for _, r := range records {
		args, err := s.recordArgs(key, segment, recordID, r)
		if err != nil {
			return err
		}
		if len(records) == 1 {
			return s.query(ctx, s.write, s.q.insertRecord, args...).Exec()
		}
		b.Query(s.q.insertRecord, args...)
	}
	return b.Exec()
}

// recordArgs returns the insert's values of r. A new row's absent columns
// (no origin, version, text payload, headers or tags) are left unset
// rather than written as NULL: the same row for any reader, without a
// tombstone per absent column. A row is only ever written again with the
// same values (a poll applied again), so nothing needs clearing.
func (s *Store) recordArgs(key eventual.Key, segment int64, recordID [16]byte, r eventual.Record) ([]any, error) {
	row, err := r.Row()
	if err != nil {
		return nil, err
	}
	var tags, headers any = gocql.UnsetValue, gocql.UnsetValue
	if len(row.Tags) > 0 {
		tags = textSet(row.Tags)
	}
	if h, ok := row.Headers.(map[string]string); ok {
		headers = textMap(h)
	}
	return []any{key.ID, key.Topic, segment, r.Event.SeqNr, r.Partition, r.Offset, r.Timestamp.UTC(), orUnset(row.Origin), orUnset(row.Version),
		orUnset(uuid(recordID)), tags, orUnset(row.PayloadType), orUnset(row.PayloadTxt), orUnset(row.PayloadBin), row.Metadata, headers}, nil
}

// orUnset returns v, or gocql.UnsetValue for nil.
func orUnset(v any) any {
	if v == nil {
		return gocql.UnsetValue
	}
	return v
}

// textSet is a set<text> value, marshalled without reflection.
type textSet []string

// MarshalCQL implements gocql.Marshaler: the element count, then each
// element's length and bytes (protocol 3 and later).
func (t textSet) MarshalCQL(gocql.TypeInfo) ([]byte, error) {
	n := 4
	for _, e := range t {
		n += 4 + len(e)
	}
	b := binary.BigEndian.AppendUint32(make([]byte, 0, n), uint32(len(t)))
	for _, e := range t {
		b = binary.BigEndian.AppendUint32(b, uint32(len(e)))
		b = append(b, e...)
	}
	return b, nil
}

// textMap is a map<text, text> value, marshalled without reflection.
type textMap map[string]string

// MarshalCQL implements gocql.Marshaler: the entry count, then each key's
// and value's length and bytes (protocol 3 and later).
func (m textMap) MarshalCQL(gocql.TypeInfo) ([]byte, error) {
	if m == nil {
		return nil, nil
	}
	n := 4
	for k, v := range m {
		n += 8 + len(k) + len(v)
	}
	b := binary.BigEndian.AppendUint32(make([]byte, 0, n), uint32(len(m)))
	for k, v := range m {
		b = binary.BigEndian.AppendUint32(b, uint32(len(k)))
		b = append(b, k...)
		b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
	}
	return b, nil
}

// DeleteRecords implements eventual.Tables.
func (s *Store) DeleteRecords(ctx context.Context, key eventual.Key, segment int64, to int64) error {
	if to < 0 {
		return s.query(ctx, s.write, s.q.deleteRecords, key.ID, key.Topic, segment).Exec()
	}
	return s.query(ctx, s.write, s.q.deleteRecordsTo, key.ID, key.Topic, segment, to).Exec()
}

// Records implements eventual.Tables.
func (s *Store) Records(ctx context.Context, key eventual.Key, segment int64, from, to int64) iter.Seq2[eventual.Record, error] {
	return func(yield func(eventual.Record, error) bool) {
		it := s.query(ctx, s.read, s.q.records, key.ID, key.Topic, segment, from, to).Iter()
		sc := it.Scanner()
		for sc.Next() {
			var (
				r               eventual.Record
				origin, version *string
				typ, txt        *string
				bin             []byte
				meta            *string
				headers         map[string]string
			)
			if err := sc.Scan(&r.Event.SeqNr, &r.Partition, &r.Offset, &r.Timestamp, &origin, &version, &r.Event.Tags,
				&typ, &txt, &bin, &meta, &headers); err != nil {
				_ = it.Close()
				yield(eventual.Record{}, err)
				return
			}
			r.FillFromRow(origin, version, typ, txt, bin, meta)
			if len(headers) > 0 {
				r.Headers = headers
			}
			if !yield(r, nil) {
				_ = it.Close()
				return
			}
		}
		if err := it.Close(); err != nil {
			yield(eventual.Record{}, err)
		}
	}
}

// Pointer implements eventual.Tables.
func (s *Store) Pointer(ctx context.Context, topic string, partition int32) (int64, bool, error) {
	var off int64
	err := s.query(ctx, s.read, s.q.pointer, topic, partition).Scan(&off)
	if errors.Is(err, gocql.ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	s.pointers.Store(topicPartition{topic, partition}, struct{}{})
	return off, true, nil
}

// SavePointer implements eventual.Tables: an insert the first time (with
// its created time), an update of offset and updated time after. Whether
// the row exists is read once per partition; a partition whose row this
// store read or wrote is updated without reading (pointer rows are never
// deleted).
func (s *Store) SavePointer(ctx context.Context, topic string, partition int32, offset int64, now time.Time) error {
	tp := topicPartition{topic, partition}
	_, ok := s.pointers.Load(tp)
	if !ok {
		var err error
		if _, ok, err = s.Pointer(ctx, topic, partition); err != nil {
			return err
		}
	}
	now = now.UTC()
	var err error
	if ok {
		err = s.query(ctx, s.write, s.q.updatePointer, offset, now, topic, partition).Exec()
	} else {
		err = s.query(ctx, s.write, s.q.insertPointer, topic, partition, offset, now, now).Exec()
	}
	if err == nil {
		s.pointers.Store(tp, struct{}{})
	}
	return err
}

// IDs implements eventual.Tables by reading the whole metajournal (its
// partitions are (topic, segment): a topic's ids are spread over 10,000
// segments), as the Scala library's id listing does.
func (s *Store) IDs(ctx context.Context, topic string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		it := s.query(ctx, s.read, s.q.ids).Iter()
		var t, id string
		for it.Scan(&t, &id) {
			if topic != "" && t != topic {
				continue
			}
			if !yield(id, nil) {
				_ = it.Close()
				return
			}
		}
		if err := it.Close(); err != nil {
			yield("", err)
		}
	}
}

// Expired implements eventual.Tables by reading the whole metajournal
// (the expire_on index answers only equality, one day at a time), which
// an hourly or daily purge can afford.
func (s *Store) Expired(ctx context.Context, on time.Time) iter.Seq2[eventual.Key, error] {
	day := time.Date(on.UTC().Year(), on.UTC().Month(), on.UTC().Day(), 0, 0, 0, 0, time.UTC)
	return func(yield func(eventual.Key, error) bool) {
		it := s.query(ctx, s.read, s.q.expiring).Iter()
		var (
			k        eventual.Key
			expireOn time.Time
		)
		for it.Scan(&k.Topic, &k.ID, &expireOn) {
			if expireOn.IsZero() || expireOn.After(day) {
				continue
			}
			if !yield(k, nil) {
				_ = it.Close()
				return
			}
		}
		if err := it.Close(); err != nil {
			yield(eventual.Key{}, err)
		}
	}
}

// Summaries implements eventual.Summarizer by reading the whole
// metajournal and journal (Cassandra keeps no counts).
func (s *Store) Summaries(ctx context.Context) iter.Seq2[eventual.IDSummary, error] {
	return func(yield func(eventual.IDSummary, error) bool) {
		sums := map[eventual.Key]*eventual.IDSummary{}
		var order []eventual.Key
		it := s.query(ctx, s.read, `SELECT topic, id, seq_nr FROM `+s.keyspace+`.metajournal`).Iter()
		var (
			k   eventual.Key
			seq int64
		)
		for it.Scan(&k.Topic, &k.ID, &seq) {
			sums[k] = &eventual.IDSummary{Key: k, SeqNr: seq}
			order = append(order, k)
		}
		if err := it.Close(); err != nil {
			yield(eventual.IDSummary{}, err)
			return
		}
		it = s.query(ctx, s.read, `SELECT topic, id, timestamp, payload_bin, payload_txt FROM `+s.keyspace+`.journal`).Iter()
		var (
			ts  time.Time
			bin []byte
			txt *string
		)
		for it.Scan(&k.Topic, &k.ID, &ts, &bin, &txt) {
			sm, ok := sums[k]
			if !ok {
				continue // rows of a journal being purged
			}
			sm.Events++
			sm.PayloadBytes += int64(len(bin))
			if txt != nil {
				sm.PayloadBytes += int64(len(*txt))
			}
			ts = ts.UTC()
			if sm.Oldest.IsZero() || ts.Before(sm.Oldest) {
				sm.Oldest = ts
			}
			if ts.After(sm.Newest) {
				sm.Newest = ts
			}
		}
		if err := it.Close(); err != nil {
			yield(eventual.IDSummary{}, err)
			return
		}
		for _, k := range order {
			if !yield(*sums[k], nil) {
				return
			}
		}
	}
}

var (
	_ eventual.Tables     = (*Store)(nil)
	_ eventual.Summarizer = (*Store)(nil)
)
