package storetest_test

import (
	"context"
	"iter"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/memory"
	"github.com/annals-go/annals/storetest"
)

// Broken journals, each breaking one rule of the contract. The kit must
// catch each one in the subtest named for that rule.

// skipsDuplicates reports a stored sequence number as written (silent skip).
type skipsDuplicates struct{ journal.Journal }

func (j skipsDuplicates) Write(ctx context.Context, ws []journal.AtomicWrite) ([]error, error) {
	_, err := j.Journal.Write(ctx, ws) // drops the per-write results
	return nil, err
}

// ignoresMax replays past the limit.
type ignoresMax struct{ journal.Journal }

func (j ignoresMax) Replay(ctx context.Context, pid string, from, to, max int64) iter.Seq2[journal.Repr, error] {
	if max > 0 {
		max = 1 << 62
	}
	return j.Journal.Replay(ctx, pid, from, to, max)
}

// forgetsHighest loses the highest number once its events are deleted.
type forgetsHighest struct{ journal.Journal }

func (j forgetsHighest) HighestSequenceNr(ctx context.Context, pid string, from int64) (int64, error) {
	var last int64
	for e, err := range j.Journal.Replay(ctx, pid, 1, 1<<62, 1<<62) {
		if err != nil {
			return 0, err
		}
		last = e.SequenceNr
	}
	return last, nil
}

// materializes reads the whole range before it yields the first event.
type materializes struct{ journal.Journal }

func (j materializes) Replay(ctx context.Context, pid string, from, to, max int64) iter.Seq2[journal.Repr, error] {
	var all []journal.Repr
	for e, err := range j.Journal.Replay(ctx, pid, from, to, max) {
		if err != nil {
			return func(yield func(journal.Repr, error) bool) { yield(journal.Repr{}, err) }
		}
		e.Payload = slices.Clone(e.Payload) // as a driver's row buffer would be copied
		all = append(all, e)
	}
	return func(yield func(journal.Repr, error) bool) {
		for _, e := range all {
			if !yield(e, nil) {
				return
			}
		}
	}
}

// keepsYielded streams, and keeps a copy of every event it yielded until
// the replay ends.
type keepsYielded struct{ journal.Journal }

func (j keepsYielded) Replay(ctx context.Context, pid string, from, to, max int64) iter.Seq2[journal.Repr, error] {
	return func(yield func(journal.Repr, error) bool) {
		var kept []journal.Repr
		defer func() { runtime.KeepAlive(kept) }()
		for e, err := range j.Journal.Replay(ctx, pid, from, to, max) {
			if err == nil {
				e.Payload = slices.Clone(e.Payload)
				kept = append(kept, e)
			}
			if !yield(e, err) {
				return
			}
		}
	}
}

// completionOrder gives a call's results in the order a producer that
// finishes rejections first would (franz-go's ProduceSync): the rejected
// writes' results first, so each lands on the wrong write.
type completionOrder struct{ journal.Journal }

func (j completionOrder) Write(ctx context.Context, ws []journal.AtomicWrite) ([]error, error) {
	res, err := j.Journal.Write(ctx, ws)
	if res == nil || err != nil {
		return res, err
	}
	out := make([]error, 0, len(res))
	for _, r := range res {
		if r != nil {
			out = append(out, r)
		}
	}
	for len(out) < len(res) {
		out = append(out, nil)
	}
	return out, nil
}

var broken = map[string]func(journal.Journal) journal.Journal{
	"completionOrder": func(j journal.Journal) journal.Journal { return completionOrder{j} },
	"materializes":    func(j journal.Journal) journal.Journal { return materializes{j} },
	"keepsYielded":    func(j journal.Journal) journal.Journal { return keepsYielded{j} },
	"skipsDuplicates": func(j journal.Journal) journal.Journal { return skipsDuplicates{j} },
	"ignoresMax":      func(j journal.Journal) journal.Journal { return ignoresMax{j} },
	"forgetsHighest":  func(j journal.Journal) journal.Journal { return forgetsHighest{j} },
}

// TestBrokenJournal runs the kit against one broken journal when the parent
// test asks for it through ANNALS_KIT_BROKEN; otherwise it skips.
func TestBrokenJournal(t *testing.T) {
	name := os.Getenv("ANNALS_KIT_BROKEN")
	if name == "" {
		t.Skip("run by TestKitCatchesBrokenJournals")
	}
	storetest.Run(t, brokenJournalStore(t, name))
}

