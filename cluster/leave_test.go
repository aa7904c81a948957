package cluster_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/cluster"
	"github.com/annals-go/annals/examples/bank"
	"github.com/annals-go/annals/membership"
	"github.com/annals-go/annals/store/memory"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

// leaveCase is a case of TestLeavingMemberForwardsItsRequests.
type leaveCase struct {
	name string
	// refuse tells whether the new owner answers its nth request (from 1)
	// 421, as one not serving the range yet; afterLeft is the number of
	// the request among those that came after b's Leave returned (0 for
	// one that came before).
	refuse func(n, afterLeft int32) bool
	// late makes the new owner take the request's range only once b has
	// read the cluster three times after removing itself from the store
	// (a heartbeat and a half), or has left.
	late bool
	// reached is how many requests reach the new owner's handler (0: as
	// many as the timing makes).
	reached int32
}

// TestLeavingMemberForwardsItsRequests: a request that reaches a member
// while it leaves, for a range it is handing off, waits for the range to
// move and is then forwarded to its new owner, also when the new owner
// takes the range after the leaving member's first heartbeat and a half
// out of the cluster, and is sent there again while the new owner answers
// that it does not serve the range yet (421), also once the leaving
// member has stopped reading the cluster (Leave has returned): it is not
// left waiting out the Handler's MoveWait (a service whose stop waits for
// its requests would miss its deadline).
func TestLeavingMemberForwardsItsRequests(t *testing.T) {
	stores := []struct {
		name string
		open func(t *testing.T) membership.Store
	}{
		{"memory", func(*testing.T) membership.Store { return memory.New().Membership() }},
		{"postgres", func(t *testing.T) membership.Store {
			dsn, _ := pgtest.Schema(t)
			s, err := postgres.Open(t.Context(), dsn, postgres.WithMigrate(true))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s.Membership()
		}},
	}
	never := func(int32, int32) bool { return false }
	cases := []leaveCase{
		{name: "new owner serving", refuse: never, reached: 1},
		{name: "new owner not serving yet", refuse: func(n, _ int32) bool { return n <= 2 }, reached: 3},
		{name: "new owner not serving until after b has left", refuse: func(_, afterLeft int32) bool { return afterLeft <= 1 }},
		{name: "new owner taking the range late", refuse: never, late: true, reached: 1},
	}
	for _, sc := range stores {
		t.Run(sc.name, func(t *testing.T) {
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) { testLeavingMemberForwards(t, sc.open(t), tc) })
			}
		})
	}
}

func testLeavingMemberForwards(t *testing.T, s membership.Store, tc leaveCase) {
	st := memory.New()
	key := func(r *http.Request) (string, bool) {
		return annals.PersistenceID(bank.EntityType, strings.TrimPrefix(r.URL.Path, "/")), true
	}
	var (
		reached   atomic.Int32 // requests that reached a's own handler
		left      atomic.Bool  // b's Leave has returned
		afterLeft atomic.Int32 // requests that reached a's own handler after that
		// late gates a's acquisition of the request's range
		late      = &gatedRange{Store: s, open: make(chan struct{})}
		openLate  sync.Once
		lateOpens = func() { openLate.Do(func() { close(late.open) }) }
		watch     = &leaveWatch{Store: s, third: lateOpens}
	)
	srvA := httptest.NewUnstartedServer(nil)
	a := join(t, st, late, "a", func(c *cluster.Config) { c.Address = srvA.Listener.Addr().String() })
	handlerA, err := a.member.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, after := reached.Add(1), int32(0)
		if left.Load() {
			after = afterLeft.Add(1)
		}
		if tc.refuse(n, after) {
			w.WriteHeader(http.StatusMisdirectedRequest)
			return
		}
		w.Header().Set("Served-By", "a")
		fmt.Fprintln(w, "served")
	}), cluster.HandlerConfig{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	srvA.Config.Handler = handlerA
	srvA.Start()
	t.Cleanup(srvA.Close)

	released := &onRelease{}
	b := join(t, st, watch, "b", func(c *cluster.Config) { c.Hooks = append(c.Hooks, released) })
	handlerB, err := b.member.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Served-By", "b")
		fmt.Fprintln(w, "served")
	}), cluster.HandlerConfig{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	awaitBalanced(t, a, b)
	id := ""
	for i := 0; id == ""; i++ {
		pid := annals.PersistenceID(bank.EntityType, fmt.Sprintf("acc-%d", i))
		if o, ok := b.member.OwnerOf(pid); ok && o.Local {
			id = fmt.Sprintf("acc-%d", i)
			ranges := b.member.Ranges()
			r := cluster.RangeLease(ranges[annals.Slice(pid)/(annals.NumberOfSlices/len(ranges))])
			if tc.late {
				late.lease.Store(&r)
			}
		}
	}

	// The request reaches b once b is handing its ranges off.
	answered := make(chan *httptest.ResponseRecorder, 1)
	released.do(func() {
		go func() {
			rec := httptest.NewRecorder()
			handlerB.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/"+id, nil))
			answered <- rec
		}()
	})
	err = b.member.Leave(t.Context())
	left.Store(true)
	lateOpens()
	if err != nil {
		t.Fatal(err)
	}
	select {
	case rec := <-answered:
		if rec.Code != http.StatusOK || rec.Header().Get("Served-By") != "a" {
			t.Errorf("the request b had while leaving: %d %q, served by %q; want 200 served by a", rec.Code, strings.TrimSpace(rec.Body.String()), rec.Header().Get("Served-By"))
		}
	case <-time.After(time.Minute):
		t.Fatal("the request b had while leaving: no answer a minute after b left")
	}
	if got := reached.Load(); tc.reached > 0 && got != tc.reached {
		t.Errorf("a's handler reached %d times, want %d", got, tc.reached)
	}
}

