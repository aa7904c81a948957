package delivery_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/annals-go/annals/delivery"
)

func TestOutbox(t *testing.T) {
	var o delivery.Outbox[string]
	o1, id1 := o.Deliver("w", "a")
	o2, id2 := o1.Deliver("w", "b")
	o3, id3 := o2.Deliver("x", "c")
	if id1 != 1 || id2 != 2 || id3 != 3 {
		t.Fatalf("ids %d %d %d, want 1 2 3", id1, id2, id3)
	}
	if o.Unconfirmed() != 0 || o1.Unconfirmed() != 1 || o2.Unconfirmed() != 2 {
		t.Errorf("Deliver changed the outbox it was called on: %v %v %v", o, o1, o2)
	}
	o4 := o3.Confirm(2)
	if o3.Unconfirmed() != 3 || !o3.IsPending(2) {
		t.Errorf("Confirm changed the outbox it was called on: %v", o3)
	}
	if o4.IsPending(2) || !o4.IsPending(1) || !o4.IsPending(3) || o4.LastID != 3 {
		t.Errorf("after Confirm(2): %+v", o4)
	}
	if got := o4.Confirm(2); !reflect.DeepEqual(got, o4) {
		t.Errorf("a duplicate confirmation changed the outbox: %+v", got)
	}
	o5, id5 := o4.Confirm(1).Confirm(3).Deliver("w", "d")
	if id5 != 4 || o5.Unconfirmed() != 1 {
		t.Errorf("ids are never reused: got %d (%+v)", id5, o5)
	}
	data, err := json.Marshal(o4)
	if err != nil {
		t.Fatal(err)
	}
	var back delivery.Outbox[string]
	if err := json.Unmarshal(data, &back); err != nil || !reflect.DeepEqual(back, o4) {
		t.Errorf("JSON round trip: %s -> %+v (%v)", data, back, err)
	}
	for _, c := range []struct {
		o    delivery.Outbox[string]
		max  int
		fail bool
	}{{o3, 3, true}, {o3, 4, false}, {o, 1, false}, {o3, 0, false}} {
		err := c.o.Check(c.max)
		if c.fail != errors.Is(err, delivery.ErrTooManyUnconfirmed) {
			t.Errorf("Check(%d) with %d pending: %v", c.max, c.o.Unconfirmed(), err)
		}
	}
}

// harness is a Deliverer whose Confirm confirms in an outbox per entity
// and tracks it again, as an entity's confirm command does.
type harness struct {
	mu      sync.Mutex
	d       *delivery.Deliverer[string]
	outbox  map[string]delivery.Outbox[string]
	got     []string // deliveries, as "id#n@attempt"
	fail    func(delivery.Delivery[string]) error
	warned  []string
	confirm error
}

func newHarness(t *testing.T, cfg delivery.Config[string]) *harness {
	h := &harness{outbox: map[string]delivery.Outbox[string]{}}
	cfg.Destinations = map[string]delivery.Destination[string]{"w": delivery.DestinationFunc[string](func(_ context.Context, d delivery.Delivery[string]) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.got = append(h.got, fmt.Sprintf("%s#%d@%d", d.EntityID, d.ID, d.Attempt))
		if h.fail != nil {
			return h.fail(d)
		}
		return nil
	})}
	cfg.Confirm = func(_ context.Context, id string, deliveryID int64) error {
		h.mu.Lock()
		if h.confirm != nil {
			h.mu.Unlock()
			return h.confirm
		}
		o := h.outbox[id].Confirm(deliveryID)
		h.outbox[id] = o
		h.mu.Unlock()
		h.d.Track(id, o)
		return nil
	}
	cfg.OnUnconfirmed = func(id string, ws []delivery.Unconfirmed[string]) {
		for _, w := range ws {
			h.warned = append(h.warned, fmt.Sprintf("%s#%d after %d", id, w.ID, w.Attempts))
		}
	}
	d, err := delivery.New("Order", cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.d = d
	return h
}

func (h *harness) deliver(id string, msgs ...string) {
	h.mu.Lock()
	o := h.outbox[id]
	for _, m := range msgs {
		o, _ = o.Deliver("w", m)
	}
	h.outbox[id] = o
	h.mu.Unlock()
	h.d.Track(id, o)
}

func (h *harness) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	got := h.got
	h.got = nil
	slices.Sort(got)
	return got
}

