package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/cluster"
	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/examples/bank"
	"github.com/annals-go/annals/membership"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/store/memory"
)

// Short terms keep the tests quick; the rules do not depend on them.
const (
	leaseTime = 2 * time.Second
	heartbeat = 200 * time.Millisecond
)

// node is one member with a bank host, as a process of a service would
// hold them.
type node struct {
	name   string
	host   *entity.Host[bank.Command, bank.Event, bank.Account]
	member *cluster.Member
}

func newHost(t *testing.T, st *memory.Store) *entity.Host[bank.Command, bank.Event, bank.Account] {
	t.Helper()
	reg := serialization.NewRegistry()
	if err := bank.Register(reg); err != nil {
		t.Fatal(err)
	}
	h, err := entity.NewHost(bank.Behavior(), entity.HostConfig{Journal: st.Journal(), Snapshots: st.Snapshots(), Registry: reg, Assigned: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Shutdown(context.Background()) })
	return h
}

func join(t *testing.T, st *memory.Store, s membership.Store, name string, mod func(*cluster.Config)) *node {
	t.Helper()
	n := &node{name: name, host: newHost(t, st)}
	cfg := cluster.Config{Store: s, Cluster: t.Name(), Name: name, Address: name, LeaseTime: leaseTime, Heartbeat: heartbeat, Shards: []cluster.Shard{n.host}, Logger: slog.New(slog.DiscardHandler)}
	if mod != nil {
		mod(&cfg)
	}
	m, err := cluster.Join(t.Context(), cfg)
	if err != nil {
		t.Fatalf("Join %s: %v", name, err)
	}
	n.member = m
	t.Cleanup(func() { _ = m.Leave(context.Background()) })
	return n
}

// awaitBalanced waits until the nodes hold every range once between them,
// in even shares.
func awaitBalanced(t *testing.T, nodes ...*node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*leaseTime)
	defer cancel()
	for {
		changed := nodes[0].member.Changed()
		counts, seen, dup := balance(nodes)
		k, n := cluster.DefaultRanges, len(nodes)
		even := seen == k && !dup
		for _, c := range counts {
			even = even && (c == k/n || c == k/n+1)
		}
		if even {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("ranges not shared out evenly: counts %v, %d of %d held, duplicates %v", counts, seen, k, dup)
		}
	}
}

func balance(nodes []*node) (counts []int, seen int, dup bool) {
	held := map[string]bool{}
	for _, n := range nodes {
		h := n.member.Held()
		h = slices.DeleteFunc(h, func(name string) bool { return !strings.HasPrefix(name, "slices/") })
		counts = append(counts, len(h))
		for _, name := range h {
			dup = dup || held[name]
			held[name] = true
		}
	}
	return counts, len(held), dup
}

func deposit(ctx context.Context, h *entity.Host[bank.Command, bank.Event, bank.Account], id string, amount int64) (int64, error) {
	return entity.Ask(ctx, h, id, func(r entity.ReplyTo[int64]) bank.Command { return bank.Deposit{Amount: amount, Reply: r} })
}

// owner returns the node that holds id's range, or nil when none does.
func owner(t *testing.T, nodes []*node, id string) *node {
	t.Helper()
	ranges := nodes[0].member.Ranges()
	slice := annals.Slice(annals.PersistenceID(bank.EntityType, id))
	lease := cluster.RangeLease(ranges[slice/(annals.NumberOfSlices/len(ranges))])
	for _, n := range nodes {
		if slices.Contains(n.member.Held(), lease) {
			return n
		}
	}
	return nil
}

