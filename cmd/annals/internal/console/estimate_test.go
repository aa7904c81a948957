package console

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/serialization"
)

type overviewAPI struct {
	Stats *struct {
		Source   string    `json:"source"`
		Estimate bool      `json:"estimate"`
		Total    typeStats `json:"total"`
	} `json:"stats"`
	StatsError string `json:"stats_error"`
}

// TestOverviewEstimate: at or above Options.EstimateAbove events by the
// store's cheap estimate (SQLite: the highest ordering; PostgreSQL:
// pg_class.reltuples), the overview shows the estimate, says so, and does
// not read the statistics; below it, the statistics.
func TestOverviewEstimate(t *testing.T) {
	t.Parallel()
	for _, ts := range testStores(t, true) {
		if ts.name == "memory" {
			continue
		}
		t.Run(ts.name, func(t *testing.T) {
			t.Parallel()
			url := ts.url(t)
			s := openStore(t, url)
			if pr, ok := s.Admin.(postgresReader); ok {
				if _, err := pr.Pool().Exec(context.Background(), `ANALYZE `+pr.Schema()+`.event_journal`); err != nil {
					t.Fatal(err)
				}
			}
			const written = 3 + 1 + 3 + manyEvents + 1 // 2 of them deleted
			_, big := newServer(t, s, url, func(o *Options) { o.EstimateAbove = 100 })
			var d overviewAPI
			getJSON(t, big.URL+"/api/overview", &d)
			if d.Stats == nil || !d.Stats.Estimate || !strings.Contains(d.Stats.Source, "an estimate") || d.Stats.Total.Events < written-2 || d.Stats.Total.Events > written {
				t.Errorf("above the threshold: %+v %s, want an estimate of about %d events", d.Stats, d.StatsError, written)
			}
			if _, body, _ := get(t, nil, big.URL+"/"); !strings.Contains(body, "These figures are an estimate") {
				t.Errorf("the overview does not say its figures are an estimate:\n%s", body)
			}
			_, small := newServer(t, s, url, nil)
			getJSON(t, small.URL+"/api/overview", &d)
			if d.Stats == nil || d.Stats.Estimate || d.Stats.Total.Events != written-2 {
				t.Errorf("below the threshold: %+v %s, want the statistics' %d events", d.Stats, d.StatsError, written-2)
			}
		})
	}
}

// TestBigStore measures, with ANNALS_CONSOLE_BIG set (1: 1,000,000
// events; or a number of events), the console on a SQLite journal holding
// that many events of one id, written in atomic writes of 1,000 events: the
// time of the timeline's first page (HTML and API) and of the overview,
// beside the store's own statistics. It prints the figures; it asserts no
// times.
func TestBigStore(t *testing.T) {
	v := os.Getenv("ANNALS_CONSOLE_BIG")
	if v == "" {
		t.Skip("set ANNALS_CONSOLE_BIG=1 (1,000,000 events) or a number of events")
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 {
		t.Fatalf("ANNALS_CONSOLE_BIG=%q: want 1 or a number of events", v)
	}
	if n == 1 {
		n = 1_000_000
	}
	dir := t.TempDir()
	if d := os.Getenv("ANNALS_CONSOLE_BIG_DIR"); d != "" {
		dir = d
	}
	url := "sqlite:" + filepath.Join(dir, fmt.Sprintf("big-%d.db", n))
	ctx := context.Background()
	s, err := stores.New().Open(ctx, url, stores.Create)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	const pid = "Account|big"
	have, err := s.Journal.HighestSequenceNr(ctx, pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	const batch = 1000
	for seq := have + 1; seq <= n; {
		var ws []journal.AtomicWrite
		for range 10 {
			aw := journal.AtomicWrite{PersistenceID: pid}
			for i := 0; i < batch && seq <= n; i++ {
				aw.Events = append(aw.Events, journal.Repr{PersistenceID: pid, SequenceNr: seq, Payload: fmt.Appendf(nil, `{"amount":%d}`, seq%1000+1),
					SerializerID: serialization.JSONID, Manifest: "bank.Deposited.v2", WriterID: "big", Timestamp: time.Now(), Tags: []string{"bank"}})
				seq++
			}
			if len(aw.Events) > 0 {
				ws = append(ws, aw)
			}
		}
		if errs, err := s.Journal.Write(ctx, ws); err != nil || errs != nil {
			t.Fatal(errs, err)
		}
	}
	t.Logf("wrote %d events of %s in %s (%s already there)", n-have, pid, time.Since(start).Round(time.Millisecond), num(have))
	_, hs := newServer(t, s, url, func(o *Options) { o.SampleEvery = time.Hour })
	timed := func(what, path string) {
		for i := range 3 {
			start := time.Now()
			code, body, _ := get(t, nil, hs.URL+path)
			took := time.Since(start)
			if code != 200 {
				t.Fatalf("%s: %d %s", path, code, body)
			}
			t.Logf("%s, request %d: %s (%d bytes)", what, i+1, took.Round(100*time.Microsecond), len(body))
		}
	}
	timed("timeline, first page (HTML)", "/entity?id="+urlQuery(pid))
	timed("timeline, first page (API)", "/api/entity?id="+urlQuery(pid))
	timed("timeline, last page (API)", fmt.Sprintf("/api/entity?id=%s&from=%d", urlQuery(pid), n-99))
	timed("overview (API)", "/api/overview")
	if os.Getenv("ANNALS_CONSOLE_BIG_STATS") != "" {
		start = time.Now()
		if _, err := s.Admin.(admin.StatsReader).Stats(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("the store's own statistics (admin.StatsReader): %s", time.Since(start).Round(time.Millisecond))
	}
}
