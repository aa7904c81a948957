package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/serialization"
)

func crashTestCommand() *command {
	return &command{
		name: "crash-test", summary: "kill a writer process again and again and verify that nothing acknowledged is lost",
		help: `Shows, on your own database, that Annals keeps what it acknowledged. In a
scratch store beside the one --store names (a new file in the same
directory for SQLite, a new schema or keyspace on the same server, for
Kafka also topics of its own; removed at the end, kept when something is
wrong), each cycle starts a
writer process (this same program) that runs --entities entities, each
command persisting one event or an atomic group of three, and, once the
writer has had its first write acknowledged, kills it with SIGKILL at a
random moment within --max-run (while entities recover, write or
snapshot). After each kill it checks every entity's journal:

  lost          an event whose write was acknowledged is not there
  duplicated    one write's events are stored twice
  half-written  part of an atomic group is stored without the rest
  gaps          sequence numbers are not contiguous
  recovery      a new host, recovering the entity (from its snapshot and
                the events after it), does not reach the journal's state
  refused-stored  a write the store refused (a rejection: definitely not
                stored) is stored

With --oversized N, about one write in N carries an event whose payload
is one byte above the store's payload limit: the store must refuse that
write alone (the writes of other entities in the same store call are
stored), and the entity writes its next events at the refused numbers.

and prints a summary: cycles, acknowledged writes and events, the counts
above, and the time a new host took to recover an entity (p50, p99).
Exit code 1 when any count is not zero.

An interrupt (Ctrl-C) ends the run after the cycle under way: the summary
covers the cycles checked in full, and the command says "interrupted" and
exits 130, never OK.

What it can catch: a store, driver or configuration that acknowledges a
write before the database has it (a commit that is not one, a lost
transaction, an atomic group split), recovery that misreads the journal.
What it cannot: a process kill leaves the operating system running, so
what the database handed to the OS survives even when it was never
flushed to disk. PostgreSQL with synchronous_commit=off or SQLite with
synchronous=OFF pass here and lose acknowledged writes in a power cut or
an OS crash; to test those, run the writer in a VM you reset instead.

--json prints {"store", "scratch", "cycles", "entities", "snapshot_every",
"acknowledged_writes", "acknowledged_events", "stored_events", "lost",
"duplicated", "half_written", "gaps", "recovery_mismatches", "late_commits",
"refused_writes", "refused_stored",
"recovery_p50_ms", "recovery_p99_ms", "problems": [text], "interrupted",
"ok" (false when interrupted)}.`,
		examples: []string{
			"annals crash-test --store sqlite:./annals.db",
			"annals crash-test --store postgres://annals@db.internal/annals --cycles 200 --snapshot-every 10",
			"annals crash-test --store cassandra://127.0.0.1:9042/annals --cycles 20 --oversized 50",
		},
		maxArgs: 0,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			store, asJSON := storeFlag(fs), jsonFlag(fs)
			c := crashConfig{}
			fs.IntVar(&c.cycles, "cycles", 50, "kill the writer `N` times")
			fs.IntVar(&c.entities, "entities", 1000, "`N` entities written to")
			fs.Int64Var(&c.snapshotEvery, "snapshot-every", 0, "entities save a snapshot every `N` events (0: none)")
			fs.DurationVar(&c.maxRun, "max-run", time.Second, "kill the writer at a random moment within `DURATION` of its start")
			fs.IntVar(&c.writers, "writers", 64, "`N` commands in flight in the writer")
			fs.IntVar(&c.oversized, "oversized", 0, "about one write in `N` has an event above the store's payload limit (0: none)")
			keep := fs.Bool("keep", false, "keep the scratch store (it is kept anyway when a check fails)")
			return func(e *env, _ []string) error {
				if c.cycles < 1 || c.entities < 1 || c.writers < 1 || c.snapshotEvery < 0 || c.maxRun <= 0 || c.oversized < 0 {
					return usagef("--cycles, --entities and --writers must be at least 1, --max-run positive, --snapshot-every and --oversized not negative")
				}
				url, err := e.storeURL(*store)
				if err != nil {
					return err
				}
				if cycle := e.getenv(crashWriterEnv); cycle != "" {
					return crashWriter(e, url, c, cycle)
				}
				if name, _, _ := strings.Cut(url, ":"); name == "memory" {
					return usagef("a memory store lives and dies with its process: there is nothing to check after a kill; use sqlite:, postgres://, cassandra:// or kafka://")
				}
				return runCrashTest(e, url, c, *asJSON, *keep)
			}
		},
	}
}

