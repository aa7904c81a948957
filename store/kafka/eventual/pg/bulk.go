package pg

import (
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/annals-go/annals/store/kafka/eventual"
)

// bulk holds the writes of an InTx that are sent as multi-row statements
// (one INSERT of every event row, one upsert and one UPDATE of every
// head, each over unnest of column arrays) instead of one statement per
// row: PostgreSQL's cost per statement, not per row, bounded replication.
// A statement that must see them (a delete of events or of a head) flushes
// them to the queue first, so each key's writes keep their order. Within
// the one transaction the order of different keys' writes does not matter.
type bulk struct {
	same   lastValues // the origin, version and payload type of the last row
	rows   recordColumns
	rowAt  map[recordKey]int // a row's index, so that a later write of the same row replaces it
	heads  []headWrite
	headAt map[eventual.Key]int
}

// bulkRows is how many event rows one statement inserts: pgx encodes a
// statement's arguments into a buffer it grows from a few bytes each time,
// so a poll's rows go in statements of a few hundred kilobytes.
const bulkRows = 1000

// recordKey is the journal table's primary key.
type recordKey struct {
	id, topic      string
	segment, seqNr int64
	timestamp      time.Time
}

// recordColumns are the journal table's columns, an array each.
type recordColumns struct {
	id, topic               []string
	segment, seqNr          []int64
	partition               []int32
	offset                  []int64
	timestamp               []time.Time
	origin, version         []*string
	recordID                []pgtype.UUID
	tags                    []*string // array literals; NULL for none
	payloadType, payloadTxt []*string
	payloadBin              [][]byte
	metadata                []string
	headers                 []*string // JSON
}

// headWrite is an InsertHead (insert true) or UpdateHead of one key, the
// last of the transaction for that key: an update after an insert of the
// same head is folded into the insert.
type headWrite struct {
	insert bool
	key    eventual.Key
	head   eventual.Head
	now    time.Time
	origin string
}

func newBulk() *bulk {
	return &bulk{rowAt: map[recordKey]int{}, headAt: map[eventual.Key]int{}}
}

// addRecord adds an event row (or replaces the same row added before).
func (b *bulk) addRecord(key eventual.Key, segment int64, recordID [16]byte, r eventual.Record, row eventual.Row) error {
	ts := r.Timestamp.UTC()
	var headers *string
	if len(r.Headers) > 0 && row.Headers != nil {
		s := headersJSON(r.Headers)
		headers = &s
	}
	var tags *string
	if len(row.Tags) > 0 {
		s := arrayLiteral(row.Tags)
		tags = &s
	}
	c := &b.rows
	origin, version, payloadType := b.same.of(0, row.Origin), b.same.of(1, row.Version), b.same.of(2, row.PayloadType)
	k := recordKey{key.ID, key.Topic, segment, r.Event.SeqNr, ts}
	if i, ok := b.rowAt[k]; ok {
		c.partition[i], c.offset[i], c.origin[i], c.version[i] = r.Partition, r.Offset, origin, version
		c.recordID[i], c.tags[i], c.payloadType[i], c.payloadTxt[i] = pgUUID(recordID), tags, payloadType, str(row.PayloadTxt)
		c.payloadBin[i], c.metadata[i], c.headers[i] = bin(row.PayloadBin), row.Metadata, headers
		return nil
	}
	b.rowAt[k] = len(c.id)
	c.id, c.topic = append(c.id, key.ID), append(c.topic, key.Topic)
	c.segment, c.seqNr = append(c.segment, segment), append(c.seqNr, r.Event.SeqNr)
	c.partition, c.offset, c.timestamp = append(c.partition, r.Partition), append(c.offset, r.Offset), append(c.timestamp, ts)
	c.origin, c.version = append(c.origin, origin), append(c.version, version)
	c.recordID, c.tags = append(c.recordID, pgUUID(recordID)), append(c.tags, tags)
	c.payloadType, c.payloadTxt = append(c.payloadType, payloadType), append(c.payloadTxt, str(row.PayloadTxt))
	c.payloadBin, c.metadata, c.headers = append(c.payloadBin, bin(row.PayloadBin)), append(c.metadata, row.Metadata), append(c.headers, headers)
	return nil
}

// addHead adds an InsertHead or UpdateHead of key.
func (b *bulk) addHead(w headWrite) {
	i, ok := b.headAt[w.key]
	if !ok {
		b.headAt[w.key] = len(b.heads)
		b.heads = append(b.heads, w)
		return
	}
	prev := &b.heads[i]
	if prev.insert && !w.insert {
		// The update's columns over the insert's row: the insert's
		// created time and origin stay.
		prev.head.Partition, prev.head.Offset, prev.head.SeqNr, prev.head.DeleteTo = w.head.Partition, w.head.Offset, w.head.SeqNr, w.head.DeleteTo
		prev.head.Expiry = w.head.Expiry
		return
	}
	*prev = w
}

