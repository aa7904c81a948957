package main

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/sqlite"
)

func TestCopy(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, k storeKind) {
		src, tgt := fixture(t, k), k.newStore(t)
		var res copyReport
		decode(t, cli(t, nil, "copy", "--from", src.url, "--to", tgt.url, "--json"), &res)
		if res.IDs != 5 || res.IDsCopied != 5 || res.EventsCopied != 13 || res.SnapshotsCopied != 2 || !res.Verified || len(res.Mismatches) != 0 ||
			res.From != src.url || res.To != tgt.url {
			t.Errorf("copy: %+v (the 13 stored events)", res)
		}
		equalContents(t, "source and target", contents(t, src.url), contents(t, tgt.url))

		// Again: nothing to copy, still verified.
		cli(t, nil, "copy", "--from", src.url, "--to", tgt.url).want(t, 0,
			[]string{"copied 0 events of 0 ids (5 ids in the source) and 0 snapshots", "verified 5 ids"}, nil)

		// A copy into memory reads back whole.
		cli(t, nil, "copy", "--from", src.url, "--to", "memory:").want(t, 0, []string{"verified 5 ids"}, nil)

		// One store twice, a missing source, missing flags.
		cli(t, nil, "copy", "--from", src.url, "--to", src.alias()).want(t, 2, nil, []string{"name the same store"})
		missing := k.newStore(t)
		cli(t, nil, "copy", "--from", missing.url, "--to", "memory:").want(t, 1, nil, append([]string{"source:"}, missing.missing()...))
		cli(t, nil, "copy", "--from", src.url).want(t, 2, nil, []string{"set both --from URL and --to URL"})
	})
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

// An SQLite source copied into a store of each kind, interrupted twice and
// resumed; then back into a new SQLite file, interrupted once.
func TestCopyInterruptedAndResumed(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, k storeKind) {
		dir := t.TempDir()
		src, tgt := filepath.Join(dir, "src.db"), k.newStore(t)
		const nIDs, perID = 300, 20
		bigSource(t, src, nIDs, perID)
		args := []string{"copy", "--from", "sqlite:" + src, "--to", tgt.url, "--batch", "50"}
		// The target is created by the first run.
		cli(t, nil, append(args, "--limit-events", "1000")...).want(t, exitInterrupted, nil, []string{"interrupted after copying 1,000 events", "run the same command again to resume"})
		if !tgt.exists(t) {
			t.Fatal("copy did not create the target")
		}
		// A second interruption, further on.
		cli(t, nil, append(args, "--limit-events", "2000")...).want(t, exitInterrupted, nil, []string{"interrupted after copying 2,000 events"})
		n := 0
		for _, evs := range contents(t, tgt.url).events {
			n += len(evs)
		}
		if n < 3000 || n >= nIDs*perID {
			t.Fatalf("%d events in the target after two interrupted copies", n)
		}
		var res copyReport
		decode(t, cli(t, nil, append(args, "--json")...), &res)
		if !res.Verified || res.IDs != nIDs || len(res.Mismatches) != 0 || res.From != "sqlite:"+src || res.To != tgt.url {
			t.Errorf("resumed copy: %+v", res)
		}
		source := contents(t, "sqlite:"+src)
		equalContents(t, "source, target", source, contents(t, tgt.url))
		cli(t, nil, args...).want(t, 0, []string{"copied 0 events of 0 ids", "verified 300 ids"}, nil)

		// The copy also carries the tag index: queries by tag agree.
		var counts []int
		for _, url := range []string{"sqlite:" + src, tgt.url} {
			withStore(t, url, func(s *stores.Store) {
				count := 0
				for _, err := range s.Queries.(query.EventsByTagQuery).CurrentEventsByTag(context.Background(), "t1", query.NoOffset()) {
					if err != nil {
						t.Fatal(err)
					}
					count++
				}
				counts = append(counts, count)
			})
		}
		if counts[0] == 0 || counts[0] != counts[1] {
			t.Errorf("events tagged t1: %d in the source, %d in the target", counts[0], counts[1])
		}

		// And back: to a new SQLite file, interrupted once.
		back := filepath.Join(dir, "back.db")
		backArgs := []string{"copy", "--from", tgt.url, "--to", "sqlite:" + back, "--batch", "200"}
		cli(t, nil, append(backArgs, "--limit-events", "1000")...).want(t, exitInterrupted, nil, []string{"interrupted after copying 1,", "run the same command again to resume"})
		res = copyReport{}
		decode(t, cli(t, nil, append(backArgs, "--json")...), &res)
		if !res.Verified || res.IDs != nIDs || len(res.Mismatches) != 0 {
			t.Errorf("copy back: %+v", res)
		}
		equalContents(t, "source, copy of the copy", source, contents(t, "sqlite:"+back))
	})
}

func TestCopyRefusesADivergedTarget(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, k storeKind) {
		src, tgt := fixture(t, k), k.newStore(t)
		s, err := stores.New().Open(context.Background(), tgt.url, stores.Create)
		if err != nil {
			t.Fatal(err)
		}
		w := journal.AtomicWrite{PersistenceID: "Order|o-1"}
		for seq := int64(1); seq <= 3; seq++ {
			w.Events = append(w.Events, journal.Repr{PersistenceID: "Order|o-1", SequenceNr: seq, Payload: []byte("x"), SerializerID: 4})
		}
		if res, err := s.Journal.Write(context.Background(), []journal.AtomicWrite{w}); err != nil || res != nil {
			t.Fatal(res, err)
		}
		_ = s.Close()
		cli(t, nil, "copy", "--from", src.url, "--to", tgt.url).want(t, 1, nil, []string{`the target has events of "Order|o-1" up to 3, beyond the source's highest sequence number 2`})
	})
}
