package cassandra_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/store/cassandra"
	"github.com/annals-go/annals/store/cassandra/cassandratest"
)

// claimStores opens n stores on one new keyspace, each a writer of its own
// (as n processes), with opts[i] added to store i's options.
func claimStores(t *testing.T, n int, opts map[int][]cassandra.Option) ([]*cassandra.Store, string) {
	t.Helper()
	u, ks := cassandratest.URL(t)
	stores := make([]*cassandra.Store, n)
	for i := range stores {
		s, err := cassandra.Open(t.Context(), u, append([]cassandra.Option{cassandra.WithMigrate(true), cassandra.WithPartitionSize(10), cassandra.WithWriteGuard(cassandra.GuardClaims)}, opts[i]...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores[i] = s
	}
	return stores, ks
}

// writeOne writes w alone and returns its outcome: nil (stored), its
// rejection, or the call's error.
func writeOne(ctx context.Context, j journal.Journal, w journal.AtomicWrite) error {
	res, err := j.Write(ctx, []journal.AtomicWrite{w})
	if err != nil {
		return err
	}
	if len(res) > 0 {
		return res[0]
	}
	return nil
}

// withTags returns w with tags on each of its events.
func withTags(w journal.AtomicWrite, tags []string) journal.AtomicWrite {
	for i := range w.Events {
		w.Events[i].Tags = tags
	}
	return w
}

// mustWriteOne writes w alone and fails t unless it is stored.
func mustWriteOne(t *testing.T, j journal.Journal, w journal.AtomicWrite) {
	t.Helper()
	if err := writeOne(t.Context(), j, w); err != nil {
		t.Fatalf("write of %s %d–%d: %v", w.PersistenceID, w.Events[0].SequenceNr, w.Events[len(w.Events)-1].SequenceNr, err)
	}
}

// payloaded is events(pid, from, to) with each payload "<seq>" and the
// writer's name as writer id.
func payloaded(pid, writer string, from, to int64) journal.AtomicWrite {
	w := events(pid, from, to)
	for i := range w.Events {
		w.Events[i].WriterID = writer
	}
	return w
}

// writers replays pid and returns each event's writer id by number.
func writers(t *testing.T, j journal.Journal, pid string) map[int64]string {
	t.Helper()
	got := map[int64]string{}
	for r, err := range j.Replay(t.Context(), pid, 1, 1<<62, 1<<62) {
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := got[r.SequenceNr]; dup {
			t.Errorf("%s: event %d replayed twice", pid, r.SequenceNr)
		}
		got[r.SequenceNr] = r.WriterID
	}
	return got
}

// wantWriters fails t unless pid replays through j with want's writers.
func wantWriters(t *testing.T, j journal.Journal, pid string, want map[int64]string) {
	t.Helper()
	if got := writers(t, j, pid); !maps.Equal(got, want) {
		t.Errorf("%s: writers %v, want %v", pid, got, want)
	}
}

// keyspaceSession returns a session of its own on keyspace ks, closed
// when t ends.
func keyspaceSession(t *testing.T, ks string) *gocql.Session {
	t.Helper()
	cluster := gocql.NewCluster(cassandratest.Address())
	cluster.Keyspace = ks
	session, err := cluster.CreateSession()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(session.Close)
	return session
}

// scanKeyspace reads one row of stmt in keyspace ks at quorum, through a
// session of its own, into dest.
func scanKeyspace(t *testing.T, ks, stmt string, dest any, args ...any) {
	t.Helper()
	if err := keyspaceSession(t, ks).Query(stmt, args...).Consistency(gocql.Quorum).Scan(dest); err != nil {
		t.Fatal(err)
	}
}

// rowsAt counts the messages rows of pid at seq that a read returns, in
// every partition a write of it may be in (a row hidden by a tombstone is
// not returned).
func rowsAt(t *testing.T, ks, pid string, seq int64) int {
	t.Helper()
	var n int
	scanKeyspace(t, ks, `SELECT count(*) FROM messages WHERE persistence_id = ? AND partition_nr IN ? AND sequence_nr = ?`, &n,
		pid, []int64{(seq-1)/10 - 1, (seq - 1) / 10}, seq)
	return n
}

// claimRev reads the rev of pid's claim record.
func claimRev(t *testing.T, ks, pid string) int64 {
	t.Helper()
	var rev int64
	scanKeyspace(t, ks, `SELECT rev FROM annals_claims WHERE persistence_id = ?`, &rev, pid)
	return rev
}

// TestStaleOwnerIsRefused: a writer whose claim of an id another writer
// took writes as if it still owned the id; its rows are stored but hidden
// by the new owner's tombstone, so its write is refused with a conflict
// and nothing of it is ever read, whether or not the new owner wrote at
// those numbers; its next write claims the id again and is stored.
func TestStaleOwnerIsRefused(t *testing.T) {
	stores, ks := claimStores(t, 2, nil)
	a, b := stores[0].Journal(), stores[1].Journal()
	tests := []struct {
		name     string
		bWrites  bool // the new owner writes at the stale owner's numbers first
		wantLast int64
	}{
		{"the new owner wrote the numbers", true, 3},
		{"the numbers are still free", false, 2},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pid := fmt.Sprintf("Stale|%d", i)
			if err := writeOne(t.Context(), a, payloaded(pid, "a", 1, 2)); err != nil {
				t.Fatal(err)
			}
			// b claims the id: by its write of 3, or by a write refused
			// as a conflict (a claim comes before the numbers are checked).
			bw := payloaded(pid, "b", 3, 3)
			if !tt.bWrites {
				bw = payloaded(pid, "b", 2, 2)
			}
			err := writeOne(t.Context(), b, bw)
			if tt.bWrites && err != nil || !tt.bWrites && !errors.Is(err, journal.ErrSequenceConflict) {
				t.Fatalf("b's write: %v", err)
			}
			var ce *journal.ConflictError
			if err := writeOne(t.Context(), a, payloaded(pid, "a", 3, 4)); !errors.As(err, &ce) || !errors.Is(err, journal.ErrRejected) {
				t.Fatalf("the stale owner's write: %v, want a *ConflictError", err)
			}
			want := map[int64]string{1: "a", 2: "a"}
			if tt.bWrites {
				want[3] = "b"
			}
			for name, j := range map[string]journal.Journal{"a": a, "b": b} {
				if got := writers(t, j, pid); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("replay through %s: writers %v, want %v", name, got, want)
				}
			}
			wantRows := map[int64]int{3: 0, 4: 0} // a's rows are hidden
			if tt.bWrites {
				wantRows[3] = 1 // b's
			}
			for seq, want := range wantRows {
				if n := rowsAt(t, ks, pid, seq); n != want {
					t.Errorf("%d rows of %d read, want %d", n, seq, want)
				}
			}
			// a's next write claims the id again and goes on after its
			// highest number.
			next := tt.wantLast + 1
			if err := writeOne(t.Context(), a, payloaded(pid, "a", next, next)); err != nil {
				t.Fatalf("a's write of %d after claiming again: %v", next, err)
			}
			want[next] = "a"
			if got := writers(t, b, pid); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("replay: writers %v, want %v", got, want)
			}
		})
	}
}

