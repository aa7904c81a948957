package cassandra_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/annals-go/annals/membership"
	"github.com/annals-go/annals/store/cassandra"
	"github.com/annals-go/annals/store/cassandra/cassandratest"
	"github.com/annals-go/annals/storetest"
)

// TestMembership runs the kit's rules across two sessions on one keyspace
// (TestKits runs the membership suite), then the Cassandra store's own
// rules: the rows hold what the type's documentation says (TTLs of whole
// seconds plus one, an expired lease's epoch and owner kept, an expired
// member's row gone), and a keyspace without the table fails with
// ErrSchemaMissing until Migrate creates it.
func TestMembership(t *testing.T) {
	u, ks := cassandratest.URL(t)
	open := func(t *testing.T, opts ...cassandra.Option) *cassandra.Store {
		t.Helper()
		s, err := cassandra.Open(t.Context(), u, opts...)
		if err != nil {
			t.Fatalf("open %s: %v", u, err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	s := open(t, cassandra.WithMigrate(true))
	m := s.Membership()

	t.Run("kit across sessions", func(t *testing.T) {
		other := open(t).Membership() // a second session, as another process's
		storetest.RunMembershipAcross(t, m, other)
	})

	t.Run("rows", func(t *testing.T) {
		ctx := t.Context()
		const cluster = "rows"
		a, b := membership.Holder{Name: "a", Incarnation: "1"}, membership.Holder{Name: "b", Incarnation: "1"}
		if err := m.Join(ctx, cluster, membership.Member{Name: "a", Incarnation: "1", Address: "x:1"}, 1500*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		l, err := m.Acquire(ctx, cluster, "r0", a, 1500*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		// 1.5 s is written as 2 s rounded up, plus one.
		var live, term, epochTTL int
		if err := s.Session().Query(`SELECT TTL(live), term, TTL(epoch) FROM `+ks+`.cluster_membership WHERE cluster = ? AND kind = 'lease' AND name = 'r0'`, cluster).
			WithContext(ctx).Scan(&live, &term, &epochTTL); err != nil {
			t.Fatal(err)
		}
		if term != 3 || live < 2 || live > 3 || epochTTL != 0 {
			t.Errorf("lease row: TTL(live) %d, term %d, TTL(epoch) %d; want a TTL of 2 or 3 s, term 3, no TTL on epoch", live, term, epochTTL)
		}
		if d := time.Until(l.Expires); d < time.Second || d > 4*time.Second {
			t.Errorf("Acquire's Expires %v is %v away, want within (1 s, 4 s]", l.Expires, d)
		}
		var memberTTL int
		if err := s.Session().Query(`SELECT TTL(address) FROM `+ks+`.cluster_membership WHERE cluster = ? AND kind = 'member' AND name = 'a'`, cluster).
			WithContext(ctx).Scan(&memberTTL); err != nil || memberTTL < 2 || memberTTL > 3 {
			t.Errorf("member row: TTL(address) %d, %v; want 2 or 3", memberTTL, err)
		}

		// Past the term: the lease names its owner, not live, at its epoch;
		// the member's row is gone, and so is its membership.
		deadline := time.Now().Add(10 * time.Second)
		for {
			ls, err := m.Leases(ctx, cluster)
			if err != nil {
				t.Fatal(err)
			}
			if len(ls) == 1 && !ls[0].Live {
				if ls[0].Owner != a || ls[0].Epoch != 1 || ls[0].Expires.After(time.Now()) {
					t.Errorf("expired lease %+v, want a's at epoch 1, Expires passed", ls[0])
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("lease still live after 10 s: %+v", ls)
			}
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			}
		}
		if ms, err := m.Members(ctx, cluster); err != nil || len(ms) != 0 {
			t.Errorf("Members after the term: %+v, %v; want none", ms, err)
		}
		if _, err := m.Heartbeat(ctx, cluster, a, time.Minute); !errors.Is(err, membership.ErrNotMember) {
			t.Errorf("Heartbeat after the term: %v, want ErrNotMember", err)
		}
		// The owner's own Acquire keeps the epoch; another's raises it.
		if l, err := m.Acquire(ctx, cluster, "r0", a, time.Minute); err != nil || l.Epoch != 1 || !l.Live {
			t.Errorf("Acquire of one's own expired lease: %+v, %v; want live at epoch 1", l, err)
		}
		if err := m.Release(ctx, cluster, "r0", a); err != nil {
			t.Fatal(err)
		}
		if l, err := m.Acquire(ctx, cluster, "r0", b, time.Minute); err != nil || l.Epoch != 2 || l.Owner != b {
			t.Errorf("Acquire after Release: %+v, %v; want b's at epoch 2", l, err)
		}
		if _, err := m.Acquire(ctx, cluster, "r1", a, 21*365*24*time.Hour); !errors.Is(err, membership.ErrInvalid) {
			t.Errorf("Acquire for 21 years: %v, want ErrInvalid (Cassandra's TTLs end at 20 years)", err)
		}
	})

	t.Run("heartbeat races acquires", func(t *testing.T) {
		// a's leases have expired; a's Heartbeat (one conditional batch)
		// races b's Acquires of them from another session. Each lease is
		// either renewed for a, and refused to b, or b's at the next
		// epoch and not among those a's Heartbeat returns.
		ctx := t.Context()
		const cluster, n = "race", 8
		other := open(t).Membership()
		a, b := membership.Holder{Name: "a", Incarnation: "1"}, membership.Holder{Name: "b", Incarnation: "1"}
		if err := m.Join(ctx, cluster, membership.Member{Name: "a", Incarnation: "1"}, time.Minute); err != nil {
			t.Fatal(err)
		}
		names := make([]string, n)
		for i := range names {
			names[i] = string(rune('p' + i))
			if _, err := m.Acquire(ctx, cluster, names[i], a, membership.MinTTL); err != nil {
				t.Fatal(err)
			}
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			ls, err := m.Leases(ctx, cluster)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(ls, func(l membership.Lease) bool { return l.Live }) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("leases still live after 10 s: %+v", ls)
			}
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			}
		}
		var wg sync.WaitGroup
		var renewed []membership.Lease
		var hbErr error
		took := make([]error, n)
		wg.Go(func() { renewed, hbErr = m.Heartbeat(ctx, cluster, a, time.Minute) })
		for i, name := range names {
			wg.Go(func() { _, took[i] = other.Acquire(ctx, cluster, name, b, time.Minute) })
		}
		wg.Wait()
		if hbErr != nil {
			t.Fatalf("Heartbeat: %v", hbErr)
		}
		t.Logf("a's Heartbeat renewed %d of %d leases; b took the others", len(renewed), n)
		ls, err := m.Leases(ctx, cluster)
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range ls {
			wasRenewed := slices.ContainsFunc(renewed, func(r membership.Lease) bool { return r.Name == l.Name })
			switch {
			case wasRenewed && errors.Is(took[i], membership.ErrHeld):
				if l.Owner != a || l.Epoch != 1 || !l.Live {
					t.Errorf("lease %s renewed for a: %+v, want a's at epoch 1, live", l.Name, l)
				}
			case !wasRenewed && took[i] == nil:
				if l.Owner != b || l.Epoch != 2 || !l.Live {
					t.Errorf("lease %s taken by b: %+v, want b's at epoch 2, live", l.Name, l)
				}
			default:
				t.Errorf("lease %s: renewed for a %v, b's Acquire %v; want exactly one", l.Name, wasRenewed, took[i])
			}
		}
	})
}

// TestMembershipSchema: Migrate creates cluster_membership with the other
// tables; in a keyspace without it (an earlier Annals, a Pekko service's)
// Open succeeds, membership calls fail with ErrSchemaMissing naming the
// table, the migrator's one pending step creates it alone, and after it
// the calls work.
func TestMembershipSchema(t *testing.T) {
	u, ks := cassandratest.URL(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s, err := cassandra.Open(ctx, u, cassandra.WithMigrate(true))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Session().Query(`DROP TABLE ` + ks + `.cluster_membership`).WithContext(ctx).Exec(); err != nil {
		t.Fatal(err)
	}
	m := s.Membership()
	a := membership.Holder{Name: "a", Incarnation: "1"}
	_, acq := m.Acquire(ctx, "c", "r0", a, time.Minute)
	_, ls := m.Leases(ctx, "c")
	for call, err := range map[string]error{
		"Join":    m.Join(ctx, "c", membership.Member{Name: "a", Incarnation: "1"}, time.Minute),
		"Acquire": acq,
		"Leases":  ls,
	} {
		if !errors.Is(err, cassandra.ErrSchemaMissing) || !strings.Contains(err.Error(), "cluster_membership") {
			t.Errorf("%s without the table: %v, want ErrSchemaMissing naming cluster_membership", call, err)
		}
	}
	mig, err := cassandra.NewMigrator(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer mig.Close()
	steps, err := mig.PendingMigrations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 1 || steps[0].From != cassandra.SchemaVersion || strings.Count(steps[0].SQL, "CREATE ") != 1 ||
		!strings.Contains(steps[0].SQL, "CREATE TABLE IF NOT EXISTS "+ks+".cluster_membership (") {
		t.Fatalf("PendingMigrations = %+v, want one step from %d creating cluster_membership alone", steps, cassandra.SchemaVersion)
	}
	if _, err := mig.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if l, err := m.Acquire(ctx, "c", "r0", a, time.Minute); err != nil || l.Epoch != 1 {
		t.Fatalf("Acquire after Migrate: %+v, %v", l, err)
	}
}
