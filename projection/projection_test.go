package projection_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/durable"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/projection"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/restart"
	"github.com/annals-go/annals/store/memory"
	"github.com/annals-go/annals/store/sqlite"
)

var quiet = projection.Config{Logger: slog.New(slog.DiscardHandler)}

func write(t testing.TB, j journal.Journal, pid string, from, to int64) {
	t.Helper()
	w := journal.AtomicWrite{PersistenceID: pid}
	for s := from; s <= to; s++ {
		w.Events = append(w.Events, journal.Repr{PersistenceID: pid, SequenceNr: s, Payload: fmt.Appendf(nil, "%s-%d", pid, s)})
	}
	if res, err := j.Write(context.Background(), []journal.AtomicWrite{w}); err != nil || res != nil {
		t.Fatalf("write: %v %v", res, err)
	}
}

// recorder collects what a handler saw and signals when it has n.
type recorder struct {
	mu   sync.Mutex
	seen []string
	want int
	done chan struct{}
}

func newRecorder(want int) *recorder { return &recorder{want: want, done: make(chan struct{})} }

func (r *recorder) add(env query.Envelope) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, fmt.Sprintf("%s#%d", env.PersistenceID, env.SequenceNr))
	if len(r.seen) == r.want {
		close(r.done)
	}
}

func (r *recorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen)
}

// checkOnceInOrder fails unless seen holds every event of ids×perID once,
// each id in order.
func checkOnceInOrder(t *testing.T, seen []string, pids []string, perID int64) {
	t.Helper()
	last := map[string]int64{}
	for _, s := range seen {
		var pid string
		var seq int64
		i := len(s) - 1
		for s[i] != '#' {
			i--
		}
		pid = s[:i]
		fmt.Sscan(s[i+1:], &seq)
		if seq != last[pid]+1 {
			t.Fatalf("%s after %d: each id's events once, in order", s, last[pid])
		}
		last[pid] = seq
	}
	for _, pid := range pids {
		if last[pid] != perID {
			t.Errorf("%s reached %d, want %d", pid, last[pid], perID)
		}
	}
}

func pids(typ string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%s|%02d", typ, i))
	}
	return out
}

func allSlices(q query.EventsBySlicesQuery, typ string) projection.Source {
	return projection.BySlices(q, typ, annals.SliceRange{Min: 0, Max: annals.NumberOfSlices - 1})
}

func run(t testing.TB, p *projection.Projection) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run ended with %v, want context.Canceled", err)
		}
	}
}

func TestAtLeastOnceDeliversEveryEventAndSavesOffset(t *testing.T) {
	s := memory.New()
	ids := pids("P", 10)
	for _, pid := range ids {
		write(t, s.Journal(), pid, 1, 25)
	}
	rec := newRecorder(250)
	var last query.Offset
	p, err := projection.AtLeastOnce(projection.ID{Name: "alo"}, allSlices(s.Queries(), "P"), s.Projections(),
		func(_ context.Context, env query.Envelope) error { rec.add(env); last = env.Offset; return nil }, quiet)
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, p)
	<-rec.done
	stop()
	checkOnceInOrder(t, rec.all(), ids, 25)
	if o, err := p.Offset(t.Context()); err != nil || o.Kind != last.Kind || o.Sequence != last.Sequence {
		t.Errorf("stored offset %v (%v), want the last handled %v", o, err, last)
	}
}

