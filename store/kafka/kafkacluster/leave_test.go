package kafkacluster_test

import (
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
)

// TestLeavingMemberForwardsItsRequests: a request that reaches a member
// while it leaves, for a partition it is handing off, waits for the
// partition to move and is then forwarded to its new owner, and sent
// there again while the new owner answers that it does not serve the
// partition yet (421), after the leaving member has stopped reading the
// group: it is not left waiting out the Handler's MoveWait (a service
// whose stop waits for its requests would miss its deadline).
func TestLeavingMemberForwardsItsRequests(t *testing.T) {
	for _, tc := range []struct {
		name     string
		refusals int32 // 421 answers of the new owner before it serves the request
	}{
		{"new owner serving", 0},
		{"new owner not serving yet", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			key := func(r *http.Request) (string, bool) {
				return annals.PersistenceID(bank.EntityType, strings.TrimPrefix(r.URL.Path, "/")), true
			}
			srvA := httptest.NewUnstartedServer(nil)
			a, err := w.joinAt(t, "a", srvA.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			var reached atomic.Int32 // requests that reached a's own handler
			handlerA, err := a.member.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if reached.Add(1) <= tc.refusals {
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
			b, err := w.join(t, "b", released)
			if err != nil {
				t.Fatal(err)
			}
			handlerB, err := b.member.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Served-By", "b")
				fmt.Fprintln(w, "served")
			}), cluster.HandlerConfig{Key: key})
			if err != nil {
				t.Fatal(err)
			}
			await(t, "a and b holding half the partitions each, and seeing it", func() bool {
				if len(a.member.Held()) != partitions/2 || len(b.member.Held()) != partitions/2 {
					return false
				}
				for i := range partitions * 8 {
					pid := annals.PersistenceID(bank.EntityType, fmt.Sprintf("acc-%d", i))
					oa, okA := a.member.OwnerOf(pid)
					ob, okB := b.member.OwnerOf(pid)
					if !okA || !okB || oa.Member != ob.Member {
						return false
					}
				}
				return true
			}, a.member, b.member)
			id := ""
			for i := 0; id == ""; i++ {
				if o, ok := b.member.OwnerOf(annals.PersistenceID(bank.EntityType, fmt.Sprintf("acc-%d", i))); ok && o.Local {
					id = fmt.Sprintf("acc-%d", i)
				}
			}

			// The request reaches b once b is handing its partitions off.
			answered := make(chan *httptest.ResponseRecorder, 1)
			released.do(func() {
				go func() {
					rec := httptest.NewRecorder()
					handlerB.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/"+id, nil))
					answered <- rec
				}()
			})
			if err := b.member.Leave(t.Context()); err != nil {
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
			if got, want := reached.Load(), tc.refusals+1; got != want {
				t.Errorf("a's handler reached %d times, want %d", got, want)
			}
		})
	}
}

// onRelease runs a function, once, at the first graceful hand-off of a
// partition after it was given one.
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