// flush queues the held writes into q, rows before heads, and empties b.
func (b *bulk) flush(q *pgx.Batch, st statements) {
	c := &b.rows
	for from := 0; from < len(c.id); from += bulkRows {
		to := min(from+bulkRows, len(c.id))
		// FlatArray: pgx encodes the slices it does not know without
		// reflection.
		q.Queue(st.insertRecords, c.id[from:to], c.topic[from:to], c.segment[from:to], c.seqNr[from:to], c.partition[from:to],
			c.offset[from:to], c.timestamp[from:to], flat(c.origin[from:to]), flat(c.version[from:to]), flat(c.recordID[from:to]),
			flat(c.tags[from:to]), flat(c.payloadType[from:to]), flat(c.payloadTxt[from:to]), flat(c.payloadBin[from:to]),
			c.metadata[from:to], flat(c.headers[from:to]))
	}
	var ins, upd headColumns
	for _, w := range b.heads {
		if w.insert {
			ins.add(w)
		} else {
			upd.add(w)
		}
	}
	if len(ins.topic) > 0 {
		q.Queue(st.insertHeads, ins.topic, ins.id, ins.segment, ins.partition, ins.offset, ins.segmentSize, ins.seqNr, flat(ins.deleteTo),
			ins.now, flat(ins.expireAfter), flat(ins.expireOn), flat(ins.recordID), flat(ins.origin))
	}
	if len(upd.topic) > 0 {
		q.Queue(st.updateHeads, upd.topic, upd.id, upd.partition, upd.offset, upd.seqNr, flat(upd.deleteTo), upd.now, flat(upd.expireAfter),
			flat(upd.expireOn))
	}
	*b = *newBulk()
}

// headColumns are the metajournal's columns of head writes, an array each.
type headColumns struct {
	topic, id   []string
	segment     []int64
	partition   []int32
	offset      []int64
	segmentSize []int32
	seqNr       []int64
	deleteTo    []*int64
	now         []time.Time
	expireAfter []pgtype.Interval
	expireOn    []pgtype.Date
	recordID    []pgtype.UUID
	origin      []*string
}

func (c *headColumns) add(w headWrite) {
	h := w.head
	var (
		after pgtype.Interval
		on    pgtype.Date
	)
	if h.Expiry != nil {
		after = pgtype.Interval{Microseconds: h.Expiry.After.Microseconds(), Valid: true}
		on = pgtype.Date{Time: h.Expiry.On, Valid: true}
	}
	var deleteTo *int64
	if h.DeleteTo != 0 {
		d := h.DeleteTo
		deleteTo = &d
	}
	c.topic, c.id, c.segment = append(c.topic, w.key.Topic), append(c.id, w.key.ID), append(c.segment, h.MetaSegment)
	c.partition, c.offset = append(c.partition, h.Partition), append(c.offset, h.Offset)
	c.segmentSize, c.seqNr, c.deleteTo = append(c.segmentSize, int32(h.SegmentSize)), append(c.seqNr, h.SeqNr), append(c.deleteTo, deleteTo)
	c.now, c.expireAfter, c.expireOn = append(c.now, w.now.UTC()), append(c.expireAfter, after), append(c.expireOn, on)
	c.recordID, c.origin = append(c.recordID, pgUUID(h.RecordID)), append(c.origin, str(text(w.origin)))
}

