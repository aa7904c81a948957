// Package eventual is the contract of the Kafka journal's eventual store:
// the database its replicator copies the topic's actions into, and that
// reads consult before the topic's not yet replicated head.
//
// The model is the Scala Kafka Journal's (evolution-gaming/kafka-journal):
// a journal is a Key (an id on a topic); its Head (a metajournal row) holds
// the last sequence number, the number deleted to, the Kafka offset of the
// last action applied, the segment size and the expiry; its events are
// Records (journal rows) in segments of SegmentSize sequence numbers; a
// Pointer per (topic, partition) is the offset of the last record whose
// actions are all applied.
//
// What an action does to a journal is decided once, here ([Apply]), from
// the Scala replicator's rules; a database provides only its [Tables].
// [Batches] folds one key's actions of a poll into the fewest batches that
// leave the same result.
package eventual

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/annals-go/annals/store/kafka/wire"
)

// DefaultSegmentSize is the number of sequence numbers per journal
// segment for journals created by this replicator (the Scala default).
const DefaultSegmentSize = 10000

// MetaSegments is the number of metajournal segments new heads are placed
// in; OldMetaSegments the number older Scala versions used, which reads
// also consult.
const (
	MetaSegments    = 10000
	OldMetaSegments = 100
)

// Key names one journal: an id on a topic.
type Key struct {
	ID    string
	Topic string
}

// MetaSegment returns the metajournal segment of id among segments: the
// absolute value of the Java hash code of the lower-cased id, modulo
// segments, as the Scala library computes it.
func MetaSegment(id string, segments int) int64 {
	h := javaHash(strings.ToLower(id))
	s := int64(h) % int64(segments)
	if s < 0 {
		s = -s
	}
	return s
}

// javaHash is java.lang.String.hashCode: over UTF-16 code units.
func javaHash(s string) int32 {
	var h int32
	for _, r := range s {
		if r >= 0x10000 {
			r -= 0x10000
			h = 31*h + int32(0xD800+(r>>10))
			h = 31*h + int32(0xDC00+(r&0x3FF))
			continue
		}
		h = 31*h + int32(r)
	}
	return h
}

// JournalSegment returns the journal segment of seqNr for a segment size:
// (seqNr - 1) / size.
func JournalSegment(seqNr int64, size int) int64 {
	return (seqNr - 1) / int64(size)
}

// Expiry is when a journal may be purged: ExpireAfter from its last
// append, on the date ExpireOn (UTC).
type Expiry struct {
	After time.Duration
	On    time.Time
}

// Head is what the eventual store holds about one journal (its metajournal
// row).
type Head struct {
	// Partition and Offset locate the last action applied to the journal.
	Partition int32
	Offset    int64
	// SegmentSize is the number of sequence numbers per journal segment.
	SegmentSize int
	// SeqNr is the journal's last sequence number.
	SeqNr int64
	// DeleteTo is the number events are deleted to, 0 when none.
	DeleteTo int64
	// Expiry is nil when the journal does not expire.
	Expiry *Expiry
	// RecordID identifies this incarnation of the journal (a random UUID
	// given by its first append; zero for a journal a delete created).
	RecordID [16]byte
	// MetaSegment is the metajournal segment the head is kept in: where
	// Tables.Head found it, MetaSegment(id, MetaSegments) for a new one.
	MetaSegment int64
}

// Record is one replicated event (a journal row).
type Record struct {
	Event wire.Event
	// Timestamp is the Kafka record's timestamp.
	Timestamp time.Time
	Origin    string
	Version   string
	Partition int32
	Offset    int64
	// HeaderMetadata is the Append header's metadata data (nil when none);
	// PayloadMetadata the Append value's metadata.
	HeaderMetadata  json.RawMessage
	PayloadMetadata wire.Metadata
	// Headers are the Kafka record's headers other than the action.
	Headers map[string]string
	// RawMetadata, when not empty, is the metadata column as a store read
	// it, parsed only on demand (ParseMetadataJSON); HeaderMetadata and
	// PayloadMetadata are then empty.
	RawMetadata string
}

// MetadataJSON returns the record's metadata column as the Scala library
// writes it: {"header":{...},"payload":{...}} (RawMetadata when set).
func (r Record) MetadataJSON() (string, error) {
	if r.RawMetadata != "" {
		return r.RawMetadata, nil
	}
	type header struct {
		Data json.RawMessage `json:"data,omitempty"`
	}
	b, err := json.Marshal(struct {
		Header  header        `json:"header"`
		Payload wire.Metadata `json:"payload"`
	}{header{r.HeaderMetadata}, r.PayloadMetadata})
	return string(b), err
}

// ParseMetadataJSON reads a metadata column written by MetadataJSON (or
// by the Scala library); "" reads as no metadata.
func ParseMetadataJSON(s string) (header json.RawMessage, payload wire.Metadata, err error) {
	if s == "" {
		return nil, wire.Metadata{}, nil
	}
	var m struct {
		Header struct {
			Data json.RawMessage `json:"data"`
		} `json:"header"`
		Payload wire.Metadata `json:"payload"`
	}
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, wire.Metadata{}, fmt.Errorf("%w: record metadata: %w", wire.ErrMalformed, err)
	}
	return m.Header.Data, m.Payload, nil
}

// ActionRecord is a decoded Kafka record with where and when it was
// written.
type ActionRecord struct {
	Action    wire.Action
	Partition int32
	Offset    int64
	Timestamp time.Time
	// Headers are the record's headers other than the action.
	Headers map[string]string
}