// onRelease runs a function, once, at the first graceful hand-off of a
// lease after it was given one.
type onRelease struct {
	f    atomic.Pointer[func()]
	once sync.Once
}

func (h *onRelease) do(f func()) { h.f.Store(&f) }

// OnLeaseReleased implements cluster.HookLeaseReleased.
func (h *onRelease) OnLeaseReleased(string, time.Duration, error) {
	if f := h.f.Load(); f != nil {
		h.once.Do(*f)
	}
}

// gatedRange holds the acquisition of one lease, once named, until open
// is closed.
type gatedRange struct {
	membership.Store
	lease atomic.Pointer[string]
	open  chan struct{}
}

func (g *gatedRange) Acquire(ctx context.Context, c, lease string, m membership.Holder, ttl time.Duration) (membership.Lease, error) {
	if l := g.lease.Load(); l != nil && *l == lease {
		select {
		case <-g.open:
		case <-ctx.Done():
			return membership.Lease{}, ctx.Err()
		}
	}
	return g.Store.Acquire(ctx, c, lease, m, ttl)
}

// leaveWatch calls third when the member using it has read the leases
// (the second half of a look at the cluster) three times after removing
// itself from the store.
type leaveWatch struct {
	membership.Store
	third func()
	left  atomic.Bool
	reads atomic.Int32
}

func (w *leaveWatch) Leave(ctx context.Context, c string, m membership.Holder) error {
	err := w.Store.Leave(ctx, c, m)
	w.left.Store(true)
	return err
}

func (w *leaveWatch) Leases(ctx context.Context, c string) ([]membership.Lease, error) {
	ls, err := w.Store.Leases(ctx, c)
	if w.left.Load() && w.reads.Add(1) == 3 {
		w.third()
	}
	return ls, err
}

// stallsAfterLeave is a membership store whose Members, once the member
// has left, waits for its call's context to end: a store that stalls while
// Leave lingers. entered is signalled at each such call.
type stallsAfterLeave struct {
	membership.Store
	left    atomic.Bool
	entered chan struct{}
}

func (s *stallsAfterLeave) Leave(ctx context.Context, cl string, m membership.Holder) error {
	err := s.Store.Leave(ctx, cl, m)
	s.left.Store(true)
	return err
}

func (s *stallsAfterLeave) Members(ctx context.Context, cl string) ([]membership.Member, error) {
	if !s.left.Load() {
		return s.Store.Members(ctx, cl)
	}
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestLeaveEndsWithItsContext: the reads of the cluster Leave makes while
// it lingers end with Leave's context, so that Leave returns when its
// caller's context ends even while the store stalls (each read would
// otherwise wait LeaseTime/2: here a minute).
func TestLeaveEndsWithItsContext(t *testing.T) {
	st := memory.New()
	s := &stallsAfterLeave{Store: st.Membership(), entered: make(chan struct{}, 1)}
	a := join(t, st, s, "a", func(c *cluster.Config) { c.LeaseTime = 2 * time.Minute })
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.member.Leave(ctx) }()
	select {
	case <-s.entered: // Leave lingers, in a stalled read
	case <-time.After(time.Minute):
		t.Fatal("Leave read no view after leaving")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Leave did not return when its context ended: its linger's read ignores it")
	}
}
