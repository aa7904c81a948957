package kafkacluster_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/examples/bank"
	"github.com/annals-go/annals/membership"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/eventual/pg"
	"github.com/annals-go/annals/store/kafka/eventual/pg/pgeventualtest"
	"github.com/annals-go/annals/store/kafka/kafkacluster"
	"github.com/annals-go/annals/store/kafka/kafkatest"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

// partitions is the partition count of the test's journal topic.
const partitions = 4

// world is one test's broker, journal topic and group.
type world struct {
	brokers []string
	topic   string
	group   string
	tables  *pg.Store
	journal *kafka.Journal
}

func newWorld(t *testing.T) *world {
	t.Helper()
	brokers := kafkatest.Real(t)
	prefix := kafkatest.Prefix(t, brokers, "kc")
	w := &world{brokers: brokers, topic: prefix + "Account", group: prefix + "group"}
	kafkatest.CreateTopic(t, brokers, w.topic, partitions)
	_, schema := pgtest.Schema(t)
	tables := pgeventualtest.OpenIn(t, schema)
	w.tables = tables
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	j, err := kafka.Open(ctx, brokers, tables, kafka.WithTopic(func(string) string { return w.topic }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	w.journal = j
	return w
}

// node is one member and its host.
type node struct {
	member *kafkacluster.Member
	host   *entity.Host[bank.Command, bank.Event, bank.Account]
}

// newHost returns a host of the bank's accounts on j, Assigned when
// assigned, shut down when the test ends.
func newHost(t *testing.T, j *kafka.Journal, assigned bool) *entity.Host[bank.Command, bank.Event, bank.Account] {
	t.Helper()
	reg := serialization.NewRegistry()
	if err := bank.Register(reg); err != nil {
		t.Fatal(err)
	}
	host, err := entity.NewHost(bank.Behavior(), entity.HostConfig{Journal: j, Registry: reg, Assigned: assigned})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = host.Shutdown(context.Background()) })
	return host
}

// join makes name a member at the address name.invalid:80, which no one
// answers.
func (w *world) join(t *testing.T, name string, hooks ...any) (*node, error) {
	t.Helper()
	return w.joinAt(t, name, name+".invalid:80", hooks...)
}

// joinAt makes name a member taking forwarded requests at address.
func (w *world) joinAt(t *testing.T, name, address string, hooks ...any) (*node, error) {
	t.Helper()
	host := newHost(t, w.journal, true)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	m, err := kafkacluster.Join(ctx, kafkacluster.Config{
		Journal: w.journal, Group: w.group, Name: name, Address: address,
		Shards: []kafkacluster.Shard{host}, SessionTimeout: 6 * time.Second, Hooks: hooks,
	})
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = m.Leave(context.Background()) })
	return &node{member: m, host: host}, nil
}

// await waits, on the members' Changed signals, until cond holds.
func await(t *testing.T, what string, cond func() bool, members ...*kafkacluster.Member) {
	t.Helper()
	deadline := time.After(time.Minute)
	for !cond() {
		changed := make([]<-chan struct{}, len(members))
		for i, m := range members {
			changed[i] = m.Changed()
		}
		if cond() {
			return
		}
		select {
		case <-changed[0]:
		case <-anyOf(changed[1:]):
		case <-deadline:
			t.Fatalf("after a minute: not %s (%v)", what, members)
		}
	}
}

// anyOf returns a channel closed when one of cs is.
func anyOf(cs []<-chan struct{}) <-chan struct{} {
	out := make(chan struct{})
	for _, c := range cs {
		go func() {
			select {
			case <-c:
				close(out)
			case <-out:
			}
		}()
	}
	if len(cs) == 0 {
		return nil
	}
	return out
}

