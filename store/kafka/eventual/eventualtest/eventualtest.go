// Package eventualtest checks an eventual store against what the Scala
// Kafka Journal's replicator wrote: it replicates the records the Scala
// library wrote to a real broker (../shared/fixtures/kafka-journal/
// scala-written) and compares every head, event and pointer read back
// through eventual.Tables with the rows of the Scala replicator's
// keyspace.
package eventualtest

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/annals-go/annals/store/kafka/eventual"
	"github.com/annals-go/annals/store/kafka/wire"
	"github.com/annals-go/annals/store/kafka/wire/wiretest"
)

// Now is the time the Scala replicator ran at: replicating at the same
// time gives the same created dates and expiry dates.
var Now = time.Date(2026, 11, 22, 13, 27, 47, 15e6, time.UTC)

// Files are the Scala-written topics, named by their file.
var Files = []string{"journal-anchors.jsonl", "journal-fixtures.jsonl"}

// ReplicateScalaWritten replicates the Scala-written records into t in
// two polls a topic, then all again one record a poll (as after a crash
// before the pointer moved), which must change nothing.
func ReplicateScalaWritten(tb testing.TB, t eventual.Tables) {
	tb.Helper()
	for _, file := range Files {
		records := wiretest.ScalaWritten(tb, file)
		half := len(records) / 2
		for _, part := range [][2]int{{0, half}, {half, len(records)}} {
			if err := eventual.Replicate(tb.Context(), t, records[part[0]:part[1]], Now); err != nil {
				tb.Fatalf("%s: %v", file, err)
			}
		}
		for i := range records {
			if err := eventual.Replicate(tb.Context(), t, records[i:i+1], Now.Add(time.Hour)); err != nil {
				tb.Fatalf("%s again: %v", file, err)
			}
		}
	}
}

type metaRow struct {
	Topic       string `json:"topic"`
	ID          string `json:"id"`
	Segment     int64  `json:"segment"`
	Partition   int32  `json:"partition"`
	Offset      int64  `json:"offset"`
	SegmentSize int    `json:"segment_size"`
	SeqNr       int64  `json:"seq_nr"`
	DeleteTo    int64  `json:"delete_to"`
	ExpireAfter struct {
		Days        int64
		Nanoseconds int64
	} `json:"expire_after"`
	ExpireOn time.Time `json:"expire_on"`
}

type journalRow struct {
	Topic       string            `json:"topic"`
	ID          string            `json:"id"`
	Segment     int64             `json:"segment"`
	SeqNr       int64             `json:"seq_nr"`
	Partition   int32             `json:"partition"`
	Offset      int64             `json:"offset"`
	Timestamp   time.Time         `json:"timestamp"`
	Origin      string            `json:"origin"`
	Version     string            `json:"version"`
	Tags        []string          `json:"tags"`
	Metadata    string            `json:"metadata"`
	PayloadType string            `json:"payload_type"`
	PayloadTxt  string            `json:"payload_txt"`
	PayloadBin  string            `json:"payload_bin"`
	Headers     map[string]string `json:"headers"`
}