// brokenJournalStore is the memory store's journal broken as name says,
// the 100,000-event replay left out unless name breaks it.
func brokenJournalStore(t *testing.T, name string) storetest.Store {
	s := memory.New(memory.WithMaxPayloadSize(1 << 10))
	t.Cleanup(func() { _ = s.Close() })
	st := storetest.Store{Journal: broken[name](s.Journal()), GlobalOrdering: true, MaxPayloadSize: 1 << 10}
	if name != "materializes" && name != "keepsYielded" {
		st.Exceptions = map[string]string{"journal/LargeReplayStreams": "the journal breaks another rule"}
	}
	return st
}

// brokenJournal is a broken journal and the rules the kit must fail it on.
type brokenJournal struct {
	broken   string
	mustFail []string
	rule     string // the start of the first rule's statement
}

func brokenJournals() []brokenJournal {
	return []brokenJournal{
		{"completionOrder", []string{"OversizedWriteAmongSmall", "RejectedWriteKeepsNeighbours"}, "one atomic write with a payload above the store's limit"},
		{"skipsDuplicates", []string{"SecondWriterConflict", "AtomicWriteAllOrNothing", "RejectedWriteKeepsNeighbours"}, "a second write of a stored (id, seq) fails"},
		{"ignoresMax", []string{"ReplayCountLimit", "ReplayBoundsWithLimit", "ReplaySingleByLimitOne", "DeletedPrefixLimitCountsKeptEvents"}, "a replay yields at most max events"},
		{"forgetsHighest", []string{"HighestKeptAfterDeletingAll"}, "deleting every event keeps the highest sequence number"},
		{"materializes", []string{"LargeReplayStreams"}, "a replay of 100,000 events streams with bounded memory"},
		{"keepsYielded", []string{"LargeReplayStreams"}, "a replay of 100,000 events streams with bounded memory"},
	}
}

// TestKitCatchesBrokenJournals runs the journal suite under go test (in a
// child go test process: the suite fails its test) against each broken
// journal.
func TestKitCatchesBrokenJournals(t *testing.T) {
	for _, tt := range brokenJournals() {
		t.Run(tt.broken, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run", "^TestBrokenJournal$", "-test.v")
			cmd.Env = append(os.Environ(), "ANNALS_KIT_BROKEN="+tt.broken)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the kit passed a journal that %s:\n%s", tt.broken, out)
			}
			for _, name := range tt.mustFail {
				if !strings.Contains(string(out), "--- FAIL: TestBrokenJournal/journal/"+name+" ") {
					t.Errorf("subtest %s did not fail for a journal that %s", name, tt.broken)
				}
			}
			if !strings.Contains(string(out), "rule: "+tt.rule) {
				t.Errorf("failure output does not state the rule %q", tt.rule)
			}
			if strings.Contains(string(out), "--- FAIL: TestBrokenJournal/journal/ReplayLowerBound ") && tt.broken != "ignoresMax" {
				t.Errorf("an unrelated rule failed; the kit must pinpoint the broken rule")
			}
		})
	}
}

// TestCheckCatchesBrokenJournals runs the journal suite through Check, in
// this process, against each broken journal.
func TestCheckCatchesBrokenJournals(t *testing.T) {
	for _, tt := range brokenJournals() {
		t.Run(tt.broken, func(t *testing.T) {
			rep, err := storetest.Check(t.Context(), brokenJournalStore(t, tt.broken), storetest.Options{})
			if err != nil {
				t.Fatal(err)
			}
			mustFail(t, rep, "journal", tt.mustFail, tt.rule)
			if r := result(rep, "journal/ReplayLowerBound"); (r.Failed || r.Skipped) && tt.broken != "ignoresMax" {
				t.Errorf("an unrelated rule failed or skipped: %q; the kit must pinpoint the broken rule", r.Messages)
			}
		})
	}
}

// mustFail fails the test unless each of the rules named failed in the
// suite, each saying the rule it checks, the first rule (which starts
// with rule).
func mustFail(t *testing.T, rep storetest.Report, suite string, rules []string, rule string) {
	t.Helper()
	if !rep.Failed() {
		t.Fatalf("the kit passed a broken store: %+v", rep.Results)
	}
	for i, name := range rules {
		r := result(rep, suite+"/"+name)
		if !r.Failed {
			t.Errorf("%s/%s: %+v, want failed", suite, name, r)
		}
		want := "rule: "
		if i == 0 {
			want += rule
		}
		if !slices.ContainsFunc(r.Messages, func(m string) bool { return strings.Contains(m, want) }) {
			t.Errorf("%s's messages %q do not state the rule (%q)", name, r.Messages, want)
		}
	}
}

