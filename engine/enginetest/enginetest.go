// Package enginetest helps benchmarks of stores measure them through the
// journal front, as entities use them.
package enginetest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/journal"
)

// MeteredFront puts a journal front with configuration cfg before j,
// closes it when the benchmark ends, and then reports the mean number of
// atomic writes per store call ("writes/call") and the time a store call
// was in flight as a share of the time the front was measured
// ("store-busy"; it exceeds 1 while calls overlap). measured returns that
// time; when nil, it is the benchmark's b.Elapsed(). The front takes the
// defaults it would take from j itself (Config.JournalDefaults), which
// the counting wrapper hides.
func MeteredFront(b *testing.B, j journal.Journal, cfg engine.Config, measured func() time.Duration) *engine.Front {
	b.Helper()
	c := &countingJournal{Journal: j}
	f, err := engine.NewFront(c, cfg.JournalDefaults(j))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = f.Close()
		if calls := c.calls.Load(); calls > 0 {
			b.ReportMetric(float64(c.writes.Load())/float64(calls), "writes/call")
			d := b.Elapsed()
			if measured != nil {
				d = measured()
			}
			b.ReportMetric(float64(c.nanos.Load())/float64(d), "store-busy")
		}
	})
	return f
}

// countingJournal counts the store calls, the atomic writes and the time
// in Write.
type countingJournal struct {
	journal.Journal
	calls, writes, nanos atomic.Int64
}

func (c *countingJournal) Write(ctx context.Context, ws []journal.AtomicWrite) ([]error, error) {
	c.calls.Add(1)
	c.writes.Add(int64(len(ws)))
	start := time.Now()
	defer func() { c.nanos.Add(int64(time.Since(start))) }()
	return c.Journal.Write(ctx, ws)
}
