package storetest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testSuite returns a function that runs a suite of the rules given,
// each a subtest of the suite named by its key, run in the order of
// names.
func testSuite(name string, names []string, rules map[string]func(tb)) func(tb) {
	return func(t tb) {
		t.Run(name, func(t tb) {
			for _, n := range names {
				t.Run(n, rules[n])
			}
		})
	}
}

// runCheck runs the suites given with Check's runner and fails the test
// on its error.
func runCheck(t *testing.T, ctx context.Context, opts Options, suites ...func(tb)) Report {
	t.Helper()
	rep, err := check(ctx, opts, func(t tb) {
		for _, s := range suites {
			s(t)
		}
	})
	if err != nil {
		t.Fatalf("check: %v", err)
	}
	return rep
}

// outcome is how r ended: "passed", "failed" or "skipped".
func outcome(r Result) string {
	switch {
	case r.Failed:
		return "failed"
	case r.Skipped:
		return "skipped"
	}
	return "passed"
}

// byName indexes a report's results by name.
func byName(rep Report) map[string]Result {
	m := map[string]Result{}
	for _, r := range rep.Results {
		m[r.Name] = r
	}
	return m
}

func names(rep Report) []string {
	var out []string
	for _, r := range rep.Results {
		out = append(out, r.Name)
	}
	return out
}

// TestCheckOutcomes: each way a rule can end is reported for that rule
// alone; Fatal, a panic and Skip end only their rule, and the rules after
// them run.
func TestCheckOutcomes(t *testing.T) {
	var after []string // the statements after a rule's end that ran
	var mu sync.Mutex
	ran := func(what string) {
		mu.Lock()
		defer mu.Unlock()
		after = append(after, what)
	}
	rules := map[string]func(tb){
		"Passes": func(t tb) { t.Log("a log") },
		"Errors": func(t tb) {
			t.Errorf("first %d", 1)
			t.Error("second")
			ran("Errors")
		},
		"Fatal": func(t tb) {
			t.Fatalf("stop %s", "here")
			ran("Fatal")
		},
		"FailNow": func(t tb) {
			t.FailNow()
			ran("FailNow")
		},
		"Panics": func(t tb) {
			var m map[string]int
			m["x"] = 1 // a nil map: panics
			ran("Panics")
		},
		"Skips": func(t tb) {
			t.Skip("not offered")
			ran("Skips")
		},
		"Skipf": func(t tb) {
			t.Skipf("not %s", "offered")
		},
		"ErrorsThenSkips": func(t tb) {
			t.Error("broken")
			t.SkipNow()
		},
		"Goexit": func(t tb) { runtime.Goexit() },
	}
	order := []string{"Passes", "Errors", "Fatal", "FailNow", "Panics", "Skips", "Skipf", "ErrorsThenSkips", "Goexit"}
	rep := runCheck(t, t.Context(), Options{}, testSuite("s", order, rules))
	if want := append([]string{"s"}, prefixed("s/", order)...); !slices.Equal(names(rep), want) {
		t.Fatalf("results %v, want %v", names(rep), want)
	}
	if !rep.Failed() {
		t.Error("Report.Failed() = false with failed rules")
	}
	got := byName(rep)
	tests := []struct {
		name    string
		outcome string
		msgs    []string // substrings, one per message, in order; "runner_test.go:" asks for the file and line first
	}{
		{"s", "failed", nil},
		{"s/Passes", "passed", []string{"runner_test.go:a log"}},
		{"s/Errors", "failed", []string{"runner_test.go:first 1", "runner_test.go:second"}},
		{"s/Fatal", "failed", []string{"runner_test.go:stop here"}},
		{"s/FailNow", "failed", nil},
		{"s/Panics", "failed", []string{"panic: assignment to entry in nil map"}},
		{"s/Skips", "skipped", []string{"runner_test.go:not offered"}},
		{"s/Skipf", "skipped", []string{"not offered"}},
		{"s/ErrorsThenSkips", "failed", []string{"broken"}},
		{"s/Goexit", "failed", []string{"runtime.Goexit"}},
	}
	for _, tt := range tests {
		r := got[tt.name]
		if outcome(r) != tt.outcome || len(r.Messages) != len(tt.msgs) {
			t.Errorf("%s: %v %q, want %v with %d messages", tt.name, outcome(r), r.Messages, tt.outcome, len(tt.msgs))
			continue
		}
		for i, m := range tt.msgs {
			text, decorated := strings.CutPrefix(m, "runner_test.go:")
			if !strings.Contains(r.Messages[i], text) || decorated && !strings.HasPrefix(r.Messages[i], "runner_test.go:") {
				t.Errorf("%s: message %d is %q, want it to contain %q", tt.name, i, r.Messages[i], m)
			}
		}
	}
	if p := got["s/Panics"].Messages; len(p) == 1 && !strings.Contains(p[0], "runner_test.go") {
		t.Errorf("a panic's message has no stack: %q", p[0])
	}
	if !slices.Equal(after, []string{"Errors"}) {
		t.Errorf("statements after the rules' ends ran in %v, want only in Errors", after)
	}
}