// TestRedelivery (fake time): first attempts at once; a failed delivery
// again after the interval; a warning after WarnAfter attempts, once;
// confirmed deliveries never again; Drained once all are confirmed.
func TestRedelivery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, delivery.Config[string]{RedeliverInterval: 10 * time.Second, WarnAfter: 3})
		failing := map[int64]bool{2: true}
		h.fail = func(d delivery.Delivery[string]) error {
			if failing[d.ID] {
				return errors.New("down")
			}
			return nil
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- h.d.Run(ctx) }()

		h.deliver("o-1", "a", "b")
		synctest.Wait()
		if got, want := h.take(), []string{"o-1#1@1", "o-1#2@1"}; !slices.Equal(got, want) {
			t.Errorf("first attempts %q, want %q", got, want)
		}
		if n := h.d.Unconfirmed(); n != 1 {
			t.Errorf("%d unconfirmed after the first attempts, want 1 (#2)", n)
		}
		time.Sleep(9 * time.Second)
		synctest.Wait()
		if got := h.take(); len(got) != 0 {
			t.Errorf("redelivered before the interval: %q", got)
		}
		for attempt := 2; attempt <= 4; attempt++ {
			time.Sleep(6 * time.Second) // the ticker runs every half interval
			synctest.Wait()
			if got, want := h.take(), []string{fmt.Sprintf("o-1#2@%d", attempt)}; !slices.Equal(got, want) {
				t.Errorf("attempt %d: %q, want %q", attempt, got, want)
			}
			time.Sleep(4 * time.Second)
		}
		if want := []string{"o-1#2 after 3"}; !slices.Equal(h.warned, want) {
			t.Errorf("warnings %q, want %q (once, after 3 attempts)", h.warned, want)
		}
		delete(failing, 2)
		drained := make(chan error, 1)
		go func() { drained <- h.d.Drained(t.Context()) }()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if err := <-drained; err != nil {
			t.Fatal(err)
		}
		if got := h.take(); !slices.Equal(got, []string{"o-1#2@5"}) {
			t.Errorf("last attempt %q", got)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if got := h.take(); len(got) != 0 {
			t.Errorf("delivered again after the confirmation: %q", got)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v", err)
		}
	})
}

// TestBurstLimit (fake time): at most BurstLimit redeliveries start per
// interval (counted over whole intervals, though Run looks twice per
// interval); first attempts are not counted; every delivery still gets
// its turn.
func TestBurstLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, delivery.Config[string]{RedeliverInterval: 10 * time.Second, BurstLimit: 4, Concurrency: 2})
		h.fail = func(delivery.Delivery[string]) error { return errors.New("down") }
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go h.d.Run(ctx)
		for i := range 10 {
			h.deliver(fmt.Sprintf("o-%d", i), "m")
		}
		synctest.Wait()
		if got := h.take(); len(got) != 10 {
			t.Fatalf("%d first attempts, want 10", len(got))
		}
		seen := map[string]bool{}
		for interval := range 4 {
			time.Sleep(10 * time.Second)
			synctest.Wait()
			got := h.take()
			if len(got) > 4 {
				t.Errorf("interval %d: %d redeliveries, want at most 4: %q", interval, len(got), got)
			}
			for _, g := range got {
				seen[strings.Split(g, "@")[0]] = true
			}
		}
		if len(seen) != 10 {
			t.Errorf("redelivered %d of 10 deliveries in 4 intervals of 4: %v", len(seen), seen)
		}
	})
}

// TestRunAgainDeliversWhatWasLeft: deliveries tracked but not attempted
// when a Run ended are attempted by the next Run.
func TestRunAgainDeliversWhatWasLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, delivery.Config[string]{RedeliverInterval: time.Hour, Concurrency: 1})
		gate := make(chan struct{})
		h.fail = func(delivery.Delivery[string]) error { <-gate; return nil }
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- h.d.Run(ctx) }()
		h.deliver("o-1", "a", "b", "c")
		synctest.Wait() // one attempt waits at the gate, two wait for the worker
		cancel()
		close(gate)
		<-done
		ctx2, cancel2 := context.WithCancel(t.Context())
		defer cancel2()
		go h.d.Run(ctx2)
		wait, stop := context.WithTimeout(t.Context(), 24*time.Hour) // fake time
		defer stop()
		if err := h.d.Drained(wait); err != nil {
			t.Fatalf("not drained a day later: %v, %d unconfirmed", err, h.d.Unconfirmed())
		}
		if got := h.take(); len(got) != 3 {
			t.Errorf("deliveries %q, want each of the 3 once", got)
		}
	})
}

