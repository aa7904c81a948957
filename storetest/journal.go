package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/journal"
)

type journalRule struct {
	name string
	rule string
	run  func(t tb, j journal.Journal, s Store)
}

// journalRules is the journal suite: the rules of journal.Journal over
// s.Journal, and CloseEndsCalls over an instance of s.Open's.
func journalRules(s Store) []rule {
	var rules []rule
	for _, r := range journalCases() {
		rules = append(rules, rule{r.name, r.rule, func(t tb) { r.run(t, s.Journal, s) }})
	}
	return append(rules, rule{"CloseEndsCalls", "calls after Close fail with an error wrapping journal.ErrClosed, and a second Close is harmless", func(t tb) {
		o := own(t, s)
		if o.Journal == nil {
			t.Fatal("storetest: the Store that Store.Open returned has no Journal")
		}
		closeEndsCalls(t, o.Journal)
	}})
}

func closeEndsCalls(t tb, j journal.Journal) {
	pid := uniqueID(t, "KitClose")
	ctx := testContext(t)
	mustWrite(t, j, single(pid, 1))
	if err := j.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := j.Close(); err != nil {
		t.Errorf("a second Close: %v, want nil", err)
	}
	_, err := j.Write(ctx, []journal.AtomicWrite{single(pid, 2)})
	check := func(call string, err error) {
		t.Helper()
		if !errors.Is(err, journal.ErrClosed) {
			t.Errorf("%s after Close: %v, want an error wrapping journal.ErrClosed", call, err)
		}
	}
	check("Write", err)
	_, err = j.HighestSequenceNr(ctx, pid, 0)
	check("HighestSequenceNr", err)
	check("DeleteTo", j.DeleteTo(ctx, pid, 1))
	var replayErr error
	for _, err := range j.Replay(ctx, pid, 1, maxSeq, maxSeq) {
		if err != nil {
			replayErr = err
			break
		}
	}
	check("Replay", replayErr)
}

// ev builds event seq of pid with a payload naming both.
func ev(pid string, seq int64) journal.Repr {
	return journal.Repr{
		PersistenceID: pid,
		SequenceNr:    seq,
		Payload:       fmt.Appendf(nil, "%s-%d", pid, seq),
		SerializerID:  4,
		Manifest:      "m",
		WriterID:      "writer-1",
	}
}

func single(pid string, seq int64) journal.AtomicWrite {
	return journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{ev(pid, seq)}}
}

func atomicRange(pid string, from, to int64) journal.AtomicWrite {
	w := journal.AtomicWrite{PersistenceID: pid}
	for s := from; s <= to; s++ {
		w.Events = append(w.Events, ev(pid, s))
	}
	return w
}

// mustWrite writes ws in one call and fails the test unless all are stored.
func mustWrite(t tb, j journal.Journal, ws ...journal.AtomicWrite) {
	t.Helper()
	res, err := j.Write(testContext(t), ws)
	if err != nil {
		t.Fatalf("Write: outcome unknown: %v", err)
	}
	if res != nil && len(res) != len(ws) {
		t.Fatalf("Write returned %d results for %d atomic writes; rule: nil or exactly one result per atomic write", len(res), len(ws))
	}
	for i, e := range res {
		if e != nil {
			t.Fatalf("Write: atomic write %d rejected: %v", i, e)
		}
	}
}

// writeFive stores events 1..5 of a new id as five atomic writes in one call,
// as Akka's JournalSpec does before each case.
func writeFive(t tb, j journal.Journal) string {
	t.Helper()
	pid := uniqueID(t, "KitJournal")
	ws := make([]journal.AtomicWrite, 5)
	for i := range ws {
		ws[i] = single(pid, int64(i+1))
	}
	mustWrite(t, j, ws...)
	return pid
}

// replaySeqs collects the sequence numbers a replay yields.
func replaySeqs(t tb, j journal.Journal, pid string, from, to, limit int64) []int64 {
	t.Helper()
	var got []int64
	for e, err := range j.Replay(testContext(t), pid, from, to, limit) {
		if err != nil {
			t.Fatalf("Replay(%d, %d, %d): %v", from, to, limit, err)
		}
		got = append(got, e.SequenceNr)
	}
	return got
}

func highest(t tb, j journal.Journal, pid string, from int64) int64 {
	t.Helper()
	n, err := j.HighestSequenceNr(testContext(t), pid, from)
	if err != nil {
		t.Fatalf("HighestSequenceNr: %v", err)
	}
	return n
}

func deleteTo(t tb, j journal.Journal, pid string, to int64) {
	t.Helper()
	if err := j.DeleteTo(testContext(t), pid, to); err != nil {
		t.Fatalf("DeleteTo(%d): %v", to, err)
	}
}

