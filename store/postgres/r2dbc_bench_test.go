package postgres_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/store/postgres"
)

// BenchmarkR2DBCWrite: single-event persists of 100 and 1,000 ids through
// a journal front, on Annals' layout in TimestampOrder and on the r2dbc
// layout (the plugin's row shape and db_timestamp rule):
//
//	go test -run '^$' -bench R2DBCWrite -benchtime 20000x ./store/postgres/
func BenchmarkR2DBCWrite(b *testing.B) {
	layouts := []struct {
		name string
		opts []postgres.Option
	}{
		{"annals-timestamp", []postgres.Option{postgres.WithOrdering(postgres.TimestampOrder)}},
		{"r2dbc", []postgres.Option{postgres.WithLayout(postgres.LayoutR2DBC)}},
	}
	for _, ids := range []int{100, 1000} {
		for _, l := range layouts {
			b.Run(fmt.Sprintf("ids=%d/%s", ids, l.name), func(b *testing.B) {
				f, err := engine.NewFront(open(b, l.opts...).Journal(), engine.Config{})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = f.Close() })
				ctx := b.Context()
				perID := (b.N + ids - 1) / ids
				b.ResetTimer()
				var wg sync.WaitGroup
				for i := range ids {
					pid := fmt.Sprintf("Bench|id-%d", i)
					wg.Go(func() {
						for seq := int64(1); seq <= int64(perID); seq++ {
							if err := f.Persist(ctx, journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{benchEvent(pid, seq)}}); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				reportRate(b, perID*ids)
			})
		}
	}
}