func TestExactlyOnceOnSQLite(t *testing.T) {
	ctx := t.Context()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "p.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	store := s.Projections()
	if err := store.InTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`CREATE TABLE seen (pid TEXT, seq INTEGER, PRIMARY KEY (pid, seq))`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	ids := pids("X", 5)
	for _, pid := range ids {
		write(t, s.Journal(), pid, 1, 20)
	}
	failOnce := map[string]bool{"X|02#7": true, "X|04#20": true}
	var mu sync.Mutex
	calls := 0
	rec := newRecorder(100)
	handler := func(_ context.Context, tx *sql.Tx, env query.Envelope) error {
		if _, err := tx.Exec(`INSERT INTO seen VALUES (?, ?)`, env.PersistenceID, env.SequenceNr); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		calls++
		key := fmt.Sprintf("%s#%d", env.PersistenceID, env.SequenceNr)
		if failOnce[key] {
			delete(failOnce, key)
			return errors.New("injected: rolled back after the insert")
		}
		rec.add(env)
		return nil
	}
	cfg := quiet
	cfg.Recovery = projection.RetryThenFail(2, time.Millisecond)
	id := projection.ID{Name: "eo", Key: "all"}
	p, err := projection.ExactlyOnce(id, allSlices(s.Queries(), "X"), store, handler, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, p)
	<-rec.done
	stop()
	var rows int
	if err := s.Projections().InTx(ctx, func(tx *sql.Tx) error { return tx.QueryRow(`SELECT count(*) FROM seen`).Scan(&rows) }); err != nil {
		t.Fatal(err)
	}
	if rows != 100 || calls != 102 {
		t.Errorf("read model has %d rows after %d handler calls, want 100 rows (the 2 failed calls rolled back)", rows, calls)
	}
	checkOnceInOrder(t, rec.all(), ids, 20)
	// A new instance resumes from the committed offset: nothing again.
	write(t, s.Journal(), "X|00", 21, 21)
	rec2 := newRecorder(1)
	p2, _ := projection.ExactlyOnce(id, allSlices(s.Queries(), "X"), store, func(_ context.Context, tx *sql.Tx, env query.Envelope) error {
		rec2.add(env)
		return nil
	}, cfg)
	stop = run(t, p2)
	<-rec2.done
	stop()
	if got := rec2.all(); !slices.Equal(got, []string{"X|00#21"}) {
		t.Errorf("restarted projection handled %v, want only the new event", got)
	}
}

func TestGroupedByCountAndTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memory.New()
		write(t, s.Journal(), "G|a", 1, 35)
		var sizes []int
		var mu sync.Mutex
		cfg := quiet
		cfg.GroupSize, cfg.GroupWithin = 10, time.Second
		p, _ := projection.Grouped(projection.ID{Name: "g"}, allSlices(s.Queries(), "G"), s.Projections(), func(_ context.Context, envs []query.Envelope) error {
			mu.Lock()
			sizes = append(sizes, len(envs))
			mu.Unlock()
			return nil
		}, cfg)
		stop := run(t, p)
		synctest.Wait()
		mu.Lock()
		if !slices.Equal(sizes, []int{10, 10, 10}) {
			t.Errorf("groups before GroupWithin: %v, want [10 10 10]", sizes)
		}
		mu.Unlock()
		time.Sleep(time.Second)
		synctest.Wait()
		mu.Lock()
		if !slices.Equal(sizes, []int{10, 10, 10, 5}) {
			t.Errorf("groups after GroupWithin: %v, want the last 5 too", sizes)
		}
		mu.Unlock()
		if o, _ := p.Offset(t.Context()); o.Sequence != 35 {
			t.Errorf("stored offset %v, want seq:35 after the last group", o)
		}
		stop()
	})
}

// scripted is a source that replays a fixed list of envelopes, live.
func scripted(envs []query.Envelope, byID query.EventsByPersistenceIDQuery) projection.Source {
	return projection.Source{
		Events: func(ctx context.Context, after query.Offset) *query.Stream[query.Envelope] {
			return query.NewStream(func(yield func(query.Envelope) bool) error {
				for _, e := range envs {
					if e.Offset.Sequence > after.Sequence && !yield(e) {
						return nil
					}
				}
				<-ctx.Done()
				return ctx.Err()
			})
		},
		ByID: byID,
	}
}

