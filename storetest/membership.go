package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/membership"
)

// membershipRule is one rule of the membership contract.
type membershipRule struct {
	name, rule string
	run        func(t tb, s membership.Store, cluster string)
}

// membershipRules is the index of the membership suite's rules.
func membershipCases() []membershipRule {
	return []membershipRule{
		{"JoinIsListed", "a joined member is listed live with its address; clusters are apart", joinIsListed},
		{"NameTakenWhileLive", "a live member's name refuses another incarnation (ErrNameTaken) and takes its own again", nameTakenWhileLive},
		{"NameFreeAfterExpiry", "once a member's term has passed on the store's clock, another incarnation may join under its name", nameFreeAfterExpiry},
		{"AcquireFree", "a free lease is acquired at epoch 1; acquiring one's own again keeps the epoch", acquireFree},
		{"AcquireHeldRefused", "a live lease of another member refuses Acquire with ErrHeld and stays as it was", acquireHeldRefused},
		{"EpochGrowsOnOwnerChange", "every change of owner raises the epoch by one, through Release and through expiry", epochGrowsOnOwnerChange},
		{"HeartbeatRenewsOwnLeases", "Heartbeat renews the member's leases past their first term and returns them; not another's", heartbeatRenewsOwnLeases},
		{"HeartbeatOfNonMember", "Heartbeat of a member never joined, gone, or replaced by another incarnation fails with ErrNotMember", heartbeatOfNonMember},
		{"LeaveReleasesAll", "Leave frees every lease of the member and removes its record", leaveReleasesAll},
		{"ReleaseOnlyOwn", "Release by a member that does not hold the lease changes nothing", releaseOnlyOwn},
		{"ConcurrentAcquireOneWins", "of members acquiring one free lease at once, exactly one wins; the others get ErrHeld", concurrentAcquireOneWins},
		{"InvalidArguments", "empty names and lease times under MinTTL fail with ErrInvalid", membershipInvalidArguments},
	}
}

// membershipRules is the membership suite: the rules of
// membership.Store over s.Membership, and CloseEndsCalls over an
// instance of s.Open's. Rules about expiry wait for leases of
// membership.MinTTL to pass on the store's clock: the suite takes a few
// seconds.
func membershipRules(s Store) []rule {
	var rules []rule
	for _, r := range membershipCases() {
		rules = append(rules, rule{r.name, r.rule, func(t tb) { r.run(t, s.Membership, uniqueID(t, "KitCluster")) }})
	}
	return append(rules, rule{"CloseEndsCalls", "every call with an ended context fails with its error; after the store is closed, with journal.ErrClosed (membership has no closed error of its own)", func(t tb) {
		o := own(t, s)
		if o.Membership == nil {
			t.Fatal("storetest: the Store that Store.Open returned has no Membership")
		}
		membershipClosed(t, o.Membership, o.Close)
	}})
}

// holder returns a member identity of one incarnation.
func holder(name, incarnation string) membership.Holder {
	return membership.Holder{Name: name, Incarnation: incarnation}
}

const (
	longTTL  = time.Minute
	shortTTL = membership.MinTTL
)

func mustJoin(t tb, s membership.Store, cluster string, m membership.Member, ttl time.Duration) {
	t.Helper()
	if err := s.Join(testContext(t), cluster, m, ttl); err != nil {
		t.Fatalf("Join %s/%s: %v", m.Name, m.Incarnation, err)
	}
}

func mustAcquire(t tb, s membership.Store, cluster, lease string, m membership.Holder, ttl time.Duration) membership.Lease {
	t.Helper()
	l, err := s.Acquire(testContext(t), cluster, lease, m, ttl)
	if err != nil {
		t.Fatalf("Acquire %s by %s: %v", lease, m.Name, err)
	}
	return l
}

