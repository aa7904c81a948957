package cql_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/annals-go/annals/store/kafka/eventual"
	"github.com/annals-go/annals/store/kafka/eventual/cql"
	"github.com/annals-go/annals/store/kafka/eventual/cql/cqltest"
	"github.com/annals-go/annals/store/kafka/wire"
)

// polls builds the records of a partition: each action a string "id
// append from-to", "id delete to", "id purge" or "id expiring from-to"
// (appends that expire after a day); polls are separated by "|".
type polls struct {
	t      *testing.T
	topic  string
	offset int64
}

func (p *polls) records(actions ...string) []wire.Record {
	p.t.Helper()
	var out []wire.Record
	for _, a := range actions {
		var (
			id, kind string
			from, to int64
		)
		if n, _ := fmt.Sscanf(a, "%s %s %d-%d", &id, &kind, &from, &to); n < 2 {
			p.t.Fatalf("action %q", a)
		}
		var h wire.Header
		var value []byte
		switch kind {
		case "append", "expiring":
			var es wire.Events
			for s := from; s <= to; s++ {
				es.Events = append(es.Events, wire.Event{SeqNr: s, Payload: &wire.Payload{Type: wire.Binary, Data: fmt.Appendf(nil, "%s-%d", id, s)}})
			}
			if kind == "expiring" {
				es.Metadata.ExpireAfter = "1 day"
			}
			v, err := wire.EncodeBinary(es)
			if err != nil {
				p.t.Fatal(err)
			}
			h, value = wire.Header{Kind: wire.Append, From: from, To: to, PayloadType: wire.Binary}, v
		case "delete":
			if _, err := fmt.Sscanf(a, "%s %s %d", &id, &kind, &to); err != nil {
				p.t.Fatal(err)
			}
			h = wire.Header{Kind: wire.Delete, To: to}
		case "purge":
			h = wire.Header{Kind: wire.Purge}
		default:
			p.t.Fatalf("action %q", a)
		}
		hb, err := wire.EncodeHeader(h)
		if err != nil {
			p.t.Fatal(err)
		}
		out = append(out, wire.Record{Topic: p.topic, Offset: p.offset, Timestamp: time.UnixMilli(1_700_000_000_000 + p.offset).UTC(),
			Key: []byte(id), Value: value, Headers: map[string][]byte{wire.HeaderKey: hb}})
		p.offset++
	}
	return out
}

// storeState is what a store holds of ids: each head (without its random
// record id) and its events' sequence numbers.
func storeState(t *testing.T, s *cql.Store, topic string, ids []string) string {
	t.Helper()
	var out string
	for _, id := range ids {
		key := eventual.Key{ID: id, Topic: topic}
		h, ok, err := s.Head(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		var seqs []int64
		for r, err := range s.Records(t.Context(), key, 0, 1, 1<<40) {
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, r.Event.SeqNr)
		}
		var expiry string
		if h.Expiry != nil {
			expiry = fmt.Sprint(h.Expiry.After, h.Expiry.On.Format(time.DateOnly))
		}
		out += fmt.Sprintf("%s: head %v seq %d deleteTo %d offset %d expiry %q events %v\n", id, ok, h.SeqNr, h.DeleteTo, h.Offset, expiry, seqs)
	}
	return out
}

