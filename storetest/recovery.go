package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/recovery"
	"github.com/annals-go/annals/snapshot"
)

// recoveryCase is one recovery read and its expected result.
type recoveryCase struct {
	name string
	rule string
	// setup writes the id's history: events, snapshots, deletions.
	setup func(t tb, j journal.Journal, s snapshot.Store, pid string)
	req   recovery.Request // PersistenceID is filled in
	// want: the highest number, the snapshot's number (0: none, unless
	// snapshotAtZero: the one saved at 0), the events' numbers and More.
	highest, snapshot int64
	snapshotAtZero    bool
	events            []int64
	more              bool
}

// recoveryRules is the recovery suite: the rules of recovery.Reader over
// s.Recovery, each read of a history written through s.Journal and
// s.Snapshots also checked against the three-call read (recovery.Read) of
// the same history.
func recoveryRules(s Store) []rule {
	var rules []rule
	for _, c := range recoveryCases() {
		rules = append(rules, rule{c.name, c.rule, func(t tb) { readRecovery(t, s, c) }})
	}
	if br, ok := s.Recovery.(recovery.BatchReader); ok {
		rules = append(rules, batchRecoveryRules(s, br)...)
	}
	return append(rules,
		rule{"InvalidArguments", "a bad request is refused with journal.ErrInvalidArgument", func(t tb) {
			for _, req := range []recovery.Request{{}, {PersistenceID: "Kit|x", ToSequenceNr: -1}, {PersistenceID: "Kit|x", MaxEvents: -1}} {
				if _, err := s.Recovery.ReadRecovery(testContext(t), req); !errors.Is(err, journal.ErrInvalidArgument) {
					t.Errorf("ReadRecovery(%+v) = %v, want journal.ErrInvalidArgument", req, err)
				}
			}
		}},
		rule{"ReadsOwnSnapshots", "a reader reads its own snapshots, or none, and claims no other store's", func(t tb) {
			r := s.Recovery
			if !r.ReadsSnapshotsOf(s.Snapshots) || !r.ReadsSnapshotsOf(nil) {
				t.Errorf("ReadsSnapshotsOf(own) = %v, ReadsSnapshotsOf(nil) = %v, want true and true", r.ReadsSnapshotsOf(s.Snapshots), r.ReadsSnapshotsOf(nil))
			}
			if r.ReadsSnapshotsOf(foreignSnapshots{}) {
				t.Error("ReadsSnapshotsOf(a store of no database of the reader's) = true, want false")
			}
		}})
}

// batchRecoveryRules are the rules of a recovery.BatchReader: a group
// read answers each request as ReadRecovery does, in order.
func batchRecoveryRules(s Store, br recovery.BatchReader) []rule {
	return []rule{
		{"BatchEqualsSingleReads", "ReadRecoveries answers each request, in order, as ReadRecovery answers it alone: every recovery case the store is held to in one call, each case twice", func(t tb) {
			cases := recoveryCases()
			var reqs []recovery.Request
			var want []recoveryCase
			var pids []string
			for _, c := range cases {
				if _, skipped := s.Exceptions["recovery/"+c.name]; skipped {
					continue // the store is excused from the single read's rule
				}
				pid := uniqueID(t, "KitRecoveryBatch")
				c.setup(t, s.Journal, s.Snapshots, pid)
				req := c.req
				req.PersistenceID = pid
				// Each case twice, the second copies after all the first:
				// a store may not answer a request with its neighbour's rows.
				reqs = append(reqs, req)
				want = append(want, c)
				pids = append(pids, pid)
			}
			reqs = append(reqs, reqs...)
			want = append(want, want...)
			pids = append(pids, pids...)
			got, err := br.ReadRecoveries(testContext(t), reqs)
			if err != nil {
				t.Fatalf("ReadRecoveries of %d requests: %v", len(reqs), err)
			}
			if len(got) != len(reqs) {
				t.Fatalf("ReadRecoveries of %d requests returned %d results", len(reqs), len(got))
			}
			for i, req := range reqs {
				checkRecovery(t, got[i], want[i], pids[i])
				alone, err := br.ReadRecovery(testContext(t), req)
				if err != nil {
					t.Fatalf("ReadRecovery(%s): %v", want[i].name, err)
				}
				if !sameRecovery(got[i], alone) {
					t.Errorf("%s: ReadRecoveries' result %d differs from ReadRecovery's:\n got %s\nwant %s", want[i].name, i, describeRecovery(got[i]), describeRecovery(alone))
				}
			}
		}},
		{"BatchInvalidArguments", "ReadRecoveries refuses no request, or a bad one among good ones, with journal.ErrInvalidArgument", func(t tb) {
			good := recovery.Request{PersistenceID: uniqueID(t, "KitRecoveryBatch")}
			for _, reqs := range [][]recovery.Request{nil, {good, {}}, {good, {PersistenceID: "Kit|x", MaxEvents: -1}}} {
				if _, err := br.ReadRecoveries(testContext(t), reqs); !errors.Is(err, journal.ErrInvalidArgument) {
					t.Errorf("ReadRecoveries(%+v) = %v, want journal.ErrInvalidArgument", reqs, err)
				}
			}
		}},
	}
}