// TestSupersededWriteSettles: a writer paused after its rows are stored,
// before it reads its claim again, while another writer takes the id over.
// When the new owner's claim found the rows, they are kept and the paused
// write is acknowledged; the new owner goes on after them.
func TestSupersededWriteSettles(t *testing.T) {
	const pid = "Settles|1"
	paused := make(chan chan struct{})
	stores, _ := claimStores(t, 2, map[int][]cassandra.Option{0: {pauseRows(pid, 2, paused)}})
	a, b := stores[0].Journal(), stores[1].Journal()
	mustWriteOne(t, a, payloaded(pid, "a", 1, 2))
	done := make(chan error, 1)
	go func() { done <- writeOne(t.Context(), a, payloaded(pid, "a", 3, 4)) }()
	resume := <-paused // a's rows 3–4 are stored; a has not read its claim
	if err := writeOne(t.Context(), b, payloaded(pid, "b", 5, 5)); err != nil {
		t.Fatalf("b's write after a's rows: %v", err)
	}
	close(resume)
	if err := <-done; err != nil {
		t.Fatalf("a's write, found by b's claim: %v, want it stored", err)
	}
	want := map[int64]string{1: "a", 2: "a", 3: "a", 4: "a", 5: "b"}
	wantWriters(t, a, pid, want)
}

// TestClaimRenewal: a claim whose lease is half used moves it on before
// its next write; an owner whose claim was taken cannot, and its write is
// refused without being stored.
func TestClaimRenewal(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	advance := func(d time.Duration) {
		mu.Lock()
		now = now.Add(d)
		mu.Unlock()
	}
	lease := cassandra.WithClaimLease(time.Second)
	stores, ks := claimStores(t, 2, map[int][]cassandra.Option{0: {lease, cassandra.WithClock(clock)}, 1: {lease}})
	a, b := stores[0].Journal(), stores[1].Journal()
	pid := "Renew|1"
	for seq := int64(1); seq <= 4; seq++ {
		if err := writeOne(t.Context(), a, payloaded(pid, "a", seq, seq)); err != nil {
			t.Fatalf("write %d: %v", seq, err)
		}
		advance(700 * time.Millisecond) // past half the lease: the next write renews
	}
	// The claim's record changed four times: created, and renewed before
	// writes 2, 3 and 4.
	if rev := claimRev(t, ks, pid); rev != 4 {
		t.Errorf("the claim's rev is %d after four writes, want 4", rev)
	}
	if err := writeOne(t.Context(), b, payloaded(pid, "b", 5, 5)); err != nil {
		t.Fatalf("b's write: %v", err)
	}
	var ce *journal.ConflictError
	if err := writeOne(t.Context(), a, payloaded(pid, "a", 5, 5)); !errors.As(err, &ce) {
		t.Fatalf("a's write after b took the id: %v, want a *ConflictError", err)
	}
	want := map[int64]string{1: "a", 2: "a", 3: "a", 4: "a", 5: "b"}
	wantWriters(t, b, pid, want)
	if n := rowsAt(t, ks, pid, 5); n != 1 {
		t.Errorf("%d rows of 5, want 1", n)
	}
}