func seqs(from, to int64) []int64 {
	var s []int64
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

const maxSeq = math.MaxInt64

func journalCases() []journalRule {
	rules := []journalRule{}
	type replayCase struct {
		name, rule      string
		deleteTo        int64
		from, to, limit int64
		want            []int64
	}
	replays := []replayCase{
		{"ReplayAll", "a replay with from=1, to=max, max=max yields every event in ascending order", 0, 1, maxSeq, maxSeq, seqs(1, 5)},
		{"ReplayLowerBound", "a replay yields no event below its lower bound", 0, 3, maxSeq, maxSeq, seqs(3, 5)},
		{"ReplayUpperBound", "a replay yields no event above its upper bound", 0, 1, 3, maxSeq, seqs(1, 3)},
		{"ReplayLowerAndUpperBound", "a replay yields exactly the events within both bounds", 0, 2, 3, maxSeq, seqs(2, 3)},
		{"ReplayCountLimit", "a replay yields at most max events, the lowest first", 0, 1, maxSeq, 3, seqs(1, 3)},
		{"ReplayBoundsWithLimit", "a replay with bounds and a limit yields the first max events within the bounds", 0, 2, 5, 2, seqs(2, 3)},
		{"ReplaySingleByEqualBounds", "a replay with from = to yields that single event", 0, 2, 2, maxSeq, seqs(2, 2)},
		{"ReplaySingleByLimitOne", "a replay with max = 1 yields the single event at from", 0, 2, maxSeq, 1, seqs(2, 2)},
		{"ReplayNothingForLimitZero", "a replay with max = 0 yields nothing", 0, 1, maxSeq, 0, nil},
		{"ReplayNothingWhenFromAboveTo", "a replay with from > to yields nothing", 0, 3, 2, maxSeq, nil},
		{"ReplayFromZeroReadsAsOne", "a replay with from = 0 starts at sequence number 1", 0, 0, maxSeq, maxSeq, seqs(1, 5)},
		{"NoReplayOfDeletedRange", "events deleted by DeleteTo are never replayed", 3, 1, maxSeq, maxSeq, seqs(4, 5)},
		{"DeletedPrefixLowerBoundInPrefix", "a replay whose lower bound lies in a deleted prefix starts at the first kept event", 3, 2, maxSeq, maxSeq, seqs(4, 5)},
		{"DeletedPrefixBoundsAcrossPrefix", "a replay whose bounds span a deleted prefix yields only kept events within them", 3, 2, 4, maxSeq, seqs(4, 4)},
		{"DeletedPrefixLimitCountsKeptEvents", "a replay's limit counts only the events it yields, not deleted ones", 3, 1, maxSeq, 1, seqs(4, 4)},
		{"DeletedPrefixRangeInsidePrefix", "a replay whose whole range was deleted yields nothing", 3, 1, 3, maxSeq, nil},
	}
	for _, c := range replays {
		rules = append(rules, journalRule{c.name, c.rule, func(t tb, j journal.Journal, _ Store) {
			pid := writeFive(t, j)
			if c.deleteTo > 0 {
				deleteTo(t, j, pid, c.deleteTo)
			}
			if got := replaySeqs(t, j, pid, c.from, c.to, c.limit); !slices.Equal(got, c.want) {
				t.Errorf("Replay(from=%d, to=%d, max=%d) after DeleteTo(%d) yielded %v, want %v; rule: %s", c.from, c.to, c.limit, c.deleteTo, got, c.want, c.rule)
			}
		}})
	}

	rules = append(rules,
		journalRule{"UnknownIDHighestIsZero", "the highest sequence number of an id never written is 0, and its replay is empty", unknownIDHighestIsZero},
		journalRule{"FarNumbersReadableOrRefused", "a write far above an id's highest (up to math.MaxInt64) is stored and read back in full, or refused with ErrInvalidArgument and nothing stored", farNumbers},
		journalRule{"HighestWithoutReplay", "HighestSequenceNr returns the highest stored number without a replay, whatever the from hint", highestWithoutReplay},
		journalRule{"HighestKeptAfterPartialDelete", "deleting some events does not lower the highest sequence number", highestKeptAfterPartialDelete},
		journalRule{"HighestKeptAfterDeletingAll", "deleting every event keeps the highest sequence number, also when to is beyond it", highestKeptAfterDeletingAll},
		journalRule{"HighestKeptAfterAWriteBelowTheDeleted", "a write at a number below the deleted ones (a stale writer's), stored or refused, does not lower the highest sequence number", highestKeptAfterAWriteBelowTheDeleted},
		journalRule{"WriteAfterDeletingAll", "after deleting every event, writing continues from the kept highest number", writeAfterDeletingAll},
		journalRule{"DeleteIsIdempotent", "deleting an already deleted range, or an id never written, is not an error", deleteIsIdempotent},
		journalRule{"FieldsRoundTrip", "every field a writer sets is replayed unchanged (timestamps to the microsecond, in UTC, or the time of the write where the store declares StoreTimestamps), and the store fills slice and entity type", roundTrip},
		journalRule{"MetadataRoundTrip", "event metadata is replayed byte for byte; an event without metadata replays with none", metadataRoundTrip},
		journalRule{"ZeroTimestampFilledByStore", "a zero timestamp is replaced by the store's clock at write", zeroTimestampFilledByStore},
		journalRule{"GlobalOrderingGrows", "where the store assigns Ordering, it is positive and grows in write order across ids", globalOrderingGrows},
		journalRule{"AtomicWriteAllOrNothing", "an atomic write whose later event conflicts stores none of its events", atomicWriteAllOrNothing},
		journalRule{"SecondWriterConflict", "a second write of a stored (id, seq) fails with a *ConflictError wrapping ErrSequenceConflict and ErrRejected, and the stored event is unchanged", secondWriterConflict},
		journalRule{"RejectedWriteKeepsNeighbours", "one rejected atomic write in a batch is reported at its index and its neighbours are stored", rejectedWriteKeepsNeighbours},
		journalRule{"OversizedWriteAmongSmall", "one atomic write with a payload above the store's limit, among small writes of other ids in one call, is rejected at its own index with nothing of it stored, every other write is stored, and the refused id's next write is taken at the refused numbers", oversizedWriteAmongSmall},
		journalRule{"LongTagStoredOrRefused", "an event with a 70,000-byte tag is stored and replayed with it, or its write is refused with ErrInvalidArgument and nothing stored; either way the id's next write is stored and the id replays", longTag},
		journalRule{"InvalidArgumentsRejected", "invalid arguments are rejected with an error wrapping ErrInvalidArgument that names the problem, and nothing is stored", invalidArguments},
		journalRule{"ConcurrentWritersKeepOrder", "100 ids written concurrently by 100 goroutines keep per-id order with no gaps", concurrentWriters},
		journalRule{"ReplayHonoursCancellation", "replay and highest sequence number end with the context's error once it is cancelled", cancellation},
		journalRule{"LargeReplayStreams", "a replay of 100,000 events streams with bounded memory and stops early when the consumer stops", largeReplay},
	)
	return rules
}

// unknownIDHighestIsZero: the highest sequence number of an id never written is 0, and its replay is empty.
func unknownIDHighestIsZero(t tb, j journal.Journal, _ Store) {
	pid := uniqueID(t, "KitJournal")
	if n := highest(t, j, pid, 0); n != 0 {
		t.Errorf("HighestSequenceNr of unknown id = %d, want 0", n)
	}
	if got := replaySeqs(t, j, pid, 1, maxSeq, maxSeq); len(got) != 0 {
		t.Errorf("replay of unknown id yielded %v, want nothing", got)
	}
}

// farNumbers: an id whose numbers start far above 1, or jump far past its
// highest, is either stored and read back in full (Replay from any bound,
// HighestSequenceNr) or refused with ErrInvalidArgument, with nothing
// stored; a store never acknowledges events it cannot read.
func farNumbers(t tb, j journal.Journal, _ Store) {
	cases := []struct {
		name      string
		before    int64 // events 1..before are stored first
		from, to  int64 // the far write
		replayAts []int64
	}{
		{"top of the range", 0, maxSeq - 1, maxSeq, []int64{1, maxSeq - 1, maxSeq}},
		{"first at 1,000,001", 0, 1_000_001, 1_000_002, []int64{1, 1_000_001, 1_000_002}},
		{"first at 5,000,001", 0, 5_000_001, 5_000_001, []int64{1, 5_000_001}},
		{"2 then 2,000,001", 2, 2_000_001, 2_000_002, []int64{1, 3, 2_000_002}},
	}
	for _, c := range cases {
		pid := uniqueID(t, "KitJournal")
		ctx := testContext(t)
		if c.before > 0 {
			mustWrite(t, j, atomicRange(pid, 1, c.before))
		}
		// Not atomicRange: its loop would wrap around at the top.
		far := journal.AtomicWrite{PersistenceID: pid}
		for seq := c.from; ; seq++ {
			far.Events = append(far.Events, ev(pid, seq))
			if seq == c.to {
				break
			}
		}
		res, err := j.Write(ctx, []journal.AtomicWrite{far})
		if err != nil {
			t.Fatalf("%s: Write: outcome unknown: %v", c.name, err)
		}
		var refused error
		if res != nil {
			refused = res[0]
		}
		stored := seqs(1, c.before)
		want := c.before
		switch {
		case refused == nil:
			want = c.to
			for seq := c.from; ; seq++ {
				stored = append(stored, seq)
				if seq == c.to {
					break
				}
			}
		case !errors.Is(refused, journal.ErrInvalidArgument) || !errors.Is(refused, journal.ErrRejected):
			t.Errorf("%s: Write = %v, want nil (stored) or a rejection wrapping ErrInvalidArgument", c.name, refused)
			continue
		}
		for _, from := range c.replayAts {
			var got []int64
			for e, err := range j.Replay(ctx, pid, from, maxSeq, maxSeq) {
				if err != nil {
					t.Fatalf("%s: Replay(from=%d): %v", c.name, from, err)
				}
				if got = append(got, e.SequenceNr); len(got) > len(stored) {
					break // a replay that wraps around yields forever
				}
			}
			var wantReplay []int64
			for _, s := range stored {
				if s >= from {
					wantReplay = append(wantReplay, s)
				}
			}
			if !slices.Equal(got, wantReplay) {
				t.Errorf("%s (write result %v): Replay(from=%d, to=max) yielded %v, want %v", c.name, refused, from, got, wantReplay)
			}
		}
		if n := highest(t, j, pid, 0); n != want {
			t.Errorf("%s (write result %v): HighestSequenceNr = %d, want %d", c.name, refused, n, want)
		}
	}
}

// highestWithoutReplay: HighestSequenceNr returns the highest stored number without a replay, whatever the from hint.
func highestWithoutReplay(t tb, j journal.Journal, _ Store) {
	pid := writeFive(t, j)
	for _, from := range []int64{0, 3, 5} {
		if n := highest(t, j, pid, from); n != 5 {
			t.Errorf("HighestSequenceNr(from=%d) = %d, want 5", from, n)
		}
	}
}

// highestKeptAfterPartialDelete: deleting some events does not lower the highest sequence number.
func highestKeptAfterPartialDelete(t tb, j journal.Journal, _ Store) {
	pid := writeFive(t, j)
	deleteTo(t, j, pid, 3)
	if n := highest(t, j, pid, 0); n != 5 {
		t.Errorf("HighestSequenceNr after DeleteTo(3) = %d, want 5", n)
	}
}

// highestKeptAfterAWriteBelowTheDeleted: events 1–5 deleted, then a write
// at 3 (a writer that recovered before the deletion): whether the store
// takes or refuses it, the highest number stays 5, or the id's next write
// would reuse a number an event already had.
func highestKeptAfterAWriteBelowTheDeleted(t tb, j journal.Journal, _ Store) {
	pid := writeFive(t, j)
	deleteTo(t, j, pid, 5)
	res, err := j.Write(testContext(t), []journal.AtomicWrite{atomicRange(pid, 3, 3)})
	if err != nil {
		t.Fatalf("Write(3) after DeleteTo(5): %v", err)
	}
	stored := res == nil || res[0] == nil
	if n := highest(t, j, pid, 0); n != 5 {
		t.Errorf("HighestSequenceNr after DeleteTo(5) and a write at 3 (stored: %v) = %d, want 5", stored, n)
	}
}

// highestKeptAfterDeletingAll: deleting every event keeps the highest sequence number, also when to is beyond it.
func highestKeptAfterDeletingAll(t tb, j journal.Journal, _ Store) {
	pid := writeFive(t, j)
	deleteTo(t, j, pid, 5)
	if n := highest(t, j, pid, 0); n != 5 {
		t.Errorf("HighestSequenceNr after DeleteTo(5) = %d, want 5", n)
	}
	deleteTo(t, j, pid, maxSeq)
	if n := highest(t, j, pid, 0); n != 5 {
		t.Errorf("HighestSequenceNr after DeleteTo(max) = %d, want 5", n)
	}
	if got := replaySeqs(t, j, pid, 1, maxSeq, maxSeq); len(got) != 0 {
		t.Errorf("replay after deleting all yielded %v, want nothing", got)
	}
}

// writeAfterDeletingAll: after deleting every event, writing continues from the kept highest number.
func writeAfterDeletingAll(t tb, j journal.Journal, _ Store) {
	pid := writeFive(t, j)
	deleteTo(t, j, pid, 5)
	mustWrite(t, j, single(pid, 6))
	if n := highest(t, j, pid, 0); n != 6 {
		t.Errorf("HighestSequenceNr = %d, want 6", n)
	}
	if got := replaySeqs(t, j, pid, 1, maxSeq, maxSeq); !slices.Equal(got, []int64{6}) {
		t.Errorf("replay yielded %v, want [6]", got)
	}
}

// deleteIsIdempotent: deleting an already deleted range, or an id never written, is not an error.
func deleteIsIdempotent(t tb, j journal.Journal, _ Store) {
	pid := writeFive(t, j)
	deleteTo(t, j, pid, 2)
	deleteTo(t, j, pid, 2)
	deleteTo(t, j, pid, 1)
	deleteTo(t, j, uniqueID(t, "KitJournal"), 10)
	if got := replaySeqs(t, j, pid, 1, maxSeq, maxSeq); !slices.Equal(got, seqs(3, 5)) {
		t.Errorf("replay yielded %v, want [3 4 5]", got)
	}
}

// metadataRoundTrip: event metadata is replayed byte for byte; an event without metadata replays with none.
func metadataRoundTrip(t tb, j journal.Journal, _ Store) {
	pid := uniqueID(t, "KitJournal")
	e1, e2 := ev(pid, 1), ev(pid, 2)
	e1.Metadata = []byte{0, 1, 2, 0xff, 'm'}
	mustWrite(t, j, journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{e1, e2}})
	got := replayAll(t, j, pid)
	if len(got) != 2 || !bytes.Equal(got[0].Metadata, e1.Metadata) || len(got[1].Metadata) != 0 {
		t.Errorf("metadata replayed as %v, want [%v, none]", metadataOf(got), e1.Metadata)
	}
}

