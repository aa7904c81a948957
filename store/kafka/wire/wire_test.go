package wire_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/annals-go/annals/store/kafka/wire"
	"github.com/annals-go/annals/store/kafka/wire/wiretest"
)

func read(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(wiretest.Dir(t), name))
	if err != nil {
		t.Fatalf("fixture %s: %v", name, err)
	}
	return b
}

// ev is event(n) of the README: tags "0".."n", and the payload given.
func ev(n int64, p *wire.Payload) wire.Event {
	e := wire.Event{SeqNr: n, Payload: p}
	for i := int64(0); i <= n; i++ {
		e.Tags = append(e.Tags, fmt.Sprint(i))
	}
	return e
}

func bin(s string) *wire.Payload  { return &wire.Payload{Type: wire.Binary, Data: []byte(s)} }
func text(s string) *wire.Payload { return &wire.Payload{Type: wire.Text, Data: []byte(s)} }
func js(s string) *wire.Payload {
	return &wire.Payload{Type: wire.JSON, Data: fmt.Appendf(nil, "%q", s)}
}

var meta = wire.Metadata{ExpireAfter: "1 day", Data: json.RawMessage(`{"key":"value"}`)}

// sameEvents compares with tags as sets (the library writes a Scala set).
func sameEvents(a, b wire.Events) bool {
	norm := func(es wire.Events) wire.Events {
		out := wire.Events{Metadata: es.Metadata}
		for _, e := range es.Events {
			e.Tags = slices.Sorted(slices.Values(e.Tags))
			out.Events = append(out.Events, e)
		}
		return out
	}
	return reflect.DeepEqual(norm(a), norm(b))
}

// headerCase is a header fixture, the value it decodes to, and whether it
// is also encoded from that value.
type headerCase struct {
	file   string
	want   wire.Header
	encode bool
}

func TestHeaders(t *testing.T) {
	data := json.RawMessage(`{"key":"value"}`)
	var tests []headerCase
	for _, origin := range []string{"None", "origin"} {
		o := map[string]string{"None": "", "origin": "origin"}[origin]
		for _, pt := range []wire.PayloadType{wire.Binary, wire.JSON} {
			name := map[wire.PayloadType]string{wire.Binary: "Binary", wire.JSON: "Json"}[pt]
			base := wire.Header{Kind: wire.Append, From: 1, To: 5, PayloadType: pt, Origin: o}
			withMeta := base
			withMeta.Metadata = data
			tests = append(tests,
				headerCase{fmt.Sprintf("Append-%s-%s-none.json", origin, name), base, true},
				headerCase{fmt.Sprintf("Append-%s-%s-metadata.json", origin, name), withMeta, true},
				headerCase{fmt.Sprintf("Append-%s-%s-legacy.json", origin, name), base, false})
		}
		tests = append(tests,
			headerCase{"Delete-" + origin + ".json", wire.Header{Kind: wire.Delete, To: 3, Version: "0.0.1", Origin: o}, true},
			headerCase{"Purge-" + origin + ".json", wire.Header{Kind: wire.Purge, Origin: o}, true},
			headerCase{"Mark-" + origin + ".json", wire.Header{Kind: wire.Mark, ID: "id", Origin: o}, true})
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			b := read(t, tt.file)
			got, ok, err := wire.DecodeHeader(b)
			if err != nil || !ok {
				t.Fatalf("decode: %v, ok %v", err, ok)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("decoded %+v, want %+v", got, tt.want)
			}
			if tt.encode {
				enc, err := wire.EncodeHeader(tt.want)
				if err == nil {
					enc, err = wire.Indent(enc)
				}
				if err != nil || !bytes.Equal(enc, b) {
					t.Errorf("encoded (%v)\n%s\nwant\n%s", err, enc, b)
				}
			}
		})
	}
	if _, ok, err := wire.DecodeHeader([]byte(`{"new":{}}`)); ok || err != nil {
		t.Errorf("an unknown action decoded to ok %v, %v; want no action and no error", ok, err)
	}
	for _, bad := range []string{``, `[]`, `{"append":{"range":{"from":1,"to":5},"payloadType":"xml"}}`, `{"append":{"range":{"from":3,"to":1},"payloadType":"json"}}`, `{"delete":{"to":"x"}}`, `{"purge":{},"mark":{"id":"x"}}`} {
		if _, _, err := wire.DecodeHeader([]byte(bad)); !errors.Is(err, wire.ErrMalformed) {
			t.Errorf("DecodeHeader(%s) = %v, want ErrMalformed", bad, err)
		}
	}
}