// TestFarMarkOfAStaleOwner: an owner of an id that keeps no events writes
// far above its deleted-to mark (announcing the mark in its claim) and
// pauses after its rows; the writer taking the id over records the mark
// before it reads, finds the rows, and goes on after them.
func TestFarMarkOfAStaleOwner(t *testing.T) {
	const pid = "Far|1"
	pause := make(chan chan struct{})
	stores, _ := claimStores(t, 2, map[int][]cassandra.Option{0: {pauseRows(pid, 1, pause)}})
	a, b := stores[0].Journal(), stores[1].Journal()
	done := make(chan error, 1)
	go func() { done <- writeOne(t.Context(), a, payloaded(pid, "a", 1001, 1002)) }()
	resume := <-pause
	if err := writeOne(t.Context(), b, payloaded(pid, "b", 1003, 1003)); err != nil {
		t.Fatalf("b's write after a's far rows: %v", err)
	}
	close(resume)
	if err := <-done; err != nil {
		t.Fatalf("a's far write: %v, want it stored", err)
	}
	want := map[int64]string{1001: "a", 1002: "a", 1003: "b"}
	for name, j := range map[string]journal.Journal{"a": a, "b": b} {
		if got := writers(t, j, pid); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("replay through %s: writers %v, want %v", name, got, want)
		}
		if h, err := j.HighestSequenceNr(t.Context(), pid, 0); err != nil || h != 1003 {
			t.Errorf("highest through %s: %d, %v; want 1003", name, h, err)
		}
	}
}

// observeFunc is a gocql.QueryObserver: the driver calls it after each
// query attempt, in the query's goroutine, so that blocking in it holds the
// caller there.
type observeFunc func(context.Context, gocql.ObservedQuery)

func (f observeFunc) ObserveQuery(ctx context.Context, q gocql.ObservedQuery) { f(ctx, q) }

// pauseAfter returns an option that, the first time a query of pid whose
// statement holds stmt returns, sends a channel on paused and waits until
// it is closed.
func pauseAfter(pid, stmt string, paused chan<- chan struct{}) cassandra.Option {
	var once sync.Once
	return cassandra.WithQueryObserver(observeFunc(func(_ context.Context, q gocql.ObservedQuery) {
		if !strings.Contains(q.Statement, stmt) || !slices.Contains(q.Values, any(pid)) {
			return
		}
		once.Do(func() {
			resume := make(chan struct{})
			paused <- resume
			<-resume
		})
	}))
}

// pauseRows pauses the nth claimed write of pid (counting from 1) after
// its rows are stored, before it reads its claim again: it sends paused a
// channel and waits until that channel is closed.
func pauseRows(pid string, nth int, paused chan<- chan struct{}) cassandra.Option {
	var (
		mu sync.Mutex
		n  int
	)
	return cassandra.WithAfterClaimedRows(func(p string) {
		if p != pid {
			return
		}
		mu.Lock()
		n++
		now := n == nth
		mu.Unlock()
		if now {
			resume := make(chan struct{})
			paused <- resume
			<-resume
		}
	})
}

// receive returns the next value of ch, failing t after 30 s.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// Statements the tests below pause after (see newStatements).
const (
	stmtPublish   = "SET base = ?"      // a claim's publication
	stmtHighest   = "DESC LIMIT 1"      // a read of a partition's highest number
	stmtRowExists = "AND timestamp = ?" // superseded's read of a write's first row
)

// TestSupersededWriteHiddenAfterItsCheck: a's write lands after b's claim
// read the id's highest number, so b's tombstone hides it; a finds its rows
// still visible (b paused between its publication and its tombstone), and
// while a waits, b writes its tombstone and writes on, and c completes a
// claim after b (whose highest number is below a's last number, or, when b
// wrote a's numbers too, covers it). a's write was not kept: it must be
// refused, not acknowledged.
func TestSupersededWriteHiddenAfterItsCheck(t *testing.T) {
	for _, bLast := range []int64{3, 4} {
		t.Run(fmt.Sprintf("b writes 3-%d", bLast), func(t *testing.T) {
			pid := fmt.Sprintf("HiddenLate|%d", bLast)
			bPublished, aChecked := make(chan chan struct{}), make(chan chan struct{})
			stores, _ := claimStores(t, 3, map[int][]cassandra.Option{
				0: {pauseAfter(pid, stmtRowExists, aChecked)},
				1: {pauseAfter(pid, stmtPublish, bPublished)},
			})
			a, b, c := stores[0].Journal(), stores[1].Journal(), stores[2].Journal()
			if err := writeOne(t.Context(), a, payloaded(pid, "a", 1, 2)); err != nil {
				t.Fatal(err)
			}
			bDone := make(chan error, 1)
			go func() { bDone <- writeOne(t.Context(), b, payloaded(pid, "b", 3, bLast)) }()
			resumeB := receive(t, bPublished, "b's publication") // b read 2 and published it, no tombstone yet
			aDone := make(chan error, 1)
			go func() { aDone <- writeOne(t.Context(), a, payloaded(pid, "a", 3, 4)) }()
			resumeA := receive(t, aChecked, "a's check of its rows") // a's rows are stored, and visible
			close(resumeB)
			if err := receive(t, bDone, "b's write"); err != nil {
				t.Fatalf("b's write: %v", err)
			}
			if err := writeOne(t.Context(), c, payloaded(pid, "c", bLast+1, bLast+1)); err != nil {
				t.Fatalf("c's write: %v", err)
			}
			close(resumeA)
			aErr := receive(t, aDone, "a's write")
			want := map[int64]string{1: "a", 2: "a", 3: "b", 4: "b", 5: "c"}
			if bLast == 3 {
				want = map[int64]string{1: "a", 2: "a", 3: "b", 4: "c"}
			}
			if got := writers(t, c, pid); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("writers %v, want %v", got, want)
			}
			var ce *journal.ConflictError
			if !errors.As(aErr, &ce) {
				t.Errorf("a's write of 3–4, hidden by b's tombstone: %v, want a *ConflictError", aErr)
			}
		})
	}
}