// deposit deposits amount into account id on its owner among nodes,
// trying again while the account moves.
func deposit(t *testing.T, id string, amount int64, nodes ...*node) {
	t.Helper()
	pid := annals.PersistenceID(bank.EntityType, id)
	deadline := time.Now().Add(time.Minute)
	for {
		for _, n := range nodes {
			owner, ok := n.member.OwnerOf(pid)
			if !ok || !owner.Local {
				continue
			}
			_, err := entity.Ask(t.Context(), n.host, id, func(rt entity.ReplyTo[int64]) bank.Command { return bank.Deposit{Amount: amount, Reply: rt} })
			if err == nil {
				return
			}
			if !errors.Is(err, entity.ErrNotOwned) && !errors.Is(err, engine.ErrFenced) {
				t.Fatalf("deposit to %s on %s: %v", id, n.member.Name(), err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no member took a deposit to %s for a minute", id)
		}
		select {
		case <-nodes[0].member.Changed():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestMembersSharePartitions: two members split the journal topic's
// partitions; each account runs on the member holding its partition, and
// both name the same owner; deposits made while the partitions move are
// all kept; a leaving member hands its partitions to the other; a name
// taken by a member is refused.
func TestMembersSharePartitions(t *testing.T) {
	w := newWorld(t)
	ha, hb := &recorder{}, &recorder{}
	a, err := w.join(t, "a", ha)
	if err != nil {
		t.Fatal(err)
	}
	await(t, "a holding every partition", func() bool { return len(a.member.Held()) == partitions }, a.member)
	const accounts = 24
	want := map[string]int64{}
	for i := range accounts {
		id := fmt.Sprintf("acc-%d", i)
		deposit(t, id, 1, a)
		want[id]++
	}
	if _, err := w.join(t, "a"); !errors.Is(err, membership.ErrNameTaken) {
		t.Fatalf("a second member named a: %v, want membership.ErrNameTaken", err)
	}
	b, err := w.join(t, "b", hb)
	if err != nil {
		t.Fatal(err)
	}
	for i := range accounts { // while the partitions move
		id := fmt.Sprintf("acc-%d", i)
		deposit(t, id, 10, a, b)
		want[id] += 10
	}
	await(t, "a and b holding half the partitions each", func() bool {
		return len(a.member.Held()) == partitions/2 && len(b.member.Held()) == partitions/2
	}, a.member, b.member)
	await(t, "a and b seeing each other's partitions", func() bool {
		for i := range accounts {
			pid := annals.PersistenceID(bank.EntityType, fmt.Sprintf("acc-%d", i))
			oa, okA := a.member.OwnerOf(pid)
			ob, okB := b.member.OwnerOf(pid)
			if !okA || !okB || oa.Member != ob.Member || oa.Local == ob.Local {
				return false
			}
		}
		return true
	}, a.member, b.member)
	for i := range accounts {
		pid := annals.PersistenceID(bank.EntityType, fmt.Sprintf("acc-%d", i))
		owner, _ := a.member.OwnerOf(pid)
		if want := fmt.Sprintf("%s.invalid:80", owner.Member); owner.Address != want {
			t.Errorf("owner of %s at %q, want %q", pid, owner.Address, want)
		}
		if owner.Epoch <= 0 {
			t.Errorf("owner of %s has epoch %d, want the group's generation", pid, owner.Epoch)
		}
	}
	st, err := kafkacluster.ReadStatus(t.Context(), w.brokers, w.group)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Members) != 2 || st.Members[0].Name != "a" || st.Members[1].Name != "b" || st.Members[0].Address != "a.invalid:80" {
		t.Errorf("ReadStatus members: %+v, want a and b with their addresses", st.Members)
	} else if st.State == "Stable" && len(st.Members[0].Partitions[w.topic])+len(st.Members[1].Partitions[w.topic]) != partitions {
		t.Errorf("ReadStatus partitions: a %v, b %v; want the %d between them", st.Members[0].Partitions, st.Members[1].Partitions, partitions)
	}
	if err := b.member.Leave(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := b.member.Leave(t.Context()); !errors.Is(err, kafkacluster.ErrLeft) {
		t.Errorf("a second Leave: %v, want ErrLeft", err)
	}
	await(t, "a holding every partition again", func() bool { return len(a.member.Held()) == partitions }, a.member)
	ha.mu.Lock()
	hb.mu.Lock()
	if ha.acquired < partitions+partitions/2 || hb.acquired < partitions/2 || hb.released < partitions/2 || ha.heartbeats == 0 || hb.lost != 0 {
		t.Errorf("hooks: a acquired %d, heartbeats %d; b acquired %d, released %d, lost %d; want a ≥ %d, b ≥ %d acquired and released, none lost",
			ha.acquired, ha.heartbeats, hb.acquired, hb.released, hb.lost, partitions+partitions/2, partitions/2)
	}
	if !slices.Contains(ha.memberSets, "a,b") {
		t.Errorf("a saw the members %q, never a,b", ha.memberSets)
	}
	hb.mu.Unlock()
	ha.mu.Unlock()
	for id, bal := range want {
		got, err := entity.Ask(t.Context(), a.host, id, func(rt entity.ReplyTo[int64]) bank.Command { return bank.GetBalance{Reply: rt} })
		if err != nil || got != bal {
			t.Errorf("balance of %s = %d, %v; want %d", id, got, err, bal)
		}
	}
}

// TestJoinRefusesBadConfig: a configuration a member cannot run with is
// refused before anything joins.
func TestJoinRefusesBadConfig(t *testing.T) {
	w := newWorld(t)
	shards := []kafkacluster.Shard{newHost(t, w.journal, true)}
	for _, tc := range []struct {
		name string
		cfg  kafkacluster.Config
	}{
		{"no journal", kafkacluster.Config{Name: "x", Shards: shards}},
		{"no name", kafkacluster.Config{Journal: w.journal, Shards: shards}},
		{"no shards", kafkacluster.Config{Journal: w.journal, Name: "x"}},
		{"negative session", kafkacluster.Config{Journal: w.journal, Name: "x", Shards: shards, SessionTimeout: -time.Second}},
		{"session under a second", kafkacluster.Config{Journal: w.journal, Name: "x", Shards: shards, SessionTimeout: time.Millisecond}},
		{"a hook that is none", kafkacluster.Config{Journal: w.journal, Name: "x", Shards: shards, Hooks: []any{42}}},
		{"heartbeat too slow", kafkacluster.Config{Journal: w.journal, Name: "x", Shards: shards, SessionTimeout: 6 * time.Second, Heartbeat: 3 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if m, err := kafkacluster.Join(t.Context(), tc.cfg); err == nil {
				_ = m.Leave(t.Context())
				t.Fatal("Join accepted it")
			}
		})
	}
}

// recorder counts a member's hook calls.
type recorder struct {
	mu                                   sync.Mutex
	heartbeats, acquired, released, lost int
	memberSets                           []string
}

func (r *recorder) OnHeartbeat(time.Duration, int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.heartbeats++
}

func (r *recorder) OnLeaseAcquired(l membership.Lease) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l.Epoch > 0 && l.Live {
		r.acquired++
	}
}

func (r *recorder) OnLeaseReleased(string, time.Duration, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.released++
}

func (r *recorder) OnLeaseLost(string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lost++
}

func (r *recorder) OnMembersChanged(live []membership.Member) {
	names := make([]string, len(live))
	for i, m := range live {
		names[i] = m.Name
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.memberSets = append(r.memberSets, strings.Join(names, ","))
}

// TestRemovedMemberDropsStaleEntities: a member the group removed (its
// session ended; here the coordinator is told so) joins again under a new
// member id and gets its partitions back, but the entities it ran under
// the old id stop first: their state may be stale (another writer wrote
// meanwhile), so the next command recovers the account from the journal
// and the account's numbers never repeat.
func TestRemovedMemberDropsStaleEntities(t *testing.T) {
	w := newWorld(t)
	a, err := w.join(t, "a")
	if err != nil {
		t.Fatal(err)
	}
	await(t, "a holding every partition", func() bool { return len(a.member.Held()) == partitions }, a.member)
	deposit(t, "stale", 1, a)
	// Another writer of the account (the owner while a was out).
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	j2, err := kafka.Open(ctx, w.brokers, w.journal.Eventual(), kafka.WithTopic(func(string) string { return w.topic }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j2.Close() })
	other := newHost(t, j2, false)
	if bal, err := entity.Ask(ctx, other, "stale", func(rt entity.ReplyTo[int64]) bank.Command { return bank.Deposit{Amount: 10, Reply: rt} }); err != nil || bal != 11 {
		t.Fatalf("the other writer's deposit: %d, %v; want 11", bal, err)
	}
	// The coordinator removes a, as when its session ends.
	before, err := kafkacluster.ReadStatus(ctx, w.brokers, w.group)
	if err != nil || len(before.Members) != 1 {
		t.Fatalf("status before: %+v, %v", before, err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(w.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	leave := kmsg.NewPtrLeaveGroupRequest()
	leave.Group = w.group
	lm := kmsg.NewLeaveGroupRequestMember()
	lm.MemberID = before.Members[0].MemberID
	leave.Members = append(leave.Members, lm)
	if _, err := leave.RequestWith(ctx, cl); err != nil {
		t.Fatal(err)
	}
	await(t, "a back in the group under a new member id, holding every partition", func() bool {
		st, err := kafkacluster.ReadStatus(ctx, w.brokers, w.group)
		return err == nil && len(st.Members) == 1 && st.Members[0].MemberID != before.Members[0].MemberID &&
			len(a.member.Held()) == partitions
	}, a.member)
	pid := annals.PersistenceID(bank.EntityType, "stale")
	await(t, "a owning the account again", func() bool { o, ok := a.member.OwnerOf(pid); return ok && o.Local }, a.member)
	bal, err := entity.Ask(ctx, a.host, "stale", func(rt entity.ReplyTo[int64]) bank.Command { return bank.Deposit{Amount: 5, Reply: rt} })
	if err != nil || bal != 16 {
		t.Fatalf("a deposit through a after it rejoined: %d, %v; want 16 (1 + the other writer's 10 + 5: the entity recovered)", bal, err)
	}
}
