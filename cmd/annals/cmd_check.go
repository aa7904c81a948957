package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"iter"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/storetest"
)

func checkCommand() *command {
	return &command{
		name: "check", summary: "run the compliance kit against a live store",
		help: `Runs the compliance kit (package storetest: every rule of the journal,
snapshot and query contracts, as the store plugins' own tests run it)
against the store --store names, for operators who bring their own
database: it checks the store as deployed, on your server, file system and
settings. The kit writes under persistence ids of its own (entity types
starting with "Kit" or "T" followed by hex digits, unique per run) and
removes every id it wrote afterwards; your ids are neither read nor
changed. The kit writes about 150,000 events (100,000 of them in one id,
which --short leaves out), so run it when a few seconds of extra load are
welcome; an SQLite file keeps the space they took, for later use. If the
command is killed, the kit's ids stay (apart from yours: their entity
types are unique to the run).

Prints each suite's rules passed, failed and skipped, with the kit's
messages for failures on stderr; exit code 1 when a rule fails.

--json prints {"store", "ok", "suites": [{"suite", "rules", "passed",
"failed": [rule names], "skipped": [rule names]}], "removed_ids"}.`,
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
				if *run != "" {
					if _, err := regexp.Compile(*run); err != nil {
						return usagef("--run: %v", err)
					}
				}
				url, err := e.storeURL(*store)
				if err != nil {
					return err
				}
				s, err := e.mux.Open(e.ctx, url, stores.Existing)
				if err != nil {
					return err
				}
				results := e.getenv(checkChildEnv)
				if results == "" {
					// The store opens: the child runs the kit on it.
					s.Close()
					return runCheckChild(e, url, *asJSON, *timeout)
				}
				k := &kit{e: e, url: url, s: s, short: *short, results: results}
				return k.main(*run, *verbose, *timeout)
			}
		},
	}
}

// checkChildEnv, set to the path of a results file, makes check the child
// that runs the kit.
const checkChildEnv = "ANNALS_CHECK_RESULTS"

// runCheckChild runs the kit in a child process (this program, with the
// same arguments): the testing package's runner, which the kit needs,
// ends its process and prints a bare PASS or FAIL. The child's output (the
// kit's messages) goes to stderr without those lines, then the summary the
// child left in a results file is printed. The child is killed if it runs
// 3 minutes past the timeout.
func runCheckChild(e *env, url string, asJSON bool, timeout time.Duration) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this program to run the kit: %w", err)
	}
	dir, err := os.MkdirTemp("", "annals-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	results := filepath.Join(dir, "results.json")
	ctx, cancel := context.WithTimeout(e.ctx, timeout+3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, os.Args[1:]...)
	cmd.Env = append(os.Environ(), checkChildEnv+"="+results)
	// The child runs in a process group of its own: an interrupt of this
	// program is forwarded to it once, and it ends its store calls, removes
	// what the kit wrote (within 5 minutes) and writes its results.
	ownGroup(cmd)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 6 * time.Minute
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = w, w
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if line := sc.Text(); line != "PASS" && line != "FAIL" {
				fmt.Fprintln(e.stderr, line)
			}
		}
		_, _ = io.Copy(e.stderr, r) // the rest, after a line too long to scan
	}()
	runErr := cmd.Run()
	w.Close()
	<-copied
	r.Close()
	data, err := os.ReadFile(results)
	if err != nil {
		return fmt.Errorf("the kit's run ended without its results (%v)", runErr)
	}
	var res checkResult
	if err := json.Unmarshal(data, &res); err != nil {
		return fmt.Errorf("the kit's results: %w", err)
	}
	if err := res.print(e.stdout, asJSON); err != nil {
		return err
	}
	if res.TimedOut {
		return fmt.Errorf("%w: timed out after %v", errCheckFailed, timeout)
	}
	if !res.OK {
		return errCheckFailed
	}
	return nil
}

// errCheckFailed is check's failure; the summary has said what failed.
var errCheckFailed = errors.New("the store failed the compliance kit")

// checkResult is what the kit's run found, as the child hands it over.
type checkResult struct {
	Store      string      `json:"store"`
	Where      string      `json:"where"`
	OK         bool        `json:"ok"`
	TimedOut   bool        `json:"timed_out"`
	Suites     []suiteJSON `json:"suites"`
	RemovedIDs int         `json:"removed_ids"`
	Cleaned    bool        `json:"cleaned"`
	// Interrupted: the command was interrupted; the rules that were
	// running failed.
	Interrupted bool `json:"interrupted"`
}

