// Package demo runs the annals demo: a bank of event-sourced accounts
// (package examples/bank) on any store the annals command opens. Random
// deposits, withdrawals and transfers go through one entity host while a
// balance read model is kept by projections; then the host shuts down, a
// new host recovers every account, and each balance is verified against
// an in-memory model, and the read model against the verified balances.
//
// The package prints nothing: it tells the caller what happened through
// Config.Report, one value per step, and returns a Result. The annals
// command formats both.
package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/examples/bank"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/serialization"
)

// Operation mix and amounts (cents). Withdrawals may ask for more than a
// deposit brings, so overdrafts keep happening as balances grow.
const (
	pctDeposit  = 40 // then withdrawals
	pctWithdraw = 30 // then transfers, the rest
	maxDeposit  = 10_000
	maxWithdraw = 20_000
	maxTransfer = 10_000
)

// shutdownTimeout bounds the graceful shutdown of a host.
const shutdownTimeout = time.Minute

// Config is one run of the demo.
type Config struct {
	// Accounts is the number of accounts (at least 2), named acct-0000,
	// acct-0001, ...
	Accounts int
	// Ops is the number of random operations (not negative).
	Ops int
	// Concurrency is the number of client goroutines (at least 1).
	Concurrency int
	// Seed seeds the operations: one seed, one sequence of operations per
	// client.
	Seed uint64
	// Hooks are given to the journal front (engine.Config.Hooks), to both
	// entity hosts (entity.HostConfig.Hooks) and to the read model's
	// projections (projection.Config.Hooks); each is called for the hook
	// interfaces it implements (an *otelannals.Telemetry implements them
	// all).
	Hooks []any
	// Logger receives the entities' and projections' logs (nil: none).
	Logger *slog.Logger
	// Report, when set, is called with each step's Report, in order, on the
	// goroutine that called Run; the run waits for it to return.
	Report func(Report)
}

// Report is what Run tells Config.Report: one of ReadModelStarted,
// ReadModelSkipped, Started, OpsStarted, OpsDone, HostStopped, Recovered,
// Verified, ReadModelVerified.
type Report interface{ isReport() }

// ReadModelStarted: the balance read model is kept by one projection
// instance per slice range, from now until Run returns.
type ReadModelStarted struct {
	// Table describes where the balances are kept ("table
	// account_balance", ...).
	Table string
	// Ranges are the instances' slice ranges.
	Ranges []annals.SliceRange
}

// ReadModelSkipped: the store offers no read model; Reason says why.
type ReadModelSkipped struct{ Reason string }

// Started: every account's balance was recovered on the first host.
type Started struct {
	Accounts    int           // accounts recovered
	WithHistory int           // of them, accounts with events (0: a fresh store)
	Events      int64         // events stored for them
	Total       int64         // total balance, cents
	Took        time.Duration // the recovery of all of them
}

// OpsStarted: the operations start. Done counts the operations finished so
// far, out of Total; ReadModel returns the read model's latest status
// (false when there is none yet, or no read model). Both may be read from
// any goroutine until OpsDone.
type OpsStarted struct {
	Total     int64
	Done      *atomic.Int64
	ReadModel func() (ReadModelStatus, bool)
}

// ReadModelStatus is one look at the read model during the operations.
type ReadModelStatus struct {
	Total  int64 // sum of its balances
	Behind int64 // events stored and not yet applied
}

// OpsDone: the operations ended (all of them, or Interrupted when the
// context of Run ended first). The entities are still live and the read
// model still running: this is the moment to look at live figures.
type OpsDone struct {
	Operations
	Interrupted bool
}

// Operations is what the operations did and measured.
type Operations struct {
	Ops, Accepted, Rejected, Failed  int64
	Deposits, Withdrawals, Transfers int64
	// WithdrawalsRejected and TransfersRejected are the overdrafts refused.
	WithdrawalsRejected, TransfersRejected int64
	// Commands are the Asks sent (a transfer is two); Events the events
	// persisted.
	Commands, Events int64
	Elapsed          time.Duration
	Latencies        []time.Duration // one per command, sorted
	Errors           []error         // the first few failures
}

// HostStopped: the first host shut down gracefully.
type HostStopped struct{ Took time.Duration }

// Recovered: every account was recovered on a new host.
type Recovered struct {
	Accounts int
	Events   int64 // events in their journals
	Took     time.Duration
}

