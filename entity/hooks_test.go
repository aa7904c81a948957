package entity_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/journal"
)

// ctxKey names a value the test puts in a context.
type ctxKey string

// values lists the test's context values ctx carries, and whether it is
// done.
func values(ctx context.Context) string {
	var out []string
	for _, k := range []ctxKey{"sender", "command", "persist"} {
		if v, ok := ctx.Value(k).(string); ok {
			out = append(out, string(k)+"="+v)
		}
	}
	if ctx.Err() != nil {
		out = append(out, "done")
	}
	return fmt.Sprint(out)
}

// commandLog records the command and persist hooks as lines (and only
// those); its start hooks add a value to the context.
type commandLog struct {
	lines hookLog
	added chan struct{} // a token per line
}

func newCommandLog() *commandLog { return &commandLog{added: make(chan struct{}, 1000)} }

func (c *commandLog) add(format string, args ...any) {
	c.lines.add(format, args...)
	c.added <- struct{}{}
}

// take waits for n lines (an Ask returns once the reply is sent, before
// its command's end is reported) and returns the lines.
func (c *commandLog) take(t *testing.T, n int) []string {
	t.Helper()
	for range n {
		select {
		case <-c.added:
		case <-t.Context().Done():
			t.Fatalf("waiting for %d lines: %q", n, c.lines.take())
		}
	}
	return c.lines.take()
}

func (c *commandLog) OnCommandStart(ctx context.Context, pid string) context.Context {
	c.add("command start %s %s", pid, values(ctx))
	return context.WithValue(ctx, ctxKey("command"), pid)
}

func (c *commandLog) OnCommandEnd(ctx context.Context, pid string, err error) {
	c.add("command end %s %s (%v)", pid, values(ctx), err)
}

func (c *commandLog) OnPersistStart(ctx context.Context, p entity.Persist) context.Context {
	c.add("persist start %s %d..%d %s", p.PersistenceID, p.FromSequenceNr, p.ToSequenceNr, values(ctx))
	return context.WithValue(ctx, ctxKey("persist"), fmt.Sprint(p.ToSequenceNr))
}

func (c *commandLog) OnPersistEnd(ctx context.Context, p entity.Persist, err error) {
	c.add("persist end %s %d..%d %s (%v)", p.PersistenceID, p.FromSequenceNr, p.ToSequenceNr, values(ctx), err)
}

// ctxJournal logs the context values each Write gets; with a gate it
// waits for it first (after saying so on entered).
type ctxJournal struct {
	journal.Journal
	log     *commandLog
	mu      sync.Mutex
	gate    chan struct{}
	entered chan struct{}
}

func (j *ctxJournal) hold() (gate, entered chan struct{}) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.gate, j.entered = make(chan struct{}), make(chan struct{})
	return j.gate, j.entered
}

func (j *ctxJournal) Write(ctx context.Context, ws []journal.AtomicWrite) ([]error, error) {
	j.mu.Lock()
	gate, entered := j.gate, j.entered
	j.gate, j.entered = nil, nil
	j.mu.Unlock()
	if gate != nil {
		close(entered)
		<-gate
	}
	j.log.add("store write %s", values(ctx))
	return j.Journal.Write(ctx, ws)
}

