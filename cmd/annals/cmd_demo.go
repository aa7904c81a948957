package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/annals-go/annals/cmd/annals/internal/demo"
	"github.com/annals-go/annals/cmd/annals/internal/stores"
)

// demoStore is the demo's own store, used unless --store names another.
// The demo ignores ANNALS_STORE: that names the user's store, which the
// demo's bank must not write into.
const demoStore = "sqlite:annals-demo.db"

func demoCommand() *command {
	return &command{
		name: "demo", summary: "run a bank of event-sourced accounts, restart it and verify every balance",
		help: `Runs a bank of event-sourced accounts through one entity host: random
deposits, withdrawals and transfers; then shuts the host down, recovers
every account on a new host and verifies each balance against an
in-memory model. Meanwhile a balance read model is kept exactly once by
projections, in the store's own transactions (on SQLite, PostgreSQL and
memory:; skipped, with the reason, on other stores), and verified at the
end against the balances. Run it twice on one store: the second run
continues the first.

The store is the demo's own SQLite file, ./annals-demo.db (created if
missing), unless --store names another; the demo writes its accounts,
snapshots, projection offsets and read model there. It ignores
$ANNALS_STORE, so that it never writes into the store the other commands
use; the first line of its output names the store it runs on.

An interrupt (Ctrl-C) stops issuing operations; the run still shuts down,
recovers and verifies what was done, then says "interrupted" and exits
130.

--metrics ADDR serves the demo's live figures in the Prometheus text
format at http://ADDR/metrics while it runs (package otelannals: the
journal's writes, events and call durations, live entities, recoveries,
snapshots, the projections' lag and offsets saved, ...).`,
		examples: []string{
			"annals demo",
			"annals demo --store memory: --ops 1000000",
			"annals demo --store postgres://annals@localhost/annals --concurrency 256",
			"annals demo --metrics :9464   # and meanwhile: curl -s localhost:9464/metrics | grep ^annals_",
		},
		maxArgs: -1, // checked by the demo, to name the extra arguments
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			d := &demoCmd{}
			d.flags(fs)
			return func(e *env, args []string) error {
				_, err := d.run(e, args)
				return err
			}
		},
	}
}

// demoCmd is one run of annals demo: its flags, and the printing of the
// demo's reports.
type demoCmd struct {
	fs        *flag.FlagSet
	store     string
	cfg       demo.Config
	metrics   string // --metrics: the address to serve them on
	telemetry bool   // --telemetry: the adapter without the server
	spans     bool   // --telemetry-spans: the adapter, spans sampled and dropped, without the server

	// reported, when set (tests), is called after each report is printed,
	// with the URL of the metrics ("" when not served).
	reported func(r demo.Report, metricsURL string)

	e           *env
	progress    *progress
	metricsURL  string
	interrupted bool // the operations were interrupted: nothing is reported OK
}

// flags registers the demo's flags on fs.
func (d *demoCmd) flags(fs *flag.FlagSet) {
	d.fs = fs
	fs.StringVar(&d.store, "store", "", "the store `URL`: sqlite:PATH, postgres://USER@HOST/DB, memory: ... (default "+demoStore+"; $ANNALS_STORE is not used)")
	fs.IntVar(&d.cfg.Accounts, "accounts", 1000, "`N` accounts, at least 2")
	fs.IntVar(&d.cfg.Ops, "ops", 100_000, "`N` random operations (deposits, withdrawals, transfers)")
	fs.IntVar(&d.cfg.Concurrency, "concurrency", 64, "`N` client goroutines sending commands")
	fs.Uint64Var(&d.cfg.Seed, "seed", 0, "random `SEED` (default: time-based, printed)")
	fs.StringVar(&d.metrics, "metrics", "", "serve live metrics in the Prometheus text format at http://`ADDR`/metrics while the demo runs (such as :9464)")
	fs.BoolVar(&d.telemetry, "telemetry", false, "(hidden) run with the OpenTelemetry adapter on the Prometheus exporter, without serving it (to measure its cost)")
	fs.BoolVar(&d.spans, "telemetry-spans", false, "(hidden) as --telemetry, with a span per command, persist and store call, sampled and dropped")
}

