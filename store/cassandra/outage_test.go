package cassandra_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/examples/bank"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/store/cassandra"
	"github.com/annals-go/annals/store/cassandra/cassandratest"
)

// The outage tests stop and start a Cassandra node through
// scripts/services, in this process's environment: the node of
// ANNALS_SERVICES_DIR, which must be set (to a folder of its own: the
// node of the default folder serves every other test), and whose address
// must be the tests' (ANNALS_TEST_CASSANDRA). They run only when
// ANNALS_OUTAGE_DRILL is set:
//
//	export ANNALS_SERVICES_DIR=/tmp/cassdrill
//	scripts/services up cassandra
//	eval "$(scripts/services env cassandra)"
//	ANNALS_OUTAGE_DRILL=1 go test ./store/cassandra -run 'TestReconnectAfterRestart|TestOutageDrill' -v
//	scripts/services down cassandra

// resumeLimit is how long after the node answers again the outage tests
// wait for a write to be acknowledged before they fail: far above the few
// seconds it takes, far below "never" (a session that lost its node kept
// failing for minutes, until its process restarted).
const resumeLimit = 90 * time.Second

// drillNode skips t unless ANNALS_OUTAGE_DRILL is set, checks that the
// tests' node is the one scripts/services manages in this environment,
// and returns a function that runs `scripts/services CMD cassandra` and
// returns when it is done (for up: when the node answers).
func drillNode(t *testing.T) (addr string, services func(cmd string)) {
	t.Helper()
	if os.Getenv("ANNALS_OUTAGE_DRILL") == "" {
		t.Skip("stops and starts a Cassandra node: set ANNALS_OUTAGE_DRILL=1 and ANNALS_SERVICES_DIR to a node of its own (see outage_test.go)")
	}
	if os.Getenv("ANNALS_SERVICES_DIR") == "" {
		t.Fatal("ANNALS_OUTAGE_DRILL: set ANNALS_SERVICES_DIR to the folder of a node of the drill's own (scripts/services up cassandra with it), never the shared node's")
	}
	addr = cassandratest.Server(t)
	run := func(cmd string) string {
		t.Helper()
		out, err := exec.CommandContext(t.Context(), "../../scripts/services", cmd, "cassandra").CombinedOutput()
		if err != nil {
			t.Fatalf("scripts/services %s cassandra (ANNALS_SERVICES_DIR=%s): %v\n%s", cmd, os.Getenv("ANNALS_SERVICES_DIR"), err, out)
		}
		return string(out)
	}
	managed := func() string {
		t.Helper()
		env := run("env")
		_, rest, ok := strings.Cut(env, "ANNALS_TEST_CASSANDRA=")
		if !ok {
			t.Fatalf("scripts/services env cassandra printed no address:\n%s", env)
		}
		return strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0])
	}
	if m := managed(); m != addr {
		t.Fatalf("the tests' node is %s, the node of ANNALS_SERVICES_DIR=%s is %s: the drill would stop another node than it tests",
			addr, os.Getenv("ANNALS_SERVICES_DIR"), m)
	}
	return addr, func(cmd string) {
		t.Helper()
		run(cmd)
		if cmd == "up" {
			if m := managed(); m != addr {
				t.Fatalf("the node came back on %s, not %s", m, addr)
			}
		}
	}
}

// hostIDs records the host ids of the nodes that ran the store's queries.
type hostIDs struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (h *hostIDs) ObserveQuery(_ context.Context, q gocql.ObservedQuery) {
	if q.Host == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen[q.Host.HostID()] = true
}