// zeroTimestampFilledByStore: a zero timestamp is replaced by the store's clock at write.
func zeroTimestampFilledByStore(t tb, j journal.Journal, _ Store) {
	pid := uniqueID(t, "KitJournal")
	before := time.Now().Add(-time.Minute)
	mustWrite(t, j, single(pid, 1))
	got := replayAll(t, j, pid)
	if len(got) != 1 || got[0].Timestamp.Before(before) || got[0].Timestamp.After(time.Now().Add(time.Minute)) {
		t.Errorf("timestamp = %v, want about now", timestampsOf(got))
	}
}

// globalOrderingGrows: where the store assigns Ordering, it is positive and grows in write order across ids.
func globalOrderingGrows(t tb, j journal.Journal, s Store) {
	if !s.GlobalOrdering {
		t.Skip("store does not declare GlobalOrdering")
	}
	a, b := uniqueID(t, "KitJournal"), uniqueID(t, "KitJournal")
	mustWrite(t, j, single(a, 1), single(b, 1))
	mustWrite(t, j, single(a, 2))
	ea, eb := replayAll(t, j, a), replayAll(t, j, b)
	if len(ea) != 2 || len(eb) != 1 {
		t.Fatalf("replayed %d and %d events, want 2 and 1", len(ea), len(eb))
	}
	if !(ea[0].Ordering > 0 && ea[0].Ordering < eb[0].Ordering && eb[0].Ordering < ea[1].Ordering) {
		t.Errorf("orderings a1=%d b1=%d a2=%d, want 0 < a1 < b1 < a2", ea[0].Ordering, eb[0].Ordering, ea[1].Ordering)
	}
}

