package main

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/annals-go/annals/cmd/annals/internal/demo"
)

// metricValues sums the samples of each metric of a Prometheus text
// exposition over their labels.
func metricValues(t *testing.T, body string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		name := line[:i]
		if j := strings.IndexByte(name, '{'); j >= 0 {
			name = name[:j]
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("sample %q: %v", line, err)
		}
		out[name] += v
	}
	return out
}

// TestDemoServesMetrics runs the demo with --metrics on a free port and
// scrapes /metrics while it runs: after the read model was verified, when
// the second host's entities are live and the projections have saved their
// offsets.
func TestDemoServesMetrics(t *testing.T) {
	var scraped, url string
	d := &demoCmd{reported: func(r demo.Report, metricsURL string) {
		if _, ok := r.(demo.ReadModelVerified); !ok {
			return
		}
		url = metricsURL
		resp, err := http.Get(metricsURL)
		if err != nil {
			t.Errorf("GET %s: %v", metricsURL, err)
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %s, %v", metricsURL, resp.Status, err)
		}
		scraped = string(b)
	}}
	var stdout, stderr bytes.Buffer
	args := []string{"--store", "memory:", "--accounts", "20", "--ops", "500", "--concurrency", "4", "--seed", "5", "--metrics", "127.0.0.1:0"}
	if _, err := runDemoCmd(t.Context(), d, &stdout, &stderr, args); err != nil {
		t.Fatalf("%v\n%s%s", err, &stdout, &stderr)
	}
	if url == "" || !strings.Contains(stdout.String(), "metrics      "+url+" ") {
		t.Errorf("the metrics URL %q is not printed:\n%s", url, &stdout)
	}
	got := metricValues(t, scraped)
	for _, name := range []string{
		"annals_journal_writes_total",
		"annals_journal_events_total",
		"annals_journal_call_duration_seconds_count",
		"annals_journal_call_duration_seconds_sum",
		"annals_entity_live",
		"annals_entity_recoveries_total",
		"annals_projection_lag_seconds_count",
		"annals_projection_offsets_saved_total",
	} {
		if got[name] <= 0 {
			t.Errorf("%s = %v, want > 0", name, got[name])
		}
	}
	if got["annals_entity_live"] != 20 {
		t.Errorf("annals_entity_live = %v, want the 20 accounts of the second host", got["annals_entity_live"])
	}
	if t.Failed() {
		t.Logf("scraped:\n%s", scraped)
	}
}

// TestDemoTelemetryWithoutServer runs the demo with the adapter and no
// server (--telemetry, for measuring its cost).
func TestDemoTelemetryWithoutServer(t *testing.T) {
	var stdout, stderr bytes.Buffer
	args := []string{"--store", "memory:", "--accounts", "5", "--ops", "100", "--concurrency", "2", "--seed", "5", "--telemetry"}
	d := &demoCmd{}
	if _, err := runDemoCmd(t.Context(), d, &stdout, &stderr, args); err != nil {
		t.Fatalf("%v\n%s%s", err, &stdout, &stderr)
	}
	if d.metricsURL != "" || !strings.Contains(stdout.String(), "not served") || len(d.cfg.Hooks) != 1 {
		t.Errorf("url %q, hooks %v, output:\n%s", d.metricsURL, d.cfg.Hooks, &stdout)
	}
}