// crashWriterEnv, set to the cycle number, makes crash-test the writer
// child.
const crashWriterEnv = "ANNALS_CRASH_TEST_WRITER"

type crashConfig struct {
	cycles, entities, writers int
	oversized                 int // about one write in oversized is above the payload limit; 0: none
	snapshotEvery             int64
	maxRun                    time.Duration
}

// The entities the writer runs: each command persists one write (one
// event, or an atomic group of three) under a token unique to the write.

const crashEntityType = "CrashTest"

type crashCommand interface{ isCrashCommand() }

type crashWrite struct {
	Token string
	Size  int
	Pad   int                   // the padding of the write's last event, in bytes
	Reply entity.ReplyTo[int64] // the last event's sequence number
}

type crashGet struct{ Reply entity.ReplyTo[crashState] }

func (crashWrite) isCrashCommand() {}
func (crashGet) isCrashCommand()   {}

// crashEvent is event Index (from 0) of Size of the write Token; Pad
// makes its payload as large as a test needs.
type crashEvent struct {
	Token string `json:"t"`
	Index int    `json:"i"`
	Size  int    `json:"n"`
	Pad   string `json:"p,omitempty"`
}

// crashState folds the events: how many, and a hash of their order and
// content, so that a recovery that skips, repeats or reorders an event
// does not reach the journal's state.
type crashState struct {
	Events int64  `json:"events"`
	Hash   uint64 `json:"hash"`
}

func (s crashState) apply(ev crashEvent) crashState {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d|%s|%d|%d", s.Hash, ev.Token, ev.Index, ev.Size)
	return crashState{Events: s.Events + 1, Hash: h.Sum64()}
}

func crashBehavior(snapshotEvery int64) entity.Behavior[crashCommand, crashEvent, crashState] {
	var fx entity.Effects[crashEvent, crashState]
	return entity.Behavior[crashCommand, crashEvent, crashState]{
		EntityType: crashEntityType,
		Command: func(s crashState, c crashCommand) entity.ReplyEffect[crashEvent, crashState] {
			switch c := c.(type) {
			case crashWrite:
				evs := make([]crashEvent, c.Size)
				for i := range evs {
					evs[i] = crashEvent{Token: c.Token, Index: i, Size: c.Size}
				}
				evs[len(evs)-1].Pad = strings.Repeat(".", c.Pad)
				return fx.Persist(evs...).ThenReply(func(s crashState) { c.Reply.Send(s.Events) })
			case crashGet:
				return fx.Reply(func(s crashState) { c.Reply.Send(s) })
			}
			return fx.Unhandled()
		},
		Event:     func(s crashState, ev crashEvent) crashState { return s.apply(ev) },
		Snapshots: entity.SnapshotPolicy[crashEvent, crashState]{Every: snapshotEvery},
	}
}

func crashRegistry() (*serialization.Registry, error) {
	reg := serialization.NewRegistry()
	return reg, errors.Join(
		serialization.RegisterJSON[crashEvent](reg, "crashtest.Event"),
		serialization.RegisterJSON[crashState](reg, "crashtest.State"),
	)
}

// crashHost starts a host of the crash-test entities on s, behind a
// journal front; stop shuts both down.
func crashHost(s *stores.Store, snapshotEvery int64) (h *entity.Host[crashCommand, crashEvent, crashState], stop func(), err error) {
	reg, err := crashRegistry()
	if err != nil {
		return nil, nil, err
	}
	front, err := engine.NewFront(s.Journal, engine.Config{})
	if err != nil {
		return nil, nil, err
	}
	h, err = entity.NewHost(crashBehavior(snapshotEvery), entity.HostConfig{
		Journal: front, Snapshots: s.Snapshots, Registry: reg, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		_ = front.Close()
		return nil, nil, err
	}
	return h, func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = h.Shutdown(ctx)
		_ = front.Close()
	}, nil
}