// atomicWriteAllOrNothing: an atomic write whose later event conflicts stores none of its events.
func atomicWriteAllOrNothing(t tb, j journal.Journal, _ Store) {
	pid := writeFive(t, j)
	// Events 6..8 are new, 5 is stored: the whole write must fail.
	w := atomicRange(pid, 5, 8)
	res, err := j.Write(testContext(t), []journal.AtomicWrite{w})
	if err != nil {
		t.Fatalf("Write: outcome unknown: %v", err)
	}
	if len(res) != 1 || !errors.Is(res[0], journal.ErrSequenceConflict) {
		t.Fatalf("results = %v, want one ErrSequenceConflict", res)
	}
	if got := replaySeqs(t, j, pid, 1, maxSeq, maxSeq); !slices.Equal(got, seqs(1, 5)) {
		t.Errorf("after a failed atomic write the journal holds %v, want [1 2 3 4 5]", got)
	}
	if n := highest(t, j, pid, 0); n != 5 {
		t.Errorf("HighestSequenceNr = %d, want 5", n)
	}
}

// secondWriterConflict: a second write of a stored (id, seq) fails with a *ConflictError wrapping ErrSequenceConflict and ErrRejected, and the stored event is unchanged.
func secondWriterConflict(t tb, j journal.Journal, _ Store) {
	pid := writeFive(t, j)
	dup := ev(pid, 3)
	dup.Payload, dup.WriterID = []byte("from the second writer"), "writer-2"
	res, err := j.Write(testContext(t), []journal.AtomicWrite{{PersistenceID: pid, Events: []journal.Repr{dup}}})
	if err != nil {
		t.Fatalf("Write: outcome unknown: %v", err)
	}
	var ce *journal.ConflictError
	if len(res) != 1 || !errors.As(res[0], &ce) || !errors.Is(res[0], journal.ErrSequenceConflict) || !errors.Is(res[0], journal.ErrRejected) {
		t.Fatalf("results = %v, want one *ConflictError", res)
	}
	if ce.PersistenceID != pid || ce.SequenceNr != 3 {
		t.Errorf("ConflictError names (%q, %d), want (%q, 3)", ce.PersistenceID, ce.SequenceNr, pid)
	}
	got := replayAll(t, j, pid)
	if len(got) != 5 || string(got[2].Payload) != string(ev(pid, 3).Payload) || got[2].WriterID != "writer-1" {
		t.Errorf("stored event 3 changed to payload %q writer %q", got[2].Payload, got[2].WriterID)
	}
}

