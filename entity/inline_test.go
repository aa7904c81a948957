package entity_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/journal"
)

// gatedJournal holds every HighestSequenceNr (the first call of a
// recovery without a recovery reader) until gate closes or the call's
// context ends; it counts the calls and those their context ended.
type gatedJournal struct {
	journal.Journal
	gate             chan struct{}
	calls, abandoned atomic.Int32
}

func (g *gatedJournal) HighestSequenceNr(ctx context.Context, pid string, from int64) (int64, error) {
	g.calls.Add(1)
	select {
	case <-g.gate:
	case <-ctx.Done():
		g.abandoned.Add(1)
		return 0, ctx.Err()
	}
	return g.Journal.HighestSequenceNr(ctx, pid, from)
}

// TestAskGivesUpWhileTheCommandGoesOn: a caller whose command finds its
// entity idle works for it on its own goroutine (the recovery and the
// handler), yet its context still bounds only its wait: when it ends
// during the recovery's read or its wait for a recovery slot, Ask returns
// ctx's error at once, the entity recovers on a goroutine of its own and
// handles the command, and the commands that queued meanwhile are
// answered. The recovery hooks see one recovery, not the one given up.
func TestAskGivesUpWhileTheCommandGoesOn(t *testing.T) {
	for _, where := range []string{"recovery read", "recovery slot"} {
		t.Run(where, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := memoryStores(t)
				gated := &gatedJournal{Journal: st.Journal, gate: make(chan struct{})}
				log := &hookLog{}
				h := newHost(t, stores{Journal: gated, Snapshots: st.Snapshots}, accountBehavior(), func(c *entity.HostConfig) {
					c.Hooks = []any{log}
					c.MaxConcurrentRecoveries = 1
				})
				if where == "recovery slot" {
					// Another entity holds the only slot, its read held.
					if err := h.Tell("other", Forget{}); err != nil {
						t.Fatal(err)
					}
					synctest.Wait()
				}
				ctx, cancel := context.WithCancel(t.Context())
				gaveUp := make(chan error, 1)
				go func() {
					_, err := deposit(ctx, h, "a", 5)
					gaveUp <- err
				}()
				queued := make(chan error, 1)
				synctest.Wait()
				go func() {
					_, err := deposit(t.Context(), h, "a", 7)
					queued <- err
				}()
				synctest.Wait()
				cancel()
				synctest.Wait()
				select {
				case err := <-gaveUp:
					if !errors.Is(err, context.Canceled) {
						t.Fatalf("the Ask given up returned %v, want context.Canceled", err)
					}
				default:
					t.Fatal("the Ask given up still waits for its command")
				}
				close(gated.gate)
				if err := <-queued; err != nil {
					t.Fatalf("the command queued behind it: %v", err)
				}
				mustBalance(t, h, "a", 12) // both deposits handled
				wantAbandoned := int32(1)
				if where == "recovery slot" {
					wantAbandoned = 0 // given up before its read started
				}
				if n := gated.abandoned.Load(); n != wantAbandoned {
					t.Errorf("%d recovery reads abandoned, want %d", n, wantAbandoned)
				}
				var recoveries []string
				for _, l := range log.take() {
					if len(l) > 17 && l[:17] == "recovered Account" {
						recoveries = append(recoveries, l)
					}
				}
				want := []string{"recovered Account|a from snapshot 0, 0 events, at 0 in 0s (<nil>)"}
				if where == "recovery slot" {
					want = []string{"recovered Account|other from snapshot 0, 0 events, at 0 in 0s (<nil>)", want[0]}
				}
				if !slices.Equal(recoveries, want) {
					t.Errorf("recovery hooks said %q, want %q", recoveries, want)
				}
			})
		})
	}
}