func crashEntityID(i int) string { return fmt.Sprintf("e-%05d", i) }

// crashWriter is the child: it writes until it is killed, printing
// "ready" once the store has acknowledged a write (and, with
// --oversized, refused an oversized one), "ack ENTITY TOKEN LAST SIZE" for
// each write the store acknowledged, after the acknowledgement, and "rej
// ENTITY TOKEN" for each write it refused.
func crashWriter(e *env, url string, c crashConfig, cycle string) error {
	s, err := e.mux.Open(e.ctx, url, stores.Existing)
	if err != nil {
		return err
	}
	defer s.Close()
	h, stop, err := crashHost(s, c.snapshotEvery)
	if err != nil {
		return err
	}
	defer stop()
	var mu sync.Mutex // one line per write(2): lines never interleave
	out := func(line string) error {
		mu.Lock()
		defer mu.Unlock()
		_, err := io.WriteString(e.stdout, line)
		return err
	}
	var next atomic.Int64
	// write makes one write and reports its outcome; acked says whether
	// the store acknowledged it.
	write := func(oversized bool) (acked bool, err error) {
		id := crashEntityID(rand.IntN(c.entities))
		token := fmt.Sprintf("%s.%d", cycle, next.Add(1))
		size := 1 + 2*rand.IntN(2) // 1 or 3
		pad := 0
		if oversized {
			pad = s.MaxPayloadSize + 1
		}
		last, err := entity.Ask(e.ctx, h, id, func(r entity.ReplyTo[int64]) crashCommand {
			return crashWrite{Token: token, Size: size, Pad: pad, Reply: r}
		})
		switch {
		case errors.Is(err, journal.ErrRejected):
			return false, out(fmt.Sprintf("rej %s %s\n", id, token))
		case err != nil:
			return false, nil // outcome unknown: not acknowledged
		}
		return true, out(fmt.Sprintf("ack %s %s %d %d\n", id, token, last, size))
	}
	// Before the kill may come: one acknowledged write (the store is
	// open and takes writes, so that every cycle has one to check), and
	// with --oversized one oversized write (one refusal to check).
	for acked := false; !acked; {
		var err error
		if acked, err = write(false); err != nil {
			return err
		}
		if e.ctx.Err() != nil {
			return e.ctx.Err()
		}
	}
	if c.oversized > 0 {
		if _, err := write(true); err != nil {
			return err
		}
	}
	if err := out("ready\n"); err != nil {
		return err
	}
	var wg sync.WaitGroup
	for range c.writers {
		wg.Go(func() {
			for e.ctx.Err() == nil {
				if _, err := write(c.oversized > 0 && rand.IntN(c.oversized) == 0); err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	return nil
}

// crashAck is one acknowledged write, or one refused (refused: last and
// size are 0).
type crashAck struct {
	token      string
	last, size int64
	refused    bool
}

// crashTally is what the checks found, over all cycles.
type crashTally struct {
	cycles, ackWrites, ackEvents, stored int64
	lost, duplicated, halfWritten, gaps  int64
	mismatches                           int64
	refused, refusedStored               int64
	late                                 int64 // writes in flight at a kill that committed after it
	recoveries                           []time.Duration
	problems                             []string
}

func (t *crashTally) problem(format string, args ...any) {
	if len(t.problems) < 20 {
		t.problems = append(t.problems, fmt.Sprintf(format, args...))
	}
}

func (t *crashTally) ok() bool {
	return t.lost == 0 && t.duplicated == 0 && t.halfWritten == 0 && t.gaps == 0 && t.mismatches == 0 && t.refusedStored == 0
}

func runCrashTest(e *env, url string, c crashConfig, asJSON, keep bool) (err error) {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this program to run as the writer: %w", err)
	}
	scratch, remove, err := e.mux.Scratch(e.ctx, url)
	if err != nil {
		return err
	}
	s, err := e.mux.Open(e.ctx, scratch, stores.Create)
	if err != nil {
		_ = remove()
		return fmt.Errorf("scratch store: %w", err)
	}
	t := &crashTally{}
	defer func() {
		_ = s.Close()
		if keep || !t.ok() {
			fmt.Fprintf(e.stderr, "annals crash-test: the scratch store is kept: %s\n", stores.Redact(scratch))
			return
		}
		if rerr := remove(); rerr != nil {
			fmt.Fprintf(e.stderr, "annals crash-test: removing the scratch store %s: %v\n", stores.Redact(scratch), rerr)
		}
	}()

	acks := map[string][]crashAck{}
	var cycle, shownAcks, shownLost atomic.Int64 // for the status line's goroutine
	stopStatus := statusLine(e.stderr, func() string {
		return fmt.Sprintf("cycle %d/%d  acknowledged %s writes  lost %d", cycle.Load(), c.cycles, num(shownAcks.Load()), shownLost.Load())
	})
	// An interrupt ends the cycles: the summary covers the cycles checked
	// in full, and a cycle cut short counts for nothing (neither its
	// acknowledgements nor what its check had read).
	for i := 1; i <= c.cycles && e.ctx.Err() == nil; i++ {
		cycle.Store(int64(i))
		got, err := crashCycle(e, exe, scratch, c, i)
		if e.ctx.Err() != nil {
			break
		}
		if err != nil {
			stopStatus()
			return err
		}
		checked := t.clone()
		for id, as := range got {
			acks[id] = append(acks[id], as...)
			for _, a := range as {
				if a.refused {
					t.refused++
					continue
				}
				t.ackWrites++
				t.ackEvents += a.size
			}
		}
		err = crashVerify(e.ctx, s, c, acks, t)
		if e.ctx.Err() != nil {
			*t = checked
			break
		}
		if err != nil {
			stopStatus()
			return err
		}
		t.cycles++
		shownAcks.Store(t.ackWrites)
		shownLost.Store(t.lost)
	}
	stopStatus()
	interrupted := e.ctx.Err() != nil
	if interrupted && t.cycles == 0 {
		return fmt.Errorf("%w before a cycle was checked", errInterrupted)
	}
	return crashReport(e, s, scratch, c, t, asJSON, interrupted)
}

// clone returns a copy of t that later changes to t leave alone.
func (t *crashTally) clone() crashTally {
	c := *t
	c.recoveries = slices.Clone(t.recoveries)
	c.problems = slices.Clone(t.problems)
	return c
}

// crashCycle runs the writer once, kills it with SIGKILL at a random
// moment, and returns the writes it acknowledged, by entity.
func crashCycle(e *env, exe, scratch string, c crashConfig, cycle int) (map[string][]crashAck, error) {
	cmd := exec.Command(exe, "crash-test", "--store", scratch, "--entities", strconv.Itoa(c.entities),
		"--snapshot-every", strconv.FormatInt(c.snapshotEvery, 10), "--writers", strconv.Itoa(c.writers), "--oversized", strconv.Itoa(c.oversized))
	cmd.Env = append(os.Environ(), crashWriterEnv+"="+strconv.Itoa(cycle))
	ownGroup(cmd) // a Ctrl-C stops this program, which kills the writer
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the writer: %w", err)
	}
	ready := make(chan struct{})
	acks := map[string][]crashAck{}
	read := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 1 && f[0] == "ready":
				close(ready)
			case len(f) == 5 && f[0] == "ack":
				last, err1 := strconv.ParseInt(f[3], 10, 64)
				size, err2 := strconv.ParseInt(f[4], 10, 64)
				if err1 != nil || err2 != nil {
					continue // a line cut by the kill
				}
				acks[f[1]] = append(acks[f[1]], crashAck{token: f[2], last: last, size: size})
			case len(f) == 3 && f[0] == "rej":
				acks[f[1]] = append(acks[f[1]], crashAck{token: f[2], refused: true})
			}
		}
		read <- sc.Err()
	}()
	notReady := time.NewTimer(2 * time.Minute)
	defer notReady.Stop()
	select {
	case <-ready:
	case err := <-read:
		_ = cmd.Wait()
		return nil, fmt.Errorf("the writer ended before it was ready (%v): %s", err, strings.TrimSpace(stderr.String()))
	case <-notReady.C:
		_ = cmd.Process.Kill()
		<-read
		_ = cmd.Wait()
		return nil, fmt.Errorf("the writer was not ready after 2 minutes (opening the store, its first write): %s", strings.TrimSpace(stderr.String()))
	case <-e.ctx.Done():
		_ = cmd.Process.Kill()
		<-read
		_ = cmd.Wait()
		return nil, e.ctx.Err()
	}
	timer := time.NewTimer(time.Duration(rand.Int64N(int64(c.maxRun))))
	select {
	case <-timer.C:
	case <-e.ctx.Done():
	}
	timer.Stop()
	if err := cmd.Process.Kill(); err != nil {
		return nil, fmt.Errorf("killing the writer: %w", err)
	}
	rerr := <-read
	werr := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(werr, &exit) || exit.ExitCode() != -1 {
		// It ended by itself before the kill: a failure of its own.
		return nil, fmt.Errorf("the writer of cycle %d ended before it was killed (%v): %s", cycle, werr, strings.TrimSpace(stderr.String()))
	}
	if rerr != nil {
		return nil, fmt.Errorf("reading the writer's acknowledgements: %w", rerr)
	}
	return acks, nil
}