// TestSupersededConflictHidesRows: b takes the id and publishes its claim,
// then fails before its tombstone (its context ends there); a's write,
// landing after b's read, is refused as a conflict. Once a is told so,
// no reader may find its rows.
func TestSupersededConflictHidesRows(t *testing.T) {
	const pid = "HiddenConflict|1"
	bCtx, bCancel := context.WithCancel(t.Context())
	defer bCancel()
	bFails := stopAt(pid, stmtPublish, bCancel)
	stores, ks := claimStores(t, 3, map[int][]cassandra.Option{1: {bFails}})
	a, b, c := stores[0].Journal(), stores[1].Journal(), stores[2].Journal()
	mustWriteOne(t, a, payloaded(pid, "a", 1, 2))
	if err := writeOne(bCtx, b, payloaded(pid, "b", 3, 3)); err == nil {
		t.Fatal("b's write succeeded; want it failed after its claim's publication")
	}
	var ce *journal.ConflictError
	if err := writeOne(t.Context(), a, payloaded(pid, "a", 3, 4)); !errors.As(err, &ce) {
		t.Fatalf("a's write after b's claim: %v, want a *ConflictError", err)
	}
	for seq := int64(3); seq <= 4; seq++ {
		if n := rowsAt(t, ks, pid, seq); n != 0 {
			t.Errorf("%d rows of %d read after a's write was refused, want 0", n, seq)
		}
	}
	if h, err := c.HighestSequenceNr(t.Context(), pid, 0); err != nil || h != 2 {
		t.Errorf("highest through c: %d, %v; want 2", h, err)
	}
	want := map[int64]string{1: "a", 2: "a"}
	wantWriters(t, c, pid, want)
}

// TestClaimAfterRecovery: a wrote the id, b took it over and wrote on, and
// the id moved back to a, which recovered it (reading b's events). a's
// next write is the only writer's and follows the highest number: it must
// be stored, not refused under a's old claim.
func TestClaimAfterRecovery(t *testing.T) {
	const pid = "Back|1"
	stores, _ := claimStores(t, 2, nil)
	a, b := stores[0].Journal(), stores[1].Journal()
	mustWriteOne(t, a, payloaded(pid, "a", 1, 2))
	mustWriteOne(t, b, payloaded(pid, "b", 3, 3))
	if h, err := a.HighestSequenceNr(t.Context(), pid, 0); err != nil || h != 3 {
		t.Fatalf("a's recovery: highest %d, %v; want 3", h, err)
	}
	if err := writeOne(t.Context(), a, payloaded(pid, "a", 4, 4)); err != nil {
		t.Fatalf("a's write of 4 after its recovery: %v, want it stored", err)
	}
	want := map[int64]string{1: "a", 2: "a", 3: "b", 4: "a"}
	wantWriters(t, b, pid, want)
}

// TestDeleteToAfterTakeovers: each writer taking the id from a live owner
// stamps its writes at or above that owner's bound, so a few takeovers in
// a row stamp them several leases ahead of the clock. DeleteTo must still
// remove the events, not only hide them behind the mark.
func TestDeleteToAfterTakeovers(t *testing.T) {
	const pid, n = "DeleteAhead|1", 7
	lease := cassandra.WithClaimLease(2 * time.Second)
	opts := map[int][]cassandra.Option{}
	for i := range n {
		opts[i] = []cassandra.Option{lease}
	}
	stores, ks := claimStores(t, n, opts)
	for i, s := range stores {
		seq := int64(i + 1)
		if err := writeOne(t.Context(), s.Journal(), payloaded(pid, fmt.Sprint(i), seq, seq)); err != nil {
			t.Fatalf("write %d: %v", seq, err)
		}
	}
	j := stores[0].Journal()
	if err := j.DeleteTo(t.Context(), pid, n); err != nil {
		t.Fatal(err)
	}
	if got := writers(t, j, pid); len(got) != 0 {
		t.Errorf("replay after DeleteTo: %v, want nothing", got)
	}
	for seq := int64(1); seq <= n; seq++ {
		if c := rowsAt(t, ks, pid, seq); c != 0 {
			t.Errorf("%d rows of %d left in messages after DeleteTo", c, seq)
		}
	}
}

