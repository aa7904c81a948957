package storetest

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
)

// runner is Check's test runner: the state its tests share.
type runner struct {
	match *matcher
	short bool
	slots chan struct{} // one per parallel test running its function

	// mu guards the state of every runT of the run, and helpers.
	mu      sync.Mutex
	helpers map[string]bool // functions that called Helper, by name
	// frames is the prefix of the names of runT's methods and closures:
	// the frames a message's caller is looked for above.
	frames string

	// progressMu serializes the Progress calls; closed (under it) is set
	// when Check returns, and ends them.
	progressMu sync.Mutex
	progress   func(Result)
	closed     bool
}

// runT is a tb of Check: one suite, rule or subtest.
type runT struct {
	r      *runner
	parent *runT
	name   string   // the full name; "" for the root
	path   []string // the name's levels
	ctx    context.Context
	cancel context.CancelFunc

	signal chan struct{} // closed when the parent's Run may return: ended, or parallel
	turn   chan struct{} // closed when a parallel test may go on: the parent has a slot for it
	done   chan struct{} // closed when ended, subtests and cleanups included

	// holdsSlot is set by the parent before it closes turn, and read by
	// execute once the function has returned.
	holdsSlot bool

	// Under r.mu:
	failed, skipped, parallel bool
	returned                  bool // the function has returned: Run is refused
	finished                  bool // ended, cleanups included
	msgs                      []string
	cleanups                  []func()
	subs                      []*runT
	names                     map[string]bool // subtest names taken
	start                     time.Time
	duration                  time.Duration
}

// root returns the test that runs the suites, which is not reported.
func (r *runner) root(ctx context.Context) *runT {
	r.frames = strings.TrimSuffix(runtime.FuncForPC(reflect.ValueOf((*runT).execute).Pointer()).Name(), "execute")
	t := &runT{r: r, signal: make(chan struct{}), turn: make(chan struct{}), done: make(chan struct{}), start: time.Now()}
	t.ctx, t.cancel = context.WithCancel(ctx)
	return t
}

// execute runs f as t's function on a goroutine of its own, so that
// FailNow and SkipNow (runtime.Goexit) and panics end only it; then waits
// for t's subtests, cancels its context, runs its cleanups and reports
// it.
func (t *runT) execute(f func(tb)) {
	body := make(chan struct{})
	go func() {
		defer close(body)
		returned := false
		defer func() {
			if p := recover(); p != nil {
				t.fail(fmt.Sprintf("panic: %v\n\n%s", p, debug.Stack()))
				return
			}
			if !returned && !t.Failed() && !t.Skipped() {
				t.fail("the rule called runtime.Goexit without FailNow or SkipNow")
			}
		}()
		f(t)
		returned = true
	}()
	<-body
	t.r.mu.Lock()
	t.returned = true
	subs := slices.Clone(t.subs)
	t.r.mu.Unlock()
	// A parallel test gives its slot back once it has ended, or before it
	// waits for its subtests, which may need it. The parallel subtests
	// (paused in Parallel) then get their slots in the order they were
	// started.
	release := func() {
		if t.holdsSlot {
			t.holdsSlot = false
			<-t.r.slots
		}
	}
	if len(subs) > 0 {
		release()
	}
	for _, s := range subs {
		t.r.mu.Lock()
		parallel := s.parallel
		t.r.mu.Unlock()
		if parallel {
			t.r.slots <- struct{}{}
			s.holdsSlot = true
			close(s.turn)
		}
	}
	for _, s := range subs {
		<-s.done
	}
	t.cancel()
	t.runCleanups()
	release()

	t.r.mu.Lock()
	t.finished = true
	t.duration = time.Since(t.start)
	res := t.result()
	parallel := t.parallel
	t.r.mu.Unlock()
	if t.parent != nil {
		t.r.reportProgress(res)
	}
	if !parallel {
		close(t.signal)
	}
	close(t.done)
}

// runCleanups runs t's cleanups, last registered first, each on a
// goroutine of its own: one that panics or calls FailNow fails t, and the
// others still run.
func (t *runT) runCleanups() {
	for {
		t.r.mu.Lock()
		n := len(t.cleanups)
		if n == 0 {
			t.r.mu.Unlock()
			return
		}
		f := t.cleanups[n-1]
		t.cleanups = t.cleanups[:n-1]
		t.r.mu.Unlock()
		ran := make(chan struct{})
		go func() {
			defer close(ran)
			defer func() {
				if p := recover(); p != nil {
					t.fail(fmt.Sprintf("panic in a cleanup: %v\n\n%s", p, debug.Stack()))
				}
			}()
			f()
		}()
		<-ran
	}
}