// result returns the result named name in rep (the zero Result, whose
// name is empty, if none).
func result(rep storetest.Report, name string) storetest.Result {
	for _, r := range rep.Results {
		if r.Name == name {
			return r
		}
	}
	return storetest.Result{}
}

// Broken snapshot stores, each breaking one rule of the snapshot contract.

// ignoresMaxSequence loads the latest snapshot whatever the criteria's
// upper sequence bound.
type ignoresMaxSequence struct{ snapshot.Store }

func (s ignoresMaxSequence) Load(ctx context.Context, pid string, c snapshot.Criteria) (snapshot.Snapshot, bool, error) {
	if c.MaxSequenceNr > 0 {
		c.MaxSequenceNr = 1 << 62
	}
	return s.Store.Load(ctx, pid, c)
}

// deletesEverything removes every snapshot of the id on DeleteMatching.
type deletesEverything struct{ snapshot.Store }

func (s deletesEverything) DeleteMatching(ctx context.Context, pid string, _ snapshot.Criteria) error {
	return s.Store.DeleteMatching(ctx, pid, snapshot.Latest())
}

// noneAsZero reads a negative upper sequence bound (None's) as 0, the
// bound of a snapshot saved at 0.
type noneAsZero struct{ snapshot.Store }

func (s noneAsZero) Load(ctx context.Context, pid string, c snapshot.Criteria) (snapshot.Snapshot, bool, error) {
	c.MaxSequenceNr = max(c.MaxSequenceNr, 0)
	return s.Store.Load(ctx, pid, c)
}

var brokenSnapshots = map[string]func(snapshot.Store) snapshot.Store{
	"ignoresMaxSequence": func(s snapshot.Store) snapshot.Store { return ignoresMaxSequence{s} },
	"deletesEverything":  func(s snapshot.Store) snapshot.Store { return deletesEverything{s} },
	"noneAsZero":         func(s snapshot.Store) snapshot.Store { return noneAsZero{s} },
}

// TestBrokenSnapshots runs the snapshot suite against one broken store
// when the parent test asks for it through ANNALS_KIT_BROKEN_SNAPSHOTS.
func TestBrokenSnapshots(t *testing.T) {
	name := os.Getenv("ANNALS_KIT_BROKEN_SNAPSHOTS")
	if name == "" {
		t.Skip("run by TestKitCatchesBrokenSnapshotStores")
	}
	storetest.Run(t, brokenSnapshotStore(t, name))
}

// brokenSnapshotStore is the memory store's snapshot store broken as name
// says.
func brokenSnapshotStore(t *testing.T, name string) storetest.Store {
	s := memory.New()
	t.Cleanup(func() { _ = s.Close() })
	return storetest.Store{Snapshots: brokenSnapshots[name](s.Snapshots())}
}

func brokenSnapshotStores() []brokenJournal {
	return []brokenJournal{
		{"ignoresMaxSequence", []string{"LoadUpperSequenceBound"}, "the youngest snapshot at or below MaxSequenceNr is loaded"},
		{"deletesEverything", []string{"DeleteMatching"}, "DeleteMatching removes every snapshot within the criteria's upper sequence and timestamp bounds"},
		{"noneAsZero", []string{"NoneSkipsSnapshotAtZero"}, "None selects no snapshot, not even one saved at sequence number 0; Latest selects that one"},
	}
}

func TestKitCatchesBrokenSnapshotStores(t *testing.T) {
	for _, tt := range brokenSnapshotStores() {
		t.Run(tt.broken, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run", "^TestBrokenSnapshots$", "-test.v")
			cmd.Env = append(os.Environ(), "ANNALS_KIT_BROKEN_SNAPSHOTS="+tt.broken)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the kit passed a snapshot store that %s:\n%s", tt.broken, out)
			}
			for _, name := range tt.mustFail {
				if !strings.Contains(string(out), "--- FAIL: TestBrokenSnapshots/snapshots/"+name+" ") {
					t.Errorf("rule %s did not fail for a snapshot store that %s", name, tt.broken)
				}
			}
			if !strings.Contains(string(out), "rule: "+tt.rule) {
				t.Errorf("failure output does not state the rule %q", tt.rule)
			}
		})
	}
}

