package engine_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/memory"
	"github.com/annals-go/annals/storetest"
)

// TestFrontKeepsJournalContract runs the compliance kit through the front:
// batching must not change any rule of the journal contract.
func TestFrontKeepsJournalContract(t *testing.T) {
	for _, calls := range []int{1, 2, 8} {
		t.Run(fmt.Sprintf("calls=%d", calls), func(t *testing.T) {
			newFront := func() (*engine.Front, func() error, error) {
				s := memory.New(memory.WithMaxPayloadSize(storetest.KitMaxPayloadSize))
				f, err := engine.NewFront(s.Journal(), engine.Config{MaxCalls: calls})
				if err != nil {
					return nil, nil, errors.Join(err, s.Close())
				}
				return f, func() error { return errors.Join(f.Close(), s.Close()) }, nil
			}
			f, closeFront, err := newFront()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = closeFront() })
			storetest.Run(t, storetest.Store{
				Journal: f,
				Open: func(context.Context) (storetest.Store, error) {
					f, closeFront, err := newFront()
					return storetest.Store{Journal: f, Close: closeFront}, err
				},
				GlobalOrdering: true,
				MaxPayloadSize: storetest.KitMaxPayloadSize,
			})
		})
	}
}

// gated wraps a journal: Write and HighestSequenceNr call hooks first and
// record every call.
type gated struct {
	journal.Journal
	mu       sync.Mutex
	batches  [][]journal.AtomicWrite
	highest  atomic.Int32
	writeErr func(ctx context.Context, n int) error // called with the 1-based call number
}

func (g *gated) Write(ctx context.Context, ws []journal.AtomicWrite) ([]error, error) {
	g.mu.Lock()
	g.batches = append(g.batches, ws)
	n := len(g.batches)
	g.mu.Unlock()
	if g.writeErr != nil {
		if err := g.writeErr(ctx, n); err != nil {
			return nil, err
		}
	}
	return g.Journal.Write(ctx, ws)
}

func (g *gated) HighestSequenceNr(ctx context.Context, pid string, from int64) (int64, error) {
	g.highest.Add(1)
	return g.Journal.HighestSequenceNr(ctx, pid, from)
}

// holdCall returns a gated memory journal whose n-th Write call (1-based)
// blocks until release is closed.
func holdCall(n int) (g *gated, release chan struct{}) {
	release = make(chan struct{})
	return &gated{Journal: memory.New().Journal(), writeErr: func(_ context.Context, call int) error {
		if call == n {
			<-release
		}
		return nil
	}}, release
}

func (g *gated) calls() [][]journal.AtomicWrite {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([][]journal.AtomicWrite(nil), g.batches...)
}

func one(pid string, seq int64) journal.AtomicWrite {
	return journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{{PersistenceID: pid, SequenceNr: seq, Payload: []byte("x")}}}
}