// Verified: the recovered balances were compared with the model; the run
// fails when Mismatches is not empty.
type Verified struct {
	Accounts   int
	Total      int64 // total of the recovered balances
	Mismatches []Mismatch
}

// Mismatch is an account whose balance differs from the model.
type Mismatch struct {
	ID         string
	Have, Want int64 // Have: recovered or read model; Want: the model
}

// ReadModelVerified: the read model caught up and was compared with the
// verified balances; the run fails when Mismatches is not empty.
type ReadModelVerified struct {
	Accounts   int64 // accounts of this run with a row
	Total      int64 // their total
	CaughtUp   time.Duration
	Others     int // rows of accounts this run does not use (earlier runs with more accounts)
	Mismatches []Mismatch
}

func (ReadModelStarted) isReport()  {}
func (ReadModelSkipped) isReport()  {}
func (Started) isReport()           {}
func (OpsStarted) isReport()        {}
func (OpsDone) isReport()           {}
func (HostStopped) isReport()       {}
func (Recovered) isReport()         {}
func (Verified) isReport()          {}
func (ReadModelVerified) isReport() {}

// Result is what a run measured.
type Result struct {
	StartAccounts int   // accounts with events at the start
	StartEvents   int64 // events stored at the start
	StartTotal    int64 // total balance at the start
	FinalTotal    int64 // total balance verified at the end
	Operations
	Recovery time.Duration // the second host's recovery of every account
}

// Validate reports a configuration Run refuses.
func (c Config) Validate() error {
	switch {
	case c.Accounts < 2:
		return errors.New("--accounts must be at least 2")
	case c.Ops < 0:
		return errors.New("--ops must not be negative")
	case c.Concurrency < 1:
		return errors.New("--concurrency must be at least 1")
	}
	return nil
}

// AccountID returns the name of account i.
func AccountID(i int) string { return fmt.Sprintf("acct-%04d", i) }

type accountHost = entity.Host[bank.Command, bank.Event, bank.Account]

// recoveries counts what the entities of one host recovered.
type recoveries struct{ accounts, withHistory, events atomic.Int64 }

// runner is one run.
type runner struct {
	cfg    Config
	st     *stores.Store
	reg    *serialization.Registry
	front  journal.Journal
	logger *slog.Logger
	ids    []string
}

func (r *runner) report(rep Report) {
	if r.cfg.Report != nil {
		r.cfg.Report(rep)
	}
}

// newHost starts a host of bank accounts whose recoveries are counted in rec.
func (r *runner) newHost(rec *recoveries) (*accountHost, error) {
	b := bank.Behavior()
	prev := b.OnRecovered
	b.OnRecovered = func(id string, a bank.Account, seq int64) {
		if prev != nil {
			prev(id, a, seq)
		}
		rec.accounts.Add(1)
		if seq > 0 {
			rec.withHistory.Add(1)
			rec.events.Add(seq)
		}
	}
	return entity.NewHost(b, entity.HostConfig{Journal: r.front, Snapshots: r.st.Snapshots, Registry: r.reg, Logger: r.logger, Hooks: r.cfg.Hooks})
}