func TestDuplicatesDroppedAndGapsFilled(t *testing.T) {
	s := memory.New()
	write(t, s.Journal(), "D|p", 1, 4)
	var stored []query.Envelope
	for env, err := range s.Queries().CurrentEventsByPersistenceID(t.Context(), "D|p", 1, 4) {
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, env)
	}
	dup := stored[1]
	dup.Offset = query.SequenceOffset(3)                             // a second delivery, as a backtracking source would
	script := []query.Envelope{stored[0], stored[1], dup, stored[3]} // 3 is missing
	script[3].Offset = query.SequenceOffset(4)
	rec := newRecorder(4)
	var offsets []int64
	p, _ := projection.AtLeastOnce(projection.ID{Name: "d"}, scripted(script, s.Queries()), s.Projections(), func(_ context.Context, env query.Envelope) error {
		rec.add(env)
		offsets = append(offsets, env.Offset.Sequence)
		return nil
	}, quiet)
	stop := run(t, p)
	<-rec.done
	stop()
	if got := rec.all(); !slices.Equal(got, []string{"D|p#1", "D|p#2", "D|p#3", "D|p#4"}) {
		t.Errorf("handled %v, want 1, 2, 3 (filled), 4, each once", got)
	}
	if !slices.IsSorted(offsets) {
		t.Errorf("offsets handed out %v: a filled gap must not move the offset back", offsets)
	}
}

func TestRecoveryStrategies(t *testing.T) {
	tests := []struct {
		name     string
		strategy projection.Strategy
		failures int // how often the handler fails on event 3
		want     []int64
	}{
		{"skip", projection.Skip(), 1, []int64{1, 2, 4, 5}},
		{"retry then skip, recovers", projection.RetryThenSkip(2, time.Second), 2, []int64{1, 2, 3, 4, 5}},
		{"retry then skip, gives up", projection.RetryThenSkip(2, time.Second), 3, []int64{1, 2, 4, 5}},
		{"retry then fail, recovers", projection.RetryThenFail(1, time.Second), 1, []int64{1, 2, 3, 4, 5}},
		{"retry then fail, restarts", projection.RetryThenFail(1, time.Second), 2, []int64{1, 2, 3, 4, 5}},
		{"fail restarts from the stored offset", projection.Fail(), 1, []int64{1, 2, 3, 4, 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := memory.New()
				write(t, s.Journal(), "R|p", 1, 5)
				failures := tt.failures
				var got []int64
				cfg := quiet
				cfg.Recovery, cfg.SaveAfter = tt.strategy, 1
				p, _ := projection.AtLeastOnce(projection.ID{Name: "r"}, allSlices(s.Queries(), "R"), s.Projections(), func(_ context.Context, env query.Envelope) error {
					if env.SequenceNr == 3 && failures > 0 {
						failures--
						return errors.New("injected")
					}
					got = append(got, env.SequenceNr)
					return nil
				}, cfg)
				stop := run(t, p)
				time.Sleep(time.Minute) // retries and restart backoffs, in fake time
				synctest.Wait()
				stop()
				if !slices.Equal(got, tt.want) {
					t.Errorf("handled %v, want %v", got, tt.want)
				}
			})
		})
	}
}

func TestPauseResumeResetSurviveRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memory.New()
		write(t, s.Journal(), "M|p", 1, 3)
		var mu sync.Mutex
		var got []int64
		handler := func(_ context.Context, env query.Envelope) error {
			mu.Lock()
			got = append(got, env.SequenceNr)
			mu.Unlock()
			return nil
		}
		handled := func() []int64 { mu.Lock(); defer mu.Unlock(); return slices.Clone(got) }
		id := projection.ID{Name: "m", Key: "0-1023"}
		cfg := quiet
		cfg.SaveAfter = 1
		p, _ := projection.AtLeastOnce(id, allSlices(s.Queries(), "M"), s.Projections(), handler, cfg)
		stop := run(t, p)
		synctest.Wait()
		if err := p.Pause(t.Context()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		write(t, s.Journal(), "M|p", 4, 5)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if h := handled(); !slices.Equal(h, []int64{1, 2, 3}) {
			t.Fatalf("while paused handled %v, want only 1..3", h)
		}
		stop()
		// A new instance (a restart) finds the projection paused.
		p2, _ := projection.AtLeastOnce(id, allSlices(s.Queries(), "M"), s.Projections(), handler, cfg)
		stop = run(t, p2)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if h := handled(); len(h) != 3 {
			t.Fatalf("after restart, paused state lost: handled %v", h)
		}
		if err := p2.Resume(t.Context()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if h := handled(); !slices.Equal(h, []int64{1, 2, 3, 4, 5}) {
			t.Fatalf("after resume handled %v, want 1..5", h)
		}
		if err := p2.ResetOffset(t.Context()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if h := handled(); !slices.Equal(h, []int64{1, 2, 3, 4, 5, 1, 2, 3, 4, 5}) {
			t.Fatalf("after reset handled %v, want everything again", h)
		}
		stop()
	})
}

func TestSliceRangesSplitTheWork(t *testing.T) {
	s := memory.New()
	ids := pids("S", 200)
	for _, pid := range ids {
		write(t, s.Journal(), pid, 1, 3)
	}
	ranges, _ := annals.SliceRanges(4)
	rec := newRecorder(600)
	var stops []func()
	for _, r := range ranges {
		p, err := projection.AtLeastOnce(projection.ID{Name: "split", Key: r.String()}, projection.BySlices(s.Queries(), "S", r), s.Projections(),
			func(_ context.Context, env query.Envelope) error {
				if !r.Contains(env.Slice) {
					t.Errorf("%s (slice %d) reached the instance of %v", env.PersistenceID, env.Slice, r)
				}
				rec.add(env)
				return nil
			}, quiet)
		if err != nil {
			t.Fatal(err)
		}
		stops = append(stops, run(t, p))
	}
	<-rec.done
	for _, stop := range stops {
		stop()
	}
	seen := rec.all()
	slices.Sort(seen)
	if len(slices.Compact(seen)) != 600 {
		t.Errorf("four instances handled %d distinct events, want 600: the ranges must cover every slice once", len(seen))
	}
}

func TestResetOffsetWhileRunningIsNotUndone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memory.New()
		write(t, s.Journal(), "Z|p", 1, 3)
		var mu sync.Mutex
		var got []int64
		cfg := quiet
		cfg.SaveAfter, cfg.SaveEvery = 2, time.Hour // event 3 stays unsaved
		p, _ := projection.AtLeastOnce(projection.ID{Name: "z"}, allSlices(s.Queries(), "Z"), s.Projections(), func(_ context.Context, env query.Envelope) error {
			mu.Lock()
			got = append(got, env.SequenceNr)
			mu.Unlock()
			return nil
		}, cfg)
		stop := run(t, p)
		synctest.Wait()
		if err := p.ResetOffset(t.Context()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		stop()
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(got, []int64{1, 2, 3, 1, 2, 3}) {
			t.Errorf("handled %v, want 1..3 and, after the reset, 1..3 again", got)
		}
	})
}

func TestPauseStopsBeforeTheNextEnvelope(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memory.New()
		write(t, s.Journal(), "Q|p", 1, 500)
		release := make(chan struct{})
		var handled atomic.Int32
		p, _ := projection.AtLeastOnce(projection.ID{Name: "q"}, allSlices(s.Queries(), "Q"), s.Projections(), func(_ context.Context, env query.Envelope) error {
			if env.SequenceNr == 1 {
				<-release
			}
			handled.Add(1)
			return nil
		}, quiet)
		pauseWhileHandling(t, p, release, &handled)
	})
}

