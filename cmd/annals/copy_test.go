package main

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/sqlite"
)

// storeContents is everything a store holds for its ids, ordering aside.
type storeContents struct {
	highest   map[string]int64
	events    map[string][]journal.Repr
	snapshots map[string][]snapshot.Snapshot
}

func contents(t *testing.T, path string) storeContents {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ids, err := s.Queries().CurrentPersistenceIDs(ctx, "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	c := storeContents{map[string]int64{}, map[string][]journal.Repr{}, map[string][]snapshot.Snapshot{}}
	for _, pid := range ids {
		if c.highest[pid], err = s.Journal().HighestSequenceNr(ctx, pid, 0); err != nil {
			t.Fatal(err)
		}
		for r, err := range s.Journal().Replay(ctx, pid, 1, math.MaxInt64, math.MaxInt64) {
			if err != nil {
				t.Fatal(err)
			}
			r.Ordering = 0
			c.events[pid] = append(c.events[pid], r)
		}
		if c.snapshots[pid], err = listSnapshots(ctx, s.Snapshots(), pid, 0, math.MaxInt64); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// sameContents fails the test unless the two stores hold the same ids,
// highest numbers, events (every field, byte for byte) and snapshots.
func sameContents(t *testing.T, srcPath, tgtPath string) {
	t.Helper()
	src, tgt := contents(t, srcPath), contents(t, tgtPath)
	if !reflect.DeepEqual(src.highest, tgt.highest) {
		t.Errorf("highest numbers differ:\nsource %v\ntarget %v", src.highest, tgt.highest)
	}
	for pid, evs := range src.events {
		if !reflect.DeepEqual(evs, tgt.events[pid]) {
			t.Errorf("events of %s differ:\nsource %+v\ntarget %+v", pid, evs, tgt.events[pid])
		}
	}
	if len(src.events) != len(tgt.events) {
		t.Errorf("%d ids with events in the source, %d in the target", len(src.events), len(tgt.events))
	}
	if !reflect.DeepEqual(src.snapshots, tgt.snapshots) {
		t.Errorf("snapshots differ:\nsource %+v\ntarget %+v", src.snapshots, tgt.snapshots)
	}
}

type copyResult struct {
	From            string   `json:"from"`
	To              string   `json:"to"`
	IDs             int64    `json:"ids"`
	IDsCopied       int64    `json:"ids_copied"`
	EventsCopied    int64    `json:"events_copied"`
	SnapshotsCopied int64    `json:"snapshots_copied"`
	Seconds         float64  `json:"seconds"`
	EventsPerSecond int64    `json:"events_per_second"`
	Verified        bool     `json:"verified"`
	Mismatches      []string `json:"mismatches"`
}

func TestCopy(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := fixture(t, dir)
	tgt := filepath.Join(dir, "copy.db")
	var res copyResult
	decode(t, cli(t, nil, "copy", "--from", "sqlite:"+src, "--to", "sqlite:"+tgt, "--json"), &res)
	if res.IDs != 5 || res.IDsCopied != 5 || res.EventsCopied != 13 || res.SnapshotsCopied != 2 || !res.Verified || len(res.Mismatches) != 0 {
		t.Errorf("copy: %+v (the 13 stored events)", res)
	}
	sameContents(t, src, tgt)

	// Again: nothing to copy, still verified.
	cli(t, nil, "copy", "--from", "sqlite:"+src, "--to", "sqlite:"+tgt).want(t, 0,
		[]string{"copied 0 events of 0 ids (5 ids in the source) and 0 snapshots", "verified 5 ids"}, nil)

	// A copy into memory reads back whole.
	cli(t, nil, "copy", "--from", "sqlite:"+src, "--to", "memory:").want(t, 0, []string{"verified 5 ids"}, nil)

	// One store twice, a missing source, missing flags.
	cli(t, nil, "copy", "--from", "sqlite:"+src, "--to", "sqlite:"+filepath.Join(dir, ".", "annals.db")).want(t, 2, nil, []string{"name the same store"})
	cli(t, nil, "copy", "--from", "sqlite:"+filepath.Join(dir, "nope.db"), "--to", "memory:").want(t, 1, nil, []string{"source: no database at", "annals init"})
	cli(t, nil, "copy", "--from", "sqlite:"+src).want(t, 2, nil, []string{"set both --from URL and --to URL"})
}

// bigSource writes ids × perID events (JSON, tagged), deletes a prefix of
// every seventh id and all events of every thirteenth, and snapshots every
// fifth.
func bigSource(t *testing.T, path string, ids, perID int) {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, path, sqlite.WithSynchronous(sqlite.SyncNormal))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var ws []journal.AtomicWrite
	for i := range ids {
		pid := fmt.Sprintf("Big|%04d", i)
		w := journal.AtomicWrite{PersistenceID: pid}
		for seq := int64(1); seq <= int64(perID); seq++ {
			w.Events = append(w.Events, journal.Repr{PersistenceID: pid, SequenceNr: seq, Payload: fmt.Appendf(nil, `{"i":%d,"seq":%d}`, i, seq),
				SerializerID: serialization.JSONID, Manifest: "E", WriterID: "w", Tags: []string{fmt.Sprintf("t%d", i%3)},
				Timestamp: base.Add(time.Duration(i*perID) * time.Millisecond).Add(time.Duration(seq) * time.Microsecond)})
		}
		ws = append(ws, w)
	}
	if res, err := s.Journal().Write(ctx, ws); err != nil || res != nil {
		t.Fatal(res, err)
	}
	for i := range ids {
		pid := fmt.Sprintf("Big|%04d", i)
		switch {
		case i%13 == 0:
			err = s.Journal().DeleteTo(ctx, pid, int64(perID))
		case i%7 == 0:
			err = s.Journal().DeleteTo(ctx, pid, int64(perID/2))
		}
		if err != nil {
			t.Fatal(err)
		}
		if i%5 == 0 {
			if err := s.Snapshots().Save(ctx, snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: pid, SequenceNr: int64(perID), Timestamp: base}, Payload: []byte("state"), SerializerID: serialization.BytesID}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestCopyInterruptedAndResumed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src, tgt := filepath.Join(dir, "src.db"), filepath.Join(dir, "tgt.db")
	const ids, perID = 300, 20
	bigSource(t, src, ids, perID)
	args := []string{"copy", "--from", "sqlite:" + src, "--to", "sqlite:" + tgt, "--batch", "50"}
	cli(t, nil, append(args, "--limit-events", "1000")...).want(t, 1, nil, []string{"interrupted after copying 1,000 events", "run the same command again to resume"})
	// A second interruption, further on.
	cli(t, nil, append(args, "--limit-events", "2000")...).want(t, 1, nil, []string{"interrupted after copying 2,000 events"})
	partial := contents(t, tgt)
	n := 0
	for _, evs := range partial.events {
		n += len(evs)
	}
	if n < 3000 || n >= ids*perID {
		t.Fatalf("%d events in the target after two interrupted copies", n)
	}
	var res copyResult
	decode(t, cli(t, nil, append(args, "--json")...), &res)
	if !res.Verified || res.IDs != ids {
		t.Errorf("resumed copy: %+v", res)
	}
	sameContents(t, src, tgt)

	// The copy also carries the tag index: queries by tag agree.
	var counts []int
	for _, path := range []string{src, tgt} {
		s, err := sqlite.Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		count := 0
		for _, err := range s.Queries().CurrentEventsByTag(context.Background(), "t1", query.NoOffset()) {
			if err != nil {
				t.Fatal(err)
			}
			count++
		}
		_ = s.Close()
		counts = append(counts, count)
	}
	if counts[0] == 0 || counts[0] != counts[1] {
		t.Errorf("events tagged t1: %d in the source, %d in the target", counts[0], counts[1])
	}
}

func TestCopyRefusesADivergedTarget(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := fixture(t, dir)
	tgt := filepath.Join(dir, "tgt.db")
	s, err := sqlite.Open(context.Background(), tgt)
	if err != nil {
		t.Fatal(err)
	}
	w := journal.AtomicWrite{PersistenceID: "Order|o-1"}
	for seq := int64(1); seq <= 3; seq++ {
		w.Events = append(w.Events, journal.Repr{PersistenceID: "Order|o-1", SequenceNr: seq, Payload: []byte("x"), SerializerID: 4})
	}
	if res, err := s.Journal().Write(context.Background(), []journal.AtomicWrite{w}); err != nil || res != nil {
		t.Fatal(res, err)
	}
	_ = s.Close()
	cli(t, nil, "copy", "--from", "sqlite:"+src, "--to", "sqlite:"+tgt).want(t, 1, nil, []string{`the target has events of "Order|o-1" up to 3, beyond the source's highest sequence number 2`})
}
