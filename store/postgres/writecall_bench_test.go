package postgres_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/postgres"
)

// BenchmarkWriteCall: the store's call alone (Journal.Write of one event
// of each of N ids, no front), beside the raw insert of the same rows
// (rawInsert), call by call in turns, so that both see the same machine.
// It reports each side's calls per second and their ratio, per ordering,
// with NOTIFY on (the default) and off.
//
//	go test -run '^$' -bench 'WriteCall/^ids=100$/' -benchtime 2000x ./store/postgres/
func BenchmarkWriteCall(b *testing.B) {
	for _, ids := range []int{1, 100, 1000} {
		pids := make([]string, ids)
		for i := range pids {
			pids[i] = fmt.Sprintf("Bench|id-%d", i)
		}
		for _, o := range benchOrderings {
			for _, notify := range []bool{true, false} {
				b.Run(fmt.Sprintf("ids=%d/%s/notify=%t", ids, o.name, notify), func(b *testing.B) {
					j := open(b, postgres.WithOrdering(o.ordering), postgres.WithNotify(notify)).Journal()
					pool, tbl := rawSchema(b)
					sql := rawInsert(tbl)
					rows := newRawRows(pids)
					ctx := b.Context()
					writes := make([]journal.AtomicWrite, ids)
					var annalsTime, rawTime time.Duration
					seq := int64(0)
					for b.Loop() {
						seq++
						for i, pid := range pids {
							writes[i] = journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{benchEvent(pid, seq)}}
						}
						start := time.Now()
						if res, err := j.Write(ctx, writes); err != nil || res != nil {
							b.Fatal(res, err)
						}
						mid := time.Now()
						rows.insert(b, pool, sql, seq)
						annalsTime, rawTime = annalsTime+mid.Sub(start), rawTime+time.Since(mid)
					}
					b.ReportMetric(float64(b.N)/annalsTime.Seconds(), "calls/s")
					b.ReportMetric(float64(b.N)/rawTime.Seconds(), "raw-calls/s")
					b.ReportMetric(rawTime.Seconds()/annalsTime.Seconds(), "annals/raw")
				})
			}
		}
	}
}