func prefixed(prefix string, names []string) []string {
	var out []string
	for _, n := range names {
		out = append(out, prefix+n)
	}
	return out
}

// TestCheckCleanups: cleanups run last registered first, after the
// rule's subtests (parallel ones included) and its context have ended,
// also when the rule fails or panics, and one cleanup's panic does not
// keep the others from running.
func TestCheckCleanups(t *testing.T) {
	for _, end := range []string{"returns", "fatal", "panics"} {
		t.Run(end, func(t *testing.T) {
			var mu sync.Mutex
			var events []string
			note := func(e string) {
				mu.Lock()
				defer mu.Unlock()
				events = append(events, e)
			}
			rule := func(t tb) {
				t.Cleanup(func() { note("cleanup 1") })
				t.Cleanup(func() {
					if t.Context().Err() == nil {
						note("context alive in cleanup")
					}
					note("cleanup 2")
					panic("in cleanup 2")
				})
				t.Cleanup(func() { note("cleanup 3") })
				for _, sub := range []string{"a", "b"} {
					t.Run(sub, func(t tb) {
						t.Parallel()
						t.Cleanup(func() { note("cleanup of " + sub) })
						note("ran " + sub)
					})
				}
				note("returned")
				switch end {
				case "fatal":
					t.Fatal("end")
				case "panics":
					panic("end")
				}
			}
			rep := runCheck(t, t.Context(), Options{Parallel: 1}, testSuite("s", []string{"r"}, map[string]func(tb){"r": rule}))
			// The parallel subtests start once the rule returned; with one
			// slot, a then b.
			want := []string{"returned", "ran a", "cleanup of a", "ran b", "cleanup of b", "cleanup 3", "cleanup 2", "cleanup 1"}
			if !slices.Equal(events, want) {
				t.Errorf("events %q, want %q", events, want)
			}
			r := byName(rep)["s/r"]
			if outcome(r) != "failed" || !strings.Contains(strings.Join(r.Messages, "\n"), "panic in a cleanup: in cleanup 2") {
				t.Errorf("s/r: %v %q, want failed by the cleanup's panic", outcome(r), r.Messages)
			}
		})
	}
}