// TestMembersShareRangesAndHandOff: members that join share the ranges
// evenly, each range held once; a member that leaves hands its ranges off
// and the others take them at once; every acknowledged deposit is kept
// across the moves.
func TestMembersShareRangesAndHandOff(t *testing.T) {
	st := memory.New()
	s := st.Membership()
	a := join(t, st, s, "a", nil)
	if got := len(a.member.Held()); got != cluster.DefaultRanges {
		t.Fatalf("a single member holds %d ranges after Join, want all %d", got, cluster.DefaultRanges)
	}
	b := join(t, st, s, "b", nil)
	c := join(t, st, s, "c", nil)
	nodes := []*node{a, b, c}
	awaitBalanced(t, nodes...)

	ctx := t.Context()
	want := map[string]int64{}
	for i := range 60 {
		id := fmt.Sprintf("acct-%d", i)
		n := owner(t, nodes, id)
		if n == nil {
			t.Fatalf("no owner for %s in a balanced cluster", id)
		}
		if _, err := deposit(ctx, n.host, id, 10); err != nil {
			t.Fatalf("deposit on the owner %s of %s: %v", n.name, id, err)
		}
		want[id] += 10
		for _, other := range nodes {
			if other != n {
				var notOwned *entity.NotOwnedError
				if _, err := deposit(ctx, other.host, id, 1); !errors.As(err, &notOwned) {
					t.Fatalf("deposit of %s on %s, which does not own it: %v, want a *NotOwnedError", id, other.name, err)
				}
			}
		}
	}
	if err := c.member.Leave(ctx); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	if c.host.Live() != 0 {
		t.Errorf("%d entities live on the member that left", c.host.Live())
	}
	awaitBalanced(t, a, b)
	for id, balance := range want {
		n := owner(t, []*node{a, b}, id)
		got, err := deposit(ctx, n.host, id, 1)
		if err != nil || got != balance+1 {
			t.Errorf("%s on %s after the hand-off: %d, %v; want %d", id, n.name, got, err, balance+1)
		}
	}
	members, err := s.Members(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		if m.Name == "c" {
			t.Errorf("the member that left is still recorded: %+v", m)
		}
	}
}

// partitioned wraps a membership store: while cut, the calls of one
// member fail as if the store were out of its reach.
type partitioned struct {
	membership.Store
	cut atomic.Bool
}

var errCut = errors.New("network partition")

func (p *partitioned) Heartbeat(ctx context.Context, cl string, m membership.Holder, ttl time.Duration) ([]membership.Lease, error) {
	if p.cut.Load() {
		return nil, errCut
	}
	return p.Store.Heartbeat(ctx, cl, m, ttl)
}

func (p *partitioned) Members(ctx context.Context, cl string) ([]membership.Member, error) {
	if p.cut.Load() {
		return nil, errCut
	}
	return p.Store.Members(ctx, cl)
}

// TestCutOffMemberStopsWritingBeforeOthersTakeOver: a member cut off from
// the store keeps no right to write past its term: its entities' writes
// are fenced off (not stored) before the store lets another member take
// its ranges; the others take them within the lease time plus a few
// heartbeats, and serve the entities with every acknowledged event.
func TestCutOffMemberStopsWritingBeforeOthersTakeOver(t *testing.T) {
	st := memory.New()
	cutStore := &partitioned{Store: st.Membership()}
	a := join(t, st, st.Membership(), "a", nil)
	b := join(t, st, cutStore, "b", nil)
	awaitBalanced(t, a, b)
	ctx := t.Context()
	var id string
	for i := 0; id == ""; i++ {
		if cand := fmt.Sprintf("acct-%d", i); owner(t, []*node{a, b}, cand) == b {
			id = cand
		}
	}
	if _, err := deposit(ctx, b.host, id, 5); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	cutStore.cut.Store(true)
	// b's writes are refused from the end of its term on, before a may
	// take the range.
	var fencedAt time.Time
	for {
		_, err := deposit(ctx, b.host, id, 1)
		if errors.Is(err, engine.ErrFenced) || errors.As(err, new(*entity.NotOwnedError)) {
			fencedAt = time.Now()
			break
		}
		if err != nil && !errors.As(err, new(*entity.RestartingError)) && !errors.Is(err, entity.ErrStopped) {
			t.Fatalf("b's deposit while cut off: %v", err)
		}
		if time.Since(cut) > 2*leaseTime {
			t.Fatal("b still writes two lease times after it was cut off")
		}
	}
	// a takes the range over, and sees every event b stored.
	ctx2, cancel := context.WithTimeout(ctx, 3*leaseTime)
	defer cancel()
	for {
		changed := a.member.Changed()
		if o, ok := a.member.OwnerOf(annals.PersistenceID(bank.EntityType, id)); ok && o.Local {
			break
		}
		select {
		case <-changed:
		case <-ctx2.Done():
			t.Fatalf("a did not take b's range within %v", 3*leaseTime)
		}
	}
	takenAt := time.Now()
	if !fencedAt.Before(takenAt) {
		t.Errorf("b was fenced off at %v, after a took its range at %v", fencedAt.Sub(cut), takenAt.Sub(cut))
	}
	stored, err := entity.Ask(ctx, a.host, id, func(r entity.ReplyTo[int64]) bank.Command { return bank.GetBalance{Reply: r} })
	if err != nil {
		t.Fatal(err)
	}
	// Every write b made before its fence was acknowledged, so the
	// balance is 5 plus one per acknowledged deposit; a's next deposit
	// lands after them.
	got, err := deposit(ctx, a.host, id, 100)
	if err != nil || got != stored+100 {
		t.Errorf("a's deposit after the take-over: %d, %v; want %d", got, err, stored+100)
	}
	if stored < 5 {
		t.Errorf("balance after the take-over %d, want at least the 5 b stored", stored)
	}
	t.Logf("b fenced off %v after the cut, a serving %v after it", fencedAt.Sub(cut).Round(time.Millisecond), takenAt.Sub(cut).Round(time.Millisecond))

	// Healed, b takes its share again.
	cutStore.cut.Store(false)
	awaitBalanced(t, a, b)
}

