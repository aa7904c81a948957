// Package outagetest is the outage drill every store with a server runs,
// a test helper for the stores' _test.go files.
//
// The drill's rules:
//
//   - A host of bank accounts (entities with restart backoff, a journal
//     front with its default settings) takes deposits from 32 callers,
//     each Ask with a timeout of 15 s; a caller whose call failed pauses
//     50 ms before its next one.
//   - The server is stopped once the load is warm (its 500th deposit
//     acknowledged, within a minute), stays down 15 s, and is started
//     again; the drill waits on these events, not on fixed sleeps.
//   - Writes must resume in this same process: a deposit acknowledged
//     after the server answers again, within [ResumeLimit]. The load then
//     goes on for 10 s and stops.
//   - The drill reports, through t.Logf, when the server was stopped and
//     answered again, the first failed call and the first
//     [engine.ErrCircuitOpen] after the stop, how fast failed calls
//     returned, the outcomes by kind, when the store itself answered again
//     (with a Config.Probe) and the first acknowledged write after the
//     server answered.
//   - It checks the guarantees: no caller waited out its own Ask timeout
//     (each is told why it failed), writes resumed within ResumeLimit, and
//     each account holds every acknowledged deposit plus at most those
//     whose outcome was unknown (call timeouts, store errors, calls cut
//     short by the end of the load).
//
// It stops a server, so a store's drill runs only when asked (the stores
// gate it on ANNALS_OUTAGE_DRILL), alone, and on a server of its own where
// other tests share the default one.
package outagetest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/examples/bank"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/snapshot"
)

// ResumeLimit is how long after the server answers again the drill waits
// for a write to be acknowledged before it fails: far above the few
// seconds it takes, far below "never" (a Cassandra session that lost its
// node once kept failing for minutes, until its process restarted).
const ResumeLimit = 90 * time.Second

// The drill's fixed settings (see the package's rules).
const (
	callers    = 32
	warmup     = 500 // acknowledged deposits before the server is stopped
	warmupMax  = time.Minute
	outage     = 15 * time.Second
	after      = 10 * time.Second // the load after writes resumed
	askTimeout = 15 * time.Second
	pause      = 50 * time.Millisecond // a caller's pause after a failed call
	probeEvery = 100 * time.Millisecond
	probeMax   = 5 * time.Second // one probe call's timeout
)

// Config is what differs between the stores under the drill.
type Config struct {
	// Journal and Snapshots are the store's, opened by the caller on the
	// server the drill stops.
	Journal   journal.Journal
	Snapshots snapshot.Store
	// Services runs `scripts/services CMD` on the store's server, for CMD
	// "down" and "up", and returns when it is done (for "up": when the
	// server answers); it fails the test itself when it cannot. See
	// [Services].
	Services func(cmd string)
	// Accounts is how many entities take deposits (default 200).
	Accounts int
	// Probe, when set, is a call to the store itself, beside the journal
	// front (whose circuit breaker lets a call through only every
	// ResetTimeout while open): once the server answers again the drill
	// calls it every 100 ms, each call with a timeout of 5 s, until it
	// returns nil, and reports when. It must succeed once before the
	// outage too. See [WriteProbe].
	Probe func(ctx context.Context) error
}

// Services returns a Config.Services that runs `script CMD service` (the
// path of scripts/services, relative to the test's package) in the test's
// environment: it acts on the server of ANNALS_SERVICES_DIR, or on the
// default one when that is not set.
func Services(t *testing.T, script, service string) func(cmd string) {
	return func(cmd string) {
		t.Helper()
		out, err := exec.CommandContext(t.Context(), script, cmd, service).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s %s: %v\n%s", script, cmd, service, err, out)
		}
	}
}

