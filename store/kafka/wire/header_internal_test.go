package wire

import (
	"reflect"
	"testing"
)

// TestDecodeHeaderAsEncodingJSON: the one-pass decoding of a header gives
// what encoding/json's rules give (decodeHeader) for every header, those
// the writers write and those it hands over to decodeHeader.
func TestDecodeHeaderAsEncodingJSON(t *testing.T) {
	var written []string
	for _, h := range []Header{
		{Kind: Append, From: 1, To: 3, PayloadType: Binary, Origin: "host", Version: "1.2.3"},
		{Kind: Append, From: 4, To: 4, PayloadType: JSON, Metadata: []byte(`{"a":[1,2]}`)},
		{Kind: Delete, To: 7, Origin: "o"},
		{Kind: Purge, Version: "v"},
		{Kind: Mark, ID: "0123abcd", Origin: "o", Version: "v"},
	} {
		b, err := EncodeHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		written = append(written, string(b))
	}
	for _, b := range append(written,
		`{"append":{"range":{"from":1,"to":2},"payloadType":"binary","metadata":{"data":{"x":1}}}}`,
		`{"append":{"range":{"from":1,"to":2},"payloadType":"binary","metadata":{"data":null}}}`,
		`{"append":{"range":{"from":2,"to":1},"payloadType":"binary"}}`,
		`{"append":{"range":{"from":1,"to":1},"payloadType":"text"}}`,
		`{"Append":{"range":{"from":1,"to":1},"payloadType":"binary"}}`,
		`{"append":{"Range":{"From":1,"to":1},"payloadType":"binary"}}`,
		`{"append":{"range":{"from":1,"to":1},"payloadType":"binary","future":true}}`,
		`{"mark":{"id":"a"},"mark":{"id":"b"}}`,
		`{"mark":{"id":"a"},"delete":{"to":1}}`,
		`{"mark":{"id":"a"},"unknown":{}}`,
		`{"somethingNew":{"x":1}}`,
		`{"delete":{"to":"1"}}`,
		`{"delete":null}`,
		`{"purge":{}}`,
		`{}`, `[]`, `null`, `{"mark":{"id":"a"}} x`, `{"mark":{"id":"\xff"}}`,
	) {
		h, ok, err := DecodeHeader([]byte(b))
		wh, wok, werr := decodeHeader([]byte(b))
		if !reflect.DeepEqual(h, wh) || ok != wok || (err == nil) != (werr == nil) {
			t.Errorf("%s: DecodeHeader = %+v, %v, %v; by encoding/json's rules %+v, %v, %v", b, h, ok, err, wh, wok, werr)
		}
	}
}