func findMember(t tb, s membership.Store, cluster, name string) (membership.Member, bool) {
	t.Helper()
	ms, err := s.Members(testContext(t), cluster)
	if err != nil {
		t.Fatalf("Members: %v", err)
	}
	for _, m := range ms {
		if m.Name == name {
			return m, true
		}
	}
	return membership.Member{}, false
}

func findLease(t tb, s membership.Store, cluster, name string) membership.Lease {
	t.Helper()
	ls, err := s.Leases(testContext(t), cluster)
	if err != nil {
		t.Fatalf("Leases: %v", err)
	}
	for _, l := range ls {
		if l.Name == name {
			return l
		}
	}
	return membership.Lease{Name: name}
}

// awaitExpiry waits until the store reports lease (or, with lease "", the
// member name) no longer live, bounded by ten times MinTTL.
func awaitExpiry(t tb, s membership.Store, cluster, lease, member string) {
	t.Helper()
	deadline := time.Now().Add(10 * membership.MinTTL)
	for {
		live := false
		if lease != "" {
			live = findLease(t, s, cluster, lease).Live
		} else {
			m, ok := findMember(t, s, cluster, member)
			live = ok && m.Live
		}
		if !live {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s%s still live %v after its term of %v", lease, member, 10*membership.MinTTL, shortTTL)
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		}
	}
}

func joinIsListed(t tb, s membership.Store, cluster string) {
	m := membership.Member{Name: "a", Incarnation: "1", Address: "127.0.0.1:8001"}
	mustJoin(t, s, cluster, m, longTTL)
	got, ok := findMember(t, s, cluster, "a")
	if !ok || !got.Live || got.Address != m.Address || got.Incarnation != "1" {
		t.Fatalf("Members after Join: %+v (found %v), want a live member a at %s", got, ok, m.Address)
	}
	if !got.Expires.After(got.Joined) {
		t.Errorf("member %+v: Expires not after Joined", got)
	}
	if _, ok := findMember(t, s, cluster+"-other", "a"); ok {
		t.Errorf("member a of cluster %s is listed in another cluster", cluster)
	}
}

func nameTakenWhileLive(t tb, s membership.Store, cluster string) {
	mustJoin(t, s, cluster, membership.Member{Name: "a", Incarnation: "1", Address: "x:1"}, longTTL)
	err := s.Join(testContext(t), cluster, membership.Member{Name: "a", Incarnation: "2", Address: "x:2"}, longTTL)
	if !errors.Is(err, membership.ErrNameTaken) {
		t.Fatalf("Join of a live name by another incarnation: %v, want ErrNameTaken", err)
	}
	if got, _ := findMember(t, s, cluster, "a"); got.Incarnation != "1" || got.Address != "x:1" {
		t.Errorf("after the refused Join: %+v, want incarnation 1 at x:1", got)
	}
	mustJoin(t, s, cluster, membership.Member{Name: "a", Incarnation: "1", Address: "x:3"}, longTTL)
	if got, _ := findMember(t, s, cluster, "a"); got.Address != "x:3" {
		t.Errorf("after a Join of the same incarnation: %+v, want address x:3", got)
	}
}

func nameFreeAfterExpiry(t tb, s membership.Store, cluster string) {
	mustJoin(t, s, cluster, membership.Member{Name: "a", Incarnation: "1", Address: "x:1"}, shortTTL)
	awaitExpiry(t, s, cluster, "", "a")
	mustJoin(t, s, cluster, membership.Member{Name: "a", Incarnation: "2", Address: "x:2"}, longTTL)
	if got, _ := findMember(t, s, cluster, "a"); got.Incarnation != "2" || !got.Live {
		t.Errorf("after the first incarnation expired: %+v, want live incarnation 2", got)
	}
}

