package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
)

func benchCommand() *command {
	return &command{
		name: "bench", summary: "measure a store's writes, replays and queries beside its raw driver",
		help: `Measures, on this machine, what Annals does with a store beside the store's
raw driver doing the same work (for SQLite: mattn/go-sqlite3 through
database/sql, with the same schema, WAL and synchronous setting):

  write, 1 id        one id persisting one event at a time through the
                     journal front (one transaction each); raw: one insert
                     per transaction
  write, N ids       --ids ids persisting concurrently through the journal
                     front (group commit); raw: transactions of --ids inserts
  replay             replay of one id's --replay events; raw: the select
  query by slices    a current query by slices over the events of the
                     previous write; raw: the same select without paging

It never touches the database --store names: it works on a scratch store
beside it (for SQLite, a new file in the same directory, so on the same
disk) and removes it afterwards. Payloads are 100 bytes. The defaults take
a few seconds; figures vary from run to run (disk syncs dominate the
one-id writes), so compare the two columns of one run.

--json prints {"store", "scratch", "go", "cpus", "results": [{"workload",
"events", "annals_events_per_second", "raw_events_per_second" (null
without a raw baseline), "ratio" (annals/raw, null without one)}]}.`,
		examples: []string{
			"annals bench --store sqlite:./annals.db",
			"annals bench --store sqlite:/var/lib/app/annals.db --events 200000 --json",
		},
		maxArgs: 0,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			store, asJSON := storeFlag(fs), jsonFlag(fs)
			var b bencher
			fs.IntVar(&b.single, "single", 200, "`N` events written one at a time by one id")
			fs.IntVar(&b.events, "events", 50_000, "`N` events written by the concurrent ids (and read by the query)")
			fs.IntVar(&b.ids, "ids", 1000, "`N` ids writing concurrently")
			fs.IntVar(&b.replay, "replay", 10_000, "`N` events of the replayed id")
			return func(e *env, _ []string) error {
				if b.single < 1 || b.events < 1 || b.ids < 1 || b.replay < 1 {
					return usagef("--single, --events, --ids and --replay must be at least 1")
				}
				url, err := e.storeURL(*store)
				if err != nil {
					return err
				}
				scratch, remove, err := e.mux.Scratch(e.ctx, url)
				if err != nil {
					return err
				}
				defer remove()
				s, err := e.mux.Open(e.ctx, scratch, stores.Create)
				if err != nil {
					return fmt.Errorf("scratch store: %w", err)
				}
				defer s.Close()
				res, err := b.run(e, s)
				if err != nil {
					return err
				}
				out := struct {
					Store   string        `json:"store"`
					Scratch string        `json:"scratch"`
					Go      string        `json:"go"`
					CPUs    int           `json:"cpus"`
					Results []benchResult `json:"results"`
				}{s.Kind, s.Where, runtime.Version(), runtime.NumCPU(), res}
				if *asJSON {
					return writeJSON(e.stdout, out)
				}
				fmt.Fprintf(e.stdout, "store %s, scratch %s (removed); %s, %d CPUs\n\n", s.Kind, s.Where, runtime.Version(), runtime.NumCPU())
				tw := table(e.stdout, "WORKLOAD", "EVENTS", "ANNALS EV/S", "RAW EV/S", "ANNALS/RAW")
				for _, r := range res {
					raw, ratio := "-", "-"
					if r.Raw != nil {
						raw, ratio = num(int64(*r.Raw)), fmt.Sprintf("%.0f%%", 100**r.Ratio)
					}
					row(tw, r.Workload, num(r.Events), num(int64(r.Annals)), raw, ratio)
				}
				return tw.Flush()
			}
		},
	}
}

// benchResult is one workload's figures.
type benchResult struct {
	Workload string   `json:"workload"`
	Events   int64    `json:"events"`
	Annals   float64  `json:"annals_events_per_second"`
	Raw      *float64 `json:"raw_events_per_second"`
	Ratio    *float64 `json:"ratio"`
}

type bencher struct {
	single, events, ids, replay int

	s        *stores.Store
	baseline admin.Baseline
	prefix   string   // of the scratch entity types
	written  []string // ids written, purged at the end
}

var benchPayload = make([]byte, 100)

func (b *bencher) event(pid string, seq int64) journal.Repr {
	return journal.Repr{PersistenceID: pid, SequenceNr: seq, Payload: benchPayload, SerializerID: 4, Manifest: "m", WriterID: "w"}
}

func (b *bencher) pid(kind string, i int) string {
	return annals.PersistenceID(b.prefix+kind, fmt.Sprint(i))
}

// measure times annals and raw (nil: no baseline) over n events each.
func measure(workload string, n int, annalsRun, rawRun func() error) (benchResult, error) {
	r := benchResult{Workload: workload, Events: int64(n)}
	t0 := time.Now()
	if err := annalsRun(); err != nil {
		return r, fmt.Errorf("%s: %w", workload, err)
	}
	r.Annals = float64(n) / time.Since(t0).Seconds()
	if rawRun != nil {
		t0 = time.Now()
		if err := rawRun(); err != nil {
			return r, fmt.Errorf("%s, raw: %w", workload, err)
		}
		raw := float64(n) / time.Since(t0).Seconds()
		ratio := r.Annals / raw
		r.Raw, r.Ratio = &raw, &ratio
	}
	return r, nil
}

