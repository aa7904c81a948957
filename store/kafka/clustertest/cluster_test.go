package clustertest_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/examples/bank"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/eventual"
	"github.com/annals-go/annals/store/kafka/eventual/pg/pgeventualtest"
	"github.com/annals-go/annals/store/kafka/kafkatest"
	"github.com/annals-go/annals/store/kafka/wire"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

// The load of the cluster's failure tests: callers deposit 1 into
// accounts in turn, each Ask bounded; a caller whose call failed pauses
// before its next one.
const (
	clusterCallers    = 16
	clusterAccounts   = 64
	clusterPartitions = 3
	clusterAsk        = 30 * time.Second
	clusterPause      = 50 * time.Millisecond
	clusterWarm       = 300              // deposits acknowledged before a broker is killed
	clusterResume     = 100              // deposits acknowledged after it, to call writes resumed
	clusterBound      = 90 * time.Second // bound of each wait for the load
)

// clusterWorld is a failure test's cluster (held alone), journal topic
// (replication 3, every partition led first by one broker), journal,
// replicator into PostgreSQL, and the load's host.
type clusterWorld struct {
	c      *kafkatest.TestCluster
	topic  string
	leader int32 // the broker that leads every partition at the start
	schema string
	j      *kafka.Journal
	front  *engine.Front
	reg    *serialization.Registry

	mu       sync.Mutex
	outcomes []clusterOutcome
	acked    []atomic.Int64 // by account
	unknown  []atomic.Int64 // by account: sent, outcome unknown
	okCount  atomic.Int64
	host     *entity.Host[bank.Command, bank.Event, bank.Account]
	stopLoad context.CancelFunc
	loadDone sync.WaitGroup
}

// clusterOutcome is one deposit's: when it began and ended, and its error.
type clusterOutcome struct {
	start, end time.Time
	err        error
}

func newClusterWorld(t *testing.T) *clusterWorld {
	t.Helper()
	c := kafkatest.ClusterAlone(t)
	w := &clusterWorld{c: c, leader: 1 + int32(time.Now().UnixNano()%kafkatest.ClusterReplicas),
		acked: make([]atomic.Int64, clusterAccounts), unknown: make([]atomic.Int64, clusterAccounts)}
	prefix := c.Prefix(t, "kc")
	w.topic = prefix + bank.EntityType
	c.CreateTopic(t, w.topic, clusterPartitions, w.leader)
	if got := c.Leaders(t, w.topic); len(got) != clusterPartitions || slices.ContainsFunc(slices.Collect(maps.Values(got)), func(l int32) bool { return l != w.leader }) {
		t.Fatalf("leaders of %s: %v; want broker %d for each of %d partitions", w.topic, got, w.leader, clusterPartitions)
	}
	cfgs, err := c.Admin(t).DescribeTopicConfigs(t.Context(), w.topic)
	if err != nil {
		t.Fatal(err)
	}
	minISR, _ := cfgs.On(w.topic, nil)
	for _, cf := range minISR.Configs {
		if cf.Key == "min.insync.replicas" && (cf.Value == nil || *cf.Value != fmt.Sprint(kafkatest.ClusterMinInSync)) {
			t.Fatalf("topic %s: min.insync.replicas %v; want %d", w.topic, cf.MaybeValue(), kafkatest.ClusterMinInSync)
		}
	}
	tabs, schema := openEventual(t)
	w.schema = schema
	opts := c.ClientOptions(t)
	w.j = kafkatest.Open(t, c.Brokers, tabs, kafka.WithTopic(func(string) string { return w.topic }), kafka.WithClientOptions(opts...))
	replicate(t, c.Brokers, tabs, kafka.WithTopics(w.topic), kafka.WithGroup(prefix+"replicator"), kafka.WithReplicatorClientOptions(opts...))
	w.reg = serialization.NewRegistry()
	if err := bank.Register(w.reg); err != nil {
		t.Fatal(err)
	}
	w.front, err = engine.NewFront(w.j, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.front.Close() })
	return w
}

