package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/snapshot"
)

func copyCommand() *command {
	return &command{
		name: "copy", summary: "copy journals and snapshots between stores, resumable, verified",
		help: `Copies every persistence id's events and snapshots from one store to
another (for example from SQLite to PostgreSQL), keeping sequence numbers,
write timestamps, writers, tags, metadata, serializer ids and manifests.
The target is created if missing. Each id is copied from the target's
highest sequence number on, in atomic writes of at most --batch events,
so an interrupted copy (Ctrl-C, a crash) resumes where it stopped when run
again; Ctrl-C stops after the current write, says "interrupted" and
exits 130. Snapshots the target already has are skipped. Events deleted in the
source stay deleted in the target, and the target keeps each id's highest
sequence number; for an id whose events were all deleted, the target gets
one placeholder event at that number, deleted at once (a live query of the
target that runs during the copy may see it). Offsets, global orderings
and projection state are not copied: projections of the target start over.

At the end the copy is verified: for every id, the number of events, the
highest sequence number and the snapshots' sequence numbers must be equal
in both stores (exit code 1 otherwise). A progress line with the rate is
shown on a terminal.

--json prints {"from", "to", "ids", "ids_copied", "events_copied",
"snapshots_copied", "seconds", "events_per_second", "verified" (false
with --verify=false), "mismatches": ["..."]}.`,
		examples: []string{
			"annals copy --from sqlite:./annals.db --to postgres://annals@localhost/annals",
			"annals copy --from sqlite:./annals.db --to sqlite:./backup.db --type Account",
		},
		maxArgs: 0,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			c := &copier{}
			fs.StringVar(&c.from, "from", "", "the source store `URL`")
			fs.StringVar(&c.to, "to", "", "the target store `URL` (created if missing)")
			fs.StringVar(&c.entityType, "type", "", "copy only the ids of this entity `TYPE`")
			fs.IntVar(&c.batch, "batch", 1000, "`N` events per write")
			fs.BoolVar(&c.snapshots, "snapshots", true, "copy snapshots too (--snapshots=false: events only)")
			fs.BoolVar(&c.verifying, "verify", true, "compare the stores at the end (--verify=false: do not)")
			c.asJSON = jsonFlag(fs)
			fs.Int64Var(&c.limit, "limit-events", 0, "(hidden) stop after copying about this many events, as an interruption would")
			return c.command
		},
	}
}

// copyReport is the --json shape of copy.
type copyReport struct {
	From            string   `json:"from"` // the URLs, passwords redacted
	To              string   `json:"to"`
	IDs             int64    `json:"ids"` // ids in the source
	IDsCopied       int64    `json:"ids_copied"`
	EventsCopied    int64    `json:"events_copied"`
	SnapshotsCopied int64    `json:"snapshots_copied"`
	Seconds         float64  `json:"seconds"`
	EventsPerSecond int64    `json:"events_per_second"`
	Verified        bool     `json:"verified"` // false with --verify=false
	Mismatches      []string `json:"mismatches"`
}

