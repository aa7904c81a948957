package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/annals-go/annals/cmd/annals/internal/stores"
)

type checkOut struct {
	Store       string `json:"store"`
	Scratch     string `json:"scratch"`
	OK          bool   `json:"ok"`
	Interrupted bool   `json:"interrupted"`
	Suites      []struct {
		Suite   string   `json:"suite"`
		Rules   int      `json:"rules"`
		Passed  int      `json:"passed"`
		Failed  []string `json:"failed"`
		Skipped []string `json:"skipped"`
	} `json:"suites"`
	RemovedIDs int  `json:"removed_ids"`
	TimedOut   bool `json:"timed_out"`
}

// TestCheckTimesOutCleanly: a --timeout that ends the kit mid-run ends its
// store calls, and the command says so, removes what the kit wrote, and
// exits 1, without a panic.
func TestCheckTimesOutCleanly(t *testing.T) {
	t.Parallel()
	st := fixture(t, sqliteKind)
	before := contents(t, st.url)
	r := cli(t, nil, "check", "--store", st.url, "--timeout", "1s", "--json")
	var out checkOut
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("check --timeout 1s --json: %v; %s", err, r)
	}
	if r.code != 1 || out.OK || !out.TimedOut || out.RemovedIDs == 0 || strings.Contains(r.stderr, "panic") {
		t.Errorf("check --timeout 1s: %+v; want exit 1, timed out, the kit's ids removed, no panic; got %s", out, r)
	}
	equalContents(t, "before and after a check that timed out", before, contents(t, st.url))
	cli(t, nil, "check", "--store", st.url, "--timeout", "1s").want(t, 1, []string{"check TIMED OUT"}, nil)
}

// TestCheckInterruptedCleansUp: an interrupt while the kit runs ends its
// store calls; the command removes what the kit wrote, says so and exits
// 130, without saying the store failed.
func TestCheckInterruptedCleansUp(t *testing.T) {
	t.Parallel()
	st := fixture(t, sqliteKind)
	before := contents(t, st.url)
	cmd := exec.CommandContext(t.Context(), annalsBin, "check", "--store", st.url, "-v")
	cmd.Env = cleanEnv()
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The first rule's result: the kit is running (and still has the
	// 100,000-event replay ahead).
	r := bufio.NewReader(stderr)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("check -v ended before a rule passed: %v", err)
		}
		if strings.HasPrefix(line, "--- PASS: Check/") {
			break
		}
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(r)
	err = cmd.Wait()
	if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != exitInterrupted {
		t.Errorf("check interrupted: %v, want exit 130", err)
	}
	out := stdout.String()
	if !strings.Contains(out, "check INTERRUPTED") || !strings.Contains(out, "removed the kit's") || strings.Contains(string(rest), "panic") ||
		!strings.Contains(string(rest), "annals check: interrupted") || strings.Contains(string(rest), errCheckFailed.Error()) {
		t.Errorf("check interrupted printed\n%s\nstderr (after the first rule):\n%s", out, rest)
	}
	equalContents(t, "before and after an interrupted check", before, contents(t, st.url))
}

// TestCheckPassesAndLeavesTheStoreAsItWas: check passes on each store and
// leaves it as it was. On SQLite the kit works in a scratch file beside
// the store's, removed at the end: the store's file is not written at
// all, and keeps its size (it used to grow by the space of the kit's
// rows, for good).
func TestCheckPassesAndLeavesTheStoreAsItWas(t *testing.T) {
	t.Parallel()
	forEachFixture(t, func(t *testing.T, st testStore) {
		before := contents(t, st.url)
		var rows map[string]int64
		var size int64
		unchanged := func(string) {}
		if !st.sqlite() {
			rows = pgRows(t, st.schema)
		} else {
			size = dirSize(t, filepath.Dir(st.path))
			unchanged = st.watch(t)
		}
		var statsBefore statsOut
		decode(t, cli(t, nil, "stats", "--store", st.url, "--json"), &statsBefore)

		start := time.Now()
		var out checkOut
		decode(t, cli(t, nil, "check", "--store", st.url, "--short", "--json"), &out)
		t.Logf("check --short on %s: %v", st.kind, time.Since(start).Round(time.Millisecond))
		// journal, snapshots, queries, batch-queries (both stores offer
		// events by tag and by slices) and durable.
		if !out.OK || out.Store != st.url || len(out.Suites) != 5 || out.RemovedIDs < 100 || out.Interrupted || (out.Scratch != "") != st.sqlite() {
			t.Fatalf("check: %+v", out)
		}
		if st.sqlite() {
			unchanged("check")
			if after := dirSize(t, filepath.Dir(st.path)); after > size {
				t.Errorf("the store's directory grew from %d to %d bytes", size, after)
			}
			if left, _ := filepath.Glob(filepath.Join(filepath.Dir(st.path), ".annals-scratch-*")); len(left) > 0 {
				t.Errorf("scratch files left behind: %v", left)
			}
		}
		if s := out.Suites[3]; s.Suite != "batch-queries" || s.Rules != 2 || s.Passed != 2 {
			t.Errorf("suite %+v, want batch-queries' 2 rules passed", s)
		}
		for _, s := range out.Suites {
			// The journal suite skips LargeReplayStreams (--short), and on
			// SQLite nothing else (its journal has a global ordering).
			skipped := slices.Contains(s.Skipped, "LargeReplayStreams") && (!st.sqlite() || len(s.Skipped) == 1)
			if s.Rules == 0 || s.Passed+len(s.Skipped) != s.Rules || len(s.Failed) != 0 || (s.Suite == "journal" && !skipped) {
				t.Errorf("suite %+v", s)
			}
		}
		equalContents(t, "before and after check (the store's own data, no ids left)", before, contents(t, st.url))
		if !st.sqlite() {
			if got := pgRows(t, st.schema); !reflect.DeepEqual(got, rows) {
				t.Errorf("rows before check %v, after %v", rows, got)
			}
		}
		var statsAfter statsOut
		decode(t, cli(t, nil, "stats", "--store", st.url, "--json"), &statsAfter)
		if !reflect.DeepEqual(statsBefore.Types, statsAfter.Types) || !reflect.DeepEqual(statsBefore.Total, statsAfter.Total) {
			t.Errorf("stats before check %+v\nafter %+v", statsBefore, statsAfter)
		}

		// Table output, one rule; a failing rule pattern is a usage error.
		cli(t, nil, "check", "--store", st.url, "--run", "journal/FieldsRoundTrip$").want(t, 0, []string{"SUITE", "journal", "removed the kit's", "check passed", st.where()}, nil)
		cli(t, nil, "check", "--store", st.url, "--run", "(").want(t, 2, nil, []string{"--run"})
	})
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		r := cli(t, nil, "check", "--store", "memory:", "--short")
		r.want(t, 0, []string{"SUITE", "journal", "queries", "batch-queries", "check passed"}, nil)
		// The testing runner's own last line is not printed: the summary
		// is the command's last word.
		for _, line := range strings.Split(r.stdout+r.stderr, "\n") {
			if line == "PASS" || line == "FAIL" {
				t.Errorf("check printed a bare %q line: %s", line, r)
			}
		}
	})
}

