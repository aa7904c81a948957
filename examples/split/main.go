// Command split runs one bank in two processes that share one SQLite file,
// each owning half of the accounts by slice (entity.HostConfig.SliceRanges),
// the way services split entities across processes without a cluster:
//
//	go run ./examples/split                 # a new file in a temporary directory
//	go run ./examples/split -db bank.db     # or this file (it must not hold other accounts)
//
// The program starts two workers (itself, with -worker 0-511 and -worker
// 512-1023). Each deposits one cent -deposits times into every account it
// owns, 32 commands in flight, and is refused at once (entity.ErrNotOwned)
// for the others: no account is ever written by both, so no write meets a
// sequence conflict. Then the program recovers every account on one host
// and checks that each holds exactly -deposits cents.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/examples/bank"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/store/sqlite"
)

func main() {
	db := flag.String("db", "", "SQLite database file (default: a new file in a temporary directory)")
	accounts := flag.Int("accounts", 1000, "accounts in all")
	deposits := flag.Int("deposits", 100, "deposits into each account")
	worker := flag.String("worker", "", "(run by the program itself) the slice range this worker owns, such as 0-511")
	flag.Parse()
	ctx := context.Background()
	var err error
	if *worker != "" {
		err = runWorker(ctx, *db, *worker, *accounts, *deposits)
	} else {
		err = run(ctx, *db, *accounts, *deposits)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "split:", err)
		os.Exit(1)
	}
}

func accountID(i int) string { return fmt.Sprintf("a-%04d", i) }

// run starts a worker per half of the slices, waits for both, and
// verifies every balance.
func run(ctx context.Context, db string, accounts, deposits int) error {
	if db == "" {
		dir, err := os.MkdirTemp("", "annals-split-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		db = filepath.Join(dir, "bank.db")
	}
	// Create the schema once, before the workers open the file.
	s, err := sqlite.Open(ctx, "sqlite:"+db)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	halves, err := annals.SliceRanges(2)
	if err != nil {
		return err
	}
	fmt.Printf("two workers on %s, %d accounts, %d deposits each\n", db, accounts, deposits)
	var wg sync.WaitGroup
	errs := make([]error, len(halves))
	for i, r := range halves {
		cmd := exec.CommandContext(ctx, exe, "-worker", r.String(), "-db", db,
			"-accounts", strconv.Itoa(accounts), "-deposits", strconv.Itoa(deposits))
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		wg.Go(func() { errs[i] = cmd.Run() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		s.Close()
		return fmt.Errorf("a worker failed: %w", err)
	}

	// Every account, recovered on one host that owns every slice.
	h, stop, err := newHost(s, nil)
	if err != nil {
		s.Close()
		return err
	}
	defer func() { stop(); s.Close() }()
	for i := range accounts {
		got, err := entity.Ask(ctx, h, accountID(i), func(r entity.ReplyTo[int64]) bank.Command { return bank.GetBalance{Reply: r} })
		if err != nil {
			return err
		}
		if got != int64(deposits) {
			return fmt.Errorf("account %s holds %d cents, want %d", accountID(i), got, deposits)
		}
	}
	fmt.Printf("verified %d accounts: each holds %d cents, written by two processes, none by both\n", accounts, deposits)
	return nil
}

// runWorker deposits into the accounts whose slices lie in ranges, and
// counts the refusals of the others.
func runWorker(ctx context.Context, db, ranges string, accounts, deposits int) error {
	lo, hi, ok := strings.Cut(ranges, "-")
	min, err1 := strconv.Atoi(lo)
	max, err2 := strconv.Atoi(hi)
	if !ok || err1 != nil || err2 != nil {
		return fmt.Errorf("-worker %q: want a slice range such as 0-511", ranges)
	}
	s, err := sqlite.Open(ctx, "sqlite:"+db)
	if err != nil {
		return err
	}
	defer s.Close()
	h, stop, err := newHost(s, []annals.SliceRange{{Min: min, Max: max}})
	if err != nil {
		return err
	}
	defer stop()

	var owned []string
	var refused, conflicts atomic.Int64
	for i := range accounts {
		id := accountID(i)
		_, err := entity.Ask(ctx, h, id, func(r entity.ReplyTo[int64]) bank.Command { return bank.GetBalance{Reply: r} })
		switch {
		case errors.Is(err, entity.ErrNotOwned):
			refused.Add(1)
		case err != nil:
			return err
		default:
			owned = append(owned, id)
		}
	}
	work := make(chan string)
	errs := make(chan error, 32)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for id := range work {
				_, err := entity.Ask(ctx, h, id, func(r entity.ReplyTo[int64]) bank.Command { return bank.Deposit{Amount: 1, Reply: r} })
				if errors.Is(err, journal.ErrSequenceConflict) {
					conflicts.Add(1)
				} else if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for range deposits {
		for _, id := range owned {
			work <- id
		}
	}
	close(work)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	fmt.Printf("worker %s: %d accounts owned, %d deposits, %d accounts refused (the other worker's), %d conflicts\n",
		ranges, len(owned), len(owned)*deposits, refused.Load(), conflicts.Load())
	if conflicts.Load() > 0 {
		return fmt.Errorf("%d writes met another process's sequence numbers", conflicts.Load())
	}
	return nil
}

// newHost starts a host of bank accounts on s owning ranges (nil: every
// slice); stop shuts it down, then its journal front.
func newHost(s *sqlite.Store, ranges []annals.SliceRange) (*entity.Host[bank.Command, bank.Event, bank.Account], func(), error) {
	reg := serialization.NewRegistry()
	if err := bank.Register(reg); err != nil {
		return nil, nil, err
	}
	front, err := engine.NewFront(s.Journal(), engine.Config{})
	if err != nil {
		return nil, nil, err
	}
	h, err := entity.NewHost(bank.Behavior(), entity.HostConfig{
		Journal: front, Snapshots: s.Snapshots(), Registry: reg, SliceRanges: ranges,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		front.Close()
		return nil, nil, err
	}
	return h, func() { _ = h.Shutdown(context.Background()); _ = front.Close() }, nil
}