// TestReplicateKnownIsReplicate: replicating polls with heads remembered
// leaves the store as replicating them reading every head does, through
// appends, deletes, purges and expiring appends, and reads each head once
// (known after), or again once forgotten for lack of room.
func TestReplicateKnownIsReplicate(t *testing.T) {
	for _, c := range []struct {
		name  string
		polls [][]string
		max   int
		reads []int64 // heads read with max heads remembered: any of these
	}{
		{"appends", [][]string{{"a append 1-3", "b append 1-1"}, {"a append 4-5"}, {"b append 2-2", "a append 6-6"}}, 10, []int64{2}},
		{"delete between", [][]string{{"a append 1-3"}, {"a delete 2"}, {"a append 4-4"}, {"a delete 9"}, {"a append 5-5"}}, 10, []int64{1}},
		{"purge and again", [][]string{{"a append 1-3"}, {"a purge"}, {"a append 1-2"}, {"a purge", "a append 1-1"}}, 10, []int64{1}},
		{"delete first", [][]string{{"a delete 5"}, {"a append 6-7"}}, 10, []int64{1}},
		{"expiry set and cleared", [][]string{{"a expiring 1-2"}, {"a append 3-3"}, {"a expiring 4-4"}, {"a delete 4"}}, 10, []int64{1}},
		{"purge of a journal never stored", [][]string{{"a purge"}, {"a append 1-1"}}, 10, []int64{1}},
		{"more keys than room", [][]string{{"a append 1-1", "b append 1-1", "c append 1-1"}, {"a append 2-2", "b append 2-2", "c append 2-2"}}, 2, []int64{4, 5}}, // the key forgotten for room is arbitrary, and the keys of a poll run at once
		{"none remembered", [][]string{{"a append 1-1"}, {"a append 2-2"}, {"a delete 1"}}, 0, []int64{3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			known, _, _ := cqltest.Open(t)
			reading, _, _ := cqltest.Open(t)
			heads := eventual.NewHeads(c.max)
			topic := "t"
			pk, pr := &polls{t: t, topic: topic}, &polls{t: t, topic: topic}
			now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			for _, poll := range c.polls {
				if err := eventual.ReplicateKnown(t.Context(), known, heads, pk.records(poll...), now); err != nil {
					t.Fatal(err)
				}
				if err := eventual.Replicate(t.Context(), reading, pr.records(poll...), now); err != nil {
					t.Fatal(err)
				}
			}
			ids := []string{"a", "b", "c"}
			if got, want := storeState(t, known, topic, ids), storeState(t, reading, topic, ids); got != want {
				t.Errorf("with heads remembered:\n%s\nreading them:\n%s", got, want)
			}
			if got := heads.Reads(); !slices.Contains(c.reads, got) {
				t.Errorf("%d heads read, want one of %d", got, c.reads)
			}
			if heads.Len() > c.max {
				t.Errorf("%d heads remembered, more than %d", heads.Len(), c.max)
			}
		})
	}
}

