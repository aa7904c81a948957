package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/durable"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/storetest"
)

func checkCommand() *command {
	return &command{
		name: "check", summary: "run the compliance kit against a live store",
		help: `Runs the compliance kit (package storetest: every rule of the journal,
snapshot, query and durable-state contracts, and the queries over one
write of 1,000 ids where the store offers events by tag or by slices, as
the store plugins' own tests run them)
against the store --store names, for operators who bring their own
database: it checks the store as deployed, on your server, file system and
settings. The kit writes about 150,000 events (100,000 of them in one id,
which --short leaves out), so run it when a few seconds of extra load are
welcome. Where they go:

  SQLite      a scratch file beside yours (same directory, so the same
              disk and file system), removed at the end: your file is
              opened only to check that it exists with the current schema,
              and keeps its size. (annals verify checks the file itself.)
  PostgreSQL, Kafka
              your schema or topics, under persistence ids of the kit's
              own (entity types starting with "Kit" or "T" followed by hex
              digits, unique per run), every id removed at the end
              (events, snapshots and durable states); your ids are neither
              read nor changed. The space is not given back at once:
              PostgreSQL reuses the deleted rows' space after (auto)vacuum
              without shrinking the tables; on Kafka the kit's records
              (its appends, the Marks of its reads, its Purges) stay in
              topics named after its entity types (PREFIXKit..., and
              PREFIXT... topics new each run) until their retention ends
              or you delete them.
  Cassandra   your keyspace, under the kit's own ids as above, which stay:
              the store cannot remove ids (the command says how many).
  memory:     the process's own store, gone with it.

If the command is killed, the kit's ids stay (apart from yours: their
entity types are unique to the run), and so does an SQLite scratch file
(.annals-scratch-*.db beside yours).

Prints each suite's rules passed, failed and skipped, with the kit's
messages for failures on stderr; exit code 1 when a rule fails, 130 when
interrupted.

--json prints {"store", "scratch" (the scratch store's URL, "" when the
kit ran in the store itself), "ok", "timed_out", "interrupted", "suites":
[{"suite", "rules", "passed", "failed": [rule names], "skipped": [rule
names]}], "removed_ids"}.`,
		examples: []string{
			"annals check --store sqlite:./annals.db",
			"annals check --store postgres://annals@db.internal/annals --short",
			"annals check --store sqlite:./annals.db --run 'journal/.*Delete' -v",
		},
		maxArgs: 0,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			store, asJSON := storeFlag(fs), jsonFlag(fs)
			short := fs.Bool("short", false, "leave out the rule that replays 100,000 events")
			run := fs.String("run", "", "run only the rules matching this `REGEXP` (such as journal/Delete or queries)")
			verbose := fs.Bool("v", false, "print every rule's result and log, as go test -v")
			timeout := fs.Duration("timeout", 10*time.Minute, "fail if the kit takes longer than `DURATION`")
			return func(e *env, _ []string) error {
				// Check refuses a --run it cannot compile, before any rule.
				if _, err := storetest.Check(e.ctx, storetest.Store{}, storetest.Options{Run: *run}); err != nil {
					return usagef("--run: %v", err)
				}
				url, err := e.storeURL(*store)
				if err != nil {
					return err
				}
				s, err := e.mux.Open(e.ctx, url, stores.Existing)
				if err != nil {
					return err
				}
				k := &kit{e: e, url: url, runURL: url, where: s.Where, s: s, written: map[string]bool{}, states: map[string]bool{}}
				if s.Kind == "sqlite" {
					// An SQLite file never gives back the space the kit's
					// rows took: the kit works in a scratch file beside it.
					if err := k.useScratch(); err != nil {
						return err
					}
				}
				return k.run(checkOptions{run: *run, short: *short, verbose: *verbose, asJSON: *asJSON, timeout: *timeout})
			}
		},
	}
}

// checkOptions are check's flags.
type checkOptions struct {
	run            string
	short, verbose bool
	asJSON         bool
	timeout        time.Duration
}

// checkStopWait is how long check waits, once --timeout or an interrupt
// has ended the kit's context, for rules that do not end with it; past
// it, the summary reports them failed (and the command exits).
const checkStopWait = 2 * time.Minute