func acquireFree(t tb, s membership.Store, cluster string) {
	a := holder("a", "1")
	l := mustAcquire(t, s, cluster, "r0", a, longTTL)
	if l.Owner != a || l.Epoch != 1 || !l.Live || l.Name != "r0" {
		t.Fatalf("Acquire of a free lease: %+v, want r0 owned by a at epoch 1, live", l)
	}
	again := mustAcquire(t, s, cluster, "r0", a, longTTL)
	if again.Epoch != 1 || again.Owner != a {
		t.Errorf("Acquire of one's own lease: %+v, want epoch 1 kept", again)
	}
	if got := findLease(t, s, cluster, "r0"); got.Owner != a || got.Epoch != 1 || !got.Live {
		t.Errorf("Leases: %+v, want r0 owned by a at epoch 1", got)
	}
}

func acquireHeldRefused(t tb, s membership.Store, cluster string) {
	a, b := holder("a", "1"), holder("b", "1")
	mustAcquire(t, s, cluster, "r0", a, longTTL)
	if _, err := s.Acquire(testContext(t), cluster, "r0", b, longTTL); !errors.Is(err, membership.ErrHeld) {
		t.Fatalf("Acquire of a's live lease by b: %v, want ErrHeld", err)
	}
	// A new incarnation of the holder's name is another member.
	if _, err := s.Acquire(testContext(t), cluster, "r0", holder("a", "2"), longTTL); !errors.Is(err, membership.ErrHeld) {
		t.Fatalf("Acquire of a's live lease by a's next incarnation: %v, want ErrHeld", err)
	}
	if got := findLease(t, s, cluster, "r0"); got.Owner != a || got.Epoch != 1 {
		t.Errorf("after refused Acquires: %+v, want owned by a at epoch 1", got)
	}
}

func epochGrowsOnOwnerChange(t tb, s membership.Store, cluster string) {
	ctx := testContext(t)
	a, b := holder("a", "1"), holder("b", "1")
	mustAcquire(t, s, cluster, "r0", a, longTTL)
	if err := s.Release(ctx, cluster, "r0", a); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if got := findLease(t, s, cluster, "r0"); got.Live || got.Owner != (membership.Holder{}) || got.Epoch != 1 {
		t.Errorf("a released lease: %+v, want free at epoch 1", got)
	}
	if l := mustAcquire(t, s, cluster, "r0", b, shortTTL); l.Epoch != 2 {
		t.Errorf("Acquire after Release: epoch %d, want 2", l.Epoch)
	}
	awaitExpiry(t, s, cluster, "r0", "")
	if l := mustAcquire(t, s, cluster, "r0", a, longTTL); l.Epoch != 3 || l.Owner != a {
		t.Errorf("Acquire after expiry: %+v, want a at epoch 3", l)
	}
	ls, err := s.Heartbeat(ctx, cluster, b, longTTL)
	if err == nil && len(ls) > 0 {
		t.Errorf("Heartbeat of the expired owner renewed %+v", ls)
	}
}

