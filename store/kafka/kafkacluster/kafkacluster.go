// Package kafkacluster shares a Kafka-journal service's entities out over
// its processes through a Kafka consumer group, as Alpakka Kafka's cluster
// sharding co-locates shards with partitions: the members join one group
// subscribed to the journal topics of their entity types, the group's
// protocol assigns the partitions, and an entity belongs to the member
// that holds its persistence id's partition (the partition its records go
// to: kafka.Partition). No lease store is needed: Kafka's group
// coordinator is the membership, and its generation is the epoch.
//
// A Member gives each Shard (an entity.Host made with HostConfig.Assigned)
// one unit per partition it holds, named "topic/partition"
// (entity.Host.ServeUnit), and takes it back gracefully when the group
// moves the partition: the host stops taking the unit's commands, its
// persists in flight complete and its entities passivate, and only then
// does the member let the group give the partition to another member. The
// group uses the cooperative sticky protocol, so a join or a leave moves
// only the partitions that must move, and a member keeps serving the
// others through the rebalance.
//
// # Fencing
//
// The group coordinator removes a member that has not heartbeated for
// Config.SessionTimeout, or that has not rejoined Config.RebalanceTimeout
// after a rebalance began, and only then gives its partitions to others.
// The member bounds its own right to write on its monotonic clock, which
// keeps running while a process is stopped: besides the client's own
// heartbeats it sends one every Config.Heartbeat and reads the answer. One
// answered "none" (a member of a stable group) sent at local time t keeps
// its partitions until t + SessionTimeout - margin; one answered
// "rebalance in progress" until the earlier of t + SessionTimeout and the
// last "none" + RebalanceTimeout, less the margin (a fifth of
// SessionTimeout). The SyncGroup request that got an assignment counts as
// a "none" sent when it was: the coordinator answers it only outside a
// rebalance. Every write of an entity of a held partition passes the
// partition's fence as it leaves for the journal: after that term, or once
// the partition was revoked or lost, writes fail with engine.ErrFenced and
// a *cluster.LeaseLostError and are not sent, so a member paused past its
// session (SIGSTOP, a long pause) writes nothing for the partitions it lost
// when it resumes. A term belongs to one group member id: a member the
// group removed joins again under a new id, its heartbeats renew only the
// new id's term, and the partitions it held under the old id stop (their
// entities passivate, their state possibly stale) before anything the
// group gives it is served, even a partition it held before.
//
// A write that passed that check and then stalled on the way for longer
// than the margin (the process stopped right after the check) is refused
// by the brokers: before serving a partition the member claims it
// (kafka.Claim, under the group's name), which fences off every earlier
// claim of it, and each write of the partition's entities carries the
// claim (the fence's token), so it is refused with journal.ErrFenced once
// another member claimed the partition. A partition whose claim could not
// be made, broke (its producer failed to end a transaction) or was
// fenced off by a late claim of a process that no longer held it, is not
// served until the member, while its term runs, has handed its entities
// off and claimed it again (beside its heartbeats, never between them). The brokers must allow
// transactions.
//
// # Names and addresses
//
// A member's name and address travel in its Kafka client id
// ("annals-member?address=...&name=..."), which the group coordinator shows
// every member (DescribeGroups): OwnerOf and the Handler read where each
// partition's owner takes requests from there. A Join under the name of a
// member of the group is refused with membership.ErrNameTaken; two
// processes joining under one name at the same instant are not told apart.
package kafkacluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/cluster"
	"github.com/annals-go/annals/internal/wake"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/membership"
	"github.com/annals-go/annals/store/kafka"
)

// Defaults of Config.
const (
	DefaultGroup          = "annals-cluster"
	DefaultSessionTimeout = 10 * time.Second
)

// clientIDPrefix starts the Kafka client id that carries a member's name
// and address.
const clientIDPrefix = "annals-member?"

// Shard serves the partitions a member is given: an entity.Host made with
// HostConfig.Assigned is one.
type Shard interface {
	// EntityType names the shard's entities: they belong to the
	// partitions of its journal topic.
	EntityType() string
	// ServeUnit starts serving the ids owns reports, each write of theirs
	// passing fence as it leaves for the journal.
	ServeUnit(unit string, owns func(persistenceID string) bool, fence journal.Fence) error
	// HandOffUnit stops serving unit gracefully and returns when nothing
	// of it runs any more, or with ctx's error.
	HandOffUnit(ctx context.Context, unit string) error
}