// rejectedWriteKeepsNeighbours: one rejected atomic write in a batch is reported at its index and its neighbours are stored.
func rejectedWriteKeepsNeighbours(t tb, j journal.Journal, _ Store) {
	a, b, c, d := uniqueID(t, "KitJournal"), uniqueID(t, "KitJournal"), uniqueID(t, "KitJournal"), writeFive(t, j)
	bad := journal.AtomicWrite{PersistenceID: b, Events: []journal.Repr{ev(b, 1), ev(b, 3)}}
	res, err := j.Write(testContext(t), []journal.AtomicWrite{single(a, 1), bad, atomicRange(c, 1, 2), single(d, 2), single(d, 6)})
	if err != nil {
		t.Fatalf("Write: outcome unknown: %v", err)
	}
	if len(res) != 5 {
		t.Fatalf("Write returned %d results, want 5", len(res))
	}
	want := []error{nil, journal.ErrInvalidArgument, nil, journal.ErrSequenceConflict, nil}
	for i, w := range want {
		if (w == nil) != (res[i] == nil) || (w != nil && (!errors.Is(res[i], w) || !errors.Is(res[i], journal.ErrRejected))) {
			t.Errorf("result %d = %v, want %v", i, res[i], w)
		}
	}
	for _, x := range []struct {
		pid  string
		want []int64
	}{{a, seqs(1, 1)}, {b, nil}, {c, seqs(1, 2)}, {d, seqs(1, 6)}} {
		if got := replaySeqs(t, j, x.pid, 1, maxSeq, maxSeq); !slices.Equal(got, x.want) {
			t.Errorf("%s holds %v, want %v", x.pid, got, x.want)
		}
	}
}

