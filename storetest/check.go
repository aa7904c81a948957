package storetest

import (
	"context"
	"fmt"
	"runtime"
	"time"
)

// Options are Check's settings. The zero Options run every rule of the
// suites the Store offers, the long ones included, GOMAXPROCS parallel
// rules at once.
type Options struct {
	// Run, when set, runs only the rules whose names match it, with go
	// test's -run rules: the pattern is split at each slash outside
	// brackets and parentheses, and each part is an unanchored regular
	// expression that must match the name at the same level: the suite,
	// then the rule, then the rule's own subtests ("journal/Delete",
	// "queries", "/^ReplayAll$").
	Run string
	// Short leaves out the long rules (as go test -short): the
	// 100,000-event replay.
	Short bool
	// Parallel is the number of rules that may run at once (as go test
	// -parallel): zero means GOMAXPROCS; a negative number is an error.
	Parallel int
	// StopWait is how long Check waits, once its context has ended, for
	// the rules still running to return (a rule ends its store calls with
	// the context; one blocked on something else may not). Past it, Check
	// returns: those rules are reported failed and left running on their
	// goroutines. Zero means one minute; a negative duration is an error.
	StopWait time.Duration
	// Progress, when set, is called with each rule's (and each suite's and
	// subtest's) result as it ends, a parent after its subtests. The calls
	// are made one at a time, never after Check has returned.
	Progress func(Result)
}

// Result is what one suite, rule or subtest of a rule did.
type Result struct {
	// Name is the full name, its levels joined by slashes: the suite, the
	// rule, then any subtests ("queries/PagesAreCrossed/by_tag"). As
	// under go test, spaces become underscores and a name used twice
	// under one parent gets a suffix (#01, ...).
	Name string
	// Failed: the rule, or one of its subtests, failed.
	Failed bool
	// Skipped: the rule was skipped and did not fail; its Messages say
	// why.
	Skipped bool
	// Messages are the rule's failures, logs and skip reasons in the
	// order it wrote them, each preceded by the file and line that wrote
	// it, as go test prints them ("journal.go:412: Write: ...").
	Messages []string
	// Duration is the time the rule ran, from its start (a parallel
	// rule: from when its turn came) until its subtests and cleanups had
	// ended.
	Duration time.Duration
}

// Report is what Check found.
type Report struct {
	// Results holds every suite, rule and subtest that ran, each parent
	// before its subtests, siblings in the order they were started.
	Results []Result
	// Duration is the time Check took.
	Duration time.Duration
}

// Failed reports whether any rule failed.
func (r Report) Failed() bool {
	for _, res := range r.Results {
		if res.Failed {
			return true
		}
	}
	return false
}

// defaultStopWait is StopWait's default.
const defaultStopWait = time.Minute

// Check runs the kit on s without go test, one suite after another, and
// returns what each suite, rule and subtest did: for programs that check
// a store as deployed (annals check). It runs the rules as Run does under
// go test, with a runner of its own: each rule and subtest on a goroutine
// of its own; FailNow, Fatal and SkipNow end only that rule; a rule that
// panics fails, with the panic's value and stack as its message, and the
// others go on (a panic on a goroutine a rule started is not recovered:
// it ends the program, as it would under go test); cleanups run last
// registered first, after the rule's subtests.
//
// ctx bounds the run: every rule's context ends with it, so once ctx is
// done the store calls the rules make end, the rules still running fail,
// and the rest fail at their first call. Check then waits
// Options.StopWait at most for the rules still running. Check returns an
// error, and no report, only for invalid options (a Run pattern that
// does not compile, a negative Parallel or StopWait) or an invalid Store
// (see Store); the zero Store is valid, and runs no rule.
func Check(ctx context.Context, s Store, opts Options) (Report, error) {
	if err := s.validate(); err != nil {
		return Report{}, err
	}
	return check(ctx, opts, func(t tb) { runStore(t, s) })
}

// check runs run as the root of a run of Check's runner, with opts.
func check(ctx context.Context, opts Options, run func(t tb)) (Report, error) {
	m, err := newMatcher(opts.Run)
	if err != nil {
		return Report{}, fmt.Errorf("storetest: Options.Run: %w", err)
	}
	if opts.Parallel < 0 {
		return Report{}, fmt.Errorf("storetest: Options.Parallel is %d, want 0 or more", opts.Parallel)
	}
	if opts.StopWait < 0 {
		return Report{}, fmt.Errorf("storetest: Options.StopWait is %v, want 0 or more", opts.StopWait)
	}
	parallel, wait := opts.Parallel, opts.StopWait
	if parallel == 0 {
		parallel = runtime.GOMAXPROCS(0)
	}
	if wait == 0 {
		wait = defaultStopWait
	}
	r := &runner{
		match:    m,
		short:    opts.Short,
		slots:    make(chan struct{}, parallel),
		progress: opts.Progress,
		helpers:  map[string]bool{},
	}
	start := time.Now()
	root := r.root(ctx)
	go root.execute(run)
	select {
	case <-root.done:
	case <-ctx.Done():
		timer := time.NewTimer(wait)
		select {
		case <-root.done:
		case <-timer.C:
		}
		timer.Stop()
	}
	rep := r.report(root, wait)
	rep.Duration = time.Since(start)
	return rep, nil
}
