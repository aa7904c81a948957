// Package wire reads and writes the records of the Scala Kafka Journal
// (evolution-gaming/kafka-journal), so that a Go service and a Scala one
// can share a topic: the `journal.action` record header (JSON) that says
// what a record is (Append, Delete, Purge, Mark), and the value of an
// Append, a list of events with payload metadata, in its binary form and
// its JSON form.
//
// Encoding reproduces the Scala library's bytes: the header and the JSON
// form as compact JSON with its fields in its order and absent options
// omitted, as it writes them to Kafka (Indent gives the two-space form of
// its test resources), the binary form as its scodec codecs (version
// byte, counts and lengths as big-endian 32-bit integers).
// Decoding also accepts the older forms the library still reads: an Append
// header without metadata, the version-0 binary events without metadata,
// JSON events without metadata. A header with an unknown action decodes to
// no action (ok false), so that newer writers do not stop older readers.
package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	jsonv2 "github.com/go-json-experiment/json"
	jsonv1 "github.com/go-json-experiment/json/v1"
)

// ErrMalformed reports bytes that are not a record of the Scala Kafka
// Journal; the error says what is wrong.
var ErrMalformed = errors.New("kafka journal record malformed")

// HeaderKey is the name of the record header that holds the action.
const HeaderKey = "journal.action"

// Kind is the kind of an action.
type Kind int

// The kinds of actions.
const (
	Append Kind = iota + 1
	Delete
	Purge
	Mark
)