// WriteProbe returns a Config.Probe that writes one event, straight to j,
// under a persistence id of its own at each call ("Probe|outage-<start>-<n>",
// <start> the time of WriteProbe's call): a call whose outcome was unknown
// does not make the next one a conflict.
func WriteProbe(j journal.Journal) func(ctx context.Context) error {
	run, n := time.Now().UnixNano(), 0
	return func(ctx context.Context) error {
		n++
		pid := fmt.Sprintf("Probe|outage-%d-%d", run, n)
		res, err := j.Write(ctx, []journal.AtomicWrite{{PersistenceID: pid,
			Events: []journal.Repr{{PersistenceID: pid, SequenceNr: 1, Payload: []byte("probe"), SerializerID: 4, Manifest: "probe"}}}})
		if err != nil {
			return fmt.Errorf("probe write: %w", err)
		}
		if err := errors.Join(res...); err != nil {
			return fmt.Errorf("probe write refused: %w", err)
		}
		return nil
	}
}

// outcome is one call's: when it began, how long it took (since the
// drill's start), and its kind (see Classify).
type outcome struct {
	at, took time.Duration
	kind     string
}

func (o outcome) end() time.Duration { return o.at + o.took }

// Classify names what a caller of an entity met: "ok" calls were
// acknowledged; "restarting", "circuit open", "recovery failed",
// "conflict" (the write's sequence number was already stored: the entity
// stops, and its next command recovers it anew) and "rejected" (any other
// refusal of a write, which a retry would not cure) calls were never
// written; "call timeout", "store error" and "ask timeout" (the caller
// waited out its own timeout) calls may have been.
func Classify(err error) string {
	var restarting *entity.RestartingError
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, journal.ErrSequenceConflict):
		return "conflict"
	case errors.Is(err, journal.ErrRejected), errors.Is(err, journal.ErrInvalidArgument):
		return "rejected"
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

