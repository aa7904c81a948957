package query

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	"github.com/google/uuid"
)

// OffsetKind tells which kind of position an Offset holds.
type OffsetKind uint8

const (
	// KindNone is the start: a query from it returns every event.
	KindNone OffsetKind = iota
	// KindSequence is a store's global ordering, for stores that commit in
	// that order (SQLite, memory).
	KindSequence
	// KindTimestamp is a database timestamp with the (persistence id →
	// sequence number) pairs already seen at exactly that timestamp, for
	// stores whose commit order differs from their timestamps (PostgreSQL).
	KindTimestamp
	// KindTimeUUID is a version-1 time-based UUID, the offset of events by
	// tag on Cassandra (Akka's TimeBasedUUID): the position after the event
	// written with that UUID.
	KindTimeUUID
	// KindPartitions is a position in each partition of a log (the Kafka
	// journal's topic): the next record offset of each partition, with the
	// (persistence id → sequence number) pairs already seen of a record
	// read in part (one record holds an atomic write's events).
	KindPartitions
)

// Offset is a resumable, exclusive position in a query's results. The zero
// Offset is NoOffset(). Offsets encode to JSON for storage.
type Offset struct {
	Kind      OffsetKind
	Sequence  int64
	Timestamp time.Time
	Seen      map[string]int64
	// TimeUUID is the UUID of a KindTimeUUID offset, in its 16 bytes.
	TimeUUID [16]byte
	// Partitions maps each partition of a KindPartitions offset to the
	// offset of the next record to read in it.
	Partitions map[int32]int64
}

// NoOffset is the start of the results.
func NoOffset() Offset { return Offset{} }

// SequenceOffset is the position after the event with global ordering n.
func SequenceOffset(n int64) Offset { return Offset{Kind: KindSequence, Sequence: n} }

// TimestampOffset is the position after the events at or before t, except
// that events at exactly t are after it unless seen lists their persistence
// id with a sequence number at least theirs. seen is copied.
func TimestampOffset(t time.Time, seen map[string]int64) Offset {
	return Offset{Kind: KindTimestamp, Timestamp: t.UTC(), Seen: maps.Clone(seen)}
}

// TimeUUIDOffset is the position after the event written with the
// version-1 time-based UUID u.
func TimeUUIDOffset(u [16]byte) Offset { return Offset{Kind: KindTimeUUID, TimeUUID: u} }

// PartitionsOffset is the position before the record at partitions[p] in
// each partition p (partitions missing: from their start), except that
// the events seen lists (by persistence id, up to a sequence number) of
// that record are behind it. partitions and seen are copied.
func PartitionsOffset(partitions map[int32]int64, seen map[string]int64) Offset {
	p := maps.Clone(partitions)
	if p == nil {
		p = map[int32]int64{}
	}
	return Offset{Kind: KindPartitions, Partitions: p, Seen: maps.Clone(seen)}
}

// AfterSequence reports whether an event with the given global ordering
// lies after the offset (any event lies after NoOffset).
func (o Offset) AfterSequence(ordering int64) bool {
	return o.Kind == KindNone || ordering > o.Sequence
}

// String is a short human form: "none", "seq:42", "ts:2026-…(3 seen)".
func (o Offset) String() string {
	switch o.Kind {
	case KindSequence:
		return fmt.Sprintf("seq:%d", o.Sequence)
	case KindTimestamp:
		return fmt.Sprintf("ts:%s(%d seen)", o.Timestamp.Format(time.RFC3339Nano), len(o.Seen))
	case KindTimeUUID:
		return "uuid:" + formatUUID(o.TimeUUID)
	case KindPartitions:
		return fmt.Sprintf("partitions:%v(%d seen)", o.Partitions, len(o.Seen))
	}
	return "none"
}

type offsetJSON struct {
	Seq  *int64           `json:"seq,omitempty"`
	TS   *time.Time       `json:"ts,omitempty"`
	Seen map[string]int64 `json:"seen,omitempty"`
	UUID *string          `json:"uuid,omitempty"`
	Part map[int32]int64  `json:"partitions,omitempty"`
}

// MarshalJSON encodes the offset: {} for none, {"seq":n},
// {"ts":"…","seen":{…}}, {"uuid":"xxxxxxxx-xxxx-1xxx-xxxx-xxxxxxxxxxxx"},
// or {"partitions":{"0":n,…},"seen":{…}}.
func (o Offset) MarshalJSON() ([]byte, error) {
	var j offsetJSON
	switch o.Kind {
	case KindSequence:
		j.Seq = &o.Sequence
	case KindTimestamp:
		ts := o.Timestamp.UTC()
		j.TS, j.Seen = &ts, o.Seen
	case KindTimeUUID:
		u := formatUUID(o.TimeUUID)
		j.UUID = &u
	case KindPartitions:
		j.Part, j.Seen = o.Partitions, o.Seen
		if j.Part == nil {
			j.Part = map[int32]int64{}
		}
	}
	return json.Marshal(j)
}

// UnmarshalJSON decodes what MarshalJSON encodes; anything else (unknown
// fields, null, a sequence with seen ids, both kinds) is an error, so that a
// corrupt stored offset never reads as "from the start".
func (o *Offset) UnmarshalJSON(b []byte) error {
	var j offsetJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		return fmt.Errorf("query: decode offset: null")
	}
	if err := dec.Decode(&j); err != nil {
		return fmt.Errorf("query: decode offset %s: %w", b, err)
	}
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(b, &fields)
	for k, v := range fields {
		if bytes.Equal(v, []byte("null")) {
			return fmt.Errorf("query: decode offset %s: %s is null", b, k)
		}
	}
	switch {
	case j.Part != nil && (j.UUID != nil || j.Seq != nil || j.TS != nil):
		return fmt.Errorf("query: decode offset %s: a partitions offset with other fields", b)
	case j.Part != nil:
		*o = PartitionsOffset(j.Part, j.Seen)
	case j.UUID != nil && (j.Seq != nil || j.TS != nil || j.Seen != nil):
		return fmt.Errorf("query: decode offset %s: a UUID offset with other fields", b)
	case j.UUID != nil:
		u, err := parseTimeUUID(*j.UUID)
		if err != nil {
			return fmt.Errorf("query: decode offset %s: %w", b, err)
		}
		*o = TimeUUIDOffset(u)
	case j.Seq != nil && (j.TS != nil || j.Seen != nil):
		return fmt.Errorf("query: decode offset %s: a sequence offset with timestamp fields", b)
	case j.TS == nil && j.Seen != nil:
		return fmt.Errorf("query: decode offset %s: seen ids without a timestamp", b)
	case j.Seq != nil:
		*o = SequenceOffset(*j.Seq)
	case j.TS != nil:
		*o = TimestampOffset(*j.TS, j.Seen)
	default:
		*o = NoOffset()
	}
	return nil
}

// formatUUID writes u in the canonical 8-4-4-4-12 hexadecimal form.
func formatUUID(u [16]byte) string { return uuid.UUID(u).String() }

// parseTimeUUID reads the canonical form of a version-1 UUID.
func parseTimeUUID(s string) ([16]byte, error) {
	if len(s) != 36 {
		return [16]byte{}, fmt.Errorf("UUID %q is not in the form xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", s)
	}
	u, err := uuid.Parse(s)
	if err != nil {
		return u, fmt.Errorf("UUID %q: %w", s, err)
	}
	if u[6]>>4 != 1 {
		return u, fmt.Errorf("UUID %q is version %d, not a time-based (version 1) UUID", s, u[6]>>4)
	}
	return u, nil
}