// TestStaleOwnerWritesBeyondTheNewOwner: a's claim was taken by b, which
// wrote on into the next partition; a, still holding its old claim,
// writes further on, in the partition after b's (a gap a's claim reads
// the id again for). b's tombstone covers only the two partitions from
// its highest number on, so a's rows there are not hidden: a's write must
// be refused with nothing visible, and b's later write of those numbers
// must be the only one read.
func TestStaleOwnerWritesBeyondTheNewOwner(t *testing.T) {
	const pid = "Beyond|1"
	stores, ks := claimStores(t, 2, nil)
	a, b := stores[0].Journal(), stores[1].Journal()
	mustWriteOne(t, a, payloaded(pid, "a", 1, 10))
	mustWriteOne(t, b, payloaded(pid, "b", 11, 20))
	var ce *journal.ConflictError
	if err := writeOne(t.Context(), a, payloaded(pid, "a", 25, 25)); !errors.As(err, &ce) {
		t.Errorf("a's write of 25 under its taken claim: %v, want a *ConflictError", err)
	}
	if n := rowsAt(t, ks, pid, 25); n != 0 {
		t.Errorf("%d rows of 25 read after a's write was refused, want 0", n)
	}
	if err := writeOne(t.Context(), b, payloaded(pid, "b", 21, 25)); err != nil {
		t.Fatalf("b's write of 21–25: %v", err)
	}
	if n := rowsAt(t, ks, pid, 25); n != 1 {
		t.Errorf("%d rows of 25 read, want 1 (b's)", n)
	}
	got := writers(t, b, pid)
	if got[25] != "b" || len(got) != 25 {
		t.Errorf("writers %v, want 1–10 a's, 11–25 b's", got)
	}
}

// TestRecoveryOfRowsHiddenLater: a's write lands after b's claim read the
// id and before b's tombstone; c recovers the id in between. b's claim
// has completed, so a's rows are hidden: c's recovery reads 2, not a's
// 3–4, writes b's tombstone again (b may have stopped), so that no reader
// finds them from then on, and c's entity writes on from 2.
func TestRecoveryOfRowsHiddenLater(t *testing.T) {
	const pid = "HiddenRecovered|1"
	stores, resume := hiddenWindow(t, pid, 3, nil)
	a, c := stores[0].Journal(), stores[2].Journal()
	wantHighest(t, c, pid, 2, "c's recovery (b's claim completed)")
	wantWriters(t, a, pid, map[int64]string{1: "a", 2: "a"}) // a's 3–4 hidden for every reader
	if err := writeOne(t.Context(), c, payloaded(pid, "c", 3, 3)); err != nil {
		t.Fatalf("c's write of 3: %v", err)
	}
	aErr, _ := resume() // c's claim took the id from b: b's outcome is not this test's
	var ce *journal.ConflictError
	if !errors.As(aErr, &ce) {
		t.Errorf("a's write of 3–4: %v, want a *ConflictError", aErr)
	}
	wantWriters(t, a, pid, map[int64]string{1: "a", 2: "a", 3: "c"})
}