func TestCheckCatchesBrokenSnapshotStores(t *testing.T) {
	for _, tt := range brokenSnapshotStores() {
		t.Run(tt.broken, func(t *testing.T) {
			rep, err := storetest.Check(t.Context(), brokenSnapshotStore(t, tt.broken), storetest.Options{})
			if err != nil {
				t.Fatal(err)
			}
			mustFail(t, rep, "snapshots", tt.mustFail, tt.rule)
		})
	}
}

// A broken read journal: its current query by tag returns the event at the
// offset again (an inclusive offset).
type inclusiveByTag struct{ *memory.Queries }

func (q inclusiveByTag) CurrentEventsByTag(ctx context.Context, tag string, after query.Offset) iter.Seq2[query.Envelope, error] {
	if after.Kind == query.KindSequence {
		after.Sequence--
	}
	return q.Queries.CurrentEventsByTag(ctx, tag, after)
}

// TestBrokenQueries runs the query suite against the broken read journal
// when the parent test asks for it through ANNALS_KIT_BROKEN_QUERIES.
func TestBrokenQueries(t *testing.T) {
	if os.Getenv("ANNALS_KIT_BROKEN_QUERIES") == "" {
		t.Skip("run by TestKitCatchesBrokenQueries")
	}
	storetest.Run(t, brokenQueryStore(t))
}

// brokenQueryStore is the memory store with the broken read journal (and
// no journal suite: the journal is the memory store's).
func brokenQueryStore(t *testing.T) storetest.Store {
	s := memory.New()
	t.Cleanup(func() { _ = s.Close() })
	return storetest.Store{Journal: s.Journal(), Queries: inclusiveByTag{s.Queries()}, Exceptions: map[string]string{"journal/LargeReplayStreams": "the read journal is the one broken"}}
}

func TestKitCatchesBrokenQueries(t *testing.T) {
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run", "^TestBrokenQueries$", "-test.v")
	cmd.Env = append(os.Environ(), "ANNALS_KIT_BROKEN_QUERIES=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the kit passed a read journal whose offsets are inclusive:\n%s", out)
	}
	if !strings.Contains(string(out), "--- FAIL: TestBrokenQueries/queries/OffsetsAreExclusive ") {
		t.Errorf("OffsetsAreExclusive did not fail for a read journal whose offsets are inclusive")
	}
	if !strings.Contains(string(out), "rule: a query from the offset of an envelope returns the events after it, not it") {
		t.Errorf("failure output does not state the rule")
	}
}

func TestCheckCatchesBrokenQueries(t *testing.T) {
	rep, err := storetest.Check(t.Context(), brokenQueryStore(t), storetest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mustFail(t, rep, "queries", []string{"OffsetsAreExclusive"}, "a query from the offset of an envelope returns the events after it, not it")
}

// TestCheckSkipsExceptions: a rule a Store declares an exception is
// skipped with the reason given, the others run; naming a rule the kit
// does not have is an error.
func TestCheckSkipsExceptions(t *testing.T) {
	m := memory.New()
	t.Cleanup(func() { _ = m.Close() })
	s := storetest.Store{Snapshots: m.Snapshots()}
	s.Exceptions = map[string]string{"snapshots/LoadLatest": "one snapshot per id"}
	rep, err := storetest.Check(t.Context(), s, storetest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed() {
		t.Errorf("report failed: %+v", rep.Results)
	}
	if r := result(rep, "snapshots/LoadLatest"); !r.Skipped || !strings.Contains(strings.Join(r.Messages, " "), "one snapshot per id") {
		t.Errorf("snapshots/LoadLatest: %+v, want skipped with the reason", r)
	}
	if r := result(rep, "snapshots/LargeSnapshot"); r.Name == "" || r.Failed || r.Skipped {
		t.Errorf("a rule without an exception did not pass: %+v", r)
	}
	s.Exceptions = map[string]string{"snapshots/NoSuchRule": "renamed"}
	if _, err := storetest.Check(t.Context(), s, storetest.Options{}); err == nil || !strings.Contains(err.Error(), "NoSuchRule") {
		t.Errorf("an exception naming no rule: %v, want an error naming it", err)
	}
}