// foreignSnapshots is a snapshot store of no database: no reader reads
// its snapshots. Its methods are not called.
type foreignSnapshots struct{ snapshot.Store }

// readRecovery writes c's history of a new id and checks the reader's
// recovery of it, and that it equals the three-call read's.
func readRecovery(t tb, s Store, c recoveryCase) {
	j, snaps := s.Journal, s.Snapshots
	pid := uniqueID(t, "KitRecovery")
	c.setup(t, j, snaps, pid)
	req := c.req
	req.PersistenceID = pid
	got, err := s.Recovery.ReadRecovery(testContext(t), req)
	if err != nil {
		t.Fatalf("ReadRecovery: %v", err)
	}
	checkRecovery(t, got, c, pid)
	ref, err := recovery.Read(testContext(t), j, snaps, req)
	if err != nil {
		t.Fatalf("recovery.Read: %v", err)
	}
	if !sameRecovery(got, ref) {
		t.Errorf("ReadRecovery differs from the three-call read:\n got %s\nwant %s", describeRecovery(got), describeRecovery(ref))
	}
}

// recoveryCases are the recovery reads the suite checks.
func recoveryCases() []recoveryCase {
	latest, none, upTo := snapshot.Latest(), snapshot.None(), func(n int64) *snapshot.Criteria { return &snapshot.Criteria{MaxSequenceNr: n} }
	tenWithSnapshots := func(t tb, j journal.Journal, s snapshot.Store, pid string) {
		mustWrite(t, j, atomicRange(pid, 1, 4), atomicRange(pid, 5, 10))
		saveSnapshot(t, s, pid, 3)
		saveSnapshot(t, s, pid, 6)
	}
	ten := func(t tb, j journal.Journal, _ snapshot.Store, pid string) {
		mustWrite(t, j, atomicRange(pid, 1, 10))
	}
	tenAfterSnapshotAtZero := func(t tb, j journal.Journal, s snapshot.Store, pid string) {
		saveSnapshot(t, s, pid, 0)
		ten(t, j, s, pid)
	}
	return []recoveryCase{
		{name: "UnknownID", rule: "an unknown id reads highest 0, no snapshot, no events",
			setup: func(tb, journal.Journal, snapshot.Store, string) {}, req: recovery.Request{Snapshot: &latest}},
		{name: "EventsOnly", rule: "without snapshot criteria no snapshot is read and the events start at 1",
			setup: tenWithSnapshots, req: recovery.Request{}, highest: 10, events: seqs(1, 10)},
		{name: "NoCriteriaSkipsSnapshotAtZero", rule: "without snapshot criteria not even a snapshot saved at 0 is read",
			setup: tenAfterSnapshotAtZero, req: recovery.Request{}, highest: 10, events: seqs(1, 10)},
		{name: "NoneSkipsSnapshotAtZero", rule: "with None criteria not even a snapshot saved at 0 is read",
			setup: tenAfterSnapshotAtZero, req: recovery.Request{Snapshot: &none}, highest: 10, events: seqs(1, 10)},
		{name: "LatestSnapshot", rule: "the youngest matching snapshot, then the events after it",
			setup: tenWithSnapshots, req: recovery.Request{Snapshot: &latest}, highest: 10, snapshot: 6, events: seqs(7, 10)},
		{name: "CriteriaSelectOlderSnapshot", rule: "criteria bound the snapshot; the events follow the one selected",
			setup: tenWithSnapshots, req: recovery.Request{Snapshot: upTo(5)}, highest: 10, snapshot: 3, events: seqs(4, 10)},
		{name: "NoSnapshotMatches", rule: "criteria no snapshot matches read the events from 1",
			setup: tenWithSnapshots, req: recovery.Request{Snapshot: upTo(2)}, highest: 10, events: seqs(1, 10)},
		{name: "ToSequenceNr", rule: "events stop at ToSequenceNr; the highest number does not",
			setup: tenWithSnapshots, req: recovery.Request{Snapshot: &latest, ToSequenceNr: 8}, highest: 10, snapshot: 6, events: seqs(7, 8)},
		{name: "SnapshotAtTheEnd", rule: "a snapshot of the last event leaves no events to read",
			setup: func(t tb, j journal.Journal, s snapshot.Store, pid string) {
				ten(t, j, s, pid)
				saveSnapshot(t, s, pid, 10)
			}, req: recovery.Request{Snapshot: &latest}, highest: 10, snapshot: 10},
		{name: "MaxEventsSetsMore", rule: "at most MaxEvents events, and More when later ones may exist",
			setup: ten, req: recovery.Request{MaxEvents: 4}, highest: 10, events: seqs(1, 4), more: true},
		{name: "MaxEventsAfterSnapshot", rule: "MaxEvents counts the events after the snapshot; the highest number is the id's",
			setup: func(t tb, j journal.Journal, s snapshot.Store, pid string) {
				ten(t, j, s, pid)
				saveSnapshot(t, s, pid, 4)
			}, req: recovery.Request{Snapshot: &latest, MaxEvents: 3}, highest: 10, snapshot: 4, events: seqs(5, 7), more: true},
		{name: "MaxEventsReachingTheEndAfterSnapshot", rule: "no More when MaxEvents events after the snapshot reach the last one",
			setup: func(t tb, j journal.Journal, s snapshot.Store, pid string) {
				ten(t, j, s, pid)
				saveSnapshot(t, s, pid, 4)
			}, req: recovery.Request{Snapshot: &latest, MaxEvents: 6}, highest: 10, snapshot: 4, events: seqs(5, 10)},
		{name: "SnapshotAboveTheEvents", rule: "a snapshot numbered above the id's last event leaves no events to read; the highest number stays the events'",
			setup: func(t tb, j journal.Journal, s snapshot.Store, pid string) {
				mustWrite(t, j, atomicRange(pid, 1, 3))
				saveSnapshot(t, s, pid, 5)
			}, req: recovery.Request{Snapshot: &latest}, highest: 3, snapshot: 5},
		{name: "SnapshotAtZeroThenEvents", rule: "a snapshot saved at 0 that the criteria select comes with every event",
			setup: tenAfterSnapshotAtZero, req: recovery.Request{Snapshot: &latest}, highest: 10, snapshot: 0, snapshotAtZero: true, events: seqs(1, 10)},
		{name: "SnapshotAtZeroFirstEventDeleted", rule: "a snapshot saved at 0 comes with the events kept after a deletion",
			setup: func(t tb, j journal.Journal, s snapshot.Store, pid string) {
				tenAfterSnapshotAtZero(t, j, s, pid)
				deleteTo(t, j, pid, 2)
			}, req: recovery.Request{Snapshot: &latest}, highest: 10, snapshot: 0, snapshotAtZero: true, events: seqs(3, 10)},
		{name: "SnapshotsEventDeleted", rule: "a snapshot whose own event was deleted, and nothing after it: the highest number is the deleted one",
			setup: func(t tb, j journal.Journal, s snapshot.Store, pid string) {
				mustWrite(t, j, atomicRange(pid, 1, 5))
				saveSnapshot(t, s, pid, 5)
				deleteTo(t, j, pid, 5)
			}, req: recovery.Request{Snapshot: &latest}, highest: 5, snapshot: 5},
		{name: "MaxEventsReachingTheEnd", rule: "no More when the last event read is the last one",
			setup: ten, req: recovery.Request{MaxEvents: 10}, highest: 10, events: seqs(1, 10)},
		{name: "MaxEventsReachingTheBound", rule: "no More when the last event read is ToSequenceNr",
			setup: ten, req: recovery.Request{MaxEvents: 3, ToSequenceNr: 3}, highest: 10, events: seqs(1, 3)},
		{name: "DeletedPrefix", rule: "deleted events are not read; the highest number counts them",
			setup: func(t tb, j journal.Journal, s snapshot.Store, pid string) {
				ten(t, j, s, pid)
				saveSnapshot(t, s, pid, 4)
				deleteTo(t, j, pid, 4)
			}, req: recovery.Request{Snapshot: &latest}, highest: 10, snapshot: 4, events: seqs(5, 10)},
		{name: "AllDeleted", rule: "an id whose events were all deleted keeps its highest number",
			setup: func(t tb, j journal.Journal, s snapshot.Store, pid string) {
				ten(t, j, s, pid)
				deleteTo(t, j, pid, 10)
			}, req: recovery.Request{Snapshot: &latest}, highest: 10},
		{name: "DeletedPastTheSnapshot", rule: "events deleted beyond the snapshot are skipped: the events read are those kept after it",
			setup: func(t tb, j journal.Journal, s snapshot.Store, pid string) {
				tenWithSnapshots(t, j, s, pid)
				deleteTo(t, j, pid, 8)
			}, req: recovery.Request{Snapshot: &latest}, highest: 10, snapshot: 6, events: seqs(9, 10)},
		{name: "DeletedWithoutSnapshotThenWritten", rule: "an id whose events were all deleted, with no snapshot, takes its next event at the highest number + 1, and a recovery reads it alone",
			setup: func(t tb, j journal.Journal, s snapshot.Store, pid string) {
				mustWrite(t, j, atomicRange(pid, 1, 3))
				deleteTo(t, j, pid, 3)
				mustWrite(t, j, atomicRange(pid, 4, 4))
			}, req: recovery.Request{Snapshot: &latest}, highest: 4, events: seqs(4, 4)},
		{name: "DeletedPrefixWithoutSnapshotThenWritten", rule: "after a deletion of a prefix with no snapshot, a recovery reads the events kept and the ones written since, ascending",
			setup: func(t tb, j journal.Journal, s snapshot.Store, pid string) {
				mustWrite(t, j, atomicRange(pid, 1, 3))
				deleteTo(t, j, pid, 2)
				mustWrite(t, j, atomicRange(pid, 4, 5))
			}, req: recovery.Request{Snapshot: &latest, MaxEvents: 2}, highest: 5, events: seqs(3, 4), more: true},
	}
}