// pauseWhileHandling runs p in a synctest bubble until its handler holds
// event 1 (and waits on release), pauses it, releases the handler, and
// checks that no other envelope was handled.
func pauseWhileHandling(t *testing.T, p *projection.Projection, release chan struct{}, handled *atomic.Int32) {
	t.Helper()
	stop := run(t, p)
	defer stop()
	synctest.Wait() // the handler holds event 1; the others are buffered
	if err := p.Pause(t.Context()); err != nil {
		t.Fatal(err)
	}
	close(release)
	synctest.Wait()
	if n := handled.Load(); n != 1 {
		t.Errorf("%d envelopes handled after Pause, want 1 (the one in the handler)", n)
	}
}

// TestPauseStopsBeforeABufferedEnvelope pauses while the handler holds an
// envelope that was received alone, with the next ones buffered by the time
// it returns: the run loop's select then has both the buffered envelopes and
// the pause ready, and must not take another envelope. The select picks at
// random, so the scenario is repeated.
func TestPauseStopsBeforeABufferedEnvelope(t *testing.T) {
	for range 20 {
		synctest.Test(t, func(t *testing.T) {
			s := memory.New()
			held, release := make(chan struct{}), make(chan struct{})
			envs := make([]query.Envelope, 3)
			for i := range envs {
				envs[i] = query.Envelope{PersistenceID: "B|p", SequenceNr: int64(i + 1), Offset: query.SequenceOffset(int64(i + 1))}
			}
			src := projection.Source{Events: func(ctx context.Context, after query.Offset) *query.Stream[query.Envelope] {
				return query.NewStream(func(yield func(query.Envelope) bool) error {
					for i, e := range envs {
						if e.Offset.Sequence <= after.Sequence {
							continue
						}
						if i == 1 {
							<-held // the rest only once the handler holds event 1
						}
						if !yield(e) {
							return nil
						}
					}
					<-ctx.Done()
					return ctx.Err()
				})
			}}
			var handled atomic.Int32
			p, _ := projection.AtLeastOnce(projection.ID{Name: "b"}, src, s.Projections(), func(_ context.Context, env query.Envelope) error {
				if env.SequenceNr == 1 {
					close(held)
					<-release
				}
				handled.Add(1)
				return nil
			}, quiet)
			pauseWhileHandling(t, p, release, &handled)
		})
	}
}

func TestShutdownDropsAPendingGroup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memory.New()
		write(t, s.Journal(), "H|p", 1, 5)
		var calls atomic.Int32
		cfg := quiet
		cfg.GroupSize, cfg.GroupWithin = 10, time.Hour
		p, _ := projection.Grouped(projection.ID{Name: "h"}, allSlices(s.Queries(), "H"), s.Projections(), func(context.Context, []query.Envelope) error {
			calls.Add(1)
			return nil
		}, cfg)
		stop := run(t, p)
		synctest.Wait()
		stop()
		if n := calls.Load(); n != 0 {
			t.Errorf("the handler ran %d times at shutdown; a pending group is left for the next run", n)
		}
		if o, _ := p.Offset(t.Context()); o.Kind != query.KindNone {
			t.Errorf("offset %v saved for a group never handled", o)
		}
	})
}

func TestRunEndsWhenTheSourceEnds(t *testing.T) {
	s := memory.New()
	write(t, s.Journal(), "F|p", 1, 3)
	src := projection.Source{Events: func(ctx context.Context, after query.Offset) *query.Stream[query.Envelope] {
		return query.NewStream(func(yield func(query.Envelope) bool) error {
			for env, err := range s.Queries().CurrentEventsBySlices(ctx, "F", 0, 1023, after) {
				if err != nil {
					return err
				}
				if !yield(env) {
					return nil
				}
			}
			return nil
		})
	}}
	n := 0
	cfg := quiet
	cfg.SaveAfter = 1
	p, _ := projection.AtLeastOnce(projection.ID{Name: "f"}, src, s.Projections(), func(context.Context, query.Envelope) error { n++; return nil }, cfg)
	if err := p.Run(t.Context()); err != nil || n != 3 {
		t.Errorf("Run over a finite source = %v after %d envelopes, want nil after 3", err, n)
	}
}