// result is t's Result; r.mu is held.
func (t *runT) result() Result {
	return Result{Name: t.name, Failed: t.failed, Skipped: t.skipped && !t.failed, Messages: slices.Clone(t.msgs), Duration: t.duration}
}

func (r *runner) reportProgress(res Result) {
	if r.progress == nil {
		return
	}
	r.progressMu.Lock()
	defer r.progressMu.Unlock()
	if !r.closed {
		r.progress(res)
	}
}

// report ends the Progress calls and returns the results of the run
// under root. Tests that have not ended (Check stopped waiting for them
// after waiting wait) are reported failed.
func (r *runner) report(root *runT, wait time.Duration) Report {
	r.progressMu.Lock()
	r.closed = true
	r.progressMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	var rep Report
	var walk func(t *runT)
	walk = func(t *runT) {
		if t != root {
			if !t.finished {
				for p := t; p != nil; p = p.parent {
					p.failed = true
				}
				t.msgs = append(t.msgs, fmt.Sprintf("still running %v after the context ended: left running, and reported failed", wait))
				t.duration = time.Since(t.start)
			}
			rep.Results = append(rep.Results, Result{Name: t.name})
		}
		i := len(rep.Results) - 1
		for _, s := range t.subs {
			walk(s)
		}
		if t != root {
			rep.Results[i] = t.result() // after the subtests: their failures are counted
		}
	}
	walk(root)
	return rep
}

func (t *runT) Name() string { return t.name }

func (t *runT) Context() context.Context { return t.ctx }

func (t *runT) short() bool { return t.r.short }

func (t *runT) deadline() (time.Time, bool) { return time.Time{}, false }