// TestStoreRefusesWriteUnderTakenLease: a member whose own clock still
// gives it a range (its term is long: a process stopped right after its
// clock check looks the same) cannot store a write once another member
// took the range's lease in the store: the journal, which keeps the
// leases (journal.FencedWriter), checks the write's token where it
// commits and refuses it with ErrFenced; nothing of it is stored.
func TestStoreRefusesWriteUnderTakenLease(t *testing.T) {
	st := memory.New()
	m := st.Membership()
	b := join(t, st, m, "b", func(c *cluster.Config) { c.LeaseTime, c.Heartbeat = time.Minute, 20*time.Second })
	awaitBalanced(t, b)
	ctx := t.Context()
	const id = "acct-1"
	if _, err := deposit(ctx, b.host, id, 5); err != nil {
		t.Fatal(err)
	}
	// An intruder takes the lease of id's range as a take-over would: the
	// store gives it the next epoch.
	slice := annals.Slice(annals.PersistenceID(bank.EntityType, id))
	per := annals.NumberOfSlices / cluster.DefaultRanges
	lease := cluster.RangeLease(annals.SliceRange{Min: slice / per * per, Max: slice/per*per + per - 1})
	var holder membership.Holder
	members, err := m.Members(ctx, t.Name())
	if err != nil || len(members) != 1 {
		t.Fatalf("members: %v, %v", members, err)
	}
	holder = members[0].Holder()
	if err := m.Release(ctx, t.Name(), lease, holder); err != nil {
		t.Fatal(err)
	}
	taken, err := m.Acquire(ctx, t.Name(), lease, membership.Holder{Name: "intruder", Incarnation: "1"}, time.Minute)
	if err != nil || taken.Epoch < 2 {
		t.Fatalf("the intruder's take-over: %+v, %v", taken, err)
	}
	if o, ok := b.member.OwnerOf(annals.PersistenceID(bank.EntityType, id)); !ok || !o.Local {
		t.Fatalf("b no longer thinks it owns %s (%+v, %v): the test needs its clock fence open", id, o, ok)
	}
	if _, err := deposit(ctx, b.host, id, 1); !errors.Is(err, engine.ErrFenced) {
		t.Fatalf("b's deposit under the taken lease: %v, want ErrFenced from the store", err)
	}
	if n, err := st.Journal().HighestSequenceNr(ctx, annals.PersistenceID(bank.EntityType, id), 0); err != nil || n != 1 {
		t.Errorf("highest of %s after the refused deposit = %d, %v; want 1", id, n, err)
	}
	if o, ok := b.member.OwnerOf(annals.PersistenceID(bank.EntityType, id)); !ok || !o.Local {
		t.Errorf("b's own view changed before the deposit was refused (%+v, %v): its clock fence, not the store, may have refused it", o, ok)
	}
	// Leave without waiting out the long heartbeat's last look.
	leave, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_ = b.member.Leave(leave)
}