// oversizedWriteAmongSmall: one atomic write with a payload above the
// store's limit, among small writes of other ids in one call, is rejected
// at its own index with nothing of it stored, every other write is stored,
// and the refused id's next write is taken at the refused numbers.
func oversizedWriteAmongSmall(t tb, j journal.Journal, s Store) {
	if s.MaxPayloadSize <= 0 {
		t.Skip("the Store declares no MaxPayloadSize")
	}
	ctx := testContext(t)
	big := uniqueID(t, "KitOversize")
	// The big write is an atomic write of a small event and the oversized
	// one, in the middle of the call; small ids before and after it.
	oversized := journal.AtomicWrite{PersistenceID: big, Events: []journal.Repr{ev(big, 1), ev(big, 2)}}
	oversized.Events[1].Payload = bytes.Repeat([]byte{'x'}, s.MaxPayloadSize+1)
	var (
		writes []journal.AtomicWrite
		small  []string
	)
	for i := range 17 {
		if i == 8 {
			writes = append(writes, oversized)
			continue
		}
		pid := uniqueID(t, "KitOversize")
		small = append(small, pid)
		writes = append(writes, single(pid, 1))
	}
	res, err := j.Write(ctx, writes)
	if err != nil {
		t.Fatalf("Write: outcome unknown: %v", err)
	}
	if res == nil {
		t.Fatalf("Write stored every write, want the one with a %d-byte payload (limit %d) at index 8 rejected", s.MaxPayloadSize+1, s.MaxPayloadSize)
	}
	if len(res) != len(writes) {
		t.Fatalf("Write returned %d results, want %d", len(res), len(writes))
	}
	for i, r := range res {
		switch {
		case i == 8 && !errors.Is(r, journal.ErrRejected):
			t.Errorf("result 8 (the oversized write) = %v, want a rejection wrapping ErrRejected", r)
		case i != 8 && r != nil:
			t.Errorf("result %d (a small write of %s) = %v, want nil", i, writes[i].PersistenceID, r)
		}
	}
	for _, pid := range small {
		if got := replaySeqs(t, j, pid, 1, maxSeq, maxSeq); !slices.Equal(got, []int64{1}) {
			t.Errorf("%s holds %v after its write was acknowledged, want [1]", pid, got)
		}
	}
	if got := replaySeqs(t, j, big, 1, maxSeq, maxSeq); len(got) != 0 {
		t.Errorf("the rejected write's id holds %v, want nothing", got)
	}
	if n := highest(t, j, big, 0); n != 0 {
		t.Errorf("HighestSequenceNr of the rejected write's id = %d, want 0", n)
	}
	// The entity that was refused writes again at the same numbers.
	mustWrite(t, j, atomicRange(big, 1, 2))
	if got := replaySeqs(t, j, big, 1, maxSeq, maxSeq); !slices.Equal(got, seqs(1, 2)) {
		t.Errorf("the refused id holds %v after writing 1..2 again, want [1 2]", got)
	}
	if got := replayAll(t, j, big); len(got) == 2 && len(got[1].Payload) > s.MaxPayloadSize {
		t.Errorf("event 2 of the refused id replays with the refused %d-byte payload", len(got[1].Payload))
	}
}

// longTag: an event with a 70,000-byte tag is stored and replayed with it,
// or its write is refused with ErrInvalidArgument and nothing stored;
// either way the id's next write is stored and the id replays.
func longTag(t tb, j journal.Journal, _ Store) {
	pid := uniqueID(t, "KitTag")
	tag := strings.Repeat("t", 70_000)
	e := ev(pid, 1)
	e.Tags = []string{tag}
	res, err := j.Write(testContext(t), []journal.AtomicWrite{{PersistenceID: pid, Events: []journal.Repr{e}}})
	if err != nil {
		t.Fatalf("Write: outcome unknown: %v", err)
	}
	next := int64(1)
	switch {
	case res == nil:
		got := replayAll(t, j, pid)
		if len(got) != 1 || len(got[0].Tags) != 1 || got[0].Tags[0] != tag {
			t.Fatalf("the stored event replays as %d events, tags of %v bytes; want its tag", len(got), tagLengths(got))
		}
		next = 2
	case !errors.Is(res[0], journal.ErrInvalidArgument) || !errors.Is(res[0], journal.ErrRejected):
		t.Fatalf("Write = %v, want nil or a rejection wrapping ErrInvalidArgument", res[0])
	}
	mustWrite(t, j, single(pid, next))
	if got := replaySeqs(t, j, pid, 1, maxSeq, maxSeq); !slices.Equal(got, seqs(1, next)) {
		t.Errorf("the id replays %v, want %v", got, seqs(1, next))
	}
}

func tagLengths(es []journal.Repr) [][]int {
	var out [][]int
	for _, e := range es {
		var ls []int
		for _, tag := range e.Tags {
			ls = append(ls, len(tag))
		}
		out = append(out, ls)
	}
	return out
}

func replayAll(t tb, j journal.Journal, pid string) []journal.Repr {
	t.Helper()
	var got []journal.Repr
	for e, err := range j.Replay(testContext(t), pid, 1, maxSeq, maxSeq) {
		if err != nil {
			t.Fatalf("Replay: %v", err)
		}
		got = append(got, e)
	}
	return got
}

func metadataOf(es []journal.Repr) [][]byte {
	var m [][]byte
	for _, e := range es {
		m = append(m, e.Metadata)
	}
	return m
}

func timestampsOf(es []journal.Repr) []time.Time {
	var ts []time.Time
	for _, e := range es {
		ts = append(ts, e.Timestamp)
	}
	return ts
}

