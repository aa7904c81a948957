package postgres_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/store/postgres"
)

// BenchmarkWriteSplit: whether 100 writers gain from the front splitting
// their writes across two calls in flight, per ordering. Three sides take
// turns, a sixth of the events each time, each side first, second and
// third twice: a front
// (MaxCalls 2) that splits from 50 writes a call (TimestampOrder's
// SplitWrites, see engine.WriteSplit), one that splits from 200 (the
// front's default, so one call of 100), each before a store of its own,
// and the raw insert of BenchmarkWriteIDs. 100 goroutines, one per id,
// persist their own events one at a time through each front. It reports
// each side's events per second and "split/nosplit", the first front's
// rate over the second's, with each front's rate over the raw insert's:
//
//	go test -run '^$' -bench WriteSplit -benchtime 100000x -count 3 ./store/postgres/
func BenchmarkWriteSplit(b *testing.B) {
	const ids, turns = 100, 6
	pids := make([]string, ids)
	for i := range pids {
		pids[i] = fmt.Sprintf("Bench|id-%d", i)
	}
	for _, o := range benchOrderings {
		b.Run(o.name, func(b *testing.B) {
			front := func(split int) func(from, to int64) {
				f, err := engine.NewFront(open(b, postgres.WithOrdering(o.ordering)).Journal(), engine.Config{MaxCalls: 2, SplitWrites: split})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = f.Close() })
				return func(from, to int64) { persistEach(b, f, pids, from, to) }
			}
			pool, tbl := rawSchema(b)
			sql, rows := rawInsert(tbl), newRawRows(pids)
			sides := []struct {
				name string
				run  func(from, to int64)
			}{
				{"split", front(50)},
				{"nosplit", front(engine.DefaultSplitWrites)},
				{"raw", func(from, to int64) {
					for seq := from + 1; seq <= to; seq++ {
						rows.insert(b, pool, sql, seq)
					}
				}},
			}
			took := make([]time.Duration, len(sides))
			perID := (b.N + ids - 1) / ids
			b.ResetTimer()
			for turn := range turns {
				from, to := int64(perID*turn/turns), int64(perID*(turn+1)/turns)
				for j := range sides {
					k := (j + turn) % len(sides)
					start := time.Now()
					sides[k].run(from, to)
					took[k] += time.Since(start)
				}
			}
			events := float64(perID * ids)
			for k, s := range sides {
				b.ReportMetric(events/took[k].Seconds(), s.name+"-events/s")
			}
			b.ReportMetric(took[1].Seconds()/took[0].Seconds(), "split/nosplit")
			b.ReportMetric(took[2].Seconds()/took[0].Seconds(), "split/raw")
			b.ReportMetric(took[2].Seconds()/took[1].Seconds(), "nosplit/raw")
		})
	}
}