// crashVerify checks every entity's journal against the acknowledged
// writes, then has a new host recover each entity and compares its state
// with the journal's.
func crashVerify(ctx context.Context, s *stores.Store, c crashConfig, acks map[string][]crashAck, t *crashTally) error {
	reg, err := crashRegistry()
	if err != nil {
		return err
	}
	want := make(map[string]crashState, c.entities)
	t.stored = 0
	for i := range c.entities {
		id := crashEntityID(i)
		pid := annals.PersistenceID(crashEntityType, id)
		var state crashState
		var prev int64
		events := map[int64]crashEvent{}
		runs := map[string]int{} // token → groups of it seen
		var run []crashEvent     // the group being read
		closeRun := func() {
			if len(run) == 0 {
				return
			}
			runs[run[0].Token]++
			if runs[run[0].Token] == 2 {
				t.duplicated++
				t.problem("%s: write %s is stored twice", pid, run[0].Token)
			}
			if len(run) != run[0].Size {
				t.halfWritten++
				t.problem("%s: %d of the %d events of atomic write %s are stored", pid, len(run), run[0].Size, run[0].Token)
			}
			run = nil
		}
		for r, err := range s.Journal.Replay(ctx, pid, 1, 1<<62, 1<<62) {
			if err != nil {
				return fmt.Errorf("replaying %s: %w", pid, err)
			}
			if r.SequenceNr != prev+1 {
				t.gaps++
				t.problem("%s: event %d follows event %d", pid, r.SequenceNr, prev)
			}
			prev = r.SequenceNr
			v, err := reg.DeserializeRepr(r)
			if err != nil {
				return fmt.Errorf("event %d of %s: %w", r.SequenceNr, pid, err)
			}
			ev, ok := v.(crashEvent)
			if !ok {
				return fmt.Errorf("event %d of %s is a %T, not a crash-test event: is this scratch store shared?", r.SequenceNr, pid, v)
			}
			if ev.Index == 0 || len(run) == 0 || run[0].Token != ev.Token || ev.Index != len(run) {
				closeRun()
			}
			run = append(run, ev)
			events[r.SequenceNr] = ev
			state = state.apply(ev)
			t.stored++
		}
		closeRun()
		for _, a := range acks[id] {
			if a.refused {
				if runs[a.token] > 0 {
					t.refusedStored++
					t.problem("%s: write %s was refused and is stored", pid, a.token)
				}
				continue
			}
			for seq := a.last - a.size + 1; seq <= a.last; seq++ {
				if ev, ok := events[seq]; !ok || ev.Token != a.token || int64(ev.Index) != seq-(a.last-a.size+1) {
					t.lost++
					t.problem("%s: event %d of acknowledged write %s is missing", pid, seq, a.token)
				}
			}
		}
		want[id] = state
	}

	h, stop, err := crashHost(s, c.snapshotEvery)
	if err != nil {
		return err
	}
	defer stop()
	var mu sync.Mutex
	ids := make(chan string)
	var wg sync.WaitGroup
	var askErr error
	var recheck []string
	for range 16 {
		wg.Go(func() {
			for id := range ids {
				start := time.Now()
				got, err := entity.Ask(ctx, h, id, func(r entity.ReplyTo[crashState]) crashCommand { return crashGet{Reply: r} })
				took := time.Since(start)
				mu.Lock()
				switch {
				case err != nil:
					if askErr == nil {
						askErr = fmt.Errorf("recovering %s: %w", annals.PersistenceID(crashEntityType, id), err)
					}
				case got != want[id]:
					recheck = append(recheck, id)
				default:
					t.recoveries = append(t.recoveries, took)
				}
				mu.Unlock()
			}
		})
	}
	for i := range c.entities {
		ids <- crashEntityID(i)
	}
	close(ids)
	wg.Wait()
	if askErr != nil {
		return askErr
	}
	// A write in flight when the writer was killed may still commit (the
	// database finishes a commit it had received): its entity's journal
	// changed after it was read. Such an entity is checked again, with a
	// journal that holds still while a new host recovers it.
	for _, id := range recheck {
		if err := crashRecheck(ctx, s, c, reg, id, want[id], t); err != nil {
			return err
		}
	}
	return nil
}

