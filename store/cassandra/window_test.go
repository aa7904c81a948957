package cassandra_test

// The claims guard's window (see "Conflicts" in the package
// documentation): rows of a stale owner that a third process reads before
// a claim hides them, the records earlier versions wrote, a recovery that
// takes the id, and the guard an earlier Annals' keyspace records.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/cassandra"
	"github.com/annals-go/annals/store/cassandra/cassandratest"
)

// stmtReplay is in the statements that read events (a replay's and a
// repair's, with or without write timestamps).
const stmtReplay = "event, meta, tags"

// TestSettledByBaseOfAnotherRow: a row at or below the latest completed
// claim's highest number is settled only when no claim completed while
// the rows were read, since two rows of one number can be read at
// different times: a stale owner's row, read in the window, and the new
// owner's row of the same number, written after its tombstone hid the
// first. So:
//
//  1. a writes 1–2 (tagged); b's claim of 3 publishes base 2 and pauses
//     before its tombstone; a's stale write of 3–4 (tagged) lands.
//  2. c's recovery reads 1–4 (a's rows) for its tag repair, and pauses
//     before it reads the claim record.
//  3. b writes its tombstone (a's 3–4 hidden, a refused) and its own 3
//     (untagged); d writes 4 (untagged): d's claim completes with base 3.
//  4. c reads the record: base 3 covers "3", but a claim completed since
//     c read it before the rows, so c leaves them to a later repair
//     rather than write a tag row (tag_pid_sequence_nr 3) for a's hidden 3.
//
// Events by tag must not deliver a's refused 3, which no replay returns.
func TestSettledByBaseOfAnotherRow(t *testing.T) {
	const pid, tag = "SettledOther|1", "settled-other"
	bPublished, aStored, cRead := make(chan chan struct{}), make(chan chan struct{}), make(chan chan struct{})
	stores, _ := claimStores(t, 4, map[int][]cassandra.Option{
		0: quick(pauseRows(pid, 2, aStored)),
		1: quick(pauseAfter(pid, stmtPublish, bPublished)),
		2: quick(pauseAfter(pid, stmtReplay, cRead)),
		3: quick(),
	})
	a, b, c, d := stores[0].Journal(), stores[1].Journal(), stores[2].Journal(), stores[3].Journal()
	mustWriteOne(t, a, withTags(payloaded(pid, "a", 1, 2), []string{tag}))
	bDone := make(chan error, 1)
	go func() { bDone <- writeOne(t.Context(), b, payloaded(pid, "b", 3, 3)) }()
	resumeB := receive(t, bPublished, "b's publication")
	aDone := make(chan error, 1)
	go func() { aDone <- writeOne(t.Context(), a, withTags(payloaded(pid, "a", 3, 4), []string{tag})) }()
	resumeA := receive(t, aStored, "a's rows")
	type highest struct {
		n   int64
		err error
	}
	cDone := make(chan highest, 1)
	go func() {
		n, err := c.HighestSequenceNr(t.Context(), pid, 0)
		cDone <- highest{n, err}
	}()
	resumeC := receive(t, cRead, "c's repair read")
	wantSettled(t, settling(t, resumeB, bDone, resumeA, aDone))
	mustWriteOne(t, d, payloaded(pid, "d", 4, 4))
	close(resumeC)
	if h := receive(t, cDone, "c's recovery"); h.err != nil || h.n != 4 {
		t.Fatalf("c's recovery: %d, %v; want 4 (a's rows, read in the window)", h.n, h.err)
	}
	wantWriters(t, d, pid, map[int64]string{1: "a", 2: "a", 3: "b", 4: "d"})
	got := tagWriters(t, stores[3], tag, pid)
	want := map[int64][]string{1: {"a"}, 2: {"a"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events by tag: writers %v, want %v (a's 3 was refused and is hidden)", got, want)
	}
}

// TestOldVersionTakeoverOfFirstClaim: rows are settled as those of a
// never-taken first claim while the record's base is minus its fence. A
// process of an earlier version (a rolling upgrade) takes the id over with
// its claimTake, which does not set base: the fence moves, so the mark no
// longer holds, and a stale row landing while that claim is being taken
// is not tagged (it is hidden once that claim publishes). The earlier
// version's steps are run as CQL.
func TestOldVersionTakeoverOfFirstClaim(t *testing.T) {
	const pid, tag = "OldTake|1", "old-take"
	aStored := make(chan chan struct{})
	stores, ks := claimStores(t, 2, map[int][]cassandra.Option{0: quick(pauseRows(pid, 2, aStored)), 1: quick()})
	a, z := stores[0].Journal(), stores[1]
	mustWriteOne(t, a, withTags(payloaded(pid, "a", 1, 2), []string{tag})) // the id's first claim: base minus its fence
	sess := z.Session()
	var rev, until int64
	if err := sess.Query(`SELECT rev, until FROM `+ks+`.annals_claims WHERE persistence_id = ?`, pid).Scan(&rev, &until); err != nil {
		t.Fatal(err)
	}
	// The previous version's take (claimTake before 8a3899b).
	token, _ := gocql.RandomUUID()
	fence := max(time.Now().UnixMicro(), until)
	applied, err := sess.Query(`UPDATE `+ks+`.annals_claims SET owner = ?, rev = ?, fence = ?, until = ? WHERE persistence_id = ? IF rev = ?`,
		token, rev+1, fence, fence+cassandra.DefaultClaimLease.Microseconds(), pid, rev).
		SerialConsistency(gocql.LocalSerial).MapScanCAS(map[string]any{})
	if err != nil || !applied {
		t.Fatalf("the old version's take: %v, %v", applied, err)
	}
	// a, stale, writes 3–4: its rows land, it waits for a completed claim.
	aDone := make(chan error, 1)
	go func() { aDone <- writeOne(t.Context(), a, withTags(payloaded(pid, "a", 3, 4), []string{tag})) }()
	resumeA := receive(t, aStored, "a's rows")
	// z recovers in the window: the record's base is the first claim's.
	wantHighest(t, z.Journal(), pid, 4, "z's recovery (a's rows)")
	// The old version's claim completes: publication and tombstone.
	applied, err = sess.Query(`UPDATE `+ks+`.annals_claims SET base = ?, done = ?, prior = ?, far = null, rev = ? WHERE persistence_id = ? IF owner = ? AND rev = ?`,
		int64(2), fence, int64(0), rev+2, pid, token, rev+1).SerialConsistency(gocql.LocalSerial).MapScanCAS(map[string]any{})
	if err != nil || !applied {
		t.Fatalf("the old version's publication: %v, %v", applied, err)
	}
	if err := sess.Query(`DELETE FROM `+ks+`.messages USING TIMESTAMP ? WHERE persistence_id = ? AND partition_nr IN ? AND sequence_nr > ?`,
		fence, pid, []int64{0, 1}, int64(2)).Exec(); err != nil {
		t.Fatal(err)
	}
	close(resumeA)
	var ce *journal.ConflictError
	if err := receive(t, aDone, "a's write"); !errors.As(err, &ce) {
		t.Fatalf("a's write of 3–4: %v, want a *ConflictError", err)
	}
	wantWriters(t, a, pid, map[int64]string{1: "a", 2: "a"}) // not z: its replay would take what its recovery read
	got := tagWriters(t, z, tag, pid)
	want := map[int64][]string{1: {"a"}, 2: {"a"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events by tag: writers %v, want %v (a's 3–4 were refused and are hidden)", got, want)
	}
}

// TestGapWriteAfterTakeover: after a takeover, a process that did not
// recover the id writes numbers apart from its highest as the journal's
// rules allow, as it does for an id never taken over:
//   - a write a few numbers past the highest, in its partition;
//   - a write far past every partition (the compliance kit's far writes:
//     stored, or refused with ErrInvalidArgument, never a conflict);
//   - a far write to an id whose events were all deleted (an id keeping
//     no events may start anywhere above its mark).
func TestGapWriteAfterTakeover(t *testing.T) {
	for i, tc := range []struct {
		name      string
		delete    bool
		from, to  int64
		wantInval bool // refused with ErrInvalidArgument; else stored
	}{
		{"gap in the partition", false, 6, 6, false},
		{"far past the partitions", false, 2_000_001, 2_000_002, true},
		{"far after deleting all", true, 1_001, 1_002, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pid := fmt.Sprintf("GapAfterTakeover|%d", i)
			stores, _ := claimStores(t, 3, nil)
			a, b, c := stores[0].Journal(), stores[1].Journal(), stores[2].Journal()
			mustWriteOne(t, a, payloaded(pid, "a", 1, 2))
			mustWriteOne(t, b, payloaded(pid, "b", 3, 3)) // a takeover: its claim completes
			if tc.delete {
				if err := b.DeleteTo(t.Context(), pid, 3); err != nil {
					t.Fatal(err)
				}
			}
			err := writeOne(t.Context(), c, payloaded(pid, "c", tc.from, tc.to))
			switch {
			case tc.wantInval && !errors.Is(err, journal.ErrInvalidArgument):
				t.Errorf("c's write of %d–%d: %v, want a rejection wrapping ErrInvalidArgument (as before the takeover)", tc.from, tc.to, err)
			case !tc.wantInval && err != nil:
				t.Errorf("c's write of %d–%d: %v, want it stored (as before the takeover)", tc.from, tc.to, err)
			}
		})
	}
}

// TestHiddenRowsRenumberedByNewOwner: c's entity recovers a's 3–4 in the
// window (b's claim being taken); the rows are hidden and b writes 3 and
// then 4. c's write of 5 follows b's highest number, but the row at 4 is
// not the one c's recovery read: it is refused, not stored on top of b's
// 3–4 by an entity built on a's refused 3–4.
func TestHiddenRowsRenumberedByNewOwner(t *testing.T) {
	const pid = "HiddenRenumbered|1"
	stores, resume := hiddenWindowAt(t, stmtHighest, pid, 3, nil)
	b, c := stores[1].Journal(), stores[2].Journal()
	wantHighest(t, c, pid, 4, "c's recovery (a's rows)")
	wantSettled(t, resume)
	mustWriteOne(t, b, payloaded(pid, "b", 4, 4))
	var ce *journal.ConflictError
	if err := writeOne(t.Context(), c, payloaded(pid, "c", 5, 5)); !errors.As(err, &ce) {
		t.Fatalf("c's write of 5, built on a's hidden 3–4: %v, want a *ConflictError; the id reads %v", err, writers(t, c, pid))
	}
}

// TestRowsUnsettledAfterAbandonedClaim: b takes the id from a's first
// claim and stops before its claim completes (its context ends while it
// reads the highest number: a process that crashed there). The record
// then shows a claim being taken, so whether a's rows stay is not known
// from it. Once b's bound has passed (z's clock is a minute ahead), z's
// recovery takes the id itself to settle them: its repair moves
// tag_scanning past them, and a later recovery reads no event again.
func TestRowsUnsettledAfterAbandonedClaim(t *testing.T) {
	const pid, tag = "Abandoned|1", "abandoned"
	bCtx, bCancel := context.WithCancel(t.Context())
	defer bCancel()
	bStops := stopAt(pid, stmtHighest, bCancel)
	ahead := func() time.Time { return time.Now().Add(time.Minute) }
	stores, _ := claimStores(t, 3, map[int][]cassandra.Option{1: {bStops}, 2: {cassandra.WithClock(ahead)}})
	a, b, z := stores[0].Journal(), stores[1].Journal(), stores[2]
	mustWriteOne(t, a, withTags(payloaded(pid, "a", 1, 2), []string{tag}))
	if err := writeOne(bCtx, b, payloaded(pid, "b", 3, 3)); err == nil {
		t.Fatal("b's write succeeded; want it stopped during its claim")
	}
	wantHighest(t, z.Journal(), pid, 2, "z's recovery")
	first := cassandra.RepairReads(z)
	cassandra.DropIDStates(z)
	wantHighest(t, z.Journal(), pid, 2, "z's second recovery")
	if n := cassandra.RepairReads(z); n != first {
		t.Errorf("z's recoveries read %d events for tags (%d the first time): a's acknowledged 1–2 stayed unsettled after an abandoned claim", n, first)
	}
}

// stopAt returns an option that cancels cancel when the store's first
// query of pid holding stmt returns: a process that stops there.
func stopAt(pid, stmt string, cancel context.CancelFunc) cassandra.Option {
	var once sync.Once
	return cassandra.WithQueryObserver(observeFunc(func(_ context.Context, q gocql.ObservedQuery) {
		if strings.Contains(q.Statement, stmt) && slices.Contains(q.Values, any(pid)) {
			once.Do(cancel)
		}
	}))
}

// TestHiddenRowsRecoveredThenClaimTakenByRecovery: as
// TestHiddenRowsRecoveredThenQueried (c's entity recovers a's 3–4 in the
// window while b's claim is being taken; b's claim completes, hides them
// and b writes 3), but the later call in c's process that reads the id
// again (a projection, a query) finds a claim taken and abandoned (d
// stopped during its read of the highest number) whose bound has passed
// (c's clock is two minutes ahead: the same as a recovery that runs once
// the bound passed), and settles the rows by taking the id itself (rule 4).
// c's process now holds a claim; the write of c's entity, built on a's
// refused 3–4, must still meet the recovery check (recoveredTo 4 > the
// claim's highest 3) and be refused, not stored after b's 3 on events no
// reader finds.
func TestHiddenRowsRecoveredThenClaimTakenByRecovery(t *testing.T) {
	const pid = "HiddenTakenByRecovery|1"
	bPaused, aStored := make(chan chan struct{}), make(chan chan struct{})
	var offset atomic.Int64
	cClock := cassandra.WithClock(func() time.Time { return time.Now().Add(time.Duration(offset.Load())) })
	dCtx, dCancel := context.WithCancel(t.Context())
	defer dCancel()
	stores, _ := claimStores(t, 4, map[int][]cassandra.Option{
		0: {pauseRows(pid, 2, aStored)},
		1: {pauseAfter(pid, stmtHighest, bPaused)},
		2: {cClock},
		3: {stopAt(pid, stmtHighest, dCancel)},
	})
	a, b, c, d := stores[0].Journal(), stores[1].Journal(), stores[2].Journal(), stores[3].Journal()
	mustWriteOne(t, a, payloaded(pid, "a", 1, 2))
	bDone := make(chan error, 1)
	go func() { bDone <- writeOne(t.Context(), b, payloaded(pid, "b", 3, 3)) }()
	resumeB := receive(t, bPaused, "b's read of the highest number") // b read 2
	aDone := make(chan error, 1)
	go func() { aDone <- writeOne(t.Context(), a, payloaded(pid, "a", 3, 4)) }()
	resumeA := receive(t, aStored, "a's rows")
	// c's entity recovers a's 3–4 (b's claim is being taken: not known).
	wantHighest(t, c, pid, 4, "c's entity's recovery (a's rows)")
	wantSettled(t, settling(t, resumeB, bDone, resumeA, aDone))
	// d takes the id and stops before its claim completes.
	if err := writeOne(dCtx, d, payloaded(pid, "d", 4, 4)); err == nil {
		t.Fatal("d's write succeeded; want it stopped during its claim")
	}
	// Later (d's bound passed), a projection in c's process reads the id:
	// its repair takes the id to settle b's 3.
	offset.Store(int64(2 * time.Minute))
	wantHighest(t, c, pid, 3, "a projection's read in c's process")
	// c's entity, built on a's refused 3–4, writes 5.
	var ce *journal.ConflictError
	if err := writeOne(t.Context(), c, payloaded(pid, "c", 5, 5)); !errors.As(err, &ce) {
		t.Errorf("c's write of 5, built on a's hidden 3–4: %v, want a *ConflictError; the id reads %v", err, writers(t, a, pid))
	}
}

// TestKeptSupersededWriteReportedUnknown: a's tagged write of 3–4 is
// paused after its rows; b's claim finds them (base 4) and b writes 5, so
// a's write is kept (superseded settles it). a's tag state is then read
// again by a repair up to 2 (a's own acknowledged 1–2); while that repair
// reads the rows, d takes the id and its claim completes. Rows 1–2 lie
// below a write known to be kept (at or below the base of the claim that
// kept it): nothing can hide them, so the repair settles them without the
// claim record, and the write, stored and kept, is acknowledged (not
// reported with an unknown outcome because a claim completed meanwhile).
func TestKeptSupersededWriteReportedUnknown(t *testing.T) {
	const pid, tag = "KeptUnknown|1", "kept-unknown"
	aStored, aRepair := make(chan chan struct{}), make(chan chan struct{})
	stores, _ := claimStores(t, 3, map[int][]cassandra.Option{
		0: quick(pauseRows(pid, 2, aStored), pauseAfter(pid, stmtReplay, aRepair)),
		1: quick(), 2: quick(),
	})
	a, b, d := stores[0].Journal(), stores[1].Journal(), stores[2].Journal()
	mustWriteOne(t, a, withTags(payloaded(pid, "a", 1, 2), []string{tag}))
	aDone := make(chan error, 1)
	go func() { aDone <- writeOne(t.Context(), a, withTags(payloaded(pid, "a", 3, 4), []string{tag})) }()
	resumeA := receive(t, aStored, "a's rows")
	mustWriteOne(t, b, payloaded(pid, "b", 5, 5)) // b's claim finds a's 3–4
	close(resumeA)
	resumeRepair := receive(t, aRepair, "a's tag repair after its kept write")
	mustWriteOne(t, d, payloaded(pid, "d", 6, 6)) // a claim completes during a's repair
	close(resumeRepair)
	if err := receive(t, aDone, "a's write"); err != nil {
		t.Errorf("a's write of 3–4, kept (b's claim found it): %v, want it acknowledged", err)
	}
	wantWriters(t, b, pid, map[int64]string{1: "a", 2: "a", 3: "a", 4: "a", 5: "b", 6: "d"})
}

// TestFirstGuardOfClaimsWrittenKeyspace: a keyspace written with the
// claims guard by an Annals version before the guard was recorded
// (write_guard=claims in its URL; its record is deleted to stand for it),
// first opened by this version without a guard configured (a tool such
// as the console, or a process whose URL left the parameter out now that
// the keyspace's guard is the default). annals_claims holds claims, so
// it records claims, not conditional: otherwise the processes configured
// with claims would fail Open, and the conditional guard, which relies on
// messages.annals_highest that claimed writes never set, would let a
// writer that recovered 2 before another wrote 3–4 store a second row at 3
// (IF annals_highest = null applies; the row has another timeuuid, so the
// id would replay 3 twice) instead of getting a conflict.
func TestFirstGuardOfClaimsWrittenKeyspace(t *testing.T) {
	const pid = "ClaimsWritten|1"
	u, ks := cassandratest.URL(t)
	old, err := cassandra.Open(t.Context(), u, cassandra.WithMigrate(true), cassandra.WithPartitionSize(10), cassandra.WithWriteGuard(cassandra.GuardClaims))
	if err != nil {
		t.Fatal(err)
	}
	mustWriteOne(t, old.Journal(), payloaded(pid, "a", 1, 4))
	old.Close()
	if err := keyspaceSession(t, ks).Query(`DELETE FROM annals_settings WHERE name = 'write_guard'`).Exec(); err != nil {
		t.Fatal(err)
	}
	tool, err := cassandra.Open(t.Context(), u, cassandra.WithPartitionSize(10))
	if err != nil {
		t.Fatal(err)
	}
	defer tool.Close()
	if g := tool.WriteGuard(); g != cassandra.GuardClaims {
		t.Errorf("first open of a keyspace written under claims: guard %v, want claims", g)
	}
	if s, err := cassandra.Open(t.Context(), u, cassandra.WithPartitionSize(10), cassandra.WithWriteGuard(cassandra.GuardClaims)); err != nil {
		t.Errorf("the application's open, configured with claims as before: %v", err)
	} else {
		s.Close()
	}
	// A writer that recovered 2 (before 3–4 were written) writes 3.
	err = writeOne(t.Context(), tool.Journal(), payloaded(pid, "z", 3, 3))
	var ce *journal.ConflictError
	if !errors.As(err, &ce) {
		t.Errorf("a stale writer's write of 3 under the recorded %v guard: %v, want a *ConflictError; the id reads %v",
			tool.WriteGuard(), err, writers(t, tool.Journal(), pid))
	}
}