// bulkStatements returns the multi-row statements of schema k.
func bulkStatements(k string) (insertRecords, insertHeads, updateHeads string) {
	insertRecords = `INSERT INTO ` + k + `.journal (id, topic, segment, seq_nr, partition, "offset", timestamp, origin, version, meta_record_id,
			tags, payload_type, payload_txt, payload_bin, metadata, headers)
		SELECT u.id, u.topic, u.segment, u.seq_nr, u.partition, u."offset", u.timestamp, u.origin, u.version, u.meta_record_id,
			coalesce(u.tags::text[], '{}'), u.payload_type, u.payload_txt, u.payload_bin, u.metadata, u.headers::jsonb
		FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::int[], $6::bigint[], $7::timestamptz[], $8::text[], $9::text[],
			$10::uuid[], $11::text[], $12::text[], $13::text[], $14::bytea[], $15::text[], $16::text[])
			AS u(id, topic, segment, seq_nr, partition, "offset", timestamp, origin, version, meta_record_id, tags, payload_type, payload_txt,
			payload_bin, metadata, headers)
		ON CONFLICT (id, topic, segment, seq_nr, timestamp) DO UPDATE SET partition = EXCLUDED.partition, "offset" = EXCLUDED."offset",
			origin = EXCLUDED.origin, version = EXCLUDED.version, meta_record_id = EXCLUDED.meta_record_id, tags = EXCLUDED.tags,
			payload_type = EXCLUDED.payload_type, payload_txt = EXCLUDED.payload_txt, payload_bin = EXCLUDED.payload_bin,
			metadata = EXCLUDED.metadata, headers = EXCLUDED.headers`
	insertHeads = `INSERT INTO ` + k + `.metajournal (topic, id, segment, partition, "offset", segment_size, seq_nr, delete_to, created,
			created_date, updated, expire_after, expire_on, record_id, origin)
		SELECT u.topic, u.id, u.segment, u.partition, u."offset", u.segment_size, u.seq_nr, u.delete_to, u.now, (u.now AT TIME ZONE 'UTC')::date,
			u.now, u.expire_after, u.expire_on, u.record_id, u.origin
		FROM unnest($1::text[], $2::text[], $3::bigint[], $4::int[], $5::bigint[], $6::int[], $7::bigint[], $8::bigint[], $9::timestamptz[],
			$10::interval[], $11::date[], $12::uuid[], $13::text[])
			AS u(topic, id, segment, partition, "offset", segment_size, seq_nr, delete_to, now, expire_after, expire_on, record_id, origin)
		ON CONFLICT (topic, id) DO UPDATE SET segment = EXCLUDED.segment, partition = EXCLUDED.partition, "offset" = EXCLUDED."offset",
			segment_size = EXCLUDED.segment_size, seq_nr = EXCLUDED.seq_nr, delete_to = EXCLUDED.delete_to, created = EXCLUDED.created,
			created_date = EXCLUDED.created_date, updated = EXCLUDED.updated, expire_after = EXCLUDED.expire_after,
			expire_on = EXCLUDED.expire_on, record_id = EXCLUDED.record_id, origin = EXCLUDED.origin`
	updateHeads = `UPDATE ` + k + `.metajournal m SET partition = u.partition, "offset" = u."offset", seq_nr = u.seq_nr,
			delete_to = u.delete_to, updated = u.now, expire_after = u.expire_after, expire_on = u.expire_on
		FROM unnest($1::text[], $2::text[], $3::int[], $4::bigint[], $5::bigint[], $6::bigint[], $7::timestamptz[], $8::interval[], $9::date[])
			AS u(topic, id, partition, "offset", seq_nr, delete_to, now, expire_after, expire_on)
		WHERE m.topic = u.topic AND m.id = u.id`
	return insertRecords, insertHeads, updateHeads
}

// headersJSON returns h as a JSON object, keys sorted (as encoding/json
// writes a map; jsonb keeps its own order anyway), invalid UTF-8 replaced
// by U+FFFD as encoding/json does.
func headersJSON(h map[string]string) string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b := make([]byte, 0, 64)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		b = append(b, ':')
		b = appendJSONString(b, h[k])
	}
	return string(append(b, '}'))
}

// appendJSONString appends s to b as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

// flat returns s as an array value pgx encodes without reflection.
func flat[T any](s []T) pgtype.FlatArray[T] { return pgtype.FlatArray[T](s) }

// arrayLiteral returns PostgreSQL's text form of a text[] holding ss.
func arrayLiteral(ss []string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, s := range ss {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for _, r := range s {
			if r == '"' || r == '\\' {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// lastValues keeps the last value of a few text columns that most rows
// share (origin, version, payload type), so that rows share one copy.
type lastValues [3]*string

// of returns v (nil or a string) as column i's value, the last row's
// when equal.
func (l *lastValues) of(i int, v any) *string {
	if p := l[i]; p != nil {
		if s, ok := v.(string); ok && s == *p {
			return p
		}
	}
	p := str(v)
	if p != nil {
		l[i] = p
	}
	return p
}

// str returns a nullable text column's value (nil or a string) as a
// pointer.
func str(v any) *string {
	s, ok := v.(string)
	if !ok {
		return nil
	}
	return &s
}

// bin returns a nullable bytea column's value (nil or bytes).
func bin(v any) []byte {
	b, _ := v.([]byte)
	return b
}

// pgUUID returns id as a uuid column's value, NULL for the zero id.
func pgUUID(id [16]byte) pgtype.UUID {
	return pgtype.UUID{Bytes: id, Valid: id != [16]byte{}}
}
