package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"testing"

	"github.com/annals-go/annals/serialization"
)

func gzipped(t *testing.T, p []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write(p); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestPayloadShown: JSON payloads show as JSON, gzipped ones (Pekko's
// jackson-json over 32 KiB) as the JSON they hold, anything else as text
// or hex, or as base64 in --json.
func TestPayloadShown(t *testing.T) {
	plain := []byte(`{"n": 1, "text": "ünï"}`)
	for _, c := range []struct {
		name     string
		id       int32
		payload  []byte
		text     string
		asJSON   bool // --json shows it as JSON, not base64
		wantJSON string
	}{
		{"JSON", serialization.JSONID, plain, `{"n":1,"text":"ünï"}`, true, string(plain)},
		{"JSON under the legacy id", serialization.LegacyJSONID, plain, `{"n":1,"text":"ünï"}`, true, string(plain)},
		{"gzipped JSON", serialization.JSONID, gzipped(t, plain), `{"n":1,"text":"ünï"}`, true, string(plain)},
		{"broken gzip", serialization.JSONID, []byte{0x1f, 0x8b, 0, 1}, "0x1f8b0001", false, ""},
		{"text under bytes", serialization.BytesID, []byte("hello"), `"hello"`, false, ""},
		{"JSON text under another id", 77, plain, `"{\"n\": 1, \"text\": \"ünï\"}"`, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := payloadText(c.id, c.payload, true); got != c.text {
				t.Errorf("payloadText = %s, want %s", got, c.text)
			}
			v, raw := payloadJSON(c.id, c.payload)
			if c.asJSON {
				if m, ok := v.(json.RawMessage); !ok || string(m) != c.wantJSON || raw != nil {
					t.Errorf("payloadJSON = %v, %x; want the JSON %s", v, raw, c.wantJSON)
				}
			} else if v != nil || !bytes.Equal(raw, c.payload) {
				t.Errorf("payloadJSON = %v, %x; want the bytes", v, raw)
			}
		})
	}
}
