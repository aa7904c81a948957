package order_test

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/entity/behaviortest"
	"github.com/annals-go/annals/entity/entitytest"
	"github.com/annals-go/annals/examples/order"
	"github.com/annals-go/annals/internal/entitystores"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/store/memory"
)

type host = entity.Host[order.Command, order.Event, order.Order]

type mkCommand = func(entity.ReplyTo[order.Order]) order.Command

type stores = entitytest.Store

var (
	memoryStores = entitytest.Memory
	sqliteStores = entitystores.SQLite
)

func newRegistry(t testing.TB) *serialization.Registry {
	t.Helper()
	reg := serialization.NewRegistry()
	if err := order.Register(reg); err != nil {
		t.Fatal(err)
	}
	return reg
}

func newHost(t testing.TB, st stores) *host {
	t.Helper()
	return entitytest.NewHost(t, st, order.Behavior(), newRegistry(t))
}

func ask(t testing.TB, h *host, id string, mk mkCommand) (order.Order, error) {
	t.Helper()
	return entity.Ask(t.Context(), h, id, mk)
}

func mustAsk(t testing.TB, h *host, id string, mk mkCommand) order.Order {
	t.Helper()
	o, err := ask(t, h, id, mk)
	if err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	return o
}

func highest(t testing.TB, j journal.Journal, id string) int64 {
	t.Helper()
	n, err := j.HighestSequenceNr(t.Context(), annals.PersistenceID(order.EntityType, id), 0)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Commands with their arguments.

func createOf(items []string, total int64) mkCommand {
	return func(r entity.ReplyTo[order.Order]) order.Command {
		return order.Create{Items: slices.Clone(items), Total: total, Reply: r}
	}
}

func payOf(amount int64) mkCommand {
	return func(r entity.ReplyTo[order.Order]) order.Command { return order.Pay{Amount: amount, Reply: r} }
}

func cancelFor(reason string) mkCommand {
	return func(r entity.ReplyTo[order.Order]) order.Command { return order.Cancel{Reason: reason, Reply: r} }
}

// The valid commands used throughout.
var (
	items = []string{"book", "pen"}

	create = createOf(items, 1500)
	pay    = payOf(1500)
	cancel = cancelFor("changed my mind")
	ship   = func(r entity.ReplyTo[order.Order]) order.Command { return order.Ship{Reply: r} }
	get    = func(r entity.ReplyTo[order.Order]) order.Command { return order.Get{Reply: r} }

	commands = []struct {
		name string
		mk   mkCommand
	}{{"Create", create}, {"Pay", pay}, {"Ship", ship}, {"Cancel", cancel}, {"Get", get}}
)

// The order in each state, reached by these commands.
var (
	stateNew       = order.Order{Status: order.StatusNew}
	stateCreated   = order.Order{Status: order.StatusCreated, Items: items, Total: 1500}
	statePaid      = order.Order{Status: order.StatusPaid, Items: items, Total: 1500, Paid: 1500}
	stateShipped   = order.Order{Status: order.StatusShipped, Items: items, Total: 1500, Paid: 1500}
	stateCancelled = order.Order{Status: order.StatusCancelled, Items: items, Total: 1500, CancelReason: "changed my mind"}

	states = []struct {
		status order.Status
		path   []mkCommand
		want   order.Order
	}{
		{order.StatusNew, nil, stateNew},
		{order.StatusCreated, []mkCommand{create}, stateCreated},
		{order.StatusPaid, []mkCommand{create, pay}, statePaid},
		{order.StatusShipped, []mkCommand{create, pay, ship}, stateShipped},
		{order.StatusCancelled, []mkCommand{create, cancel}, stateCancelled},
	}

	// transitions lists the valid commands per state and the order after
	// each; every other command but Get is an invalid transition.
	transitions = map[order.Status]map[string]order.Order{
		order.StatusNew:     {"Create": stateCreated},
		order.StatusCreated: {"Pay": statePaid, "Cancel": stateCancelled},
		order.StatusPaid: {"Ship": stateShipped, "Cancel": {
			Status: order.StatusCancelled, Items: items, Total: 1500, Paid: 1500, CancelReason: "changed my mind",
		}},
		order.StatusShipped:   {},
		order.StatusCancelled: {},
	}
)

// reach brings order id into a state by the commands of path.
func reach(t testing.TB, h *host, id string, path []mkCommand) {
	t.Helper()
	for _, mk := range path {
		mustAsk(t, h, id, mk)
	}
}

func TestTransitions(t *testing.T) {
	st := memoryStores(t)
	h := newHost(t, st)
	for _, s := range states {
		for _, c := range commands {
			t.Run(fmt.Sprintf("%s/%s", s.status, c.name), func(t *testing.T) {
				id := fmt.Sprintf("%s-%s", s.status, c.name)
				reach(t, h, id, s.path)
				before := highest(t, st.Journal, id)
				if before != int64(len(s.path)) {
					t.Fatalf("reaching %s stored %d events, want %d", s.status, before, len(s.path))
				}
				got, err := ask(t, h, id, c.mk)
				want, valid := transitions[s.status][c.name]
				switch {
				case c.name == "Get":
					if err != nil || !reflect.DeepEqual(got, s.want) {
						t.Fatalf("Get = %+v, %v; want %+v", got, err, s.want)
					}
					if n := highest(t, st.Journal, id); n != before {
						t.Fatalf("Get stored events: highest %d, want %d", n, before)
					}
				case valid:
					if err != nil || !reflect.DeepEqual(got, want) {
						t.Fatalf("%s = %+v, %v; want %+v", c.name, got, err, want)
					}
					if n := highest(t, st.Journal, id); n != before+1 {
						t.Fatalf("%s: highest %d, want one event more than %d", c.name, n, before)
					}
					if got := mustAsk(t, h, id, get); !reflect.DeepEqual(got, want) {
						t.Fatalf("Get after %s = %+v; want %+v", c.name, got, want)
					}
				default:
					var ite *order.InvalidTransitionError
					if !errors.As(err, &ite) || ite.From != s.status || ite.Command != c.name {
						t.Fatalf("%s = %+v, %v; want *InvalidTransitionError{%s, %s}", c.name, got, err, s.status, c.name)
					}
					if n := highest(t, st.Journal, id); n != before {
						t.Fatalf("rejected %s stored events: highest %d, want %d", c.name, n, before)
					}
					if got := mustAsk(t, h, id, get); !reflect.DeepEqual(got, s.want) {
						t.Fatalf("Get after rejected %s = %+v; want unchanged %+v", c.name, got, s.want)
					}
				}
			})
		}
	}
}

// TestValidation runs on the behavior test kit: each refused command
// persists nothing and leaves the state as it was, and every event on the
// way round-trips through the registry.
func TestValidation(t *testing.T) {
	k := behaviortest.New(t, order.Behavior(), newRegistry(t))
	tests := []struct {
		name string
		path []mkCommand
		cmd  mkCommand
		want order.Order
		is   error              // the error the command fails with (errors.Is), or
		as   func(error) string // a check of a typed error: "" when err is the one expected
	}{
		{name: "create without items", cmd: createOf([]string{}, 100), want: stateNew, is: order.ErrNoItems},
		{name: "create with nil items", cmd: createOf(nil, 100), want: stateNew, is: order.ErrNoItems},
		{name: "create with zero total", cmd: createOf(items, 0), want: stateNew, is: order.ErrInvalidTotal},
		{name: "create with negative total", cmd: createOf(items, -5), want: stateNew, is: order.ErrInvalidTotal},
		{name: "pay too little", path: []mkCommand{create}, cmd: payOf(1000), want: stateCreated, as: paymentError(1500, 1000)},
		{name: "pay too much", path: []mkCommand{create}, cmd: payOf(2000), want: stateCreated, as: paymentError(1500, 2000)},
		{name: "pay nothing", path: []mkCommand{create}, cmd: payOf(0), want: stateCreated, as: paymentError(1500, 0)},
		{name: "cancel created without reason", path: []mkCommand{create}, cmd: cancelFor(""), want: stateCreated, is: order.ErrNoReason},
		{name: "cancel paid without reason", path: []mkCommand{create, pay}, cmd: cancelFor(""), want: statePaid, is: order.ErrNoReason},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := fmt.Sprintf("v-%d", i)
			for _, mk := range tt.path {
				if r := behaviortest.Run(k, id, mk); r.Err != nil {
					t.Fatalf("on the way: %v", r.Err)
				}
			}
			r := behaviortest.Run(k, id, tt.cmd)
			err := r.Err
			switch {
			case tt.is != nil && !errors.Is(err, tt.is):
				t.Fatalf("err = %v, want %v", err, tt.is)
			case tt.as != nil:
				if msg := tt.as(err); msg != "" {
					t.Fatal(msg)
				}
			}
			if len(r.Events) != 0 || !reflect.DeepEqual(r.State, tt.want) {
				t.Fatalf("a failed command persisted %v and left %+v; want nothing, %+v", r.Events, r.State, tt.want)
			}
		})
	}
}