func (t *runT) Cleanup(f func()) {
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

func (t *runT) Fail() {
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	for p := t; p != nil; p = p.parent {
		p.failed = true
	}
}

func (t *runT) Failed() bool {
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	return t.failed
}

func (t *runT) Skipped() bool {
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	return t.skipped
}

func (t *runT) FailNow() {
	t.Fail()
	runtime.Goexit()
}

func (t *runT) SkipNow() {
	t.r.mu.Lock()
	t.skipped = true
	t.r.mu.Unlock()
	runtime.Goexit()
}

func (t *runT) Log(args ...any) { t.log(fmt.Sprintln(args...)) }

func (t *runT) Logf(format string, args ...any) { t.log(fmt.Sprintf(format, args...)) }

func (t *runT) Error(args ...any) {
	t.log(fmt.Sprintln(args...))
	t.Fail()
}

func (t *runT) Errorf(format string, args ...any) {
	t.log(fmt.Sprintf(format, args...))
	t.Fail()
}

func (t *runT) Fatal(args ...any) {
	t.log(fmt.Sprintln(args...))
	t.FailNow()
}

func (t *runT) Fatalf(format string, args ...any) {
	t.log(fmt.Sprintf(format, args...))
	t.FailNow()
}

func (t *runT) Skip(args ...any) {
	t.log(fmt.Sprintln(args...))
	t.SkipNow()
}

func (t *runT) Skipf(format string, args ...any) {
	t.log(fmt.Sprintf(format, args...))
	t.SkipNow()
}

// fail fails t with a message of the runner's own (no file and line).
func (t *runT) fail(msg string) {
	t.r.mu.Lock()
	t.msgs = append(t.msgs, msg)
	t.r.mu.Unlock()
	t.Fail()
}

// log adds msg to t's messages, after the file and line of the first
// caller that is not a helper.
func (t *runT) log(msg string) {
	msg = strings.TrimSuffix(msg, "\n")
	var pcs [64]uintptr
	n := runtime.Callers(3, pcs[:]) // runtime.Callers, log, the method that called it
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	if f, ok := t.caller(pcs[:n]); ok {
		msg = fmt.Sprintf("%s:%d: %s", filepath.Base(f.File), f.Line, msg)
	}
	t.msgs = append(t.msgs, msg)
}

// caller returns the frame a message is from: the first that is not a
// helper, or the outermost helper when the stack reaches the runner;
// r.mu is held.
func (t *runT) caller(pcs []uintptr) (runtime.Frame, bool) {
	frames := runtime.CallersFrames(pcs)
	var last runtime.Frame
	seen := false
	for {
		f, more := frames.Next()
		if strings.HasPrefix(f.Function, t.r.frames) {
			if seen {
				return last, true // reached the function's start through helpers
			}
		} else {
			last, seen = f, true
			if !t.r.helpers[f.Function] {
				return f, true
			}
		}
		if !more {
			return last, seen
		}
	}
}

func (t *runT) Helper() {
	var pc [1]uintptr
	if runtime.Callers(2, pc[:]) == 0 {
		return
	}
	f, _ := runtime.CallersFrames(pc[:]).Next()
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	t.r.helpers[f.Function] = true
}

func (t *runT) Parallel() {
	t.r.mu.Lock()
	if t.parallel || t.parent == nil {
		t.r.mu.Unlock()
		return
	}
	t.parallel = true
	t.r.mu.Unlock()
	close(t.signal)
	<-t.turn
	t.r.mu.Lock()
	t.start = time.Now()
	t.r.mu.Unlock()
}

func (t *runT) Run(name string, f func(t tb)) bool {
	t.r.mu.Lock()
	if t.returned {
		t.r.mu.Unlock()
		t.Errorf("Run(%q) after the function of %s returned", name, t.name)
		return false
	}
	name = t.subName(name)
	path := append(slices.Clip(t.path), name)
	if !t.r.match.matches(path) {
		t.r.mu.Unlock()
		return true
	}
	c := &runT{
		r: t.r, parent: t, name: strings.Join(path, "/"), path: path,
		signal: make(chan struct{}), turn: make(chan struct{}), done: make(chan struct{}),
		start: time.Now(),
	}
	c.ctx, c.cancel = context.WithCancel(t.ctx)
	t.subs = append(t.subs, c)
	t.r.mu.Unlock()
	go c.execute(f)
	<-c.signal
	return !c.Failed()
}

// subName returns the name of t's next subtest called name, as go test
// names it: spaces become underscores, other characters that do not print
// are quoted, and a name already taken gets a suffix (#01, #02, ...);
// r.mu is held.
func (t *runT) subName(name string) string {
	var b strings.Builder
	for _, c := range name {
		switch {
		case unicode.IsSpace(c):
			b.WriteByte('_')
		case !strconv.IsPrint(c):
			q := strconv.QuoteRune(c)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(c)
		}
	}
	name = b.String()
	if t.names == nil {
		t.names = map[string]bool{}
	}
	unique := name
	for n := 1; t.names[unique]; n++ {
		unique = fmt.Sprintf("%s#%02d", name, n)
	}
	t.names[unique] = true
	return unique
}

// matcher selects tests by name as go test's -run does.
type matcher struct {
	alternatives [][]*regexp.Regexp // nil: every test
}

// newMatcher compiles a -run pattern: alternatives split at top-level
// bars, each split at top-level slashes into one expression per level.
func newMatcher(pattern string) (*matcher, error) {
	m := &matcher{}
	if pattern == "" {
		return m, nil
	}
	for _, alt := range splitTopLevel(pattern, '|') {
		var levels []*regexp.Regexp
		for _, part := range splitTopLevel(alt, '/') {
			re, err := regexp.Compile(part)
			if err != nil {
				return nil, fmt.Errorf("element %q: %w", part, err)
			}
			levels = append(levels, re)
		}
		m.alternatives = append(m.alternatives, levels)
	}
	return m, nil
}

// matches reports whether a test whose name has the levels path runs:
// one alternative's expressions match its levels (a level without an
// expression matches).
func (m *matcher) matches(path []string) bool {
	if m.alternatives == nil {
		return true
	}
	for _, levels := range m.alternatives {
		ok := true
		for i, name := range path {
			if i < len(levels) && !levels[i].MatchString(name) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// splitTopLevel splits s at each sep outside brackets and parentheses
// (and not escaped), as go test splits its -run pattern.
func splitTopLevel(s string, sep byte) []string {
	var parts []string
	brackets, parens, start := 0, 0, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			i++
		case c == '[':
			brackets++
		case c == ']':
			brackets = max(brackets-1, 0) // an unmatched ']' is legal
		case c == '(' && brackets == 0:
			parens++
		case c == ')' && brackets == 0:
			parens--
		case c == sep && brackets == 0 && parens == 0:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}