// Config configures a Member. Journal, Name and Shards are required.
type Config struct {
	// Journal is the Kafka journal the shards write to: its brokers, and
	// the topics of the shards' entity types.
	Journal *kafka.Journal
	// Group names the consumer group of the service's members (default
	// DefaultGroup): services sharing brokers use names of their own, and
	// never a group a replicator or a consumer reads with.
	Group string
	// Name identifies the member: unique among the group's members (a
	// pod's name, a host:port).
	Name string
	// Address is where the member takes forwarded requests (host:port or
	// a URL, see Handler).
	Address string
	// Shards serve the partitions the member holds; each shard's entity
	// type's topic is one of the group's subscriptions.
	Shards []Shard
	// SessionTimeout is how long the coordinator waits for a silent
	// member before giving its partitions to others (default
	// DefaultSessionTimeout; the broker's group.min.session.timeout.ms,
	// 6 s by default, bounds it from below).
	SessionTimeout time.Duration
	// Heartbeat is the interval of heartbeats and of the member's look at
	// the group (default SessionTimeout/5; less than SessionTimeout/2).
	Heartbeat time.Duration
	// RebalanceTimeout is how long the coordinator waits for every member
	// to rejoin once a rebalance began, hand-offs included (default twice
	// SessionTimeout).
	RebalanceTimeout time.Duration
	// HandOffTimeout bounds a graceful hand-off (default half of
	// SessionTimeout): when it passes, the partition's fence closes and
	// the partition is let go anyway.
	HandOffTimeout time.Duration
	// ClientOptions are added to the options of the member's Kafka
	// clients, after the journal's own (Journal.ClientOptions: its TLS and
	// SASL settings).
	ClientOptions []kgo.Opt
	// Logger receives failed hand-offs and heartbeats (default
	// slog.Default()).
	Logger *slog.Logger
	// Hooks are called on the member's events, each value for the hook
	// interfaces of package cluster it implements (so
	// otelannals.Telemetry measures a Kafka member as a lease member): a
	// partition is a lease named "topic/partition" whose epoch is the
	// group's generation. HookHeartbeat after each of the member's own
	// heartbeats (renewed: the partitions it holds); HookLeaseAcquired
	// when it starts serving a partition; HookLeaseReleased after a
	// graceful hand-off; HookLeaseLost when the group took a partition
	// without one (the session ended); HookMembersChanged when the group's
	// members change. A value that implements none is refused.
	Hooks []any
}

func (cfg *Config) check() error {
	switch {
	case cfg.Journal == nil:
		return errors.New("kafkacluster: Config.Journal is nil")
	case cfg.Name == "":
		return errors.New("kafkacluster: Config.Name is empty")
	case len(cfg.Shards) == 0:
		return errors.New("kafkacluster: Config.Shards is empty: a member serves at least one entity type")
	case cfg.SessionTimeout < 0 || cfg.Heartbeat < 0 || cfg.RebalanceTimeout < 0 || cfg.HandOffTimeout < 0:
		return errors.New("kafkacluster: Config has a negative setting")
	}
	if cfg.Group == "" {
		cfg.Group = DefaultGroup
	}
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	if cfg.SessionTimeout < membership.MinTTL {
		return fmt.Errorf("kafkacluster: Config.SessionTimeout %v is under %v", cfg.SessionTimeout, membership.MinTTL)
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = cfg.SessionTimeout / 5
	}
	if cfg.Heartbeat >= cfg.SessionTimeout/2 {
		return fmt.Errorf("kafkacluster: Config.Heartbeat %v must be under half of SessionTimeout %v", cfg.Heartbeat, cfg.SessionTimeout)
	}
	if cfg.RebalanceTimeout == 0 {
		cfg.RebalanceTimeout = 2 * cfg.SessionTimeout
	}
	if cfg.HandOffTimeout == 0 {
		cfg.HandOffTimeout = cfg.SessionTimeout / 2
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	_, err := cluster.NewHooks("kafkacluster: Config.Hooks", cfg.Hooks)
	return err
}

// topicPartition is one partition of a journal topic: the unit of
// ownership.
type topicPartition struct {
	topic     string
	partition int32
}

// unit is the partition's unit name in the shards.
func (tp topicPartition) unit() string { return fmt.Sprintf("%s/%d", tp.topic, tp.partition) }

// topicShards is a subscribed topic: its partition count and the shards
// whose entities it holds.
type topicShards struct {
	partitions int
	shards     []Shard
}

// heldPartition is a partition the member holds.
type heldPartition struct {
	memberID   string // the group member id it was assigned under
	generation int32
	claim      *kafka.Claim // the journal's claim of the partition: the brokers refuse an earlier owner's records
	open       atomic.Bool  // the fence lets writes through (until revoked or lost)
	giving     bool         // being handed off (guarded by Member.mu)
}

// remote is another member as the coordinator shows it.
type remote struct {
	name, address string
}

// Member is one process's place in a Kafka journal's consumer group: it
// serves the partitions the group assigns it, hands them off when the
// group moves them, and knows who owns what. It is safe for concurrent use
// and implements cluster.Router.
type Member struct {
	cfg    Config
	hooks  cluster.Hooks
	adm    *kgo.Client // describes the group and heartbeats
	grp    *kgo.Client // the group member
	topics map[string]*topicShards
	start  time.Time
	margin time.Duration
	term   atomic.Pointer[term] // the member's term: its group member id and when it ends
	// syncSent is when the member's client last sent a SyncGroup request
	// (nanoseconds after start): the assignment that request got is a
	// confirmation of membership, as a heartbeat answered "none" is.
	syncSent atomic.Int64

	ctx      context.Context // ends when the member has left
	cancel   context.CancelFunc
	loopDone chan struct{}
	refresh  chan struct{} // a look at the group soon (capacity 1)
	// wakeSoon wakes those waiting on Changed a while after a Refresh on
	// a member that no longer reads the group.
	wakeSoon wake.Later
	// repair asks repairLoop to repair claims (capacity 1); repairDone is
	// closed when it has ended.
	repair     chan struct{}
	repairDone chan struct{}
	assigned   chan struct{} // closed at the first assignment
	once       sync.Once

	hand sync.Mutex // held by giveUp and repairClaims: one hands partitions off at a time

	mu         sync.Mutex
	lastNone   int64 // send time of the last heartbeat of term's member id answered "none"; -1 none yet
	generation int32
	held       map[topicPartition]*heldPartition
	owners     map[topicPartition]remote
	members    []membership.Member
	changed    chan struct{} // closed when the view is read again
	left       bool
}

// Join makes cfg.Name a member of cfg.Group: it creates the shards'
// journal topics if they do not exist (with the broker's default
// partition count), refuses a name a member of the group has
// (membership.ErrNameTaken), joins the group and returns once the group
// has given the member its first assignment (which may be empty while
// the partitions move to it), or with ctx's error.
func Join(ctx context.Context, cfg Config) (*Member, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	hooks, _ := cluster.NewHooks("", cfg.Hooks) // checked by cfg.check
	m := &Member{
		hooks:    hooks,
		cfg:      cfg,
		topics:   map[string]*topicShards{},
		start:    time.Now(),
		margin:   cfg.SessionTimeout / 5,
		loopDone: make(chan struct{}),
		refresh:  make(chan struct{}, 1),
		repair:   make(chan struct{}, 1),

		repairDone: make(chan struct{}),
		assigned:   make(chan struct{}),
		lastNone:   -1,
		held:       map[topicPartition]*heldPartition{},
		owners:     map[topicPartition]remote{},
		changed:    make(chan struct{}),
	}
	for _, s := range cfg.Shards {
		topic, err := cfg.Journal.Topic(annals.PersistenceID(s.EntityType(), "x"))
		if err != nil {
			return nil, fmt.Errorf("kafkacluster: entity type %q: %w", s.EntityType(), err)
		}
		if m.topics[topic] == nil {
			m.topics[topic] = &topicShards{}
		}
		m.topics[topic].shards = append(m.topics[topic].shards, s)
	}
	brokers := cfg.Journal.Brokers()
	cfg.ClientOptions = append(cfg.Journal.ClientOptions(), cfg.ClientOptions...)
	adm, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, cfg.ClientOptions...)...)
	if err != nil {
		return nil, fmt.Errorf("kafkacluster: %w", err)
	}
	m.adm = adm
	if err := m.learnTopics(ctx); err != nil {
		adm.Close()
		return nil, err
	}
	if err := m.checkName(ctx); err != nil {
		adm.Close()
		return nil, err
	}
	topics := make([]string, 0, len(m.topics))
	for t := range m.topics {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	grp, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ClientID(clientID(cfg.Name, cfg.Address)),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(topics...),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.SessionTimeout(cfg.SessionTimeout),
		kgo.RebalanceTimeout(cfg.RebalanceTimeout),
		kgo.HeartbeatInterval(cfg.Heartbeat),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()),
		kgo.OnPartitionsAssigned(m.onAssigned),
		kgo.OnPartitionsRevoked(m.onRevoked),
		kgo.OnPartitionsLost(m.onLost),
		kgo.WithHooks(syncHook{m}),
	}, cfg.ClientOptions...)...)
	if err != nil {
		adm.Close()
		return nil, fmt.Errorf("kafkacluster: %w", err)
	}
	// The member holds partitions, it does not read them.
	grp.PauseFetchTopics(topics...)
	m.grp = grp
	m.ctx, m.cancel = context.WithCancel(context.Background())
	select {
	case <-m.assigned:
	case <-ctx.Done():
		m.cancel()
		grp.Close()
		adm.Close()
		return nil, fmt.Errorf("kafkacluster: join group %s as %s: no assignment yet: %w", cfg.Group, cfg.Name, ctx.Err())
	}
	go m.loop()
	go m.repairLoop()
	return m, nil
}