// TestClaimsTableMissing: a keyspace of the claims guard without
// annals_claims (dropped here; a keyspace moved to claims before `annals
// migrate`) does not open: Open fails with ErrSchemaMissing, naming the
// fix, rather than every write and recovery failing later; once migrated
// it opens, and the id is written.
func TestClaimsTableMissing(t *testing.T) {
	u, ks := cassandratest.URL(t)
	migrated, err := cassandra.Open(t.Context(), u, cassandra.WithMigrate(true))
	if err != nil {
		t.Fatal(err)
	}
	if err := migrated.Session().Query(`DROP TABLE ` + ks + `.annals_claims`).WithContext(t.Context()).Exec(); err != nil {
		t.Fatal(err)
	}
	migrated.Close()
	if s, err := cassandra.Open(t.Context(), u); !errors.Is(err, cassandra.ErrSchemaMissing) {
		if err == nil {
			s.Close()
		}
		t.Fatalf("open of a claims keyspace without annals_claims: %v, want ErrSchemaMissing", err)
	}
	s, err := cassandra.Open(t.Context(), u, cassandra.WithMigrate(true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := writeOne(t.Context(), s.Journal(), payloaded("Missing|1", "a", 1, 1)); err != nil {
		t.Fatalf("write after the migration: %v", err)
	}
}

// hiddenWindow sets up the window of TestRecoveryOfRowsHiddenLater on pid
// with stores a, b and further stores: a writes 1–2, b's claim of 3 reads
// 2 and publishes it, then pauses before its tombstone; a's write of 3–4
// (tags given) lands and pauses before a reads its claim again. It
// returns the stores and settle, which lets b write its tombstone and 3,
// then lets a settle, and returns a's and b's outcomes (see wantSettled).
// A recovery in the window finds a's 3–4 hidden by b's completed claim.
func hiddenWindow(t *testing.T, pid string, n int, tags []string, opts ...cassandra.Option) ([]*cassandra.Store, func() (aErr, bErr error)) {
	t.Helper()
	return hiddenWindowAt(t, stmtPublish, pid, n, tags, opts...)
}

// hiddenWindowAt is hiddenWindow with b paused after its first statement
// of pid that holds stmt: stmtPublish (the claim completed, before its
// tombstone), or stmtHighest (during the claim's read of the highest
// number, after the partition of 1–4: the claim is taken, not completed,
// and will not find a's rows).
func hiddenWindowAt(t *testing.T, stmt, pid string, n int, tags []string, opts ...cassandra.Option) ([]*cassandra.Store, func() (aErr, bErr error)) {
	t.Helper()
	bPublished, aStored := make(chan chan struct{}), make(chan chan struct{})
	all := map[int][]cassandra.Option{}
	for i := range n {
		all[i] = append([]cassandra.Option{}, opts...)
	}
	all[0] = append(all[0], pauseRows(pid, 2, aStored))
	all[1] = append(all[1], pauseAfter(pid, stmt, bPublished))
	stores, _ := claimStores(t, n, all)
	a, b := stores[0].Journal(), stores[1].Journal()
	mustWriteOne(t, a, withTags(payloaded(pid, "a", 1, 2), tags))
	bDone := make(chan error, 1)
	go func() { bDone <- writeOne(t.Context(), b, withTags(payloaded(pid, "b", 3, 3), tags)) }()
	resumeB := receive(t, bPublished, "b's claim")
	aDone := make(chan error, 1)
	go func() { aDone <- writeOne(t.Context(), a, withTags(payloaded(pid, "a", 3, 4), tags)) }()
	resumeA := receive(t, aStored, "a's rows")
	return stores, settling(t, resumeB, bDone, resumeA, aDone)
}

// settling returns the settle function of a window: it lets b go on and
// takes its write's outcome, then lets a go on and takes a's.
func settling(t *testing.T, resumeB chan struct{}, bDone <-chan error, resumeA chan struct{}, aDone <-chan error) func() (aErr, bErr error) {
	return func() (error, error) {
		close(resumeB)
		bErr := receive(t, bDone, "b's write")
		close(resumeA)
		return receive(t, aDone, "a's write"), bErr
	}
}

// wantSettled settles hiddenWindow's writes and fails t unless b's write
// was stored and a's refused as a conflict (its rows hidden).
func wantSettled(t *testing.T, settle func() (aErr, bErr error)) {
	t.Helper()
	aErr, bErr := settle()
	if bErr != nil {
		t.Fatalf("b's write of 3: %v", bErr)
	}
	var ce *journal.ConflictError
	if !errors.As(aErr, &ce) {
		t.Fatalf("a's write of 3–4: %v, want a *ConflictError", aErr)
	}
}

// tagWriters reads events by tag through s from no offset and returns,
// per number of pid, the writer ids of the envelopes delivered.
func tagWriters(t *testing.T, s *cassandra.Store, tag, pid string) map[int64][]string {
	t.Helper()
	got := map[int64][]string{}
	for env, err := range s.ReadJournal().CurrentEventsByTag(t.Context(), tag, query.NoOffset()) {
		if err != nil {
			t.Fatal(err)
		}
		if env.PersistenceID == pid {
			got[env.SequenceNr] = append(got[env.SequenceNr], env.WriterID)
		}
	}
	return got
}

// wantHighest fails t unless j reads want as pid's highest number.
func wantHighest(t *testing.T, j journal.Journal, pid string, want int64, what string) {
	t.Helper()
	if h, err := j.HighestSequenceNr(t.Context(), pid, 0); err != nil || h != want {
		t.Fatalf("%s: highest %d, %v; want %d", what, h, err, want)
	}
}

// TestHiddenRowsRecoveredThenQueried: c's entity recovers a's rows 3–4
// in the window before b's tombstone hides them; then something else in
// c's process (a projection, a query, the console) asks the id's highest
// number, which now reads b's 3. c's entity, built on a's 3–4, writes 5:
// it must be refused, not stored after b's 3 (the id would read 1–3 then
// 5, and c's state would hold events no reader finds).
func TestHiddenRowsRecoveredThenQueried(t *testing.T) {
	const pid = "HiddenQueried|1"
	stores, resume := hiddenWindowAt(t, stmtHighest, pid, 3, nil)
	c := stores[2].Journal()
	wantHighest(t, c, pid, 4, "c's recovery (a's rows)")
	wantSettled(t, resume)
	wantHighest(t, c, pid, 3, "a query in c's process")
	var ce *journal.ConflictError
	if err := writeOne(t.Context(), c, payloaded(pid, "c", 5, 5)); !errors.As(err, &ce) {
		t.Fatalf("c's write of 5, built on a's hidden 3–4: %v, want a *ConflictError; the id reads %v", err, writers(t, c, pid))
	}
	// c's entity recovers again and goes on from b's 3.
	wantHighest(t, c, pid, 3, "c's second recovery")
	if err := writeOne(t.Context(), c, payloaded(pid, "c", 4, 4)); err != nil {
		t.Fatalf("c's write of 4 after recovering again: %v", err)
	}
	want := map[int64]string{1: "a", 2: "a", 3: "b", 4: "c"}
	if got := writers(t, stores[0].Journal(), pid); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("writers %v, want %v", got, want)
	}
}

// TestStaleHandoffAfterHiddenRows: in the window of hiddenWindow, a
// projection in c's process asks the id's highest number (reading a's
// 3–4, whose events its repair keeps for a replay that never comes); the
// rows are then hidden and b writes 3. c's entity then recovers: highest
// 3, and its replay must return b's 3, not a's refused 3 from the
// earlier call's handoff.
func TestStaleHandoffAfterHiddenRows(t *testing.T) {
	const pid = "HiddenHandoff|1"
	stores, resume := hiddenWindowAt(t, stmtHighest, pid, 3, nil)
	c := stores[2].Journal()
	wantHighest(t, c, pid, 4, "the projection's read (a's rows)")
	wantSettled(t, resume)
	h, err := c.HighestSequenceNr(t.Context(), pid, 0)
	if err != nil || h != 3 {
		t.Fatalf("c's recovery: %d, %v; want 3", h, err)
	}
	got := map[int64]string{}
	for r, err := range c.Replay(t.Context(), pid, 1, h, 1<<62) {
		if err != nil {
			t.Fatal(err)
		}
		got[r.SequenceNr] = r.WriterID
	}
	if want := map[int64]string{1: "a", 2: "a", 3: "b"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("c's recovery replays %v, want %v", got, want)
	}
}

// TestDeleteToOfHiddenRows: in the window of hiddenWindowAt (b's claim
// completed, or still being taken), c deletes the id up to 4 (a's rows,
// which c may read). The deletion claims the id, so b's claim cannot
// complete with H = 2 and have writes of 3 acknowledged below a mark of
// 4 that it never saw, where no reader would find them ("GuardClaims
// refuses a write below the mark"): whatever b is told, an acknowledged
// write of b is read, and b, recovering again, writes on above the mark.
func TestDeleteToOfHiddenRows(t *testing.T) {
	for _, tc := range []struct{ name, stmt string }{
		{"claim completed", stmtPublish},
		{"claim reading", stmtHighest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pid := "HiddenDeleted|" + tc.name
			stores, resume := hiddenWindowAt(t, tc.stmt, pid, 3, nil)
			a, b, c := stores[0].Journal(), stores[1].Journal(), stores[2].Journal()
			if err := c.DeleteTo(t.Context(), pid, 4); err != nil {
				t.Fatal(err)
			}
			_, bErr := resume()
			var ce *journal.ConflictError
			switch {
			case bErr == nil:
				if got := writers(t, a, pid); got[3] != "b" {
					t.Errorf("b's write of 3 was acknowledged; writers %v, want b's 3", got)
				}
			case !errors.As(bErr, &ce):
				t.Fatalf("b's write of 3: %v, want it stored or a *ConflictError", bErr)
			}
			h, err := b.HighestSequenceNr(t.Context(), pid, 0)
			if err != nil || h < 2 {
				t.Fatalf("b's recovery: %d, %v", h, err)
			}
			if err := writeOne(t.Context(), b, payloaded(pid, "b", h+1, h+1)); err != nil {
				t.Fatalf("b's write of %d after recovering: %v", h+1, err)
			}
			for name, j := range map[string]journal.Journal{"a": a, "b": b, "c": c} {
				if got := writers(t, j, pid); got[h+1] != "b" {
					t.Errorf("replay through %s: writers %v, want b's acknowledged %d", name, got, h+1)
				}
			}
		})
	}
}

