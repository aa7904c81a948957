package behaviortest_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/entity/behaviortest"
	"github.com/annals-go/annals/serialization"
)

// A counter: Add persists Added (or, with a note, also Noted), Get replies
// with the state.
type command interface{ isCommand() }

type add struct {
	N     int
	Note  string
	Reply entity.ReplyTo[int]
}
type get struct{ Reply entity.ReplyTo[counter] }

func (add) isCommand() {}
func (get) isCommand() {}

type event interface{ isEvent() }

type added struct{ N int }
type noted struct {
	Text   string
	secret string // not serialized: noted does not round-trip when it is set
}

func (added) isEvent() {}
func (noted) isEvent() {}

type counter struct {
	Total int
	Notes []string
}

var errNegative = errors.New("negative")

func behavior(snapshotEvery int64) entity.Behavior[command, event, counter] {
	var fx entity.Effects[event, counter]
	return entity.Behavior[command, event, counter]{
		EntityType: "Counter",
		Command: func(s counter, c command) entity.ReplyEffect[event, counter] {
			switch c := c.(type) {
			case add:
				if c.N < 0 {
					return fx.Reply(func(counter) { c.Reply.Fail(errNegative) })
				}
				evs := []event{added{c.N}}
				if c.Note != "" {
					evs = append(evs, noted{Text: c.Note, secret: strings.TrimPrefix(c.Note, "public")})
				}
				return fx.Persist(evs...).ThenReply(func(s counter) { c.Reply.Send(s.Total) })
			case get:
				return fx.Reply(func(s counter) { c.Reply.Send(s) })
			}
			return fx.Unhandled()
		},
		Event: func(s counter, e event) counter {
			switch e := e.(type) {
			case added:
				s.Total += e.N
			case noted:
				s.Notes = append(slices.Clone(s.Notes), e.Text)
			}
			return s
		},
		Snapshots: entity.SnapshotPolicy[event, counter]{Every: snapshotEvery},
	}
}

func registry(t *testing.T) *serialization.Registry {
	t.Helper()
	reg := serialization.NewRegistry()
	if err := errors.Join(serialization.RegisterJSON[added](reg, "c.Added"), serialization.RegisterJSON[noted](reg, "c.Noted"),
		serialization.RegisterJSON[counter](reg, "c.Counter")); err != nil {
		t.Fatal(err)
	}
	return reg
}

func addN(n int, note string) func(entity.ReplyTo[int]) command {
	return func(r entity.ReplyTo[int]) command { return add{N: n, Note: note, Reply: r} }
}

// TestRunRestartState: Run reports each command's events, state and reply
// (or error); State and Recovered give what recovery rebuilds after a
// Restart, from a snapshot and the events after it.
func TestRunRestartState(t *testing.T) {
	k := behaviortest.New(t, behavior(2), registry(t))
	r := behaviortest.Run(k, "c1", addN(3, ""))
	if r.Err != nil || r.Reply != 3 || !slices.Equal(r.Events, []event{added{3}}) || r.State.Total != 3 {
		t.Errorf("first add: %+v", r)
	}
	r = behaviortest.Run(k, "c1", addN(4, "public"))
	if r.Err != nil || r.Reply != 7 || len(r.Events) != 2 || r.State.Total != 7 || !slices.Equal(r.State.Notes, []string{"public"}) {
		t.Errorf("add with a note: %+v", r)
	}
	r = behaviortest.Run(k, "c1", addN(-1, ""))
	if !errors.Is(r.Err, errNegative) || len(r.Events) != 0 || r.State.Total != 7 {
		t.Errorf("a refused add: %+v; want the error, no events, the state unchanged", r)
	}
	g := behaviortest.Run(k, "c1", func(rt entity.ReplyTo[counter]) command { return get{rt} })
	if g.Err != nil || g.Reply.Total != 7 || len(g.Events) != 0 {
		t.Errorf("get: %+v", g)
	}

	k.Restart()
	if _, _, ok := k.Recovered("c1"); ok {
		t.Error("Recovered before any command after Restart: want not yet")
	}
	s, seq := k.State("c1")
	if s.Total != 7 || seq != 3 || !slices.Equal(s.Notes, []string{"public"}) {
		t.Errorf("state after restart: %+v at %d; want 7 and the note at 3", s, seq)
	}
	if rs, rseq, ok := k.Recovered("c1"); !ok || rs.Total != 7 || rseq != 3 {
		t.Errorf("Recovered: %+v at %d (%v)", rs, rseq, ok)
	}
	if s, seq := k.State("unknown"); s.Total != 0 || seq != 0 {
		t.Errorf("state of an entity with no events: %+v at %d", s, seq)
	}
}

// recorder keeps what the kit reports instead of failing the test.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestRoundTripChecked: an event that loses a field in the registry, and a
// snapshot state the registry cannot serialize, are reported.
func TestRoundTripChecked(t *testing.T) {
	rec := &recorder{TB: t}
	k := behaviortest.New(rec, behavior(0), registry(t))
	behaviortest.Run(k, "c", addN(1, "public"))
	if len(rec.errs) != 0 {
		t.Errorf("a note whose unexported part is empty round-trips; the kit said %q", rec.errs)
	}
	behaviortest.Run(k, "c", addN(1, "hidden"))
	if len(rec.errs) != 1 || !strings.Contains(rec.errs[0], "event 4 of Counter|c does not round-trip") {
		t.Errorf("a note that loses its unexported part: the kit said %q; want event 4 named", rec.errs)
	}

	reg := serialization.NewRegistry()
	if err := errors.Join(serialization.RegisterJSON[added](reg, "c.Added"), serialization.RegisterJSON[noted](reg, "c.Noted")); err != nil {
		t.Fatal(err)
	}
	rec = &recorder{TB: t}
	k = behaviortest.New(rec, behavior(0), reg) // no snapshots: the state is not checked
	behaviortest.Run(k, "c", addN(1, ""))
	if len(rec.errs) != 0 {
		t.Errorf("without snapshots the state need not serialize; the kit said %q", rec.errs)
	}
}
