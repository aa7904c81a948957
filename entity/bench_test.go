package entity_test

// Benchmarks of the Akka JournalPerfSpec shapes through the entity host on
// SQLite (WAL, synchronous=FULL, through an engine.Front), each beside the
// journal front doing the same writes without entities ("journal"):
//
//	go test -run '^$' -bench . -benchtime 1x ./entity/
//
// Each op persists or recovers a fixed number of events; compare events/s.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/journal"
)

func reportEvents(b *testing.B, events int) {
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}

// persistViaHost persists perEntity events on each of n entities, one
// deposit (or one atomic group of size events) at a time per entity. As in
// Akka's JournalPerfSpec, a client tells an entity all its commands at once
// and waits for the reply to the last: the entity persists them one after
// another, its mailbox holding the rest.
func persistViaHost(b *testing.B, n, perEntity, group int) {
	st := sqliteStores(b)
	h := newHost(b, st, accountBehavior(), func(c *entity.HostConfig) { c.MailboxCapacity = perEntity + 1 })
	ctx := context.Background()
	amounts := make([]int64, group)
	for i := range amounts {
		amounts[i] = 1
	}
	// Spawn and recover every entity first: the op measures persisting.
	var warm sync.WaitGroup
	for e := range n {
		warm.Go(func() {
			if _, err := balance(ctx, h, fmt.Sprint("e-", e)); err != nil {
				b.Error(err)
			}
		})
	}
	warm.Wait()
	b.ResetTimer()
	for b.Loop() {
		var wg sync.WaitGroup
		for e := range n {
			wg.Go(func() {
				id := fmt.Sprint("e-", e)
				cmd := func(r entity.ReplyTo[int64]) Command {
					if group == 1 {
						return Deposit{Amount: 1, Reply: r}
					}
					return DepositMany{Amounts: amounts, Reply: r}
				}
				for range perEntity/group - 1 {
					if err := h.Tell(id, cmd(entity.ReplyTo[int64]{})); err != nil {
						b.Error(err)
						return
					}
				}
				if _, err := entity.Ask(ctx, h, id, cmd); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
	}
	reportEvents(b, b.N*n*perEntity)
}

// persistViaJournal does the same writes through the journal front alone:
// the serialized events are prepared beforehand, as an entity would have
// them, and each goroutine writes its id's events in sequence.
func persistViaJournal(b *testing.B, n, perEntity, group int) {
	st := sqliteStores(b)
	f := st.Journal.(*engine.Front)
	ctx := context.Background()
	payload, ser, manifest, err := registry(b).Serialize(Deposited{Amount: 1})
	if err != nil {
		b.Fatal(err)
	}
	round := int64(0)
	b.ResetTimer()
	for b.Loop() {
		base := round * int64(perEntity)
		round++
		var wg sync.WaitGroup
		for e := range n {
			wg.Go(func() {
				pid := fmt.Sprint("Account|j-", e)
				for k := 0; k < perEntity; k += group {
					w := journal.AtomicWrite{PersistenceID: pid, Events: make([]journal.Repr, group)}
					for g := range group {
						w.Events[g] = journal.Repr{PersistenceID: pid, SequenceNr: base + int64(k+g) + 1, Payload: payload, SerializerID: ser, Manifest: manifest, WriterID: "w"}
					}
					if err := f.Persist(ctx, w); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	reportEvents(b, b.N*n*perEntity)
}

func BenchmarkPersist(b *testing.B) {
	for _, c := range []struct {
		name               string
		entities, per, grp int
	}{
		{"1-entity-10000-events", 1, 10_000, 1},
		{"1-entity-10000-events-groups-of-50", 1, 10_000, 50},
		{"10-entities", 10, 1_000, 1},
		{"100-entities", 100, 100, 1},
		{"1000-entities", 1000, 20, 1},
	} {
		b.Run(c.name+"/host", func(b *testing.B) { persistViaHost(b, c.entities, c.per, c.grp) })
		b.Run(c.name+"/journal", func(b *testing.B) { persistViaJournal(b, c.entities, c.per, c.grp) })
	}
}

// BenchmarkRecovery recovers entities from their events (no snapshots):
// one entity of 10,000 events, and 1,000 entities of 10 events at once.
func BenchmarkRecovery(b *testing.B) {
	for _, c := range []struct {
		name          string
		entities, per int
	}{
		{"1-entity-10000-events", 1, 10_000},
		{"1000-entities-10-events", 1000, 10},
	} {
		b.Run(c.name, func(b *testing.B) {
			st := sqliteStores(b)
			ctx := context.Background()
			payload, ser, manifest, _ := registry(b).Serialize(Deposited{Amount: 1})
			for e := range c.entities {
				pid := fmt.Sprint("Account|r-", e)
				w := journal.AtomicWrite{PersistenceID: pid}
				for s := range c.per {
					w.Events = append(w.Events, journal.Repr{PersistenceID: pid, SequenceNr: int64(s + 1), Payload: payload, SerializerID: ser, Manifest: manifest})
				}
				if err := st.Journal.(*engine.Front).Persist(ctx, w); err != nil {
					b.Fatal(err)
				}
			}
			var total time.Duration
			for b.Loop() {
				h, err := entity.NewHost(accountBehavior(), entity.HostConfig{Journal: st.Journal, Registry: registry(b)})
				if err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				var wg sync.WaitGroup
				for e := range c.entities {
					wg.Go(func() {
						if got, err := balance(ctx, h, fmt.Sprint("r-", e)); err != nil || got != int64(c.per) {
							b.Errorf("recovered %d, %v", got, err)
						}
					})
				}
				wg.Wait()
				total += time.Since(start)
				_ = h.Shutdown(ctx)
			}
			b.ReportMetric(float64(b.N*c.entities*c.per)/total.Seconds(), "events/s")
		})
	}
}
