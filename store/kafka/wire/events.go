package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// Event is one event of an Append. Payload is nil for an event without
// one.
type Event struct {
	SeqNr   int64
	Tags    []string // in the order written (the Scala library's set order)
	Payload *Payload
}

// Payload is an event's payload: for Binary, the bytes; for Text, the
// UTF-8 text; for JSON, the JSON value's bytes.
type Payload struct {
	Type PayloadType
	Data []byte
}

// Metadata is an Append's payload metadata. ExpireAfter is a Scala
// FiniteDuration as the library prints it ("1 day"), "" when absent; Data
// is a JSON value, nil when absent.
type Metadata struct {
	ExpireAfter string          `json:"expireAfter,omitempty"`
	Data        json.RawMessage `json:"data,omitempty"`
}

// Events is the value of an Append record.
type Events struct {
	Events   []Event
	Metadata Metadata
}

// The binary form: a version byte (1; 0 is the older form without
// metadata), the number of events, each event as its length and bytes,
// then (version 1) the metadata as compact JSON to the end.
const binaryVersion = 1

// payload type bytes of the binary form.
var typeByte = map[PayloadType]byte{Binary: 1, JSON: 2, Text: 3}

// EncodeBinary returns the binary form of es.
func EncodeBinary(es Events) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte(binaryVersion)
	buf.Write(binary.BigEndian.AppendUint32(nil, uint32(len(es.Events))))
	for _, e := range es.Events {
		var ev bytes.Buffer
		ev.Write(binary.BigEndian.AppendUint64(nil, uint64(e.SeqNr)))
		var tags bytes.Buffer
		for _, t := range e.Tags {
			tags.Write(binary.BigEndian.AppendUint32(nil, uint32(len(t))))
			tags.WriteString(t)
		}
		ev.Write(binary.BigEndian.AppendUint32(nil, uint32(tags.Len())))
		ev.Write(tags.Bytes())
		if e.Payload == nil {
			ev.Write([]byte{0, 0, 0, 0, 0})
		} else {
			tb, ok := typeByte[e.Payload.Type]
			if !ok {
				return nil, fmt.Errorf("%w: event %d has payload type %q", ErrMalformed, e.SeqNr, e.Payload.Type)
			}
			ev.WriteByte(tb)
			ev.Write(binary.BigEndian.AppendUint32(nil, uint32(len(e.Payload.Data))))
			ev.Write(e.Payload.Data)
		}
		buf.Write(binary.BigEndian.AppendUint32(nil, uint32(ev.Len())))
		buf.Write(ev.Bytes())
	}
	meta, err := marshal(es.Metadata)
	if err != nil {
		return nil, err
	}
	buf.Write(meta)
	return buf.Bytes(), nil
}

// reader reads the binary form, remembering the first error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.err = fmt.Errorf("%w: %s needs %d bytes, %d left", ErrMalformed, what, n, len(r.b))
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) u32(what string) int {
	b := r.take(4, what)
	if b == nil {
		return 0
	}
	return int(binary.BigEndian.Uint32(b))
}