// CompareWithScala checks t, after ReplicateScalaWritten, against the
// Scala replicator's keyspace.
func CompareWithScala(tb testing.TB, t eventual.Tables) {
	tb.Helper()
	ctx := tb.Context()
	f, err := os.Open(filepath.Join(wiretest.Dir(tb), "scala-written", "cassandra-journal-keyspace.jsonl"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	rowsOf := map[eventual.Key]int{}
	heads := map[eventual.Key]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var table struct {
			Table string `json:"_table"`
		}
		line := sc.Bytes()
		if err := json.Unmarshal(line, &table); err != nil {
			tb.Fatal(err)
		}
		switch table.Table {
		case "metajournal":
			var m metaRow
			if err := json.Unmarshal(line, &m); err != nil {
				tb.Fatal(err)
			}
			key := eventual.Key{ID: m.ID, Topic: m.Topic}
			heads[key] = true
			h, ok, err := t.Head(ctx, key)
			if err != nil || !ok {
				tb.Errorf("head of %v: %v, found %v", key, err, ok)
				continue
			}
			var wantExpiry string
			if m.ExpireAfter.Days != 0 || m.ExpireAfter.Nanoseconds != 0 {
				wantExpiry = fmt.Sprint(time.Duration(m.ExpireAfter.Days)*24*time.Hour+time.Duration(m.ExpireAfter.Nanoseconds), m.ExpireOn.UTC().Format(time.DateOnly))
			}
			var gotExpiry string
			if h.Expiry != nil {
				gotExpiry = fmt.Sprint(h.Expiry.After, h.Expiry.On.Format(time.DateOnly))
			}
			got := fmt.Sprint(h.MetaSegment, h.Partition, h.Offset, h.SegmentSize, h.SeqNr, h.DeleteTo, gotExpiry)
			want := fmt.Sprint(m.Segment, m.Partition, m.Offset, m.SegmentSize, m.SeqNr, m.DeleteTo, wantExpiry)
			if got != want {
				tb.Errorf("head of %v: segment, partition, offset, segment size, seq nr, delete to, expiry = %s; Scala wrote %s", key, got, want)
			}
		case "journal":
			var r journalRow
			if err := json.Unmarshal(line, &r); err != nil {
				tb.Fatal(err)
			}
			key := eventual.Key{ID: r.ID, Topic: r.Topic}
			rowsOf[key]++
			var got []eventual.Record
			for rec, err := range t.Records(ctx, key, r.Segment, r.SeqNr, r.SeqNr) {
				if err != nil {
					tb.Fatal(err)
				}
				got = append(got, rec)
			}
			if len(got) != 1 {
				tb.Errorf("%v event %d: %d records", key, r.SeqNr, len(got))
				continue
			}
			compareRecord(tb, key, got[0], r)
		case "pointer2":
			var p struct {
				Topic     string `json:"topic"`
				Partition int32  `json:"partition"`
				Offset    int64  `json:"offset"`
			}
			if err := json.Unmarshal(line, &p); err != nil {
				tb.Fatal(err)
			}
			if off, ok, err := t.Pointer(ctx, p.Topic, p.Partition); err != nil || !ok || off != p.Offset {
				tb.Errorf("pointer of %s/%d = %d, %v, %v; Scala wrote %d", p.Topic, p.Partition, off, ok, err, p.Offset)
			}
		}
	}
	// No more events than the Scala keyspace has, and no heads of purged
	// journals.
	for _, file := range Files {
		for _, rec := range wiretest.ScalaWritten(tb, file) {
			key := eventual.Key{ID: string(rec.Key), Topic: rec.Topic}
			n := 0
			for _, err := range t.Records(ctx, key, 0, 1, 1<<62) {
				if err != nil {
					tb.Fatal(err)
				}
				n++
			}
			if n != rowsOf[key] {
				tb.Errorf("%v has %d events, Scala's keyspace %d", key, n, rowsOf[key])
			}
			if _, ok, err := t.Head(ctx, key); err != nil || ok != heads[key] {
				tb.Errorf("%v has a head: %v (%v); in Scala's keyspace: %v", key, ok, err, heads[key])
			}
		}
	}
}

func compareRecord(tb testing.TB, key eventual.Key, g eventual.Record, w journalRow) {
	tb.Helper()
	meta, err := g.MetadataJSON()
	if err != nil {
		tb.Fatal(err)
	}
	var typ, txt, bin string
	bin = "0x"
	if p := g.Event.Payload; p != nil {
		typ = string(p.Type)
		if p.Type == wire.Binary {
			bin = "0x" + hex.EncodeToString(p.Data)
		} else {
			txt = string(p.Data)
		}
	}
	tags := slices.Clone(g.Event.Tags)
	slices.Sort(tags)
	wantTags := slices.Clone(w.Tags)
	slices.Sort(wantTags)
	gotHeaders, _ := json.Marshal(g.Headers)
	wantHeaders, _ := json.Marshal(w.Headers)
	got := fmt.Sprint(g.Partition, g.Offset, g.Timestamp.UTC(), g.Origin, g.Version, tags, meta, typ, txt, bin, string(gotHeaders))
	want := fmt.Sprint(w.Partition, w.Offset, w.Timestamp.UTC(), w.Origin, w.Version, wantTags, w.Metadata, w.PayloadType, w.PayloadTxt, w.PayloadBin, string(wantHeaders))
	if got != want {
		tb.Errorf("%v event %d:\n got %s\nwant %s", key, w.SeqNr, got, want)
	}
}