// TestReplicateKnownForgets: heads changed by another writer (a member
// that held the partition meanwhile) are read again once the partition's
// heads are forgotten, as the replicator does on every assignment; a
// failed write forgets the partition's heads by itself.
func TestReplicateKnownForgets(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	t.Run("another member applied the partition", func(t *testing.T) {
		s, _, _ := cqltest.Open(t)
		topic := "t"
		heads := eventual.NewHeads(10)
		p := &polls{t: t, topic: topic}
		if err := eventual.ReplicateKnown(t.Context(), s, heads, p.records("a append 1-3", "b append 1-1"), now); err != nil {
			t.Fatal(err)
		}
		// Another member, without this one's heads, deletes a's events
		// and appends to it.
		if err := eventual.Replicate(t.Context(), s, p.records("a delete 3", "a append 4-4"), now); err != nil {
			t.Fatal(err)
		}
		heads.Forget(topic, 1) // another partition: a's head is still known
		if heads.Len() != 2 {
			t.Fatalf("%d heads known after forgetting another partition, want 2", heads.Len())
		}
		heads.Forget(topic, 0)
		if heads.Len() != 0 {
			t.Fatalf("%d heads known after Forget, want 0", heads.Len())
		}
		if err := eventual.ReplicateKnown(t.Context(), s, heads, p.records("a append 5-5"), now); err != nil {
			t.Fatal(err)
		}
		if got, want := storeState(t, s, topic, []string{"a"}), "a: head true seq 5 deleteTo 3 offset 4 expiry \"\" events [4 5]\n"; got != want {
			t.Errorf("store holds\n%s\nwant\n%s", got, want)
		}
		if got := heads.Reads(); got != 3 {
			t.Errorf("%d heads read, want 3 (a and b, then a again)", got)
		}
	})
	t.Run("a write failed", func(t *testing.T) {
		s, _, _ := cqltest.Open(t)
		topic := "t"
		heads := eventual.NewHeads(10)
		p := &polls{t: t, topic: topic}
		if err := eventual.ReplicateKnown(t.Context(), s, heads, p.records("a append 1-1", "b append 1-1"), now); err != nil {
			t.Fatal(err)
		}
		failing := &failOnce{Tables: s, id: "b"}
		second := p.records("a append 2-2", "b append 2-2")
		if err := eventual.ReplicateKnown(t.Context(), failing, heads, second, now); !errors.Is(err, errInjected) {
			t.Fatalf("ReplicateKnown = %v, want the injected failure", err)
		}
		if heads.Len() != 0 {
			t.Errorf("%d heads known after a failed write, want none", heads.Len())
		}
		if err := eventual.ReplicateKnown(t.Context(), failing, heads, second, now); err != nil {
			t.Fatal(err)
		}
		want := "a: head true seq 2 deleteTo 0 offset 2 expiry \"\" events [1 2]\nb: head true seq 2 deleteTo 0 offset 3 expiry \"\" events [1 2]\n"
		if got := storeState(t, s, topic, []string{"a", "b"}); got != want {
			t.Errorf("store holds\n%s\nwant\n%s", got, want)
		}
	})
	t.Run("suspended", func(t *testing.T) {
		s, _, _ := cqltest.Open(t)
		topic := "t"
		heads := eventual.NewHeads(10)
		p := &polls{t: t, topic: topic}
		if err := eventual.ReplicateKnown(t.Context(), s, heads, p.records("a append 1-3"), now); err != nil {
			t.Fatal(err)
		}
		// A rebalance waits on the poll: from then on another member
		// may own the partition and delete a's events.
		heads.Suspend()
		if err := eventual.Replicate(t.Context(), s, p.records("a delete 3", "a append 4-4"), now); err != nil {
			t.Fatal(err)
		}
		if err := eventual.ReplicateKnown(t.Context(), s, heads, p.records("a append 5-5"), now); err != nil {
			t.Fatal(err)
		}
		if heads.Len() != 0 {
			t.Errorf("%d heads known while suspended, want none", heads.Len())
		}
		if got, want := storeState(t, s, topic, []string{"a"}), "a: head true seq 5 deleteTo 3 offset 3 expiry \"\" events [4 5]\n"; got != want {
			t.Errorf("store holds\n%s\nwant\n%s", got, want)
		}
		heads.Resume()
		if err := eventual.ReplicateKnown(t.Context(), s, heads, p.records("a append 6-6"), now); err != nil {
			t.Fatal(err)
		}
		if heads.Len() != 1 || heads.Reads() != 3 {
			t.Errorf("after Resume %d heads known, %d read; want 1 known, 3 read", heads.Len(), heads.Reads())
		}
	})
}

var errInjected = errors.New("injected failure")

// failOnce fails the first head write of id, after its events are stored.
type failOnce struct {
	eventual.Tables
	id     string
	failed bool
}

func (f *failOnce) UpdateHead(ctx context.Context, key eventual.Key, h eventual.Head, now time.Time) error {
	if key.ID == f.id && !f.failed {
		f.failed = true
		return errInjected
	}
	return f.Tables.UpdateHead(ctx, key, h, now)
}