// DecodeBinary reads the binary form (version 1, or the older version 0).
func DecodeBinary(b []byte) (Events, error) {
	r := &reader{b: b}
	version := r.take(1, "version")
	if r.err != nil {
		return Events{}, r.err
	}
	if version[0] > binaryVersion {
		return Events{}, fmt.Errorf("%w: binary events version %d (this build reads 0 and 1)", ErrMalformed, version[0])
	}
	n := r.u32("event count")
	var es Events
	for i := 0; i < n && r.err == nil; i++ {
		ev := &reader{b: r.take(r.u32("event length"), "event")}
		if r.err != nil {
			break
		}
		e := Event{SeqNr: int64(binary.BigEndian.Uint64(ev.take(8, "sequence number")))}
		tags := &reader{b: ev.take(ev.u32("tags length"), "tags")}
		for ev.err == nil && len(tags.b) > 0 {
			t := tags.take(tags.u32("tag length"), "tag")
			if tags.err != nil {
				ev.err = tags.err
				break
			}
			if !utf8.Valid(t) {
				ev.err = fmt.Errorf("%w: event %d has a tag that is not UTF-8", ErrMalformed, e.SeqNr)
				break
			}
			e.Tags = append(e.Tags, string(t))
		}
		tb := ev.take(1, "payload type")
		data := ev.take(ev.u32("payload length"), "payload")
		if ev.err == nil && len(ev.b) > 0 {
			ev.err = fmt.Errorf("%w: event %d has %d bytes after its payload", ErrMalformed, e.SeqNr, len(ev.b))
		}
		if ev.err != nil {
			return Events{}, fmt.Errorf("event %d of %d: %w", i+1, n, ev.err)
		}
		switch tb[0] {
		case 0:
		case 1, 2, 3:
			typ := map[byte]PayloadType{1: Binary, 2: JSON, 3: Text}[tb[0]]
			e.Payload = &Payload{Type: typ, Data: bytes.Clone(data)}
		default:
			return Events{}, fmt.Errorf("%w: event %d has payload type byte %d", ErrMalformed, e.SeqNr, tb[0])
		}
		es.Events = append(es.Events, e)
	}
	if r.err != nil {
		return Events{}, r.err
	}
	if version[0] == 1 && len(r.b) > 0 {
		if err := json.Unmarshal(r.b, &es.Metadata); err != nil {
			return Events{}, fmt.Errorf("%w: metadata: %w", ErrMalformed, err)
		}
	} else if len(r.b) > 0 {
		return Events{}, fmt.Errorf("%w: %d bytes after the version-0 events", ErrMalformed, len(r.b))
	}
	return es, nil
}

type eventJSON struct {
	SeqNr       int64           `json:"seqNr"`
	Tags        []string        `json:"tags"`
	PayloadType PayloadType     `json:"payloadType,omitempty"`
	Payload     json.RawMessage `json:"payload,omitempty"`
}

type eventsJSON struct {
	Events   []eventJSON `json:"events"`
	Metadata *Metadata   `json:"metadata,omitempty"`
}

// EncodeJSON returns the JSON form of es (events with no payload, or text
// or JSON payloads only; binary payloads need the binary form).
func EncodeJSON(es Events) ([]byte, error) {
	out := eventsJSON{Events: make([]eventJSON, len(es.Events)), Metadata: &es.Metadata}
	for i, e := range es.Events {
		j := eventJSON{SeqNr: e.SeqNr, Tags: e.Tags}
		if j.Tags == nil {
			j.Tags = []string{}
		}
		if p := e.Payload; p != nil {
			j.PayloadType = p.Type
			switch p.Type {
			case JSON:
				if !json.Valid(p.Data) {
					return nil, fmt.Errorf("%w: event %d's JSON payload is not JSON", ErrMalformed, e.SeqNr)
				}
				j.Payload = p.Data
			case Text:
				s, err := marshal(string(p.Data))
				if err != nil {
					return nil, err
				}
				j.Payload = s
			default:
				return nil, fmt.Errorf("%w: event %d has a %s payload, which the JSON form cannot hold", ErrMalformed, e.SeqNr, p.Type)
			}
		}
		out.Events[i] = j
	}
	return marshal(out)
}

// DecodeJSON reads the JSON form (with or without metadata).
func DecodeJSON(b []byte) (Events, error) {
	var in eventsJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return Events{}, fmt.Errorf("%w: JSON events: %w", ErrMalformed, err)
	}
	var es Events
	if in.Metadata != nil {
		es.Metadata = Metadata{ExpireAfter: in.Metadata.ExpireAfter, Data: compact(in.Metadata.Data)}
	}
	for _, j := range in.Events {
		e := Event{SeqNr: j.SeqNr, Tags: j.Tags}
		switch j.PayloadType {
		case "":
			if len(j.Payload) > 0 {
				return Events{}, fmt.Errorf("%w: event %d has a payload without a payload type", ErrMalformed, j.SeqNr)
			}
		case JSON:
			e.Payload = &Payload{Type: JSON, Data: compact(j.Payload)}
		case Text:
			var s string
			if err := json.Unmarshal(j.Payload, &s); err != nil {
				return Events{}, fmt.Errorf("%w: event %d's text payload: %w", ErrMalformed, j.SeqNr, err)
			}
			e.Payload = &Payload{Type: Text, Data: []byte(s)}
		default:
			return Events{}, fmt.Errorf("%w: event %d has payload type %q in the JSON form", ErrMalformed, j.SeqNr, j.PayloadType)
		}
		es.Events = append(es.Events, e)
	}
	return es, nil
}