// TestDaemonInstancesRunOnceEach: a daemon's instances run spread over the
// members, each on one member at a time, and move when a member leaves.
func TestDaemonInstancesRunOnceEach(t *testing.T) {
	for _, tc := range []struct {
		name   string
		shards bool // members serve entities too, or daemons only
	}{
		{"with shards", true},
		{"daemons only", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testDaemonInstancesRunOnceEach(t, tc.shards)
		})
	}
}

// testDaemonInstancesRunOnceEach: a daemon's instances run once each,
// spread over the members, and move when one leaves; daemons-only members
// take no slice range.
func testDaemonInstancesRunOnceEach(t *testing.T, shards bool) {
	st := memory.New()
	s := st.Membership()
	const instances = 4
	var running [instances]atomic.Int32
	var overlap, badLease atomic.Bool
	var mu sync.Mutex
	where := map[int]string{}
	daemon := func(name string) cluster.Daemon {
		return cluster.Daemon{Name: "balances", Instances: instances, Run: func(ctx context.Context, i int) error {
			if running[i].Add(1) > 1 {
				overlap.Store(true)
			}
			if l, ok := cluster.LeaseOf(ctx); !ok || l.Name != cluster.DaemonLease("balances", i) || l.Epoch < 1 || l.Holder.Name != name {
				badLease.Store(true)
			}
			mu.Lock()
			where[i] = name
			mu.Unlock()
			<-ctx.Done()
			running[i].Add(-1)
			return nil
		}}
	}
	withDaemon := func(name string) func(*cluster.Config) {
		return func(c *cluster.Config) {
			c.Daemons = []cluster.Daemon{daemon(name)}
			if !shards {
				c.Shards, c.DaemonsOnly = nil, true
			}
		}
	}
	a := join(t, st, s, "a", withDaemon("a"))
	b := join(t, st, s, "b", withDaemon("b"))
	if shards {
		awaitBalanced(t, a, b)
	}
	awaitDaemons := func(want map[string]int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 10*leaseTime)
		defer cancel()
		for {
			changed := a.member.Changed()
			mu.Lock()
			got := map[string]int{}
			total := 0
			for i := range instances {
				if running[i].Load() == 1 {
					got[where[i]]++
					total++
				}
			}
			mu.Unlock()
			if total == instances && fmt.Sprint(got) == fmt.Sprint(want) {
				return
			}
			select {
			case <-changed:
			case <-ctx.Done():
				t.Fatalf("daemon instances running %v, want %v", got, want)
			}
		}
	}
	awaitDaemons(map[string]int{"a": 2, "b": 2})
	if !shards {
		leases, err := s.Leases(t.Context(), t.Name())
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range leases {
			if !strings.HasPrefix(l.Name, "daemon/") {
				t.Errorf("a daemons-only member took lease %s; want daemon instances only", l.Name)
			}
		}
		if len(leases) != instances {
			t.Errorf("%d leases in the store, want the %d daemon instances'", len(leases), instances)
		}
	}
	if err := b.member.Leave(t.Context()); err != nil {
		t.Fatal(err)
	}
	awaitDaemons(map[string]int{"a": 4})
	if overlap.Load() {
		t.Error("a daemon instance ran on two members at once")
	}
	if badLease.Load() {
		t.Error("a daemon instance's context did not name its lease (LeaseOf)")
	}
}