// command opens the stores, copies, verifies and prints the report.
func (c *copier) command(e *env, _ []string) error {
	if c.from == "" || c.to == "" {
		return usagef("set both --from URL and --to URL")
	}
	if c.batch < 1 {
		return usagef("--batch must be at least 1")
	}
	src, err := e.mux.Open(e.ctx, c.from, stores.Existing)
	if err != nil {
		return fmt.Errorf("source: %w", err)
	}
	defer src.Close()
	tgt, err := e.mux.Open(e.ctx, c.to, stores.Create)
	if err != nil {
		return fmt.Errorf("target: %w", err)
	}
	defer tgt.Close()
	if sameStore(src, tgt) {
		return usagef("--from and --to name the same store (%s)", src.Where)
	}
	c.src, c.tgt = src, tgt
	ids, ok := src.Queries.(query.PersistenceIDsQuery)
	if !ok {
		return fmt.Errorf("the source (%s) cannot list its persistence ids", src.Kind)
	}
	c.ids = ids
	out := copyReport{From: stores.Redact(c.from), To: stores.Redact(c.to), Mismatches: []string{}}
	start := time.Now()
	stop := statusLine(e.stderr, func() string { return c.status(time.Since(start)) })
	err = c.run(e.ctx)
	stop()
	elapsed := time.Since(start)
	out.IDs, out.IDsCopied, out.EventsCopied, out.SnapshotsCopied = c.seen.Load(), c.idsCopied, c.events.Load(), c.snapsCopied
	out.Seconds, out.EventsPerSecond = elapsed.Seconds(), rate(out.EventsCopied, elapsed)
	if err != nil {
		if errors.Is(err, errStopped) || e.ctx.Err() != nil {
			return fmt.Errorf("%w after copying %s events of %s ids; run the same command again to resume", errInterrupted, num(out.EventsCopied), num(out.IDsCopied))
		}
		return err
	}
	if c.verifying {
		if out.Mismatches, err = c.verify(e.ctx); err != nil {
			if e.ctx.Err() != nil {
				return fmt.Errorf("%w while verifying, after copying %s events of %s ids; run the same command again to verify", errInterrupted, num(out.EventsCopied), num(out.IDsCopied))
			}
			return fmt.Errorf("verify: %w", err)
		}
		out.Verified = len(out.Mismatches) == 0
	}
	if err := c.report(e, out, elapsed); err != nil {
		return err
	}
	if len(out.Mismatches) > 0 {
		return fmt.Errorf("verification failed: %d ids differ between the stores", len(out.Mismatches))
	}
	return nil
}

// report prints out, as JSON or for people.
func (c *copier) report(e *env, out copyReport, elapsed time.Duration) error {
	if *c.asJSON {
		return writeJSON(e.stdout, out)
	}
	fmt.Fprintf(e.stdout, "copied %s events of %s ids (%s ids in the source) and %s snapshots in %s (%s events/s)\n",
		num(out.EventsCopied), num(out.IDsCopied), num(out.IDs), num(out.SnapshotsCopied), dur(elapsed), num(out.EventsPerSecond))
	switch {
	case !c.verifying:
		fmt.Fprintln(e.stdout, "not verified (--verify=false)")
	case out.Verified:
		fmt.Fprintf(e.stdout, "verified %s ids: event counts, highest sequence numbers and snapshots equal\n", num(out.IDs))
	default:
		for i, m := range out.Mismatches {
			if i == 20 {
				fmt.Fprintf(e.stdout, "... and %d more\n", len(out.Mismatches)-i)
				break
			}
			fmt.Fprintln(e.stdout, "differs: "+m)
		}
	}
	return nil
}

// sameStore reports whether a and b are one store (memory stores never
// are).
func sameStore(a, b *stores.Store) bool {
	if a.Kind != b.Kind || a.Kind == "memory" {
		return false
	}
	pa, errA := filepath.Abs(a.Where)
	pb, errB := filepath.Abs(b.Where)
	return a.Where == b.Where || (errA == nil && errB == nil && pa == pb)
}

// errStopped: --limit-events was reached.
var errStopped = errors.New("stopped")

// placeholderManifest marks the event written, and deleted at once, to give
// the target the highest sequence number of an id whose events were all
// deleted in the source.
const placeholderManifest = "annals-copy-placeholder"

// idsPage is how many ids copy lists at a time.
const idsPage = 1000

// copier copies one store into another.
type copier struct {
	from, to  string // --from, --to
	verifying bool   // --verify
	asJSON    *bool

	src, tgt   *stores.Store
	ids        query.PersistenceIDsQuery
	entityType string
	batch      int
	snapshots  bool
	limit      int64 // stop after this many events (0: no limit)

	pending       []journal.AtomicWrite
	pendingEvents int

	totalIDs               int64 // from the source's statistics; 0 when unknown
	seen, events           atomic.Int64
	idsCopied, snapsCopied int64
}

// status is the progress line.
func (c *copier) status(elapsed time.Duration) string {
	ids := num(c.seen.Load())
	if c.totalIDs > 0 {
		ids = fmt.Sprintf("%d%% %s/%s", 100*c.seen.Load()/c.totalIDs, ids, num(c.totalIDs))
	}
	return fmt.Sprintf("copying: ids %s, %s events copied, %s events/s", ids, num(c.events.Load()), num(rate(c.events.Load(), elapsed)))
}