// print prints the summary: a table, or with asJSON {"store", "ok",
// "timed_out", "suites", "removed_ids"}.
func (res checkResult) print(out io.Writer, asJSON bool) error {
	if asJSON {
		return writeJSON(out, struct {
			Store      string      `json:"store"`
			OK         bool        `json:"ok"`
			TimedOut   bool        `json:"timed_out"`
			Suites     []suiteJSON `json:"suites"`
			RemovedIDs int         `json:"removed_ids"`
		}{res.Store, res.OK, res.TimedOut, res.Suites, res.RemovedIDs})
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
	if res.Cleaned {
		fmt.Fprintf(out, "removed the kit's %s persistence ids\n", num(int64(res.RemovedIDs)))
	}
	switch {
	case res.Interrupted:
		fmt.Fprintf(out, "check INTERRUPTED: %s (the rules that were running failed)\n", res.Where)
	case res.TimedOut:
		fmt.Fprintf(out, "check TIMED OUT: %s (--timeout ended the kit's store calls; the rules that were running failed)\n", res.Where)
	case res.OK:
		fmt.Fprintf(out, "check passed: %s\n", res.Where)
	default:
		fmt.Fprintf(out, "check FAILED: %s (the kit's messages are above, on stderr)\n", res.Where)
	}
	return nil
}

// kit runs the compliance kit in this process (the child of check),
// through the testing package's own runner (testing.Main), which exits the
// process: 0 when every rule passed, 1 otherwise. The results go to a
// file for the parent.
type kit struct {
	e       *env
	url     string
	s       *stores.Store
	short   bool
	results string // the results file

	// deadline ends every journal and snapshot call the kit makes
	// (--timeout): past it, the rules fail at once and the run ends with
	// the clean-up and the summary.
	deadline time.Time

	mu      sync.Mutex
	written map[string]bool              // ids the kit wrote or deleted
	rules   map[string]map[string]string // suite → rule → passed, failed, skipped
}

// suiteJSON is the JSON shape of one suite's results.
type suiteJSON struct {
	Suite   string   `json:"suite"`
	Rules   int      `json:"rules"`
	Passed  int      `json:"passed"`
	Failed  []string `json:"failed"`
	Skipped []string `json:"skipped"`
}

func (k *kit) main(run string, verbose bool, timeout time.Duration) error {
	k.written, k.rules = map[string]bool{}, map[string]map[string]string{}
	testing.Init()
	pattern := "^Check$"
	if run != "" {
		pattern += "/" + run
	}
	// The kit's calls end at the deadline; the testing package's own
	// timeout, which ends the process with a stack dump, is only a
	// backstop for a rule that waits on something else.
	k.deadline = time.Now().Add(timeout)
	for name, value := range map[string]string{"test.run": pattern, "test.v": fmt.Sprint(verbose), "test.timeout": (timeout + 2*time.Minute).String()} {
		if err := flag.Set(name, value); err != nil {
			return err
		}
	}
	os.Args = os.Args[:1]
	testing.Main(regexp.MatchString, []testing.InternalTest{{Name: "Check", F: k.check}}, nil, nil)
	return nil // not reached: testing.Main exits
}

// check is the one top-level test: the suites, then the clean-up and the
// summary.
func (k *kit) check(t *testing.T) {
	defer k.s.Close()
	j := &recordingJournal{Journal: k.s.Journal, k: k}
	ss := &recordingSnapshots{Store: k.s.Snapshots, k: k}
	t.Run("journal", func(t *testing.T) {
		storetest.RunJournal(t, storetest.JournalHarness{
			New: func(t *testing.T) journal.Journal { k.rule(t, "journal"); return j },
			Own: func(t *testing.T) journal.Journal {
				k.rule(t, "journal")
				return &recordingJournal{Journal: k.another(t).Journal, k: k, closes: true}
			},
			Capabilities: storetest.Capabilities{GlobalOrdering: k.s.GlobalOrdering, SkipLargeReplay: k.short, ScansFromFirst: k.s.ScansFromFirst},
		})
	})
	t.Run("snapshots", func(t *testing.T) {
		storetest.RunSnapshots(t, storetest.SnapshotHarness{
			New: func(t *testing.T) snapshot.Store { k.rule(t, "snapshots"); return ss },
			Own: func(t *testing.T) snapshot.Store {
				k.rule(t, "snapshots")
				return &recordingSnapshots{Store: k.another(t).Snapshots, k: k, closes: true}
			},
		})
	})
	if k.s.Queries != nil {
		t.Run("queries", func(t *testing.T) {
			storetest.RunQueries(t, storetest.QueryHarness{New: func(t *testing.T) (journal.Journal, any) { k.rule(t, "queries"); return j, k.s.Queries },
				IDsInStoreOrder: k.s.IDsInStoreOrder})
		})
	}
	removed, err := k.cleanUp()
	if err != nil {
		t.Errorf("remove the kit's persistence ids: %v", err)
	}
	k.summary(t, removed, err == nil)
}

// rule records the outcome of the rule t when it ends.
func (k *kit) rule(t *testing.T, suite string) {
	name := strings.TrimPrefix(t.Name(), "Check/"+suite+"/")
	t.Cleanup(func() {
		outcome := "passed"
		switch {
		case t.Failed():
			outcome = "failed"
		case t.Skipped():
			outcome = "skipped"
		}
		k.mu.Lock()
		defer k.mu.Unlock()
		if k.rules[suite] == nil {
			k.rules[suite] = map[string]string{}
		}
		k.rules[suite][name] = outcome
	})
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
	case k.s.Kind == "memory":
		return len(ids), nil // gone with the process
	case !ok:
		fmt.Fprintf(os.Stderr, "annals check: the %s store cannot remove ids; the kit's %d ids remain (entity types starting with Kit and T)\n", k.s.Kind, len(ids))
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(k.e.ctx), 5*time.Minute)
	defer cancel()
	for chunk := range slices.Chunk(ids, 500) {
		if err := p.Purge(ctx, chunk); err != nil {
			return 0, err
		}
	}
	return len(ids), nil
}

