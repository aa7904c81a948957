package wire_test

import (
	"bytes"
	"testing"

	"github.com/annals-go/annals/store/kafka/wire"
	"github.com/annals-go/annals/store/kafka/wire/wiretest"
)

// TestScalaWrittenRecords: every record the Scala library wrote decodes;
// its action header and its Append value re-encode to the same bytes; the
// kinds of actions are those its README lists.
func TestScalaWrittenRecords(t *testing.T) {
	tests := []struct {
		file  string
		kinds []wire.Kind
	}{
		{"journal-anchors.jsonl", []wire.Kind{wire.Append, wire.Append, wire.Append, wire.Append, wire.Append, wire.Mark, wire.Delete,
			wire.Append, wire.Purge, wire.Mark, wire.Mark, wire.Mark, wire.Mark, wire.Mark}},
		{"journal-fixtures.jsonl", []wire.Kind{wire.Append, wire.Append, wire.Append, wire.Append, wire.Append, wire.Append, wire.Append,
			wire.Append, wire.Append, wire.Append, wire.Mark, wire.Delete, wire.Purge, wire.Mark}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			var kinds []wire.Kind
			for _, r := range wiretest.ScalaWritten(t, tt.file) {
				header := r.Headers[wire.HeaderKey]
				h, ok, err := wire.DecodeHeader(header)
				if err != nil || !ok {
					t.Fatalf("offset %d (%s): header %s: %v, ok %v", r.Offset, r.Key, header, err, ok)
				}
				kinds = append(kinds, h.Kind)
				if enc, err := wire.EncodeHeader(h); err != nil || !bytes.Equal(enc, header) {
					t.Errorf("offset %d: header re-encoded (%v)\n%s\nwant\n%s", r.Offset, err, enc, header)
				}
				if h.Kind != wire.Append {
					continue
				}
				value := r.Value
				decode, encode := wire.DecodeJSON, wire.EncodeJSON
				if h.PayloadType == wire.Binary {
					decode, encode = wire.DecodeBinary, wire.EncodeBinary
				}
				es, err := decode(value)
				if err != nil {
					t.Fatalf("offset %d (%s): value: %v", r.Offset, r.Key, err)
				}
				if n := int64(len(es.Events)); n == 0 || es.Events[0].SeqNr != h.From || es.Events[n-1].SeqNr != h.To {
					t.Errorf("offset %d: events %+v do not span the header's range %d..%d", r.Offset, es.Events, h.From, h.To)
				}
				if enc, err := encode(es); err != nil || !bytes.Equal(enc, value) {
					t.Errorf("offset %d (%s): value re-encoded (%v)\n%q\nwant\n%q", r.Offset, r.Key, err, enc, value)
				}
			}
			if len(kinds) != len(tt.kinds) {
				t.Fatalf("%d records, want %d", len(kinds), len(tt.kinds))
			}
			for i := range kinds {
				if kinds[i] != tt.kinds[i] {
					t.Errorf("record %d is a %v, want %v", i, kinds[i], tt.kinds[i])
				}
			}
		})
	}
}