func TestByTagDoesNotTakeUntaggedEventsForGaps(t *testing.T) {
	s := memory.New()
	w := journal.AtomicWrite{PersistenceID: "C|1"}
	for seq, tags := range [][]string{{"checkout"}, nil, {"checkout"}} {
		w.Events = append(w.Events, journal.Repr{PersistenceID: "C|1", SequenceNr: int64(seq + 1), Payload: []byte("x"), Tags: tags})
	}
	if res, err := s.Journal().Write(t.Context(), []journal.AtomicWrite{w}); err != nil || res != nil {
		t.Fatal(res, err)
	}
	rec := newRecorder(2)
	p, _ := projection.AtLeastOnce(projection.ID{Name: "tag"}, projection.ByTag(s.Queries(), "checkout"), s.Projections(), func(_ context.Context, env query.Envelope) error {
		rec.add(env)
		return nil
	}, quiet)
	stop := run(t, p)
	<-rec.done
	stop()
	if got := rec.all(); !slices.Equal(got, []string{"C|1#1", "C|1#3"}) {
		t.Errorf("tag projection handled %v, want only the tagged events", got)
	}
}

// TestBehind: Behind counts the source's events after the stored offset
// (bounded by max), is 0 once the projection has caught up, and needs the
// source's current query.
func TestBehind(t *testing.T) {
	s := memory.New()
	ids := pids("B", 4)
	for _, pid := range ids {
		write(t, s.Journal(), pid, 1, 5)
	}
	rec := newRecorder(20)
	p, err := projection.AtLeastOnce(projection.ID{Name: "behind"}, allSlices(s.Queries(), "B"), s.Projections(),
		func(_ context.Context, env query.Envelope) error { rec.add(env); return nil }, quiet)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, c := range []struct{ max, want int64 }{{0, 20}, {1, 1}, {7, 7}} {
		if n, err := p.Behind(ctx, c.max); err != nil || n != c.want {
			t.Errorf("before running, Behind(max %d) = %d, %v; want %d", c.max, n, err, c.want)
		}
	}
	stop := run(t, p)
	<-rec.done
	stop()
	if n, err := p.Behind(ctx, 0); err != nil || n != 0 {
		t.Errorf("caught up: Behind = %d, %v; want 0", n, err)
	}
	write(t, s.Journal(), ids[0], 6, 8)
	if n, err := p.Behind(ctx, 0); err != nil || n != 3 {
		t.Errorf("after 3 more events: Behind = %d, %v; want 3", n, err)
	}

	liveOnly := projection.Source{Events: allSlices(s.Queries(), "B").Events}
	q, err := projection.AtLeastOnce(projection.ID{Name: "live-only"}, liveOnly, s.Projections(),
		func(context.Context, query.Envelope) error { return nil }, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Behind(ctx, 0); !errors.Is(err, projection.ErrNoCurrentQuery) {
		t.Errorf("Behind without a current query: %v, want ErrNoCurrentQuery", err)
	}
}

// projectionHookLog records every projection hook as a line.
type projectionHookLog struct {
	mu    sync.Mutex
	lines []string
}

func (h *projectionHookLog) add(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lines = append(h.lines, fmt.Sprintf(format, args...))
}

func (h *projectionHookLog) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.lines)
}

func (h *projectionHookLog) OnProjectionStarted(id projection.ID) { h.add("started %s", id) }
func (h *projectionHookLog) OnProjectionStopped(id projection.ID, e error) {
	h.add("stopped %s (%v)", id, e)
}
func (h *projectionHookLog) OnHandlerError(id projection.ID, what string, err error, d projection.Decision) {
	h.add("error %s on %s: %v: %s", id, what, err, d)
}
func (h *projectionHookLog) OnOffsetSaved(id projection.ID, o query.Offset, lag time.Duration) {
	h.add("saved %s %s lag %v", id, o, lag)
}
func (h *projectionHookLog) OnProjectionPaused(id projection.ID)  { h.add("paused %s", id) }
func (h *projectionHookLog) OnProjectionResumed(id projection.ID) { h.add("resumed %s", id) }
func (h *projectionHookLog) OnProjectionRestartScheduled(id projection.ID, err error, d time.Duration) {
	h.add("restart %s in %v", id, d)
}