// eachID calls f for each id of the source, in ascending order.
func (c *copier) eachID(ctx context.Context, f func(pid string) error) error {
	after := ""
	for {
		ids, err := c.ids.CurrentPersistenceIDs(ctx, c.entityType, after, idsPage)
		if err != nil {
			return err
		}
		for _, pid := range ids {
			if err := f(pid); err != nil {
				return err
			}
		}
		if len(ids) < idsPage {
			return nil
		}
		after = ids[len(ids)-1]
	}
}

func (c *copier) run(ctx context.Context) error {
	if sr, ok := c.src.Admin.(admin.StatsReader); ok {
		if st, err := sr.Stats(ctx); err == nil {
			for _, t := range st.EntityTypes {
				if c.entityType == "" || t.EntityType == c.entityType {
					c.totalIDs += t.PersistenceIDs
				}
			}
		}
	}
	err := c.eachID(ctx, func(pid string) error {
		if err := c.copyID(ctx, pid); err != nil {
			if errors.Is(err, errStopped) || ctx.Err() != nil {
				return err
			}
			return fmt.Errorf("copying %q: %w ('annals verify' on the source lists every id it cannot read)", pid, err)
		}
		c.seen.Add(1)
		return nil
	})
	if err != nil {
		return err
	}
	return c.flush(ctx)
}

// copyID copies the events after the target's highest number, reproduces
// the source's deleted prefix, and copies the snapshots.
func (c *copier) copyID(ctx context.Context, pid string) error {
	srcHigh, err := c.src.Journal.HighestSequenceNr(ctx, pid, 0)
	if err != nil {
		return err
	}
	tgtHigh, err := c.tgt.Journal.HighestSequenceNr(ctx, pid, 0)
	if err != nil {
		return err
	}
	if tgtHigh > srcHigh {
		return fmt.Errorf("the target has events of %q up to %d, beyond the source's highest sequence number %d: it is not a copy of this source", pid, tgtHigh, srcHigh)
	}
	if tgtHigh < srcHigh {
		c.idsCopied++
		var chunk []journal.Repr
		n := 0
		for r, err := range c.src.Journal.Replay(ctx, pid, tgtHigh+1, srcHigh, math.MaxInt64) {
			if err != nil {
				return err
			}
			n++
			if chunk = append(chunk, r); len(chunk) == c.batch {
				if err := c.add(ctx, pid, chunk); err != nil {
					return err
				}
				chunk = nil
			}
		}
		if len(chunk) > 0 {
			if err := c.add(ctx, pid, chunk); err != nil {
				return err
			}
		}
		if n == 0 {
			// Every event up to srcHigh is deleted in the source.
			if err := c.placeholder(ctx, pid, srcHigh); err != nil {
				return err
			}
		}
	}
	if err := c.deletedPrefix(ctx, pid, srcHigh); err != nil {
		return err
	}
	if c.snapshots {
		return c.copySnapshots(ctx, pid)
	}
	return nil
}

// add queues one atomic write, writing the queue when it is full.
func (c *copier) add(ctx context.Context, pid string, events []journal.Repr) error {
	c.pending = append(c.pending, journal.AtomicWrite{PersistenceID: pid, Events: events})
	c.pendingEvents += len(events)
	if c.pendingEvents >= c.batch {
		return c.flush(ctx)
	}
	return nil
}

// flush writes the queued atomic writes in one call.
func (c *copier) flush(ctx context.Context) error {
	if len(c.pending) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	res, err := c.tgt.Journal.Write(ctx, c.pending)
	if err != nil {
		return fmt.Errorf("write to the target (outcome unknown; run again to resume): %w", err)
	}
	for i, r := range res {
		if r != nil {
			w := c.pending[i]
			return fmt.Errorf("the target refused events %d–%d of %q: %w", w.Events[0].SequenceNr, w.Events[len(w.Events)-1].SequenceNr, w.PersistenceID, r)
		}
	}
	c.events.Add(int64(c.pendingEvents))
	c.pending, c.pendingEvents = nil, 0
	if c.limit > 0 && c.events.Load() >= c.limit {
		return errStopped
	}
	return nil
}