func (k Kind) String() string {
	switch k {
	case Append:
		return "append"
	case Delete:
		return "delete"
	case Purge:
		return "purge"
	case Mark:
		return "mark"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// PayloadType is how an Append record's value, or one event's payload, is
// encoded.
type PayloadType string

// Payload types.
const (
	Binary PayloadType = "binary"
	JSON   PayloadType = "json"
	Text   PayloadType = "text"
)

// Header is a decoded `journal.action` header. Which fields are set
// depends on Kind:
//   - Append: From and To (the sequence numbers of its events),
//     PayloadType (of the record's value), Metadata (the header
//     metadata's data, a JSON object, or nil).
//   - Delete: To (the sequence number deleted to).
//   - Mark: ID.
//
// Origin and Version are optional for every kind ("" when absent).
type Header struct {
	Kind        Kind
	From, To    int64
	PayloadType PayloadType
	Metadata    json.RawMessage
	ID          string
	Origin      string
	Version     string
}

type rangeJSON struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
}

type metadataJSON struct {
	Data json.RawMessage `json:"data,omitempty"`
}

type appendJSON struct {
	Range       rangeJSON     `json:"range"`
	Origin      string        `json:"origin,omitempty"`
	Version     string        `json:"version,omitempty"`
	PayloadType PayloadType   `json:"payloadType"`
	Metadata    *metadataJSON `json:"metadata,omitempty"`
}

type deleteJSON struct {
	To      int64  `json:"to"`
	Origin  string `json:"origin,omitempty"`
	Version string `json:"version,omitempty"`
}

type purgeJSON struct {
	Origin  string `json:"origin,omitempty"`
	Version string `json:"version,omitempty"`
}

type markJSON struct {
	ID      string `json:"id"`
	Origin  string `json:"origin,omitempty"`
	Version string `json:"version,omitempty"`
}

// EncodeHeader returns the header's bytes as the Scala library writes
// them. An Append always carries its metadata object ({} when Metadata is
// nil).
func EncodeHeader(h Header) ([]byte, error) {
	var v any
	switch h.Kind {
	case Append:
		if h.PayloadType != Binary && h.PayloadType != JSON {
			return nil, fmt.Errorf("%w: append with payload type %q (want binary or json)", ErrMalformed, h.PayloadType)
		}
		v = map[string]appendJSON{"append": {Range: rangeJSON{h.From, h.To}, Origin: h.Origin, Version: h.Version,
			PayloadType: h.PayloadType, Metadata: &metadataJSON{Data: h.Metadata}}}
	case Delete:
		v = map[string]deleteJSON{"delete": {To: h.To, Origin: h.Origin, Version: h.Version}}
	case Purge:
		v = map[string]purgeJSON{"purge": {Origin: h.Origin, Version: h.Version}}
	case Mark:
		v = map[string]markJSON{"mark": {ID: h.ID, Origin: h.Origin, Version: h.Version}}
	default:
		return nil, fmt.Errorf("%w: header of %v", ErrMalformed, h.Kind)
	}
	return marshal(v)
}

// marshal writes v as compact JSON without HTML escaping (play-json
// escapes only what JSON requires).
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Indent returns compact JSON from EncodeHeader or EncodeJSON in the
// two-space form of play-json's prettyPrint (the Scala library's test
// resources).
func Indent(compact []byte) ([]byte, error) {
	var buf bytes.Buffer
	if err := json.Indent(&buf, compact, "", "  "); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return buf.Bytes(), nil
}

// DecodeHeader reads a `journal.action` header. ok is false for an object
// whose single key is not a known action (the record is then ignored).
//
// A header as the Scala library and Annals write it (one known action,
// known fields, names in their case) is decoded in one pass; anything else
// goes through encoding/json's rules (decodeHeader), which decide what is
// malformed.
func DecodeHeader(b []byte) (h Header, ok bool, err error) {
	var one struct {
		Append *appendJSON `json:"append"`
		Delete *deleteJSON `json:"delete"`
		Purge  *purgeJSON  `json:"purge"`
		Mark   *markJSON   `json:"mark"`
	}
	if jsonv2.Unmarshal(b, &one, jsonv2.RejectUnknownMembers(true)) == nil {
		n := 0
		for _, set := range []bool{one.Append != nil, one.Delete != nil, one.Purge != nil, one.Mark != nil} {
			if set {
				n++
			}
		}
		if n == 1 {
			switch {
			case one.Append != nil:
				h, err = appendHeader(*one.Append)
			case one.Delete != nil:
				d := one.Delete
				h = Header{Kind: Delete, To: d.To, Origin: d.Origin, Version: d.Version}
			case one.Purge != nil:
				h = Header{Kind: Purge, Origin: one.Purge.Origin, Version: one.Purge.Version}
			default:
				m := one.Mark
				h = Header{Kind: Mark, ID: m.ID, Origin: m.Origin, Version: m.Version}
			}
			return h, err == nil, err
		}
	}
	return decodeHeader(b)
}

// appendHeader checks an append's header.
func appendHeader(a appendJSON) (Header, error) {
	if a.PayloadType != Binary && a.PayloadType != JSON {
		return Header{}, fmt.Errorf("%w: append header with payload type %q", ErrMalformed, a.PayloadType)
	}
	if a.Range.From < 1 || a.Range.To < a.Range.From {
		return Header{}, fmt.Errorf("%w: append header with range %d..%d", ErrMalformed, a.Range.From, a.Range.To)
	}
	h := Header{Kind: Append, From: a.Range.From, To: a.Range.To, PayloadType: a.PayloadType, Origin: a.Origin, Version: a.Version}
	if a.Metadata != nil && len(a.Metadata.Data) > 0 && !bytes.Equal(a.Metadata.Data, []byte("null")) {
		h.Metadata = compact(a.Metadata.Data)
	}
	return h, nil
}

// decodeHeader is DecodeHeader by encoding/json's rules (names matched
// in any case, the last of a name given twice, unknown fields ignored).
func decodeHeader(b []byte) (h Header, ok bool, err error) {
	var top map[string]json.RawMessage
	if err := jsonv1.Unmarshal(b, &top); err != nil {
		return Header{}, false, fmt.Errorf("%w: header: %w", ErrMalformed, err)
	}
	if len(top) != 1 {
		return Header{}, false, fmt.Errorf("%w: header has %d keys, want one action", ErrMalformed, len(top))
	}
	for key, raw := range top {
		strict := func(v any) error {
			if err := jsonv1.Unmarshal(raw, v); err != nil {
				return fmt.Errorf("%w: %s header: %w", ErrMalformed, key, err)
			}
			return nil
		}
		switch key {
		case "append":
			var a appendJSON
			if err := strict(&a); err != nil {
				return Header{}, false, err
			}
			if h, err = appendHeader(a); err != nil {
				return Header{}, false, err
			}
		case "delete":
			var d deleteJSON
			if err := strict(&d); err != nil {
				return Header{}, false, err
			}
			h = Header{Kind: Delete, To: d.To, Origin: d.Origin, Version: d.Version}
		case "purge":
			var p purgeJSON
			if err := strict(&p); err != nil {
				return Header{}, false, err
			}
			h = Header{Kind: Purge, Origin: p.Origin, Version: p.Version}
		case "mark":
			var m markJSON
			if err := strict(&m); err != nil {
				return Header{}, false, err
			}
			h = Header{Kind: Mark, ID: m.ID, Origin: m.Origin, Version: m.Version}
		default:
			return Header{}, false, nil
		}
	}
	return h, true, nil
}

// compact returns a JSON value without insignificant space (values are
// kept compact, and written indented or not as the form requires).
func compact(v json.RawMessage) json.RawMessage {
	if len(v) == 0 {
		return nil
	}
	var b bytes.Buffer
	if json.Compact(&b, v) != nil {
		return bytes.Clone(v)
	}
	return b.Bytes()
}