func (k *kit) summary(t *testing.T, removed int, cleaned bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	res := checkResult{Store: stores.Redact(k.url), Where: k.s.Where, OK: !t.Failed(), Suites: []suiteJSON{}, RemovedIDs: removed, Cleaned: cleaned}
	for _, name := range []string{"journal", "snapshots", "queries"} {
		rules, ran := k.rules[name]
		if !ran {
			continue
		}
		sj := suiteJSON{Suite: name, Rules: len(rules), Failed: []string{}, Skipped: []string{}}
		for rule, outcome := range rules {
			switch outcome {
			case "passed":
				sj.Passed++
			case "failed":
				sj.Failed = append(sj.Failed, rule)
				res.OK = false
			default:
				sj.Skipped = append(sj.Skipped, rule)
			}
		}
		slices.Sort(sj.Failed)
		slices.Sort(sj.Skipped)
		res.Suites = append(res.Suites, sj)
	}
	res.TimedOut = !res.OK && time.Now().After(k.deadline)
	res.Interrupted = !res.OK && k.e.ctx.Err() != nil
	data, err := json.Marshal(res)
	if err == nil {
		err = os.WriteFile(k.results, data, 0o600)
	}
	if err != nil {
		t.Errorf("writing the results for annals check: %v", err)
	}
}

// another opens the store again, for a rule that closes what it is given;
// it is closed when the rule ends.
func (k *kit) another(t *testing.T) *stores.Store {
	s, err := k.e.mux.Open(context.WithoutCancel(k.e.ctx), k.url, stores.Existing)
	if err != nil {
		t.Fatalf("opening the store again: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// recordingJournal notes every id the kit writes or deletes.
type recordingJournal struct {
	journal.Journal
	k      *kit
	closes bool // Close closes the journal (one opened for the rule)
}

// bound ends ctx at the kit's deadline, or when the command is
// interrupted.
func (k *kit) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithDeadline(ctx, k.deadline)
	stop := context.AfterFunc(k.e.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}

func (j *recordingJournal) Write(ctx context.Context, ws []journal.AtomicWrite) ([]error, error) {
	for _, w := range ws {
		j.k.wrote(w.PersistenceID)
		for _, e := range w.Events {
			j.k.wrote(e.PersistenceID)
		}
	}
	ctx, cancel := j.k.bound(ctx)
	defer cancel()
	return j.Journal.Write(ctx, ws)
}

func (j *recordingJournal) DeleteTo(ctx context.Context, pid string, to int64) error {
	j.k.wrote(pid)
	ctx, cancel := j.k.bound(ctx)
	defer cancel()
	return j.Journal.DeleteTo(ctx, pid, to)
}

func (j *recordingJournal) HighestSequenceNr(ctx context.Context, pid string, from int64) (int64, error) {
	ctx, cancel := j.k.bound(ctx)
	defer cancel()
	return j.Journal.HighestSequenceNr(ctx, pid, from)
}

func (j *recordingJournal) Replay(ctx context.Context, pid string, from, to, max int64) iter.Seq2[journal.Repr, error] {
	return func(yield func(journal.Repr, error) bool) {
		ctx, cancel := j.k.bound(ctx)
		defer cancel()
		for r, err := range j.Journal.Replay(ctx, pid, from, to, max) {
			if !yield(r, err) {
				return
			}
		}
	}
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
	ctx, cancel := s.k.bound(ctx)
	defer cancel()
	return s.Store.Save(ctx, snap)
}

func (s *recordingSnapshots) Load(ctx context.Context, pid string, c snapshot.Criteria) (snapshot.Snapshot, bool, error) {
	ctx, cancel := s.k.bound(ctx)
	defer cancel()
	return s.Store.Load(ctx, pid, c)
}

func (s *recordingSnapshots) Delete(ctx context.Context, m snapshot.Metadata) error {
	s.k.wrote(m.PersistenceID)
	ctx, cancel := s.k.bound(ctx)
	defer cancel()
	return s.Store.Delete(ctx, m)
}

func (s *recordingSnapshots) DeleteMatching(ctx context.Context, pid string, c snapshot.Criteria) error {
	s.k.wrote(pid)
	ctx, cancel := s.k.bound(ctx)
	defer cancel()
	return s.Store.DeleteMatching(ctx, pid, c)
}

func (s *recordingSnapshots) Close() error {
	if s.closes {
		return s.Store.Close()
	}
	return nil
}