// learnTopics creates the shards' topics if missing and reads their
// partition counts.
func (m *Member) learnTopics(ctx context.Context) error {
	for {
		req := kmsg.NewPtrMetadataRequest()
		req.AllowAutoTopicCreation = true
		for t := range m.topics {
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(t)
			req.Topics = append(req.Topics, rt)
		}
		resp, err := req.RequestWith(ctx, m.adm)
		if err != nil {
			return fmt.Errorf("kafkacluster: reading the journal topics: %w", err)
		}
		missing := 0
		for _, t := range resp.Topics {
			if t.Topic == nil || m.topics[*t.Topic] == nil {
				continue
			}
			if err := kerr.ErrorForCode(t.ErrorCode); err != nil || len(t.Partitions) == 0 {
				if err != nil && !kerr.IsRetriable(err) {
					return fmt.Errorf("kafkacluster: journal topic %s: %w", *t.Topic, err)
				}
				missing++
				continue
			}
			m.topics[*t.Topic].partitions = len(t.Partitions)
		}
		if missing == 0 {
			return nil
		}
		select { // a topic being created: ask again
		case <-ctx.Done():
			return fmt.Errorf("kafkacluster: waiting for the journal topics to be created: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// checkName refuses a name a member of the group has.
func (m *Member) checkName(ctx context.Context) error {
	members, _, _, err := m.describe(ctx)
	if err != nil {
		return err
	}
	for _, r := range members {
		if r.name == m.cfg.Name {
			return fmt.Errorf("kafkacluster: join group %s as %s: %w (at %s)", m.cfg.Group, m.cfg.Name, membership.ErrNameTaken, r.address)
		}
	}
	return nil
}

// clientID encodes a member's name and address in a Kafka client id.
func clientID(name, address string) string {
	return clientIDPrefix + url.Values{"name": {name}, "address": {address}}.Encode()
}

// parseClientID decodes a client id clientID made.
func parseClientID(id string) (remote, bool) {
	q, ok := strings.CutPrefix(id, clientIDPrefix)
	if !ok {
		return remote{}, false
	}
	v, err := url.ParseQuery(q)
	if err != nil || v.Get("name") == "" {
		return remote{}, false
	}
	return remote{name: v.Get("name"), address: v.Get("address")}, true
}

// now returns the monotonic time since the member started.
func (m *Member) now() int64 { return int64(time.Since(m.start)) }

// term is the member's right to write for the partitions it holds under
// one group member id: the coordinator gives a member that was removed
// (its session ended) a new id when it joins again, and the partitions
// held under the old one were lost in between, whatever the group gives
// back, so a term never carries over to another id.
type term struct {
	memberID string
	until    int64 // nanoseconds after Member.start
}

// heldUnder reports that the term of memberID has not ended.
func (m *Member) heldUnder(memberID string) bool {
	t := m.term.Load()
	return t != nil && t.memberID == memberID && m.now() < t.until
}

// extend moves the term of memberID to until when that is later; a term of
// another member id is replaced. m.mu is held.
func (m *Member) extend(memberID string, until int64) {
	if t := m.term.Load(); t != nil && t.memberID == memberID && until <= t.until {
		return
	}
	m.term.Store(&term{memberID: memberID, until: until})
}

// heartbeat sends one heartbeat of the member's current generation and
// extends its term by the answer (see the package doc).
func (m *Member) heartbeat(ctx context.Context, grp *kgo.Client) (err error) {
	memberID, generation := grp.GroupMetadata()
	if memberID == "" || generation < 0 {
		return nil
	}
	sent := m.now()
	defer func() { m.hooks.Heartbeat(time.Duration(m.now()-sent), len(m.Held()), err) }()
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group, req.Generation, req.MemberID = m.cfg.Group, generation, memberID
	hctx, cancel := context.WithTimeout(ctx, m.cfg.Heartbeat)
	defer cancel()
	resp, err := req.RequestWith(hctx, m.adm)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	session := int64(m.cfg.SessionTimeout)
	m.mu.Lock()
	defer m.mu.Unlock()
	if errors.Is(err, kerr.RebalanceInProgress) {
		defer func() { err = nil }() // a member still: the rebalance is no failure
	}
	if t := m.term.Load(); t == nil || t.memberID != memberID {
		m.lastNone = -1 // a new member id: nothing confirmed for it yet
	}
	switch {
	case err == nil:
		m.lastNone = sent
		m.generation = generation
		m.extend(memberID, sent+session-int64(m.margin))
	case errors.Is(err, kerr.RebalanceInProgress):
		if m.lastNone >= 0 {
			m.extend(memberID, min(sent+session, m.lastNone+int64(m.cfg.RebalanceTimeout))-int64(m.margin))
		}
	default:
		// Not a member at this generation (yet, or any more), or no
		// answer: the term runs out unless a later heartbeat renews it.
		if ctx.Err() == nil {
			m.cfg.Logger.Debug("kafkacluster: heartbeat not answered as a member", "group", m.cfg.Group, "member", m.cfg.Name, "generation", generation, "err", err)
		}
	}
	return err
}

// syncHook records when the group client sends a SyncGroup request.
type syncHook struct{ m *Member }

// syncGroupKey is the Kafka protocol's key of SyncGroup requests.
const syncGroupKey = 14

// OnBrokerWrite implements kgo.HookBrokerWrite.
func (h syncHook) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, timeToWrite time.Duration, err error) {
	if key == syncGroupKey && err == nil {
		h.m.syncSent.Store(h.m.now() - int64(timeToWrite))
	}
}

// confirmSync starts or extends memberID's term from the SyncGroup request
// that got the assignment being served: the coordinator answers a sync
// only while no rebalance is in progress, and its session timer runs from
// the request, so the member is in the group until at least the request's
// time plus the session timeout, and no rebalance began before it. A
// member whose first heartbeats of a generation meet the next rebalance
// has a term from its assignment on. m.mu is held.
func (m *Member) confirmSync(memberID string) {
	sent := m.syncSent.Load()
	if sent <= 0 {
		return
	}
	if t := m.term.Load(); t == nil || t.memberID != memberID {
		m.lastNone = -1
	}
	m.lastNone = max(m.lastNone, sent)
	m.extend(memberID, sent+int64(m.cfg.SessionTimeout)-int64(m.margin))
}

// onAssigned serves the partitions the group added.
func (m *Member) onAssigned(ctx context.Context, grp *kgo.Client, assigned map[string][]int32) {
	defer m.once.Do(func() { close(m.assigned) })
	memberID, generation := grp.GroupMetadata()
	// Partitions held under another member id were lost when the group
	// removed the member, even if the group gives them back now: their
	// entities' state may be stale. They stop before anything is served.
	lost := map[string][]int32{}
	m.mu.Lock()
	for tp, h := range m.held {
		if h.memberID != memberID {
			lost[tp.topic] = append(lost[tp.topic], tp.partition)
		}
	}
	m.mu.Unlock()
	m.giveUp(lost, false)
	m.mu.Lock()
	m.confirmSync(memberID)
	m.mu.Unlock()
	m.heartbeat(ctx, grp) // a term at the new generation before serving
	for topic, partitions := range assigned {
		ts := m.topics[topic]
		if ts == nil {
			continue
		}
		for _, p := range partitions {
			tp := topicPartition{topic: topic, partition: p}
			h := &heldPartition{memberID: memberID, generation: generation}
			claim, err := m.claim(ctx, tp)
			if err != nil {
				// Held, not served: repairClaims claims it again.
				m.cfg.Logger.Error("kafkacluster: claiming a partition: not serving it yet", "group", m.cfg.Group, "member", m.cfg.Name, "partition", tp.unit(), "err", err)
			}
			h.claim = claim
			h.open.Store(claim != nil)
			m.mu.Lock()
			m.held[tp] = h
			m.mu.Unlock()
			if claim != nil {
				m.serve(tp, h)
			}
		}
	}
	m.look(ctx)
}

// serve has the shards serve a held partition under its claim.
func (m *Member) serve(tp topicPartition, h *heldPartition) {
	ts := m.topics[tp.topic]
	fence := m.fence(tp, h)
	owns := func(pid string) bool { return kafka.Partition(pid, ts.partitions) == tp.partition }
	for _, s := range ts.shards {
		if err := s.ServeUnit(tp.unit(), owns, fence); err != nil {
			m.cfg.Logger.Error("kafkacluster: serving a partition", "group", m.cfg.Group, "member", m.cfg.Name, "partition", tp.unit(), "err", err)
		}
	}
	m.hooks.LeaseAcquired(membership.Lease{Name: tp.unit(), Owner: membership.Holder{Name: m.cfg.Name, Incarnation: h.memberID},
		Epoch: int64(h.generation), Expires: m.termEnd(), Live: true})
}

// repairClaims claims again each partition the member holds in its term
// whose claim could not be made, broke (its producer failed to end a
// transaction), was closed or was fenced off (a process that no longer
// held the partition claimed it late: the group did not move it, and the
// member's term runs). The partitions' entities are handed off first, all
// at once, each within HandOffTimeout, so that those served under the new
// claims recover after them; each claim is bounded by a session timeout
// and a partition is served again only if the member still holds it in
// its term. It runs on a goroutine of its own (repairLoop), never
// between the member's heartbeats.
func (m *Member) repairClaims(ctx context.Context) {
	m.hand.Lock()
	defer m.hand.Unlock()
	type broken struct {
		tp topicPartition
		h  *heldPartition
	}
	var todo []broken
	m.mu.Lock()
	for tp, h := range m.held {
		if h.giving || !m.heldUnder(h.memberID) {
			continue
		}
		if h.claim == nil || h.claim.Err() != nil {
			todo = append(todo, broken{tp, h})
		}
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, b := range todo {
		m.cfg.Logger.Warn("kafkacluster: claiming a partition again", "group", m.cfg.Group, "member", m.cfg.Name, "partition", b.tp.unit())
		b.h.open.Store(false)
		if b.h.claim == nil {
			continue
		}
		wg.Go(func() {
			hctx, cancel := context.WithTimeout(ctx, m.cfg.HandOffTimeout)
			defer cancel()
			for _, s := range m.topics[b.tp.topic].shards {
				if err := s.HandOffUnit(hctx, b.tp.unit()); err != nil {
					m.cfg.Logger.Warn("kafkacluster: handing a partition off before claiming it again", "group", m.cfg.Group, "member", m.cfg.Name, "partition", b.tp.unit(), "err", err)
				}
			}
			b.h.claim.Close()
		})
	}
	wg.Wait()
	for _, b := range todo {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, m.cfg.SessionTimeout)
			defer cancel()
			claim, err := m.cfg.Journal.Claim(cctx, m.cfg.Group, b.tp.topic, b.tp.partition)
			if err != nil {
				m.cfg.Logger.Error("kafkacluster: claiming a partition again: not serving it yet", "group", m.cfg.Group, "member", m.cfg.Name, "partition", b.tp.unit(), "err", err)
			}
			h := &heldPartition{memberID: b.h.memberID, generation: b.h.generation, claim: claim}
			h.open.Store(claim != nil)
			m.mu.Lock()
			current := m.held[b.tp] == b.h && !b.h.giving && m.heldUnder(b.h.memberID)
			if current {
				m.held[b.tp] = h
			}
			m.mu.Unlock()
			switch {
			case claim == nil:
			case !current:
				claim.Close()
			default:
				m.serve(b.tp, h)
			}
		})
	}
	wg.Wait()
}

// repairLoop runs repairClaims each time the member's loop asks, until
// the member has left.
func (m *Member) repairLoop() {
	defer close(m.repairDone)
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-m.repair:
			m.repairClaims(m.ctx)
		}
	}
}