func newFront(t *testing.T, j journal.Journal, cfg engine.Config) *engine.Front {
	t.Helper()
	f, err := engine.NewFront(j, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// TestGroupCommitBatchesWhileACallIsInFlight: writes queued while a call is
// in flight go together, at most MaxBatchSize per call; a load this small
// is not split across calls in flight, whatever MaxCalls allows.
func TestGroupCommitBatchesWhileACallIsInFlight(t *testing.T) {
	for _, calls := range []int{1, 2} {
		t.Run(fmt.Sprintf("calls=%d", calls), func(t *testing.T) { testGroupCommit(t, calls) })
	}
}

func testGroupCommit(t *testing.T, calls int) {
	synctest.Test(t, func(t *testing.T) {
		g, release := holdCall(1)
		f := newFront(t, g, engine.Config{MaxBatchSize: 30, MaxCalls: calls})
		ctx := t.Context()
		var wg sync.WaitGroup
		wg.Go(func() {
			if err := f.Persist(ctx, one("first", 1)); err != nil {
				t.Errorf("first: %v", err)
			}
		})
		synctest.Wait() // the first call is in flight, blocked in the store
		for i := range 50 {
			wg.Go(func() {
				if err := f.Persist(ctx, one(fmt.Sprintf("id-%d", i), 1)); err != nil {
					t.Errorf("id-%d: %v", i, err)
				}
			})
		}
		synctest.Wait() // all 50 are queued
		close(release)
		wg.Wait()
		var sizes []int
		for _, b := range g.calls() {
			sizes = append(sizes, len(b))
		}
		if len(sizes) != 3 || sizes[0] != 1 || sizes[1] != 30 || sizes[2] != 20 {
			t.Errorf("store calls carried %v atomic writes, want [1 30 20]: queued writes go together, at most MaxBatchSize per call", sizes)
		}
	})
}

// TestSecondCallKeepsEachIDInOrder: with MaxCalls 2 and a load large
// enough to split (a first call of 400 writes), a second store call goes
// while the first is in flight, carrying the queued writes of other ids; a
// write of an id with a write in flight waits for it.
func TestSecondCallKeepsEachIDInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, release := holdCall(2)
		f := newFront(t, g, engine.Config{MaxCalls: 2})
		ctx := t.Context()
		writeLoad(t, f, 400)
		var wg sync.WaitGroup
		wg.Go(func() {
			if err := f.Persist(ctx, one("a", 1)); err != nil {
				t.Errorf("a/1: %v", err)
			}
		})
		synctest.Wait() // a/1 is in flight, blocked in the store
		wg.Go(func() {
			if err := f.Persist(ctx, one("a", 2)); err != nil {
				t.Errorf("a/2: %v", err)
			}
		})
		synctest.Wait()                                     // a/2 is queued
		if err := f.Persist(ctx, one("b", 1)); err != nil { // stored while a/1 is in flight
			t.Fatalf("b/1: %v", err)
		}
		if got := callIDs(g.calls()[1:]); fmt.Sprint(got) != "[[a/1] [b/1]]" {
			t.Errorf("calls while a/1 is in flight = %v, want [[a/1] [b/1]]: a/2 waits for a/1", got)
		}
		close(release)
		wg.Wait()
		if got := callIDs(g.calls()[1:]); fmt.Sprint(got) != "[[a/1] [b/1] [a/2]]" {
			t.Errorf("calls = %v, want a/2 last, after a/1 was answered", got)
		}
		if n, err := f.HighestSequenceNr(ctx, "a", 0); err != nil || n != 2 {
			t.Errorf("highest of a = %d, %v, want 2", n, err)
		}
	})
}

// splitting is a gated journal that reports split as its SplitWrites.
type splitting struct {
	*gated
	split int
}

func (s splitting) SplitWrites() int { return s.split }

// TestSplitWritesFromTheJournal: after a call of 100 writes, the front
// expects 100; a second call goes while one is in flight only when each
// would carry at least SplitWrites, which is the journal's WriteSplit
// unless the configuration sets it (the default, 200, where the journal
// has none or reports 0).
func TestSplitWritesFromTheJournal(t *testing.T) {
	for _, c := range []struct {
		name          string
		journal, conf int // the journal's SplitWrites (-1: none), the Config's
		want          int // the front's SplitWrites
	}{
		{"no WriteSplit", -1, 0, engine.DefaultSplitWrites},
		{"the journal's", 50, 0, 50},
		{"the journal's 0 is the default", 0, 0, engine.DefaultSplitWrites},
		{"the configuration's over the journal's", 50, 150, 150},
		{"the configuration's without WriteSplit", -1, 50, 50},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g, release := holdCall(2)
				var j journal.Journal = g
				if c.journal >= 0 {
					j = splitting{g, c.journal}
				}
				f := newFront(t, j, engine.Config{MaxCalls: 2, SplitWrites: c.conf})
				if got := f.Config().SplitWrites; got != c.want {
					t.Errorf("SplitWrites = %d, want %d", got, c.want)
				}
				ctx := t.Context()
				writeLoad(t, f, 100)
				var wg sync.WaitGroup
				for _, pid := range []string{"a", "b"} {
					wg.Go(func() {
						if err := f.Persist(ctx, one(pid, 1)); err != nil {
							t.Errorf("%s/1: %v", pid, err)
						}
					})
					synctest.Wait() // a/1 is in flight, blocked in the store
				}
				want := "[[a/1]]" // b/1 waits for the call in flight
				if 100/c.want >= 2 {
					want = "[[a/1] [b/1]]"
				}
				if got := callIDs(g.calls()[1:]); fmt.Sprint(got) != want {
					t.Errorf("calls while a/1 is in flight = %v, want %s", got, want)
				}
				close(release)
				wg.Wait()
			})
		})
	}
}