// payloads are the README's Append values by name, with the record's
// payload type.
var payloads = map[string]struct {
	typ wire.PayloadType
	es  wire.Events
}{
	"empty":                  {wire.JSON, wire.Events{Events: []wire.Event{ev(1, nil)}}},
	"binary":                 {wire.Binary, wire.Events{Events: []wire.Event{ev(1, bin("payload"))}}},
	"text":                   {wire.JSON, wire.Events{Events: []wire.Event{ev(1, text(` {"key":"value"} `))}}},
	"json":                   {wire.JSON, wire.Events{Events: []wire.Event{ev(1, js("payload"))}}},
	"empty-many":             {wire.JSON, wire.Events{Events: []wire.Event{ev(1, nil), ev(2, nil)}, Metadata: meta}},
	"binary-many":            {wire.Binary, wire.Events{Events: []wire.Event{ev(1, bin("1")), ev(2, bin("2"))}, Metadata: meta}},
	"text-many":              {wire.JSON, wire.Events{Events: []wire.Event{ev(1, text("1")), ev(2, text("2"))}, Metadata: meta}},
	"json-many":              {wire.JSON, wire.Events{Events: []wire.Event{ev(1, js("1")), ev(2, js("2"))}, Metadata: meta}},
	"empty-binary-text-json": {wire.Binary, wire.Events{Events: []wire.Event{ev(1, nil), ev(2, bin("binary")), ev(3, text("text")), ev(4, js("json"))}, Metadata: meta}},
}

func TestAppendValues(t *testing.T) {
	for name, p := range payloads {
		t.Run(name, func(t *testing.T) {
			file, decode, encode := "Payload-"+name+".json", wire.DecodeJSON, wire.EncodeJSON
			if p.typ == wire.Binary {
				file, decode, encode = "Payload-"+name+".bin", wire.DecodeBinary, wire.EncodeBinary
			}
			b := read(t, file)
			got, err := decode(b)
			if err != nil {
				t.Fatal(err)
			}
			if !sameEvents(got, p.es) {
				t.Errorf("decoded %+v, want %+v", got, p.es)
			}
			enc, err := encode(got)
			if err == nil && p.typ == wire.JSON {
				enc, err = wire.Indent(enc)
			}
			if err != nil || !bytes.Equal(enc, b) {
				t.Errorf("re-encoded (%v)\n%q\nwant\n%q", err, enc, b)
			}
			if p.typ == wire.JSON {
				v0 := "Payload-v0-" + name + ".json"
				if _, err := os.Stat(filepath.Join(wiretest.Dir(t), v0)); err == nil {
					got, err := wire.DecodeJSON(read(t, v0))
					want := p.es
					want.Metadata = wire.Metadata{}
					if err != nil || !sameEvents(got, want) {
						t.Errorf("%s decoded %+v, %v; want %+v", v0, got, err, want)
					}
				}
			}
		})
	}
}

