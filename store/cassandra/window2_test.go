package cassandra_test

// The claims window's rules meeting a recovery that takes the id, a kept
// write's tag repair, and the guard an earlier Annals' keyspace records.

import (
	"context"
	"errors"
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
	close(resumeB)
	if err := receive(t, bDone, "b's write"); err != nil {
		t.Fatalf("b's write of 3: %v", err)
	}
	close(resumeA)
	var ce *journal.ConflictError
	if err := receive(t, aDone, "a's write"); !errors.As(err, &ce) {
		t.Fatalf("a's write of 3–4: %v, want a *ConflictError", err)
	}
	// d takes the id and stops before its claim completes.
	if err := writeOne(dCtx, d, payloaded(pid, "d", 4, 4)); err == nil {
		t.Fatal("d's write succeeded; want it stopped during its claim")
	}
	// Later (d's bound passed), a projection in c's process reads the id:
	// its repair takes the id to settle b's 3.
	offset.Store(int64(2 * time.Minute))
	wantHighest(t, c, pid, 3, "a projection's read in c's process")
	// c's entity, built on a's refused 3–4, writes 5.
	err := writeOne(t.Context(), c, payloaded(pid, "c", 5, 5))
	if !errors.As(err, &ce) {
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
