package pg_test

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/annals-go/annals/store/kafka/eventual"
	"github.com/annals-go/annals/store/kafka/wire"

	"github.com/annals-go/annals/store/kafka/eventual/eventualtest"
	"github.com/annals-go/annals/store/kafka/eventual/pg/pgeventualtest"
)

// TestReplicatesAsScala: after replicating the records the Scala Kafka
// Journal wrote, every head, event and pointer read back equals the rows
// the Scala replicator wrote into Cassandra.
func TestReplicatesAsScala(t *testing.T) {
	s := pgeventualtest.Open(t)
	eventualtest.ReplicateScalaWritten(t, s)
	eventualtest.CompareWithScala(t, s)
}

// TestReplicatesEveryValue: events replicated in a poll large enough to
// be split into transactions (eventual.ShardRecords) and in a small one
// read back as written: tags and headers with quotes, backslashes,
// commas, braces and non-ASCII text, binary, text and JSON payloads,
// metadata; a key appended to twice in a poll keeps both appends.
func TestReplicatesEveryValue(t *testing.T) {
	for _, c := range []struct {
		name string
		ids  int
	}{{"one transaction", 3}, {"split", eventual.ShardRecords}} {
		t.Run(c.name, func(t *testing.T) {
			s := pgeventualtest.Open(t)
			ts := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
			tags := []string{`q"uote`, `back\slash`, "a,b", "{braces}", "NULL", "漢字"}
			headers := map[string]string{"annals.timestamps": "[1]", `k"ey`: "v\\al\nue", "é": "🙂"}
			payloads := []wire.Payload{{Type: wire.Binary, Data: []byte{0, 1, 2}}, {Type: wire.Text, Data: []byte("text")},
				{Type: wire.JSON, Data: []byte(`{"a":1}`)}}
			var records []wire.Record
			for round := range 2 {
				for i := range c.ids {
					seq := int64(round + 1)
					es := wire.Events{Events: []wire.Event{{SeqNr: seq, Tags: tags, Payload: &payloads[(i+round)%len(payloads)]}}}
					pt := wire.Binary
					v, err := wire.EncodeBinary(es)
					if err != nil {
						t.Fatal(err)
					}
					h, err := wire.EncodeHeader(wire.Header{Kind: wire.Append, From: seq, To: seq, PayloadType: pt, Origin: "o", Version: "v"})
					if err != nil {
						t.Fatal(err)
					}
					hs := map[string][]byte{wire.HeaderKey: h}
					for k, v := range headers {
						hs[k] = []byte(v)
					}
					records = append(records, wire.Record{Topic: "t", Offset: int64(len(records)), Timestamp: ts,
						Key: []byte(fmt.Sprintf("id-%d", i)), Value: v, Headers: hs})
				}
			}
			if err := eventual.Replicate(t.Context(), s, records, ts); err != nil {
				t.Fatal(err)
			}
			if p, ok, err := s.Pointer(t.Context(), "t", 0); err != nil || !ok || p != int64(len(records)-1) {
				t.Fatalf("pointer = %d, %v, %v; want %d", p, ok, err, len(records)-1)
			}
			for i := range c.ids {
				key := eventual.Key{ID: fmt.Sprintf("id-%d", i), Topic: "t"}
				head, ok, err := s.Head(t.Context(), key)
				if err != nil || !ok || head.SeqNr != 2 {
					t.Fatalf("%s: head %+v, %v, %v", key.ID, head, ok, err)
				}
				var got []eventual.Record
				for r, err := range s.Records(t.Context(), key, 0, 1, 2) {
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, r)
				}
				if len(got) != 2 {
					t.Fatalf("%s: %d events, want 2", key.ID, len(got))
				}
				for round, r := range got {
					want := payloads[(i+round)%len(payloads)]
					if r.Event.SeqNr != int64(round+1) || !slices.Equal(r.Event.Tags, slices.Sorted(slices.Values(tags))) && !slices.Equal(r.Event.Tags, tags) ||
						!maps.Equal(r.Headers, headers) || r.Event.Payload.Type != want.Type || !bytes.Equal(r.Event.Payload.Data, want.Data) ||
						!r.Timestamp.Equal(ts) {
						t.Errorf("%s event %d = %+v (payload %q), want tags %q, headers %q, payload %q", key.ID, round+1, r, r.Event.Payload.Data, tags, headers, want.Data)
					}
				}
			}
		})
	}
}