// TestProjectionHooks: the hooks fire with the right values, on fake time:
// start, each saved offset with its lag, a handler error with its retries
// and the skip the strategy decides, pause and resume, stop.
func TestProjectionHooks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memory.New()
		defer s.Close()
		write(t, s.Journal(), "H|1", 1, 3)
		time.Sleep(2 * time.Second) // the events are 2 s old when handled
		log := &projectionHookLog{}
		handled := make(chan int64, 10)
		cfg := projection.Config{SaveAfter: 1, Recovery: projection.RetryThenSkip(1, time.Second), Hooks: []any{log}, Logger: quiet.Logger}
		p, err := projection.AtLeastOnce(projection.ID{Name: "hooks", Key: "k"}, allSlices(s.Queries(), "H"), s.Projections(),
			func(_ context.Context, env query.Envelope) error {
				if env.SequenceNr == 2 {
					return errors.New("bad event")
				}
				handled <- env.SequenceNr
				return nil
			}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()
		<-handled
		<-handled
		synctest.Wait()
		if err := p.Pause(t.Context()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if err := p.Resume(t.Context()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		want := []string{
			"started hooks/k",
			"saved hooks/k seq:1 lag 2s",
			"error hooks/k on H|1#2: bad event: retry",
			"error hooks/k on H|1#2: bad event: skip",
			"saved hooks/k seq:2 lag 3s",
			"saved hooks/k seq:3 lag 3s",
			"paused hooks/k",
			"resumed hooks/k",
			"stopped hooks/k (context canceled)",
		}
		if got := log.all(); !slices.Equal(got, want) {
			t.Errorf("hooks said\n%q\nwant\n%q", got, want)
		}
	})
}

// TestNegativeSettingsRefused: a negative setting is an error naming it,
// zero takes the default.
func TestNegativeSettingsRefused(t *testing.T) {
	s := memory.New()
	defer s.Close()
	handler := func(context.Context, query.Envelope) error { return nil }
	for _, c := range []struct {
		cfg  projection.Config
		want string // "" valid
	}{
		{projection.Config{}, ""},
		{projection.Config{Restart: restart.Backoff{Min: time.Second, RandomFactor: 0.2}}, ""},
		{projection.Config{SaveAfter: -1}, "SaveAfter"},
		{projection.Config{SaveEvery: -time.Second}, "SaveEvery"},
		{projection.Config{GroupSize: -1}, "GroupSize"},
		{projection.Config{GroupWithin: -1}, "GroupWithin"},
		{projection.Config{PausedRecheck: -1}, "PausedRecheck"},
		{projection.Config{Restart: restart.Backoff{Max: -time.Second}}, "Restart: restart: invalid backoff: Max"},
		{projection.Config{Restart: restart.Backoff{RandomFactor: -1}}, "RandomFactor"},
	} {
		_, err := projection.AtLeastOnce(projection.ID{Name: "cfg"}, allSlices(s.Queries(), "C"), s.Projections(), handler, c.cfg)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v, want accepted", c.cfg, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: %v, want an error naming %s", c.cfg, err, c.want)
		}
	}
}

