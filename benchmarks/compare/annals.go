package main

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"path/filepath"
	"sync"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/postgres"
	"github.com/annals-go/annals/store/sqlite"
)

// annalsSystem is Annals through its public API: entities on an
// entity.Host (Ask), a new host for each recovery run (so every entity's
// first command recovers it), and the store's event query by slices for
// the catch-up read.
type annalsSystem struct {
	journal journal.Journal
	snaps   snapshot.Store
	queries interface {
		CurrentEventsBySlices(ctx context.Context, entityType string, minSlice, maxSlice int, after query.Offset) iter.Seq2[query.Envelope, error]
	}
	closeStore func() error
	drop       func() error
	reg        *serialization.Registry

	writers    *entity.Host[Command, Deposited, Account] // live entities of the write workloads
	balances   map[string]int                            // expected balance of each writer entity
	mu         sync.Mutex
	recoveries int // entities seeded for recovery
	events     int // events of each
}

func openAnnalsSQLite(ctx context.Context, dir string) (*annalsSystem, error) {
	s, err := sqlite.Open(ctx, filepath.Join(dir, "annals.db"))
	if err != nil {
		return nil, err
	}
	return newAnnals(s.Journal(), s.Snapshots(), s.Queries(), s.Close, nil)
}

func openAnnalsPostgres(ctx context.Context, url string) (*annalsSystem, error) {
	schema, drop, err := scratchSchema(ctx, url, "annals")
	if err != nil {
		return nil, err
	}
	s, err := postgres.Open(ctx, url, postgres.WithSchema(schema), postgres.WithMigrate(true))
	if err != nil {
		_ = drop()
		return nil, err
	}
	return newAnnals(s.Journal(), s.Snapshots(), s.Queries(), s.Close, drop)
}

func newAnnals(j journal.Journal, snaps snapshot.Store, q interface {
	CurrentEventsBySlices(ctx context.Context, entityType string, minSlice, maxSlice int, after query.Offset) iter.Seq2[query.Envelope, error]
}, closeStore, drop func() error) (*annalsSystem, error) {
	reg, err := registry()
	if err != nil {
		return nil, err
	}
	a := &annalsSystem{journal: j, snaps: snaps, queries: q, closeStore: closeStore, drop: drop, reg: reg, balances: map[string]int{}}
	a.writers, err = a.host()
	if err != nil {
		_ = closeStore()
		return nil, err
	}
	return a, nil
}

func (a *annalsSystem) Name() string { return "annals" }

func (a *annalsSystem) host() (*entity.Host[Command, Deposited, Account], error) {
	return entity.NewHost(behavior(accountType), entity.HostConfig{
		Journal:   a.journal,
		Snapshots: a.snaps,
		Registry:  a.reg,
		Logger:    slog.New(slog.DiscardHandler),
	})
}

func (a *annalsSystem) deposit(ctx context.Context, id string) error {
	acc, err := entity.Ask(ctx, a.writers, id, func(r entity.ReplyTo[Account]) Command { return Deposit{Amount: 1, Reply: r} })
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.balances[id]++
	want := a.balances[id]
	a.mu.Unlock()
	if acc.Balance != want {
		return fmt.Errorf("%s: balance %d, want %d", id, acc.Balance, want)
	}
	return nil
}

func (a *annalsSystem) Writers(ctx context.Context, writers, each int) error {
	return fanOut(writers, func(w int) error {
		id := fmt.Sprint("w-", w)
		for range each {
			if err := a.deposit(ctx, id); err != nil {
				return err
			}
		}
		return nil
	})
}

func (a *annalsSystem) WriteOne(ctx context.Context, n int) error {
	for range n {
		if err := a.deposit(ctx, "one"); err != nil {
			return err
		}
	}
	return nil
}

// seed writes entities of events each through the journal (atomic writes
// of at most 200 events, 25 writes per call): the data, not the timing.
func (a *annalsSystem) seed(ctx context.Context, entityType, prefix string, entities, events int) error {
	payload, ser, manifest, err := a.reg.Serialize(Deposited{Amount: 1})
	if err != nil {
		return err
	}
	var writes []journal.AtomicWrite
	flush := func() error {
		if len(writes) == 0 {
			return nil
		}
		res, err := a.journal.Write(ctx, writes)
		if err != nil {
			return err
		}
		for _, e := range res {
			if e != nil {
				return e
			}
		}
		writes = writes[:0]
		return nil
	}
	for e := range entities {
		pid := annals.PersistenceID(entityType, fmt.Sprint(prefix, e))
		for from := 0; from < events; from += 200 {
			w := journal.AtomicWrite{PersistenceID: pid}
			for s := from; s < min(from+200, events); s++ {
				w.Events = append(w.Events, journal.Repr{PersistenceID: pid, SequenceNr: int64(s + 1), Payload: payload, SerializerID: ser, Manifest: manifest})
			}
			writes = append(writes, w)
			if len(writes) == 25 {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	return flush()
}

func (a *annalsSystem) SeedRecovery(ctx context.Context, entities, events int) error {
	a.recoveries, a.events = entities, events
	return a.seed(ctx, accountType, "r-", entities, events)
}

func (a *annalsSystem) recoverOne(ctx context.Context, h *entity.Host[Command, Deposited, Account], e int) error {
	acc, err := entity.Ask(ctx, h, fmt.Sprint("r-", e), func(r entity.ReplyTo[Account]) Command { return Get{Reply: r} })
	if err == nil && acc.Balance != a.events {
		err = fmt.Errorf("entity %d recovered to %d, want %d", e, acc.Balance, a.events)
	}
	return err
}

func (a *annalsSystem) RecoverSequential(ctx context.Context) error {
	h, err := a.host()
	if err != nil {
		return err
	}
	defer func() { _ = h.Shutdown(ctx) }()
	for e := range a.recoveries {
		if err := a.recoverOne(ctx, h, e); err != nil {
			return err
		}
	}
	return nil
}

func (a *annalsSystem) RecoverConcurrent(ctx context.Context) error {
	h, err := a.host()
	if err != nil {
		return err
	}
	defer func() { _ = h.Shutdown(ctx) }()
	return fanOut(a.recoveries, func(e int) error { return a.recoverOne(ctx, h, e) })
}

func (a *annalsSystem) SeedCatchUp(ctx context.Context, events int) error {
	return a.seed(ctx, readerType, "c-", 1000, events/1000)
}

func (a *annalsSystem) CatchUp(ctx context.Context) (int, error) {
	n, sum := 0, 0
	for env, err := range a.queries.CurrentEventsBySlices(ctx, readerType, 0, annals.NumberOfSlices-1, query.NoOffset()) {
		if err != nil {
			return n, err
		}
		v, err := a.reg.DeserializeRepr(env.Repr())
		if err != nil {
			return n, err
		}
		d, ok := v.(Deposited)
		if !ok {
			return n, fmt.Errorf("decoded %T, want Deposited", v)
		}
		sum += d.Amount
		n++
	}
	if sum != n {
		return n, fmt.Errorf("sum %d of %d events", sum, n)
	}
	return n, nil
}

func (a *annalsSystem) Close() error {
	_ = a.writers.Shutdown(context.Background())
	err := a.closeStore()
	if a.drop != nil {
		_ = a.drop()
	}
	return err
}

// fanOut runs f(0) … f(n-1) on a goroutine each and returns the first
// error.
func fanOut(n int, f func(i int) error) error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = f(i) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
