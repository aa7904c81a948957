package storetest

import (
	"context"
	"testing"
	"time"
)

// tb is what a rule of the kit gets: the part of *testing.T the kit
// uses. Under go test (Run, RunMembershipAcross) it wraps the test's
// *testing.T; under Check it is Check's own runner. The methods behave
// as *testing.T's do:
//
//   - Fail, Error and Errorf mark the rule failed and let it go on; the
//     failure of a subtest fails its parents too.
//   - FailNow, Fatal, Fatalf, SkipNow, Skip and Skipf end the rule: they
//     must be called from the goroutine that runs it, not from one it
//     started.
//   - Cleanup registers a function to run when the rule and its subtests
//     have ended, after its Context is cancelled; cleanups run last
//     registered first.
//   - Context ends when the rule ends; under Check it also ends when the
//     context given to Check does.
//   - Run runs f as a subtest named name and reports whether it did not
//     fail (a parallel subtest: whether it did not fail before it called
//     Parallel). A subtest that calls Parallel runs after its parent's
//     function has returned, alongside the other parallel subtests, and
//     the parent's cleanups run after all of them.
//   - Helper marks the calling function as a helper: the messages name
//     the line of its caller.
type tb interface {
	Cleanup(f func())
	Context() context.Context
	Error(args ...any)
	Errorf(format string, args ...any)
	Fail()
	FailNow()
	Failed() bool
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Helper()
	Log(args ...any)
	Logf(format string, args ...any)
	Name() string
	Parallel()
	Run(name string, f func(t tb)) bool
	Skip(args ...any)
	SkipNow()
	Skipf(format string, args ...any)
	Skipped() bool

	// short reports whether the long rules are left out (go test -short,
	// Options.Short).
	short() bool
	// deadline is the time the rule must end by, if the runner has one
	// (go test -timeout); Check has none: its context ends the rules.
	deadline() (time.Time, bool)
}

// testingT is a tb under go test. The methods of *testing.T are promoted
// (the compiler's wrappers are left out of the call stacks testing
// reads, so Helper marks the kit's helpers, and messages name the kit's
// lines); Run is the one it changes.
type testingT struct{ *testing.T }

func (t testingT) Run(name string, f func(t tb)) bool {
	t.T.Helper()
	return t.T.Run(name, func(tt *testing.T) { f(testingT{tt}) })
}

func (testingT) short() bool { return testing.Short() }

func (t testingT) deadline() (time.Time, bool) { return t.T.Deadline() }
