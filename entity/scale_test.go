package entity_test

// Costs per entity as entity counts grow: what an idle live entity holds,
// and a million entities created, passivated and recovered in one process.
//
//	go test -run '^$' -bench IdleEntityMemory -benchtime 1x ./entity/
//	ANNALS_BENCH_ENTITIES=1000000 go test -run '^$' -bench ManyEntities -benchtime 1x -timeout 1h ./entity/

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annals-go/annals/entity"
)

// inUse returns the bytes of heap spans and goroutine stacks in use after
// garbage collection. It collects until the stacks stop shrinking: a
// collection halves an idle goroutine's stack at most once, and an entity
// that stays idle goes through many collections.
func inUse() uint64 {
	var m runtime.MemStats
	prev := uint64(0)
	for range 8 {
		runtime.GC()
		runtime.ReadMemStats(&m)
		if m.StackInuse == prev {
			break
		}
		prev = m.StackInuse
	}
	return m.HeapInuse + m.StackInuse
}

// BenchmarkIdleEntityMemory starts idleEntities live entities on the memory
// store, each having recovered and handled one command that persists
// nothing, and reports what one costs while idle ("bytes/entity"): the
// growth of heap and stacks in use (runtime.MemStats HeapInuse +
// StackInuse, after collection) divided by the count. With an idle timeout,
// each entity also holds its timer.
func BenchmarkIdleEntityMemory(b *testing.B) {
	const idleEntities = 10_000
	for _, c := range []struct {
		name string
		idle time.Duration
	}{
		{"no-idle-timeout", 0},
		{"idle-timeout", time.Hour},
	} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			var perEntity float64
			for b.Loop() {
				h := newHost(b, memoryStores(b), accountBehavior(), func(cfg *entity.HostConfig) { cfg.IdleTimeout = c.idle })
				before := inUse()
				for i := range idleEntities {
					if _, err := balance(ctx, h, fmt.Sprint("idle-", i)); err != nil {
						b.Fatal(err)
					}
				}
				after := inUse()
				if n := h.Live(); n != idleEntities {
					b.Fatalf("live = %d, want %d", n, idleEntities)
				}
				perEntity = (float64(after) - float64(before)) / idleEntities
				if err := h.Shutdown(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(perEntity, "bytes/entity")
		})
	}
}

// residentKiB returns the process's resident set size now and at its peak
// (VmRSS and VmHWM of /proc/self/status), in KiB; zeros where the file
// does not exist.
func residentKiB() (now, peak int64) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		var v int64
		if _, err := fmt.Sscanf(line, "VmRSS: %d kB", &v); err == nil {
			now = v
		}
		if _, err := fmt.Sscanf(line, "VmHWM: %d kB", &v); err == nil {
			peak = v
		}
	}
	return now, peak
}

// BenchmarkManyEntities creates ANNALS_BENCH_ENTITIES entities (default
// 100,000; docs/performance.md's run uses 1,000,000) on SQLite in one process, on a
// host that keeps at most 10,000 live: 1,000 clients each deposit once to
// their share of the ids (every entity persists one event, and all but the
// last 10,000 passivate to make room), then read each balance back, which
// recovers every passivated entity from the store. It reports the rate of
// each phase (created/s, recovered/s), the live count at the end, and the
// process's resident size after each phase and at its peak (MiB).
func BenchmarkManyEntities(b *testing.B) {
	n := 100_000
	if v := os.Getenv("ANNALS_BENCH_ENTITIES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			b.Fatalf("ANNALS_BENCH_ENTITIES=%q: want a positive count", v)
		}
	}
	const maxLive, clients = 10_000, 1000
	ctx := context.Background()
	for b.Loop() {
		st := sqliteStores(b)
		h := newHost(b, st, accountBehavior(), func(c *entity.HostConfig) { c.MaxLive = maxLive })
		phase := func(do func(id string) error) time.Duration {
			start := time.Now()
			var next atomic.Int64
			var wg sync.WaitGroup
			for range clients {
				wg.Go(func() {
					for i := next.Add(1) - 1; i < int64(n) && !b.Failed(); i = next.Add(1) - 1 {
						if err := do(fmt.Sprint("m-", i)); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			if b.Failed() {
				b.FailNow()
			}
			return time.Since(start)
		}
		created := phase(func(id string) error {
			_, err := deposit(ctx, h, id, 1)
			return err
		})
		afterCreate, _ := residentKiB()
		recovered := phase(func(id string) error {
			if got, err := balance(ctx, h, id); err != nil || got != 1 {
				return fmt.Errorf("balance of %s = %d, %v; want 1", id, got, err)
			}
			return nil
		})
		afterRecover, peak := residentKiB()
		if live := h.Live(); live > maxLive {
			b.Fatalf("live = %d, more than MaxLive = %d", live, maxLive)
		}
		b.ReportMetric(float64(n)/created.Seconds(), "created/s")
		b.ReportMetric(float64(n)/recovered.Seconds(), "recovered/s")
		b.ReportMetric(float64(afterCreate)/1024, "rss-created-MiB")
		b.ReportMetric(float64(afterRecover)/1024, "rss-recovered-MiB")
		b.ReportMetric(float64(peak)/1024, "rss-peak-MiB")
		b.ReportMetric(float64(h.Live()), "live")
		if err := h.Shutdown(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