// Run runs the drill; it fails t when a guarantee is broken.
func Run(t *testing.T, cfg Config) {
	t.Helper()
	accounts := cfg.Accounts
	if accounts == 0 {
		accounts = 200
	}
	if cfg.Services == nil {
		t.Fatal("outagetest: Config.Services is not set")
	}
	ctx := t.Context()
	reg := serialization.NewRegistry()
	if err := bank.Register(reg); err != nil {
		t.Fatal(err)
	}
	front, err := engine.NewFront(cfg.Journal, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer front.Close()
	host := func() *entity.Host[bank.Command, bank.Event, bank.Account] {
		h, err := entity.NewHost(bank.Behavior(), entity.HostConfig{Journal: front, Snapshots: cfg.Snapshots, Registry: reg,
			Restart: &entity.Backoff{Min: 500 * time.Millisecond, Max: 5 * time.Second}, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	h := host()

	var (
		mu       sync.Mutex
		outcomes []outcome
		acked    = make([]atomic.Int64, accounts)
		unknown  = make([]atomic.Int64, accounts)
		okCount  atomic.Int64
		warm     = make(chan struct{}) // closed at the warmup-th acknowledged deposit
		upAt     atomic.Int64          // since the start, once the server answers again
		resumed  = make(chan struct{}) // closed at the first deposit acknowledged after upAt
		once     sync.Once
	)
	start := time.Now()
	load, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopLoad(); wg.Wait() }() // also when t fails early
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
				kind := Classify(err)
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
					select { // a caller's pause before retrying
					case <-time.After(pause):
					case <-load.Done():
					}
				}
			}
		})
	}
	// wait returns true when c is closed within limit (never, for a nil c).
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
	if !wait("warm-up", warm, warmupMax) {
		t.Fatalf("fewer than %d deposits acknowledged in %v before the outage", warmup, warmupMax)
	}
	if cfg.Probe != nil { // it works while the server is up (and is warm: a Kafka topic, say, is there)
		pctx, cancel := context.WithTimeout(ctx, probeMax)
		err := cfg.Probe(pctx)
		cancel()
		if err != nil {
			t.Fatalf("the store's probe fails before the outage: %v", err)
		}
	}
	stopAt := time.Since(start)
	cfg.Services("down")
	downAt := time.Since(start)
	wait("outage", nil, outage) // the server stays down this long
	upFrom := time.Since(start)
	cfg.Services("up")
	back := time.Since(start)
	upAt.Store(int64(back))
	storeBack := make(chan time.Duration, 1) // since back; -1 if it never answered
	if cfg.Probe != nil {
		go probe(load, cfg.Probe, back, start, storeBack)
	}
	ok := wait("resumption", resumed, ResumeLimit)
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
	slices.SortFunc(outcomes, func(a, b outcome) int { return int(a.end() - b.end()) })
	var firstFail, firstOpen, firstOK time.Duration = -1, -1, -1
	okAfter := 0
	for _, o := range outcomes {
		end := o.end()
		if o.kind != "ok" && end >= stopAt && firstFail < 0 {
			firstFail = end - stopAt
		}
		if o.kind == "circuit open" && end >= stopAt && firstOpen < 0 {
			firstOpen = end - stopAt
		}
		if o.kind == "ok" && end > back && firstOK < 0 {
			firstOK = end - back
		}
		if o.kind == "ok" && o.at >= back {
			okAfter++
		}
	}
	t.Logf("server stopped %.1fs after the start (down took %.1fs), answering again %.1fs later (up took %.1fs)",
		stopAt.Seconds(), (downAt - stopAt).Seconds(), (back - downAt).Seconds(), (back - upFrom).Seconds())
	t.Logf("first failed call %s after the stop began; first ErrCircuitOpen %s after it", since(firstFail), since(firstOpen))
	t.Logf("failed calls: %d, returned in p50 %v, p99 %v, max %v", len(failing), pct(failing, 0.5), pct(failing, 0.99), pct(failing, 1))
	t.Logf("outcomes: %v; acknowledged deposits started after the server answered: %d", counts, okAfter)
	if cfg.Probe != nil {
		if d := <-storeBack; d >= 0 {
			t.Logf("the store answered again (its probe succeeded) %.1fs after the server did", d.Seconds())
		} else {
			t.Logf("the store's probe never succeeded before the load ended")
		}
	}
	if ok {
		t.Logf("first acknowledged write %.1fs after the server answered again (the front's circuit breaker lets a call through every %v while open)",
			firstOK.Seconds(), engine.DefaultResetTimeout)
	}
	if counts["ask timeout"] > 0 {
		t.Errorf("%d callers waited out their %v timeout; want each told why", counts["ask timeout"], askTimeout)
	}
	if !ok {
		t.Fatalf("no write acknowledged %v after the server answered again", ResumeLimit)
	}

	// Every acknowledged deposit is there; beyond them, only deposits
	// whose outcome was unknown.
	check := host()
	defer check.Shutdown(ctx)
	var lost, ackedAll, unknownAll, unknownStored int64
	for a := range accounts {
		got, err := entity.Ask(ctx, check, fmt.Sprintf("a-%d", a), func(r entity.ReplyTo[int64]) bank.Command { return bank.GetBalance{Reply: r} })
		if err != nil {
			t.Fatalf("balance of a-%d: %v", a, err)
		}
		lo, u := acked[a].Load(), unknown[a].Load()
		ackedAll, unknownAll = ackedAll+lo, unknownAll+u
		unknownStored += min(max(got-lo, 0), u)
		if got < lo || got > lo+u {
			t.Errorf("a-%d holds %d deposits; %d were acknowledged and %d had an unknown outcome", a, got, lo, u)
			lost += max(lo-got, 0)
		}
	}
	t.Logf("acknowledged deposits: %d, lost: %d; with an unknown outcome: %d, of which stored: %d", ackedAll, lost, unknownAll, unknownStored)
}

// probe calls p every probeEvery from back (since start) until it returns
// nil or load ends, and sends how long after back it first succeeded, or
// -1.
func probe(load context.Context, p func(context.Context) error, back time.Duration, start time.Time, res chan<- time.Duration) {
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	for load.Err() == nil {
		pctx, cancel := context.WithTimeout(load, probeMax)
		err := p(pctx)
		cancel()
		if err == nil {
			res <- time.Since(start) - back
			return
		}
		select {
		case <-tick.C:
		case <-load.Done():
		}
	}
	res <- -1
}

// since formats a duration measured from an event, "none" for -1 (no
// such call).
func since(d time.Duration) string {
	if d < 0 {
		return "none"
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

func pct(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))].Round(time.Millisecond)
}
