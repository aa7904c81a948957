package projection_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/projection"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/store/memory"
)

type accountEvent interface{ amount() int64 }

type deposited struct{ Amount int64 }
type withdrawn struct{ Amount int64 }

func (d deposited) amount() int64 { return d.Amount }
func (w withdrawn) amount() int64 { return -w.Amount }

func typedRegistry(t *testing.T) *serialization.Registry {
	t.Helper()
	reg := serialization.NewRegistry()
	if err := errors.Join(serialization.RegisterJSON[deposited](reg, "t.Deposited"), serialization.RegisterJSON[withdrawn](reg, "t.Withdrawn"),
		serialization.RegisterJSON[struct{ Other int }](reg, "t.Other")); err != nil {
		t.Fatal(err)
	}
	return reg
}

func envelope(t *testing.T, reg *serialization.Registry, seq int64, v any) query.Envelope {
	t.Helper()
	r := journal.Repr{PersistenceID: "A|1", SequenceNr: seq}
	var err error
	if r.Payload, r.SerializerID, r.Manifest, err = reg.Serialize(v); err != nil {
		t.Fatal(err)
	}
	return query.FromRepr(r, query.SequenceOffset(seq))
}

// TestTypedHandlers: each adapter decodes through the decoder and hands
// the values over in order, with their envelopes; an event that does not
// decode to the handler's type, or does not decode, is the handler's error
// naming the event.
func TestTypedHandlers(t *testing.T) {
	reg := typedRegistry(t)
	decode := projection.RegistryDecoder[accountEvent](reg)
	good := []query.Envelope{envelope(t, reg, 1, deposited{5}), envelope(t, reg, 2, withdrawn{2}), envelope(t, reg, 3, deposited{10})}
	wrongType := envelope(t, reg, 4, struct{ Other int }{1})
	corrupt := good[0]
	corrupt.SequenceNr, corrupt.Payload = 5, []byte("{not json")
	ctx := t.Context()

	var single []int64
	one := projection.Typed(decode, func(_ context.Context, env query.Envelope, e accountEvent) error {
		single = append(single, env.SequenceNr*100+e.amount())
		return nil
	})
	var tx []int64
	oneTx := projection.TypedTx(decode, func(_ context.Context, tx0 string, env query.Envelope, e accountEvent) error {
		if tx0 != "tx" {
			t.Errorf("TypedTx passed transaction %q", tx0)
		}
		tx = append(tx, env.SequenceNr*100+e.amount())
		return nil
	})
	var groups [][]int64
	group := projection.TypedGroup(decode, func(_ context.Context, evs []projection.Event[accountEvent]) error {
		var g []int64
		for _, e := range evs {
			g = append(g, e.SequenceNr*100+e.Event.amount())
		}
		groups = append(groups, g)
		return nil
	})
	groupTx := projection.TypedGroupTx(decode, func(_ context.Context, _ string, evs []projection.Event[accountEvent]) error {
		return group(ctx, envsOf(evs))
	})
	for _, env := range good {
		if err := one(ctx, env); err != nil {
			t.Fatal(err)
		}
		if err := oneTx(ctx, "tx", env); err != nil {
			t.Fatal(err)
		}
	}
	if err := group(ctx, good); err != nil {
		t.Fatal(err)
	}
	if err := groupTx(ctx, "tx", good[1:]); err != nil {
		t.Fatal(err)
	}
	want := []int64{105, 198, 310}
	if !slices.Equal(single, want) || !slices.Equal(tx, want) || len(groups) != 2 || !slices.Equal(groups[0], want) || !slices.Equal(groups[1], want[1:]) {
		t.Errorf("decoded: single %v, tx %v, groups %v; want %v each", single, tx, groups, want)
	}

	for _, c := range []struct {
		name string
		env  query.Envelope
		want string
	}{
		{"another type", wrongType, `event 4 of A|1`},
		{"corrupt payload", corrupt, `event 5 of A|1 (serializer`},
	} {
		for _, err := range []error{one(ctx, c.env), oneTx(ctx, "tx", c.env), group(ctx, []query.Envelope{good[0], c.env})} {
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: %v, want an error naming %q", c.name, err, c.want)
			}
		}
	}
}

func envsOf(evs []projection.Event[accountEvent]) []query.Envelope {
	var out []query.Envelope
	for _, e := range evs {
		out = append(out, e.Envelope)
	}
	return out
}

// TestTypedProjectionRuns: a typed handler in a running projection gets
// every event, decoded.
func TestTypedProjectionRuns(t *testing.T) {
	reg := typedRegistry(t)
	s := memory.New()
	var w journal.AtomicWrite
	w.PersistenceID = "T|1"
	for i, v := range []any{deposited{7}, withdrawn{3}, deposited{1}} {
		r := journal.Repr{PersistenceID: "T|1", SequenceNr: int64(i + 1)}
		var err error
		if r.Payload, r.SerializerID, r.Manifest, err = reg.Serialize(v); err != nil {
			t.Fatal(err)
		}
		w.Events = append(w.Events, r)
	}
	if res, err := s.Journal().Write(t.Context(), []journal.AtomicWrite{w}); err != nil || res != nil {
		t.Fatal(res, err)
	}
	total := make(chan int64, 3)
	p, err := projection.AtLeastOnce(projection.ID{Name: "typed"}, allSlices(s.Queries(), "T"), s.Projections(),
		projection.Typed(projection.RegistryDecoder[accountEvent](reg), func(_ context.Context, _ query.Envelope, e accountEvent) error {
			total <- e.amount()
			return nil
		}), quiet)
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, p)
	var sum int64
	for range 3 {
		sum += <-total
	}
	stop()
	if sum != 5 {
		t.Errorf("sum of the decoded amounts %d, want 5", sum)
	}
}
