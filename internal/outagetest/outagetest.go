// Package outagetest is the outage drill every store with a server runs:
// a host of bank accounts (entities with restart backoff, a journal front
// with its default settings) takes deposits from 32 callers while the
// store's server, started by scripts/services, is stopped for 15 s and
// started again. The drill reports what the callers met (how fast they
// were failed, what callers of restarting entities were told, when writes
// resumed) and checks the guarantees: no caller waited out its own
// timeout, writes resumed in the same process, and each account holds
// every acknowledged deposit plus at most those whose outcome was
// unknown. It stops a server, so a store's drill runs only when asked.
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

// Config names the store under the drill.
type Config struct {
	// Journal and Snapshots are the store's, opened by the caller on the
	// server the drill stops.
	Journal   journal.Journal
	Snapshots snapshot.Store
	// Services is the path of scripts/services, Service the name of the
	// server it stops and starts (it acts on the instance
	// ANNALS_SERVICES_DIR names, as the test's environment sets it).
	Services, Service string
	// Accounts is how many entities take deposits (default 200).
	Accounts int
	// AfterUp, when set, runs once the server is back (before the 45 s in
	// which writes must resume).
	AfterUp func()
}

// Run runs the drill; it fails t when a guarantee is broken.
func Run(t *testing.T, cfg Config) {
	t.Helper()
	accounts, callers, outage, askTimeout := cfg.Accounts, 32, 15*time.Second, 15*time.Second
	if accounts == 0 {
		accounts = 200
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

	type outcome struct {
		at, took time.Duration // since the start; the call's duration
		kind     string
	}
	var (
		mu       sync.Mutex
		outcomes []outcome
		acked    = make([]atomic.Int64, accounts)
		unknown  = make([]atomic.Int64, accounts)
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
	services := func(cmd string) time.Duration {
		out, err := exec.CommandContext(ctx, cfg.Services, cmd, cfg.Service).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s %s: %v\n%s", cfg.Services, cmd, cfg.Service, err, out)
		}
		return time.Since(start)
	}
	time.Sleep(3 * time.Second)
	stopAt := time.Since(start)
	downAt := services("down")
	time.Sleep(outage)
	upAt := services("up")
	if cfg.AfterUp != nil {
		cfg.AfterUp()
	}
	time.Sleep(45 * time.Second)
	stopLoad()
	wg.Wait()
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	first := func(kind string, after time.Duration) (time.Duration, bool) {
		for _, o := range outcomes {
			if o.kind == kind && o.at >= after {
				return o.at + o.took - after, true
			}
		}
		return 0, false
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
	var firstFail time.Duration
	for _, o := range outcomes {
		if o.kind != "ok" && o.at+o.took >= stopAt {
			firstFail = o.at + o.took - stopAt
			break
		}
	}
	var resumed time.Duration
	for _, o := range outcomes {
		if o.kind == "ok" && o.at >= upAt {
			resumed = o.at + o.took - upAt
			break
		}
	}
	open, _ := first("circuit open", stopAt)
	t.Logf("server stopped %.1fs after the start (down took %.1fs), back %.1fs later", stopAt.Seconds(), (downAt - stopAt).Seconds(), (upAt - downAt).Seconds())
	t.Logf("first failed call %.2fs after the stop began; first ErrCircuitOpen %.2fs after it", firstFail.Seconds(), open.Seconds())
	t.Logf("failed calls: %d, returned in p50 %v, p99 %v, max %v", len(failing), pct(failing, 0.5), pct(failing, 0.99), pct(failing, 1))
	t.Logf("outcomes: %v", counts)
	t.Logf("first acknowledged write %.1fs after the server was back", resumed.Seconds())
	if counts["ask timeout"] > 0 {
		t.Errorf("%d callers waited out their %v timeout; want each told why", counts["ask timeout"], askTimeout)
	}
	if resumed == 0 {
		t.Errorf("no write acknowledged after the server came back")
	}

	// Every acknowledged deposit is there; beyond them, only deposits
	// whose outcome was unknown.
	check := host()
	defer check.Shutdown(ctx)
	for a := range accounts {
		got, err := entity.Ask(ctx, check, fmt.Sprintf("a-%d", a), func(r entity.ReplyTo[int64]) bank.Command { return bank.GetBalance{Reply: r} })
		if err != nil {
			t.Fatalf("balance of a-%d: %v", a, err)
		}
		if lo, hi := acked[a].Load(), acked[a].Load()+unknown[a].Load(); got < lo || got > hi {
			t.Errorf("a-%d holds %d deposits; %d were acknowledged and %d had an unknown outcome", a, got, lo, unknown[a].Load())
		}
	}
}

func pct(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))].Round(time.Millisecond)
}