// termEnd returns the wall-clock time the member's term ends.
func (m *Member) termEnd() time.Time {
	if t := m.term.Load(); t != nil {
		return m.start.Add(time.Duration(t.until))
	}
	return m.start
}

// claimRetry is the pause between attempts to claim a partition.
const claimRetry = 250 * time.Millisecond

// claim makes the journal's claim of a partition assigned to the member,
// asking again while ctx lasts, for a session timeout at most (then
// repairClaims goes on): once it returns, the brokers refuse the records
// of any earlier owner (see kafka.Claim).
func (m *Member) claim(ctx context.Context, tp topicPartition) (*kafka.Claim, error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.SessionTimeout)
	defer cancel()
	for {
		c, err := m.cfg.Journal.Claim(ctx, m.cfg.Group, tp.topic, tp.partition)
		if err == nil || errors.Is(err, journal.ErrInvalidArgument) || errors.Is(err, journal.ErrClosed) {
			return c, err
		}
		m.cfg.Logger.Warn("kafkacluster: claiming a partition, asking again", "group", m.cfg.Group, "member", m.cfg.Name, "partition", tp.unit(), "err", err)
		t := time.NewTimer(claimRetry)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, err
		}
	}
}

// fence returns the fence of a held partition's writes: Open checks the
// member's term and the partition's assignment, the token carries the
// journal's claim of the partition, which the brokers check where the
// records are appended.
func (m *Member) fence(tp topicPartition, h *heldPartition) journal.Fence {
	return journal.Fence{Open: func() error {
		if !h.open.Load() || !m.heldUnder(h.memberID) || h.claim == nil || h.claim.Err() != nil {
			return &cluster.LeaseLostError{Lease: tp.unit(), Epoch: int64(h.generation)}
		}
		return nil
	}, Token: h.claim.Token()}
}