func TestBinaryEvents(t *testing.T) {
	tests := map[string]wire.Events{
		"empty":                  {Events: []wire.Event{ev(1, nil)}},
		"binary":                 {Events: []wire.Event{ev(1, bin("binary"))}},
		"text":                   {Events: []wire.Event{ev(1, text("text"))}},
		"json":                   {Events: []wire.Event{ev(1, js("json"))}, Metadata: meta},
		"empty-many":             {Events: []wire.Event{ev(1, nil), ev(2, nil), ev(3, nil)}, Metadata: meta},
		"binary-many":            {Events: []wire.Event{ev(1, bin("1")), ev(2, bin("2")), ev(3, bin("3"))}, Metadata: meta},
		"text-many":              {Events: []wire.Event{ev(1, text("1")), ev(2, text("2")), ev(3, text("3"))}, Metadata: meta},
		"json-many":              {Events: []wire.Event{ev(1, js("1")), ev(2, js("2")), ev(3, js("3"))}, Metadata: meta},
		"empty-binary-text-json": {Events: []wire.Event{ev(1, nil), ev(2, bin("binary")), ev(3, text("text")), ev(4, js("json"))}, Metadata: meta},
	}
	for name, want := range tests {
		t.Run(name, func(t *testing.T) {
			b := read(t, "v1-events-"+name+".bin")
			got, err := wire.DecodeBinary(b)
			if err != nil || !sameEvents(got, want) {
				t.Fatalf("v1 decoded %+v, %v; want %+v", got, err, want)
			}
			if enc, err := wire.EncodeBinary(got); err != nil || !bytes.Equal(enc, b) {
				t.Errorf("v1 re-encoded (%v)\n%x\nwant\n%x", err, enc, b)
			}
			v0 := want
			v0.Metadata = wire.Metadata{}
			if got, err := wire.DecodeBinary(read(t, "v0-events-"+name+".bin")); err != nil || !sameEvents(got, v0) {
				t.Errorf("v0 decoded %+v, %v; want %+v", got, err, v0)
			}
		})
	}
	full := read(t, "v1-events-binary-many.bin")
	for _, bad := range [][]byte{nil, {2}, full[:len(full)/2], append([]byte{1, 0, 0, 0, 1, 0, 0, 0, 200}, full[9:]...)} {
		if _, err := wire.DecodeBinary(bad); !errors.Is(err, wire.ErrMalformed) {
			t.Errorf("DecodeBinary(%x) = %v, want ErrMalformed", bad, err)
		}
	}
}

// TestDecodeRecord: records without a key or header, or with an unknown
// action, are skipped; a malformed one is an error naming its topic,
// partition and offset; an Append decodes with its events.
func TestDecodeRecord(t *testing.T) {
	appendHeader, _ := wire.EncodeHeader(wire.Header{Kind: wire.Append, From: 1, To: 2, PayloadType: wire.JSON})
	value, _ := wire.EncodeJSON(wire.Events{Events: []wire.Event{ev(1, js("a")), ev(2, nil)}})
	short, _ := wire.EncodeJSON(wire.Events{Events: []wire.Event{ev(1, js("a"))}})
	at := func(key string, headers map[string][]byte, value []byte) wire.Record {
		return wire.Record{Topic: "journal", Partition: 3, Offset: 42, Key: []byte(key), Headers: headers, Value: value}
	}
	tests := []struct {
		name    string
		rec     wire.Record
		ok      bool
		wantErr bool
	}{
		{"append", at("A|1", map[string][]byte{wire.HeaderKey: appendHeader}, value), true, false},
		{"no key", at("", map[string][]byte{wire.HeaderKey: appendHeader}, value), false, false},
		{"no header", at("A|1", map[string][]byte{"other": []byte("x")}, value), false, false},
		{"unknown action", at("A|1", map[string][]byte{wire.HeaderKey: []byte(`{"new":{}}`)}, nil), false, false},
		{"bad header", at("A|1", map[string][]byte{wire.HeaderKey: []byte(`{"append":`)}, value), false, true},
		{"bad value", at("A|1", map[string][]byte{wire.HeaderKey: appendHeader}, []byte(`{"events":[{]}`)), false, true},
		{"no value", at("A|1", map[string][]byte{wire.HeaderKey: appendHeader}, nil), false, true},
		{"range mismatch", at("A|1", map[string][]byte{wire.HeaderKey: appendHeader}, short), false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, ok, err := wire.DecodeRecord(tt.rec)
			if ok != tt.ok || (err != nil) != tt.wantErr {
				t.Fatalf("ok %v, err %v; want ok %v, error %v", ok, err, tt.ok, tt.wantErr)
			}
			if err != nil {
				var re *wire.RecordError
				if !errors.As(err, &re) || !errors.Is(err, wire.ErrMalformed) || re.Topic != "journal" || re.Partition != 3 || re.Offset != 42 {
					t.Errorf("error %v does not name journal/3@42 or wrap ErrMalformed", err)
				}
			}
			if ok && (a.ID != "A|1" || len(a.Events.Events) != 2 || a.Header.Kind != wire.Append) {
				t.Errorf("decoded %+v", a)
			}
		})
	}
}