// TestHandlerRoutesToTheOwner: requests reach the member owning their
// entity in one hop, whichever member they arrive at; requests for no
// entity are served where they arrive.
func TestHandlerRoutesToTheOwner(t *testing.T) {
	st := memory.New()
	s := st.Membership()
	type served struct{ by, id string }
	var mu sync.Mutex
	var log []served
	var forwardedTwice atomic.Bool
	servers := map[string]*httptest.Server{}
	nodes := map[string]*node{}
	for _, name := range []string{"a", "b", "c"} {
		srv := httptest.NewUnstartedServer(nil)
		srv.Start()
		t.Cleanup(srv.Close)
		n := join(t, st, s, name, func(c *cluster.Config) { c.Address = srv.Listener.Addr().String() })
		nodes[name], servers[name] = n, srv
		mux := http.NewServeMux()
		deposits := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get(cluster.HeaderForwardedBy) == name {
				forwardedTwice.Store(true)
			}
			id := r.PathValue("id")
			amount, err := strconv.ParseInt(r.FormValue("amount"), 10, 64)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			balance, err := deposit(r.Context(), n.host, id, amount)
			var notOwned *entity.NotOwnedError
			switch {
			case errors.As(err, &notOwned):
				http.Error(w, err.Error(), http.StatusMisdirectedRequest)
				return
			case err != nil:
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			mu.Lock()
			log = append(log, served{name, id})
			mu.Unlock()
			fmt.Fprint(w, balance)
		})
		h, err := n.member.Handler(deposits, cluster.HandlerConfig{Key: cluster.PathKey(bank.EntityType, "id")})
		if err != nil {
			t.Fatal(err)
		}
		mux.Handle("POST /accounts/{id}/deposit", h)
		mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, name) })
		srv.Config.Handler = mux
	}
	all := []*node{nodes["a"], nodes["b"], nodes["c"]}
	awaitBalanced(t, all...)
	for i := range 30 {
		id := fmt.Sprintf("acct-%d", i)
		entry := []string{"a", "b", "c"}[i%3]
		resp, err := http.Post(servers[entry].URL+"/accounts/"+id+"/deposit?amount=3", "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != "3" {
			t.Fatalf("deposit to %s through %s: %d %q, want 200 \"3\"", id, entry, resp.StatusCode, body)
		}
		mu.Lock()
		last := log[len(log)-1]
		mu.Unlock()
		if want := owner(t, all, id); last.id != id || last.by != want.name {
			t.Errorf("%s entering at %s was served by %s, want its owner %s", id, entry, last.by, want.name)
		}
	}
	if forwardedTwice.Load() {
		t.Error("a member received a request it had forwarded itself")
	}
	resp, err := http.Get(servers["b"].URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "b" {
		t.Errorf("a request for no entity was served by %q, want where it arrived (b)", body)
	}
}

// TestJoinRefusals: bad configurations and a name taken by a live member
// are refused with errors that name the problem.
func TestJoinRefusals(t *testing.T) {
	st := memory.New()
	s := st.Membership()
	join(t, st, s, "a", nil)
	cases := []struct {
		name string
		cfg  cluster.Config
		want error
	}{
		{"name taken", cluster.Config{Store: s, Cluster: t.Name(), Name: "a", LeaseTime: leaseTime}, membership.ErrNameTaken},
		{"no store", cluster.Config{Name: "x"}, nil},
		{"no name", cluster.Config{Store: s}, nil},
		{"ranges not dividing 1024", cluster.Config{Store: s, Name: "x", Ranges: 3}, annals.ErrInvalidSliceRanges},
		{"lease under a second", cluster.Config{Store: s, Name: "x", LeaseTime: 500 * time.Millisecond}, nil},
		{"heartbeat too slow", cluster.Config{Store: s, Name: "x", LeaseTime: 2 * time.Second, Heartbeat: time.Second}, nil},
		{"a hook of nothing", cluster.Config{Store: s, Name: "x", Hooks: []any{42}}, nil},
		{"a daemon without instances", cluster.Config{Store: s, Name: "x", Daemons: []cluster.Daemon{{Name: "d", Run: func(context.Context, int) error { return nil }}}}, nil},
		{"daemons only with shards", cluster.Config{Store: s, Name: "x", DaemonsOnly: true, Shards: []cluster.Shard{newHost(t, st)}}, nil},
		{"daemons only among members with shards", cluster.Config{Store: s, Cluster: t.Name(), Name: "x", LeaseTime: leaseTime, DaemonsOnly: true}, cluster.ErrDaemonsOnlyAmongShards},
	}
	for _, c := range cases {
		m, err := cluster.Join(t.Context(), c.cfg)
		if err == nil {
			_ = m.Leave(context.Background())
			t.Errorf("%s: Join accepted it", c.name)
			continue
		}
		if c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// TestHandlerOwnerNotAnswering: a live member whose address does not
// answer holds ranges; a request for one of its entities waits the move
// bound and is answered 502 naming the member and its address, not
// handled anywhere.
func TestHandlerOwnerNotAnswering(t *testing.T) {
	st := memory.New()
	s := st.Membership()
	dead := "127.0.0.1:1" // nothing listens on port 1
	a := join(t, st, s, "a", nil)
	b := join(t, st, s, "b", func(c *cluster.Config) { c.Address = dead })
	awaitBalanced(t, a, b)
	var id string
	for i := 0; id == ""; i++ {
		if cand := fmt.Sprintf("acct-%d", i); owner(t, []*node{a, b}, cand) == b {
			id = cand
		}
	}
	handled := false
	h, err := a.member.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handled = true }),
		cluster.HandlerConfig{Key: cluster.PathKey(bank.EntityType, "id"), MoveWait: 3 * heartbeat})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /accounts/{id}", h)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("POST", "/accounts/"+id, strings.NewReader("1")))
	if rec.Code != http.StatusBadGateway || !strings.Contains(rec.Body.String(), dead) || handled {
		t.Errorf("request for b's entity with b's address dead: %d %q (handled here: %v); want 502 naming %s", rec.Code, rec.Body.String(), handled, dead)
	}
}