func (b *bencher) run(e *env, s *stores.Store) (results []benchResult, err error) {
	ctx := e.ctx
	b.s = s
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	b.prefix = "AnnalsBench" + hex.EncodeToString(rnd[:])
	if bo, ok := s.Admin.(admin.BaselineOpener); ok {
		if b.baseline, err = bo.OpenBaseline(ctx); err != nil {
			return nil, fmt.Errorf("raw baseline: %w", err)
		}
		defer b.baseline.Close()
	}
	defer func() {
		if p, ok := s.Admin.(admin.Purger); ok {
			err = errors.Join(err, p.Purge(context.WithoutCancel(ctx), b.written))
		}
	}()
	front, err := engine.NewFront(s.Journal, engine.Config{})
	if err != nil {
		return nil, err
	}
	defer front.Close()
	raw := func(f func() error) func() error {
		if b.baseline == nil {
			return nil
		}
		return f
	}
	var done atomic.Int32
	stop := statusLine(e.stderr, func() string { return fmt.Sprintf("benchmarking: %d of 4 workloads done", done.Load()) })
	defer stop()

	// Write, one id.
	one, rawOne := b.pid("One", 0), b.pid("RawOne", 0)
	b.written = append(b.written, one, rawOne)
	r, err := measure("write, 1 id", b.single, func() error {
		for seq := range int64(b.single) {
			if err := front.Persist(ctx, journal.AtomicWrite{PersistenceID: one, Events: []journal.Repr{b.event(one, seq+1)}}); err != nil {
				return err
			}
		}
		return nil
	}, raw(func() error {
		for seq := range int64(b.single) {
			if err := b.baseline.InsertRaw(ctx, []journal.Repr{b.event(rawOne, seq+1)}); err != nil {
				return err
			}
		}
		return nil
	}))
	if err != nil {
		return nil, err
	}
	results = append(results, r)
	done.Add(1)

	// Write, many ids concurrently.
	perID := (b.events + b.ids - 1) / b.ids
	n := perID * b.ids
	r, err = measure(fmt.Sprintf("write, %s ids", num(int64(b.ids))), n, func() error {
		var wg sync.WaitGroup
		errs := make([]error, b.ids)
		for i := range b.ids {
			pid := b.pid("W", i)
			wg.Go(func() {
				for seq := range int64(perID) {
					if errs[i] = front.Persist(ctx, journal.AtomicWrite{PersistenceID: pid, Events: []journal.Repr{b.event(pid, seq+1)}}); errs[i] != nil {
						return
					}
				}
			})
		}
		wg.Wait()
		return errors.Join(errs...)
	}, raw(func() error {
		batch := make([]journal.Repr, b.ids)
		for seq := range int64(perID) {
			for i := range batch {
				batch[i] = b.event(b.pid("RawW", i), seq+1)
			}
			if err := b.baseline.InsertRaw(ctx, batch); err != nil {
				return err
			}
		}
		return nil
	}))
	for i := range b.ids {
		b.written = append(b.written, b.pid("W", i), b.pid("RawW", i))
	}
	if err != nil {
		return nil, err
	}
	results = append(results, r)
	done.Add(1)

	// Replay.
	rp := b.pid("Replay", 0)
	b.written = append(b.written, rp)
	for from := int64(1); from <= int64(b.replay); from += 1000 {
		w := journal.AtomicWrite{PersistenceID: rp}
		for seq := from; seq < from+1000 && seq <= int64(b.replay); seq++ {
			w.Events = append(w.Events, b.event(rp, seq))
		}
		if res, err := s.Journal.Write(ctx, []journal.AtomicWrite{w}); err != nil || res != nil {
			return nil, fmt.Errorf("replay: fill: %w", errors.Join(append(res, err)...))
		}
	}
	r, err = measure("replay", b.replay, func() error {
		return expect(b.replay, func(count func()) error {
			for _, err := range s.Journal.Replay(ctx, rp, 1, math.MaxInt64, math.MaxInt64) {
				if err != nil {
					return err
				}
				count()
			}
			return nil
		})
	}, raw(func() error {
		return expect(b.replay, func(count func()) error {
			n, err := b.baseline.ReplayRaw(ctx, rp, math.MaxInt64)
			for range n {
				count()
			}
			return err
		})
	}))
	if err != nil {
		return nil, err
	}
	results = append(results, r)
	done.Add(1)

	// Query by slices over the events of the concurrent write.
	q, ok := s.Queries.(query.EventsBySlicesQuery)
	if !ok {
		return results, nil
	}
	r, err = measure("query by slices", n, func() error {
		return expect(n, func(count func()) error {
			for _, err := range q.CurrentEventsBySlices(ctx, b.prefix+"W", 0, annals.NumberOfSlices-1, query.NoOffset()) {
				if err != nil {
					return err
				}
				count()
			}
			return nil
		})
	}, raw(func() error {
		return expect(n, func(count func()) error {
			m, err := b.baseline.ScanSlicesRaw(ctx, b.prefix+"W", 0, annals.NumberOfSlices-1)
			for range m {
				count()
			}
			return err
		})
	}))
	if err != nil {
		return nil, err
	}
	return append(results, r), nil
}

// expect runs f and fails unless it counted want results.
func expect(want int, f func(count func()) error) error {
	n := 0
	if err := f(func() { n++ }); err != nil {
		return err
	}
	if n != want {
		return fmt.Errorf("read %d events, want %d", n, want)
	}
	return nil
}