// writeLoad stores one event of each of n new ids through f in one call,
// after which the front expects n writes back.
func writeLoad(t *testing.T, f *engine.Front, n int) {
	t.Helper()
	var load []journal.AtomicWrite
	for i := range n {
		load = append(load, one(fmt.Sprintf("load-%d", i), 1))
	}
	if errs, err := f.Write(t.Context(), load); err != nil || errs != nil {
		t.Fatalf("load: %v %v", errs, err)
	}
}

// callIDs names each call's atomic writes id/first sequence number.
func callIDs(calls [][]journal.AtomicWrite) [][]string {
	var out [][]string
	for _, c := range calls {
		var names []string
		for _, w := range c {
			names = append(names, fmt.Sprintf("%s/%d", w.PersistenceID, w.Events[0].SequenceNr))
		}
		out = append(out, names)
	}
	return out
}

func TestHighestWaitsForWritesInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		g := &gated{Journal: memory.New().Journal(), writeErr: func(context.Context, int) error { <-release; return nil }}
		f := newFront(t, g, engine.Config{})
		ctx := t.Context()
		go func() { _ = f.Persist(ctx, one("p", 1)) }()
		synctest.Wait()
		var got int64
		done := make(chan error)
		go func() {
			var err error
			got, err = f.HighestSequenceNr(ctx, "p", 0)
			done <- err
		}()
		other, err := f.HighestSequenceNr(ctx, "other", 0)
		if err != nil || other != 0 {
			t.Errorf("highest of an id without writes in flight = %d, %v; it must not wait", other, err)
		}
		synctest.Wait()
		if n := g.highest.Load(); n != 1 {
			t.Fatalf("store asked for the highest number %d times while p's write was in flight, want 1 (only for 'other')", n)
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got != 1 {
			t.Errorf("highest = %d, want 1: it must reflect the write that was in flight", got)
		}
	})
}

func TestCallTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &gated{Journal: memory.New().Journal(), writeErr: func(ctx context.Context, _ int) error {
			<-ctx.Done()
			return ctx.Err()
		}}
		f := newFront(t, g, engine.Config{})
		start := time.Now()
		err := f.Persist(t.Context(), one("p", 1))
		if !errors.Is(err, engine.ErrCallTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want ErrCallTimeout wrapping context.DeadlineExceeded", err)
		}
		if errors.Is(err, journal.ErrRejected) {
			t.Errorf("a timed-out write must not be reported as a rejection: its outcome is unknown")
		}
		if d := time.Since(start); d != engine.DefaultCallTimeout {
			t.Errorf("timed out after %v (fake clock), want the default %v", d, engine.DefaultCallTimeout)
		}
	})
}

func TestCircuitBreakerOpensAndResets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var failing atomic.Bool
		failing.Store(true)
		storeDown := errors.New("store down")
		g := &gated{Journal: memory.New().Journal(), writeErr: func(context.Context, int) error {
			if failing.Load() {
				return storeDown
			}
			return nil
		}}
		f := newFront(t, g, engine.Config{})
		ctx := t.Context()
		for i := range engine.DefaultMaxFailures {
			if err := f.Persist(ctx, one("p", 1)); !errors.Is(err, storeDown) {
				t.Fatalf("call %d: %v, want the store's error", i+1, err)
			}
		}
		err := f.Persist(ctx, one("p", 1))
		if !errors.Is(err, engine.ErrCircuitOpen) {
			t.Fatalf("after %d failures: %v, want ErrCircuitOpen", engine.DefaultMaxFailures, err)
		}
		if n := len(g.calls()); n != engine.DefaultMaxFailures {
			t.Errorf("store received %d calls, want %d: an open breaker must not call the store", n, engine.DefaultMaxFailures)
		}
		if _, err := f.HighestSequenceNr(ctx, "p", 0); !errors.Is(err, engine.ErrCircuitOpen) {
			t.Errorf("HighestSequenceNr while open: %v, want ErrCircuitOpen", err)
		}
		time.Sleep(engine.DefaultResetTimeout - time.Second)
		if err := f.Persist(ctx, one("p", 1)); !errors.Is(err, engine.ErrCircuitOpen) {
			t.Errorf("before the reset timeout: %v, want ErrCircuitOpen", err)
		}
		time.Sleep(time.Second + time.Millisecond)
		failing.Store(false)
		if err := f.Persist(ctx, one("p", 1)); err != nil {
			t.Fatalf("after the reset timeout the probe call must reach the store: %v", err)
		}
		if err := f.Persist(ctx, one("p", 2)); err != nil {
			t.Errorf("after a successful probe the breaker must be closed: %v", err)
		}
	})
}

