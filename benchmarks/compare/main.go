// Command compare measures Annals beside other Go event-sourcing libraries
// and beside the raw database drivers doing the same work, on SQLite and
// PostgreSQL, the systems taking turns round by round. It prints one table:
// the median rate of each system, and the medians of the per-round ratios
// Annals / best other library and Annals / raw.
//
//	go run . -rounds 5                          # SQLite, and PostgreSQL when ANNALS_TEST_POSTGRES is set
//	ANNALS_COMPARE_EVENTS=5000000 go run .      # the catch-up read over 5,000,000 events
//
// It is its own module, so the libraries it compares never become
// dependencies of Annals.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// system is one event store as a user would use it, or the raw driver
// doing the same work. Every method is one run of a workload (Seed methods
// prepare the data outside the timing).
type system interface {
	Name() string
	// Writers: writers goroutines, each its own entity, each persisting
	// each events one at a time (the next after the previous is stored).
	Writers(ctx context.Context, writers, each int) error
	// SeedRecovery writes entities entities of events events each.
	SeedRecovery(ctx context.Context, entities, events int) error
	// RecoverSequential recovers every seeded entity, one after another,
	// from its events, and checks its state.
	RecoverSequential(ctx context.Context) error
	// RecoverConcurrent does the same with a goroutine per entity.
	RecoverConcurrent(ctx context.Context) error
	// SeedCatchUp writes events events of an entity type of their own.
	SeedCatchUp(ctx context.Context, events int) error
	// CatchUp reads and decodes every event of that type from the start,
	// in the store's order, and returns how many it read.
	CatchUp(ctx context.Context) (int, error)
	// WriteOne persists n events of one entity, one at a time.
	WriteOne(ctx context.Context, n int) error
	Close() error
}

// sizes are the workloads' sizes.
type sizes struct {
	writers, writerEvents int // workload 1
	entities, events      int // workloads 2 and 3
	catchUp               int // workload 4
	one                   int // workload 5, events per run
}

// workload is one measured thing: its run makes ops operations.
type workload struct {
	key, title string
	unit       string
	ops        func(sizes) int
	run        func(ctx context.Context, s system, z sizes) error
}

var workloads = []workload{
	{"writers", "1,000 writers at once", "events/s", func(z sizes) int { return z.writers * z.writerEvents },
		func(ctx context.Context, s system, z sizes) error { return s.Writers(ctx, z.writers, z.writerEvents) }},
	{"recover-seq", "recover 1,000 entities of 10 events, one after another", "entities/s", func(z sizes) int { return z.entities },
		func(ctx context.Context, s system, z sizes) error { return s.RecoverSequential(ctx) }},
	{"recover-par", "recover the same 1,000 at once", "entities/s", func(z sizes) int { return z.entities },
		func(ctx context.Context, s system, z sizes) error { return s.RecoverConcurrent(ctx) }},
	{"catchup", "read and decode the events of a type from the start", "events/s", func(z sizes) int { return z.catchUp },
		func(ctx context.Context, s system, z sizes) error {
			n, err := s.CatchUp(ctx)
			if err == nil && n != z.catchUp {
				err = fmt.Errorf("read %d events, want %d", n, z.catchUp)
			}
			return err
		}},
	{"one", "one entity writing one event at a time", "events/s", func(z sizes) int { return z.one },
		func(ctx context.Context, s system, z sizes) error { return s.WriteOne(ctx, z.one) }},
}

// sample is one run: wall time and this process's CPU time.
type sample struct {
	wall, cpu time.Duration
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func measure(ctx context.Context, w workload, s system, z sizes) (sample, error) {
	runtime.GC() // the previous run's garbage is not this run's cost
	start, startCPU := time.Now(), cpuTime()
	err := w.run(ctx, s, z)
	return sample{wall: time.Since(start), cpu: cpuTime() - startCPU}, err
}

func main() {
	rounds := flag.Int("rounds", 5, "rounds: each system runs each workload once per round, in turn")
	stores := flag.String("stores", "", "stores to run, comma separated: sqlite, postgres (default: sqlite, and postgres when ANNALS_TEST_POSTGRES is set)")
	only := flag.String("workloads", "", "workloads to run, comma separated (default all): "+keys())
	systems := flag.String("systems", "", "systems to run, comma separated (default all): annals, goes, raw")
	catchUp := flag.Int("events", 0, "events of the catch-up read (default 200,000; ANNALS_COMPARE_EVENTS sets it too)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the measured runs (not the seeding) to this file, with the store's name appended")
	smoke := flag.Bool("smoke", false, "tiny sizes, to check that every system runs every workload")
	flag.Parse()

	z := sizes{writers: 1000, writerEvents: 5, entities: 1000, events: 10, catchUp: 200_000, one: 300}
	if *smoke {
		z = sizes{writers: 20, writerEvents: 2, entities: 20, events: 10, catchUp: 2000, one: 5}
	}
	if v := os.Getenv("ANNALS_COMPARE_EVENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1000 {
			fatal(fmt.Errorf("ANNALS_COMPARE_EVENTS=%q: want a number of events, at least 1000", v))
		}
		z.catchUp = n
	}
	if *catchUp > 0 {
		z.catchUp = *catchUp
	}
	cfg := config{
		rounds:    *rounds,
		sizes:     z,
		workloads: pick(*only),
		systems:   list(*systems),
		pgURL:     os.Getenv("ANNALS_TEST_POSTGRES"),
		profile:   *cpuprofile,
	}
	cfg.stores = list(*stores)
	if len(cfg.stores) == 0 {
		cfg.stores = []string{"sqlite"}
		if cfg.pgURL != "" {
			cfg.stores = append(cfg.stores, "postgres")
		}
	}
	if err := run(context.Background(), os.Stdout, cfg); err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "compare:", err)
	os.Exit(1)
}

