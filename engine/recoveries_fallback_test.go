package engine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/recovery"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/memory"
)

// scriptedRecoveries is a recovery.BatchReader whose reads do what single
// and group say, and which records the ids of its single reads.
type scriptedRecoveries struct {
	journal.Journal
	single func(ctx context.Context, req recovery.Request) (recovery.Result, error)
	group  func(ctx context.Context, reqs []recovery.Request) ([]recovery.Result, error)

	mu      sync.Mutex
	singles []string
}

func (s *scriptedRecoveries) ReadsSnapshotsOf(snapshot.Store) bool { return true }

func (s *scriptedRecoveries) ReadRecovery(ctx context.Context, req recovery.Request) (recovery.Result, error) {
	s.mu.Lock()
	s.singles = append(s.singles, req.PersistenceID)
	s.mu.Unlock()
	return s.single(ctx, req)
}

func (s *scriptedRecoveries) ReadRecoveries(ctx context.Context, reqs []recovery.Request) ([]recovery.Result, error) {
	return s.group(ctx, reqs)
}

func (s *scriptedRecoveries) singleReads() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.singles)
}

// untilDone is a store call that answers only when its context ends.
func untilDone[T, R any](ctx context.Context, _ R) (T, error) {
	<-ctx.Done()
	var zero T
	return zero, ctx.Err()
}

// TestAGroupThatTimesOutIsNotReadAgainOneByOne: a group whose call times
// out answers each of its callers with the call timeout, within one call
// timeout of its start; it does not read its requests again one by one,
// each for another call timeout on a store that is already too slow (the
// last caller of a group of n would wait n+1 call timeouts).
func TestAGroupThatTimesOutIsNotReadAgainOneByOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &scriptedRecoveries{Journal: memory.New().Journal(), single: untilDone[recovery.Result, recovery.Request], group: untilDone[[]recovery.Result, []recovery.Request]}
		const timeout = time.Second
		f := newFront(t, s, engine.Config{MaxReads: 1, CallTimeout: timeout, MaxFailures: 100})
		start := time.Now()
		type answer struct {
			err error
			at  time.Duration
		}
		read := func(pid string, out chan<- answer) {
			_, err := f.ReadRecovery(t.Context(), recovery.Request{PersistenceID: pid})
			out <- answer{err, time.Since(start)}
		}
		first := make(chan answer, 1)
		go read("A|1", first)
		synctest.Wait() // A holds the one turn, in the store
		grouped := make(chan answer, 3)
		for i := range 3 {
			go read(fmt.Sprint("B|", i), grouped)
		}
		synctest.Wait()
		if n := engine.RecoveriesWaiting(f); n != 3 {
			t.Fatalf("%d recoveries wait for a group, want 3", n)
		}
		if a := <-first; !errors.Is(a.err, engine.ErrCallTimeout) {
			t.Fatalf("the first read: %v, want ErrCallTimeout", a.err)
		}
		for range 3 {
			a := <-grouped
			if !errors.Is(a.err, engine.ErrCallTimeout) {
				t.Errorf("a grouped read: %v, want ErrCallTimeout", a.err)
			}
			if a.at > 2*timeout {
				t.Errorf("a grouped read answered after %v, want within the group's call timeout (%v)", a.at, 2*timeout)
			}
		}
		if got := s.singleReads(); !slices.Equal(got, []string{"A|1"}) {
			t.Errorf("single reads %v, want only the first: the group's requests are not read again after its timeout", got)
		}
	})
}

// TestTheFallbackSkipsCallersWhoLeft: when a group's call fails and its
// requests are read one by one, a caller who left while the group was
// read gets no store read of its own.
func TestTheFallbackSkipsCallersWhoLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		releaseFirst, releaseGroup := make(chan struct{}), make(chan struct{})
		s := &scriptedRecoveries{Journal: memory.New().Journal()}
		s.single = func(ctx context.Context, req recovery.Request) (recovery.Result, error) {
			if req.PersistenceID == "A|1" {
				<-releaseFirst
			}
			return recovery.Result{}, nil
		}
		s.group = func(ctx context.Context, reqs []recovery.Request) ([]recovery.Result, error) {
			<-releaseGroup
			return nil, errPoison
		}
		f := newFront(t, s, engine.Config{MaxReads: 1})
		errs := make(chan error, 3)
		go func() {
			_, err := f.ReadRecovery(t.Context(), recovery.Request{PersistenceID: "A|1"})
			errs <- err
		}()
		synctest.Wait()
		leaving, leave := context.WithCancel(t.Context())
		stay := make(chan error, 1)
		left := make(chan error, 1)
		go func() {
			_, err := f.ReadRecovery(t.Context(), recovery.Request{PersistenceID: "B|stays"})
			stay <- err
		}()
		synctest.Wait()
		go func() {
			_, err := f.ReadRecovery(leaving, recovery.Request{PersistenceID: "B|leaves"})
			left <- err
		}()
		synctest.Wait()
		close(releaseFirst) // the turn comes free: the group of both is read
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the group's call is in the store
		leave()
		if err := <-left; !errors.Is(err, context.Canceled) {
			t.Fatalf("the caller who left: %v, want context.Canceled", err)
		}
		close(releaseGroup)
		if err := <-stay; err != nil {
			t.Fatalf("the caller who stayed: %v", err)
		}
		if got := s.singleReads(); !slices.Equal(got, []string{"A|1", "B|stays"}) {
			t.Errorf("single reads %v, want the first and the one who stayed: no read for a caller who left", got)
		}
	})
}

// TestAStorePanicInAGroupReachesItsCallers: a panic of the store in a
// group's call is raised again on each waiting caller's goroutine, as a
// read alone raises it on its caller's (before, it ended the program from
// the group's goroutine, where no caller could recover it), and the turn
// is given back.
func TestAStorePanicInAGroupReachesItsCallers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		releaseFirst := make(chan struct{})
		s := &scriptedRecoveries{Journal: memory.New().Journal()}
		s.single = func(ctx context.Context, req recovery.Request) (recovery.Result, error) {
			if req.PersistenceID == "A|1" {
				<-releaseFirst
			}
			return recovery.Result{Highest: 7}, nil
		}
		s.group = func(context.Context, []recovery.Request) ([]recovery.Result, error) {
			panic("the store broke")
		}
		f := newFront(t, s, engine.Config{MaxReads: 1})
		go func() { _, _ = f.ReadRecovery(t.Context(), recovery.Request{PersistenceID: "A|1"}) }()
		synctest.Wait()
		recovered := make(chan any, 2)
		for i := range 2 {
			go func() {
				defer func() { recovered <- recover() }()
				_, _ = f.ReadRecovery(t.Context(), recovery.Request{PersistenceID: fmt.Sprint("B|", i)})
			}()
		}
		synctest.Wait()
		close(releaseFirst)
		for range 2 {
			if p := <-recovered; p != "the store broke" {
				t.Errorf("a grouped caller recovered %v, want the store's panic", p)
			}
		}
		if res, err := f.ReadRecovery(t.Context(), recovery.Request{PersistenceID: "C|1"}); err != nil || res.Highest != 7 {
			t.Errorf("a read after the panic: %+v, %v; want the store's answer (the turn given back)", res, err)
		}
	})
}