// TestWriterIDPerIncarnation: the events an entity writes between two
// recoveries carry one writer id, made for them; after a recovery its
// events carry another (Akka's writerUuid per incarnation).
func TestWriterIDPerIncarnation(t *testing.T) {
	st := memoryStores(t)
	ctx := t.Context()
	for i := range 2 { // two incarnations, each in a host of its own
		h := newHost(t, st, accountBehavior())
		mustBalance(t, h, "w", int64(2*i)) // recovered
		for range 2 {
			if _, err := deposit(ctx, h, "w", 1); err != nil {
				t.Fatal(err)
			}
		}
		if err := h.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	events := replayPayloadManifests(t, st.Journal, "Account|w")
	if len(events) != 4 {
		t.Fatalf("%d events stored, want 4", len(events))
	}
	ids := []string{events[0].WriterID, events[1].WriterID, events[2].WriterID, events[3].WriterID}
	if ids[0] == "" || ids[2] == "" || ids[0] != ids[1] || ids[2] != ids[3] || ids[0] == ids[2] {
		t.Errorf("writer ids %q: want one non-empty id per incarnation, two different ones", ids)
	}
}

// TestConcurrentCallersOfOneEntity: callers that find one entity idle in
// turn, each working for it on its own goroutine, never work for it at
// once (run with -race: a caller that touched the instance after releasing
// it raced with the next), and every command is handled once.
func TestConcurrentCallersOfOneEntity(t *testing.T) {
	h := newHost(t, memoryStores(t), accountBehavior())
	const callers, each = 4, 1000
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for i := range each {
				if c == 0 && i%100 == 0 { // a few persists among the reads
					if _, err := deposit(t.Context(), h, "shared", 1); err != nil {
						t.Error(err)
						return
					}
					continue
				}
				if _, err := balance(t.Context(), h, "shared"); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	mustBalance(t, h, "shared", each/100)
}

// block is a command whose handler waits for wait to close.
type block struct{ wait chan struct{} }

func (block) isCommand() {}

// TestAStashedCallerLeavesTheRestToTheEntity: a caller working for an idle
// entity handles its own command only; once that is stashed, the commands
// that came meanwhile go to the entity's goroutine, and the caller's
// context still bounds its wait while one of them blocks.
func TestAStashedCallerLeavesTheRestToTheEntity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		entered, proceed := make(chan struct{}), make(chan struct{})
		b := accountBehavior()
		inner := b.Command
		b.Command = func(s State, c Command) entity.ReplyEffect[Event, State] {
			switch c := c.(type) {
			case block:
				<-c.wait
				return fx.None().ThenNoReply()
			case GetBalance:
				if s.Held {
					close(entered)
					<-proceed
				}
			}
			return inner(s, c)
		}
		h := newHost(t, memoryStores(t), b)
		if err := h.Send(t.Context(), "a", Hold{}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		ctx, cancel := context.WithCancel(t.Context())
		asked := make(chan error, 1)
		go func() {
			_, err := balance(ctx, h, "a") // stashed: the account is held
			asked <- err
		}()
		<-entered // the caller runs the handler
		wait := make(chan struct{})
		if err := h.Tell("a", block{wait: wait}); err != nil {
			t.Fatal(err)
		}
		close(proceed)
		synctest.Wait() // the block command waits, on the entity's goroutine
		cancel()
		synctest.Wait()
		select {
		case err := <-asked:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("the Ask returned %v, want context.Canceled", err)
			}
		default:
			t.Fatal("the Ask still waits: its goroutine is handling another client's command")
		}
		close(wait)
		if err := h.Send(t.Context(), "a", Release{}); err != nil {
			t.Fatal(err)
		}
		mustBalance(t, h, "a", 0)
	})
}

// panicOnFirstRecovery is a recovery hook that panics the first time.
type panicOnFirstRecovery struct{ calls atomic.Int32 }

func (p *panicOnFirstRecovery) OnRecovered(entity.Recovered) {
	if p.calls.Add(1) == 1 {
		panic("hook bug")
	}
}

// TestHookPanicOnTheCallersGoroutine: a hook that panics while a caller
// works for an entity panics in the caller (as it did on the entity's own
// goroutine), and leaves no entity without a worker: the next command is
// handled and Shutdown returns.
func TestHookPanicOnTheCallersGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHost(t, memoryStores(t), accountBehavior(), func(c *entity.HostConfig) {
			c.Hooks = []any{&panicOnFirstRecovery{}}
		})
		var panicked any
		func() {
			defer func() { panicked = recover() }()
			_, _ = balance(t.Context(), h, "a")
		}()
		if panicked == nil {
			t.Fatal("the hook's panic did not reach the caller")
		}
		synctest.Wait()
		mustBalance(t, h, "a", 0)
		if err := h.Shutdown(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// exit is a command whose handler ends its goroutine (runtime.Goexit, as
// t.Fatal in a handler does).
type exit struct{}

func (exit) isCommand() {}

// TestGoexitOnTheCallersGoroutine: a handler that ends the goroutine it
// runs on (the caller's, for an idle entity) leaves no entity without a
// worker: the next command is handled and Shutdown returns.
func TestGoexitOnTheCallersGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := accountBehavior()
		inner := b.Command
		b.Command = func(s State, c Command) entity.ReplyEffect[Event, State] {
			if _, ok := c.(exit); ok {
				runtime.Goexit()
			}
			return inner(s, c)
		}
		h := newHost(t, memoryStores(t), b)
		exited := make(chan struct{})
		go func() {
			defer close(exited)
			_ = h.Send(t.Context(), "a", exit{})
		}()
		<-exited
		synctest.Wait()
		mustBalance(t, h, "a", 0)
		if err := h.Shutdown(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}