func roundTrip(t tb, j journal.Journal, s Store) {
	pid := uniqueID(t, "KitRound")
	ts := time.Date(2024, 2, 29, 13, 14, 15, 123456000, time.FixedZone("X", 3600))
	in := []journal.Repr{
		{PersistenceID: pid, SequenceNr: 1, Payload: []byte{0, 1, 2, 3, 0xfe, 0xff}, SerializerID: 33, Manifest: "bank.Deposited", Timestamp: ts, WriterID: "w-αβ", Tags: []string{"blue", "green"}, Metadata: []byte("meta")},
		{PersistenceID: pid, SequenceNr: 2, Payload: []byte{}, SerializerID: -7, Manifest: "", Timestamp: ts.Add(time.Microsecond), WriterID: "", Tags: nil},
	}
	before := time.Now().Add(-time.Minute)
	mustWrite(t, j, journal.AtomicWrite{PersistenceID: pid, Events: in})
	after := time.Now().Add(time.Minute)
	got := replayAll(t, j, pid)
	if len(got) != len(in) {
		t.Fatalf("replayed %d events, want %d", len(got), len(in))
	}
	for i, w := range in {
		g := got[i]
		var diffs []string
		if g.PersistenceID != w.PersistenceID || g.SequenceNr != w.SequenceNr {
			diffs = append(diffs, fmt.Sprintf("id/seq %q/%d", g.PersistenceID, g.SequenceNr))
		}
		if !bytes.Equal(g.Payload, w.Payload) {
			diffs = append(diffs, fmt.Sprintf("payload %v", g.Payload))
		}
		if g.SerializerID != w.SerializerID || g.Manifest != w.Manifest || g.WriterID != w.WriterID {
			diffs = append(diffs, fmt.Sprintf("serializer %d manifest %q writer %q", g.SerializerID, g.Manifest, g.WriterID))
		}
		switch {
		case s.StoreTimestamps:
			if g.Timestamp.Before(before) || g.Timestamp.After(after) || g.Timestamp.Location() != time.UTC {
				diffs = append(diffs, fmt.Sprintf("timestamp %v (want the time of the write, in UTC)", g.Timestamp))
			}
		case !g.Timestamp.Equal(w.Timestamp) || g.Timestamp.Location() != time.UTC:
			diffs = append(diffs, fmt.Sprintf("timestamp %v (want %v in UTC)", g.Timestamp, w.Timestamp.UTC()))
		}
		if !slices.Equal(g.Tags, w.Tags) && !(len(g.Tags) == 0 && len(w.Tags) == 0) {
			diffs = append(diffs, fmt.Sprintf("tags %q", g.Tags))
		}
		if !bytes.Equal(g.Metadata, w.Metadata) {
			diffs = append(diffs, fmt.Sprintf("metadata %q", g.Metadata))
		}
		if g.Slice != annals.Slice(pid) || g.EntityType != "KitRound" {
			diffs = append(diffs, fmt.Sprintf("slice %d entity type %q (want %d %q)", g.Slice, g.EntityType, annals.Slice(pid), "KitRound"))
		}
		if len(diffs) > 0 {
			t.Errorf("event %d replayed with %v", i+1, diffs)
		}
	}
}

func invalidArguments(t tb, j journal.Journal, _ Store) {
	ctx := testContext(t)
	pid, other := uniqueID(t, "KitInvalid"), uniqueID(t, "KitInvalid")
	writes := []struct {
		name string
		w    journal.AtomicWrite
		want string
	}{
		{"empty id", journal.AtomicWrite{PersistenceID: "", Events: []journal.Repr{ev("", 1)}}, "empty persistence id"},
		{"no events", journal.AtomicWrite{PersistenceID: pid}, "no events"},
		{"zero sequence number", journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{ev(pid, 0)}}, "sequence number 0"},
		{"negative sequence number", journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{ev(pid, -3)}}, "sequence number -3"},
		{"not consecutive", journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{ev(pid, 1), ev(pid, 2), ev(pid, 4)}}, "not consecutive"},
		{"descending", journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{ev(pid, 2), ev(pid, 1)}}, "not consecutive"},
		{"event of another id", journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{ev(pid, 1), ev(other, 2)}}, "belongs to"},
		{"id with a NUL byte", journal.AtomicWrite{PersistenceID: pid + "\x00", Events: []journal.Repr{ev(pid+"\x00", 1)}}, "NUL"},
		{"id not UTF-8", journal.AtomicWrite{PersistenceID: pid + "\xff", Events: []journal.Repr{ev(pid+"\xff", 1)}}, "UTF-8"},
	}
	for _, c := range writes {
		res, err := j.Write(ctx, []journal.AtomicWrite{c.w})
		if err != nil {
			t.Errorf("%s: outcome unknown: %v; an invalid write is a rejection", c.name, err)
			continue
		}
		if len(res) != 1 || !errors.Is(res[0], journal.ErrRejected) || !errors.Is(res[0], journal.ErrInvalidArgument) {
			t.Errorf("%s: results %v, want one error wrapping ErrRejected and ErrInvalidArgument", c.name, res)
			continue
		}
		if !containsFold(res[0].Error(), c.want) {
			t.Errorf("%s: error %q does not name the problem (%q)", c.name, res[0], c.want)
		}
	}
	for _, id := range []string{pid, other} {
		if n := highest(t, j, id, 0); n != 0 {
			t.Errorf("after invalid writes, %s has highest %d, want 0 (nothing stored)", id, n)
		}
	}
	calls := []struct {
		name string
		err  error
	}{
		{"Replay empty id", firstErr(j.Replay(ctx, "", 1, 10, 10))},
		{"Replay id with a NUL byte", firstErr(j.Replay(ctx, pid+"\x00", 1, 10, 10))},
		{"HighestSequenceNr id not UTF-8", func() error { _, err := j.HighestSequenceNr(ctx, pid+"\xff", 0); return err }()},
		{"DeleteTo id with a NUL byte", j.DeleteTo(ctx, pid+"\x00", 1)},
		{"Replay negative to", firstErr(j.Replay(ctx, pid, 1, -1, 10))},
		{"Replay negative max", firstErr(j.Replay(ctx, pid, 1, 10, -1))},
		{"HighestSequenceNr empty id", func() error { _, err := j.HighestSequenceNr(ctx, "", 0); return err }()},
		{"HighestSequenceNr negative from", func() error { _, err := j.HighestSequenceNr(ctx, pid, -1); return err }()},
		{"DeleteTo empty id", j.DeleteTo(ctx, "", 1)},
		{"DeleteTo negative", j.DeleteTo(ctx, pid, -1)},
	}
	for _, c := range calls {
		if !errors.Is(c.err, journal.ErrInvalidArgument) {
			t.Errorf("%s: error %v, want ErrInvalidArgument", c.name, c.err)
		}
	}
}

