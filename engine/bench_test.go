package engine_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/memory"
)

// BenchmarkPersistOverhead measures what the front adds to one persist of a
// lone writer: the memory store's own cost beside the same writes through
// the front.
func BenchmarkPersistOverhead(b *testing.B) {
	b.Run("direct", func(b *testing.B) {
		j := memory.New().Journal()
		seq := int64(0)
		for b.Loop() {
			seq++
			if _, err := j.Write(b.Context(), []journal.AtomicWrite{one("p", seq)}); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, c := range []struct {
		name  string
		hooks []any
	}{
		{"front", nil},
		{"front-with-write-hook", []any{noopHook{}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			f, _ := engine.NewFront(memory.New().Journal(), engine.Config{Hooks: c.hooks})
			defer f.Close()
			seq := int64(0)
			for b.Loop() {
				seq++
				if err := f.Persist(b.Context(), one("p", seq)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// noopHook is a write-call hook that does nothing: the cost of a hook is
// the call and the WriteCall it is given.
type noopHook struct{}

func (noopHook) OnWriteCall(engine.WriteCall) {}

// slowJournal is the memory store's journal whose Write takes a
// millisecond more, as a database's round trip and commit do. It counts
// its calls and the time at least one call was in flight.
type slowJournal struct {
	journal.Journal
	calls atomic.Int64

	mu     sync.Mutex
	flying int
	since  time.Time     // when flying last became 1
	busy   time.Duration // time with a call in flight, calls ended
}

func (s *slowJournal) Write(ctx context.Context, writes []journal.AtomicWrite) ([]error, error) {
	s.mu.Lock()
	if s.flying++; s.flying == 1 {
		s.since = time.Now()
	}
	s.mu.Unlock()
	res, err := s.Journal.Write(ctx, writes)
	time.Sleep(time.Millisecond)
	s.mu.Lock()
	if s.flying--; s.flying == 0 {
		s.busy += time.Since(s.since)
	}
	s.mu.Unlock()
	s.calls.Add(1)
	return res, err
}

// BenchmarkHandOffGap measures what the front costs between two store
// calls when every writer waits for its write: ids goroutines, one per
// id, persist their own events one at a time (b.N rounded up to a
// multiple of ids, in all) through a front before the memory store slowed
// by a millisecond per call. The writers of a call in flight cannot write
// again until it ends, so with one call in flight (MaxCalls 1, or too few
// writers to split) the front answers every writer between calls and each
// writes its next event while the store waits; with two, one call's
// writers come back while the other is in flight. It reports the share of
// the time with a call in flight ("busy"), the time without one per call
// ("gap-µs/call") and the writes per call:
//
//	go test -run '^$' -bench HandOffGap -benchtime 50000x -count 3 ./engine/
func BenchmarkHandOffGap(b *testing.B) {
	for _, ids := range []int{100, 1000} {
		for _, calls := range []int{1, 2} {
			b.Run(fmt.Sprintf("ids=%d/calls=%d", ids, calls), func(b *testing.B) {
				sj := &slowJournal{Journal: memory.New().Journal()}
				f, err := engine.NewFront(sj, engine.Config{MaxCalls: calls})
				if err != nil {
					b.Fatal(err)
				}
				defer f.Close()
				per := (b.N + ids - 1) / ids
				start := time.Now()
				var wg sync.WaitGroup
				for i := range ids {
					pid := fmt.Sprint("p-", i)
					wg.Go(func() {
						for seq := int64(1); seq <= int64(per); seq++ {
							if err := f.Persist(b.Context(), one(pid, seq)); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				wall, n := time.Since(start), sj.calls.Load()
				sj.mu.Lock()
				busy := sj.busy
				sj.mu.Unlock()
				b.ReportMetric(float64(per*ids)/float64(n), "writes/call")
				b.ReportMetric(float64(wall-busy)/float64(n)/1e3, "gap-µs/call")
				b.ReportMetric(float64(busy)/float64(wall), "busy")
			})
		}
	}
}
