package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/annals-go/annals/cmd/annals/internal/demo"
	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

// runDemo runs annals demo with args (flags only) and returns its result.
func runDemo(ctx context.Context, stdout, stderr io.Writer, args []string) (demo.Result, error) {
	return runDemoCmd(ctx, &demoCmd{}, stdout, stderr, args)
}

// runDemoCmd runs d with args (flags only).
func runDemoCmd(ctx context.Context, d *demoCmd, stdout, stderr io.Writer, args []string) (demo.Result, error) {
	fs := flag.NewFlagSet("annals demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	d.flags(fs)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return demo.Result{}, err
	}
	e := &env{ctx: ctx, stdout: stdout, stderr: stderr, stdin: bufio.NewReader(strings.NewReader("")), getenv: os.Getenv, mux: stores.New()}
	return d.run(e, pos)
}

var (
	totalRE     = regexp.MustCompile(`total balance (-?\d+)`)
	readModelRE = regexp.MustCompile(`(?m)^read model: ([\d,]+) accounts, total (-?\d+) cents, caught up in \S+: equals the model$`)
	progressRE  = regexp.MustCompile(`(?m)^progress +\d+%.* read model total -?\d+ cents, [\d,]+ events behind$`)
)

// totals returns the total balances a demo run printed: at the start and
// after verification.
func totals(t *testing.T, out string) (start, final int64) {
	t.Helper()
	m := totalRE.FindAllStringSubmatch(out, -1)
	if len(m) != 2 {
		t.Fatalf("want 2 total balances in the output, got %d:\n%s", len(m), out)
	}
	start, _ = strconv.ParseInt(m[0][1], 10, 64)
	final, _ = strconv.ParseInt(m[1][1], 10, 64)
	return start, final
}

func TestDemoTwiceOnSQLiteContinues(t *testing.T) {
	args := []string{"--store", "sqlite:" + filepath.Join(t.TempDir(), "demo.db"),
		"--accounts", "50", "--ops", "2000", "--concurrency", "16", "--seed", "7"}
	var finals []int64
	for run := 1; run <= 2; run++ {
		var stdout, stderr bytes.Buffer
		if _, err := runDemo(context.Background(), &stdout, &stderr, args); err != nil {
			t.Fatalf("run %d: %v\nstdout:\n%s\nstderr:\n%s", run, err, &stdout, &stderr)
		}
		out := stdout.String()
		t.Logf("run %d:\n%s", run, out)
		if !strings.Contains(out, "verified 50 accounts: OK") {
			t.Fatalf("run %d: no verification in the output:\n%s", run, out)
		}
		if !strings.Contains(out, "seed 7") {
			t.Errorf("run %d: the seed is not printed:\n%s", run, out)
		}
		if !strings.Contains(stderr.String(), "progress 100%") {
			t.Errorf("run %d: stderr (not a terminal) has no line progress:\n%s", run, &stderr)
		}
		start, final := totals(t, out)
		if !strings.Contains(out, "read model   table account_balance, kept exactly once by 4 projection instances") {
			t.Errorf("run %d: the read model's projections are not announced:\n%s", run, out)
		}
		if m := readModelRE.FindStringSubmatch(out); m == nil {
			t.Errorf("run %d: no read-model verification in the output:\n%s", run, out)
		} else if total, _ := strconv.ParseInt(m[2], 10, 64); m[1] != "50" || total != final {
			t.Errorf("run %d: read model of %s accounts with total %d, want 50 accounts and the verified total %d", run, m[1], total, final)
		}
		if !progressRE.MatchString(stderr.String()) {
			t.Errorf("run %d: the progress lines do not report the read model:\n%s", run, &stderr)
		}
		switch run {
		case 1:
			if start != 0 || !strings.Contains(out, "fresh store") {
				t.Errorf("run 1 starts from total %d, want a fresh store:\n%s", start, out)
			}
			if final <= 0 {
				t.Errorf("run 1 ends with total balance %d, want > 0", final)
			}
		case 2:
			if start != finals[0] {
				t.Errorf("run 2 starts from total %d, run 1 ended with %d", start, finals[0])
			}
			if !strings.Contains(out, "continuing from") {
				t.Errorf("run 2 does not say it continues:\n%s", out)
			}
		}
		finals = append(finals, final)
	}
}

func TestDemoResultOnMemory(t *testing.T) {
	var stdout, stderr bytes.Buffer
	res, err := runDemo(context.Background(), &stdout, &stderr, []string{"--store", "memory:", "--accounts", "10", "--ops", "500", "--concurrency", "8", "--seed", "1"})
	if err != nil {
		t.Fatalf("%v\n%s%s", err, &stdout, &stderr)
	}
	if res.Ops != 500 || res.Accepted+res.Rejected+res.Failed != 500 || res.Failed != 0 {
		t.Errorf("ops %d = accepted %d + rejected %d + failed %d, want 500 and no failure", res.Ops, res.Accepted, res.Rejected, res.Failed)
	}
	if res.Rejected == 0 {
		t.Errorf("no overdraft was rejected in 500 operations on 10 accounts")
	}
	if int64(len(res.Latencies)) != res.Commands || res.Commands < res.Ops {
		t.Errorf("%d latencies for %d commands (%d operations)", len(res.Latencies), res.Commands, res.Ops)
	}
	if res.StartTotal != 0 || res.FinalTotal <= 0 {
		t.Errorf("totals: start %d, final %d", res.StartTotal, res.FinalTotal)
	}
	// The memory store keeps the read model too, in its own transactions.
	if m := readModelRE.FindStringSubmatch(stdout.String()); m == nil {
		t.Errorf("on memory the read model is not verified:\n%s", &stdout)
	} else if total, _ := strconv.ParseInt(m[2], 10, 64); total != res.FinalTotal {
		t.Errorf("read model total %d, want the verified total %d", total, res.FinalTotal)
	}
}

func TestDemoInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no operation starts; the run still recovers and verifies
	var stdout, stderr bytes.Buffer
	res, err := runDemo(ctx, &stdout, &stderr, []string{"--store", "memory:", "--accounts", "5", "--ops", "1000", "--concurrency", "4", "--seed", "1"})
	if err != nil {
		t.Fatalf("%v\n%s%s", err, &stdout, &stderr)
	}
	out := stdout.String()
	if res.Ops != 0 || !strings.Contains(out, "interrupted") || !strings.Contains(out, "verified 5 accounts after the interrupt: each balance equals the model") || strings.Contains(out, "OK") {
		t.Errorf("ops %d, output:\n%s", res.Ops, &stdout)
	}
}

func TestRunExitCodes(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		args         []string
		code         int
		stdout, errs string // substrings expected
	}{
		{args: []string{"frobnicate"}, code: exitUsage, errs: `unknown command "frobnicate"`},
		{args: nil, code: exitUsage, errs: "Usage: annals"},
		{args: []string{"help"}, code: exitOK, stdout: "Usage: annals"},
		{args: []string{"help", "demo"}, code: exitOK, stdout: "-accounts"},
		{args: []string{"demo", "-h"}, code: exitOK, stdout: "--concurrency"},
		{args: []string{"demo", "--nope"}, code: exitUsage, errs: "flag provided but not defined"},
		{args: []string{"demo", "--accounts", "1"}, code: exitUsage, errs: "--accounts must be at least 2"},
		{args: []string{"demo", "extra"}, code: exitUsage, errs: "unexpected arguments: extra"},
		{args: []string{"demo", "--store", "nosuch:x"}, code: exitUsage, errs: `unknown store URL "nosuch:x"`},
	} {
		var stdout, stderr bytes.Buffer
		code := run(ctx, tc.args, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stdout.String(), tc.stdout) || !strings.Contains(stderr.String(), tc.errs) {
			t.Errorf("run %q: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", tc.args, code, tc.code, &stdout, &stderr)
		}
	}
}

func TestProgressCarriesStatus(t *testing.T) {
	var out bytes.Buffer
	p := newProgress(&out)
	p.status = func(bar bool) string { return fmt.Sprintf(" [status bar=%v]", bar) }
	var done atomic.Int64
	done.Store(10)
	p.total, p.done = 10, &done
	p.report(false)
	if got := out.String(); !strings.Contains(got, "progress 100%") || !strings.HasSuffix(got, " [status bar=false]\n") {
		t.Errorf("progress lines %q, want the status at the end of each", got)
	}
}

// TestDemoIgnoresANNALS_STORE: with ANNALS_STORE naming the user's store
// (as the other commands read it), the demo runs on its own file in the
// working directory, says so, and leaves the user's store as it was.
func TestDemoIgnoresANNALS_STORE(t *testing.T) {
	user := fixture(t, sqliteKind)
	unchanged := user.watch(t)
	t.Setenv("ANNALS_STORE", user.url)
	dir := t.TempDir()
	t.Chdir(dir)
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"demo", "--accounts", "5", "--ops", "100", "--concurrency", "4", "--seed", "2"}, &stdout, &stderr)
	out := stdout.String()
	if code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, &stderr)
	}
	unchanged("the demo")
	own := filepath.Join(dir, "annals-demo.db")
	if _, err := os.Stat(own); err != nil {
		t.Errorf("the demo's own file: %v", err)
	}
	if !strings.Contains(out, "store        SQLite file "+own+": the demo's own; it does not use $ANNALS_STORE") {
		t.Errorf("the demo does not say which store it uses:\n%s", out)
	}
}

// TestDemoOnPostgres runs annals demo on PostgreSQL named by --store, with
// its read model in the store's schema.
func TestDemoOnPostgres(t *testing.T) {
	dsn, schema := pgtest.Schema(t)
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"demo", "--store", dsn, "--accounts", "20", "--ops", "500", "--concurrency", "8", "--seed", "2"}, &stdout, &stderr)
	out := stdout.String()
	if code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, &stderr)
	}
	if !strings.Contains(out, "store        PostgreSQL") || !strings.Contains(out, "schema "+schema) || !strings.Contains(out, "from --store") {
		t.Errorf("the demo did not run on --store:\n%s", out)
	}
	_, final := totals(t, out)
	if m := readModelRE.FindStringSubmatch(out); m == nil {
		t.Errorf("no read-model verification in the output:\n%s", out)
	} else if total, _ := strconv.ParseInt(m[2], 10, 64); m[1] != "20" || total != final {
		t.Errorf("read model of %s accounts with total %d, want 20 accounts and the verified total %d", m[1], total, final)
	}
}