func firstErr(seq func(func(journal.Repr, error) bool)) error {
	for _, err := range seq {
		if err != nil {
			return err
		}
	}
	return nil
}

func containsFold(s, sub string) bool {
	return bytes.Contains(bytes.ToLower([]byte(s)), bytes.ToLower([]byte(sub)))
}

func concurrentWriters(t tb, j journal.Journal, _ Store) {
	const ids, perID = 100, 20
	ctx := testContext(t)
	pids := make([]string, ids)
	for i := range pids {
		pids[i] = uniqueID(t, "KitConcurrent")
	}
	var wg sync.WaitGroup
	errs := make(chan error, ids)
	for _, pid := range pids {
		wg.Go(func() {
			for s := int64(1); s <= perID; s++ {
				res, err := j.Write(ctx, []journal.AtomicWrite{single(pid, s)})
				if err == nil && res != nil {
					err = res[0]
				}
				if err != nil {
					errs <- fmt.Errorf("%s seq %d: %w", pid, s, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent write failed: %v", err)
	}
	for _, pid := range pids {
		if got := replaySeqs(t, j, pid, 1, maxSeq, maxSeq); !slices.Equal(got, seqs(1, perID)) {
			t.Errorf("%s replayed %v, want 1..%d in order with no gaps", pid, got, perID)
		}
		if n := highest(t, j, pid, 0); n != perID {
			t.Errorf("%s highest %d, want %d", pid, n, perID)
		}
	}
}

func cancellation(t tb, j journal.Journal, _ Store) {
	pid := uniqueID(t, "KitCancel")
	mustWrite(t, j, atomicRange(pid, 1, 50))
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	var n int
	var last error
	for e, err := range j.Replay(ctx, pid, 1, maxSeq, maxSeq) {
		if err != nil {
			last = err
			break
		}
		n++
		if e.SequenceNr == 1 {
			cancel()
		}
	}
	if !errors.Is(last, context.Canceled) {
		t.Errorf("replay after cancel ended with %v, want context.Canceled", last)
	}
	if n != 1 {
		t.Errorf("replay yielded %d events, want 1: no event after the context is cancelled", n)
	}
	if _, err := j.HighestSequenceNr(ctx, pid, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("HighestSequenceNr with a cancelled context = %v, want context.Canceled", err)
	}
}

func largeReplay(t tb, j journal.Journal, _ Store) {
	if t.short() {
		t.Skip("-short: skipping the 100,000-event replay")
	}
	const total, batch, payload = 100_000, 1_000, 512
	pid := uniqueID(t, "KitLarge")
	body := bytes.Repeat([]byte{'x'}, payload)
	var ws []journal.AtomicWrite
	for from := int64(1); from <= total; from += batch {
		w := journal.AtomicWrite{PersistenceID: pid, Events: make([]journal.Repr, batch)}
		for k := range w.Events {
			w.Events[k] = journal.Repr{PersistenceID: pid, SequenceNr: from + int64(k), Payload: body, SerializerID: 4}
		}
		ws = append(ws, w)
		if len(ws) == 10 {
			mustWrite(t, j, ws...)
			ws = ws[:0]
		}
	}
	// Materialising the whole journal would take total*payload = 51 MB. The
	// live heap (after a collection) is read before the replay and at ten
	// points of it (every 5% of the journal from 30% on). A store that
	// streams holds about the same at each; one that read everything first
	// holds the journal at each; one that keeps what it yielded holds a
	// share that grows with the events yielded, so each reading is divided
	// by the share of the journal read by then. The smallest quotient is
	// the measure: other work in the test process (parallel rules on the
	// same store, an in-process broker) can only raise a reading for a
	// while, not hold every one above the bound.
	const bound = total * payload / 2
	live := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	base := live()
	var n int64
	measure := uint64(math.MaxUint64)
	var readings []string
	for e, err := range j.Replay(testContext(t), pid, 1, maxSeq, maxSeq) {
		if err != nil {
			t.Fatalf("Replay: %v", err)
		}
		n++
		if e.SequenceNr != n {
			t.Fatalf("event %d has sequence number %d", n, e.SequenceNr)
		}
		if n%(total*5/100) == 0 && n >= total*30/100 {
			var grew uint64
			if h := live(); h > base {
				grew = h - base
			}
			readings = append(readings, fmt.Sprintf("%d bytes after %d events", grew, n))
			measure = min(measure, grew*total/uint64(n))
		}
		if n == total*3/4 {
			break
		}
	}
	if n != total*3/4 {
		t.Fatalf("replay yielded %d events before the consumer stopped, want %d", n, total*3/4)
	}
	if measure > bound {
		t.Errorf("the live heap grew during the replay (%s); scaled to the whole journal, at least %d bytes, above the bound of %d: replay must stream", strings.Join(readings, ", "), measure, bound)
	}
	if n != total*3/4 {
		t.Fatalf("replay yielded %d events before the consumer stopped, want %d", n, total*3/4)
	}
	// The stopped replay must have released what it held: a write succeeds.
	mustWrite(t, j, single(pid, total+1))
	if got := highest(t, j, pid, 0); got != total+1 {
		t.Errorf("highest after the early stop = %d, want %d", got, total+1)
	}
}