// onRevoked hands off the partitions the group takes back, gracefully,
// before the group may give them to another member.
func (m *Member) onRevoked(_ context.Context, _ *kgo.Client, revoked map[string][]int32) {
	m.giveUp(revoked, true)
}

// onLost stops serving the partitions the member lost without giving
// them up (its session ended): their fences close first.
func (m *Member) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	m.giveUp(lost, false)
}

// giveUp stops serving partitions: with graceful, each is handed off
// with its fence open (its persists in flight complete) and closed after;
// otherwise the fences close first.
func (m *Member) giveUp(partitions map[string][]int32, graceful bool) {
	m.hand.Lock()
	defer m.hand.Unlock()
	var tps []topicPartition
	m.mu.Lock()
	for topic, ps := range partitions {
		for _, p := range ps {
			tp := topicPartition{topic: topic, partition: p}
			if h := m.held[tp]; h != nil && !h.giving {
				h.giving = true
				if !graceful {
					h.open.Store(false)
				}
				tps = append(tps, tp)
			}
		}
	}
	m.mu.Unlock()
	if len(tps) == 0 {
		return
	}
	m.signalChanged()
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.HandOffTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, tp := range tps {
		wg.Go(func() {
			began := time.Now()
			var errs []error
			for _, s := range m.topics[tp.topic].shards {
				if err := s.HandOffUnit(ctx, tp.unit()); err != nil {
					m.cfg.Logger.Warn("kafkacluster: handing a partition off", "group", m.cfg.Group, "member", m.cfg.Name, "partition", tp.unit(), "graceful", graceful, "err", err)
					errs = append(errs, err)
				}
			}
			if graceful {
				m.hooks.LeaseReleased(tp.unit(), time.Since(began), errors.Join(errs...))
				return
			}
			m.hooks.LeaseLost(tp.unit(), errLostByGroup)
		})
	}
	wg.Wait()
	var claims []*kafka.Claim
	m.mu.Lock()
	for _, tp := range tps {
		if h := m.held[tp]; h != nil {
			h.open.Store(false)
			if h.claim != nil {
				claims = append(claims, h.claim)
			}
			delete(m.held, tp)
		}
	}
	m.mu.Unlock()
	for _, c := range claims {
		c.Close()
	}
	m.signalChanged()
}