// dirSize is the size of the files in dir (an SQLite file, its
// write-ahead log, anything beside them).
func dirSize(t *testing.T, dir string) int64 {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && !fi.IsDir() {
			n += fi.Size()
		}
	}
	return n
}

// A database with a trigger that silently drops the round-trip rule's
// events: the write reports success, the events are gone. The kit runs
// in a scratch file beside the store's: the command runs in this process,
// on a mux whose SQLite scheme puts the trigger in each scratch file it
// creates.
func TestCheckFailsOnABrokenStore(t *testing.T) {
	t.Parallel()
	path := fixture(t, sqliteKind).path
	mux := stores.New()
	broken := stores.SQLite()
	open := broken.Open
	broken.Open = func(ctx context.Context, url string, mode stores.Mode) (*stores.Store, error) {
		s, err := open(ctx, url, mode)
		if err != nil || mode != stores.Create || !strings.Contains(url, ".annals-scratch-") {
			return s, err
		}
		db, err := sql.Open("sqlite3", strings.TrimPrefix(url, "sqlite:"))
		if err == nil {
			_, err = db.Exec(`CREATE TRIGGER IF NOT EXISTS drop_round BEFORE INSERT ON event_journal WHEN NEW.entity_type = 'KitRound' BEGIN SELECT RAISE(IGNORE); END`)
			err = errors.Join(err, db.Close())
		}
		if err != nil {
			t.Errorf("breaking the scratch file: %v", err)
		}
		return s, nil
	}
	mux.Register(broken, "sqlite")
	check := func(args ...string) result {
		var stdout, stderr bytes.Buffer
		e := &env{ctx: t.Context(), stdout: &stdout, stderr: &stderr, stdin: newReader(""), getenv: func(string) string { return "" }, mux: mux}
		code := dispatch(e, append([]string{"check", "--store", "sqlite:" + path}, args...))
		return result{stdout.String(), stderr.String(), code}
	}
	r := check("--run", "journal/(FieldsRoundTrip|ReplayAll)$", "--json")
	if r.code != 1 || !strings.Contains(r.stderr, "--- FAIL: Check/journal/FieldsRoundTrip") {
		t.Fatalf("check of a broken store: %s", r)
	}
	r.code = 0
	var out checkOut
	decode(t, r, &out)
	if out.OK || len(out.Suites) != 1 || out.Suites[0].Rules != 2 || out.Suites[0].Passed != 1 || !slices.Equal(out.Suites[0].Failed, []string{"FieldsRoundTrip"}) {
		t.Errorf("check: %+v", out)
	}
	check("--run", "journal/FieldsRoundTrip$").want(t, 1, []string{"failed: journal/FieldsRoundTrip", "check FAILED"}, nil)
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".annals-scratch-*")); len(left) > 0 {
		t.Errorf("scratch files left behind: %v", left)
	}
	cli(t, nil, "check", "--store", "sqlite:"+filepath.Join(t.TempDir(), "none.db")).want(t, 1, nil, []string{"annals init"})
	cli(t, nil, "check", "--store", "memory:", "--run", "(").want(t, 2, nil, []string{"--run"})
}
