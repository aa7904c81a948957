package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// Persistent is an event as the Scala library's Akka (and Pekko)
// persistence adapter stores a PersistentRepr in an event's payload: the
// serializer's id, manifest and bytes, the writer's id, and the event
// adapter's manifest (empty for none).
type Persistent struct {
	AdapterManifest string
	WriterUUID      string
	SerializerID    int32
	Manifest        string
	Payload         []byte
}

// EncodePersistentBinary returns p as the adapter's PersistentBinary
// payload: scodec's optional(bool, utf8_32) adapter manifest (a one-bit
// flag, which shifts everything after it by one bit), utf8_32 writer id,
// then the SerializedMsg (int32 serializer id, utf8_32 manifest, int32
// length and bytes), padded with zero bits to a whole byte.
func EncodePersistentBinary(p Persistent) []byte {
	var body bytes.Buffer
	put := func(b []byte) {
		_ = binary.Write(&body, binary.BigEndian, int32(len(b)))
		body.Write(b)
	}
	flag := byte(0)
	if p.AdapterManifest != "" {
		flag = 1
		put([]byte(p.AdapterManifest))
	}
	put([]byte(p.WriterUUID))
	_ = binary.Write(&body, binary.BigEndian, p.SerializerID)
	put([]byte(p.Manifest))
	put(p.Payload)
	b := body.Bytes()
	out := make([]byte, len(b)+1)
	out[0] = flag << 7
	for i, c := range b {
		out[i] |= c >> 1
		out[i+1] = c << 7
	}
	return out
}

// DecodePersistentBinary reads a PersistentBinary payload. ok is false
// when b is not one (for example a payload written through the library's
// Journals API rather than its persistence adapter): every length must
// fit exactly, every text be UTF-8, and the padding bits be zero.
func DecodePersistentBinary(b []byte) (p Persistent, ok bool) {
	if len(b) < 2 || b[len(b)-1]&0x7f != 0 {
		return Persistent{}, false
	}
	flag := b[0] >> 7
	body := make([]byte, len(b)-1)
	for i := range body {
		body[i] = b[i]<<1 | b[i+1]>>7
	}
	r := &reader{b: body}
	text := func(what string) string {
		s := r.take(r.u32(what), what)
		if r.err == nil && !utf8.Valid(s) {
			r.err = fmt.Errorf("%w: %s is not UTF-8", ErrMalformed, what)
		}
		return string(s)
	}
	if flag == 1 {
		p.AdapterManifest = text("adapter manifest")
	}
	p.WriterUUID = text("writer id")
	id := r.take(4, "serializer id")
	if r.err == nil {
		p.SerializerID = int32(binary.BigEndian.Uint32(id))
	}
	p.Manifest = text("manifest")
	p.Payload = bytes.Clone(r.take(r.u32("payload length"), "payload"))
	if r.err != nil || len(r.b) != 0 {
		return Persistent{}, false
	}
	if p.Payload == nil {
		p.Payload = []byte{}
	}
	return p, true
}

// PersistentJSON is the adapter's form of an event whose payload is JSON
// (or text, with PayloadType "text"): {"manifest":…, "writerUuid":…,
// "payloadType":…, "payload":…}.
type PersistentJSON struct {
	Manifest    string          `json:"manifest,omitempty"`
	WriterUUID  string          `json:"writerUuid"`
	PayloadType PayloadType     `json:"payloadType,omitempty"`
	Payload     json.RawMessage `json:"payload"`
}

// DecodePersistentJSON reads an adapter JSON payload; ok is false when b
// is not an object with writerUuid and payload.
func DecodePersistentJSON(b []byte) (p PersistentJSON, ok bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil {
		return PersistentJSON{}, false
	}
	if _, has := m["writerUuid"]; !has {
		return PersistentJSON{}, false
	}
	if _, has := m["payload"]; !has {
		return PersistentJSON{}, false
	}
	if json.Unmarshal(b, &p) != nil {
		return PersistentJSON{}, false
	}
	return p, true
}