// TestCommandHooks: the command and persist hooks fire in order with the
// right values, the command's context reaches the persist and the store
// call with its values and without its cancellation, and a refused
// command ends too.
func TestCommandHooks(t *testing.T) {
	st := memoryStores(t)
	log := newCommandLog()
	j := &ctxJournal{Journal: st.Journal, log: log}
	h := newHost(t, stores{Journal: j, Snapshots: st.Snapshots}, accountBehavior(), func(c *entity.HostConfig) {
		c.Hooks = []any{log}
		c.MailboxCapacity = 2
	})
	sender := context.WithValue(t.Context(), ctxKey("sender"), "s")

	cases := []struct {
		name string
		do   func(t *testing.T)
		want []string
	}{
		{"a deposit", func(t *testing.T) {
			if _, err := deposit(sender, h, "a", 1); err != nil {
				t.Fatal(err)
			}
		}, []string{
			"command start Account|a [sender=s]",
			"persist start Account|a 1..1 [sender=s command=Account|a]",
			"store write [sender=s command=Account|a persist=1]",
			"persist end Account|a 1..1 [sender=s command=Account|a persist=1] (<nil>)",
			"command end Account|a [sender=s command=Account|a] (<nil>)",
		}},
		{"an atomic write of two events, from Tell", func(t *testing.T) {
			if err := h.Tell("a", DepositMany{Amounts: []int64{1, 2}}); err != nil {
				t.Fatal(err)
			}
		}, []string{
			"command start Account|a []",
			"persist start Account|a 2..3 [command=Account|a]",
			"store write [command=Account|a persist=3]",
			"persist end Account|a 2..3 [command=Account|a persist=3] (<nil>)",
			"command end Account|a [command=Account|a] (<nil>)",
		}},
		{"an unhandled command", func(t *testing.T) {
			if err := h.Send(sender, "a", Forget{}); err != nil {
				t.Fatal(err)
			}
		}, []string{
			"command start Account|a [sender=s]",
			"command end Account|a [sender=s command=Account|a] (<nil>)",
		}},
		{"a sender that gives up: the write goes on, not cancelled; a refused command ends", func(t *testing.T) {
			gate, entered := j.hold()
			ctx, cancel := context.WithCancel(sender)
			done := make(chan error, 1)
			go func() { _, err := deposit(ctx, h, "a", 1); done <- err }()
			<-entered
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("Ask after cancel: %v", err)
			}
			for range 2 {
				if err := h.Tell("a", Deposit{Amount: 1}); err != nil {
					t.Fatal(err)
				}
			}
			if err := h.Tell("a", Deposit{Amount: 1}); !errors.Is(err, entity.ErrMailboxFull) {
				t.Errorf("a third Tell while the write waits: %v, want ErrMailboxFull", err)
			}
			close(gate)
		}, []string{
			"command start Account|a [sender=s]",
			"persist start Account|a 4..4 [sender=s command=Account|a]",
			"command start Account|a []",
			"command start Account|a []",
			"command start Account|a []",
			"command end Account|a [command=Account|a] (entity: mailbox full: 2 commands wait for Account|a)",
			"store write [sender=s command=Account|a persist=4]",
			"persist end Account|a 4..4 [sender=s command=Account|a persist=4] (<nil>)",
			"command end Account|a [sender=s command=Account|a done] (<nil>)", // the sender's context, cancelled: the write's was not
			"persist start Account|a 5..5 [command=Account|a]",
			"store write [command=Account|a persist=5]",
			"persist end Account|a 5..5 [command=Account|a persist=5] (<nil>)",
			"command end Account|a [command=Account|a] (<nil>)",
			"persist start Account|a 6..6 [command=Account|a]",
			"store write [command=Account|a persist=6]",
			"persist end Account|a 6..6 [command=Account|a persist=6] (<nil>)",
			"command end Account|a [command=Account|a] (<nil>)",
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.do(t)
			if got := log.take(t, len(c.want)); !slices.Equal(got, c.want) {
				t.Errorf("hooks said\n%q\nwant\n%q", got, c.want)
			}
		})
	}
	mustBalance(t, h, "a", 7)
}

// TestOnPersisted: the behavior's OnPersisted sees each stored write with
// the new state, before the reply; not a command that persists nothing,
// not a rejected one, not recovery.
func TestOnPersisted(t *testing.T) {
	st := memoryStores(t)
	var seen []string
	b := accountBehavior()
	b.OnPersisted = func(id string, s State, events []Event) {
		seen = append(seen, fmt.Sprintf("%s balance %d after %d events", id, s.Balance, len(events)))
	}
	h := newHost(t, stores{Journal: &faultyJournal{Journal: st.Journal, failAt: map[int]string{2: "reject"}}, Snapshots: st.Snapshots}, b)
	if _, err := deposit(t.Context(), h, "a", 5); err != nil {
		t.Fatal(err)
	}
	if _, err := deposit(t.Context(), h, "a", 100); !errors.Is(err, journal.ErrRejected) {
		t.Fatalf("the second write: %v, want the journal's rejection", err)
	}
	if err := h.Send(t.Context(), "a", DepositMany{Amounts: []int64{1, 2}}); err != nil {
		t.Fatal(err)
	}
	if err := h.Send(t.Context(), "a", Forget{}); err != nil {
		t.Fatal(err)
	}
	mustBalance(t, h, "a", 8) // the reply comes after OnPersisted: seen is complete
	want := []string{"a balance 5 after 1 events", "a balance 8 after 2 events"}
	if !slices.Equal(seen, want) {
		t.Errorf("OnPersisted saw %q, want %q", seen, want)
	}
	if err := h.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	h2 := newHost(t, st, b)
	mustBalance(t, h2, "a", 8) // recovery replays both writes
	if !slices.Equal(seen, want) {
		t.Errorf("after recovery OnPersisted saw %q, want %q (not called on replay)", seen, want)
	}
}
