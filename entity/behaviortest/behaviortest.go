// Package behaviortest tests an entity behavior in isolation, after Akka's
// EventSourcedBehaviorTestKit: run a command and get the events it
// persisted, the state after them and the reply; restart and get the state
// recovery rebuilds; and check, on every command, that each persisted event
// and (when the behavior takes snapshots) the state round-trip through the
// registry.
//
// It runs the behavior on a real host over the in-memory store
// (store/memory), so a user's entity tests need neither cgo nor a
// database. A Kit is for one test goroutine: Run and State wait for their
// command, one at a time.
package behaviortest

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/store/memory"
)

// Kit runs one behavior on a host over the memory store.
type Kit[C, E, S any] struct {
	t     testing.TB
	b     entity.Behavior[C, E, S] // the user's
	reg   *serialization.Registry
	store *memory.Store
	host  *entity.Host[C, E, S]

	mu        sync.Mutex
	probing   bool // the next command is the kit's own: not the user's
	before    S    // the state the last command met
	applied   []E  // events applied since that command, the originals
	after     S    // the state after the last event applied
	recovered map[string]recovered[S]
}

// recovered is what an entity's recovery rebuilt.
type recovered[S any] struct {
	state S
	seq   int64
}

// New starts a kit for b, whose events and state reg serializes; it is
// shut down when t ends.
func New[C, E, S any](t testing.TB, b entity.Behavior[C, E, S], reg *serialization.Registry) *Kit[C, E, S] {
	t.Helper()
	k := &Kit[C, E, S]{t: t, b: b, reg: reg, store: memory.New(), recovered: map[string]recovered[S]{}}
	k.start()
	t.Cleanup(func() {
		k.stop()
		_ = k.store.Close()
	})
	return k
}

// instrumented is the user's behavior with the kit's observers around its
// handlers; they change nothing it does.
func (k *Kit[C, E, S]) instrumented() entity.Behavior[C, E, S] {
	b := k.b
	command, event, onRecovered := b.Command, b.Event, b.OnRecovered
	var fx entity.Effects[E, S]
	b.Command = func(s S, c C) entity.ReplyEffect[E, S] {
		k.mu.Lock()
		probing := k.probing
		k.probing = false
		k.before, k.after, k.applied = s, s, nil
		k.mu.Unlock()
		if probing {
			return fx.Unhandled()
		}
		return command(s, c)
	}
	b.Event = func(s S, e E) S {
		next := event(s, e)
		k.mu.Lock()
		k.applied = append(k.applied, e)
		k.after = next
		k.mu.Unlock()
		return next
	}
	b.OnRecovered = func(id string, s S, seq int64) {
		k.mu.Lock()
		k.recovered[id] = recovered[S]{s, seq}
		k.mu.Unlock()
		if onRecovered != nil {
			onRecovered(id, s, seq)
		}
	}
	return b
}

func (k *Kit[C, E, S]) start() {
	k.t.Helper()
	h, err := entity.NewHost(k.instrumented(), entity.HostConfig{
		Journal: k.store.Journal(), Snapshots: k.store.Snapshots(), Registry: k.reg,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		k.t.Fatalf("behaviortest: %v", err)
	}
	k.host = h
}

func (k *Kit[C, E, S]) stop() {
	if err := k.host.Shutdown(context.Background()); err != nil {
		k.t.Errorf("behaviortest: shutting the host down: %v", err)
	}
}

// Result is what one command did.
type Result[E, S, R any] struct {
	// Events are the events the command persisted, in order, as the
	// behavior made them (not read back).
	Events []E
	// State is the state after them (the state the command met, when it
	// persisted none).
	State S
	// Reply is the command's reply, when it sent one.
	Reply R
	// Err is the command's error: a failed reply, a rejected or failed
	// write, entity.ErrUnhandled, entity.ErrNoReply, ...
	Err error
}

// RunTimeout bounds how long Run waits for a command's reply (a command
// the behavior stashes and never unstashes would wait for good).
const RunTimeout = time.Minute

// Run sends the command mk builds to entity id, waits for its reply (at
// most RunTimeout), and returns what it did. It fails the test when an
// event it persisted, or the state after it (when the behavior takes
// snapshots), does not round-trip through the registry. A command the
// handler never saw (refused before it, or stashed) has no events and the
// zero State.
func Run[R, C, E, S any](k *Kit[C, E, S], id string, mk func(entity.ReplyTo[R]) C) Result[E, S, R] {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), RunTimeout)
	defer cancel()
	k.mu.Lock()
	var zero S
	k.applied, k.after = nil, zero
	k.mu.Unlock()
	pid := annals.PersistenceID(k.b.EntityType, id)
	from, err := k.store.Journal().HighestSequenceNr(ctx, pid, 0)
	if err != nil {
		k.t.Fatalf("behaviortest: %v", err)
	}
	reply, err := entity.Ask(ctx, k.host, id, mk)
	k.mu.Lock()
	res := Result[E, S, R]{Events: append([]E(nil), k.applied...), State: k.after, Reply: reply, Err: err}
	k.mu.Unlock()
	k.checkEvents(pid, from, res.Events)
	k.checkState(res.State)
	return res
}