// run checks the command line, opens the store and runs the demo,
// printing its reports.
func (d *demoCmd) run(e *env, args []string) (res demo.Result, err error) {
	d.e = e
	if len(args) > 0 {
		return demo.Result{}, usagef("unexpected arguments: %s", strings.Join(args, " "))
	}
	if err := d.cfg.Validate(); err != nil {
		return demo.Result{}, usagef("%v", err)
	}
	seeded := false
	d.fs.Visit(func(f *flag.Flag) { seeded = seeded || f.Name == "seed" })
	if !seeded {
		d.cfg.Seed = uint64(time.Now().UnixNano())
	}
	url, own := d.store, d.store == ""
	if own {
		url = demoStore
	}
	st, err := e.mux.Open(e.ctx, url, stores.Create)
	if err != nil {
		return demo.Result{}, err
	}
	defer func() { err = errors.Join(err, st.Close()) }()
	if d.metrics != "" || d.telemetry || d.spans {
		m, err := startDemoMetrics(d.metrics, d.spans)
		if err != nil {
			return demo.Result{}, err
		}
		defer func() { err = errors.Join(err, m.close()) }()
		d.cfg.Hooks = append(d.cfg.Hooks, m.tel)
		d.metricsURL = m.url
	}

	d.progress = newProgress(e.stderr)
	// Entity logs and progress reports share stderr, synchronized.
	d.cfg.Logger = slog.New(slog.NewTextHandler(d.progress.w, &slog.HandlerOptions{Level: slog.LevelWarn}))
	d.cfg.Report = d.print
	fmt.Fprintf(e.stdout, "annals demo: %s accounts, %s operations, %d clients, seed %d\n",
		num(int64(d.cfg.Accounts)), num(int64(d.cfg.Ops)), d.cfg.Concurrency, d.cfg.Seed)
	switch {
	case !own:
		fmt.Fprintf(e.stdout, "store        %s, from --store\n", storeText(st))
	case e.getenv("ANNALS_STORE") != "":
		fmt.Fprintf(e.stdout, "store        %s: the demo's own; it does not use $ANNALS_STORE (--store URL picks a store)\n", storeText(st))
	default:
		fmt.Fprintf(e.stdout, "store        %s: the demo's own (--store URL picks another)\n", storeText(st))
	}
	switch {
	case d.metricsURL != "":
		fmt.Fprintf(e.stdout, "metrics      %s (Prometheus text format, while the demo runs)\n", d.metricsURL)
	case d.spans:
		fmt.Fprintf(e.stdout, "metrics      OpenTelemetry adapter on the Prometheus exporter, not served; spans sampled and dropped\n")
	case d.telemetry:
		fmt.Fprintf(e.stdout, "metrics      OpenTelemetry adapter on the Prometheus exporter, not served\n")
	}
	return demo.Run(e.ctx, st, d.cfg)
}

// storeText names the store for the demo's output.
func storeText(st *stores.Store) string {
	switch st.Kind {
	case "sqlite":
		if abs, err := filepath.Abs(st.Where); err == nil {
			return "SQLite file " + abs
		}
		return "SQLite file " + st.Where
	case "postgres":
		return "PostgreSQL " + st.Where
	case "memory":
		return st.Where
	}
	return st.Kind + " " + st.Where
}

// print prints one of the demo's reports.
func (d *demoCmd) print(r demo.Report) {
	d.printReport(r)
	if d.reported != nil {
		d.reported(r, d.metricsURL)
	}
}

