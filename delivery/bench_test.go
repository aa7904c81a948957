package delivery_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annals-go/annals/delivery"
)

// BenchmarkRedelivery: 10,000 unconfirmed messages of 1,000 entities,
// whose first attempts all failed, are redelivered (interval 1 ms: the
// wait for the first tick, at most 1 ms, is inside the timed part) and
// confirmed (the confirmation tracks the entity's new outbox, as an
// entity's does); beside it, a plain loop doing the same destination and
// confirmation calls on one goroutine. msgs/s is the redeliveries
// confirmed per second. The destination and the confirmation cost nothing
// here: the figure is the deliverer's own cost per message.
func BenchmarkRedelivery(b *testing.B) {
	const entities, perEntity = 1000, 10
	b.Run("deliverer", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			var (
				mu        sync.Mutex
				outbox    = map[string]delivery.Outbox[int]{}
				failing   atomic.Bool
				attempted atomic.Int64
				firsts    = make(chan struct{})
				d         *delivery.Deliverer[int]
			)
			failing.Store(true)
			d, err := delivery.New("Order", delivery.Config[int]{
				Destinations: map[string]delivery.Destination[int]{"w": delivery.DestinationFunc[int](func(_ context.Context, dl delivery.Delivery[int]) error {
					if failing.Load() {
						if dl.Attempt == 1 && attempted.Add(1) == entities*perEntity {
							close(firsts)
						}
						return errors.New("down")
					}
					return nil
				})},
				Confirm: func(_ context.Context, id string, deliveryID int64) error {
					mu.Lock()
					o := outbox[id].Confirm(deliveryID)
					outbox[id] = o
					mu.Unlock()
					d.Track(id, o)
					return nil
				},
				RedeliverInterval: time.Millisecond, // the wait for the next tick is not what is measured
				Logger:            slogTo(discard{}),
			})
			if err != nil {
				b.Fatal(err)
			}
			for e := range entities {
				id := fmt.Sprintf("o-%d", e)
				var o delivery.Outbox[int]
				for m := range perEntity {
					o, _ = o.Deliver("w", m)
				}
				outbox[id] = o
				d.Track(id, o)
			}
			ctx, cancel := context.WithCancel(b.Context())
			done := make(chan struct{})
			go func() { d.Run(ctx); close(done) }()
			<-firsts // the first attempts, outside the timer
			failing.Store(false)
			b.StartTimer()
			if err := d.Drained(b.Context()); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			cancel()
			<-done
			b.StartTimer()
		}
		b.ReportMetric(float64(entities*perEntity)*float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	})
	b.Run("raw", func(b *testing.B) {
		dest := delivery.DestinationFunc[int](func(context.Context, delivery.Delivery[int]) error { return nil })
		for b.Loop() {
			var mu sync.Mutex
			outbox := map[string]delivery.Outbox[int]{}
			for e := range entities {
				var o delivery.Outbox[int]
				for m := range perEntity {
					o, _ = o.Deliver("w", m)
				}
				outbox[fmt.Sprintf("o-%d", e)] = o
			}
			for id, o := range outbox {
				for _, p := range o.Pending {
					if err := dest.Deliver(b.Context(), delivery.Delivery[int]{From: "Order|" + id, EntityID: id, ID: p.ID, Message: p.Message}); err != nil {
						b.Fatal(err)
					}
					mu.Lock()
					outbox[id] = outbox[id].Confirm(p.ID)
					mu.Unlock()
				}
			}
		}
		b.ReportMetric(float64(entities*perEntity)*float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	})
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
