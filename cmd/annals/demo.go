package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/examples/bank"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/projection"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/memory"
	"github.com/annals-go/annals/store/sqlite"
)

// demoConfig is the demo's command line.
type demoConfig struct {
	Store       string // "sqlite:PATH" or "memory:"
	Accounts    int
	Ops         int
	Concurrency int
	Seed        uint64
}

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

// demoFlags returns the demo's flag set and the config it fills.
func demoFlags(output io.Writer) (*flag.FlagSet, *demoConfig) {
	cfg := &demoConfig{}
	fs := flag.NewFlagSet("annals demo", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.StringVar(&cfg.Store, "store", "sqlite:annals-demo.db", `store: "sqlite:PATH" (a file, created if missing) or "memory:"`)
	fs.IntVar(&cfg.Accounts, "accounts", 1000, "number of accounts (at least 2)")
	fs.IntVar(&cfg.Ops, "ops", 100_000, "number of random operations (deposits, withdrawals, transfers)")
	fs.IntVar(&cfg.Concurrency, "concurrency", 64, "client goroutines sending commands")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "random seed (default: time-based, printed)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: annals demo [flags]\n\n"+
			"Runs a bank of event-sourced accounts through one entity host: random\n"+
			"deposits, withdrawals and transfers; then shuts the host down, recovers\n"+
			"every account on a new host and verifies each balance against an\n"+
			"in-memory model. Run it twice: the second run continues the first.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs, cfg
}

// runDemo parses args and runs the demo.
func runDemo(ctx context.Context, stdout, stderr io.Writer, args []string) error {
	fs, cfg := demoFlags(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	seeded := false
	fs.Visit(func(f *flag.Flag) { seeded = seeded || f.Name == "seed" })
	if !seeded {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	var problem string
	switch {
	case fs.NArg() > 0:
		problem = fmt.Sprintf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	case cfg.Accounts < 2:
		problem = "--accounts must be at least 2"
	case cfg.Ops < 0:
		problem = "--ops must not be negative"
	case cfg.Concurrency < 1:
		problem = "--concurrency must be at least 1"
	}
	if problem != "" {
		fmt.Fprintf(stderr, "annals demo: %s\n", problem)
		fs.Usage()
		return errUsage
	}
	_, err := demo(ctx, *cfg, stdout, stderr)
	return err
}

// demoResult is what a demo run measured.
type demoResult struct {
	StartAccounts int   // accounts with events at the start
	StartEvents   int64 // events stored at the start
	StartTotal    int64 // total balance at the start
	FinalTotal    int64 // total balance verified at the end

	Ops, Accepted, Rejected, Failed int64
	Commands, Events                int64
	Elapsed                         time.Duration
	Latencies                       []time.Duration // sorted, one per Ask
	Recovery                        time.Duration
}

// A store the demo runs on.
type demoStore struct {
	journal   journal.Journal
	snapshots snapshot.Store
	close     func() error
	name      string
	sqlite    *sqlite.Store // nil on memory: no read model
}

func openStore(ctx context.Context, dsn string) (*demoStore, error) {
	switch {
	case dsn == "memory:" || dsn == "memory":
		s := memory.New()
		return &demoStore{s.Journal(), s.Snapshots(), s.Close, "memory (nothing survives the process)", nil}, nil
	case strings.HasPrefix(dsn, "sqlite:"):
		// One reader connection per read-model projection instance on top
		// of the default pool: an instance's source keeps a reader while
		// its hand-off buffer is full, and the instance itself needs one to
		// read its paused flag; with no reader left, both wait for good.
		s, err := sqlite.Open(ctx, dsn)
		if err != nil {
			return nil, err
		}
		return &demoStore{s.Journal(), s.Snapshots(), s.Close, "SQLite file " + s.Path(), s}, nil
	default:
		return nil, fmt.Errorf(`unknown store %q: use "sqlite:PATH" or "memory:"`, dsn)
	}
}

type accountHost = entity.Host[bank.Command, bank.Event, bank.Account]

// recoveries counts what the entities of one host recovered.
type recoveries struct{ accounts, withHistory, events atomic.Int64 }

// newHost starts a host of bank accounts whose recoveries are counted in rec.
func newHost(front journal.Journal, st *demoStore, reg *serialization.Registry, logger *slog.Logger, rec *recoveries) (*accountHost, error) {
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
	return entity.NewHost(b, entity.HostConfig{Journal: front, Snapshots: st.snapshots, Registry: reg, Logger: logger})
}

// demo runs the bank and verifies it.
func demo(ctx context.Context, cfg demoConfig, stdout, stderr io.Writer) (res demoResult, err error) {
	// Progress reports carry the read model's latest status (on SQLite).
	var rm *readModel
	progressOut := newProgress(stderr)
	progressOut.status = func(bar bool) string { return rm.progressStatus(bar) }
	stderr = progressOut.w // synchronized: entity logs and progress share it
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// Commands are never cancelled: a command whose Ask gave up is still
	// handled, and the model could not know its effect. The context only
	// stops issuing new operations.
	askCtx := context.WithoutCancel(ctx)

	reg := serialization.NewRegistry()
	if err := bank.Register(reg); err != nil {
		return res, err
	}
	st, err := openStore(ctx, cfg.Store)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, st.close()) }()
	front, err := engine.NewFront(st.journal, engine.Config{})
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, front.Close()) }()

	ids := make([]string, cfg.Accounts)
	for i := range ids {
		ids[i] = fmt.Sprintf("acct-%04d", i)
	}
	fmt.Fprintf(stdout, "annals demo: %s accounts, %s operations, %d clients, seed %d\n",
		num(int64(cfg.Accounts)), num(int64(cfg.Ops)), cfg.Concurrency, cfg.Seed)
	fmt.Fprintf(stdout, "store        %s\n", st.name)

	// The balance read model, kept by a projection from now until the end.
	if st.sqlite == nil {
		fmt.Fprintf(stdout, "read model   skipped: the balance projection needs the SQLite store\n")
	} else {
		if rm, err = startReadModel(ctx, st.sqlite, reg, logger); err != nil {
			return res, fmt.Errorf("starting the read model: %w", err)
		}
		defer func() { err = errors.Join(err, rm.stop()) }() // before the store closes
		fmt.Fprintf(stdout, "read model   table account_balance, kept exactly once by %d projection instances (slices %s)\n",
			len(rm.ranges), rangeList(rm.ranges))
	}

	// 1. Recover every account's balance; the model starts from it.
	var rec1 recoveries
	host, err := newHost(front, st, reg, logger, &rec1)
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
	model, err := balances(askCtx, host, ids, cfg.Concurrency)
	if err != nil {
		return res, fmt.Errorf("recovering the accounts: %w", err)
	}
	res.StartAccounts, res.StartEvents = int(rec1.withHistory.Load()), rec1.events.Load()
	for i := range model {
		res.StartTotal += model[i].Load()
	}
	if res.StartAccounts == 0 {
		fmt.Fprintf(stdout, "start        fresh store: %s empty accounts in %s, total balance %d cents\n",
			num(int64(cfg.Accounts)), dur(time.Since(t0)), res.StartTotal)
	} else {
		fmt.Fprintf(stdout, "start        continuing from %s events: %s accounts with history recovered in %s, total balance %d cents\n",
			num(res.StartEvents), num(int64(res.StartAccounts)), dur(time.Since(t0)), res.StartTotal)
	}

	// 2. The operations, while the read model is queried for the progress
	// reports.
	stopPolling := rm.poll(askCtx, readModelPoll)
	w := runOps(ctx, askCtx, host, ids, model, cfg, progressOut)
	stopPolling()
	caughtUp := rm.catchUp(time.Now(), readModelWait)
	res.Ops, res.Accepted, res.Rejected, res.Failed = w.ops, w.accepted, w.rejected, w.failed
	res.Commands, res.Events, res.Elapsed, res.Latencies = w.commands, w.events, w.elapsed, w.latencies
	if ctx.Err() != nil {
		fmt.Fprintf(stdout, "interrupted  after %s of %s operations; shutting down and verifying\n", num(w.ops), num(int64(cfg.Ops)))
	}
	secs := max(w.elapsed.Seconds(), 1e-9)
	fmt.Fprintf(stdout, "operations   %s in %s: %s accepted, %s rejected (overdraft), %s failed\n",
		num(w.ops), dur(w.elapsed), num(w.accepted), num(w.rejected), num(w.failed))
	fmt.Fprintf(stdout, "             deposits %s, withdrawals %s (%s rejected), transfers %s (%s rejected)\n",
		num(w.kinds[opDeposit]), num(w.kinds[opWithdraw]), num(w.kindRejected[opWithdraw]), num(w.kinds[opTransfer]), num(w.kindRejected[opTransfer]))
	fmt.Fprintf(stdout, "throughput   %s commands/s, %s events/s (%s commands, %s events persisted)\n",
		num(int64(float64(w.commands)/secs)), num(int64(float64(w.events)/secs)), num(w.commands), num(w.events))
	if len(w.latencies) > 0 {
		l := w.latencies
		fmt.Fprintf(stdout, "latency      Ask p50 %s  p90 %s  p99 %s  max %s\n",
			dur(percentile(l, 0.50)), dur(percentile(l, 0.90)), dur(percentile(l, 0.99)), dur(l[len(l)-1]))
	}
	for _, e := range w.errs {
		fmt.Fprintf(stdout, "failure      %v\n", e)
	}

	// 3. Graceful shutdown, then a new host on the same store.
	t0 = time.Now()
	sctx, cancel := context.WithTimeout(askCtx, shutdownTimeout)
	err = host.Shutdown(sctx)
	cancel()
	live = false
	if err != nil {
		return res, fmt.Errorf("shutting down the host: %w", err)
	}
	fmt.Fprintf(stdout, "shutdown     host stopped in %s\n", dur(time.Since(t0)))

	var rec2 recoveries
	host2, err := newHost(front, st, reg, logger, &rec2)
	if err != nil {
		return res, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(askCtx, shutdownTimeout)
		defer cancel()
		err = errors.Join(err, host2.Shutdown(sctx))
	}()
	t0 = time.Now()
	got, err := balances(askCtx, host2, ids, cfg.Concurrency)
	res.Recovery = time.Since(t0)
	if err != nil {
		return res, fmt.Errorf("recovering the accounts on a new host: %w", err)
	}
	fmt.Fprintf(stdout, "recovery     %s accounts on a new host in %s (%s events in the journal, snapshots every 100)\n",
		num(int64(cfg.Accounts)), dur(res.Recovery), num(rec2.events.Load()))

	// 4. Verify every balance against the model.
	var mismatches []string
	for i, id := range ids {
		want, have := model[i].Load(), got[i].Load()
		res.FinalTotal += have
		if want != have {
			mismatches = append(mismatches, fmt.Sprintf("%s: balance %d, model %d (off by %d)", id, have, want, have-want))
		}
	}
	if len(mismatches) > 0 {
		for i, m := range mismatches {
			if i == 20 {
				fmt.Fprintf(stdout, "MISMATCH     ... and %d more\n", len(mismatches)-i)
				break
			}
			fmt.Fprintf(stdout, "MISMATCH     %s\n", m)
		}
		return res, fmt.Errorf("%d of %d accounts differ from the model", len(mismatches), len(ids))
	}
	fmt.Fprintf(stdout, "verified %s accounts: OK (total balance %d cents)\n", num(int64(len(ids))), res.FinalTotal)

	// 5. The read model, once caught up, must equal the verified balances.
	if rm != nil {
		if err := rm.verify(askCtx, stdout, ids, got, caughtUp); err != nil {
			return res, err
		}
		if err := rm.stop(); err != nil {
			return res, fmt.Errorf("stopping the read model: %w", err)
		}
	}
	if w.failed > 0 {
		return res, fmt.Errorf("%d operations failed", w.failed)
	}
	return res, nil
}

