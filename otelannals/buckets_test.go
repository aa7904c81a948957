package otelannals_test

import (
	"maps"
	"slices"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/otelannals"
	"github.com/annals-go/annals/projection"
	"github.com/annals-go/annals/query"
)

// quantileBucket returns the bounds (lower, upper] of the bucket holding
// the q-quantile of a histogram data point, as a percentile is read from
// buckets (Prometheus' histogram_quantile picks the same bucket).
func quantileBucket(dp metricdata.HistogramDataPoint[float64], q float64) (lower, upper float64) {
	rank := q * float64(dp.Count)
	var seen uint64
	for i, n := range dp.BucketCounts {
		seen += n
		if float64(seen) >= rank {
			lower, upper = -1, float64(1e300)
			if i > 0 {
				lower = dp.Bounds[i-1]
			}
			if i < len(dp.Bounds) {
				upper = dp.Bounds[i]
			}
			return lower, upper
		}
	}
	return -1, 1e300
}

// TestDurationHistogramsPlaceSecondsInTheirBuckets: every duration
// histogram (store calls, recoveries, projection lag) records seconds into
// explicit buckets from 100 µs up, so durations from sub-millisecond to
// seconds fall in distinct buckets and their percentiles can be read:
// 100 durations, half 300 µs, 40 at 3 ms, 9 at 40 ms and one at 2 s,
// have their median in (250 µs, 500 µs], p90 in (2.5 ms, 5 ms], p99 in
// (25 ms, 50 ms] and maximum in (1 s, 2.5 s].
func TestDurationHistogramsPlaceSecondsInTheirBuckets(t *testing.T) {
	t.Parallel()
	durations := make([]time.Duration, 0, 100)
	for _, d := range []struct {
		d time.Duration
		n int
	}{{300 * time.Microsecond, 50}, {3 * time.Millisecond, 40}, {40 * time.Millisecond, 9}, {2 * time.Second, 1}} {
		for range d.n {
			durations = append(durations, d.d)
		}
	}
	id := projection.ID{Name: "balances", Key: "0-1023"}
	for _, c := range []struct {
		name   string
		bounds []float64
		record func(tel *otelannals.Telemetry, d time.Duration)
	}{
		{"annals.journal.call.duration", otelannals.DurationBuckets(), func(tel *otelannals.Telemetry, d time.Duration) {
			tel.OnWriteCall(engine.WriteCall{Writes: 1, Events: 1, Start: time.Now(), Duration: d})
		}},
		{"annals.entity.recovery.duration", otelannals.DurationBuckets(), func(tel *otelannals.Telemetry, d time.Duration) {
			tel.OnRecovered(entity.Recovered{PersistenceID: "Account|a", Duration: d})
		}},
		{"annals.projection.lag", otelannals.LagBuckets(), func(tel *otelannals.Telemetry, d time.Duration) {
			tel.OnOffsetSaved(id, query.SequenceOffset(1), d)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			reader := sdkmetric.NewManualReader()
			tel, err := otelannals.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tel.Close()
			for _, d := range durations {
				c.record(tel, d)
			}
			var rm metricdata.ResourceMetrics
			if err := reader.Collect(t.Context(), &rm); err != nil {
				t.Fatal(err)
			}
			var dp *metricdata.HistogramDataPoint[float64]
			var unit string
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == c.name && len(h.DataPoints) == 1 {
						dp, unit = &h.DataPoints[0], m.Unit
					}
				}
			}
			if dp == nil {
				t.Fatalf("no histogram %s with one data point in %+v", c.name, rm)
			}
			if unit != "s" || dp.Count != 100 || !slices.Equal(dp.Bounds, c.bounds) {
				t.Fatalf("%s: unit %q, count %d, bounds %v; want s, 100, %v", c.name, unit, dp.Count, dp.Bounds, c.bounds)
			}
			if dp.Bounds[0] >= 0.001 || !slices.Contains(dp.Bounds, 10) {
				t.Errorf("bounds %v do not run from below a millisecond to 10 s", dp.Bounds)
			}
			// Each duration alone in its bucket, with its count.
			counts := map[float64]uint64{}
			for i, n := range dp.BucketCounts {
				if n > 0 {
					counts[dp.Bounds[i]] = n
				}
			}
			if want := map[float64]uint64{0.0005: 50, 0.005: 40, 0.05: 9, 2.5: 1}; !maps.Equal(counts, want) {
				t.Errorf("counts by upper bound %v, want %v", counts, want)
			}
			for _, p := range []struct {
				q, value float64
			}{{0.5, 0.0003}, {0.9, 0.003}, {0.99, 0.04}, {1, 2}} {
				lo, up := quantileBucket(*dp, p.q)
				if !(lo < p.value && p.value <= up) || up > 2.5*lo {
					t.Errorf("p%v read from the buckets in (%v, %v], want a bucket of at most ×2.5 holding %v s", p.q*100, lo, up, p.value)
				}
			}
		})
	}
}