func (d *demoCmd) printReport(r demo.Report) {
	out := d.e.stdout
	switch r := r.(type) {
	case demo.ReadModelSkipped:
		fmt.Fprintf(out, "read model   skipped: %s\n", r.Reason)
	case demo.ReadModelStarted:
		fmt.Fprintf(out, "read model   %s, kept exactly once by %d projection instances (slices %s)\n",
			r.Table, len(r.Ranges), rangeList(r.Ranges))
	case demo.Started:
		if r.WithHistory == 0 {
			fmt.Fprintf(out, "start        fresh store: %s empty accounts in %s, total balance %d cents\n",
				num(int64(r.Accounts)), dur(r.Took), r.Total)
		} else {
			fmt.Fprintf(out, "start        continuing from %s events: %s accounts with history recovered in %s, total balance %d cents\n",
				num(r.Events), num(int64(r.WithHistory)), dur(r.Took), r.Total)
		}
	case demo.OpsStarted:
		d.progress.status = func(bar bool) string {
			st, ok := r.ReadModel()
			switch {
			case !ok:
				return ""
			case bar:
				return fmt.Sprintf("  model lag %s, total %d", num(st.Behind), st.Total)
			}
			return fmt.Sprintf("  read model total %d cents, %s events behind", st.Total, num(st.Behind))
		}
		d.progress.start(r.Total, r.Done)
	case demo.OpsDone:
		d.progress.stop()
		d.printOps(out, r)
	case demo.HostStopped:
		fmt.Fprintf(out, "shutdown     host stopped in %s\n", dur(r.Took))
	case demo.Recovered:
		fmt.Fprintf(out, "recovery     %s accounts on a new host in %s (%s events in the journal, snapshots every 100)\n",
			num(int64(r.Accounts)), dur(r.Took), num(r.Events))
	case demo.Verified:
		if printMismatches(out, r.Mismatches, "balance") {
			return
		}
		if d.interrupted {
			// The balances are right, but the run did not do what it was
			// asked: no OK.
			fmt.Fprintf(out, "verified %s accounts after the interrupt: each balance equals the model (total balance %d cents)\n", num(int64(r.Accounts)), r.Total)
			return
		}
		fmt.Fprintf(out, "verified %s accounts: OK (total balance %d cents)\n", num(int64(r.Accounts)), r.Total)
	case demo.ReadModelVerified:
		if printMismatches(out, r.Mismatches, "read model") {
			return
		}
		others := ""
		if r.Others > 0 {
			others = fmt.Sprintf(" (and %s accounts this run does not use)", num(int64(r.Others)))
		}
		fmt.Fprintf(out, "read model: %s accounts, total %d cents, caught up in %s: equals the model%s\n",
			num(r.Accounts), r.Total, dur(r.CaughtUp), others)
	}
}

func (d *demoCmd) printOps(out io.Writer, r demo.OpsDone) {
	if r.Interrupted {
		d.interrupted = true
		fmt.Fprintf(out, "interrupted  after %s of %s operations; shutting down and verifying\n", num(r.Ops), num(int64(d.cfg.Ops)))
	}
	fmt.Fprintf(out, "operations   %s in %s: %s accepted, %s rejected (overdraft), %s failed\n",
		num(r.Ops), dur(r.Elapsed), num(r.Accepted), num(r.Rejected), num(r.Failed))
	fmt.Fprintf(out, "             deposits %s, withdrawals %s (%s rejected), transfers %s (%s rejected)\n",
		num(r.Deposits), num(r.Withdrawals), num(r.WithdrawalsRejected), num(r.Transfers), num(r.TransfersRejected))
	secs := max(r.Elapsed.Seconds(), 1e-9)
	fmt.Fprintf(out, "throughput   %s commands/s, %s events/s (%s commands, %s events persisted)\n",
		num(int64(float64(r.Commands)/secs)), num(int64(float64(r.Events)/secs)), num(r.Commands), num(r.Events))
	if l := r.Latencies; len(l) > 0 {
		fmt.Fprintf(out, "latency      Ask p50 %s  p90 %s  p99 %s  max %s\n",
			dur(percentile(l, 0.50)), dur(percentile(l, 0.90)), dur(percentile(l, 0.99)), dur(l[len(l)-1]))
	}
	for _, err := range r.Errors {
		fmt.Fprintf(out, "failure      %v\n", err)
	}
}

// printMismatches prints up to 20 mismatches, what naming the side that
// differs from the model; it reports whether there were any.
func printMismatches(out io.Writer, ms []demo.Mismatch, what string) bool {
	for i, m := range ms {
		if i == 20 {
			fmt.Fprintf(out, "MISMATCH     ... and %d more\n", len(ms)-i)
			break
		}
		fmt.Fprintf(out, "MISMATCH     %s: %s %d, model %d (off by %d)\n", m.ID, what, m.Have, m.Want, m.Have-m.Want)
	}
	return len(ms) > 0
}