// crashRecheck compares, for one entity whose recovered state differed
// from the journal read before, a new host's recovery with the journal
// read just before and just after it, until the two reads agree.
func crashRecheck(ctx context.Context, s *stores.Store, c crashConfig, reg *serialization.Registry, id string, first crashState, t *crashTally) error {
	pid := annals.PersistenceID(crashEntityType, id)
	fold := func() (crashState, error) {
		var st crashState
		for r, err := range s.Journal.Replay(ctx, pid, 1, 1<<62, 1<<62) {
			if err != nil {
				return st, fmt.Errorf("replaying %s: %w", pid, err)
			}
			v, err := reg.DeserializeRepr(r)
			if err != nil {
				return st, fmt.Errorf("event %d of %s: %w", r.SequenceNr, pid, err)
			}
			ev, _ := v.(crashEvent)
			st = st.apply(ev)
		}
		return st, nil
	}
	for range 10 {
		before, err := fold()
		if err != nil {
			return err
		}
		h, stop, err := crashHost(s, c.snapshotEvery)
		if err != nil {
			return err
		}
		got, err := entity.Ask(ctx, h, id, func(r entity.ReplyTo[crashState]) crashCommand { return crashGet{Reply: r} })
		stop()
		if err != nil {
			return fmt.Errorf("recovering %s: %w", pid, err)
		}
		after, err := fold()
		if err != nil {
			return err
		}
		if before != after {
			continue // still changing
		}
		if after != first {
			t.late++
		}
		if got != after {
			t.mismatches++
			t.problem("%s: a new host recovered %d events (hash %x); the journal holds %d (hash %x)", pid, got.Events, got.Hash, after.Events, after.Hash)
		}
		return nil
	}
	return fmt.Errorf("the journal of %s kept changing after the writer was killed: is another process writing to the scratch store?", pid)
}