// paymentError checks for a *PaymentError{Due: due, Paid: paid}.
func paymentError(due, paid int64) func(error) string {
	return func(err error) string {
		var pe *order.PaymentError
		if !errors.As(err, &pe) || *pe != (order.PaymentError{Due: due, Paid: paid}) {
			return fmt.Sprintf("err = %v, want *PaymentError{Due: %d, Paid: %d}", err, due, paid)
		}
		return ""
	}
}

// Replies and commands do not share memory with the entity's state.
func TestRepliesAreCopies(t *testing.T) {
	h := newHost(t, memoryStores(t))
	mine := []string{"book", "pen"}
	got := mustAsk(t, h, "o-1", func(r entity.ReplyTo[order.Order]) order.Command {
		return order.Create{Items: mine, Total: 1500, Reply: r}
	})
	mine[0] = "changed by the caller"
	got.Items[1] = "changed in the reply to Create"
	got = mustAsk(t, h, "o-1", get)
	if !reflect.DeepEqual(got, stateCreated) {
		t.Fatalf("Get = %+v; want %+v", got, stateCreated)
	}
	got.Items[0] = "changed in the reply to Get"
	if got := mustAsk(t, h, "o-1", get); !reflect.DeepEqual(got, stateCreated) {
		t.Fatalf("second Get = %+v; want %+v", got, stateCreated)
	}
}