// errLostByGroup is the cause of a partition the group took without a
// hand-off.
var errLostByGroup = errors.New("kafkacluster: the group took the partition (the member's session ended)")

// signalChanged wakes those waiting on Changed.
func (m *Member) signalChanged() {
	m.mu.Lock()
	defer m.mu.Unlock()
	close(m.changed)
	m.changed = make(chan struct{})
}

// loop heartbeats and looks at the group every heartbeat, and looks
// again when asked (at most four times a heartbeat), until the member
// has left.
func (m *Member) loop() {
	defer close(m.loopDone)
	t := time.NewTicker(m.cfg.Heartbeat)
	defer t.Stop()
	var lastLook time.Time
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
			m.heartbeat(m.ctx, m.grp)
			select {
			case m.repair <- struct{}{}:
			default: // a repair is running: it looks again after
			}
			lastLook = time.Now()
			m.look(m.ctx)
		case <-m.refresh:
			if time.Since(lastLook) >= m.cfg.Heartbeat/4 {
				lastLook = time.Now()
				m.look(m.ctx)
			}
		}
	}
}

// describe reads the group's members and, when the group is stable, who
// holds each partition.
func (m *Member) describe(ctx context.Context) (members []remote, owners map[topicPartition]remote, stable bool, err error) {
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{m.cfg.Group}
	resp, err := req.RequestWith(ctx, m.adm)
	if err != nil {
		return nil, nil, false, fmt.Errorf("kafkacluster: describing group %s: %w", m.cfg.Group, err)
	}
	owners = map[topicPartition]remote{}
	for _, g := range resp.Groups {
		if g.Group != m.cfg.Group {
			continue
		}
		if err := kerr.ErrorForCode(g.ErrorCode); errors.Is(err, kerr.GroupIDNotFound) {
			continue // no member has joined yet
		} else if err != nil {
			return nil, nil, false, fmt.Errorf("kafkacluster: describing group %s: %w", m.cfg.Group, err)
		}
		stable = g.State == "Stable"
		members = groupView(g, owners)
	}
	return members, owners, stable, nil
}

// groupView returns the members of a described group that Join made,
// sorted by name, and adds the partitions each holds to owners.
func groupView(g kmsg.DescribeGroupsResponseGroup, owners map[topicPartition]remote) []remote {
	var members []remote
	for _, mem := range g.Members {
		r, ok := parseClientID(mem.ClientID)
		if !ok {
			continue
		}
		members = append(members, r)
		var a kmsg.ConsumerMemberAssignment
		if len(mem.MemberAssignment) == 0 || a.ReadFrom(mem.MemberAssignment) != nil {
			continue
		}
		for _, t := range a.Topics {
			for _, p := range t.Partitions {
				owners[topicPartition{topic: t.Topic, partition: p}] = r
			}
		}
	}
	slices.SortFunc(members, func(a, b remote) int { return strings.Compare(a.name, b.name) })
	return members
}

