package demo

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/examples/bank"
	"github.com/annals-go/annals/offsets"
	"github.com/annals-go/annals/projection"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/store/memory"
)

// flakyOffsets is the memory store's offset store whose transactions fail
// while failing is set: the read model's projections fail, restart after
// their backoff, and recover once it is cleared.
type flakyOffsets struct {
	offsets.TxStore[*memory.Tx]
	failing atomic.Bool
}

var errFlaky = errors.New("the offset store is down for a moment")

func (f *flakyOffsets) InTx(ctx context.Context, fn func(*memory.Tx) error) error {
	if f.failing.Load() {
		return errFlaky
	}
	return f.TxStore.InTx(ctx, fn)
}

// failingReadModel starts the read model on a memory store whose offset
// transactions fail, and deposits into one account through a host; it
// returns once the read model reports the failure.
func failingReadModel(t *testing.T) (*readModel, *flakyOffsets) {
	t.Helper()
	st, err := stores.New().Open(t.Context(), "memory:", stores.Create)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	// Timestamp-offset stores (PostgreSQL) count the lag through
	// projection.Behind, which reports a failing projection.
	st.GlobalOrdering = false
	flaky := &flakyOffsets{TxStore: st.Offsets.(offsets.TxStore[*memory.Tx])}
	flaky.failing.Store(true)
	st.Offsets = flaky
	reg := serialization.NewRegistry()
	if err := bank.Register(reg); err != nil {
		t.Fatal(err)
	}
	rm, reason, err := startReadModel(t.Context(), st, reg, slog.New(slog.DiscardHandler), nil)
	if err != nil || rm == nil {
		t.Fatalf("startReadModel: %v (%s)", err, reason)
	}
	t.Cleanup(func() { _ = rm.stop() })
	host, err := entity.NewHost(bank.Behavior(), entity.HostConfig{Journal: st.Journal, Snapshots: st.Snapshots, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = host.Shutdown(context.Background()) }()
	if _, err := entity.Ask(t.Context(), host, AccountID(0), func(r entity.ReplyTo[int64]) bank.Command { return bank.Deposit{Amount: 250, Reply: r} }); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		n, err := rm.behind(t.Context())
		if fe, ok := errors.AsType[*projection.FailingError](err); ok && errors.Is(fe, errFlaky) {
			return rm, flaky
		}
		if time.Now().After(deadline) {
			t.Fatalf("the read model does not report its failure: behind %d, %v", n, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCatchUpWaitsOutATransientFailure: the catch-up wait after the last
// operation sees a projection that fails (projection.Behind's
// *FailingError) and waits for it to recover, within its limit, instead
// of ending the demo.
func TestCatchUpWaitsOutATransientFailure(t *testing.T) {
	t.Parallel()
	rm, flaky := failingReadModel(t)
	caughtUp := rm.catchUp(time.Now(), time.Minute)
	// The projection stays failing until its next run (its restart
	// backoff is at least a second): the wait has seen the failure.
	time.Sleep(200 * time.Millisecond)
	flaky.failing.Store(false)
	select {
	case c := <-caughtUp:
		if c.err != nil {
			t.Fatalf("catch-up ended with %v; want it to wait for the projection to recover", c.err)
		}
	case <-time.After(time.Minute):
		t.Fatal("no catch-up within a minute")
	}
	rows, _, err := rm.table.read(t.Context())
	if err != nil || rows[AccountID(0)] != 250 {
		t.Errorf("read model %v, %v; want %s at 250", rows, err, AccountID(0))
	}
}

// TestCatchUpGivesUpOnAFailureThatLasts: a projection that keeps failing
// ends the wait at its limit, the failure named.
func TestCatchUpGivesUpOnAFailureThatLasts(t *testing.T) {
	t.Parallel()
	rm, _ := failingReadModel(t)
	start := time.Now()
	c := <-rm.catchUp(start, 300*time.Millisecond)
	if c.err == nil || !errors.Is(c.err, errFlaky) || !strings.Contains(c.err.Error(), "1 events behind") {
		t.Errorf("catch-up of a projection that keeps failing: %v; want the lag and the failure", c.err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("the wait took %v, bounded by 300ms", took)
	}
}
