package engine_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/recovery"
	"github.com/annals-go/annals/store/sqlite"
)

// heldRecoveries is a SQLite journal (a recovery.BatchReader) whose first
// single recovery read waits until release is closed, and which records
// the ids of every read and fails those of the id poison.
type heldRecoveries struct {
	*sqlite.Journal
	poison  string
	started chan struct{} // closed when the first single read starts
	release chan struct{}

	mu     sync.Mutex
	first  bool
	single []string
	groups [][]string
}

var errPoison = errors.New("a poisoned id")

func (h *heldRecoveries) ReadRecovery(ctx context.Context, req recovery.Request) (recovery.Result, error) {
	h.mu.Lock()
	h.single = append(h.single, req.PersistenceID)
	first := !h.first
	h.first = true
	h.mu.Unlock()
	if first {
		close(h.started)
		<-h.release
	}
	if req.PersistenceID == h.poison {
		return recovery.Result{}, errPoison
	}
	return h.Journal.ReadRecovery(ctx, req)
}

func (h *heldRecoveries) ReadRecoveries(ctx context.Context, reqs []recovery.Request) ([]recovery.Result, error) {
	var ids []string
	for _, r := range reqs {
		ids = append(ids, r.PersistenceID)
	}
	h.mu.Lock()
	h.groups = append(h.groups, ids)
	h.mu.Unlock()
	if slices.Contains(ids, h.poison) {
		return nil, errPoison
	}
	return h.Journal.ReadRecoveries(ctx, reqs)
}

func (h *heldRecoveries) reads() (single []string, groups [][]string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.single), slices.Clone(h.groups)
}

// heldFront opens a SQLite journal with ids "G|0"… of three events each,
// and a front of MaxReads 1 before it whose first recovery read is held.
func heldFront(t *testing.T, ids int, poison string) (*heldRecoveries, *engine.Front) {
	t.Helper()
	s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "d.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	var ws []journal.AtomicWrite
	for i := range ids {
		pid := fmt.Sprint("G|", i)
		w := journal.AtomicWrite{PersistenceID: pid}
		for seq := int64(1); seq <= 3; seq++ {
			w.Events = append(w.Events, journal.Repr{PersistenceID: pid, SequenceNr: seq, Payload: []byte(pid), SerializerID: 1})
		}
		ws = append(ws, w)
	}
	if res, err := s.Journal().Write(t.Context(), ws); err != nil || res != nil {
		t.Fatal(res, err)
	}
	h := &heldRecoveries{Journal: s.Journal(), poison: poison, started: make(chan struct{}), release: make(chan struct{})}
	return h, newFront(t, h, engine.Config{MaxReads: 1})
}

// recoverAll starts a recovery of each id through f, the first alone
// (held in the store), the others once the first is in the store; it
// waits until those wait in the front's queue, and returns their
// outcomes, indexed like ids, once release is closed.
func recoverAll(t *testing.T, h *heldRecoveries, f *engine.Front, ctxOf func(i int) context.Context, ids []string) []chan outcome {
	t.Helper()
	out := make([]chan outcome, len(ids))
	for i, pid := range ids {
		out[i] = make(chan outcome, 1)
		go func() {
			res, err := f.ReadRecovery(ctxOf(i), recovery.Request{PersistenceID: pid})
			out[i] <- outcome{res, err}
		}()
		if i == 0 {
			<-h.started
		}
	}
	for engine.RecoveriesWaiting(f) < len(ids)-1 {
		runtime.Gosched() // the callers are on their way to the queue
	}
	return out
}

type outcome struct {
	res recovery.Result
	err error
}

// checkRecovered checks that o is the recovery of pid's three events.
func checkRecovered(t *testing.T, pid string, o outcome) {
	t.Helper()
	if o.err != nil {
		t.Errorf("%s: %v", pid, o.err)
		return
	}
	if o.res.Highest != 3 || len(o.res.Events) != 3 || o.res.Events[0].PersistenceID != pid || string(o.res.Events[2].Payload) != pid {
		t.Errorf("%s: recovered highest %d, %d events (%+v), want its own 3", pid, o.res.Highest, len(o.res.Events), o.res.Events)
	}
}

func pids(from, to int) []string {
	var ids []string
	for i := from; i < to; i++ {
		ids = append(ids, fmt.Sprint("G|", i))
	}
	return ids
}

// TestRecoveriesWaitingForATurnAreReadInGroups: with MaxReads 1 and the
// one turn held, 40 more recoveries queue; the turns that come free read
// them oldest first, MaxRecoveryGroup at a time, and each caller gets its
// own id's recovery.
func TestRecoveriesWaitingForATurnAreReadInGroups(t *testing.T) {
	t.Parallel()
	const n = 41
	h, f := heldFront(t, n, "")
	ids := pids(0, n)
	out := recoverAll(t, h, f, func(int) context.Context { return t.Context() }, ids)
	close(h.release)
	for i, pid := range ids {
		checkRecovered(t, pid, <-out[i])
	}
	single, groups := h.reads()
	if !slices.Equal(single, ids[:1]) {
		t.Errorf("single reads %v, want the first id's alone", single)
	}
	if got := slices.Concat(groups...); len(groups) != 2 || len(groups[0]) != engine.MaxRecoveryGroup {
		t.Errorf("groups of %d reads, want two, the first of %d", len(groups), engine.MaxRecoveryGroup)
	} else {
		slices.Sort(got)
		want := slices.Clone(ids[1:])
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("grouped ids %v, want the 40 queued ones once each", got)
		}
	}
}

// TestACallerLeavesTheQueue: a waiting recovery whose context ends
// returns the context's error at once, before any turn comes free, and
// is left out of the group that reads the others.
func TestACallerLeavesTheQueue(t *testing.T) {
	t.Parallel()
	h, f := heldFront(t, 4, "")
	ctx, cancel := context.WithCancel(t.Context())
	ids := pids(0, 4)
	out := recoverAll(t, h, f, func(i int) context.Context {
		if i == 2 {
			return ctx
		}
		return t.Context()
	}, ids)
	cancel()
	if o := <-out[2]; !errors.Is(o.err, context.Canceled) {
		t.Fatalf("the leaving caller got %v, want context.Canceled while the turn is held", o.err)
	}
	close(h.release)
	for _, i := range []int{0, 1, 3} {
		checkRecovered(t, ids[i], <-out[i])
	}
	_, groups := h.reads()
	if len(groups) == 1 {
		slices.Sort(groups[0]) // the queue's order is the callers' arrival's
	}
	if len(groups) != 1 || !slices.Equal(groups[0], []string{"G|1", "G|3"}) {
		t.Errorf("groups %v, want one of G|1 and G|3", groups)
	}
}

// TestAFailingGroupIsReadOneByOne: when a group's call fails, each of its
// recoveries is read alone: the one that fails gets its own error, the
// others their recoveries.
func TestAFailingGroupIsReadOneByOne(t *testing.T) {
	t.Parallel()
	h, f := heldFront(t, 5, "G|3")
	ids := pids(0, 5)
	out := recoverAll(t, h, f, func(int) context.Context { return t.Context() }, ids)
	close(h.release)
	for i, pid := range ids {
		o := <-out[i]
		if pid == "G|3" {
			if !errors.Is(o.err, errPoison) {
				t.Errorf("%s: %v, want its own read's error", pid, o.err)
			}
			continue
		}
		checkRecovered(t, pid, o)
	}
	single, groups := h.reads()
	if len(groups) != 1 || len(single) != 5 {
		t.Errorf("%d groups and single reads %v, want one group, then its 4 ids alone after the first", len(groups), single)
	}
}