// look reads the group and wakes those waiting on Changed.
func (m *Member) look(ctx context.Context) {
	members, owners, stable, err := m.describe(ctx)
	if err != nil {
		if ctx.Err() == nil {
			m.cfg.Logger.Warn("kafkacluster: reading the group", "group", m.cfg.Group, "member", m.cfg.Name, "err", err)
		}
		return
	}
	m.setView(members, owners, stable)
}

// setView records the group's members and, when the group is stable, who
// holds each partition, and wakes those waiting on Changed.
func (m *Member) setView(members []remote, owners map[topicPartition]remote, stable bool) {
	live := make([]membership.Member, len(members))
	for i, r := range members {
		live[i] = membership.Member{Name: r.name, Address: r.address, Live: true}
	}
	m.mu.Lock()
	old := m.members
	m.members = live
	if stable { // during a rebalance the assignments shown are not the ones in force
		m.owners = owners
	}
	m.mu.Unlock()
	m.signalChanged()
	m.hooks.MembersChanged(old, live)
}

// Name returns the member's name.
func (m *Member) Name() string { return m.cfg.Name }

// Group returns the member's consumer group.
func (m *Member) Group() string { return m.cfg.Group }

// OwnerOf returns the member that holds persistenceID's partition as the
// member last read the group, or false while the partition has no owner
// known (it is moving, the group is rebalancing, or the id's entity type
// is not one of the member's shards'). Local is set when the owner is
// this member, it is not handing the partition off and its term has not
// ended; Epoch is the group's generation.
func (m *Member) OwnerOf(persistenceID string) (cluster.Owner, bool) {
	topic, err := m.cfg.Journal.Topic(persistenceID)
	if err != nil {
		return cluster.Owner{}, false
	}
	ts := m.topics[topic]
	if ts == nil {
		return cluster.Owner{}, false
	}
	tp := topicPartition{topic: topic, partition: kafka.Partition(persistenceID, ts.partitions)}
	m.mu.Lock()
	defer m.mu.Unlock()
	if h := m.held[tp]; h != nil {
		if h.giving || !m.heldUnder(h.memberID) {
			return cluster.Owner{}, false
		}
		return cluster.Owner{Member: m.cfg.Name, Address: m.cfg.Address, Epoch: int64(h.generation), Local: true}, true
	}
	r, ok := m.owners[tp]
	if !ok || r.name == m.cfg.Name {
		return cluster.Owner{}, false // this member's in the view: it was just given up
	}
	return cluster.Owner{Member: r.name, Address: r.address, Epoch: int64(m.generation)}, true
}

// Held returns the units (partitions, "topic/partition") the member
// serves, sorted.
func (m *Member) Held() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.held))
	for tp, h := range m.held {
		if !h.giving {
			out = append(out, tp.unit())
		}
	}
	slices.Sort(out)
	return out
}

// Partitions returns the number of partitions the group shares: those of
// every journal topic of the member's shards.
func (m *Member) Partitions() int {
	n := 0
	for _, ts := range m.topics {
		n += ts.partitions
	}
	return n
}

// Members returns the names of the group's members as last read, sorted.
func (m *Member) Members() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, len(m.members))
	for i, r := range m.members {
		out[i] = r.Name
	}
	return out
}

// Changed returns a channel closed the next time the member reads the
// group or gives partitions up, or, once Leave has stopped its reading, a
// quarter heartbeat after the next Refresh: a caller waiting for a
// partition to move waits on it and asks OwnerOf again.
func (m *Member) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

// Refresh asks the member to read the group again soon (at most four
// times a heartbeat). A member that has stopped reading the group (it is
// leaving, past its LeaveGroup) wakes those waiting on Changed a quarter
// heartbeat later instead, so that they try its last view of the group
// again: a request for a partition whose new owner does not serve it yet
// is sent there again, as on a member still in the group, rather than
// waiting out its MoveWait.
func (m *Member) Refresh() {
	if m.ctx.Err() == nil {
		select {
		case m.refresh <- struct{}{}:
		default:
		}
		return
	}
	m.wakeSoon.After(m.cfg.Heartbeat/4, m.signalChanged)
}

// MoveWait is the longer of SessionTimeout and RebalanceTimeout, plus
// three heartbeats: a failed member's partitions move once the
// coordinator has removed it, and a rebalance (a member leaving or
// joining, as in a rolling restart) ends at the latest when every member
// has rejoined within the rebalance timeout; the group then settles
// within a few heartbeats.
func (m *Member) MoveWait() time.Duration {
	return max(m.cfg.SessionTimeout, m.cfg.RebalanceTimeout) + 3*m.cfg.Heartbeat
}

// Handler returns the middleware cluster.NewHandler makes with m as its
// Router: each request runs on the member that holds its entity's
// partition.
func (m *Member) Handler(next http.Handler, cfg cluster.HandlerConfig) (http.Handler, error) {
	return cluster.NewHandler(m, next, cfg)
}

var _ cluster.Router = (*Member)(nil)

// ErrLeft is returned by Leave on a member that has left.
var ErrLeft = errors.New("kafkacluster: member has left")