// placeholder gives the target the highest number seq of an id without
// events: it writes one event at seq and deletes up to it.
func (c *copier) placeholder(ctx context.Context, pid string, seq int64) error {
	if err := c.flush(ctx); err != nil {
		return err
	}
	e := journal.Repr{PersistenceID: pid, SequenceNr: seq, Payload: []byte{}, SerializerID: serialization.BytesID, Manifest: placeholderManifest, WriterID: "annals-copy"}
	res, err := c.tgt.Journal.Write(ctx, []journal.AtomicWrite{{PersistenceID: pid, Events: []journal.Repr{e}}})
	if err == nil && res != nil {
		err = res[0]
	}
	if err != nil {
		return fmt.Errorf("keep the highest sequence number %d of %q: %w", seq, pid, err)
	}
	return c.tgt.Journal.DeleteTo(ctx, pid, seq)
}

// deletedPrefix deletes, in the target, the events below the source's
// first stored event.
func (c *copier) deletedPrefix(ctx context.Context, pid string, srcHigh int64) error {
	first, err := firstSeq(ctx, c.src.Journal, pid, srcHigh)
	if err != nil || first <= 1 {
		return err
	}
	tgtFirst, err := firstSeq(ctx, c.tgt.Journal, pid, first-1)
	if err != nil || tgtFirst >= first {
		return err
	}
	return c.tgt.Journal.DeleteTo(ctx, pid, first-1)
}

// firstSeq is the sequence number of pid's first stored event up to to,
// or to+1 when there is none.
func firstSeq(ctx context.Context, j journal.Journal, pid string, to int64) (int64, error) {
	for r, err := range j.Replay(ctx, pid, 1, to, 1) {
		if err != nil {
			return 0, err
		}
		return r.SequenceNr, nil
	}
	return to + 1, nil
}

// copySnapshots saves the source's snapshots of pid that the target does
// not have, or has with other contents.
func (c *copier) copySnapshots(ctx context.Context, pid string) error {
	snaps, err := listSnapshots(ctx, c.src.Snapshots, pid, 0, math.MaxInt64)
	if err != nil {
		return err
	}
	for _, sn := range snaps {
		seq := sn.Metadata.SequenceNr
		have, ok, err := c.tgt.Snapshots.Load(ctx, pid, snapshot.Criteria{MinSequenceNr: seq, MaxSequenceNr: seq})
		if err != nil {
			return err
		}
		if ok && have.Metadata.Timestamp.Equal(sn.Metadata.Timestamp) && have.SerializerID == sn.SerializerID && have.Manifest == sn.Manifest && bytes.Equal(have.Payload, sn.Payload) {
			continue
		}
		if err := c.tgt.Snapshots.Save(ctx, sn); err != nil {
			return fmt.Errorf("save snapshot %d of %q in the target: %w", seq, pid, err)
		}
		c.snapsCopied++
	}
	return nil
}

// verify compares every id of the source with the target.
func (c *copier) verify(ctx context.Context) ([]string, error) {
	mismatches := []string{}
	err := c.eachID(ctx, func(pid string) error {
		var figures [2]struct {
			highest, events int64
			snaps           []int64
		}
		for i, s := range []*stores.Store{c.src, c.tgt} {
			f := &figures[i]
			var err error
			if f.highest, err = s.Journal.HighestSequenceNr(ctx, pid, 0); err != nil {
				return err
			}
			for _, err := range s.Journal.Replay(ctx, pid, 1, math.MaxInt64, math.MaxInt64) {
				if err != nil {
					return err
				}
				f.events++
			}
			if c.snapshots {
				snaps, err := listSnapshots(ctx, s.Snapshots, pid, 0, math.MaxInt64)
				if err != nil {
					return err
				}
				for _, sn := range snaps {
					f.snaps = append(f.snaps, sn.Metadata.SequenceNr)
				}
			}
		}
		src, tgt := figures[0], figures[1]
		switch {
		case src.highest != tgt.highest:
			mismatches = append(mismatches, fmt.Sprintf("%q: highest sequence number %d in the source, %d in the target", pid, src.highest, tgt.highest))
		case src.events != tgt.events:
			mismatches = append(mismatches, fmt.Sprintf("%q: %d events in the source, %d in the target", pid, src.events, tgt.events))
		case fmt.Sprint(src.snaps) != fmt.Sprint(tgt.snaps):
			mismatches = append(mismatches, fmt.Sprintf("%q: snapshots %v in the source, %v in the target", pid, src.snaps, tgt.snaps))
		}
		return nil
	})
	return mismatches, err
}