func heartbeatRenewsOwnLeases(t tb, s membership.Store, cluster string) {
	ctx := testContext(t)
	a, b := holder("a", "1"), holder("b", "1")
	mustJoin(t, s, cluster, membership.Member{Name: "a", Incarnation: "1", Address: "x"}, shortTTL)
	first := mustAcquire(t, s, cluster, "r0", a, shortTTL)
	mustAcquire(t, s, cluster, "r1", a, shortTTL)
	mustAcquire(t, s, cluster, "r2", b, longTTL)
	ls, err := s.Heartbeat(ctx, cluster, a, longTTL)
	if err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	if len(ls) != 2 || ls[0].Name != "r0" || ls[1].Name != "r1" {
		t.Fatalf("Heartbeat renewed %+v, want r0 and r1 by name", ls)
	}
	for _, l := range ls {
		if l.Owner != a || l.Epoch != 1 || !l.Expires.After(first.Expires) {
			t.Errorf("renewed %+v, want a's at epoch 1 expiring after %v", l, first.Expires)
		}
	}
	// Past the first term the leases and the membership stay live.
	deadline := first.Expires.Add(membership.MinTTL / 2)
	for time.Now().Before(deadline) {
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	if got := findLease(t, s, cluster, "r0"); !got.Live || got.Owner != a {
		t.Errorf("renewed lease after its first term: %+v, want live, a's", got)
	}
	if m, _ := findMember(t, s, cluster, "a"); !m.Live {
		t.Errorf("member after its first term, renewed: %+v, want live", m)
	}
	if got := findLease(t, s, cluster, "r2"); got.Owner != b {
		t.Errorf("another's lease after a's Heartbeat: %+v", got)
	}
}

func heartbeatOfNonMember(t tb, s membership.Store, cluster string) {
	ctx := testContext(t)
	if _, err := s.Heartbeat(ctx, cluster, holder("ghost", "1"), longTTL); !errors.Is(err, membership.ErrNotMember) {
		t.Errorf("Heartbeat of a member never joined: %v, want ErrNotMember", err)
	}
	mustJoin(t, s, cluster, membership.Member{Name: "a", Incarnation: "1", Address: "x"}, shortTTL)
	awaitExpiry(t, s, cluster, "", "a")
	mustJoin(t, s, cluster, membership.Member{Name: "a", Incarnation: "2", Address: "x"}, longTTL)
	if _, err := s.Heartbeat(ctx, cluster, holder("a", "1"), longTTL); !errors.Is(err, membership.ErrNotMember) {
		t.Errorf("Heartbeat of a replaced incarnation: %v, want ErrNotMember", err)
	}
	if err := s.Leave(ctx, cluster, holder("a", "2")); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	if _, err := s.Heartbeat(ctx, cluster, holder("a", "2"), longTTL); !errors.Is(err, membership.ErrNotMember) {
		t.Errorf("Heartbeat after Leave: %v, want ErrNotMember", err)
	}
}

func leaveReleasesAll(t tb, s membership.Store, cluster string) {
	ctx := testContext(t)
	a, b := holder("a", "1"), holder("b", "1")
	mustJoin(t, s, cluster, membership.Member{Name: "a", Incarnation: "1", Address: "x"}, longTTL)
	mustAcquire(t, s, cluster, "r0", a, longTTL)
	mustAcquire(t, s, cluster, "r1", a, longTTL)
	if err := s.Leave(ctx, cluster, a); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	if _, ok := findMember(t, s, cluster, "a"); ok {
		t.Errorf("a is still listed after Leave")
	}
	for _, name := range []string{"r0", "r1"} {
		if l := mustAcquire(t, s, cluster, name, b, longTTL); l.Epoch != 2 {
			t.Errorf("Acquire of %s after a left: %+v, want b's at epoch 2", name, l)
		}
	}
}

func releaseOnlyOwn(t tb, s membership.Store, cluster string) {
	a, b := holder("a", "1"), holder("b", "1")
	mustAcquire(t, s, cluster, "r0", a, longTTL)
	if err := s.Release(testContext(t), cluster, "r0", b); err != nil {
		t.Fatalf("Release by a non-holder: %v, want nil", err)
	}
	if err := s.Release(testContext(t), cluster, "r0", holder("a", "2")); err != nil {
		t.Fatalf("Release by the holder's next incarnation: %v, want nil", err)
	}
	if got := findLease(t, s, cluster, "r0"); got.Owner != a || !got.Live || got.Epoch != 1 {
		t.Errorf("after others' Release: %+v, want a's, live, epoch 1", got)
	}
}

func concurrentAcquireOneWins(t tb, s membership.Store, cluster string) {
	ctx := testContext(t)
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = s.Acquire(ctx, cluster, "r0", holder(string(rune('a'+i)), "1"), longTTL)
		})
	}
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won >= 0:
			t.Errorf("members %c and %c both acquired the lease", 'a'+won, 'a'+i)
		case err == nil:
			won = i
		case !errors.Is(err, membership.ErrHeld):
			t.Errorf("member %c: %v, want nil or ErrHeld", 'a'+i, err)
		}
	}
	if won < 0 {
		t.Fatalf("no member acquired the free lease")
	}
	if got := findLease(t, s, cluster, "r0"); got.Owner != holder(string(rune('a'+won)), "1") || got.Epoch != 1 {
		t.Errorf("lease %+v, want the winner %c's at epoch 1", got, 'a'+won)
	}
}