// TestKeptSupersededWriteTagProgress: a's tagged write of 3–4 is paused
// after its rows; b takes the id (its claim finds them), and its tagged
// write of 5 repairs their tag rows and stores its own, with the id's tag
// progress at 5. a's write is then kept: its tag rows must not set the
// id's progress back to 4, or the next writer, c (after b's process
// moved the scanning mark to 5 and closed), numbers its 6 as b's 5 was,
// and queries by tag skip it as a copy.
func TestKeptSupersededWriteTagProgress(t *testing.T) {
	const pid, tag = "KeptTagged|1", "kept-tag"
	aStored := make(chan chan struct{})
	stores, _ := claimStores(t, 3, map[int][]cassandra.Option{0: quick(pauseRows(pid, 2, aStored)), 1: quick(), 2: quick()})
	a, b, c := stores[0].Journal(), stores[1].Journal(), stores[2].Journal()
	w := func(writer string, from, to int64) journal.AtomicWrite {
		return withTags(payloaded(pid, writer, from, to), []string{tag})
	}
	mustWriteOne(t, a, w("a", 1, 2))
	aDone := make(chan error, 1)
	go func() { aDone <- writeOne(t.Context(), a, w("a", 3, 4)) }()
	resumeA := receive(t, aStored, "a's rows")
	if err := writeOne(t.Context(), b, w("b", 5, 5)); err != nil {
		t.Fatalf("b's write of 5: %v", err)
	}
	close(resumeA)
	if err := receive(t, aDone, "a's write"); err != nil {
		t.Fatalf("a's write of 3–4, found by b's claim: %v, want it stored", err)
	}
	if err := stores[1].Close(); err != nil {
		t.Fatal(err)
	}
	if err := writeOne(t.Context(), c, w("c", 6, 6)); err != nil {
		t.Fatalf("c's write of 6: %v", err)
	}
	got := tagWriters(t, stores[2], tag, pid)
	want := map[int64][]string{1: {"a"}, 2: {"a"}, 3: {"a"}, 4: {"a"}, 5: {"b"}, 6: {"c"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events by tag: writers %v, want %v", got, want)
	}
}

// TestTagRepairOfHiddenRows: in the window of hiddenWindow (every event
// tagged), c's recovery of the id repairs its events by tag up to a's 4,
// writing tag rows, progress and scanning mark for a's 3–4. The rows are
// then hidden and a's write refused, and b's acknowledged 3 follows: the
// query by tag must return 1–2 (a's) and 3 (b's), not a's refused 3–4
// in place of b's.
//
// b's claim is paused either once completed (a's rows will be hidden, the
// record says so) or while reading the highest number (the claim is not
// completed: whether a's rows stay is not known yet).
func TestTagRepairOfHiddenRows(t *testing.T) {
	for _, tc := range []struct {
		name, stmt string
		recovered  int64 // what c's recovery reads: not a's rows once the claim hiding them completed
	}{
		{"claim completed", stmtPublish, 2},
		{"claim reading", stmtHighest, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pid, tag := "HiddenTagged|"+tc.name, "hidden-tag-"+strings.ReplaceAll(tc.name, " ", "-")
			stores, resume := hiddenWindowAt(t, tc.stmt, pid, 3, []string{tag}, quick()...)
			c := stores[2].Journal()
			wantHighest(t, c, pid, tc.recovered, "c's recovery in the window")
			wantSettled(t, resume)
			got := tagWriters(t, stores[1], tag, pid)
			want := map[int64][]string{1: {"a"}, 2: {"a"}, 3: {"b"}}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("events by tag: writers %v, want %v", got, want)
			}
		})
	}
}