// Tables is what a database provides for one eventual store. Apply calls
// them in an order that is safe to repeat after a crash at any point:
// events before their head, the head before the pointer.
type Tables interface {
	// Head reads key's head; ok is false when there is none.
	Head(ctx context.Context, key Key) (h Head, ok bool, err error)
	// InsertHead creates key's head, created and updated at now.
	InsertHead(ctx context.Context, key Key, h Head, now time.Time, origin string) error
	// UpdateHead stores h (partition, offset, sequence number, deleted-to
	// mark and expiry) as key's head, updated at now.
	UpdateHead(ctx context.Context, key Key, h Head, now time.Time) error
	// DeleteHead removes key's head.
	DeleteHead(ctx context.Context, key Key) error
	// InsertRecords stores records, all in one journal segment, as rows
	// of the journal incarnation recordID.
	InsertRecords(ctx context.Context, key Key, segment int64, recordID [16]byte, records []Record) error
	// DeleteRecords removes the rows of a journal segment with sequence
	// numbers up to to; to < 0 removes the whole segment.
	DeleteRecords(ctx context.Context, key Key, segment int64, to int64) error
	// Records yields key's rows in segment with from ≤ seqNr ≤ to,
	// ascending.
	Records(ctx context.Context, key Key, segment int64, from, to int64) iter.Seq2[Record, error]
	// Pointer reads the offset of the last record replicated in a topic's
	// partition; ok is false when none was.
	Pointer(ctx context.Context, topic string, partition int32) (offset int64, ok bool, err error)
	// SavePointer stores it, created at now the first time.
	SavePointer(ctx context.Context, topic string, partition int32, offset int64, now time.Time) error
	// IDs yields the ids that have a head on topic (every topic when
	// topic is ""), each once, in no particular order.
	IDs(ctx context.Context, topic string) iter.Seq2[string, error]
	// Expired yields the keys whose head expires on or before the date of
	// on (UTC), in no particular order.
	Expired(ctx context.Context, on time.Time) iter.Seq2[Key, error]
}

// TxTables is a Tables that can run a poll's work in transactions:
// Replicate then applies the poll's keys one after another inside one,
// and moves the pointer in the same transaction; or, for a large poll,
// splits its keys among TxShards transactions run at once (InTx is called
// concurrently) and moves the pointer after they all commit.
type TxTables interface {
	Tables
	// InTx calls f with Tables whose reads and writes belong to one
	// transaction, committed when f returns nil and rolled back otherwise.
	// keys are the keys f will apply: the store may read their heads
	// ahead. Within f, each key's head is read once, before its writes,
	// and writes may be sent only when f returns.
	InTx(ctx context.Context, keys []Key, f func(Tables) error) error
}

// ErrExpireAfter reports an expire-after the library cannot read.
var ErrExpireAfter = errors.New("kafka journal: expire-after not understood")

// ParseExpireAfter reads a Scala FiniteDuration as the library prints it
// ("1 day", "30 minutes", "500 milliseconds").
func ParseExpireAfter(s string) (time.Duration, error) {
	n, unit, ok := strings.Cut(strings.TrimSpace(s), " ")
	v, err := strconv.ParseInt(n, 10, 64)
	if !ok || err != nil || v < 0 {
		return 0, fmt.Errorf("%w: %q", ErrExpireAfter, s)
	}
	unit = strings.TrimSuffix(unit, "s")
	per := map[string]time.Duration{
		"nanosecond": time.Nanosecond, "microsecond": time.Microsecond, "millisecond": time.Millisecond,
		"second": time.Second, "minute": time.Minute, "hour": time.Hour, "day": 24 * time.Hour,
	}[unit]
	if per == 0 {
		return 0, fmt.Errorf("%w: %q", ErrExpireAfter, s)
	}
	return time.Duration(v) * per, nil
}

// FormatExpireAfter prints d as Scala's FiniteDuration does, in the
// largest unit that divides it.
func FormatExpireAfter(d time.Duration) string {
	units := []struct {
		name string
		per  time.Duration
	}{{"day", 24 * time.Hour}, {"hour", time.Hour}, {"minute", time.Minute}, {"second", time.Second},
		{"millisecond", time.Millisecond}, {"microsecond", time.Microsecond}, {"nanosecond", time.Nanosecond}}
	for _, u := range units {
		if d%u.per == 0 {
			n := int64(d / u.per)
			if n == 1 {
				return "1 " + u.name
			}
			return strconv.FormatInt(n, 10) + " " + u.name + "s"
		}
	}
	return strconv.FormatInt(int64(d), 10) + " nanoseconds"
}

// expireOn is the date (UTC) after which a journal last appended at now
// may be purged.
func expireOn(after time.Duration, now time.Time) time.Time {
	t := now.Add(after).UTC()
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
}

// NewRecordID returns a random (version 4) UUID.
func NewRecordID() ([16]byte, error) {
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return id, err
	}
	id[6] = id[6]&0x0f | 0x40
	id[8] = id[8]&0x3f | 0x80
	return id, nil
}

// IDSummary is what an eventual store holds for one journal: its head's
// sequence number, and the count, payload bytes and time range of its
// stored events.
type IDSummary struct {
	Key            Key
	SeqNr          int64
	Events         int64
	PayloadBytes   int64
	Oldest, Newest time.Time
}

// Summarizer is an eventual store that can summarize every journal it
// holds (for statistics). It reads everything: its cost grows with the
// store.
type Summarizer interface {
	Summaries(ctx context.Context) iter.Seq2[IDSummary, error]
}