func TestRejectionsDoNotOpenTheBreaker(t *testing.T) {
	f := newFront(t, memory.New().Journal(), engine.Config{MaxFailures: 2})
	ctx := t.Context()
	if err := f.Persist(ctx, one("p", 1)); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := f.Persist(ctx, one("p", 1)); !errors.Is(err, journal.ErrSequenceConflict) {
			t.Fatalf("duplicate write: %v, want ErrSequenceConflict", err)
		}
		if err := f.Persist(ctx, journal.AtomicWrite{PersistenceID: "p"}); !errors.Is(err, journal.ErrRejected) {
			t.Fatalf("empty write: %v, want ErrRejected", err)
		}
	}
	if err := f.Persist(ctx, one("p", 2)); err != nil {
		t.Errorf("after rejections only, the breaker must stay closed: %v", err)
	}
}

func TestCancelledQueuedWriteIsNotSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, release := holdCall(1)
		f := newFront(t, g, engine.Config{})
		go func() { _ = f.Persist(t.Context(), one("a", 1)) }()
		synctest.Wait()
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error)
		go func() { errc <- f.Persist(ctx, one("a", 2)) }() // waits for a's write in flight
		synctest.Wait()
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled caller got %v, want context.Canceled", err)
		}
		close(release)
		if n, err := f.HighestSequenceNr(t.Context(), "a", 0); err != nil || n != 1 {
			t.Errorf("highest of a = %d, %v, want 1: the cancelled write must not be stored", n, err)
		}
		if calls := g.calls(); len(calls) != 1 {
			t.Errorf("store received %d write calls, want 1: a write cancelled while queued is not sent", len(calls))
		}
	})
}

// TestFenceIsCheckedWhenTheWriteLeaves: a fenced write is checked right
// before its store call, after its wait in the queue; a fence that fails
// then keeps it from the store, and its caller gets the fence's error.
func TestFenceIsCheckedWhenTheWriteLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, release := holdCall(1)
		f := newFront(t, g, engine.Config{})
		go func() { _ = f.Persist(t.Context(), one("a", 1)) }()
		synctest.Wait()
		lost := errors.New("lease lost")
		var fenceErr atomic.Pointer[error]
		fence := func() error {
			if p := fenceErr.Load(); p != nil {
				return *p
			}
			return nil
		}
		type answer struct {
			errs []error
			err  error
		}
		fenced, kept := make(chan answer), make(chan answer)
		go func() {
			errs, err := f.WriteFenced(t.Context(), []journal.AtomicWrite{one("a", 2)}, journal.Fence{Open: fence})
			fenced <- answer{errs, err}
		}()
		go func() {
			errs, err := f.WriteFenced(t.Context(), []journal.AtomicWrite{one("b", 1)}, journal.Fence{Open: func() error { return nil }})
			kept <- answer{errs, err}
		}()
		synctest.Wait()       // both wait in the queue behind a's first write
		fenceErr.Store(&lost) // the lease ends while they wait
		close(release)
		if a := <-fenced; !errors.Is(a.err, lost) || !errors.Is(a.err, engine.ErrFenced) {
			t.Errorf("write whose fence failed while queued: %v, %v; want ErrFenced and the fence's error", a.errs, a.err)
		}
		if a := <-kept; a.err != nil || (a.errs != nil && a.errs[0] != nil) {
			t.Errorf("write whose fence holds: %v, %v; want stored", a.errs, a.err)
		}
		if n, err := f.HighestSequenceNr(t.Context(), "a", 0); err != nil || n != 1 {
			t.Errorf("highest of a = %d, %v, want 1: the fenced write must not be stored", n, err)
		}
		if n, err := f.HighestSequenceNr(t.Context(), "b", 0); err != nil || n != 1 {
			t.Errorf("highest of b = %d, %v, want 1", n, err)
		}
	})
}

func TestCloseDrainsQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, release := holdCall(1)
		f, err := engine.NewFront(g, engine.Config{})
		if err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 2)
		go func() { errs <- f.Persist(t.Context(), one("a", 1)) }()
		synctest.Wait()
		go func() { errs <- f.Persist(t.Context(), one("b", 1)) }()
		synctest.Wait()
		closed := make(chan struct{})
		go func() { _ = f.Close(); close(closed) }()
		synctest.Wait()
		close(release)
		<-closed
		for range 2 {
			if err := <-errs; err != nil {
				t.Errorf("queued write failed across Close: %v", err)
			}
		}
		if err := f.Persist(t.Context(), one("c", 1)); !errors.Is(err, engine.ErrClosed) {
			t.Errorf("write after Close: %v, want ErrClosed", err)
		}
	})
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []engine.Config{{MaxBatchSize: -1}, {MaxLinger: -1}, {MaxCalls: -1}, {CallTimeout: -time.Second}, {ResetTimeout: -1}, {MaxReads: -1}, {SplitWrites: -1}} {
		if _, err := engine.NewFront(memory.New().Journal(), c); err == nil {
			t.Errorf("NewFront(%+v) accepted a negative setting", c)
		}
	}
	f := newFront(t, memory.New().Journal(), engine.Config{})
	want := engine.Config{MaxBatchSize: 1000, MaxLinger: 5 * time.Millisecond, MaxCalls: 2, SplitWrites: 200, CallTimeout: 10 * time.Second, MaxFailures: 10, ResetTimeout: 5 * time.Second, Logger: slog.Default()}
	if got := f.Config(); !reflect.DeepEqual(got, want) {
		t.Errorf("defaults = %+v, want Akka's %+v", got, want)
	}
}

func TestCallersDeadlinesDoNotOpenTheBreaker(t *testing.T) {
	f := newFront(t, memory.New().Journal(), engine.Config{MaxFailures: 2})
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	for range 5 {
		if _, err := f.HighestSequenceNr(expired, "p", 0); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("expired caller: %v, want its DeadlineExceeded", err)
		}
	}
	if err := f.Persist(t.Context(), one("q", 1)); err != nil {
		t.Errorf("after callers' own deadlines the breaker must stay closed: %v", err)
	}
}

func TestCallsAfterCloseFail(t *testing.T) {
	f, err := engine.NewFront(memory.New().Journal(), engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	ctx := t.Context()
	if err := f.Persist(ctx, one("p", 1)); !errors.Is(err, journal.ErrClosed) {
		t.Errorf("Persist after Close: %v, want an error wrapping journal.ErrClosed (the journal contract)", err)
	}
	if _, err := f.HighestSequenceNr(ctx, "p", 0); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("HighestSequenceNr after Close: %v", err)
	}
	if err := f.DeleteTo(ctx, "p", 1); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("DeleteTo after Close: %v", err)
	}
	for _, err := range f.Replay(ctx, "p", 1, 10, 10) {
		if !errors.Is(err, engine.ErrClosed) {
			t.Errorf("Replay after Close: %v", err)
		}
	}
}