// TestCheckSubtests: sequential subtests run one after another in order,
// Run reports their failure, names are made unique as go test makes them,
// and parallel subtests run together, at most Options.Parallel at once.
func TestCheckSubtests(t *testing.T) {
	t.Run("sequential", func(t *testing.T) {
		var order []string
		var results []bool
		rule := func(t tb) {
			for _, name := range []string{"first one", "second", "second"} {
				results = append(results, t.Run(name, func(t tb) {
					order = append(order, t.Name())
					if strings.HasPrefix(name, "second") {
						t.Error("fails")
					}
				}))
			}
			t.Run("nested", func(t tb) {
				t.Run("deeper", func(t tb) { order = append(order, t.Name()) })
			})
		}
		rep := runCheck(t, t.Context(), Options{}, testSuite("s", []string{"r"}, map[string]func(tb){"r": rule}))
		wantOrder := []string{"s/r/first_one", "s/r/second", "s/r/second#01", "s/r/nested/deeper"}
		if !slices.Equal(order, wantOrder) || !slices.Equal(results, []bool{true, false, false}) {
			t.Errorf("ran %v returning %v, want %v returning [true false false]", order, results, wantOrder)
		}
		want := []string{"s", "s/r", "s/r/first_one", "s/r/second", "s/r/second#01", "s/r/nested", "s/r/nested/deeper"}
		if !slices.Equal(names(rep), want) {
			t.Errorf("results %v, want %v", names(rep), want)
		}
		if got := byName(rep); outcome(got["s/r"]) != "failed" || outcome(got["s/r/nested"]) != "passed" {
			t.Errorf("a parent with a failed subtest: %v; another: %v", outcome(got["s/r"]), outcome(got["s/r/nested"]))
		}
	})
	t.Run("parallel", func(t *testing.T) {
		for _, slots := range []int{1, 3} {
			t.Run(fmt.Sprint(slots), func(t *testing.T) {
				var running, most atomic.Int32
				// With three slots the three subtests wait for each other:
				// they must run together.
				var arrived sync.WaitGroup
				arrived.Add(3)
				rule := func(t tb) {
					for i := range 3 {
						t.Run(fmt.Sprint(i), func(t tb) {
							t.Parallel()
							n := running.Add(1)
							defer running.Add(-1)
							for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
							}
							if slots == 3 {
								arrived.Done()
								arrived.Wait()
							}
						})
					}
				}
				rep := runCheck(t, t.Context(), Options{Parallel: slots}, testSuite("s", []string{"r"}, map[string]func(tb){"r": rule}))
				if rep.Failed() || most.Load() != int32(slots) {
					t.Errorf("at most %d subtests ran at once with %d slots; failed: %v", most.Load(), slots, rep.Failed())
				}
			})
		}
	})
}

// TestCheckRun: Options.Run selects rules as go test -run does.
func TestCheckRun(t *testing.T) {
	noop := func(tb) {}
	rules := map[string]func(tb){"Alpha": noop, "Beta": noop, "AlphaBeta": noop}
	order := []string{"Alpha", "Beta", "AlphaBeta"}
	for _, tt := range []struct {
		run  string
		want []string
	}{
		{"", []string{"one", "one/Alpha", "one/Beta", "one/AlphaBeta", "two", "two/Alpha", "two/Beta", "two/AlphaBeta"}},
		{"two", []string{"two", "two/Alpha", "two/Beta", "two/AlphaBeta"}},
		{"one/^Alpha$", []string{"one", "one/Alpha"}},
		{"/Beta", []string{"one", "one/Beta", "one/AlphaBeta", "two", "two/Beta", "two/AlphaBeta"}},
		{"one/(Alpha|Beta)$", []string{"one", "one/Alpha", "one/Beta", "one/AlphaBeta"}},
		{"one/^Alpha$|two/^Beta", []string{"one", "one/Alpha", "two", "two/Beta"}},
		{"three", nil},
	} {
		rep := runCheck(t, t.Context(), Options{Run: tt.run}, testSuite("one", order, rules), testSuite("two", order, rules))
		if !slices.Equal(names(rep), tt.want) {
			t.Errorf("Run %q ran %v, want %v", tt.run, names(rep), tt.want)
		}
	}
}

// TestCheckRefusesInvalidOptions: Check runs nothing, and returns an
// error, for invalid options or an invalid Store.
func TestCheckRefusesInvalidOptions(t *testing.T) {
	for _, tt := range []struct {
		name  string
		store Store
		opts  Options
	}{
		{"a pattern that does not compile", Store{}, Options{Run: "s/("}},
		{"negative Parallel", Store{}, Options{Parallel: -1}},
		{"negative StopWait", Store{}, Options{StopWait: -time.Second}},
		{"an exception naming no rule", Store{Exceptions: map[string]string{"snapshots/NoSuchRule": "renamed"}}, Options{}},
		{"an exception without its suite", Store{Exceptions: map[string]string{"LoadLatest": "one snapshot per id"}}, Options{}},
		{"queries without a journal", Store{Queries: struct{}{}}, Options{}},
	} {
		if rep, err := Check(t.Context(), tt.store, tt.opts); err == nil {
			t.Errorf("%s: no error, report %+v", tt.name, rep)
		}
	}
	if rep, err := Check(t.Context(), Store{Exceptions: map[string]string{"snapshots/LoadLatest": "one snapshot per id"}}, Options{}); err != nil || len(rep.Results) != 0 {
		t.Errorf("a Store with no value and a known exception: %+v, %v; want no results and no error", rep, err)
	}
}

