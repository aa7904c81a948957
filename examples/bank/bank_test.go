package bank_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/entity/behaviortest"
	"github.com/annals-go/annals/entity/entitytest"
	"github.com/annals-go/annals/examples/bank"
	"github.com/annals-go/annals/internal/entitystores"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/memory"
)

type host = entity.Host[bank.Command, bank.Event, bank.Account]

type kit = behaviortest.Kit[bank.Command, bank.Event, bank.Account]

type mkCommand = func(entity.ReplyTo[int64]) bank.Command

type stores = entitytest.Store

var memoryStores = entitytest.Memory

func newRegistry(t testing.TB) *serialization.Registry {
	t.Helper()
	reg := serialization.NewRegistry()
	if err := bank.Register(reg); err != nil {
		t.Fatal(err)
	}
	return reg
}

func depositOf(amount int64) mkCommand {
	return func(r entity.ReplyTo[int64]) bank.Command { return bank.Deposit{Amount: amount, Reply: r} }
}

func withdrawalOf(amount int64) mkCommand {
	return func(r entity.ReplyTo[int64]) bank.Command { return bank.Withdraw{Amount: amount, Reply: r} }
}

func getBalance(r entity.ReplyTo[int64]) bank.Command { return bank.GetBalance{Reply: r} }

// checkBalance asks account id of the kit for its balance: want, with
// nothing persisted.
func checkBalance(t testing.TB, k *kit, id string, want int64) {
	t.Helper()
	if r := behaviortest.Run(k, id, getBalance); r.Err != nil || r.Reply != want || len(r.Events) != 0 {
		t.Fatalf("balance of %s = %d, %v (persisting %v); want %d, nothing persisted", id, r.Reply, r.Err, r.Events, want)
	}
}