// TestSteadyLoadDoesNotWaitOutTheLinger: writers that write again as soon
// as they are answered fill the next batch, and the leader takes it when
// full, without waiting out its linger. The store call takes 10ms of the
// bubble's fake time, so every linger that ran to its timeout (5ms) would
// show in the elapsed time.
func TestSteadyLoadDoesNotWaitOutTheLinger(t *testing.T) {
	for _, calls := range []int{1, 2} {
		t.Run(fmt.Sprintf("calls=%d", calls), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := &gated{Journal: memory.New().Journal(), writeErr: func(context.Context, int) error {
					time.Sleep(10 * time.Millisecond)
					return nil
				}}
				f := newFront(t, g, engine.Config{MaxCalls: calls})
				start := time.Now()
				var wg sync.WaitGroup
				for i := range 10 {
					wg.Go(func() {
						pid := fmt.Sprintf("w-%d", i)
						for seq := int64(1); seq <= 5; seq++ {
							if err := f.Persist(t.Context(), one(pid, seq)); err != nil {
								t.Errorf("%s/%d: %v", pid, seq, err)
								return
							}
						}
					})
				}
				wg.Wait()
				var sizes []int
				for _, c := range g.calls() {
					sizes = append(sizes, len(c))
				}
				if fmt.Sprint(sizes) != "[1 10 10 10 10 9]" {
					t.Errorf("calls carried %v writes, want [1 10 10 10 10 9]: the first writer alone, then every writer in each call", sizes)
				}
				// Six calls of 10ms, and one linger of 5ms before the last:
				// the first writer, done after the fifth call, never comes
				// back.
				if elapsed := time.Since(start); elapsed != 65*time.Millisecond {
					t.Errorf("50 writes took %v of fake time, want 65ms: six calls of 10ms and only the last batch lingering", elapsed)
				}
			})
		})
	}
}

// pooled is a journal that serves HighestSequenceNr calls with a pool of
// conns connections, as pgx does: a call waits for a connection (bounded
// by its context), then takes a second of the store's time.
type pooled struct {
	journal.Journal
	pool chan struct{}
}

func (p *pooled) ConcurrentReads() int { return cap(p.pool) }

func (p *pooled) HighestSequenceNr(ctx context.Context, pid string, from int64) (int64, error) {
	select {
	case p.pool <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-p.pool }()
	time.Sleep(time.Second)
	return p.Journal.HighestSequenceNr(ctx, pid, from)
}

// TestReadsQueueInTheFront: a burst of recoveries' reads larger than the
// store's connection pool waits for turns in the front, where the wait
// counts against neither CallTimeout nor the breaker. Without the bound
// (MaxReads far above the pool) the same burst waits in the pool, inside
// the call timeout: calls time out and the breaker opens on a healthy
// store.
func TestReadsQueueInTheFront(t *testing.T) {
	for _, c := range []struct {
		name         string
		maxReads     int
		wantFailures bool
	}{
		{"bounded by the pool", 0, false},
		{"unbounded", 1000, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const conns, calls = 4, 40
				j := &pooled{Journal: memory.New().Journal(), pool: make(chan struct{}, conns)}
				f := newFront(t, j, engine.Config{CallTimeout: 3 * time.Second, MaxReads: c.maxReads})
				if c.maxReads == 0 && f.Config().MaxReads != conns {
					t.Errorf("MaxReads = %d, want the journal's ConcurrentReads %d", f.Config().MaxReads, conns)
				}
				start := time.Now()
				errs := make(chan error, calls)
				for i := range calls {
					go func() {
						_, err := f.HighestSequenceNr(t.Context(), fmt.Sprintf("p%d", i), 0)
						errs <- err
					}()
				}
				var failed []error
				for range calls {
					if err := <-errs; err != nil {
						failed = append(failed, err)
					}
				}
				_, after := f.HighestSequenceNr(t.Context(), "after", 0)
				if !c.wantFailures {
					if len(failed) > 0 || after != nil {
						t.Errorf("%d of %d reads failed (%v), the next: %v; want none: the wait is not the store's failure", len(failed), calls, failed, after)
					}
					if d := time.Since(start); d != calls/conns*time.Second+time.Second {
						t.Errorf("the burst and one more read took %v of fake time, want %v: %d at a time", d, calls/conns*time.Second+time.Second, conns)
					}
					return
				}
				if len(failed) == 0 || !errors.Is(failed[0], engine.ErrCallTimeout) {
					t.Errorf("unbounded: %d reads failed (first: %v); want call timeouts from waiting in the pool", len(failed), failed)
				}
				if !errors.Is(after, engine.ErrCircuitOpen) {
					t.Errorf("unbounded: the read after the burst: %v, want ErrCircuitOpen", after)
				}
			})
		})
	}
}

// recordingHooks implements every engine hook, recording what it is told.
type recordingHooks struct {
	mu       sync.Mutex
	calls    []engine.WriteCall
	breakers [][2]engine.BreakerState
}

