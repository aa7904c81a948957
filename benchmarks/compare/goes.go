package main

import (
	"context"
	"crypto/sha1"
	"fmt"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modernice/goes/aggregate"
	"github.com/modernice/goes/aggregate/repository"
	"github.com/modernice/goes/backend/postgres"
	"github.com/modernice/goes/codec"
	"github.com/modernice/goes/event"
	"github.com/modernice/goes/event/query"
	"github.com/modernice/goes/helper/streams"
)

// goesSystem is github.com/modernice/goes through its public API, as its
// README starts a user: aggregates (aggregate.Base, aggregate.Next,
// event.ApplyWith), a typed repository (Save, Fetch) on its PostgreSQL
// event store (backend/postgres, on a pgx pool with pgx's defaults, in a
// schema of its own), events encoded by its codec registry (JSON). The
// catch-up read is the event store's Query of the aggregate type, sorted
// by time. goes has no SQLite event store.
type goesSystem struct {
	store    *postgres.EventStore
	pool     *pgxpool.Pool
	drop     func() error
	accounts *repository.TypedRepository[*goesAccount]
	readers  *repository.TypedRepository[*goesAccount]

	writers    []*goesAccount // live aggregates of the write workloads
	one        *goesAccount
	mu         sync.Mutex
	recoveries int
	events     int
}

const goesDeposited = "compare.deposited"

// goesAccount is the account as a goes aggregate.
type goesAccount struct {
	*aggregate.Base
	Balance int
}

func goesAccountOf(name string) func(uuid.UUID) *goesAccount {
	return func(id uuid.UUID) *goesAccount {
		a := &goesAccount{Base: aggregate.New(name, id)}
		event.ApplyWith(a, a.deposited, goesDeposited)
		return a
	}
}

func (a *goesAccount) Deposit(amount int) {
	aggregate.Next(a, goesDeposited, Deposited{Amount: amount})
}

func (a *goesAccount) deposited(e event.Of[Deposited]) { a.Balance += e.Data().Amount }

// goesID is a stable aggregate id for a name.
func goesID(name string) uuid.UUID {
	return uuid.NewHash(sha1.New(), uuid.NameSpaceOID, []byte(name), 5)
}

func openGoes(ctx context.Context, url string) (*goesSystem, error) {
	schema, drop, err := scratchSchema(ctx, url, "goes")
	if err != nil {
		return nil, err
	}
	pool, err := schemaPool(ctx, url, schema)
	if err != nil {
		_ = drop()
		return nil, err
	}
	reg := codec.New()
	codec.Register[Deposited](reg, goesDeposited)
	store := postgres.NewEventStore(reg, postgres.Pool(pool))
	if err := store.Connect(ctx); err != nil {
		pool.Close()
		_ = drop()
		return nil, err
	}
	repo := repository.New(store)
	return &goesSystem{
		store:    store,
		pool:     pool,
		drop:     drop,
		accounts: repository.Typed(repo, goesAccountOf("compare.account")),
		readers:  repository.Typed(repo, goesAccountOf("compare.reader")),
	}, nil
}

func (g *goesSystem) Name() string { return "goes" }

func (g *goesSystem) deposit(ctx context.Context, a *goesAccount) error {
	want := a.Balance + 1
	a.Deposit(1)
	if err := g.accounts.Save(ctx, a); err != nil {
		return err
	}
	if a.Balance != want {
		return fmt.Errorf("balance %d, want %d", a.Balance, want)
	}
	return nil
}

func (g *goesSystem) Writers(ctx context.Context, writers, each int) error {
	g.mu.Lock()
	for w := len(g.writers); w < writers; w++ {
		g.writers = append(g.writers, g.accounts.NewFunc()(goesID(fmt.Sprint("w-", w))))
	}
	g.mu.Unlock()
	return fanOut(writers, func(w int) error {
		for range each {
			if err := g.deposit(ctx, g.writers[w]); err != nil {
				return err
			}
		}
		return nil
	})
}

func (g *goesSystem) WriteOne(ctx context.Context, n int) error {
	if g.one == nil {
		g.one = g.accounts.NewFunc()(goesID("one"))
	}
	for range n {
		if err := g.deposit(ctx, g.one); err != nil {
			return err
		}
	}
	return nil
}

// seed saves entities aggregates of events each (one Save each, 4 at once).
func (g *goesSystem) seed(ctx context.Context, repo *repository.TypedRepository[*goesAccount], prefix string, entities, events int) error {
	next := make(chan int)
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			var err error
			for e := range next {
				if err != nil {
					continue
				}
				a := repo.NewFunc()(goesID(fmt.Sprint(prefix, e)))
				for range events {
					a.Deposit(1)
				}
				err = repo.Save(ctx, a)
			}
			errs <- err
		}()
	}
	for e := range entities {
		next <- e
	}
	close(next)
	var first error
	for range 4 {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (g *goesSystem) SeedRecovery(ctx context.Context, entities, events int) error {
	g.recoveries, g.events = entities, events
	return g.seed(ctx, g.accounts, "r-", entities, events)
}

func (g *goesSystem) recoverOne(ctx context.Context, e int) error {
	a, err := g.accounts.Fetch(ctx, goesID(fmt.Sprint("r-", e)))
	if err == nil && a.Balance != g.events {
		err = fmt.Errorf("entity %d recovered to %d, want %d", e, a.Balance, g.events)
	}
	return err
}

func (g *goesSystem) RecoverSequential(ctx context.Context) error {
	for e := range g.recoveries {
		if err := g.recoverOne(ctx, e); err != nil {
			return err
		}
	}
	return nil
}

func (g *goesSystem) RecoverConcurrent(ctx context.Context) error {
	return fanOut(g.recoveries, func(e int) error { return g.recoverOne(ctx, e) })
}

func (g *goesSystem) SeedCatchUp(ctx context.Context, events int) error {
	return g.seed(ctx, g.readers, "c-", 1000, events/1000)
}

func (g *goesSystem) CatchUp(ctx context.Context) (int, error) {
	events, errs, err := g.store.Query(ctx, query.New(
		query.AggregateName("compare.reader"),
		query.SortBy(event.SortTime, event.SortAsc),
	))
	if err != nil {
		return 0, err
	}
	n, sum := 0, 0
	err = streams.Walk(ctx, func(e event.Event) error {
		d, ok := e.Data().(Deposited)
		if !ok {
			return fmt.Errorf("decoded %T, want Deposited", e.Data())
		}
		sum += d.Amount
		n++
		return nil
	}, events, errs)
	if err == nil && sum != n {
		err = fmt.Errorf("sum %d of %d events", sum, n)
	}
	return n, err
}

func (g *goesSystem) Close() error {
	g.pool.Close()
	return g.drop()
}
