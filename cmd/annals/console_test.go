package main

import (
	"bytes"
	"compress/gzip"
	"net"
	"strings"
	"testing"

	"github.com/annals-go/annals/cmd/annals/internal/console"
	"github.com/annals-go/annals/serialization"
)

// TestConsolePayload: the console shows payloads as annals events does,
// JSON indented and gzipped JSON unpacked.
func TestConsolePayload(t *testing.T) {
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	_, _ = w.Write([]byte(`{"big":[1,2]}`))
	_ = w.Close()
	cases := []struct {
		name string
		id   int32
		p    []byte
		want console.Payload
	}{
		{"json", serialization.JSONID, []byte(`{"a":1,"b":"<script>"}`), console.Payload{Kind: "json", Text: "{\n  \"a\": 1,\n  \"b\": \"<script>\"\n}", Size: 22}},
		{"legacy json", serialization.LegacyJSONID, []byte(`[1]`), console.Payload{Kind: "json", Text: "[\n  1\n]", Size: 3}},
		{"gzipped json", serialization.JSONID, gz.Bytes(), console.Payload{Kind: "json", Text: "{\n  \"big\": [\n    1,\n    2\n  ]\n}", Size: gz.Len()}},
		{"protobuf", serialization.ProtobufID, []byte{0x0a, 0x03, 'f', 'o', 'o', 0x10, 0x01}, console.Payload{Kind: "protobuf", Text: "0x0a03666f6f1001", Size: 7}},
		{"text", serialization.BytesID, []byte("plain text"), console.Payload{Kind: "bytes", Text: `"plain text"`, Size: 10}},
		{"not json", serialization.JSONID, []byte("{oops"), console.Payload{Kind: "json", Text: `"{oops"`, Size: 5}},
		{"empty", 1000, nil, console.Payload{Kind: "1000", Text: "-", Size: 0}},
	}
	for _, c := range cases {
		if got := consolePayload(c.id, "", c.p); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	long := bytes.Repeat([]byte("x"), 500)
	if got := consolePayload(serialization.BytesID, "", long); len(got.Text) != 502 || strings.Contains(got.Text, "…") {
		t.Errorf("a long payload is cut: %d characters", len(got.Text))
	}
}

func TestConsoleLinkHost(t *testing.T) {
	if got := linkHost(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}); got != "127.0.0.1:8080" {
		t.Errorf("loopback: %s", got)
	}
	if got := linkHost(&net.TCPAddr{IP: net.IPv4zero, Port: 8080}); strings.HasPrefix(got, "0.0.0.0") || !strings.HasSuffix(got, ":8080") {
		t.Errorf("every address: %s, want this machine's name", got)
	}
}