// errCheckFailed is check's failure; the summary has said what failed.
var errCheckFailed = errors.New("the store failed the compliance kit")

// checkResult is what the kit's run found.
type checkResult struct {
	Store   string
	Scratch string // the scratch store's URL, redacted; "" when the kit ran in the store
	Where   string
	OK      bool
	// TimedOut: --timeout ended the kit; the rules that were running
	// failed.
	TimedOut   bool
	Suites     []suiteJSON
	RemovedIDs int
	Cleaned    bool
	// Interrupted: the command was interrupted; the rules that were
	// running failed, and the run is not OK whatever it found.
	Interrupted bool
}

// print prints the summary: a table, or with asJSON {"store", "scratch",
// "ok", "timed_out", "interrupted", "suites", "removed_ids"}.
func (res checkResult) print(out io.Writer, asJSON bool) error {
	if asJSON {
		return writeJSON(out, struct {
			Store       string      `json:"store"`
			Scratch     string      `json:"scratch"`
			OK          bool        `json:"ok"`
			TimedOut    bool        `json:"timed_out"`
			Interrupted bool        `json:"interrupted"`
			Suites      []suiteJSON `json:"suites"`
			RemovedIDs  int         `json:"removed_ids"`
		}{res.Store, res.Scratch, res.OK, res.TimedOut, res.Interrupted, res.Suites, res.RemovedIDs})
	}
	tw := table(out, "SUITE", "RULES", "PASSED", "FAILED", "SKIPPED")
	for _, sj := range res.Suites {
		row(tw, sj.Suite, sj.Rules, sj.Passed, len(sj.Failed), len(sj.Skipped))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, sj := range res.Suites {
		for _, r := range sj.Failed {
			fmt.Fprintf(out, "failed: %s/%s\n", sj.Suite, r)
		}
		for _, r := range sj.Skipped {
			fmt.Fprintf(out, "skipped: %s/%s\n", sj.Suite, r)
		}
	}
	switch {
	case res.Cleaned && res.Scratch != "":
		fmt.Fprintf(out, "removed the kit's %s persistence ids with the scratch store they were in\n", num(int64(res.RemovedIDs)))
	case res.Cleaned:
		fmt.Fprintf(out, "removed the kit's %s persistence ids\n", num(int64(res.RemovedIDs)))
	}
	switch {
	case res.Interrupted:
		fmt.Fprintf(out, "check INTERRUPTED: %s (the kit did not finish; the rules that were running failed)\n", res.Where)
	case res.TimedOut:
		fmt.Fprintf(out, "check TIMED OUT: %s (--timeout ended the kit's store calls; the rules that were running failed)\n", res.Where)
	case res.OK:
		fmt.Fprintf(out, "check passed: %s\n", res.Where)
	default:
		fmt.Fprintf(out, "check FAILED: %s (the kit's messages are above, on stderr)\n", res.Where)
	}
	return nil
}

// kit runs the compliance kit (storetest.Check) in this process against
// the store check opened (or a scratch store beside it), noting every id
// it writes so that they can be removed afterwards.
type kit struct {
	e      *env
	url    string // the store --store names
	runURL string // the store the kit runs in: url, or the scratch store's
	where  string // the store --store names, for people
	s      *stores.Store
	// scratch, when set, removes the scratch store the kit runs in.
	scratch func() error

	mu      sync.Mutex
	written map[string]bool // ids the kit wrote or deleted
	states  map[string]bool // ids whose durable state the kit wrote
}

// suiteJSON is the JSON shape of one suite's results.
type suiteJSON struct {
	Suite   string   `json:"suite"`
	Rules   int      `json:"rules"`
	Passed  int      `json:"passed"`
	Failed  []string `json:"failed"`
	Skipped []string `json:"skipped"`
}

// run runs the suites the store offers, bounded by --timeout and ended by
// an interrupt (the first; a second one ends the program), removes the
// ids the kit wrote and prints the summary. The rules' messages go to
// stderr as go test prints them, under names starting with "Check/": the
// failures', or with -v every rule's result.
func (k *kit) run(o checkOptions) (err error) {
	closed := false
	closeStore := func() error {
		if closed {
			return nil
		}
		closed = true
		err := k.s.Close()
		if k.scratch != nil {
			if rerr := k.scratch(); rerr != nil {
				err = errors.Join(err, fmt.Errorf("removing the scratch store %s: %w", stores.Redact(k.runURL), rerr))
			}
		}
		return err
	}
	defer func() { err = errors.Join(err, closeStore()) }()
	ctx, cancel := context.WithTimeout(k.e.ctx, o.timeout)
	defer cancel()
	ks := storetest.Store{
		Journal:   &recordingJournal{Journal: k.s.Journal, k: k},
		Snapshots: &recordingSnapshots{Store: k.s.Snapshots, k: k},
		Queries:   k.s.Queries,
		Open:      k.another,
		// The facts of the store's kind.
		GlobalOrdering:  k.s.GlobalOrdering,
		StoreTimestamps: k.s.KitStoreTimestamps,
		IDsInStoreOrder: k.s.IDsInStoreOrder,
		MaxPayloadSize:  k.s.MaxPayloadSize,
		Exceptions:      k.s.KitExceptions,
	}
	if k.s.Durable != nil {
		ks.Durable = k.recordingDurable(k.s.Durable, false)
	}
	rep, err := storetest.Check(ctx, ks, storetest.Options{
		Run: o.run, Short: o.short, StopWait: checkStopWait,
		Progress: func(r storetest.Result) { k.progress(r, o.verbose) },
	})
	if err != nil {
		return usagef("--run: %v", err)
	}
	removed, cleanErr := k.cleanUp()
	cleanErr = errors.Join(cleanErr, closeStore())
	if cleanErr != nil {
		fmt.Fprintf(k.e.stderr, "annals check: removing the kit's persistence ids: %v\n", cleanErr)
	}
	res := k.summary(rep)
	res.Cleaned = cleanErr == nil
	res.RemovedIDs = removed
	// An interrupt ends the run, whatever the rules found by then: it
	// is not a pass.
	res.Interrupted = k.e.ctx.Err() != nil
	res.OK = res.OK && cleanErr == nil && !res.Interrupted
	res.TimedOut = !res.OK && !res.Interrupted && errors.Is(ctx.Err(), context.DeadlineExceeded)
	if err := res.print(k.e.stdout, o.asJSON); err != nil {
		return err
	}
	if res.Interrupted {
		return errInterrupted
	}
	if res.TimedOut {
		return fmt.Errorf("%w: timed out after %v", errCheckFailed, o.timeout)
	}
	if !res.OK {
		return errCheckFailed
	}
	return nil
}

// progress prints a rule's result as go test does: a failure with its
// messages; with verbose, every result.
func (k *kit) progress(r storetest.Result, verbose bool) {
	if !r.Failed && !verbose {
		return
	}
	outcome := "PASS"
	switch {
	case r.Failed:
		outcome = "FAIL"
	case r.Skipped:
		outcome = "SKIP"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "--- %s: Check/%s (%.2fs)\n", outcome, r.Name, r.Duration.Seconds())
	for _, m := range r.Messages {
		fmt.Fprintf(&b, "    %s\n", strings.ReplaceAll(m, "\n", "\n        "))
	}
	_, _ = io.WriteString(k.e.stderr, b.String())
}

// summary counts the rules of each suite (the results named suite/rule)
// by outcome.
func (k *kit) summary(rep storetest.Report) checkResult {
	res := checkResult{Store: stores.Redact(k.url), Where: k.where, OK: !rep.Failed(), Suites: []suiteJSON{}}
	if k.scratch != nil {
		res.Scratch = stores.Redact(k.runURL)
		res.Where += " (the kit ran in a scratch store beside it: " + k.s.Where + ", removed)"
	}
	suites := map[string]*suiteJSON{}
	for _, r := range rep.Results {
		suite, rule, ok := strings.Cut(r.Name, "/")
		if !ok || strings.Contains(rule, "/") {
			continue // a suite, or a rule's subtest
		}
		sj := suites[suite]
		if sj == nil {
			sj = &suiteJSON{Suite: suite, Failed: []string{}, Skipped: []string{}}
			suites[suite] = sj
		}
		sj.Rules++
		switch {
		case r.Failed:
			sj.Failed = append(sj.Failed, rule)
		case r.Skipped:
			sj.Skipped = append(sj.Skipped, rule)
		default:
			sj.Passed++
		}
	}
	for _, name := range []string{"journal", "snapshots", "recovery", "queries", "batch-queries", "offsets", "durable", "membership", "fenced-writes"} {
		if sj := suites[name]; sj != nil {
			slices.Sort(sj.Failed)
			slices.Sort(sj.Skipped)
			res.Suites = append(res.Suites, *sj)
		}
	}
	return res
}

func (k *kit) wrote(pid string) {
	if journal.CheckPersistenceID("write", pid) != nil {
		return // refused by every store: nothing to remove
	}
	k.mu.Lock()
	k.written[pid] = true
	k.mu.Unlock()
}

// cleanUp removes every id the kit wrote, where the store can.
func (k *kit) cleanUp() (int, error) {
	k.mu.Lock()
	ids := make([]string, 0, len(k.written))
	for pid := range k.written {
		ids = append(ids, pid)
	}
	k.mu.Unlock()
	slices.Sort(ids)
	p, ok := k.s.Admin.(admin.Purger)
	switch {
	case k.s.Kind == "memory", k.scratch != nil:
		return len(ids), nil // gone with the process, or with the scratch store
	case !ok:
		fmt.Fprintf(k.e.stderr, "annals check: the %s store cannot remove ids; the kit's %d ids remain (entity types starting with Kit and T)\n", k.s.Kind, len(ids))
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(k.e.ctx), 5*time.Minute)
	defer cancel()
	if err := k.removeStates(ctx); err != nil {
		return 0, err
	}
	for chunk := range slices.Chunk(ids, 500) {
		if err := p.Purge(ctx, chunk); err != nil {
			return 0, fmt.Errorf("purging: %w", err)
		}
	}
	return len(ids), nil
}

// useScratch makes the kit run in a scratch store beside the one check
// opened (a new file in the same directory, for SQLite), closing that
// one: check removes the scratch store at the end.
func (k *kit) useScratch() error {
	if err := k.s.Close(); err != nil {
		return err
	}
	scratch, remove, err := k.e.mux.Scratch(k.e.ctx, k.url)
	if err != nil {
		return err
	}
	s, err := k.e.mux.Open(k.e.ctx, scratch, stores.Create)
	if err != nil {
		return errors.Join(fmt.Errorf("scratch store: %w", err), remove())
	}
	k.s, k.runURL, k.scratch = s, scratch, remove
	return nil
}

// another opens the store again (Store.Open), for a rule that closes
// what it is given; the kit closes it when the rule ends.
func (k *kit) another(ctx context.Context) (storetest.Store, error) {
	s, err := k.e.mux.Open(context.WithoutCancel(ctx), k.runURL, stores.Existing)
	if err != nil {
		return storetest.Store{}, fmt.Errorf("opening the store again: %w", err)
	}
	o := storetest.Store{
		Journal:   &recordingJournal{Journal: s.Journal, k: k, closes: true},
		Snapshots: &recordingSnapshots{Store: s.Snapshots, k: k, closes: true},
		Close:     s.Close,
	}
	if s.Durable != nil {
		o.Durable = k.recordingDurable(s.Durable, true)
	}
	return o, nil
}

// recordingJournal notes every id the kit writes or deletes. The kit's
// calls end with the context Check gives each rule, which ends with
// --timeout or an interrupt.
type recordingJournal struct {
	journal.Journal
	k      *kit
	closes bool // Close closes the journal (one opened for the rule)
}

func (j *recordingJournal) Write(ctx context.Context, ws []journal.AtomicWrite) ([]error, error) {
	for _, w := range ws {
		j.k.wrote(w.PersistenceID)
		for _, e := range w.Events {
			j.k.wrote(e.PersistenceID)
		}
	}
	return j.Journal.Write(ctx, ws)
}

func (j *recordingJournal) DeleteTo(ctx context.Context, pid string, to int64) error {
	j.k.wrote(pid)
	return j.Journal.DeleteTo(ctx, pid, to)
}

// Close does not close the shared store (the kit may ask), only one
// opened for the rule.
func (j *recordingJournal) Close() error {
	if j.closes {
		return j.Journal.Close()
	}
	return nil
}

// recordingSnapshots notes every id the kit saves or deletes snapshots of.
type recordingSnapshots struct {
	snapshot.Store
	k      *kit
	closes bool // Close closes the store (one opened for the rule)
}

func (s *recordingSnapshots) Save(ctx context.Context, snap snapshot.Snapshot) error {
	s.k.wrote(snap.Metadata.PersistenceID)
	return s.Store.Save(ctx, snap)
}

func (s *recordingSnapshots) Delete(ctx context.Context, m snapshot.Metadata) error {
	s.k.wrote(m.PersistenceID)
	return s.Store.Delete(ctx, m)
}

func (s *recordingSnapshots) DeleteMatching(ctx context.Context, pid string, c snapshot.Criteria) error {
	s.k.wrote(pid)
	return s.Store.DeleteMatching(ctx, pid, c)
}

func (s *recordingSnapshots) Close() error {
	if s.closes {
		return s.Store.Close()
	}
	return nil
}

// removeStates deletes the durable state of every id the kit wrote one of.
func (k *kit) removeStates(ctx context.Context) error {
	k.mu.Lock()
	ids := slices.Sorted(maps.Keys(k.states))
	k.mu.Unlock()
	for _, pid := range ids {
		for {
			o, found, err := k.s.Durable.Get(ctx, pid)
			if err != nil {
				return fmt.Errorf("removing durable state: %w", err)
			}
			if !found {
				break
			}
			err = k.s.Durable.Delete(ctx, pid, o.Revision+1)
			if err == nil {
				break
			}
			if !errors.Is(err, durable.ErrRevisionConflict) {
				return fmt.Errorf("removing durable state: %w", err)
			}
			// A rule's writer was still at it: read the revision again.
		}
	}
	return nil
}

// wroteState notes an id whose durable state the kit writes.
func (k *kit) wroteState(pid string) {
	if pid == "" {
		return // refused by every store
	}
	k.mu.Lock()
	k.states[pid] = true
	k.mu.Unlock()
}

// durableChanges is a durable store's change queries, both of which a
// store offers or none (the kit's wrappers pass both on).
type durableChanges interface {
	query.DurableStateChangesBySlicesQuery
	query.DurableStateChangesByTagQuery
}

// recordingDurable returns s, noting every id the kit writes the state of,
// with the capabilities s has (durable.Batcher, the change queries), so
// the suite runs the rules s offers. closes: Close closes s (a store
// opened for the rule).
func (k *kit) recordingDurable(s durable.Store, closes bool) durable.Store {
	r := &recordingStates{Store: s, k: k, closes: closes}
	b, batcher := s.(durable.Batcher)
	c, changes := s.(durableChanges)
	switch {
	case batcher && changes:
		return struct {
			recordingBatcher
			durableChanges
		}{recordingBatcher{r, b}, c}
	case batcher:
		return recordingBatcher{r, b}
	case changes:
		return struct {
			*recordingStates
			durableChanges
		}{r, c}
	}
	return r
}

// recordingStates notes every id the kit upserts.
type recordingStates struct {
	durable.Store
	k      *kit
	closes bool
}

func (d *recordingStates) Upsert(ctx context.Context, o durable.Object) error {
	d.k.wroteState(o.PersistenceID)
	return d.Store.Upsert(ctx, o)
}

func (d *recordingStates) Close() error {
	if d.closes {
		return d.Store.Close()
	}
	return nil
}

// recordingBatcher notes every id the kit applies an upsert of.
type recordingBatcher struct {
	*recordingStates
	b durable.Batcher
}

func (d recordingBatcher) Apply(ctx context.Context, changes []durable.Change) ([]error, error) {
	for _, c := range changes {
		if !c.Delete {
			d.k.wroteState(c.Object.PersistenceID)
		}
	}
	return d.b.Apply(ctx, changes)
}