func membershipInvalidArguments(t tb, s membership.Store, cluster string) {
	ctx := testContext(t)
	a := holder("a", "1")
	cases := []struct {
		name string
		call func() error
	}{
		{"Join with an empty name", func() error {
			return s.Join(ctx, cluster, membership.Member{Incarnation: "1"}, longTTL)
		}},
		{"Join with an empty incarnation", func() error {
			return s.Join(ctx, cluster, membership.Member{Name: "a"}, longTTL)
		}},
		{"Join in an empty cluster name", func() error {
			return s.Join(ctx, "", membership.Member{Name: "a", Incarnation: "1"}, longTTL)
		}},
		{"Join for less than MinTTL", func() error {
			return s.Join(ctx, cluster, membership.Member{Name: "a", Incarnation: "1"}, membership.MinTTL/2)
		}},
		{"Acquire of an empty lease name", func() error {
			_, err := s.Acquire(ctx, cluster, "", a, longTTL)
			return err
		}},
		{"Acquire for less than MinTTL", func() error {
			_, err := s.Acquire(ctx, cluster, "r0", a, membership.MinTTL/2)
			return err
		}},
		{"Heartbeat for less than MinTTL", func() error {
			_, err := s.Heartbeat(ctx, cluster, a, membership.MinTTL/2)
			return err
		}},
	}
	for _, c := range cases {
		if err := c.call(); !errors.Is(err, membership.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", c.name, err)
		}
	}
	if got := findLease(t, s, cluster, "r0"); got.Epoch != 0 {
		t.Errorf("a refused Acquire left %+v", got)
	}
}

// RunMembershipAcross runs the rules of membership.Store that hold
// between two store values on one database, as two processes hold them
// (two pools, two sessions, two opens of one file), one named, parallel
// subtest of t per rule: each sees the other's members and leases,
// refuses what the other holds, and of members racing through both for
// one lease, free and then expired, exactly one takes it at the next
// epoch. The rules use cluster names of their own.
func RunMembershipAcross(t *testing.T, a, b membership.Store) {
	t.Helper()
	tt, s := testingT{t}, [2]membership.Store{a, b}
	for _, r := range []rule{
		{"AcrossStoresSeeEachOther", "a member and a lease recorded through one store are seen and refused through the other", func(t tb) {
			membershipAcrossSee(t, s, uniqueID(t, "KitCluster"))
		}},
		{"AcrossStoresOneWins", "of members racing through both stores for a lease, free and then expired, exactly one takes it, at epoch 1 and then 2", func(t tb) {
			membershipAcrossRace(t, s, uniqueID(t, "KitCluster"))
		}},
	} {
		runRule(tt, r, "")
	}
}

func membershipAcrossSee(t tb, s [2]membership.Store, cluster string) {
	ctx := testContext(t)
	a, b := holder("a", "1"), holder("b", "1")
	mustJoin(t, s[0], cluster, membership.Member{Name: a.Name, Incarnation: a.Incarnation, Address: "x:1"}, longTTL)
	if m, ok := findMember(t, s[1], cluster, "a"); !ok || !m.Live || m.Address != "x:1" {
		t.Fatalf("the other store's Members: %+v (found %v), want a at x:1, live", m, ok)
	}
	if err := s[1].Join(ctx, cluster, membership.Member{Name: a.Name, Incarnation: "2"}, longTTL); !errors.Is(err, membership.ErrNameTaken) {
		t.Errorf("Join of a's name by another incarnation through the other store: %v, want ErrNameTaken", err)
	}
	mustAcquire(t, s[0], cluster, "r0", a, longTTL)
	if l := findLease(t, s[1], cluster, "r0"); l.Owner != a || !l.Live || l.Epoch != 1 {
		t.Errorf("the other store's Leases: %+v, want a's at epoch 1, live", l)
	}
	if _, err := s[1].Acquire(ctx, cluster, "r0", b, longTTL); !errors.Is(err, membership.ErrHeld) {
		t.Errorf("Acquire of a's lease through the other store: %v, want ErrHeld", err)
	}
}