func (w *clusterWorld) newHost(t *testing.T) *entity.Host[bank.Command, bank.Event, bank.Account] {
	t.Helper()
	h, err := entity.NewHost(bank.Behavior(), entity.HostConfig{Journal: w.front, Registry: w.reg,
		Restart: &entity.Backoff{Min: 200 * time.Millisecond, Max: 2 * time.Second}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// start starts the load; it runs until stop.
func (w *clusterWorld) start(t *testing.T) {
	t.Helper()
	w.host = w.newHost(t)
	load, stop := context.WithCancel(context.Background())
	w.stopLoad = stop
	t.Cleanup(w.stop)
	for c := range clusterCallers {
		w.loadDone.Go(func() {
			for i := c; load.Err() == nil; i += clusterCallers {
				a := i % clusterAccounts
				start := time.Now()
				ctx, cancel := context.WithTimeout(load, clusterAsk)
				_, err := entity.Ask(ctx, w.host, fmt.Sprintf("a-%d", a), func(r entity.ReplyTo[int64]) bank.Command { return bank.Deposit{Amount: 1, Reply: r} })
				cancel()
				if err != nil && load.Err() != nil {
					w.unknown[a].Add(1) // the load ended: the command may still be handled
					return
				}
				if err == nil {
					w.acked[a].Add(1)
					w.okCount.Add(1)
				} else if unknownOutcome(err) {
					w.unknown[a].Add(1)
				}
				w.mu.Lock()
				w.outcomes = append(w.outcomes, clusterOutcome{start, time.Now(), err})
				w.mu.Unlock()
				if err != nil {
					select {
					case <-time.After(clusterPause):
					case <-load.Done():
					}
				}
			}
		})
	}
}

// unknownOutcome reports whether a failed deposit may have been stored.
func unknownOutcome(err error) bool {
	var restarting *entity.RestartingError
	return !errors.As(err, &restarting) && !errors.Is(err, engine.ErrCircuitOpen) && !errors.Is(err, entity.ErrRecovery)
}

// stop ends the load and shuts the host down (once).
func (w *clusterWorld) stop() {
	if w.stopLoad == nil {
		return
	}
	w.stopLoad()
	w.loadDone.Wait()
	w.stopLoad = nil
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = w.host.Shutdown(ctx)
}

// waitFor waits, at most clusterBound, until cond holds over the
// outcomes so far, checking at each new outcome's batch (every 100 ms).
func (w *clusterWorld) waitFor(t *testing.T, what string, cond func(outcomes []clusterOutcome) bool) {
	t.Helper()
	deadline := time.Now().Add(clusterBound)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		w.mu.Lock()
		ok := cond(w.outcomes)
		w.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			w.logOutcomes(t, time.Time{})
			t.Fatalf("%s: not within %v", what, clusterBound)
		}
		select {
		case <-tick.C:
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		}
	}
}

// ackedSince counts the deposits begun at or after from and acknowledged.
func ackedSince(outcomes []clusterOutcome, from time.Time) int {
	n := 0
	for _, o := range outcomes {
		if o.err == nil && !o.start.Before(from) {
			n++
		}
	}
	return n
}

// logOutcomes logs the outcomes since from by kind, and the longest call.
func (w *clusterWorld) logOutcomes(t *testing.T, from time.Time) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	kinds := map[string]int{}
	var longest time.Duration
	firstErr := map[string]string{}
	for _, o := range w.outcomes {
		if o.end.Before(from) {
			continue
		}
		k := "ok"
		switch {
		case o.err == nil:
		case errors.Is(o.err, kerr.NotEnoughReplicas):
			k = "not enough replicas"
		case errors.Is(o.err, engine.ErrCircuitOpen):
			k = "circuit open"
		case errors.Is(o.err, engine.ErrCallTimeout):
			k = "call timeout"
		case errors.Is(o.err, context.DeadlineExceeded):
			k = "ask timeout"
		default:
			k = "other"
		}
		kinds[k]++
		if _, ok := firstErr[k]; !ok && o.err != nil {
			firstErr[k] = o.err.Error()
		}
		longest = max(longest, o.end.Sub(o.start))
	}
	t.Logf("outcomes: %v; longest call %v", kinds, longest.Round(time.Millisecond))
	for k, e := range firstErr {
		t.Logf("first %q: %s", k, e)
	}
}