// TestStoreClockOffsetDoesNotMatter: members never compare their own
// clock with the store's: with the store's clock an hour ahead (or
// behind) of the members', they share the ranges and keep them.
func TestStoreClockOffsetDoesNotMatter(t *testing.T) {
	for _, offset := range []time.Duration{time.Hour, -time.Hour} {
		t.Run(offset.String(), func(t *testing.T) {
			st := memory.New(memory.WithClock(func() time.Time { return time.Now().Add(offset) }))
			s := st.Membership()
			a := join(t, st, s, "a", nil)
			b := join(t, st, s, "b", nil)
			awaitBalanced(t, a, b)
			// Several lease times later nothing moved: every lease renewed.
			before := slices.Clone(a.member.Held())
			deadline := time.Now().Add(2 * leaseTime)
			for time.Now().Before(deadline) {
				<-a.member.Changed()
			}
			if got := a.member.Held(); !slices.Equal(got, before) {
				t.Errorf("a's leases changed with a steady cluster: %v, then %v", before, got)
			}
			awaitBalanced(t, a, b)
		})
	}
}

// stalling makes the heartbeat and the reads of a store hang until their
// context ends while stall is set.
type stalling struct {
	membership.Store
	stall atomic.Bool
}

func (s *stalling) wait(ctx context.Context) error {
	if s.stall.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (s *stalling) Heartbeat(ctx context.Context, c string, m membership.Holder, ttl time.Duration) ([]membership.Lease, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	return s.Store.Heartbeat(ctx, c, m, ttl)
}

func (s *stalling) Members(ctx context.Context, c string) ([]membership.Member, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	return s.Store.Members(ctx, c)
}

// TestDaemonRunsAgainAfterItsTermEnded: a daemon instance whose term ended
// while the store was slow (its run cancelled) runs again once the store
// answers: a term that ended is never silently extended.
func TestDaemonRunsAgainAfterItsTermEnded(t *testing.T) {
	s := &stalling{Store: memory.New().Membership()}
	var running, runs atomic.Int32
	started := make(chan struct{}, 16)
	d := cluster.Daemon{Name: "d", Instances: 1, Run: func(ctx context.Context, i int) error {
		runs.Add(1)
		running.Add(1)
		defer running.Add(-1)
		started <- struct{}{}
		<-ctx.Done()
		return nil
	}}
	m, err := cluster.Join(t.Context(), cluster.Config{Store: s, Cluster: t.Name(), Name: "a", LeaseTime: time.Second,
		Daemons: []cluster.Daemon{d}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Leave(context.Background())
	<-started
	s.stall.Store(true)
	// The term ends while the store hangs; the member reads nothing
	// meanwhile, so there is no change to wait for but the run's end.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for running.Load() > 0 {
		<-tick.C
	}
	s.stall.Store(false)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatalf("the daemon instance did not run again after the store answered (held %v, %d runs)", m.Held(), runs.Load())
	}
}

// gatedAcquire refuses the first Acquire of a daemon lease (as a busy
// store might), and holds the second until gate is closed, telling in
// when it is held.
type gatedAcquire struct {
	membership.Store
	n        atomic.Int32
	in, gate chan struct{}
}

func (g *gatedAcquire) Acquire(ctx context.Context, c, lease string, m membership.Holder, ttl time.Duration) (membership.Lease, error) {
	if strings.HasPrefix(lease, "daemon/") {
		switch g.n.Add(1) {
		case 1:
			return membership.Lease{}, errors.New("store busy")
		case 2:
			close(g.in)
			<-g.gate
		}
	}
	return g.Store.Acquire(ctx, c, lease, m, ttl)
}

// TestLeaseAcquiredWhileLeaving: a lease whose acquisition completes after
// Leave began is released without being served, and Leave completes.
func TestLeaseAcquiredWhileLeaving(t *testing.T) {
	st := memory.New()
	g := &gatedAcquire{Store: st.Membership(), in: make(chan struct{}), gate: make(chan struct{})}
	var runs atomic.Int32
	d := cluster.Daemon{Name: "d", Instances: 1, Run: func(ctx context.Context, i int) error { runs.Add(1); <-ctx.Done(); return nil }}
	m, err := cluster.Join(t.Context(), cluster.Config{Store: g, Cluster: t.Name(), Name: "a", LeaseTime: time.Second,
		Heartbeat: 100 * time.Millisecond, Daemons: []cluster.Daemon{d}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	<-g.in // a later round is acquiring the daemon's lease
	left := make(chan error, 1)
	go func() { left <- m.Leave(context.Background()) }()
	// Leave marks the member leaving at once and then waits for the
	// loop, which is inside Acquire; no event tells that it has begun.
	time.Sleep(100 * time.Millisecond)
	close(g.gate)
	if err := <-left; err != nil {
		t.Fatalf("Leave: %v", err)
	}
	if runs.Load() != 0 {
		t.Errorf("the daemon instance ran %d times, though its lease came after Leave began", runs.Load())
	}
	ls, err := st.Membership().Leases(t.Context(), t.Name())
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		if l.Live {
			t.Errorf("lease %+v still held after Leave", l)
		}
	}
}

// slowShard blocks the hand-off of one range until release is closed.
type slowShard struct {
	cluster.Shard
	slow    annals.SliceRange
	entered chan struct{}
	release chan struct{}
}

func (s *slowShard) HandOffRange(ctx context.Context, r annals.SliceRange) error {
	if r == s.slow {
		close(s.entered)
		select {
		case <-s.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.Shard.HandOffRange(ctx, r)
}

// TestLeavingMemberNotCounted: while a member leaves, the others share the
// work without it: the ranges it has handed off are taken at once, not
// when its slowest hand-off ends; the status names it leaving, and once
// it has left its mark is not listed as unowned work.
func TestLeavingMemberNotCounted(t *testing.T) {
	st := memory.New()
	s := st.Membership()
	slow := &slowShard{entered: make(chan struct{}), release: make(chan struct{})}
	a := join(t, st, s, "a", func(c *cluster.Config) {
		slow.Shard = c.Shards[0]
		c.Shards = []cluster.Shard{slow}
		c.HandOffTimeout = time.Minute
	})
	b := join(t, st, s, "b", nil)
	awaitBalanced(t, a, b)
	held := a.member.Held()
	for _, r := range a.member.Ranges() {
		if cluster.RangeLease(r) == held[0] {
			slow.slow = r
		}
	}
	left := make(chan error, 1)
	go func() { left <- a.member.Leave(context.Background()) }()
	<-slow.entered
	ctx, cancel := context.WithTimeout(t.Context(), 10*leaseTime)
	defer cancel()
	for {
		changed := b.member.Changed()
		if len(b.member.Held()) == cluster.DefaultRanges-1 {
			break
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("b holds %d ranges while a's slowest hand-off runs, want all %d but that one", len(b.member.Held()), cluster.DefaultRanges-1)
		}
	}
	status, err := cluster.ReadStatus(t.Context(), s, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	if len(status.Members) != 2 || !status.Members[0].Leaving || status.Members[1].Leaving {
		t.Errorf("status while a leaves: %+v, want a leaving and b not", status.Members)
	}
	close(slow.release)
	if err := <-left; err != nil {
		t.Fatalf("Leave: %v", err)
	}
	awaitBalanced(t, b)
	status, err = cluster.ReadStatus(t.Context(), s, t.Name())
	if err != nil || len(status.Unowned) != 0 {
		t.Errorf("status after a left: unowned %v, %v; want none", status.Unowned, err)
	}
}