func membershipAcrossRace(t tb, s [2]membership.Store, cluster string) {
	raceAcquire(t, s[:], cluster, "r0", 1, longTTL) // free
	// The winner's short term passes on the store's clock; then they race
	// for the expired lease.
	raceAcquireShort(t, s[:], cluster, "r1")
	awaitExpiry(t, s[0], cluster, "r1", "")
	raceAcquire(t, s[:], cluster, "r1", 2, longTTL)
}

// raceAcquireShort has one member take lease for MinTTL.
func raceAcquireShort(t tb, s []membership.Store, cluster, lease string) {
	t.Helper()
	mustAcquire(t, s[0], cluster, lease, holder("first", "1"), shortTTL)
}

// raceAcquire makes 8 members per store race for lease and checks that
// exactly one took it, at epoch, and that the others got ErrHeld.
func raceAcquire(t tb, stores []membership.Store, cluster, lease string, epoch int64, ttl time.Duration) {
	t.Helper()
	const per = 8
	ctx := testContext(t)
	errs := make([]error, per*len(stores))
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = stores[i%len(stores)].Acquire(ctx, cluster, lease, holder(fmt.Sprint("m", i), "1"), ttl)
		})
	}
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won >= 0:
			t.Errorf("%s: m%d and m%d both acquired it", lease, won, i)
		case err == nil:
			won = i
		case !errors.Is(err, membership.ErrHeld):
			t.Errorf("%s: m%d: %v, want nil or ErrHeld", lease, i, err)
		}
	}
	if won < 0 {
		t.Fatalf("%s: nobody acquired it", lease)
	}
	for _, s := range stores {
		if l := findLease(t, s, cluster, lease); l.Owner != holder(fmt.Sprint("m", won), "1") || l.Epoch != epoch || !l.Live {
			t.Errorf("%s after the race: %+v, want m%d's at epoch %d", lease, l, won, epoch)
		}
	}
}

// membershipClosed checks that every call of m answers as the store's
// other calls do when it cannot run: with an ended context, that
// context's error; after closeStore closed the store, journal.ErrClosed.
func membershipClosed(t tb, m membership.Store, closeStore func() error) {
	a := holder("a", "1")
	calls := func(m membership.Store, ctx context.Context) map[string]error {
		_, hb := m.Heartbeat(ctx, "c", a, longTTL)
		_, acq := m.Acquire(ctx, "c", "r0", a, longTTL)
		_, mem := m.Members(ctx, "c")
		_, ls := m.Leases(ctx, "c")
		return map[string]error{
			"Join":      m.Join(ctx, "c", membership.Member{Name: "a", Incarnation: "1"}, longTTL),
			"Heartbeat": hb, "Acquire": acq, "Members": mem, "Leases": ls,
			"Release": m.Release(ctx, "c", "r0", a),
			"Leave":   m.Leave(ctx, "c", a),
		}
	}
	ctx, cancel := context.WithCancel(testContext(t))
	cancel()
	for op, err := range calls(m, ctx) {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context: %v, want context.Canceled", op, err)
		}
	}
	if err := closeStore(); err != nil {
		t.Fatalf("close: %v", err)
	}
	for op, err := range calls(m, testContext(t)) {
		if !errors.Is(err, journal.ErrClosed) {
			t.Errorf("%s after Close: %v, want journal.ErrClosed", op, err)
		}
	}
}
