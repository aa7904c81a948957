package bank_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/entity/entitytest"
	"github.com/annals-go/annals/examples/bank"
	"github.com/annals-go/annals/projection"
	"github.com/annals-go/annals/store/sqlite"
)

// warnings records what the projections log (handler failures, restarts).
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) Enabled(context.Context, slog.Level) bool { return true }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	msg := r.Message
	r.Attrs(func(a slog.Attr) bool { msg += " " + a.String(); return true })
	w.msgs = append(w.msgs, msg)
	return nil
}
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }

func (w *warnings) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range w.msgs {
		t.Errorf("projection logged: %s", m)
	}
}

// balanceProjections runs one instance of the balance projection per range
// until the returned stop is called.
type balanceProjections struct {
	ranges []annals.SliceRange
	ps     []*projection.Projection
	cancel context.CancelFunc
	done   chan error
}

func startBalanceProjections(t *testing.T, s *sqlite.Store, ranges []annals.SliceRange, cfg projection.Config) *balanceProjections {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	bp := &balanceProjections{ranges: ranges, cancel: cancel, done: make(chan error, len(ranges))}
	for _, r := range ranges {
		p, err := bank.BalanceProjection(s, newRegistry(t), r, cfg)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		if want := (projection.ID{Name: bank.BalanceProjectionName, Key: r.String()}); p.ID() != want {
			t.Errorf("projection id %v, want %v", p.ID(), want)
		}
		bp.ps = append(bp.ps, p)
		go func() { bp.done <- p.Run(ctx) }()
	}
	return bp
}

func (bp *balanceProjections) stop(t *testing.T) {
	t.Helper()
	bp.cancel()
	for range bp.ps {
		if err := <-bp.done; !errors.Is(err, context.Canceled) {
			t.Errorf("projection ended with %v, want context.Canceled", err)
		}
	}
}

// caughtUp waits until every instance's committed offset is past every
// event of its range (Projection.Behind). The projections offer no signal
// for a commit, so it polls, a bounded number of times.
func (bp *balanceProjections) caughtUp(t *testing.T, s *sqlite.Store) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var behind int64
		for _, p := range bp.ps {
			n, err := p.Behind(t.Context(), 0)
			if err != nil {
				t.Fatal(err)
			}
			behind += n
		}
		if behind == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("projections still %d events behind after 30s", behind)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// seqNrs reads the read model's seq_nr column.
func seqNrs(t *testing.T, s *sqlite.Store) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	err := s.Projections().InTx(t.Context(), func(tx *sql.Tx) error {
		rows, err := tx.Query(`SELECT account_id, seq_nr FROM account_balance`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var n int64
			if err := rows.Scan(&id, &n); err != nil {
				return err
			}
			out[id] = n
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The read model, kept by two instances over halves of the slices while the
// accounts run, ends equal to the balances the entities report (a version-1
// deposit included), and restarted instances apply nothing twice.
func TestBalanceReadModelOnSQLite(t *testing.T) {
	ctx := t.Context()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "bank.db"))
	if err != nil {
		t.Fatal(err)
	}
	front, err := engine.NewFront(s.Journal(), engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = front.Close(); _ = s.Close() })
	st := entitytest.Store{Journal: front, Snapshots: s.Snapshots()}

	for range 2 { // idempotent
		if err := bank.CreateReadModel(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if got, total, err := bank.ReadBalances(ctx, s); err != nil || len(got) != 0 || total != 0 {
		t.Fatalf("empty read model: %v, total %d, %v", got, total, err)
	}

	// A legacy account with a version-1 deposit, read through the adapter.
	writeV1(t, st.Journal, "legacy", 1, `{"amt":250}`)

	ids := make([]string, 24)
	for i := range ids {
		ids[i] = fmt.Sprintf("acct-%02d", i)
	}
	h := newHost(t, st)
	rng := rand.New(rand.NewPCG(1, 2))
	operate := func(n int) {
		for range n {
			id := ids[rng.IntN(len(ids))]
			var err error
			if rng.IntN(2) == 0 {
				_, err = deposit(t, h, id, 1+rng.Int64N(1000))
			} else {
				_, err = withdraw(t, h, id, 1+rng.Int64N(1500))
			}
			if err != nil && !errors.Is(err, bank.ErrInsufficientFunds) {
				t.Fatal(err)
			}
		}
	}
	operate(150) // before the projections start: they catch up

	var logged warnings
	cfg := projection.Config{Logger: slog.New(&logged)}
	ranges, err := annals.SliceRanges(2)
	if err != nil {
		t.Fatal(err)
	}
	bp := startBalanceProjections(t, s, ranges, cfg)
	var wg sync.WaitGroup
	for w := range 4 { // while they run, from several clients
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(3, uint64(w)))
			for range 100 {
				id := ids[rng.IntN(len(ids))]
				if _, err := deposit(t, h, id, 1+rng.Int64N(1000)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	operate(150)
	wg.Wait()
	bp.caughtUp(t, s)

	want := map[string]int64{}
	var wantTotal int64
	wantSeq := map[string]int64{}
	for _, id := range append(ids, "legacy") {
		b, err := balance(t, h, id)
		if err != nil {
			t.Fatal(err)
		}
		if n := highest(t, st.Journal, id); n > 0 {
			want[id], wantSeq[id] = b, n
			wantTotal += b
		}
	}
	got, total, err := bank.ReadBalances(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got, want) || total != wantTotal {
		t.Fatalf("read model %v (total %d)\nentities   %v (total %d)", got, total, want, wantTotal)
	}
	if got["legacy"] != 250 {
		t.Errorf("legacy account at %d in the read model, want its version-1 deposit of 250", got["legacy"])
	}
	if seq := seqNrs(t, s); !maps.Equal(seq, wantSeq) {
		t.Errorf("read model seq_nr %v, want the journal's highest %v", seq, wantSeq)
	}
	bp.stop(t)

	// New instances resume from the committed offsets. They get one new
	// deposit in each range; once they are past it they have read
	// everything after their offsets, and only the two deposits may have
	// changed the model.
	bp = startBalanceProjections(t, s, ranges, cfg)
	defer bp.stop(t)
	// A quick look first (no signal says an instance found nothing to do,
	// so this only gives them a moment); the check after the new deposits
	// below is the exact one.
	time.Sleep(50 * time.Millisecond)
	if again, total, err := bank.ReadBalances(ctx, s); err != nil || !maps.Equal(again, want) || total != wantTotal {
		t.Fatalf("after a restart with no new events: %v (total %d), %v; want unchanged %v", again, total, err, want)
	}
	fresh := map[int]string{} // range index → a new account there
	for i := 0; len(fresh) < len(ranges); i++ {
		id := fmt.Sprintf("new-%d", i)
		for ri, r := range ranges {
			if _, ok := fresh[ri]; !ok && r.Contains(annals.Slice(pid(id))) {
				fresh[ri] = id
			}
		}
	}
	for _, id := range fresh {
		if _, err := deposit(t, h, id, 7); err != nil {
			t.Fatal(err)
		}
		want[id] = 7
		wantTotal += 7
	}
	bp.caughtUp(t, s)
	if again, total, err := bank.ReadBalances(ctx, s); err != nil || !maps.Equal(again, want) || total != wantTotal {
		t.Fatalf("after a restart: %v (total %d), %v\nwant %v (total %d): nothing applied twice", again, total, err, want, wantTotal)
	}
	logged.check(t)
}