// TestExactlyOnceOverDurableStateChanges: an exactly-once projection over
// SQLite's durable-state changes keeps a read model of each object's
// latest state. Revisions replaced before the projection reached them may
// be skipped; an object deleted and written again within the run reaches
// the handler at its new revision 1; a new instance resumes after the
// committed offset.
func TestExactlyOnceOverDurableStateChanges(t *testing.T) {
	ctx := t.Context()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "p.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	d, store := s.DurableState(), s.Projections()
	if err := store.InTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`CREATE TABLE profiles (pid TEXT PRIMARY KEY, revision INTEGER, name TEXT)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	upsert := func(pid string, revision int64, name string) {
		t.Helper()
		if err := d.Upsert(ctx, durable.Object{PersistenceID: pid, Revision: revision, Payload: []byte(name), SerializerID: 4}); err != nil {
			t.Fatal(err)
		}
	}
	handled := make(chan query.Envelope)
	handler := func(ctx context.Context, tx *sql.Tx, env query.Envelope) error {
		if _, err := tx.Exec(`INSERT INTO profiles VALUES (?, ?, ?) ON CONFLICT (pid) DO UPDATE SET revision = excluded.revision, name = excluded.name`,
			env.PersistenceID, env.SequenceNr, string(env.Payload)); err != nil {
			return err
		}
		select {
		case handled <- env:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// next waits for the next handled change; a change that never comes
	// fails the test instead of hanging it.
	next := func() query.Envelope {
		t.Helper()
		select {
		case env := <-handled:
			return env
		case <-time.After(time.Minute):
			t.Fatal("no change handled within a minute")
			return query.Envelope{}
		}
	}
	src := projection.ChangesBySlices(d, "Profile", annals.SliceRange{Min: 0, Max: annals.NumberOfSlices - 1})
	id := projection.ID{Name: "profiles", Key: "all"}
	p, err := projection.ExactlyOnce(id, src, store, handler, quiet)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		for rev := int64(1); rev <= 5; rev++ {
			upsert(fmt.Sprintf("Profile|%d", i), rev, fmt.Sprintf("name-%d-%d", i, rev))
		}
	}
	stop := run(t, p)
	latest := map[string]int64{}
	for len(latest) < 3 || latest["Profile|0"] != 5 || latest["Profile|1"] != 5 || latest["Profile|2"] != 5 {
		env := next()
		if prev, ok := latest[env.PersistenceID]; ok && env.SequenceNr <= prev {
			t.Fatalf("%s revision %d handled after %d", env.PersistenceID, env.SequenceNr, prev)
		}
		latest[env.PersistenceID] = env.SequenceNr
	}
	// Deleted and written again: revision 1 is handled, not dropped.
	if err := d.Delete(ctx, "Profile|1", 6); err != nil {
		t.Fatal(err)
	}
	upsert("Profile|1", 1, "reborn")
	if env := next(); env.PersistenceID != "Profile|1" || env.SequenceNr != 1 || string(env.Payload) != "reborn" {
		t.Fatalf("after the delete the projection handled %s@%d %q, want Profile|1@1 \"reborn\"", env.PersistenceID, env.SequenceNr, env.Payload)
	}
	stop()

	// A new instance resumes after the committed offset: only the new change.
	upsert("Profile|2", 6, "renamed")
	p2, err := projection.ExactlyOnce(id, src, store, handler, quiet)
	if err != nil {
		t.Fatal(err)
	}
	stop = run(t, p2)
	if env := next(); env.PersistenceID != "Profile|2" || env.SequenceNr != 6 {
		t.Fatalf("the restarted projection handled %s@%d first, want Profile|2@6", env.PersistenceID, env.SequenceNr)
	}
	stop()
	var model []string
	if err := store.InTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.Query(`SELECT pid, revision, name FROM profiles ORDER BY pid`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var pid, name string
			var rev int64
			if err := rows.Scan(&pid, &rev, &name); err != nil {
				return err
			}
			model = append(model, fmt.Sprintf("%s@%d=%s", pid, rev, name))
		}
		return rows.Err()
	}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"Profile|0@5=name-0-5", "Profile|1@1=reborn", "Profile|2@6=renamed"}; !slices.Equal(model, want) {
		t.Errorf("read model %v, want %v", model, want)
	}
}