// TestHiddenRowsRecoveredThenEvicted: as TestHiddenRowsRecoveredThenQueried,
// but what c's process knows of its recovery is dropped with the id's
// state (beyond maxCachedIDs ids) before c's entity writes 5 on a's hidden
// 3–4: the write must still be refused.
func TestHiddenRowsRecoveredThenEvicted(t *testing.T) {
	t.Skip("known limit: a recovery while the claim that hides the rows is being taken reads them, and what the process knows of that recovery leaves with the id's state; see docs/cassandra.md, Claims")
	const pid = "HiddenEvicted|1"
	stores, resume := hiddenWindowAt(t, stmtHighest, pid, 3, nil)
	c := stores[2].Journal()
	wantHighest(t, c, pid, 4, "c's recovery (a's rows)")
	wantSettled(t, resume)
	cassandra.DropIDStates(stores[2])
	var ce *journal.ConflictError
	if err := writeOne(t.Context(), c, payloaded(pid, "c", 5, 5)); !errors.As(err, &ce) {
		t.Fatalf("c's write of 5, built on a's hidden 3–4: %v, want a *ConflictError; the id reads %v", err, writers(t, c, pid))
	}
}

// TestRowsBeforeClaimsSettle: rows written before any claim of the id (by
// a writer under the conditional guard), then the keyspace moved to claims
// and the id's first claim; a recovery in a third process repairs them
// once: its tag_scanning mark moves past them, so that a later recovery
// (after the process dropped what it knew of the id) reads no event again.
// A first claim recorded by an earlier version (no base) does not say it
// was never taken: once its bound passed (z's clock a minute ahead), z
// takes the id to settle the rows.
func TestRowsBeforeClaimsSettle(t *testing.T) {
	for _, tc := range []struct {
		name     string
		nullBase bool
	}{
		{"first claim", false},
		{"first claim of an earlier version", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const pid, tag = "BeforeClaims|1", "before-claims"
			u, ks := cassandratest.URL(t)
			opts := []cassandra.Option{cassandra.WithMigrate(true), cassandra.WithPartitionSize(10)}
			x, err := cassandra.Open(t.Context(), u, append(opts, cassandra.WithWriteGuard(cassandra.GuardConditional))...)
			if err != nil {
				t.Fatal(err)
			}
			defer x.Close()
			mustWriteOne(t, x.Journal(), withTags(payloaded(pid, "x", 1, 2), []string{tag}))
			// The keyspace moves to claims (x writes no more; its
			// tag_scanning mark stays at 0 until it closes).
			switchToClaims(t, ks)
			y, err := cassandra.Open(t.Context(), u, opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer y.Close()
			zOpts := opts
			if tc.nullBase {
				zOpts = append(zOpts, cassandra.WithClock(func() time.Time { return time.Now().Add(time.Minute) }))
			}
			z, err := cassandra.Open(t.Context(), u, zOpts...)
			if err != nil {
				t.Fatal(err)
			}
			defer z.Close()
			mustWriteOne(t, y.Journal(), payloaded(pid, "y", 3, 3)) // untagged: no repair in y
			if tc.nullBase {
				// The record as an earlier version wrote it: no base.
				if err := keyspaceSession(t, ks).Query(`UPDATE annals_claims SET base = null WHERE persistence_id = ?`, pid).Exec(); err != nil {
					t.Fatal(err)
				}
			}
			wantHighest(t, z.Journal(), pid, 3, "z's recovery")
			first := cassandra.RepairReads(z)
			if first == 0 {
				t.Fatal("z's first recovery read no events for tags")
			}
			cassandra.DropIDStates(z)
			wantHighest(t, z.Journal(), pid, 3, "z's second recovery")
			if n := cassandra.RepairReads(z); n != first {
				t.Errorf("z's recoveries read %d events for tags (%d the first time): the first one's repair did not settle the rows before the id's first claim", n, first)
			}
		})
	}
}