// helperFails is a helper: the message names its caller's line.
func helperFails(t tb) {
	t.Helper()
	t.Errorf("from the helper")
}

func TestCheckHelper(t *testing.T) {
	var line int
	rep := runCheck(t, t.Context(), Options{}, testSuite("s", []string{"r"}, map[string]func(tb){
		"r": func(t tb) {
			_, _, line, _ = runtime.Caller(0)
			helperFails(t)
		},
	}))
	if msgs := byName(rep)["s/r"].Messages; len(msgs) != 1 || msgs[0] != fmt.Sprintf("runner_test.go:%d: from the helper", line+1) {
		t.Errorf("messages %q, want the helper's caller's line", msgs)
	}
}

// TestCheckContext: the rules' contexts end with Check's; a rule that
// does not end then is reported failed after StopWait, and Check returns.
func TestCheckContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	release := make(chan struct{})
	defer close(release)
	ended := make(chan struct{})
	rules := map[string]func(tb){
		"EndsWithTheContext": func(t tb) {
			cancel()
			<-t.Context().Done()
			if !errors.Is(t.Context().Err(), context.Canceled) {
				t.Errorf("context ended with %v", t.Context().Err())
			}
		},
		"Blocks": func(t tb) {
			defer close(ended)
			<-release // ignores its context
			t.Error("released")
		},
	}
	var progress []string
	rep := runCheck(t, ctx, Options{StopWait: time.Millisecond, Progress: func(r Result) { progress = append(progress, r.Name+" "+outcome(r)) }},
		testSuite("s", []string{"EndsWithTheContext", "Blocks"}, rules))
	got := byName(rep)
	if outcome(got["s/EndsWithTheContext"]) != "passed" || outcome(got["s/Blocks"]) != "failed" || outcome(got["s"]) != "failed" ||
		!strings.Contains(strings.Join(got["s/Blocks"].Messages, ""), "left running") {
		t.Errorf("results %+v", rep.Results)
	}
	if !slices.Equal(progress, []string{"s/EndsWithTheContext passed"}) {
		t.Errorf("progress %q, want the one rule that ended", progress)
	}
	release <- struct{}{}
	<-ended // the rule left running may still call its T
}

// TestCheckProgress: Progress gets each result as it ends, a parent after
// its subtests, and the report lists parents first.
func TestCheckProgress(t *testing.T) {
	var progress []string
	rule := func(t tb) {
		t.Run("sub", func(t tb) { t.Skip("no") })
	}
	rep := runCheck(t, t.Context(), Options{Progress: func(r Result) { progress = append(progress, r.Name+" "+outcome(r)) }},
		testSuite("s", []string{"r"}, map[string]func(tb){"r": rule}))
	if want := []string{"s/r/sub skipped", "s/r passed", "s passed"}; !slices.Equal(progress, want) {
		t.Errorf("progress %q, want %q", progress, want)
	}
	if want := []string{"s", "s/r", "s/r/sub"}; !slices.Equal(names(rep), want) || rep.Failed() {
		t.Errorf("report %v (failed %v), want %v", names(rep), rep.Failed(), want)
	}
}

func TestCheckShort(t *testing.T) {
	for _, short := range []bool{false, true} {
		var got bool
		runCheck(t, t.Context(), Options{Short: short}, testSuite("s", []string{"r"}, map[string]func(tb){"r": func(t tb) { got = t.short() }}))
		if got != short {
			t.Errorf("Options.Short %v: the rule saw %v", short, got)
		}
	}
}
