package demo_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/annals-go/annals/cmd/annals/internal/demo"
	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

// reports collects what a run reported.
type reports []demo.Report

func find[R demo.Report](rs reports) (R, bool) {
	for _, r := range rs {
		if v, ok := r.(R); ok {
			return v, true
		}
	}
	var zero R
	return zero, false
}

// TestRunKeepsTheReadModelOnEveryStore runs the demo twice on each store
// that can keep the read model: the second run continues from the first's
// balances, and the read model equals the verified balances each time.
func TestRunKeepsTheReadModelOnEveryStore(t *testing.T) {
	for _, tc := range []struct {
		name string
		url  func(t *testing.T) string
		// persistent: a second open sees the first run's events.
		persistent bool
	}{
		{"sqlite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "demo.db") }, true},
		{"memory", func(*testing.T) string { return "memory:" }, false},
		{"postgres", func(t *testing.T) string { dsn, _ := pgtest.Schema(t); return dsn }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := tc.url(t)
			var last int64
			for run := 1; run <= 2; run++ {
				st, err := stores.New().Open(t.Context(), url, stores.Create)
				if err != nil {
					t.Fatal(err)
				}
				var rs reports
				cfg := demo.Config{Accounts: 20, Ops: 400, Concurrency: 8, Seed: uint64(run), Report: func(r demo.Report) { rs = append(rs, r) }}
				res, err := demo.Run(t.Context(), st, cfg)
				if cerr := st.Close(); cerr != nil {
					t.Error(cerr)
				}
				if err != nil {
					t.Fatalf("run %d: %v\nreports: %+v", run, err, rs)
				}
				if res.Ops != 400 || res.Accepted+res.Rejected+res.Failed != 400 || res.Failed != 0 {
					t.Errorf("run %d: ops %d = accepted %d + rejected %d + failed %d, want 400 and no failure", run, res.Ops, res.Accepted, res.Rejected, res.Failed)
				}
				if want := map[bool]int64{true: last, false: 0}[tc.persistent]; res.StartTotal != want {
					t.Errorf("run %d starts from total %d, want %d", run, res.StartTotal, want)
				}
				if _, ok := find[demo.ReadModelStarted](rs); !ok {
					t.Fatalf("run %d: no read model started: %+v", run, rs)
				}
				rv, ok := find[demo.ReadModelVerified](rs)
				if !ok || rv.Total != res.FinalTotal || len(rv.Mismatches) != 0 || rv.Accounts == 0 {
					t.Errorf("run %d: read model %+v (found %v), want total %d and no mismatch", run, rv, ok, res.FinalTotal)
				}
				last = res.FinalTotal
			}
		})
	}
}

// TestRunReportsInOrder checks the order of the reports and that OpsDone
// comes while the operations' figures are final.
func TestRunReportsInOrder(t *testing.T) {
	st, err := stores.New().Open(t.Context(), "memory:", stores.Create)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var kinds []string
	var done demo.OpsDone
	cfg := demo.Config{Accounts: 10, Ops: 500, Concurrency: 4, Seed: 1, Report: func(r demo.Report) {
		switch r := r.(type) {
		case demo.ReadModelStarted:
			kinds = append(kinds, "readmodel")
		case demo.Started:
			kinds = append(kinds, "started")
		case demo.OpsStarted:
			kinds = append(kinds, "ops")
		case demo.OpsDone:
			kinds = append(kinds, "done")
			done = r
		case demo.HostStopped:
			kinds = append(kinds, "stopped")
		case demo.Recovered:
			kinds = append(kinds, "recovered")
		case demo.Verified:
			kinds = append(kinds, "verified")
		case demo.ReadModelVerified:
			kinds = append(kinds, "readmodel-verified")
		default:
			t.Errorf("unexpected report %T", r)
		}
	}}
	res, err := demo.Run(t.Context(), st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"readmodel", "started", "ops", "done", "stopped", "recovered", "verified", "readmodel-verified"}
	if len(kinds) != len(want) {
		t.Fatalf("reports %v, want %v", kinds, want)
	}
	for i := range want {
		if kinds[i] != want[i] {
			t.Fatalf("reports %v, want %v", kinds, want)
		}
	}
	if done.Ops != res.Ops || done.Commands != res.Commands || int64(len(done.Latencies)) != done.Commands || done.Interrupted {
		t.Errorf("OpsDone %+v, result %+v", done.Operations, res.Operations)
	}
	if done.Deposits+done.Withdrawals+done.Transfers != done.Ops || done.WithdrawalsRejected+done.TransfersRejected != done.Rejected {
		t.Errorf("kinds do not add up: %+v", done.Operations)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg demo.Config
		ok  bool
	}{
		{demo.Config{Accounts: 2, Ops: 0, Concurrency: 1}, true},
		{demo.Config{Accounts: 1, Ops: 0, Concurrency: 1}, false},
		{demo.Config{Accounts: 2, Ops: -1, Concurrency: 1}, false},
		{demo.Config{Accounts: 2, Ops: 0, Concurrency: 0}, false},
	} {
		if err := tc.cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: Validate() = %v, want ok %v", tc.cfg, err, tc.ok)
		}
	}
}

// TestRunSkipsTheReadModelWithoutTransactions runs on a store whose offset
// store the read model cannot use: the run goes on without it.
func TestRunSkipsTheReadModelWithoutTransactions(t *testing.T) {
	st, err := stores.New().Open(context.Background(), "memory:", stores.Create)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	st.Offsets = nil
	var rs reports
	res, err := demo.Run(t.Context(), st, demo.Config{Accounts: 5, Ops: 100, Concurrency: 2, Seed: 3, Report: func(r demo.Report) { rs = append(rs, r) }})
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := find[demo.ReadModelSkipped](rs); !ok || s.Reason == "" {
		t.Errorf("no ReadModelSkipped with a reason: %+v", rs)
	}
	if _, ok := find[demo.ReadModelVerified](rs); ok {
		t.Errorf("a skipped read model was verified: %+v", rs)
	}
	if res.Ops != 100 {
		t.Errorf("%d operations, want 100", res.Ops)
	}
}
