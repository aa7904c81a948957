package entity_test

// Costs per entity as entity counts grow: what an idle live entity holds.
//
//	go test -run '^$' -bench IdleEntityMemory -benchtime 1x ./entity/

import (
	"context"
	"fmt"
	"runtime"
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