// Run runs the demo on st, which the caller opened and closes after Run
// returns.
//
// Rules:
//   - When ctx ends, no new operation starts; the run still shuts the host
//     down, recovers and verifies. Commands are never cancelled: a command
//     whose Ask gave up would still be handled, and the model could not
//     know its effect.
//   - The read model runs when st offers events by slices and a
//     transactional offset store of SQLite, PostgreSQL or memory;
//     otherwise a ReadModelSkipped says why and the rest runs.
//   - The error is non-nil when a balance or the read model differs from
//     the model, when an operation failed, or when a step could not run.
func Run(ctx context.Context, st *stores.Store, cfg Config) (res Result, err error) {
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	askCtx := context.WithoutCancel(ctx)
	r := &runner{cfg: cfg, st: st, reg: serialization.NewRegistry(), logger: cfg.Logger}
	if r.logger == nil {
		r.logger = slog.New(slog.DiscardHandler)
	}
	if err := bank.Register(r.reg); err != nil {
		return res, err
	}
	front, err := engine.NewFront(st.Journal, engine.Config{Hooks: cfg.Hooks})
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, front.Close()) }()
	r.front = front
	r.ids = make([]string, cfg.Accounts)
	for i := range r.ids {
		r.ids[i] = AccountID(i)
	}

	// The balance read model, kept by projections from now until the end.
	rm, reason, err := startReadModel(ctx, st, r.reg, r.logger, cfg.Hooks)
	if err != nil {
		return res, fmt.Errorf("starting the read model: %w", err)
	}
	if rm == nil {
		r.report(ReadModelSkipped{Reason: reason})
	} else {
		defer func() { err = errors.Join(err, rm.stop()) }() // before the store closes
		r.report(ReadModelStarted{Table: rm.table.describe(), Ranges: rm.ranges})
	}

	// 1. Recover every account's balance; the model starts from it.
	var rec1 recoveries
	host, err := r.newHost(&rec1)
	if err != nil {
		return res, err
	}
	live := true
	defer func() {
		if live {
			sctx, cancel := context.WithTimeout(askCtx, shutdownTimeout)
			defer cancel()
			err = errors.Join(err, host.Shutdown(sctx))
		}
	}()
	t0 := time.Now()
	model, err := balances(askCtx, host, r.ids, cfg.Concurrency)
	if err != nil {
		return res, fmt.Errorf("recovering the accounts: %w", err)
	}
	res.StartAccounts, res.StartEvents = int(rec1.withHistory.Load()), rec1.events.Load()
	for i := range model {
		res.StartTotal += model[i].Load()
	}
	r.report(Started{Accounts: cfg.Accounts, WithHistory: res.StartAccounts, Events: res.StartEvents, Total: res.StartTotal, Took: time.Since(t0)})

	// 2. The operations, while the read model is polled for its status.
	var done atomic.Int64
	stopPolling := rm.poll(askCtx, readModelPoll)
	r.report(OpsStarted{Total: int64(cfg.Ops), Done: &done, ReadModel: rm.latest})
	ops := r.runOps(ctx, askCtx, host, model, &done)
	stopPolling()
	caughtUp := rm.catchUp(time.Now(), readModelWait)
	res.Operations = ops
	r.report(OpsDone{Operations: ops, Interrupted: ctx.Err() != nil})

	// 3. Graceful shutdown, then a new host on the same store.
	t0 = time.Now()
	sctx, cancel := context.WithTimeout(askCtx, shutdownTimeout)
	err = host.Shutdown(sctx)
	cancel()
	live = false
	if err != nil {
		return res, fmt.Errorf("shutting down the host: %w", err)
	}
	r.report(HostStopped{Took: time.Since(t0)})

	var rec2 recoveries
	host2, err := r.newHost(&rec2)
	if err != nil {
		return res, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(askCtx, shutdownTimeout)
		defer cancel()
		err = errors.Join(err, host2.Shutdown(sctx))
	}()
	t0 = time.Now()
	got, err := balances(askCtx, host2, r.ids, cfg.Concurrency)
	res.Recovery = time.Since(t0)
	if err != nil {
		return res, fmt.Errorf("recovering the accounts on a new host: %w", err)
	}
	r.report(Recovered{Accounts: cfg.Accounts, Events: rec2.events.Load(), Took: res.Recovery})

	// 4. Verify every balance against the model.
	v := Verified{Accounts: len(r.ids)}
	for i, id := range r.ids {
		want, have := model[i].Load(), got[i].Load()
		v.Total += have
		if want != have {
			v.Mismatches = append(v.Mismatches, Mismatch{ID: id, Have: have, Want: want})
		}
	}
	res.FinalTotal = v.Total
	r.report(v)
	if len(v.Mismatches) > 0 {
		return res, fmt.Errorf("%d of %d accounts differ from the model", len(v.Mismatches), len(r.ids))
	}

	// 5. The read model, once caught up, must equal the verified balances.
	if rm != nil {
		rv, err := rm.verify(askCtx, r.ids, got, caughtUp)
		if err != nil {
			return res, err
		}
		r.report(rv)
		if len(rv.Mismatches) > 0 {
			return res, fmt.Errorf("read model: %d of %d accounts differ from the model", len(rv.Mismatches), len(r.ids))
		}
		if err := rm.stop(); err != nil {
			return res, fmt.Errorf("stopping the read model: %w", err)
		}
	}
	if ops.Failed > 0 {
		return res, fmt.Errorf("%d operations failed", ops.Failed)
	}
	return res, nil
}