// saveSnapshot saves a snapshot of pid at seq whose payload names both.
func saveSnapshot(t tb, s snapshot.Store, pid string, seq int64) {
	t.Helper()
	snap := snapshot.Snapshot{
		Metadata:     snapshot.Metadata{PersistenceID: pid, SequenceNr: seq, Timestamp: time.Now()},
		Payload:      snapshotPayload(pid, seq),
		SerializerID: 4,
		Manifest:     "state",
	}
	if err := s.Save(testContext(t), snap); err != nil {
		t.Fatalf("Save snapshot %d: %v", seq, err)
	}
}

func snapshotPayload(pid string, seq int64) []byte { return fmt.Appendf(nil, "%s@%d", pid, seq) }

// checkRecovery compares a reader's answer with the case's expectation,
// field by field for the snapshot and the events.
func checkRecovery(t tb, got recovery.Result, c recoveryCase, pid string) {
	t.Helper()
	if got.Highest != c.highest {
		t.Errorf("Highest = %d, want %d", got.Highest, c.highest)
	}
	wantSnapshot := c.snapshot != 0 || c.snapshotAtZero
	switch {
	case !wantSnapshot && got.HasSnapshot:
		t.Errorf("a snapshot (%d) was read, want none", got.Snapshot.Metadata.SequenceNr)
	case wantSnapshot && !got.HasSnapshot:
		t.Errorf("no snapshot was read, want snapshot %d", c.snapshot)
	case wantSnapshot:
		m := got.Snapshot.Metadata
		if m.PersistenceID != pid || m.SequenceNr != c.snapshot || m.Timestamp.IsZero() ||
			!bytes.Equal(got.Snapshot.Payload, snapshotPayload(pid, c.snapshot)) || got.Snapshot.SerializerID != 4 || got.Snapshot.Manifest != "state" {
			t.Errorf("snapshot = %+v (payload %q), want snapshot %d of %s as saved", m, got.Snapshot.Payload, c.snapshot, pid)
		}
	}
	var nrs []int64
	for _, e := range got.Events {
		nrs = append(nrs, e.SequenceNr)
		want := ev(pid, e.SequenceNr)
		if e.PersistenceID != pid || !bytes.Equal(e.Payload, want.Payload) || e.SerializerID != want.SerializerID || e.Manifest != want.Manifest || e.WriterID != want.WriterID {
			t.Errorf("event %d = %+v, want it as written", e.SequenceNr, e)
		}
	}
	if !slices.Equal(nrs, c.events) {
		t.Errorf("events %v, want %v", nrs, c.events)
	}
	if got.More != c.more {
		t.Errorf("More = %v, want %v", got.More, c.more)
	}
}

