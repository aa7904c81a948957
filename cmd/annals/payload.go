package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/serialization"
)

// Payloads are shown decoded where that needs no user types: a payload of
// the JSON serializer that is valid JSON is shown as that JSON; any other
// payload is shown raw (base64 in JSON output; quoted text or hex in
// tables).

// eventJSON is the JSON shape of one event, for events and tail (one
// object per line).
type eventJSON struct {
	PersistenceID string `json:"persistence_id"`
	SequenceNr    int64  `json:"sequence_nr"`
	// Offset is where a query resumes after this event (tail
	// --from-offset), when the store has one.
	Offset        *query.Offset `json:"offset,omitempty"`
	Timestamp     time.Time     `json:"timestamp"`
	EntityType    string        `json:"entity_type"`
	Slice         int           `json:"slice"`
	SerializerID  int32         `json:"serializer_id"`
	Manifest      string        `json:"manifest"`
	WriterID      string        `json:"writer_id"`
	Tags          []string      `json:"tags"`
	PayloadSize   int           `json:"payload_size"`
	Payload       any           `json:"payload,omitempty"`        // the payload as JSON, when it is JSON
	PayloadBase64 []byte        `json:"payload_base64,omitempty"` // otherwise the bytes
	Metadata      []byte        `json:"metadata_base64,omitempty"`
}

func toEventJSON(env query.Envelope, withOffset bool) eventJSON {
	j := eventJSON{
		PersistenceID: env.PersistenceID, SequenceNr: env.SequenceNr, Timestamp: env.Timestamp.UTC(),
		EntityType: env.EntityType, Slice: env.Slice, SerializerID: env.SerializerID, Manifest: env.Manifest,
		WriterID: env.WriterID, Tags: env.Tags, PayloadSize: len(env.Payload), Metadata: env.Metadata,
	}
	if j.Tags == nil {
		j.Tags = []string{}
	}
	if withOffset {
		o := env.Offset
		j.Offset = &o
	}
	j.Payload, j.PayloadBase64 = payloadJSON(env.SerializerID, env.Payload)
	return j
}

// isJSON reports whether the JSON serializer writes (or, in earlier
// versions, wrote) payloads with the id.
func isJSON(id int32) bool { return id == serialization.JSONID || id == serialization.LegacyJSONID }

// jsonText returns the JSON text of a payload the JSON serializer wrote:
// the bytes, or what a gzipped payload (Pekko's jackson-json over 32 KiB)
// holds; ok is false when it is not valid JSON.
func jsonText(serializerID int32, p []byte) (text []byte, ok bool) {
	if !isJSON(serializerID) {
		return nil, false
	}
	if serialization.IsGzip(p) {
		plain, err := serialization.Gunzip(p)
		if err != nil {
			return nil, false
		}
		p = plain
	}
	return p, json.Valid(p)
}

// payloadJSON returns the payload as JSON when the JSON serializer wrote
// it and it is valid JSON (gzipped or not), else its bytes (for base64).
func payloadJSON(serializerID int32, p []byte) (any, []byte) {
	if text, ok := jsonText(serializerID, p); ok {
		return json.RawMessage(text), nil
	}
	return nil, p
}

// maxPayloadText is how many characters of a payload a table shows,
// unless --full.
const maxPayloadText = 72

// payloadText is the payload as a table shows it: compact JSON, quoted
// text, or hex; truncated unless full.
func payloadText(serializerID int32, p []byte, full bool) string {
	var s string
	text, isText := jsonText(serializerID, p)
	switch {
	case len(p) == 0:
		return "-"
	case isText:
		var b bytes.Buffer
		_ = json.Compact(&b, text)
		s = b.String()
	case printable(p):
		s = strconv.Quote(string(p))
	default:
		s = "0x" + hex.EncodeToString(p)
	}
	if !full && utf8.RuneCountInString(s) > maxPayloadText {
		r := []rune(s)
		s = string(r[:maxPayloadText-1]) + "…"
	}
	return s
}

func printable(p []byte) bool {
	if !utf8.Valid(p) {
		return false
	}
	for _, r := range string(p) {
		if !unicode.IsPrint(r) && !unicode.IsSpace(r) {
			return false
		}
	}
	return true
}

// serializerText names the built-in serializers.
func serializerText(id int32) string {
	switch id {
	case serialization.JSONID, serialization.LegacyJSONID:
		return "json"
	case serialization.BytesID:
		return "bytes"
	case serialization.ProtobufID:
		return "protobuf"
	}
	return fmt.Sprint(id)
}

// offsetText is an offset as JSON (what --from-offset and --offset take).
func offsetText(o query.Offset) string {
	b, err := json.Marshal(o)
	if err != nil {
		return o.String()
	}
	return string(b)
}

// parseOffset reads an offset as printed by the tool ({"seq":42}, {}), or
// a bare sequence number.
func parseOffset(s string) (query.Offset, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= 0 {
		return query.SequenceOffset(n), nil
	}
	var o query.Offset
	if err := json.Unmarshal([]byte(s), &o); err != nil {
		return o, usagef(`offset %q: want an offset as annals prints it, such as {"seq":42}, {} for the start, or a bare sequence number`, s)
	}
	return o, nil
}