// manifest returns the manifest v is stored under: the registry's, which
// the host writes with each event.
func manifest(t testing.TB, reg *serialization.Registry, v any) string {
	t.Helper()
	_, _, m, err := reg.Serialize(v)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// The host and its helpers, for the tests about the stores: recovery from
// snapshots on each store, version-1 events written before the host starts,
// the read model.

func newHost(t testing.TB, st stores) *host {
	t.Helper()
	return entitytest.NewHost(t, st, bank.Behavior(), newRegistry(t))
}

func deposit(t testing.TB, h *host, id string, amount int64) (int64, error) {
	return entity.Ask(t.Context(), h, id, depositOf(amount))
}

func withdraw(t testing.TB, h *host, id string, amount int64) (int64, error) {
	return entity.Ask(t.Context(), h, id, withdrawalOf(amount))
}

func balance(t testing.TB, h *host, id string) (int64, error) {
	return entity.Ask(t.Context(), h, id, getBalance)
}

func mustBalance(t testing.TB, h *host, id string, want int64) {
	t.Helper()
	if got, err := balance(t, h, id); err != nil || got != want {
		t.Fatalf("balance of %s = %d, %v; want %d", id, got, err, want)
	}
}

func pid(id string) string { return annals.PersistenceID(bank.EntityType, id) }

func highest(t testing.TB, j journal.Journal, id string) int64 {
	t.Helper()
	n, err := j.HighestSequenceNr(t.Context(), pid(id), 0)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// events returns the stored events of account id.
func events(t testing.TB, j journal.Journal, id string) []journal.Repr {
	t.Helper()
	var out []journal.Repr
	for r, err := range j.Replay(t.Context(), pid(id), 1, math.MaxInt64, math.MaxInt64) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// One account through a sequence of operations, on the behavior test kit:
// the balance after each, or the error; only operations that succeed
// persist an event (which the kit reads back through the registry, as it
// does the account it snapshots).
func TestDepositAndWithdraw(t *testing.T) {
	reg := newRegistry(t)
	k := behaviortest.New(t, bank.Behavior(), reg)
	steps := []struct {
		cmd     mkCommand
		event   bank.Event // the event the step persists, or nil
		balance int64      // after the step
		err     error
	}{
		{depositOf(100), bank.Deposited{Amount: 100}, 100, nil},
		{depositOf(50), bank.Deposited{Amount: 50}, 150, nil},
		{withdrawalOf(30), bank.Withdrawn{Amount: 30}, 120, nil},
		{withdrawalOf(121), nil, 120, bank.ErrInsufficientFunds},
		{withdrawalOf(120), bank.Withdrawn{Amount: 120}, 0, nil},
		{withdrawalOf(1), nil, 0, bank.ErrInsufficientFunds},
		{depositOf(1), bank.Deposited{Amount: 1}, 1, nil},
		{withdrawalOf(math.MaxInt64), nil, 1, bank.ErrInsufficientFunds},
	}
	var ops int64
	var manifests []string
	for i, s := range steps {
		r := behaviortest.Run(k, "a-1", s.cmd)
		switch {
		case s.err != nil && !errors.Is(r.Err, s.err):
			t.Fatalf("step %d: err = %v, want %v", i, r.Err, s.err)
		case s.err == nil && (r.Err != nil || r.Reply != s.balance):
			t.Fatalf("step %d: reply %d, %v; want %d", i, r.Reply, r.Err, s.balance)
		}
		var want []bank.Event
		if s.event != nil {
			want = []bank.Event{s.event}
			ops++
		}
		if !slices.Equal(r.Events, want) {
			t.Fatalf("step %d: persisted %#v, want %#v", i, r.Events, want)
		}
		if r.State != (bank.Account{Balance: s.balance, Ops: ops}) {
			t.Fatalf("step %d: account %+v, want balance %d after %d operations", i, r.State, s.balance, ops)
		}
		for _, e := range r.Events {
			manifests = append(manifests, manifest(t, reg, e))
		}
		checkBalance(t, k, "a-1", s.balance)
	}
	want := []string{bank.ManifestDeposited, bank.ManifestDeposited, bank.ManifestWithdrawn, bank.ManifestWithdrawn, bank.ManifestDeposited}
	if !slices.Equal(manifests, want) {
		t.Fatalf("stored manifests %q, want %q", manifests, want)
	}
}

func TestInvalidAmounts(t *testing.T) {
	k := behaviortest.New(t, bank.Behavior(), newRegistry(t))
	if r := behaviortest.Run(k, "a-1", depositOf(100)); r.Err != nil {
		t.Fatal(r.Err)
	}
	tests := []struct {
		name string
		cmd  mkCommand
	}{
		{"deposit zero", depositOf(0)},
		{"deposit negative", depositOf(-5)},
		{"deposit most negative", depositOf(math.MinInt64)},
		{"withdraw zero", withdrawalOf(0)},
		{"withdraw negative", withdrawalOf(-50)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := behaviortest.Run(k, "a-1", tt.cmd)
			if err := r.Err; err == nil || errors.Is(err, bank.ErrInsufficientFunds) || !strings.Contains(err.Error(), "amount must be positive") {
				t.Fatalf("err = %v, want the amount rejected as not positive", err)
			}
			if len(r.Events) != 0 || r.State != (bank.Account{Balance: 100, Ops: 1}) {
				t.Fatalf("a rejected amount persisted %v and left %+v; want nothing, the account after the one deposit", r.Events, r.State)
			}
			checkBalance(t, k, "a-1", 100)
		})
	}
}

// The tests below stay on a host: the behavior test kit runs on a memory
// store of its own, which a test can neither inspect (the snapshots kept)
// nor write to before the first command (the events of version 1).

// The account recovers after a restart from its latest snapshot and the
// events after it; the behavior snapshots every 100 events and keeps the
// last two snapshots.
func TestRecovery(t *testing.T) {
	for name, mk := range entitystores.All() {
		t.Run(name, func(t *testing.T) {
			st := mk(t)
			ctx := t.Context()
			h := newHost(t, st)
			var want int64
			for i := range int64(310) { // deposits of i+1, with a withdrawal of i/2 every third
				amount, op, sign := i+1, deposit, int64(1)
				if i%3 == 2 {
					amount, op, sign = i/2, withdraw, -1
				}
				got, err := op(t, h, "a-1", amount)
				want += sign * amount
				if err != nil || got != want {
					t.Fatalf("operation %d: %d, %v; want %d", i, got, err, want)
				}
			}
			if _, err := deposit(t, h, "a-2", 7); err != nil {
				t.Fatal(err)
			}

			// Snapshots at 200 and 300 are kept; the one at 100 is deleted.
			snap, ok, err := st.Snapshots.Load(ctx, pid("a-1"), snapshot.Latest())
			if err != nil || !ok || snap.Metadata.SequenceNr != 300 || snap.Manifest != bank.ManifestAccount {
				t.Fatalf("latest snapshot: at %d (%q), %v, %v; want at 300 (%q)", snap.Metadata.SequenceNr, snap.Manifest, ok, err, bank.ManifestAccount)
			}
			v, err := newRegistry(t).DeserializeSnapshot(snap)
			if err != nil {
				t.Fatal(err)
			}
			if a, ok := v.(bank.Account); !ok || a.Ops != 300 {
				t.Fatalf("snapshot at 300 holds %#v, want an Account after 300 operations", v)
			}
			if snap, ok, err := st.Snapshots.Load(ctx, pid("a-1"), snapshot.Criteria{MaxSequenceNr: 299}); err != nil || !ok || snap.Metadata.SequenceNr != 200 {
				t.Fatalf("snapshot before 300: at %d, %v, %v; want at 200", snap.Metadata.SequenceNr, ok, err)
			}
			if snap, ok, err := st.Snapshots.Load(ctx, pid("a-1"), snapshot.Criteria{MaxSequenceNr: 199}); err != nil || ok {
				t.Fatalf("snapshot before 200: at %d, %v, %v; want none (KeepLast 2)", snap.Metadata.SequenceNr, ok, err)
			}

			if err := h.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			h2 := newHost(t, st)
			mustBalance(t, h2, "a-1", want)
			mustBalance(t, h2, "a-2", 7)
			if _, err := withdraw(t, h2, "a-1", want+1); !errors.Is(err, bank.ErrInsufficientFunds) {
				t.Fatalf("overdraft after recovery: %v, want ErrInsufficientFunds", err)
			}
			if got, err := deposit(t, h2, "a-1", 1); err != nil || got != want+1 {
				t.Fatalf("deposit after recovery: %d, %v; want %d", got, err, want+1)
			}
			if n := highest(t, st.Journal, "a-1"); n != 311 {
				t.Fatalf("highest sequence number %d, want 311", n)
			}
		})
	}
}

// writeV1 stores a version-1 Deposited event, as the first version of the
// account wrote it, at sequence number seq of account id.
func writeV1(t testing.TB, j journal.Journal, id string, seq int64, payload string) {
	t.Helper()
	e := journal.Repr{
		PersistenceID: pid(id),
		SequenceNr:    seq,
		Payload:       []byte(payload),
		SerializerID:  serialization.JSONID,
		Manifest:      bank.ManifestDepositedV1,
		WriterID:      "bank-v1",
	}
	errs, err := j.Write(t.Context(), []journal.AtomicWrite{{PersistenceID: pid(id), Events: []journal.Repr{e}}})
	if err == nil && errs != nil {
		err = errs[0]
	}
	if err != nil {
		t.Fatal(err)
	}
}

func TestUpcastVersion1Deposit(t *testing.T) {
	s := memory.New()
	t.Cleanup(func() { _ = s.Close() })
	st := stores{Journal: s.Journal(), Snapshots: s.Snapshots()}
	writeV1(t, st.Journal, "legacy", 1, `{"amt":250}`)

	h := newHost(t, st)
	mustBalance(t, h, "legacy", 250)
	if _, err := withdraw(t, h, "legacy", 251); !errors.Is(err, bank.ErrInsufficientFunds) {
		t.Fatalf("withdrawal above the upcast balance: %v, want ErrInsufficientFunds", err)
	}
	if got, err := deposit(t, h, "legacy", 50); err != nil || got != 300 {
		t.Fatalf("deposit after the v1 event: %d, %v; want 300", got, err)
	}

	// The old event is kept as it was; the new one is stored as version 2.
	evs := events(t, st.Journal, "legacy")
	if len(evs) != 2 {
		t.Fatalf("%d events stored, want 2", len(evs))
	}
	if e := evs[0]; e.SequenceNr != 1 || e.Manifest != bank.ManifestDepositedV1 || string(e.Payload) != `{"amt":250}` {
		t.Fatalf("event 1 = %d %q %s, want the v1 event unchanged", e.SequenceNr, e.Manifest, e.Payload)
	}
	if e := evs[1]; e.SequenceNr != 2 || e.Manifest != "bank.Deposited.v2" || e.SerializerID != serialization.JSONID || string(e.Payload) != `{"amount":50}` {
		t.Fatalf("event 2 = %d %q (serializer %d) %s, want a bank.Deposited.v2 of 50", e.SequenceNr, e.Manifest, e.SerializerID, e.Payload)
	}

	// A new host recovers from both versions.
	if err := h.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	mustBalance(t, newHost(t, st), "legacy", 300)
}

// A version-1 event the adapter cannot read fails the recovery: the entity
// does not start with a wrong balance.
func TestUpcastCorruptVersion1Deposit(t *testing.T) {
	st := memoryStores(t)
	writeV1(t, st.Journal, "broken", 1, `{"amt":"250"}`)
	h := newHost(t, st)
	for range 2 { // each command tries a new recovery, which fails again
		_, err := balance(t, h, "broken")
		if !errors.Is(err, entity.ErrRecovery) || !errors.Is(err, entity.ErrStopped) {
			t.Fatalf("balance of an account with a corrupt v1 event: %v, want ErrStopped wrapping ErrRecovery", err)
		}
	}
	if _, err := deposit(t, h, "broken", 1); !errors.Is(err, entity.ErrRecovery) {
		t.Fatalf("deposit: %v, want ErrRecovery", err)
	}
	if n := highest(t, st.Journal, "broken"); n != 1 {
		t.Fatalf("highest sequence number %d, want 1: nothing may be written after a failed recovery", n)
	}
}

// An account runs through a Host on the in-memory store.
func ExampleBehavior() {
	ctx := context.Background()
	store := memory.New()
	defer store.Close()
	reg := serialization.NewRegistry()
	if err := bank.Register(reg); err != nil {
		panic(err)
	}
	h, err := entity.NewHost(bank.Behavior(), entity.HostConfig{Journal: store.Journal(), Snapshots: store.Snapshots(), Registry: reg})
	if err != nil {
		panic(err)
	}
	defer h.Shutdown(ctx)

	send := func(mk func(entity.ReplyTo[int64]) bank.Command) {
		balance, err := entity.Ask(ctx, h, "a-1", mk)
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		fmt.Println("balance:", balance)
	}
	send(func(r entity.ReplyTo[int64]) bank.Command { return bank.Deposit{Amount: 100, Reply: r} })
	send(func(r entity.ReplyTo[int64]) bank.Command { return bank.Withdraw{Amount: 30, Reply: r} })
	send(func(r entity.ReplyTo[int64]) bank.Command { return bank.Withdraw{Amount: 500, Reply: r} })
	send(func(r entity.ReplyTo[int64]) bank.Command { return bank.Deposit{Amount: -5, Reply: r} })
	send(func(r entity.ReplyTo[int64]) bank.Command { return bank.GetBalance{Reply: r} })
	// Output:
	// balance: 100
	// balance: 70
	// error: bank: insufficient funds
	// error: bank: deposit of -5: amount must be positive
	// balance: 70
}