// TestQueriesKnowNodesByHostID: the session's pools know a node by its
// host id (system.local's), the id by which the driver's control
// connection finds it again when it reconnects after a restart of the
// node. This is what TestReconnectAfterRestart needs, checked without a
// restart: a pool host with an id of the driver's making (which it gives
// without DisableInitialHostLookup's lookup) was, on that reconnection,
// removed together with the node's real entry from the host policy, which
// forgets hosts by address; the session then failed every call with "no
// hosts available in the pool" until its process restarted.
func TestQueriesKnowNodesByHostID(t *testing.T) {
	seen := &hostIDs{seen: map[string]bool{}}
	s := cassandratest.Open(t, cassandra.WithQueryObserver(seen))
	ctx := t.Context()
	if res, err := s.Journal().Write(ctx, []journal.AtomicWrite{events("Hosts|1", 1, 1)}); res != nil || err != nil {
		t.Fatal(res, err)
	}
	nodes := map[string]bool{}
	for _, table := range []string{"system.local", "system.peers"} {
		iter := s.Session().Query(`SELECT host_id FROM ` + table).WithContext(ctx).Iter()
		var id gocql.UUID
		for iter.Scan(&id) {
			nodes[id.String()] = true
		}
		if err := iter.Close(); err != nil {
			t.Fatal(err)
		}
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	if len(seen.seen) == 0 {
		t.Fatal("the observer saw no query")
	}
	for id := range seen.seen {
		if !nodes[id] {
			t.Errorf("a query ran on a pool host with id %s, which is no node's (the nodes: %v)", id, slices.Sorted(maps.Keys(nodes)))
		}
	}
}

// TestReconnectAfterRestart: a store whose node is stopped and started
// again writes again, in the same process, once the node answers.
// Before the store let the driver look its nodes up, the session's pool
// host was replaced by the node's real one when the control connection
// reconnected, and the replacement removed the node from the host policy:
// every call failed with "no hosts available in the pool" from then on.
func TestReconnectAfterRestart(t *testing.T) {
	_, services := drillNode(t)
	s := cassandratest.Open(t)
	j := s.Journal()
	ctx := t.Context()
	if res, err := j.Write(ctx, []journal.AtomicWrite{events("Reconnect|before", 1, 1)}); res != nil || err != nil {
		t.Fatal(res, err)
	}
	services("down")
	down, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err := j.Write(down, []journal.AtomicWrite{events("Reconnect|down", 1, 1)})
	cancel()
	if err == nil {
		t.Fatal("a write while the node is down succeeded")
	}
	t.Logf("while the node is down, a write fails with: %v", err)
	services("up")
	upAt := time.Now()
	// Each attempt writes an id of its own: an attempt whose outcome was
	// unknown does not make the next one a conflict.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for attempt := 0; time.Since(upAt) < resumeLimit; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		res, err := j.Write(actx, []journal.AtomicWrite{events(fmt.Sprintf("Reconnect|after-%d", attempt), 1, 1)})
		cancel()
		if err == nil && res == nil {
			t.Logf("first acknowledged write %.1fs after the node answered again (%d attempts)", time.Since(upAt).Seconds(), attempt+1)
			if got := replaySeqs(t, j, "Reconnect|before", 1); !slices.Equal(got, []int64{1}) {
				t.Errorf("the event written before the restart replays as %v, want [1]", got)
			}
			return
		}
		last = cmpErrs(err, res)
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	t.Fatalf("no write acknowledged %v after the node answered again; the last failed with: %v", resumeLimit, last)
}

func cmpErrs(err error, res []error) error {
	if err != nil {
		return err
	}
	return errors.Join(res...)
}

// TestOutageDrill stops the node for 15 s while 32 callers deposit into
// 1,000 accounts (entities with Restart, a journal front with its default
// settings, Ask timeout 15 s), starts it again, and reports what the
// callers met: how fast they were failed, when writes resumed after the
// node answered. It checks the guarantees: no caller waited out its own
// timeout, writes resumed in this process (within resumeLimit), and each
// account holds every acknowledged deposit, plus at most those whose
// outcome was unknown. See the top of the file for how to run it.
func TestOutageDrill(t *testing.T) {
	_, services := drillNode(t)
	const accounts, callers, warmup, outage, after, askTimeout = 1000, 32, 500, 15 * time.Second, 10 * time.Second, 15 * time.Second
	ctx := t.Context()
	s := cassandratest.Open(t)
	reg := serialization.NewRegistry()
	if err := bank.Register(reg); err != nil {
		t.Fatal(err)
	}
	front, err := engine.NewFront(s.Journal(), engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer front.Close()
	host := func() *entity.Host[bank.Command, bank.Event, bank.Account] {
		h, err := entity.NewHost(bank.Behavior(), entity.HostConfig{Journal: front, Snapshots: s.Snapshots(), Registry: reg,
			Restart: &entity.Backoff{Min: 500 * time.Millisecond, Max: 5 * time.Second}, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	h := host()

	type outcome struct {
		at, took time.Duration // since the start; the call's duration
		kind     string
	}
	var (
		mu       sync.Mutex
		outcomes []outcome
		acked    = make([]atomic.Int64, accounts)
		unknown  = make([]atomic.Int64, accounts)
		okCount  atomic.Int64
		warm     = make(chan struct{}) // closed at the warmup-th acknowledged deposit
		upAt     atomic.Int64          // since the start, once the node answers again
		resumed  = make(chan struct{}) // closed at the first deposit acknowledged after upAt
		once     sync.Once
	)
	classify := func(err error) string {
		var restarting *entity.RestartingError
		switch {
		case err == nil:
			return "ok"
		case errors.As(err, &restarting):
			return "restarting"
		case errors.Is(err, engine.ErrCircuitOpen):
			return "circuit open"
		case errors.Is(err, engine.ErrCallTimeout):
			return "call timeout"
		case errors.Is(err, context.DeadlineExceeded):
			return "ask timeout"
		case errors.Is(err, entity.ErrRecovery):
			return "recovery failed"
		}
		return "store error"
	}
	start := time.Now()
	load, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var wg sync.WaitGroup
	for w := range callers {
		wg.Go(func() {
			for i := w; load.Err() == nil; i += callers {
				a := i % accounts
				callStart := time.Now()
				askCtx, cancel := context.WithTimeout(load, askTimeout)
				_, err := entity.Ask(askCtx, h, fmt.Sprintf("a-%d", a), func(r entity.ReplyTo[int64]) bank.Command { return bank.Deposit{Amount: 1, Reply: r} })
				cancel()
				if load.Err() != nil && err != nil {
					unknown[a].Add(1) // the drill ended: Ask gave up, the command is still handled
					return
				}
				kind := classify(err)
				switch kind {
				case "ok":
					acked[a].Add(1)
					if okCount.Add(1) == warmup {
						close(warm)
					}
					if u := upAt.Load(); u > 0 && time.Since(start) > time.Duration(u) {
						once.Do(func() { close(resumed) })
					}
				case "call timeout", "store error", "ask timeout":
					unknown[a].Add(1) // sent: the outcome is unknown
				}
				mu.Lock()
				outcomes = append(outcomes, outcome{callStart.Sub(start), time.Since(callStart), kind})
				mu.Unlock()
				if kind != "ok" {
					time.Sleep(50 * time.Millisecond) // a caller's pause before retrying
				}
			}
		})
	}
	wait := func(what string, c <-chan struct{}, limit time.Duration) bool {
		t.Helper()
		timer := time.NewTimer(limit)
		defer timer.Stop()
		select {
		case <-c:
			return true
		case <-timer.C:
			return false
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, ctx.Err())
			return false
		}
	}
	if !wait("warm-up", warm, time.Minute) {
		t.Fatalf("fewer than %d deposits acknowledged in a minute before the outage", warmup)
	}
	stopAt := time.Since(start)
	services("down")
	downAt := time.Since(start)
	wait("outage", nil, outage) // the node stays down this long
	services("up")
	back := time.Since(start)
	upAt.Store(int64(back))
	// The store's own reconnection, apart from the front's circuit
	// breaker (whose half-open probe comes every ResetTimeout): the first
	// read of the journal that succeeds.
	storeBack := make(chan time.Duration, 1)
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for load.Err() == nil {
			pctx, cancel := context.WithTimeout(load, 5*time.Second)
			_, err := s.Journal().HighestSequenceNr(pctx, "Probe|store", 0)
			cancel()
			if err == nil {
				storeBack <- time.Since(start) - back
				return
			}
			select {
			case <-tick.C:
			case <-load.Done():
			}
		}
		storeBack <- -1
	}()
	ok := wait("resumption", resumed, resumeLimit)
	if ok {
		wait("after resumption", nil, after) // the load goes on this long
	}
	stopLoad()
	wg.Wait()
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	counts := map[string]int{}
	var failing []time.Duration
	for _, o := range outcomes {
		counts[o.kind]++
		if o.kind != "ok" {
			failing = append(failing, o.took)
		}
	}
	slices.Sort(failing)
	slices.SortFunc(outcomes, func(a, b outcome) int { return int((a.at + a.took) - (b.at + b.took)) })
	var firstFail, firstOpen, firstOK time.Duration = -1, -1, -1
	for _, o := range outcomes {
		end := o.at + o.took
		if o.kind != "ok" && end >= stopAt && firstFail < 0 {
			firstFail = end - stopAt
		}
		if o.kind == "circuit open" && end >= stopAt && firstOpen < 0 {
			firstOpen = end - stopAt
		}
		if o.kind == "ok" && end > back && firstOK < 0 {
			firstOK = end - back
		}
	}
	okAfter := 0
	for _, o := range outcomes {
		if o.kind == "ok" && o.at >= back {
			okAfter++
		}
	}
	t.Logf("node stopped %.1fs after the start (down took %.1fs), answering again %.1fs later", stopAt.Seconds(), (downAt - stopAt).Seconds(), (back - downAt).Seconds())
	t.Logf("first failed call %.2fs after the stop began; first ErrCircuitOpen %.2fs after it", firstFail.Seconds(), firstOpen.Seconds())
	t.Logf("failed calls: %d, returned in p50 %v, p99 %v, max %v", len(failing), pct(failing, 0.5), pct(failing, 0.99), pct(failing, 1))
	t.Logf("outcomes: %v; acknowledged deposits started after the node answered: %d", counts, okAfter)
	t.Logf("the store answered again %.1fs after the node did", (<-storeBack).Seconds())
	if ok {
		t.Logf("first acknowledged write %.1fs after the node answered again (the front's circuit breaker lets a call through every %v while open)", firstOK.Seconds(), engine.DefaultResetTimeout)
	}
	if counts["ask timeout"] > 0 {
		t.Errorf("%d callers waited out their %v timeout; want each told why", counts["ask timeout"], askTimeout)
	}
	if !ok {
		t.Fatalf("no write acknowledged %v after the node answered again", resumeLimit)
	}

	// Every acknowledged deposit is there; beyond them, only deposits
	// whose outcome was unknown.
	check := host()
	defer check.Shutdown(ctx)
	lost := int64(0)
	for a := range accounts {
		got, err := entity.Ask(ctx, check, fmt.Sprintf("a-%d", a), func(r entity.ReplyTo[int64]) bank.Command { return bank.GetBalance{Reply: r} })
		if err != nil {
			t.Fatalf("balance of a-%d: %v", a, err)
		}
		if lo, hi := acked[a].Load(), acked[a].Load()+unknown[a].Load(); got < lo || got > hi {
			t.Errorf("a-%d holds %d deposits; %d were acknowledged and %d had an unknown outcome", a, got, lo, unknown[a].Load())
			lost += max(lo-got, 0)
		}
	}
	t.Logf("acknowledged deposits lost: %d", lost)
}

func pct(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))].Round(time.Millisecond)
}