// crashReport prints the summary, and fails when a check failed or the
// run was interrupted (after t.cycles cycles checked in full).
func crashReport(e *env, s *stores.Store, scratch string, c crashConfig, t *crashTally, asJSON, interrupted bool) error {
	slices.Sort(t.recoveries)
	p50, p99 := percentile(t.recoveries, 0.50), percentile(t.recoveries, 0.99)
	if asJSON {
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		out := struct {
			Store              string   `json:"store"`
			Scratch            string   `json:"scratch"`
			Cycles             int64    `json:"cycles"`
			Entities           int      `json:"entities"`
			SnapshotEvery      int64    `json:"snapshot_every"`
			AcknowledgedWrites int64    `json:"acknowledged_writes"`
			AcknowledgedEvents int64    `json:"acknowledged_events"`
			StoredEvents       int64    `json:"stored_events"`
			Lost               int64    `json:"lost"`
			Duplicated         int64    `json:"duplicated"`
			HalfWritten        int64    `json:"half_written"`
			Gaps               int64    `json:"gaps"`
			RecoveryMismatches int64    `json:"recovery_mismatches"`
			LateCommits        int64    `json:"late_commits"`
			RefusedWrites      int64    `json:"refused_writes"`
			RefusedStored      int64    `json:"refused_stored"`
			RecoveryP50ms      float64  `json:"recovery_p50_ms"`
			RecoveryP99ms      float64  `json:"recovery_p99_ms"`
			Problems           []string `json:"problems"`
			Interrupted        bool     `json:"interrupted"`
			OK                 bool     `json:"ok"`
		}{s.Kind, stores.Redact(scratch), t.cycles, c.entities, c.snapshotEvery, t.ackWrites, t.ackEvents, t.stored,
			t.lost, t.duplicated, t.halfWritten, t.gaps, t.mismatches, t.late, t.refused, t.refusedStored, ms(p50), ms(p99), append([]string{}, t.problems...),
			interrupted, t.ok() && !interrupted}
		if err := writeJSON(e.stdout, out); err != nil {
			return err
		}
	} else {
		snaps := "no snapshots"
		if c.snapshotEvery > 0 {
			snaps = fmt.Sprintf("a snapshot every %d events", c.snapshotEvery)
		}
		fmt.Fprintf(e.stdout, "crash-test of %s (scratch %s), %d entities, %s\n\n", s.Kind, s.Where, c.entities, snaps)
		tw := table(e.stdout)
		cycles := fmt.Sprintf("%d (the writer killed with SIGKILL at a random moment each time)", t.cycles)
		if interrupted {
			cycles = fmt.Sprintf("%d of %d, then interrupted (the figures cover the cycles checked in full)", t.cycles, c.cycles)
		}
		row(tw, "cycles", cycles)
		row(tw, "acknowledged", fmt.Sprintf("%s writes, %s events (%s events stored, acknowledged or not)", num(t.ackWrites), num(t.ackEvents), num(t.stored)))
		row(tw, "lost", t.lost)
		row(tw, "duplicated", t.duplicated)
		row(tw, "half-written", t.halfWritten)
		row(tw, "gaps", t.gaps)
		if c.oversized > 0 || t.refused > 0 {
			row(tw, "refused", fmt.Sprintf("%s writes refused (events above the payload limit), %d of them stored", num(t.refused), t.refusedStored))
		}
		row(tw, "recovery", fmt.Sprintf("%d mismatches; %s recoveries by a new host: p50 %s, p99 %s", t.mismatches, num(int64(len(t.recoveries))), dur(p50), dur(p99)))
		if t.late > 0 {
			row(tw, "late commits", fmt.Sprintf("%d entities gained a write after the kill (its commit was under way: its outcome was unknown, and it landed whole)", t.late))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, p := range t.problems {
			fmt.Fprintln(e.stderr, "  "+p)
		}
	}
	if !t.ok() {
		return fmt.Errorf("%d acknowledged events lost, %d writes duplicated, %d half-written, %d gaps, %d recoveries wrong, %d refused writes stored", t.lost, t.duplicated, t.halfWritten, t.gaps, t.mismatches, t.refusedStored)
	}
	if interrupted {
		return fmt.Errorf("%w after %d of %d cycles; nothing wrong found in them", errInterrupted, t.cycles, c.cycles)
	}
	if !asJSON {
		fmt.Fprintf(e.stdout, "\nOK: after each of %d kills, every acknowledged event was there, once, in order, and recovered.\n", t.cycles)
	}
	return nil
}