// balances asks every account's balance through h, with at most workers
// Asks in flight, and returns them indexed like ids.
func balances(ctx context.Context, h *accountHost, ids []string, workers int) ([]atomic.Int64, error) {
	out := make([]atomic.Int64, len(ids))
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for range min(workers, len(ids)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(ids) {
					return
				}
				b, err := entity.Ask(ctx, h, ids[i], func(r entity.ReplyTo[int64]) bank.Command { return bank.GetBalance{Reply: r} })
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("%s: %w", ids[i], err))
					mu.Unlock()
					continue
				}
				out[i].Store(b)
			}
		})
	}
	wg.Wait()
	if len(errs) > 3 {
		errs = append(errs[:3], fmt.Errorf("and %d more", len(errs)-3))
	}
	return out, errors.Join(errs...)
}

type opKind int

const (
	opDeposit opKind = iota
	opWithdraw
	opTransfer
	nKinds
)

// opsResult is what runOps measured.
type opsResult struct {
	ops, accepted, rejected, failed int64
	kinds, kindRejected             [nKinds]int64
	commands, events                int64
	elapsed                         time.Duration
	latencies                       []time.Duration // sorted
	errs                            []error         // the first few failures
}

// runOps runs cfg.Ops random operations from cfg.Concurrency goroutines,
// adding the effect of every accepted command to model. It stops early when
// ctx ends; commands use askCtx.
func runOps(ctx, askCtx context.Context, h *accountHost, ids []string, model []atomic.Int64, cfg demoConfig, p *progress) opsResult {
	type worker struct {
		opsResult
		lat []time.Duration
	}
	workers := make([]worker, cfg.Concurrency)
	var next, done atomic.Int64
	total := int64(cfg.Ops)
	p.start(total, &done)
	t0 := time.Now()
	var wg sync.WaitGroup
	for wi := range workers {
		w := &workers[wi]
		rng := rand.New(rand.NewPCG(cfg.Seed, uint64(wi)))
		wg.Go(func() {
			ask := func(id string, mk func(entity.ReplyTo[int64]) bank.Command) error {
				t := time.Now()
				_, err := entity.Ask(askCtx, h, id, mk)
				w.lat = append(w.lat, time.Since(t))
				w.commands++
				return err
			}
			fail := func(err error) {
				w.failed++
				if len(w.errs) < 3 {
					w.errs = append(w.errs, err)
				}
			}
			for ctx.Err() == nil && next.Add(1) <= total {
				a := rng.IntN(len(ids))
				var kind opKind
				switch r := rng.IntN(100); {
				case r < pctDeposit:
					kind = opDeposit
				case r < pctDeposit+pctWithdraw:
					kind = opWithdraw
				default:
					kind = opTransfer
				}
				w.ops++
				w.kinds[kind]++
				switch kind {
				case opDeposit:
					amt := 1 + rng.Int64N(maxDeposit)
					if err := ask(ids[a], func(r entity.ReplyTo[int64]) bank.Command { return bank.Deposit{Amount: amt, Reply: r} }); err != nil {
						fail(fmt.Errorf("deposit %d to %s: %w", amt, ids[a], err))
						break
					}
					model[a].Add(amt)
					w.events++
					w.accepted++
				case opWithdraw:
					amt := 1 + rng.Int64N(maxWithdraw)
					err := ask(ids[a], func(r entity.ReplyTo[int64]) bank.Command { return bank.Withdraw{Amount: amt, Reply: r} })
					switch {
					case errors.Is(err, bank.ErrInsufficientFunds):
						w.rejected++
						w.kindRejected[kind]++
					case err != nil:
						fail(fmt.Errorf("withdrawal of %d from %s: %w", amt, ids[a], err))
					default:
						model[a].Add(-amt)
						w.events++
						w.accepted++
					}
				case opTransfer:
					b := rng.IntN(len(ids) - 1)
					if b >= a {
						b++
					}
					amt := 1 + rng.Int64N(maxTransfer)
					err := ask(ids[a], func(r entity.ReplyTo[int64]) bank.Command { return bank.Withdraw{Amount: amt, Reply: r} })
					switch {
					case errors.Is(err, bank.ErrInsufficientFunds):
						w.rejected++
						w.kindRejected[kind]++
					case err != nil:
						fail(fmt.Errorf("transfer of %d from %s: withdrawal: %w", amt, ids[a], err))
					default:
						model[a].Add(-amt)
						w.events++
						if err := ask(ids[b], func(r entity.ReplyTo[int64]) bank.Command { return bank.Deposit{Amount: amt, Reply: r} }); err != nil {
							fail(fmt.Errorf("transfer of %d from %s to %s: deposit: %w", amt, ids[a], ids[b], err))
							break
						}
						model[b].Add(amt)
						w.events++
						w.accepted++
					}
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	var res opsResult
	res.elapsed = time.Since(t0)
	p.stop()
	for i := range workers {
		w := &workers[i]
		res.ops += w.ops
		res.accepted += w.accepted
		res.rejected += w.rejected
		res.failed += w.failed
		res.commands += w.commands
		res.events += w.events
		for k := range nKinds {
			res.kinds[k] += w.kinds[k]
			res.kindRejected[k] += w.kindRejected[k]
		}
		res.latencies = append(res.latencies, w.lat...)
		if len(res.errs) < 5 {
			res.errs = append(res.errs, w.errs[:min(len(w.errs), 5-len(res.errs))]...)
		}
	}
	slices.Sort(res.latencies)
	return res
}

// percentile returns the q-quantile (0 < q ≤ 1) of sorted, by nearest rank.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// dur formats d with three significant digits or so.
func dur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	case d >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	default:
		return d.Round(time.Microsecond).String()
	}
}

// num formats n with thousands separators.
func num(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// The read model's timing: how often the progress reports' status is
// queried, and how long the demo waits, after the last operation, for the
// projection to catch up.
const (
	readModelInstances = 4
	readModelPoll      = 200 * time.Millisecond
	readModelCheck     = 5 * time.Millisecond
	readModelWait      = 2 * time.Minute
)

// readModel is the bank's balance read model during a demo on SQLite: one
// instance of the balance projection per slice range, running from before
// the operations until stop.
type readModel struct {
	store  *sqlite.Store
	ranges []annals.SliceRange
	ps     []*projection.Projection
	lags   []*rangeLag     // one per instance; used by one goroutine at a time
	ctx    context.Context // the projections' context, ended by stop
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error

	status atomic.Pointer[readModelStatus] // the latest poll, for progress reports
}

// readModelStatus is one look at the read model.
type readModelStatus struct {
	total  int64 // sum of the balances
	behind int64 // events stored and not yet applied
}

// startReadModel creates the read model's table if needed and starts the
// projection instances. They run until stop, not until ctx ends: after an
// interrupt the demo still verifies the read model.
func startReadModel(ctx context.Context, s *sqlite.Store, reg *serialization.Registry, logger *slog.Logger) (*readModel, error) {
	if err := bank.CreateReadModel(ctx, s); err != nil {
		return nil, err
	}
	ranges, err := annals.SliceRanges(readModelInstances)
	if err != nil {
		return nil, err
	}
	rm := &readModel{store: s, ranges: ranges, done: make(chan error, len(ranges))}
	for _, r := range ranges {
		p, err := bank.BalanceProjection(s, reg, r, projection.Config{Logger: logger})
		if err != nil {
			return nil, err
		}
		rm.ps = append(rm.ps, p)
		rm.lags = append(rm.lags, &rangeLag{p: p, r: r})
	}
	rm.ctx, rm.cancel = context.WithCancel(context.WithoutCancel(ctx))
	for _, p := range rm.ps {
		go func() { rm.done <- p.Run(rm.ctx) }()
	}
	return rm, nil
}

// stop stops the projections and waits for them; later calls return the
// first one's result.
func (rm *readModel) stop() error {
	rm.once.Do(func() {
		rm.cancel()
		for range rm.ps {
			if err := <-rm.done; !errors.Is(err, context.Canceled) {
				rm.err = errors.Join(rm.err, err)
			}
		}
	})
	return rm.err
}

// behind returns how many stored events the projections have not applied.
// Not safe for concurrent use.
func (rm *readModel) behind(ctx context.Context) (int64, error) {
	var n int64
	for _, l := range rm.lags {
		b, err := l.behind(ctx, rm.store.Queries())
		if err != nil {
			return 0, err
		}
		n += b
	}
	return n, nil
}

// rangeLag counts the events one projection instance has still to apply,
// as projection.Projection.Behind does, but reads each event of the range once: it keeps
// the orderings read and not yet below the instance's offset, so a look
// costs the events stored since the last one, not the whole lag.
type rangeLag struct {
	p       *projection.Projection
	r       annals.SliceRange
	read    query.Offset // events of the range read up to here
	pending []int64      // orderings read, above the offset at the last look
}

func (l *rangeLag) behind(ctx context.Context, q *sqlite.Queries) (int64, error) {
	o, err := l.p.Offset(ctx)
	if err != nil {
		return 0, err
	}
	if o.Kind != query.KindNone && o.Kind != query.KindSequence {
		return 0, fmt.Errorf("projection %s: offset %s is not a sequence", l.p.ID(), o)
	}
	i := 0
	for i < len(l.pending) && l.pending[i] <= o.Sequence {
		i++
	}
	l.pending = l.pending[i:]
	if o.Sequence > l.read.Sequence { // handled beyond what was read
		l.read = o
	}
	for env, err := range q.CurrentEventsBySlices(ctx, bank.EntityType, l.r.Min, l.r.Max, l.read) {
		if err != nil {
			return 0, err
		}
		l.pending = append(l.pending, env.Offset.Sequence)
		l.read = env.Offset
	}
	return int64(len(l.pending)), nil
}

// poll queries the read model's total and lag every interval, for the
// progress reports, until the returned stop is called. A nil read model
// does nothing.
func (rm *readModel) poll(ctx context.Context, interval time.Duration) (stop func()) {
	if rm == nil {
		return func() {}
	}
	quit, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			behind, err := rm.behind(ctx)
			if err == nil {
				var total int64
				if _, total, err = bank.ReadBalances(ctx, rm.store); err == nil {
					rm.status.Store(&readModelStatus{total: total, behind: behind})
				}
			}
			select {
			case <-quit:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(quit); <-ended }
}

// progressStatus is what a progress report adds about the read model: its
// total and lag as of the last poll, shorter on the bar. "" when there is
// no read model or no poll yet.
func (rm *readModel) progressStatus(bar bool) string {
	if rm == nil {
		return ""
	}
	st := rm.status.Load()
	if st == nil {
		return ""
	}
	if bar {
		return fmt.Sprintf("  model lag %s, total %d", num(st.behind), st.total)
	}
	return fmt.Sprintf("  read model total %d cents, %s events behind", st.total, num(st.behind))
}

// caughtUpResult is when the projections caught up, or why they did not.
type caughtUpResult struct {
	after time.Duration
	err   error
}

// catchUp looks at the lag every readModelCheck until it is 0 and sends the
// time since from, or an error after limit. Call it when no more events
// come: a lag of 0 is then final. A nil read model returns nil.
func (rm *readModel) catchUp(from time.Time, limit time.Duration) <-chan caughtUpResult {
	if rm == nil {
		return nil
	}
	out := make(chan caughtUpResult, 1)
	go func() {
		deadline := from.Add(limit)
		t := time.NewTicker(readModelCheck)
		defer t.Stop()
		for {
			behind, err := rm.behind(rm.ctx)
			switch {
			case err != nil:
				out <- caughtUpResult{err: err}
				return
			case behind == 0:
				out <- caughtUpResult{after: time.Since(from)}
				return
			case time.Now().After(deadline):
				out <- caughtUpResult{err: fmt.Errorf("still %s events behind %s after the last operation", num(behind), dur(limit))}
				return
			}
			select {
			case <-rm.ctx.Done():
				out <- caughtUpResult{err: rm.ctx.Err()}
				return
			case <-t.C:
			}
		}
	}()
	return out
}

// verify waits for caughtUp, then compares the read model with the verified
// balances (indexed like ids; an account without events has no row and
// counts as 0), prints the result and returns an error on any difference.
func (rm *readModel) verify(ctx context.Context, stdout io.Writer, ids []string, verified []atomic.Int64, caughtUp <-chan caughtUpResult) error {
	c := <-caughtUp
	if c.err != nil {
		return fmt.Errorf("read model: %w", c.err)
	}
	rows, _, err := bank.ReadBalances(ctx, rm.store)
	if err != nil {
		return err
	}
	var n, total int64
	var mismatches []string
	for i, id := range ids {
		have, ok := rows[id]
		if ok {
			n++
			total += have
			delete(rows, id)
		}
		if want := verified[i].Load(); have != want {
			mismatches = append(mismatches, fmt.Sprintf("%s: read model %d, model %d (off by %d)", id, have, want, have-want))
		}
	}
	if len(mismatches) > 0 {
		for i, m := range mismatches {
			if i == 20 {
				fmt.Fprintf(stdout, "MISMATCH     ... and %d more\n", len(mismatches)-i)
				break
			}
			fmt.Fprintf(stdout, "MISMATCH     %s\n", m)
		}
		return fmt.Errorf("read model: %d of %d accounts differ from the model", len(mismatches), len(ids))
	}
	others := ""
	if len(rows) > 0 { // accounts of earlier runs with more accounts
		others = fmt.Sprintf(" (and %s accounts this run does not use)", num(int64(len(rows))))
	}
	fmt.Fprintf(stdout, "read model: %s accounts, total %d cents, caught up in %s: equals the model%s\n",
		num(n), total, dur(c.after), others)
	return nil
}

// rangeList formats slice ranges as "0-255, 256-511".
func rangeList(rs []annals.SliceRange) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = r.String()
	}
	return strings.Join(s, ", ")
}
