package demo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/examples/bank"
)

// balances asks every account's balance through h, with at most workers
// Asks in flight, and returns them indexed like ids.
func balances(ctx context.Context, h *accountHost, ids []string, workers int) ([]atomic.Int64, error) {
	out := make([]atomic.Int64, len(ids))
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for range min(workers, len(ids)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(ids) {
					return
				}
				b, err := entity.Ask(ctx, h, ids[i], func(r entity.ReplyTo[int64]) bank.Command { return bank.GetBalance{Reply: r} })
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("%s: %w", ids[i], err))
					mu.Unlock()
					continue
				}
				out[i].Store(b)
			}
		})
	}
	wg.Wait()
	if len(errs) > 3 {
		errs = append(errs[:3], fmt.Errorf("and %d more", len(errs)-3))
	}
	return out, errors.Join(errs...)
}

type opKind int

const (
	opDeposit opKind = iota
	opWithdraw
	opTransfer
	nKinds
)

// worker is one client goroutine's tally.
type worker struct {
	ops, accepted, rejected, failed int64
	kinds, kindRejected             [nKinds]int64
	commands, events                int64
	lat                             []time.Duration
	errs                            []error // the first few failures
}

// runOps runs cfg.Ops random operations from cfg.Concurrency goroutines,
// adding the effect of every accepted command to model and counting each
// operation in done. It stops early when ctx ends; commands use askCtx.
func (r *runner) runOps(ctx, askCtx context.Context, h *accountHost, model []atomic.Int64, done *atomic.Int64) Operations {
	ids, cfg := r.ids, r.cfg
	workers := make([]worker, cfg.Concurrency)
	var next atomic.Int64
	total := int64(cfg.Ops)
	t0 := time.Now()
	var wg sync.WaitGroup
	for wi := range workers {
		w := &workers[wi]
		rng := rand.New(rand.NewPCG(cfg.Seed, uint64(wi)))
		wg.Go(func() {
			ask := func(id string, mk func(entity.ReplyTo[int64]) bank.Command) error {
				t := time.Now()
				_, err := entity.Ask(askCtx, h, id, mk)
				w.lat = append(w.lat, time.Since(t))
				w.commands++
				return err
			}
			fail := func(err error) {
				w.failed++
				if len(w.errs) < 3 {
					w.errs = append(w.errs, err)
				}
			}
			// withdraw takes amt from account a for an operation of kind;
			// taken is false when the account refused for insufficient
			// funds.
			withdraw := func(kind opKind, a int, amt int64) (taken bool, err error) {
				err = ask(ids[a], func(r entity.ReplyTo[int64]) bank.Command { return bank.Withdraw{Amount: amt, Reply: r} })
				switch {
				case errors.Is(err, bank.ErrInsufficientFunds):
					w.rejected++
					w.kindRejected[kind]++
					return false, nil
				case err != nil:
					return false, err
				}
				model[a].Add(-amt)
				w.events++
				return true, nil
			}
			for ctx.Err() == nil && next.Add(1) <= total {
				a := rng.IntN(len(ids))
				var kind opKind
				switch r := rng.IntN(100); {
				case r < pctDeposit:
					kind = opDeposit
				case r < pctDeposit+pctWithdraw:
					kind = opWithdraw
				default:
					kind = opTransfer
				}
				w.ops++
				w.kinds[kind]++
				switch kind {
				case opDeposit:
					amt := 1 + rng.Int64N(maxDeposit)
					if err := ask(ids[a], func(r entity.ReplyTo[int64]) bank.Command { return bank.Deposit{Amount: amt, Reply: r} }); err != nil {
						fail(fmt.Errorf("deposit %d to %s: %w", amt, ids[a], err))
						break
					}
					model[a].Add(amt)
					w.events++
					w.accepted++
				case opWithdraw:
					amt := 1 + rng.Int64N(maxWithdraw)
					if taken, err := withdraw(kind, a, amt); err != nil {
						fail(fmt.Errorf("withdrawal of %d from %s: %w", amt, ids[a], err))
					} else if taken {
						w.accepted++
					}
				case opTransfer:
					b := rng.IntN(len(ids) - 1)
					if b >= a {
						b++
					}
					amt := 1 + rng.Int64N(maxTransfer)
					taken, err := withdraw(kind, a, amt)
					switch {
					case err != nil:
						fail(fmt.Errorf("transfer of %d from %s: withdrawal: %w", amt, ids[a], err))
					case taken:
						if err := ask(ids[b], func(r entity.ReplyTo[int64]) bank.Command { return bank.Deposit{Amount: amt, Reply: r} }); err != nil {
							fail(fmt.Errorf("transfer of %d from %s to %s: deposit: %w", amt, ids[a], ids[b], err))
							break
						}
						model[b].Add(amt)
						w.events++
						w.accepted++
					}
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	var res Operations
	res.Elapsed = time.Since(t0)
	var kinds, kindRejected [nKinds]int64
	for i := range workers {
		w := &workers[i]
		res.Ops += w.ops
		res.Accepted += w.accepted
		res.Rejected += w.rejected
		res.Failed += w.failed
		res.Commands += w.commands
		res.Events += w.events
		for k := range nKinds {
			kinds[k] += w.kinds[k]
			kindRejected[k] += w.kindRejected[k]
		}
		res.Latencies = append(res.Latencies, w.lat...)
		if len(res.Errors) < 5 {
			res.Errors = append(res.Errors, w.errs[:min(len(w.errs), 5-len(res.Errors))]...)
		}
	}
	res.Deposits, res.Withdrawals, res.Transfers = kinds[opDeposit], kinds[opWithdraw], kinds[opTransfer]
	res.WithdrawalsRejected, res.TransfersRejected = kindRejected[opWithdraw], kindRejected[opTransfer]
	slices.Sort(res.Latencies)
	return res
}