// TestHeadInEitherSegment: a head in the id's segment of older Scala
// versions (100 segments) is found, and the id's current segment is
// preferred when both hold one.
func TestHeadInEitherSegment(t *testing.T) {
	s, session, keyspace := cqltest.Open(t)
	ids := []string{"old-layout", "a"} // "a": both layouts give segment 97
	if eventual.MetaSegment("a", eventual.MetaSegments) != eventual.MetaSegment("a", eventual.OldMetaSegments) {
		t.Fatal("the test needs an id whose two segments are the same")
	}
	for _, id := range ids {
		key := eventual.Key{ID: id, Topic: "t"}
		old := eventual.Head{Offset: 7, SegmentSize: 100, SeqNr: 3, MetaSegment: eventual.MetaSegment(id, eventual.OldMetaSegments)}
		if err := s.InsertHead(t.Context(), key, old, time.Now(), ""); err != nil {
			t.Fatal(err)
		}
		h, ok, err := s.Head(t.Context(), key)
		if err != nil || !ok || h != old {
			t.Fatalf("%s: Head = %+v, %v, %v; want %+v", id, h, ok, err, old)
		}
	}
	key := eventual.Key{ID: "old-layout", Topic: "t"}
	current := eventual.Head{Offset: 9, SegmentSize: 10000, SeqNr: 5, MetaSegment: eventual.MetaSegment(key.ID, eventual.MetaSegments)}
	if err := s.InsertHead(t.Context(), key, current, time.Now(), ""); err != nil {
		t.Fatal(err)
	}
	if h, ok, err := s.Head(t.Context(), key); err != nil || !ok || h != current {
		t.Fatalf("Head = %+v, %v, %v; want the current segment's %+v", h, ok, err, current)
	}
	var n int
	if err := session.Query(`SELECT count(*) FROM `+keyspace+`.metajournal WHERE topic = 't' AND segment IN ?`,
		[]int64{current.MetaSegment, eventual.MetaSegment(key.ID, eventual.OldMetaSegments)}).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d heads of %s, %v; want 2", n, key.ID, err)
	}
}

// TestRecordColumnsRoundTrip: tags and headers (written without the
// driver's reflection) and absent columns (left unset) read back as
// written.
func TestRecordColumnsRoundTrip(t *testing.T) {
	s, _, _ := cqltest.Open(t)
	key := eventual.Key{ID: "columns", Topic: "t"}
	ts := time.UnixMilli(1_700_000_000_123).UTC()
	records := []eventual.Record{
		{Event: wire.Event{SeqNr: 1, Tags: []string{`q"uote`, "a,b", "漢字", ""}, Payload: &wire.Payload{Type: wire.Text, Data: []byte("text")}},
			Origin: "o", Version: "v", Headers: map[string]string{"k": "v", `k"ey`: "v\\al\nue", "é": "🙂", "empty": ""}},
		{Event: wire.Event{SeqNr: 2, Payload: &wire.Payload{Type: wire.Binary, Data: []byte{0, 1, 2}}}},
		{Event: wire.Event{SeqNr: 3}},
	}
	for i := range records {
		records[i].Timestamp, records[i].Offset = ts, int64(i)
	}
	if err := s.InsertRecords(t.Context(), key, 0, [16]byte{1}, records); err != nil {
		t.Fatal(err)
	}
	var got []eventual.Record
	for r, err := range s.Records(t.Context(), key, 0, 1, 3) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if len(got) != len(records) {
		t.Fatalf("%d records read, want %d", len(got), len(records))
	}
	for i, w := range records {
		g := got[i]
		wantTags := slices.Sorted(slices.Values(w.Event.Tags))
		if !slices.Equal(g.Event.Tags, wantTags) || fmt.Sprint(g.Headers) != fmt.Sprint(w.Headers) || g.Origin != w.Origin || g.Version != w.Version ||
			fmt.Sprint(g.Event.Payload) != fmt.Sprint(w.Event.Payload) || !g.Timestamp.Equal(ts) {
			t.Errorf("record %d read as %+v (payload %v), want %+v (payload %v)", i+1, g, g.Event.Payload, w, w.Event.Payload)
		}
	}
}