type config struct {
	rounds    int
	sizes     sizes
	workloads []workload
	systems   []string
	stores    []string
	pgURL     string
	profile   string
}

func keys() string {
	var k []string
	for _, w := range workloads {
		k = append(k, w.key)
	}
	return strings.Join(k, ", ")
}

func list(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func pick(s string) []workload {
	names := list(s)
	if len(names) == 0 {
		return workloads
	}
	var out []workload
	for _, w := range workloads {
		if slices.Contains(names, w.key) {
			out = append(out, w)
		}
	}
	return out
}

// open opens the systems that run on store, with a scratch database each.
func open(ctx context.Context, store string, cfg config) ([]system, error) {
	want := func(name string) bool { return len(cfg.systems) == 0 || slices.Contains(cfg.systems, name) }
	var out []system
	add := func(name string, f func() (system, error)) error {
		if !want(name) {
			return nil
		}
		s, err := f()
		if err != nil {
			return fmt.Errorf("%s on %s: %w", name, store, err)
		}
		out = append(out, s)
		return nil
	}
	var err error
	switch store {
	case "sqlite":
		dir, e := os.MkdirTemp("", "annals-compare-")
		if e != nil {
			return nil, e
		}
		err = errors2(
			add("annals", func() (system, error) { return openAnnalsSQLite(ctx, dir) }),
			add("raw", func() (system, error) { return openRawSQLite(ctx, dir) }),
		)
		out = append(out, &cleanup{func() error { return os.RemoveAll(dir) }})
	case "postgres":
		if cfg.pgURL == "" {
			return nil, fmt.Errorf("postgres: set ANNALS_TEST_POSTGRES to the server's URL")
		}
		err = errors2(
			add("annals", func() (system, error) { return openAnnalsPostgres(ctx, cfg.pgURL) }),
			add("goes", func() (system, error) { return openGoes(ctx, cfg.pgURL) }),
			add("raw", func() (system, error) { return openRawPostgres(ctx, cfg.pgURL) }),
		)
	default:
		return nil, fmt.Errorf("unknown store %q (sqlite, postgres)", store)
	}
	return out, err
}

func errors2(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// cleanup is a placeholder system that only closes something (the SQLite
// files' folder); it takes part in no workload.
type cleanup struct{ close func() error }

func (c *cleanup) Name() string                                 { return "" }
func (c *cleanup) Writers(context.Context, int, int) error      { return nil }
func (c *cleanup) SeedRecovery(context.Context, int, int) error { return nil }
func (c *cleanup) RecoverSequential(context.Context) error      { return nil }
func (c *cleanup) RecoverConcurrent(context.Context) error      { return nil }
func (c *cleanup) SeedCatchUp(context.Context, int) error       { return nil }
func (c *cleanup) CatchUp(context.Context) (int, error)         { return 0, nil }
func (c *cleanup) WriteOne(context.Context, int) error          { return nil }
func (c *cleanup) Close() error                                 { return c.close() }

// result holds one store's samples: workload → system → rounds.
type result map[string]map[string][]sample

func run(ctx context.Context, out io.Writer, cfg config) error {
	fmt.Fprintf(out, "rounds %d; %d writers × %d events; %d entities × %d events; catch-up %d events; one entity %d events\n",
		cfg.rounds, cfg.sizes.writers, cfg.sizes.writerEvents, cfg.sizes.entities, cfg.sizes.events, cfg.sizes.catchUp, cfg.sizes.one)
	results := map[string]result{}
	var order map[string][]string = map[string][]string{}
	for _, store := range cfg.stores {
		res, names, err := runStore(ctx, out, store, cfg)
		if err != nil {
			return err
		}
		results[store], order[store] = res, names
	}
	printTable(out, cfg, results, order)
	return nil
}

func runStore(ctx context.Context, log io.Writer, store string, cfg config) (result, []string, error) {
	all, err := open(ctx, store, cfg)
	defer func() {
		for _, s := range slices.Backward(all) {
			_ = s.Close()
		}
	}()
	if err != nil {
		return nil, nil, err
	}
	var systems []system
	var names []string
	for _, s := range all {
		if s.Name() != "" {
			systems = append(systems, s)
			names = append(names, s.Name())
		}
	}
	z := cfg.sizes
	need := func(key string) bool {
		return slices.ContainsFunc(cfg.workloads, func(w workload) bool { return w.key == key })
	}
	for _, s := range systems {
		start := time.Now()
		if need("recover-seq") || need("recover-par") {
			if err := s.SeedRecovery(ctx, z.entities, z.events); err != nil {
				return nil, nil, fmt.Errorf("%s on %s: seed recovery: %w", s.Name(), store, err)
			}
		}
		if need("catchup") {
			if err := s.SeedCatchUp(ctx, z.catchUp); err != nil {
				return nil, nil, fmt.Errorf("%s on %s: seed catch-up: %w", s.Name(), store, err)
			}
		}
		fmt.Fprintf(log, "%s: %s seeded in %v\n", store, s.Name(), time.Since(start).Round(time.Millisecond))
	}
	if cfg.profile != "" {
		f, err := os.Create(cfg.profile + "." + store)
		if err != nil {
			return nil, nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, nil, err
		}
		defer pprof.StopCPUProfile()
	}
	res := result{}
	for _, w := range cfg.workloads {
		res[w.key] = map[string][]sample{}
		// A first run of each system outside the timing (connections,
		// statements, live entities for the write workloads).
		for _, s := range systems {
			if err := w.run(ctx, s, z); err != nil {
				return nil, nil, fmt.Errorf("%s on %s, %s (warm-up): %w", s.Name(), store, w.key, err)
			}
		}
		for r := range cfg.rounds {
			for k := range systems {
				s := systems[(k+r)%len(systems)] // each round starts with the next system
				smp, err := measure(ctx, w, s, z)
				if err != nil {
					return nil, nil, fmt.Errorf("%s on %s, %s round %d: %w", s.Name(), store, w.key, r, err)
				}
				res[w.key][s.Name()] = append(res[w.key][s.Name()], smp)
			}
		}
		fmt.Fprintf(log, "%s: %s done\n", store, w.key)
	}
	return res, names, nil
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func printTable(out io.Writer, cfg config, results map[string]result, order map[string][]string) {
	fmt.Fprintln(out)
	fmt.Fprintf(out, "%-9s %-12s %-11s %12s %12s %12s %16s %16s %11s %11s %11s\n",
		"store", "workload", "unit", "annals", "goes", "raw", "annals/goes", "annals/raw", "annals cpu", "goes cpu", "raw cpu")
	for _, store := range cfg.stores {
		res := results[store]
		for _, w := range cfg.workloads {
			samples := res[w.key]
			ops := float64(w.ops(cfg.sizes))
			rate := func(name string) []float64 {
				var v []float64
				for _, s := range samples[name] {
					v = append(v, ops/s.wall.Seconds())
				}
				return v
			}
			cell := func(name string) string {
				if _, ok := samples[name]; !ok {
					return "–"
				}
				return fmt.Sprintf("%.0f", median(rate(name)))
			}
			ratio := func(a, b string) string {
				ra, rb := rate(a), rate(b)
				if len(ra) == 0 || len(rb) == 0 {
					return "–"
				}
				var v []float64
				for i := range min(len(ra), len(rb)) {
					v = append(v, ra[i]/rb[i])
				}
				return fmt.Sprintf("%.2f (%.2f–%.2f)", median(v), slices.Min(v), slices.Max(v))
			}
			cpu := func(name string) string {
				if _, ok := samples[name]; !ok {
					return "–"
				}
				var v []float64
				for _, s := range samples[name] {
					v = append(v, float64(s.cpu.Microseconds())/ops)
				}
				return fmt.Sprintf("%.1fµs", median(v))
			}
			fmt.Fprintf(out, "%-9s %-12s %-11s %12s %12s %12s %16s %16s %11s %11s %11s\n",
				store, w.key, w.unit, cell("annals"), cell("goes"), cell("raw"),
				ratio("annals", "goes"), ratio("annals", "raw"), cpu("annals"), cpu("goes"), cpu("raw"))
		}
	}
	fmt.Fprintln(out, "\nrates: medians over the rounds; ratios: median (min–max) of the per-round ratios; cpu: this process's CPU time per operation (getrusage), median")
	_ = order
}