// Commands to one order are handled one at a time: of concurrent payments,
// exactly one is accepted.
func TestConcurrentPayments(t *testing.T) {
	st := memoryStores(t)
	h := newHost(t, st)
	mustAsk(t, h, "o-1", create)
	const n = 16
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { _, errs[i] = ask(t, h, "o-1", pay) })
	}
	wg.Wait()
	accepted := 0
	for _, err := range errs {
		var ite *order.InvalidTransitionError
		switch {
		case err == nil:
			accepted++
		case errors.As(err, &ite) && ite.From == order.StatusPaid && ite.Command == "Pay":
		default:
			t.Errorf("Pay: %v", err)
		}
	}
	if accepted != 1 {
		t.Fatalf("%d payments accepted, want 1", accepted)
	}
	if n := highest(t, st.Journal, "o-1"); n != 2 {
		t.Fatalf("highest %d, want 2 (Created, Paid)", n)
	}
}

func TestRecovery(t *testing.T) {
	for name, mk := range entitystores.All() {
		t.Run(name, func(t *testing.T) {
			st := mk(t)
			h := newHost(t, st)
			before := map[string]order.Order{}
			for _, s := range states {
				id := "o-" + string(s.status)
				reach(t, h, id, s.path)
				before[id] = mustAsk(t, h, id, get)
			}
			if err := h.Shutdown(t.Context()); err != nil {
				t.Fatal(err)
			}
			if _, err := ask(t, h, "o-new", get); !errors.Is(err, entity.ErrHostClosed) {
				t.Fatalf("Get on a shut down host: %v, want ErrHostClosed", err)
			}

			h2 := newHost(t, st)
			for _, s := range states {
				id := "o-" + string(s.status)
				got := mustAsk(t, h2, id, get)
				if !reflect.DeepEqual(got, before[id]) || !reflect.DeepEqual(got, s.want) {
					t.Errorf("%s recovered as %+v; before shutdown %+v, want %+v", id, got, before[id], s.want)
				}
			}
			// The recovered state machines go on from where they were.
			if got := mustAsk(t, h2, "o-created", pay); got.Status != order.StatusPaid {
				t.Fatalf("Pay after recovery: %s, want paid", got.Status)
			}
			if got := mustAsk(t, h2, "o-paid", ship); got.Status != order.StatusShipped {
				t.Fatalf("Ship after recovery: %s, want shipped", got.Status)
			}
			var ite *order.InvalidTransitionError
			if _, err := ask(t, h2, "o-shipped", cancel); !errors.As(err, &ite) || ite.From != order.StatusShipped {
				t.Fatalf("Cancel of a recovered shipped order: %v, want *InvalidTransitionError from shipped", err)
			}
			if n := highest(t, st.Journal, "o-paid"); n != 3 {
				t.Fatalf("o-paid: highest %d after Ship, want 3", n)
			}
		})
	}
}

func TestEventsAreTagged(t *testing.T) {
	s := memory.New()
	t.Cleanup(func() { _ = s.Close() })
	h := newHost(t, stores{Journal: s.Journal(), Snapshots: s.Snapshots()})
	reach(t, h, "o-1", []mkCommand{create, pay, ship})
	reach(t, h, "o-2", []mkCommand{create, pay, cancel})
	reach(t, h, "o-3", []mkCommand{create, cancel})
	for id, manifests := range map[string][]string{
		"o-1": {order.ManifestCreated, order.ManifestPaid, order.ManifestShipped},
		"o-2": {order.ManifestCreated, order.ManifestPaid, order.ManifestCancelled},
		"o-3": {order.ManifestCreated, order.ManifestCancelled},
	} {
		pid := annals.PersistenceID(order.EntityType, id)
		var got []string
		for r, err := range s.Journal().Replay(t.Context(), pid, 1, math.MaxInt64, math.MaxInt64) {
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(r.Tags, []string{order.Tag}) {
				t.Errorf("%s event %d (%s): tags %q, want [%q]", pid, r.SequenceNr, r.Manifest, r.Tags, order.Tag)
			}
			if r.SequenceNr != int64(len(got)+1) {
				t.Errorf("%s: event %d where %d was expected", pid, r.SequenceNr, len(got)+1)
			}
			got = append(got, r.Manifest)
		}
		if !slices.Equal(got, manifests) {
			t.Errorf("%s: stored %q, want %q", pid, got, manifests)
		}
	}
}