// checkEvents fails the test unless the events stored after from are the
// events the command persisted, decoded as recovery decodes them.
func (k *Kit[C, E, S]) checkEvents(pid string, from int64, events []E) {
	k.t.Helper()
	i := 0
	for r, err := range k.store.Journal().Replay(context.Background(), pid, from+1, math.MaxInt64, math.MaxInt64) {
		if err != nil {
			k.t.Fatalf("behaviortest: reading back %s: %v", pid, err)
		}
		decoded, err := k.b.DecodeEvent(k.reg, r)
		if err != nil {
			k.t.Errorf("behaviortest: event %d of %s does not decode: %v", r.SequenceNr, pid, err)
			i++
			continue
		}
		for _, d := range decoded {
			if i >= len(events) {
				k.t.Errorf("behaviortest: event %d of %s decodes to more events than the command persisted: %#v", r.SequenceNr, pid, d)
				continue
			}
			if !reflect.DeepEqual(d, events[i]) {
				k.t.Errorf("behaviortest: event %d of %s does not round-trip through the registry: persisted %#v, read back %#v", r.SequenceNr, pid, events[i], d)
			}
			i++
		}
	}
	if i < len(events) {
		k.t.Errorf("behaviortest: %s: the command persisted %d events, %d were read back", pid, len(events), i)
	}
}

// checkState fails the test unless s round-trips through the registry,
// when the behavior takes snapshots of it.
func (k *Kit[C, E, S]) checkState(s S) {
	k.t.Helper()
	if k.b.Snapshots.Every == 0 && k.b.Snapshots.When == nil {
		return
	}
	payload, id, manifest, err := k.reg.Serialize(s)
	if err != nil {
		k.t.Errorf("behaviortest: the state does not serialize: %v", err)
		return
	}
	back, err := k.reg.Deserialize(payload, id, manifest)
	if err != nil {
		k.t.Errorf("behaviortest: the state does not deserialize: %v", err)
		return
	}
	if !reflect.DeepEqual(back, any(s)) {
		k.t.Errorf("behaviortest: the state does not round-trip through the registry: %#v read back as %#v", s, back)
	}
}

// Restart shuts the host down and starts a new one on the same store, as a
// process restart would: the next command for an entity recovers it from
// its snapshot and events.
func (k *Kit[C, E, S]) Restart() {
	k.t.Helper()
	k.stop()
	k.mu.Lock()
	clear(k.recovered)
	k.mu.Unlock()
	k.start()
}

// State returns entity id's state and sequence number as the host holds
// them, recovering the entity first if it is not live (after New or
// Restart: the state recovery rebuilds). It sends the entity a command of
// the kit's own that the behavior's handler never sees.
func (k *Kit[C, E, S]) State(id string) (S, int64) {
	k.t.Helper()
	k.mu.Lock()
	k.probing = true
	k.mu.Unlock()
	var zero C
	err := k.host.Send(context.Background(), id, zero)
	k.mu.Lock()
	defer k.mu.Unlock()
	k.probing = false
	if err != nil && !errors.Is(err, entity.ErrUnhandled) {
		k.t.Fatalf("behaviortest: state of %s: %v", id, err)
	}
	seq, _ := k.store.Journal().HighestSequenceNr(context.Background(), annals.PersistenceID(k.b.EntityType, id), 0)
	return k.before, seq
}

// Recovered returns the state and sequence number entity id's last
// recovery rebuilt, and whether it recovered since New or Restart.
func (k *Kit[C, E, S]) Recovered(id string) (state S, seq int64, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	r, ok := k.recovered[id]
	return r.state, r.seq, ok
}