// TestTrackFollowsOutboxes: whatever the order of deliveries and
// confirmations, the deliverer follows exactly the outbox's pending set.
func TestTrackFollowsOutboxes(t *testing.T) {
	d, err := delivery.New("Order", delivery.Config[int]{Confirm: func(context.Context, string, int64) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	var o delivery.Outbox[int]
	r := uint64(7)
	next := func(n int) int { r = r*6364136223846793005 + 1442695040888963407; return int(r>>33) % n }
	for step := range 3000 {
		switch k := next(10); {
		case k < 5 || o.Unconfirmed() == 0:
			for range next(3) + 1 {
				o, _ = o.Deliver("w", step)
			}
		case k < 8:
			o = o.Confirm(o.Pending[0].ID) // the oldest
		default:
			o = o.Confirm(o.Pending[next(len(o.Pending))].ID)
		}
		d.Track("o-1", o)
		if d.Unconfirmed() != o.Unconfirmed() {
			t.Fatalf("step %d: the deliverer follows %d, the outbox holds %d", step, d.Unconfirmed(), o.Unconfirmed())
		}
	}
	for o.Unconfirmed() > 0 {
		o = o.Confirm(o.Pending[len(o.Pending)-1].ID)
		d.Track("o-1", o)
	}
	if err := d.Drained(t.Context()); err != nil || d.Unconfirmed() != 0 {
		t.Errorf("after confirming everything: %d followed, %v", d.Unconfirmed(), err)
	}
}

// TestTinyIntervalRuns: a RedeliverInterval of a nanosecond does not stop
// Run (its ticker runs at most every millisecond).
func TestTinyIntervalRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, delivery.Config[string]{RedeliverInterval: time.Nanosecond})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- h.d.Run(ctx) }()
		h.deliver("o-1", "a")
		if err := h.d.Drained(t.Context()); err != nil {
			t.Fatal(err)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	})
}

// TestFailedConfirmationRedelivers: a destination that took the message
// but whose confirmation failed gets it again (it de-duplicates).
func TestFailedConfirmationRedelivers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, delivery.Config[string]{RedeliverInterval: time.Second})
		h.confirm = errors.New("entity restarting")
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go h.d.Run(ctx)
		h.deliver("o-1", "a")
		synctest.Wait()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		h.mu.Lock()
		h.confirm = nil
		h.mu.Unlock()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		got := h.take()
		if len(got) < 3 || got[0] != "o-1#1@1" || h.d.Unconfirmed() != 0 {
			t.Errorf("deliveries %q, %d unconfirmed; want the message again until confirmed", got, h.d.Unconfirmed())
		}
	})
}

func TestUnknownDestinationAndConfig(t *testing.T) {
	for _, c := range []struct {
		cfg  delivery.Config[string]
		want string
	}{
		{delivery.Config[string]{}, "Confirm is required"},
		{delivery.Config[string]{Confirm: func(context.Context, string, int64) error { return nil }, BurstLimit: -1}, "BurstLimit is negative"},
		{delivery.Config[string]{Confirm: func(context.Context, string, int64) error { return nil }, RedeliverInterval: -1}, "RedeliverInterval is negative"},
	} {
		if _, err := delivery.New("Order", c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v): %v, want %q", c.cfg, err, c.want)
		}
	}
	if _, err := delivery.New("Bad|Type", delivery.Config[string]{Confirm: func(context.Context, string, int64) error { return nil }}); err == nil {
		t.Error("an entity type with the separator was accepted")
	}
	synctest.Test(t, func(t *testing.T) {
		var logs strings.Builder
		d, err := delivery.New("Order", delivery.Config[string]{
			Confirm: func(context.Context, string, int64) error { return nil },
			Logger:  slogTo(&logs),
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go d.Run(ctx)
		o, _ := delivery.Outbox[string]{}.Deliver("nowhere", "m")
		d.Track("o-1", o)
		synctest.Wait()
		if !strings.Contains(logs.String(), `no destination named \"nowhere\"`) || d.Unconfirmed() != 1 {
			t.Errorf("log %q, %d unconfirmed; want the unknown destination named and the delivery kept", logs.String(), d.Unconfirmed())
		}
	})
}