// Leave hands every partition off gracefully and leaves the group, so the
// others take the partitions at once, waits until the group has
// rebalanced without the member (the others know the new owners and stop
// forwarding requests here: a service keeps answering until Leave
// returns), and closes the member's clients. The member keeps the view of
// the group it waited for: requests that reach it meanwhile or after, and
// those that were waiting for its partitions to move, go to the new
// owners (Handler). It returns ctx's error when the leave did not
// complete in time (the group then gives the partitions away when the
// session ends).
func (m *Member) Leave(ctx context.Context) error {
	m.mu.Lock()
	if m.left {
		m.mu.Unlock()
		return ErrLeft
	}
	m.left = true
	all := map[string][]int32{}
	for tp := range m.held {
		all[tp.topic] = append(all[tp.topic], tp.partition)
	}
	m.mu.Unlock()
	// Hand off before leaving: the group gives the partitions away as
	// soon as the member has left.
	m.giveUp(all, true)
	err := m.grp.LeaveGroupContext(ctx)
	m.cancel()
	<-m.loopDone
	<-m.repairDone
	// No look at the group wakes those waiting on Changed any more: they
	// try again now, and after each Refresh.
	m.signalChanged()
	m.grp.Close()
	if err == nil {
		err = m.awaitRebalanced(ctx)
	}
	m.adm.Close()
	if err != nil {
		return fmt.Errorf("kafkacluster: leaving group %s: %w", m.cfg.Group, err)
	}
	return nil
}

// awaitRebalanced waits until the group is stable (or empty) without the
// member: the others have been given its partitions and have read the
// group, so they no longer send it requests. It then takes that view of
// the group as the member's last (setView): the requests the member still
// has, waiting for its partitions to move, go to their new owners. The
// coordinator tells no one when a rebalance ends, so the group is read
// every 50 ms.
func (m *Member) awaitRebalanced(ctx context.Context) error {
	for {
		req := kmsg.NewPtrDescribeGroupsRequest()
		req.Groups = []string{m.cfg.Group}
		resp, err := req.RequestWith(ctx, m.adm)
		if err != nil {
			return err
		}
		done, seen, stable := true, false, false
		var members []remote
		owners := map[topicPartition]remote{}
		for _, g := range resp.Groups {
			if g.Group != m.cfg.Group || kerr.ErrorForCode(g.ErrorCode) != nil {
				continue
			}
			seen, stable = true, g.State == "Stable"
			done = stable || g.State == "Empty" || g.State == "Dead"
			members = groupView(g, owners)
			for _, r := range members {
				if r.name == m.cfg.Name {
					done = false
				}
			}
		}
		if done {
			if seen {
				// The view waited for; in an empty group no one holds
				// the partitions.
				m.setView(members, owners, stable || len(members) == 0)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the group has not rebalanced without the member: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// String describes the member.
func (m *Member) String() string {
	return fmt.Sprintf("member %s (%s) of group %s holding %s", m.cfg.Name, m.cfg.Address, m.cfg.Group, strings.Join(m.Held(), ", "))
}

// Status is a group's members as the coordinator shows them.
type Status struct {
	Group string `json:"group"`
	// State is the group's state ("Stable", "PreparingRebalance",
	// "CompletingRebalance", "Empty", "Dead"; "" for a group that does
	// not exist).
	State string `json:"state"`
	// Members are the group's members that Join made, by name.
	Members []MemberStatus `json:"members"`
}

// MemberStatus is one member and the partitions it holds.
type MemberStatus struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	// MemberID is the coordinator's id of the member (new at each join);
	// Host is where the coordinator sees it connect from.
	MemberID string `json:"member_id"`
	Host     string `json:"host"`
	// Partitions maps each journal topic to the partitions the member
	// holds (empty while the group rebalances).
	Partitions map[string][]int32 `json:"partitions"`
}

// ReadStatus reads group's members from the brokers (opts are added to
// the client's options: TLS, SASL). It reads only: any process may run
// it.
func ReadStatus(ctx context.Context, brokers []string, group string, opts ...kgo.Opt) (Status, error) {
	if group == "" {
		group = DefaultGroup
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		return Status{}, fmt.Errorf("kafkacluster: %w", err)
	}
	defer cl.Close()
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{group}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return Status{}, fmt.Errorf("kafkacluster: describing group %s: %w", group, err)
	}
	st := Status{Group: group, Members: []MemberStatus{}}
	for _, g := range resp.Groups {
		if g.Group != group {
			continue
		}
		if err := kerr.ErrorForCode(g.ErrorCode); errors.Is(err, kerr.GroupIDNotFound) {
			continue
		} else if err != nil {
			return Status{}, fmt.Errorf("kafkacluster: describing group %s: %w", group, err)
		}
		st.State = g.State
		for _, mem := range g.Members {
			r, ok := parseClientID(mem.ClientID)
			if !ok {
				continue
			}
			ms := MemberStatus{Name: r.name, Address: r.address, MemberID: mem.MemberID, Host: mem.ClientHost, Partitions: map[string][]int32{}}
			var a kmsg.ConsumerMemberAssignment
			if len(mem.MemberAssignment) > 0 && a.ReadFrom(mem.MemberAssignment) == nil {
				for _, t := range a.Topics {
					ps := slices.Clone(t.Partitions)
					slices.Sort(ps)
					ms.Partitions[t.Topic] = ps
				}
			}
			st.Members = append(st.Members, ms)
		}
	}
	slices.SortFunc(st.Members, func(a, b MemberStatus) int { return strings.Compare(a.Name, b.Name) })
	return st, nil
}