// verify stops the load and checks that every acknowledged deposit is in
// the topic and, once the replicator has caught up, in the eventual store,
// with nothing beyond them but deposits whose outcome was unknown; and
// that a fresh host's accounts hold as many.
func (w *clusterWorld) verify(t *testing.T) {
	t.Helper()
	w.stop()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	adm := w.c.Admin(t)
	ends, err := adm.ListEndOffsets(ctx, w.topic)
	if err != nil {
		t.Fatal(err)
	}
	end := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { end[o.Partition] = o.Offset })

	// The topic: every append's numbers, by id.
	cl, err := kgo.NewClient(append(w.c.ClientOptions(t), kgo.ConsumeTopics(w.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	inTopic := map[string]map[int64]bool{}
	read := map[int32]int64{}
	for !reached(read, end) {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("reading the topic to %v: at %v: %v", end, read, err)
		}
		fs.EachError(func(_ string, p int32, err error) { t.Logf("fetching partition %d: %v", p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			read[r.Partition] = r.Offset + 1
			for _, h := range r.Headers {
				if h.Key != wire.HeaderKey {
					continue
				}
				hd, ok, err := wire.DecodeHeader(h.Value)
				if err != nil || !ok || hd.Kind != wire.Append {
					continue
				}
				id := string(r.Key)
				if inTopic[id] == nil {
					inTopic[id] = map[int64]bool{}
				}
				for s := hd.From; s <= hd.To; s++ {
					inTopic[id][s] = true
				}
			}
		})
	}

	// The eventual store, once its pointers have reached the ends.
	conn, err := pgx.Connect(ctx, pgtest.Server(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for {
		rows, err := conn.Query(ctx, `SELECT partition, "offset" FROM `+w.schema+`.pointer2 WHERE topic = $1`, w.topic)
		if err != nil {
			t.Fatal(err)
		}
		at := map[int32]int64{}
		for rows.Next() {
			var p int32
			var o int64
			if err := rows.Scan(&p, &o); err != nil {
				t.Fatal(err)
			}
			at[p] = o + 1
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if reached(at, end) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the replicator did not reach the topic's ends %v: its pointers are at %v", end, at)
		case <-time.After(200 * time.Millisecond):
		}
	}
	inStore := map[string]map[int64]bool{}
	rows, err := conn.Query(ctx, `SELECT id, seq_nr FROM `+w.schema+`.journal WHERE topic = $1`, w.topic)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var seq int64
		if err := rows.Scan(&id, &seq); err != nil {
			t.Fatal(err)
		}
		if inStore[id] == nil {
			inStore[id] = map[int64]bool{}
		}
		inStore[id][seq] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}

	check := w.newHost(t)
	defer check.Shutdown(context.Background())
	var ackedAll, unknownAll, stored int64
	for a := range clusterAccounts {
		id := fmt.Sprintf("a-%d", a)
		pid := bank.EntityType + "|" + id
		lo, u := w.acked[a].Load(), w.unknown[a].Load()
		ackedAll, unknownAll = ackedAll+lo, unknownAll+u
		balance, err := entity.Ask(ctx, check, id, func(r entity.ReplyTo[int64]) bank.Command { return bank.GetBalance{Reply: r} })
		if err != nil {
			t.Fatalf("balance of %s: %v", id, err)
		}
		nTopic, nStore := contiguous(t, "topic", pid, inTopic[pid]), contiguous(t, "eventual store", pid, inStore[pid])
		stored += nTopic
		if nTopic < lo || nTopic > lo+u || nStore != nTopic || balance != nTopic {
			t.Errorf("%s: %d deposits in the topic, %d in the eventual store, balance %d; %d acknowledged and %d of unknown outcome",
				pid, nTopic, nStore, balance, lo, u)
		}
	}
	t.Logf("acknowledged deposits: %d, of unknown outcome: %d; in the topic and the eventual store: %d", ackedAll, unknownAll, stored)
}

// contiguous returns how many numbers seqs holds, failing t unless they
// are 1 to that number.
func contiguous(t *testing.T, where, pid string, seqs map[int64]bool) int64 {
	t.Helper()
	n := int64(len(seqs))
	for s := range seqs {
		if s < 1 || s > n {
			t.Errorf("%s: %s holds sequence numbers %v: not 1 to %d", pid, where, slices.Sorted(maps.Keys(seqs)), n)
			break
		}
	}
	return n
}

// reached reports whether at has reached end for every partition.
func reached(at, end map[int32]int64) bool {
	for p, e := range end {
		if at[p] < e {
			return false
		}
	}
	return true
}

// TestClusterLeaderKilled: the broker leading every partition of the
// journal's topic is killed (SIGKILL) while 16 callers deposit through an
// entity host and the replicator copies the topic into PostgreSQL. Writes
// resume in this same process once the controller has moved the
// leadership (it fences a broker that stopped heartbeating); every
// acknowledged deposit is in the topic and in the eventual store, beyond
// them only deposits whose outcome was unknown. The broker comes back
// (`scripts/services up kafka-cluster`) and rejoins the in-sync replicas.
func TestClusterLeaderKilled(t *testing.T) {
	w := newClusterWorld(t)
	w.start(t)
	w.waitFor(t, "warm-up", func(os []clusterOutcome) bool { return ackedSince(os, time.Time{}) >= clusterWarm })

	w.c.Kill(t, w.leader)
	killed := time.Now()
	t.Logf("killed broker %d, the leader of %s's %d partitions", w.leader, w.topic, clusterPartitions)
	w.waitFor(t, "writes resumed after the leader's death", func(os []clusterOutcome) bool { return ackedSince(os, killed) >= clusterResume })
	leaders := w.c.Leaders(t, w.topic)
	for p, l := range leaders {
		if l == w.leader || l < 0 {
			t.Errorf("partition %d: leader %d after broker %d was killed and writes resumed", p, l, w.leader)
		}
	}
	var firstOK time.Duration
	w.mu.Lock()
	for _, o := range w.outcomes {
		if o.err == nil && !o.start.Before(killed) && (firstOK == 0 || o.end.Sub(killed) < firstOK) {
			firstOK = o.end.Sub(killed)
		}
	}
	w.mu.Unlock()
	t.Logf("new leaders %v; the first deposit begun after the kill was acknowledged %v after it", leaders, firstOK.Round(time.Millisecond))
	w.logOutcomes(t, killed)

	w.c.Up(t)
	w.c.WaitInSync(t, w.topic)
	back := time.Now()
	w.waitFor(t, "writes after the broker came back", func(os []clusterOutcome) bool { return ackedSince(os, back) >= clusterResume })
	w.verify(t)
}

// TestClusterTwoBrokersDown: with two of the three brokers killed, the
// partitions have one replica in sync, fewer than min.insync.replicas: a
// journal write fails fast with an error wrapping kerr.NotEnoughReplicas
// that names the partition (it does not wait out its context), the
// load's deposits fail (none waits out the front's call timeout or its
// own), and writes resume in this same process when one broker returns.
// Every acknowledged deposit is then in the topic and the eventual store.
func TestClusterTwoBrokersDown(t *testing.T) {
	w := newClusterWorld(t)
	w.start(t)
	w.waitFor(t, "warm-up", func(os []clusterOutcome) bool { return ackedSince(os, time.Time{}) >= clusterWarm })

	var down []int32
	for id := int32(1); id <= kafkatest.ClusterReplicas; id++ {
		if id != w.leader {
			down = append(down, id)
		}
	}
	for _, id := range down {
		w.c.Kill(t, id)
	}
	killed := time.Now()
	t.Logf("killed brokers %v; broker %d, the leader, is left", down, w.leader)

	// The journal itself: once the controller has fenced the dead brokers
	// and shrunk the in-sync replicas, a write fails with
	// NOT_ENOUGH_REPLICAS, long before its context ends.
	seq := int64(0)
	pid := bank.EntityType + "|probe"
	var refused error
	deadline := time.Now().Add(clusterBound)
	for refused == nil {
		if time.Now().After(deadline) {
			t.Fatalf("no write refused for too few replicas in sync %v after two brokers were killed", clusterBound)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		res, err := w.j.Write(ctx, []journal.AtomicWrite{{PersistenceID: pid, Events: []journal.Repr{{PersistenceID: pid, SequenceNr: seq + 1, Payload: []byte("p"), SerializerID: 4, Manifest: "probe", WriterID: "w"}}}})
		waited := ctx.Err()
		cancel()
		switch {
		case err == nil && (len(res) == 0 || res[0] == nil):
			seq++ // written before the in-sync replicas shrank
		case errors.Is(err, kerr.NotEnoughReplicas):
			if waited != nil {
				t.Errorf("the write failed only when its context ended: %v", err)
			}
			refused = err
		case err != nil && strings.Contains(err.Error(), "already stored"), res != nil && res[0] != nil:
			seq++ // an earlier write of unknown outcome was stored
		default:
			t.Logf("write %d after the kill: %v %v", seq+1, res, err)
		}
	}
	t.Logf("%v after the kill, a write is refused: %v", time.Since(killed).Round(time.Millisecond), refused)
	for _, want := range []string{w.topic, "NOT_ENOUGH_REPLICAS", "min.insync.replicas"} {
		if !strings.Contains(refused.Error(), want) {
			t.Errorf("the refusal %q does not name %q", refused, want)
		}
	}
	refusedAt := time.Now()
	w.waitFor(t, "deposits refused for too few replicas", func(os []clusterOutcome) bool {
		return slices.ContainsFunc(os, func(o clusterOutcome) bool { return errors.Is(o.err, kerr.NotEnoughReplicas) })
	})
	// The load fails fast from now on: calls fail, none waits out a timeout.
	w.waitFor(t, "100 failed deposits", func(os []clusterOutcome) bool {
		n := 0
		for _, o := range os {
			if o.err != nil && !o.start.Before(refusedAt) {
				n++
			}
		}
		return n >= 100
	})
	w.mu.Lock()
	for _, o := range w.outcomes {
		if o.start.Before(refusedAt) {
			continue
		}
		if o.err == nil {
			t.Errorf("a deposit begun %v after the refusal was acknowledged with one replica in sync", o.start.Sub(refusedAt))
		}
		// The journal call waited out the front's call timeout, or the
		// caller its own: each is told why instead, and at once.
		if errors.Is(o.err, engine.ErrCallTimeout) || o.end.Sub(o.start) >= clusterAsk {
			t.Errorf("a deposit begun after the refusal waited out a timeout: %v", o.err)
		}
	}
	w.mu.Unlock()
	w.logOutcomes(t, refusedAt)

	w.c.Up(t, down[0])
	back := time.Now()
	t.Logf("broker %d is back %v after the kill", down[0], back.Sub(killed).Round(time.Millisecond))
	w.waitFor(t, "writes resumed with one broker back", func(os []clusterOutcome) bool { return ackedSince(os, back) >= clusterResume })
	var firstOK time.Duration = math.MaxInt64
	w.mu.Lock()
	for _, o := range w.outcomes {
		if o.err == nil && !o.start.Before(back) {
			firstOK = min(firstOK, o.end.Sub(back))
		}
	}
	w.mu.Unlock()
	t.Logf("the first deposit begun after broker %d came back was acknowledged %v after it", down[0], firstOK.Round(time.Millisecond))

	w.c.Up(t)
	w.c.WaitInSync(t, w.topic)
	w.verify(t)
}

// replicate runs a replicator until the test ends.
func replicate(t testing.TB, brokers []string, tables eventual.Tables, opts ...kafka.ReplicatorOption) {
	t.Helper()
	r, err := kafka.NewReplicator(brokers, tables, append([]kafka.ReplicatorOption{kafka.WithErrorHandler(func(err error) { t.Log(err) })}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := r.Run(ctx); err != nil {
			t.Errorf("replicator: %v", err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// openEventual opens the eventual store in a PostgreSQL schema of the
// test's own, and returns it and the schema.
func openEventual(t *testing.T) (eventual.Tables, string) {
	t.Helper()
	_, schema := pgtest.Schema(t)
	return pgeventualtest.OpenIn(t, schema), schema
}