func sameRecovery(a, b recovery.Result) bool {
	if a.Highest != b.Highest || a.HasSnapshot != b.HasSnapshot || a.More != b.More || len(a.Events) != len(b.Events) {
		return false
	}
	if a.HasSnapshot && (a.Snapshot.Metadata.SequenceNr != b.Snapshot.Metadata.SequenceNr ||
		!a.Snapshot.Metadata.Timestamp.Equal(b.Snapshot.Metadata.Timestamp) || !bytes.Equal(a.Snapshot.Payload, b.Snapshot.Payload)) {
		return false
	}
	for i := range a.Events {
		x, y := a.Events[i], b.Events[i]
		if x.SequenceNr != y.SequenceNr || !bytes.Equal(x.Payload, y.Payload) || !x.Timestamp.Equal(y.Timestamp) || x.Ordering != y.Ordering ||
			x.Slice != y.Slice || x.EntityType != y.EntityType || !slices.Equal(x.Tags, y.Tags) || !bytes.Equal(x.Metadata, y.Metadata) {
			return false
		}
	}
	return true
}

func describeRecovery(r recovery.Result) string {
	var nrs []int64
	for _, e := range r.Events {
		nrs = append(nrs, e.SequenceNr)
	}
	snap := int64(0)
	if r.HasSnapshot {
		snap = r.Snapshot.Metadata.SequenceNr
	}
	return fmt.Sprintf("highest %d, snapshot %d, events %v, more %v", r.Highest, snap, nrs, r.More)
}