func (h *recordingHooks) OnWriteCall(c engine.WriteCall) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, c)
}

func (h *recordingHooks) OnBreakerStateChange(from, to engine.BreakerState) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.breakers = append(h.breakers, [2]engine.BreakerState{from, to})
}

// TestHooks: a write call's hook gets its writes, events, rejections,
// duration (fake time) and error; the breaker's state changes reach the
// hook and the log.
func TestHooks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var failing atomic.Bool
		storeDown := errors.New("store down")
		g := &gated{Journal: memory.New().Journal(), writeErr: func(context.Context, int) error {
			time.Sleep(3 * time.Millisecond) // the store's time
			if failing.Load() {
				return storeDown
			}
			return nil
		}}
		var log strings.Builder
		h := &recordingHooks{}
		f := newFront(t, g, engine.Config{MaxFailures: 2, ResetTimeout: time.Minute, Hooks: []any{h},
			Logger: slog.New(slog.NewTextHandler(&log, nil))})
		ctx := t.Context()
		res, err := f.Write(ctx, []journal.AtomicWrite{one("a", 1), {PersistenceID: "b", Events: []journal.Repr{one("b", 1).Events[0], one("b", 2).Events[0]}}})
		if err != nil || res != nil {
			t.Fatal(res, err)
		}
		if res, err := f.Write(ctx, []journal.AtomicWrite{one("a", 1)}); err != nil || len(res) != 1 {
			t.Fatalf("a write that conflicts: %v %v", res, err)
		}
		failing.Store(true)
		for range 2 {
			if err := f.Persist(ctx, one("c", 1)); !errors.Is(err, storeDown) {
				t.Fatal(err)
			}
		}
		if err := f.Persist(ctx, one("c", 1)); !errors.Is(err, engine.ErrCircuitOpen) {
			t.Fatal(err)
		}
		time.Sleep(time.Minute + time.Millisecond)
		failing.Store(false)
		if err := f.Persist(ctx, one("c", 1)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the last call's hook runs after its caller has the answer

		h.mu.Lock()
		defer h.mu.Unlock()
		want := []engine.WriteCall{
			{Writes: 2, Events: 3, Duration: 3 * time.Millisecond},
			{Writes: 1, Events: 1, Duration: 3 * time.Millisecond, Rejected: 1},
			{Writes: 1, Events: 1, Duration: 3 * time.Millisecond},
			{Writes: 1, Events: 1, Duration: 3 * time.Millisecond},
			{Writes: 1, Events: 1},
			{Writes: 1, Events: 1, Duration: 3 * time.Millisecond},
		}
		if len(h.calls) != len(want) {
			t.Fatalf("write-call hook called %d times: %+v; want %d", len(h.calls), h.calls, len(want))
		}
		for i, c := range h.calls {
			errWant := map[int]error{2: storeDown, 3: storeDown, 4: engine.ErrCircuitOpen}[i]
			got := c
			got.Err, got.Contexts, got.Start = nil, nil, time.Time{}
			if len(c.Contexts) == 0 || len(c.Contexts) > c.Writes {
				t.Errorf("call %d: %d caller contexts for %d writes", i, len(c.Contexts), c.Writes)
			}
			if !reflect.DeepEqual(got, want[i]) || !errors.Is(c.Err, errWant) || (errWant == nil && c.Err != nil) {
				t.Errorf("call %d: %+v, want %+v with error %v", i, c, want[i], errWant)
			}
		}
		wantStates := [][2]engine.BreakerState{{engine.BreakerClosed, engine.BreakerOpen}, {engine.BreakerOpen, engine.BreakerHalfOpen}, {engine.BreakerHalfOpen, engine.BreakerClosed}}
		if !slices.Equal(h.breakers, wantStates) {
			t.Errorf("breaker changes %v, want %v", h.breakers, wantStates)
		}
		for _, line := range []string{`level=WARN msg="journal circuit breaker open" from=closed`, `level=INFO msg="journal circuit breaker closed" from=half-open`} {
			if !strings.Contains(log.String(), line) {
				t.Errorf("log lacks %q:\n%s", line, log.String())
			}
		}
	})
}
