package wire_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/annals-go/annals/store/kafka/wire"
)

// bitsOf builds the expected PersistentBinary bytes independently, as a
// string of bits (scodec's layout: a one-bit flag, then byte-sized
// fields), padded to whole bytes.
func bitsOf(p wire.Persistent) []byte {
	var s strings.Builder
	bytesBits := func(b []byte) {
		for _, c := range b {
			fmt.Fprintf(&s, "%08b", c)
		}
	}
	i32 := func(v int32) { fmt.Fprintf(&s, "%032b", uint32(v)) }
	str := func(b []byte) { i32(int32(len(b))); bytesBits(b) }
	if p.AdapterManifest != "" {
		s.WriteString("1")
		str([]byte(p.AdapterManifest))
	} else {
		s.WriteString("0")
	}
	str([]byte(p.WriterUUID))
	i32(p.SerializerID)
	str([]byte(p.Manifest))
	str(p.Payload)
	bits := s.String()
	for len(bits)%8 != 0 {
		bits += "0"
	}
	out := make([]byte, len(bits)/8)
	for i := range out {
		var c byte
		fmt.Sscanf(bits[i*8:i*8+8], "%b", &c)
		out[i] = c
	}
	return out
}

func TestPersistentBinary(t *testing.T) {
	for _, p := range []wire.Persistent{
		{WriterUUID: "w", SerializerID: 1, Payload: []byte{0xff}},
		{WriterUUID: "4f8b6f1e-writer", SerializerID: 31, Manifest: "com.example.Account$Deposited", Payload: []byte(`{"amount":10}`)},
		{AdapterManifest: "v2", WriterUUID: "", SerializerID: -7, Manifest: "é", Payload: []byte{}},
		{WriterUUID: "αβ", SerializerID: 4, Payload: bytes.Repeat([]byte{0x80, 0x01}, 300)},
	} {
		enc := wire.EncodePersistentBinary(p)
		if want := bitsOf(p); !bytes.Equal(enc, want) {
			t.Errorf("EncodePersistentBinary(%+v) =\n% x\nwant\n% x", p, enc, want)
		}
		got, ok := wire.DecodePersistentBinary(enc)
		if !ok || got.AdapterManifest != p.AdapterManifest || got.WriterUUID != p.WriterUUID || got.SerializerID != p.SerializerID ||
			got.Manifest != p.Manifest || !bytes.Equal(got.Payload, p.Payload) {
			t.Errorf("round trip of %+v gave %+v, ok %v", p, got, ok)
		}
	}
}

func TestPersistentBinaryRefusesOtherBytes(t *testing.T) {
	// Payloads the Scala library's Journals API wrote (scala-written) and
	// truncated or padded adapter payloads.
	good := wire.EncodePersistentBinary(wire.Persistent{WriterUUID: "w", SerializerID: 1, Manifest: "m", Payload: []byte("x")})
	for _, b := range [][]byte{
		nil, {0}, {0x00, 0x01, 0x02, 0xfe, 0xff}, []byte("bin"), []byte("binary"),
		good[:len(good)-1], append(bytes.Clone(good), 0), append(good[:len(good)-1:len(good)-1], good[len(good)-1]|1),
	} {
		if p, ok := wire.DecodePersistentBinary(b); ok {
			t.Errorf("DecodePersistentBinary(% x) = %+v, want not ok", b, p)
		}
	}
}

func TestPersistentJSON(t *testing.T) {
	for _, c := range []struct {
		in   string
		ok   bool
		want wire.PersistentJSON
	}{
		{`{"manifest":"m","writerUuid":"w","payload":{"a":1}}`, true, wire.PersistentJSON{Manifest: "m", WriterUUID: "w", Payload: []byte(`{"a":1}`)}},
		{`{"writerUuid":"w","payloadType":"text","payload":"hi"}`, true, wire.PersistentJSON{WriterUUID: "w", PayloadType: wire.Text, Payload: []byte(`"hi"`)}},
		{`{"n":1,"s":"one"}`, false, wire.PersistentJSON{}},
		{`[1,2,3]`, false, wire.PersistentJSON{}},
		{`"three"`, false, wire.PersistentJSON{}},
	} {
		got, ok := wire.DecodePersistentJSON([]byte(c.in))
		if ok != c.ok || got.Manifest != c.want.Manifest || got.WriterUUID != c.want.WriterUUID || got.PayloadType != c.want.PayloadType || string(got.Payload) != string(c.want.Payload) {
			t.Errorf("DecodePersistentJSON(%s) = %+v, %v; want %+v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}
