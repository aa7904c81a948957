package entity

import (
	"container/list"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"math"
	"runtime"
	"time"

	"github.com/annals-go/annals/engine"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/recovery"
	"github.com/annals-go/annals/snapshot"
)

type envelope[C any] struct {
	cmd  C
	done chan error // buffered; nil for Tell
	// ctx is the sender's context (nil for Tell), or with command hooks
	// the one the start hooks returned.
	ctx context.Context
}

// finish answers env with err, reporting the command's end to the hooks
// first.
func (inst *instance[C, E, S]) finish(env envelope[C], err error) {
	if inst.h.hooks.commands() {
		inst.h.hooks.commandEnded(env.ctx, inst.pid, err)
	}
	if env.done != nil {
		env.done <- err
	}
}

// instance is one live entity: its mailbox, state and stash. A goroutine
// works for it while it has commands or signals (see mailbox); an idle
// entity has none.
type instance[C, E, S any] struct {
	h       *Host[C, E, S]
	id, pid string
	mailbox mailbox[C]

	// guarded by h.mu
	elem        *list.Element // in h.lru once started, in h.waiting before
	started     bool          // live: counted in h.started
	passivating bool          // asked to passivate to make room (counted in h.evicting)
	gone        chan struct{} // closed when the instance leaves h.live (made by HandOffRange)

	// set at spawn: the served range of an Assigned host (nil otherwise)
	rng *servedRange

	// owned by the goroutine working for the instance
	recovered bool // the state is recovered and the entity serves commands
	writer    string
	state     S
	seq       int64
	stash     []envelope[C]
	unstashed []envelope[C]
	stop      bool
	failed    *envelope[C] // the command whose handling failed, unanswered
	passivate bool         // passivation requested (idle or least recently used)
	shutdown  bool         // the host is shutting down
	handled   int          // commands handled since the last recovery
	// of the last recovery: the snapshot's sequence number, events replayed
	fromSnapshot, replayed int64
	// of the recovery in progress: the first event replayed (0: none), and
	// why a snapshot was passed over (nil: none was)
	firstReplayed int64
	passedOver    error
	failures      int         // consecutive failures, for the restart backoff
	idle          *time.Timer // raises signalIdle IdleTimeout after lastUsed
	lastUsed      time.Time   // when the last command was handled or recovery ended

	// While a caller works for the instance on its own goroutine (see
	// runInline): the channel its command is answered on, its context, and
	// whether its command has been handled (answered, stashed or
	// unhandled). caller is nil otherwise.
	caller    chan error
	callerCtx context.Context
	ownDone   bool
	// pending is a command whose handler ran on a caller's goroutine and
	// whose effect persists: the goroutine that takes the work over
	// completes it first.
	pending *decided[C, E, S]
}

// decided is a command and the effect its handler returned.
type decided[C, E, S any] struct {
	env envelope[C]
	eff Effect[E, S]
}

// handOff is returned by the work done on a caller's goroutine where it
// must go on, on a goroutine of its own: a persist, or a wait the caller
// gave up (its context ended) that must not bound the entity's work.
type handOff struct{}

func (handOff) Error() string { return "entity: work handed to a goroutine" }

// runInline works for the instance on the goroutine of a caller (Ask,
// Send) whose command, answered on done, is the first in the mailbox, and
// whose wait ctx bounds: it recovers the entity if needed and handles that
// one command. Then it releases the instance, or hands what waits to a
// goroutine of the instance's own (run). It hands over sooner, before
// anything that could block past ctx: a persist, a recovery slot or read
// that ctx's end interrupts, a failure's restart, the effect of a command
// whose handler returned after ctx ended. It saves what a goroutine costs
// (its start, the growth of its stack, the wakeup of the caller by the
// reply) where a command finds an idle entity, as every command does
// after a recovery.
//
// Once the instance is released it is no longer the caller's: another
// worker may own it at once, so nothing here touches it after work
// returns nil. A panic that escapes the work (a hook's: handlers' panics
// are failures of the command) hands the instance to a goroutine as a
// failure, so that it is neither left active with no worker nor counted
// in the wait group forever, and goes on up the caller's stack.
func (inst *instance[C, E, S]) runInline(ctx context.Context, done chan error) {
	h := inst.h
	inst.caller, inst.callerCtx, inst.ownDone = done, ctx, false
	released := false
	defer func() {
		if released {
			return
		}
		// A panic, or a runtime.Goexit (t.Fatal in a handler under test):
		// the work goes on, as a failure, on a goroutine of its own.
		r := recover()
		inst.caller, inst.callerCtx = nil, nil
		go inst.runAfter(failure{fmt.Errorf("entity %s: the work on the caller's goroutine ended abruptly (panic: %v)", inst.pid, r)})
		if r != nil {
			panic(r)
		}
	}()
	err := inst.work()
	if err == nil { // released, or left the host: the instance is not ours
		released = true
		h.wg.Done()
		return
	}
	released = true // handed over below
	inst.caller, inst.callerCtx = nil, nil
	if errors.Is(err, handOff{}) {
		go inst.run()
		return
	}
	go inst.runAfter(err)
}

// leaveInline ends the work on a caller's goroutine: it stops being the
// caller's, then releases the instance when nothing more waits (nil), and
// returns handOff otherwise.
func (inst *instance[C, E, S]) leaveInline() error {
	inst.caller, inst.callerCtx = nil, nil
	if len(inst.unstashed) == 0 && !inst.passivate && !inst.stop && inst.mailbox.release() {
		return nil
	}
	return handOff{}
}

// raise raises s, starting a goroutine for the entity if none works for it.
func (inst *instance[C, E, S]) raise(s signal) {
	if inst.mailbox.signal(s) {
		go inst.run()
	}
}

// failure stops serving: cause is the error.
type failure struct{ cause error }

func (f failure) Error() string { return f.cause.Error() }
func (f failure) Unwrap() error { return f.cause }

// run works for the instance until it is idle or has left the host: it
// recovers the entity if needed, handles waiting commands and signals, and
// on a failure stops the entity or, with Restart, recovers it again after
// a backoff. The wait group counted run before it started.
func (inst *instance[C, E, S]) run() { inst.runAfter(nil) }

// runAfter is run after a failure err of work done elsewhere (nil: none).
func (inst *instance[C, E, S]) runAfter(err error) {
	h := inst.h
	defer h.wg.Done()
	for {
		if err == nil {
			if err = inst.work(); err == nil {
				return
			}
		}
		// An entity that asked to stop has left the host: it stops.
		restart := h.cfg.Restart != nil && !isConflict(err) && !errors.Is(err, ErrHostClosed) && !inst.stop
		h.cfg.Logger.Warn("entity stopped", "persistence_id", inst.pid, "err", err, "restart", restart)
		if !restart {
			// Leave the host before answering the failed command, so a
			// caller that retries at once reaches a new instance.
			inst.h.remove(inst, true)
			inst.answerFailed(err)
			h.hooks.left(inst.pid, false, err)
			inst.stopWith(err)
			return
		}
		inst.answerFailed(err)
		inst.recovered = false
		if inst.handled > 0 {
			inst.failures = 0 // the delay doubles per consecutive failure
		}
		inst.failures++
		delay := h.cfg.Restart.Delay(inst.failures)
		for _, x := range h.hooks.restart {
			x.OnRestartScheduled(inst.pid, err, delay)
		}
		if err := inst.backoff(delay, err); err != nil {
			h.hooks.left(inst.pid, errors.Is(err, ErrStopped), err)
			inst.stopWith(err)
			return
		}
		err = nil
	}
}

// work completes a pending command, recovers the entity if needed, then
// serves it.
func (inst *instance[C, E, S]) work() error {
	if p := inst.pending; p != nil {
		inst.pending = nil
		if err := inst.handle(p.env, &p.eff); err != nil {
			return err
		}
		inst.handled++
		inst.touch()
	}
	if !inst.recovered {
		inst.handled = 0
		if err := inst.recoverState(); err != nil {
			return err
		}
		inst.recovered = true
		inst.touch()
	}
	return inst.serve()
}

// touch restarts the idle timeout, if there is one.
func (inst *instance[C, E, S]) touch() {
	d := inst.h.cfg.IdleTimeout
	if d == 0 {
		return
	}
	inst.lastUsed = time.Now() // before the timer starts: it fires at lastUsed+d or later
	if inst.idle == nil {
		inst.idle = time.AfterFunc(d, func() {
			if inst.mailbox.signal(signalIdle) {
				inst.run() // on the timer's goroutine
			}
		})
		return
	}
	inst.idle.Reset(d)
}

// answerFailed answers the command whose handling failed, with the cause.
func (inst *instance[C, E, S]) answerFailed(err error) {
	if inst.failed != nil {
		inst.finish(*inst.failed, errors.Unwrap(err))
		inst.failed = nil
	}
}

// backoff waits d after the failure cause, noting signals. Commands with
// a caller, waiting or arriving meanwhile, are answered at once with a
// *RestartingError; those sent with Tell wait for the restart. It returns
// nil when d has passed, or the reason to stop instead: ErrHostClosed when
// the host shuts down, ErrStopped when the entity passivates (asked to,
// with no command waiting), so that a restart does not hold a live place
// for nothing.
func (inst *instance[C, E, S]) backoff(d time.Duration, cause error) error {
	t := time.NewTimer(d)
	defer t.Stop()
	if f, ok := cause.(failure); ok {
		cause = f.cause
	}
	restarting := &RestartingError{PersistenceID: inst.pid, Cause: cause, At: time.Now().Add(d)}
	inst.stash = inst.refuseCallers(inst.stash, restarting)
	inst.unstashed = inst.refuseCallers(inst.unstashed, restarting)
	wake := inst.mailbox.waiter()
	for {
		if !inst.pollSignals() {
			return ErrHostClosed
		}
		for _, env := range inst.mailbox.takeCallers() {
			inst.finish(env, restarting)
		}
		if inst.passivate && inst.h.remove(inst, false) {
			return ErrStopped
		}
		select {
		case <-t.C:
			return nil
		case <-wake:
		}
	}
}

// refuseCallers answers the commands in envs that have a caller with err
// and returns the others, in order.
func (inst *instance[C, E, S]) refuseCallers(envs []envelope[C], err error) []envelope[C] {
	kept := envs[:0]
	for _, env := range envs {
		if env.done != nil {
			inst.finish(env, err)
			continue
		}
		kept = append(kept, env)
	}
	clear(envs[len(kept):])
	if len(kept) == 0 {
		return nil
	}
	return kept
}

// pollSignals notes the raised signals without waiting; it returns false
// once the host is shutting down. An idle signal passivates only if no
// command came since the timer was set: a timer that fired as a command
// arrived has been set again.
func (inst *instance[C, E, S]) pollSignals() bool {
	s := inst.mailbox.takeSignals()
	if s&signalPassivate != 0 {
		inst.passivate = true
	}
	if s&signalIdle != 0 && time.Since(inst.lastUsed) >= inst.h.cfg.IdleTimeout {
		inst.passivate = true
	}
	if s&signalShutdown != 0 {
		inst.shutdown = true
	}
	return !inst.shutdown
}

// stopWith removes the instance and fails every command it holds. The
// instance stays active: no goroutine works for it again.
func (inst *instance[C, E, S]) stopWith(cause error) {
	inst.h.remove(inst, true)
	if inst.idle != nil {
		inst.idle.Stop()
	}
	err := cause
	if !errors.Is(cause, ErrHostClosed) && !errors.Is(cause, ErrStopped) {
		err = fmt.Errorf("%w: %w", ErrStopped, cause)
	}
	// Taken out before they are answered: a hook that panics part-way
	// must not leave answered commands to be answered again.
	unstashed, stash := inst.unstashed, inst.stash
	inst.unstashed, inst.stash = nil, nil
	for _, env := range unstashed {
		inst.finish(env, err)
	}
	for _, env := range stash {
		inst.finish(env, err)
	}
	for {
		env, ok := inst.mailbox.take()
		if !ok {
			return
		}
		inst.finish(env, err)
	}
}

// failWaiting fails the commands in the mailbox of an instance that never
// started (it waited for a place under MaxLive) and has left the host.
func (inst *instance[C, E, S]) failWaiting(err error) {
	for {
		env, ok := inst.mailbox.take()
		if !ok {
			return
		}
		inst.finish(env, err)
	}
}

// recoverState restores the state: highest sequence number, snapshot, events.
func (inst *instance[C, E, S]) recoverState() (err error) {
	h, b := inst.h, &inst.h.b
	var gaveUp <-chan struct{} // the end of the wait of a caller working for the instance
	if inst.caller != nil {
		gaveUp = inst.callerCtx.Done()
	}
	select {
	case h.recoveries <- struct{}{}:
	default:
		wake := inst.mailbox.waiter()
		for acquired := false; !acquired; {
			if !inst.pollSignals() { // a passivation waits for the recovery
				return ErrHostClosed
			}
			select {
			case h.recoveries <- struct{}{}:
				acquired = true
			case <-wake:
			case <-gaveUp:
				return handOff{}
			}
		}
	}
	defer func() { <-h.recoveries }()
	ctx := h.ctx
	if gaveUp != nil {
		// The caller's end interrupts the read, and the recovery starts
		// again on the instance's own goroutine.
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(inst.callerCtx, cancel)()
	}
	if len(h.hooks.recovered) > 0 {
		start := time.Now()
		defer func() {
			if errors.Is(err, handOff{}) {
				return // not over: it starts again
			}
			rec := Recovered{PersistenceID: inst.pid, Duration: time.Since(start), SnapshotSequenceNr: inst.fromSnapshot,
				Events: inst.replayed, SequenceNr: inst.seq, Err: err}
			for _, x := range h.hooks.recovered {
				x.OnRecovered(rec)
			}
		}()
	}
	if gaveUp != nil {
		defer func() { // before the hooks: a recovery handed off is not over
			if err != nil && inst.callerCtx.Err() != nil && h.ctx.Err() == nil {
				err = handOff{}
			}
		}()
	}
	inst.fromSnapshot, inst.replayed = 0, 0
	inst.firstReplayed, inst.passedOver = 0, nil
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w of %s: panic: %v", ErrRecovery, inst.pid, r)
		}
	}()
	inst.writer = "" // a new one at the first write (writerID)
	inst.state, inst.seq = b.empty(), 0
	inst.stop = false
	highest, err := h.p.recover(ctx, inst)
	if err != nil {
		return err
	}
	if b.Recovery.Disabled || b.Recovery.ToSequenceNr <= 0 {
		inst.seq = max(inst.seq, highest) // deleted events still count
	}
	if b.OnRecovered != nil {
		b.OnRecovered(inst.id, inst.state, inst.seq)
	}
	return nil
}

// restore rebuilds the state from the snapshot the behavior selects and
// the events after it, and returns the highest sequence number: in one
// read with the host's recovery reader, else with three calls (highest
// number, snapshot, replay).
func (inst *instance[C, E, S]) restore(ctx context.Context) (int64, error) {
	h, b := inst.h, &inst.h.b
	crit := snapshot.Latest()
	if b.Recovery.Snapshot != nil {
		crit = *b.Recovery.Snapshot
	}
	to := int64(math.MaxInt64)
	if b.Recovery.ToSequenceNr > 0 {
		to = b.Recovery.ToSequenceNr
	}
	crit.MaxSequenceNr = min(crit.MaxSequenceNr, to)
	// A snapshot saved at 0 (a state before any event) is read as its
	// criteria select it, on both paths; None selects none.
	withSnapshot := h.cfg.Snapshots != nil && crit.MaxSequenceNr >= 0
	if h.reader == nil {
		highest, err := h.cfg.Journal.HighestSequenceNr(ctx, inst.pid, 0)
		if err != nil {
			return 0, fmt.Errorf("%w of %s: highest sequence number: %w", ErrRecovery, inst.pid, err)
		}
		to = min(to, highest)
		crit.MaxSequenceNr = min(crit.MaxSequenceNr, to)
		if withSnapshot {
			if err := inst.restoreSnapshot(ctx, crit, nil); err != nil {
				return 0, err
			}
		}
		base := inst.seq
		if err := inst.apply(h.cfg.Journal.Replay(ctx, inst.pid, inst.seq+1, to, math.MaxInt64)); err != nil {
			return 0, err
		}
		return highest, inst.checkPassedOver(base, to)
	}

	req := recovery.Request{PersistenceID: inst.pid, ToSequenceNr: b.Recovery.ToSequenceNr}
	if withSnapshot {
		req.Snapshot = &crit
	}
	res, err := h.reader.ReadRecovery(ctx, req)
	if err != nil {
		return 0, fmt.Errorf("%w of %s: %w", ErrRecovery, inst.pid, err)
	}
	to = min(to, res.Highest)
	events, more := res.Events, res.More
	if res.HasSnapshot {
		if err := inst.restoreSnapshot(ctx, crit, &res.Snapshot); err != nil {
			return 0, err
		}
		if inst.seq != res.Snapshot.Metadata.SequenceNr {
			// An older snapshot, or none: the events read follow the one
			// that could not be decoded.
			events, more = nil, true
		}
	}
	base := inst.seq
	if err := inst.apply(func(yield func(journal.Repr, error) bool) {
		for _, r := range events {
			if !yield(r, nil) {
				return
			}
		}
	}); err != nil {
		return 0, err
	}
	if more {
		if err := inst.apply(h.cfg.Journal.Replay(ctx, inst.pid, inst.seq+1, to, math.MaxInt64)); err != nil {
			return 0, err
		}
	}
	return res.Highest, inst.checkPassedOver(base, to)
}

// checkPassedOver fails a recovery that passed a snapshot over (it could
// not be loaded or decoded, with Snapshots.Optional) and replayed the
// events after base (the sequence number of the older snapshot it used, 0
// for none) up to to, when the event after base was not among them: it
// was deleted, and the snapshot passed over covered it (or, when it could
// not be loaded, may have), so the state rebuilt from what remains could
// be wrong. The rule looks only at the event after base, never at the
// events that remain after the deletion, so a recovery that fails keeps
// failing, and one that succeeds keeps succeeding, after the entity
// writes again.
func (inst *instance[C, E, S]) checkPassedOver(base, to int64) error {
	if inst.passedOver == nil || to <= base || inst.firstReplayed == base+1 {
		return nil
	}
	return fmt.Errorf("%w of %s: a snapshot was passed over (%w) and events from %d were deleted: the state cannot be rebuilt without it", ErrRecovery, inst.pid, inst.passedOver, base+1)
}

// snapshotLoadAttempts is how many snapshots a recovery with
// Snapshots.Optional tries, the youngest first, before it replays every
// event (Akka's local snapshot store's max-load-attempts).
const snapshotLoadAttempts = 3

// restoreSnapshot sets the state from the youngest snapshot crit selects
// (loaded, when the caller has read it already). A snapshot that cannot be
// loaded or decoded fails the recovery, unless Snapshots.Optional: then one
// that cannot be decoded is logged and the next older one tried, at most
// snapshotLoadAttempts in all, as Akka does; when none is usable, or the
// load itself fails, the state starts empty and every event is replayed.
// A snapshot passed over is noted in inst.passedOver (see
// checkPassedOver). Without a snapshot the state is left as it is (empty).
func (inst *instance[C, E, S]) restoreSnapshot(ctx context.Context, crit snapshot.Criteria, loaded *snapshot.Snapshot) error {
	h, b := inst.h, &inst.h.b
	for attempt := 1; ; attempt++ {
		var snap snapshot.Snapshot
		var ok bool
		var err error
		if loaded != nil && attempt == 1 {
			snap, ok = *loaded, true
		} else {
			snap, ok, err = h.cfg.Snapshots.Load(ctx, inst.pid, crit)
		}
		if err == nil && !ok {
			if attempt > 1 {
				h.cfg.Logger.Warn("no older snapshot, replaying all events", "persistence_id", inst.pid)
			}
			return nil
		}
		if err == nil {
			if err = inst.useSnapshot(snap); err == nil {
				return nil
			}
		}
		if !b.Snapshots.Optional || ctx.Err() != nil { // a load cut short is no unusable snapshot
			return fmt.Errorf("%w of %s: %w", ErrRecovery, inst.pid, err)
		}
		inst.passedOver = err
		var decode *snapshotDecodeError
		if !errors.As(err, &decode) || attempt == snapshotLoadAttempts || snap.Metadata.SequenceNr <= 1 {
			h.cfg.Logger.Warn("snapshot ignored, replaying all events", "persistence_id", inst.pid, "err", err)
			inst.state, inst.seq = b.empty(), 0
			return nil
		}
		h.cfg.Logger.Warn("snapshot ignored, trying an older one", "persistence_id", inst.pid, "err", err)
		crit.MaxSequenceNr = snap.Metadata.SequenceNr - 1
	}
}

// snapshotDecodeError is a snapshot that was loaded and could not be
// decoded into the behavior's state.
type snapshotDecodeError struct{ err error }

func (e *snapshotDecodeError) Error() string { return e.err.Error() }
func (e *snapshotDecodeError) Unwrap() error { return e.err }

// apply applies the events read to the state, as they come. The first
// need not follow the state's sequence number: events between the
// snapshot (or the start) and it were deleted with no snapshot covering
// them, and the state is rebuilt from what remains, as Akka and Pekko
// rebuild it (see Recovery). A snapshot passed over is checked by
// checkPassedOver.
func (inst *instance[C, E, S]) apply(events iter.Seq2[journal.Repr, error]) error {
	b := &inst.h.b
	for r, err := range events {
		if err != nil {
			return fmt.Errorf("%w of %s: replay: %w", ErrRecovery, inst.pid, err)
		}
		if inst.firstReplayed == 0 {
			inst.firstReplayed = r.SequenceNr
		}
		state, err := b.applyStored(inst.h.cfg.Registry, inst.state, r)
		if err != nil {
			return fmt.Errorf("%w of %s: %w", ErrRecovery, inst.pid, err)
		}
		inst.state = state
		inst.seq = r.SequenceNr
		inst.replayed++
	}
	return nil
}

// useSnapshot decodes snap into the state; it fails with a
// *snapshotDecodeError.
func (inst *instance[C, E, S]) useSnapshot(snap snapshot.Snapshot) error {
	v, err := inst.h.cfg.Registry.DeserializeSnapshot(snap)
	if err != nil {
		return &snapshotDecodeError{err}
	}
	s, ok := v.(S)
	if !ok {
		return &snapshotDecodeError{fmt.Errorf("snapshot %d of %s decodes to %T, not the behavior's state type %T", snap.Metadata.SequenceNr, inst.pid, v, inst.state)}
	}
	inst.state, inst.seq = s, snap.Metadata.SequenceNr
	inst.fromSnapshot = snap.Metadata.SequenceNr
	return nil
}

// serve handles commands until the entity is idle, passivates, stops or
// fails. It returns nil when the entity is idle (the goroutine must then
// leave it) or has left the host, a failure otherwise. Signals come first:
// after a shutdown no waiting command is handled, and after a Stop effect
// no unstashed one.
func (inst *instance[C, E, S]) serve() error {
	h := inst.h
	yielded := yieldNone
	for {
		if inst.caller != nil {
			// The caller's goroutine handles its own command only, and not
			// once the caller has given up.
			if inst.ownDone {
				return inst.leaveInline()
			}
			if inst.callerCtx.Err() != nil {
				inst.caller, inst.callerCtx = nil, nil
				return handOff{}
			}
		}
		if !inst.pollSignals() {
			h.hooks.left(inst.pid, false, ErrHostClosed)
			inst.stopWith(ErrHostClosed)
			return nil
		}
		if inst.stop {
			h.hooks.left(inst.pid, false, ErrStopped)
			inst.stopWith(ErrStopped)
			return nil
		}
		if len(inst.unstashed) > 0 {
			env := inst.unstashed[0]
			inst.unstashed[0] = envelope[C]{}
			inst.unstashed = inst.unstashed[1:]
			if len(inst.unstashed) == 0 {
				inst.unstashed = nil // not the array of a handled stash
			}
			if err := inst.handle(env, nil); err != nil {
				return err
			}
			continue
		}
		if inst.passivate && h.remove(inst, false) {
			h.hooks.left(inst.pid, true, nil)
			inst.stopWith(ErrStopped) // fails stashed commands, if any
			return nil
		}
		env, ok := inst.mailbox.take()
		if yielded == yieldPending {
			h.yields.found(ok)
			yielded = yieldDone
		}
		if !ok && yielded == yieldNone && inst.caller == nil && h.yields.try() {
			// Yield once before giving the goroutine up: a client that
			// answers a reply with its next command (a closed loop) then
			// finds the entity still working, instead of paying for a new
			// goroutine and the growth of its stack (which doubled the
			// cost of a command on the memory store).
			yielded = yieldPending
			runtime.Gosched()
			continue
		}
		if !ok {
			if inst.caller != nil {
				return inst.leaveInline()
			}
			if inst.mailbox.release() {
				return nil // idle: the next command or signal starts a goroutine
			}
			continue // a signal was raised
		}
		yielded = yieldNone
		if err := inst.handle(env, nil); err != nil {
			return err
		}
		if inst.caller != nil && env.done == inst.caller {
			inst.ownDone = true
		}
		inst.handled++
		inst.touch()
	}
}

// handle runs one command: the handler (unless pre is the effect it
// returned already), then its effect. It returns a failure that stops (or
// restarts) the instance; the failed command is then left in inst.failed
// for run to answer. On a caller's goroutine, a command whose effect
// persists is left in inst.pending and handOff returned.
func (inst *instance[C, E, S]) handle(env envelope[C], pre *Effect[E, S]) (err error) {
	b := &inst.h.b
	var eff Effect[E, S]
	answered := false
	defer func() {
		if r := recover(); r != nil {
			err = failure{fmt.Errorf("entity %s: panic in handler or side effect: %v", inst.pid, r)}
			if !answered {
				inst.failed = &env
			}
		}
	}()
	if pre != nil {
		eff = *pre
	} else {
		eff = b.Command(inst.state, env.cmd).effect
	}
	switch {
	case eff.unhandled:
		inst.finish(env, ErrUnhandled)
		return nil
	case eff.stash:
		if len(inst.stash) >= inst.h.cfg.StashCapacity {
			inst.h.hooks.overflowed(inst.pid, OverflowStash)
			inst.finish(env, fmt.Errorf("%w: %d commands stashed by %s", ErrStashOverflow, len(inst.stash), inst.pid))
			return nil
		}
		inst.stash = append(inst.stash, env)
		return nil
	}
	if inst.caller != nil && (eff.persist || inst.callerCtx.Err() != nil) {
		inst.pending = &decided[C, E, S]{env: env, eff: eff}
		return handOff{}
	}
	snap := false
	if eff.persist {
		var err error
		if snap, err = inst.persist(env.ctx, eff.events); err != nil {
			if errors.Is(err, journal.ErrRejected) && !isConflict(err) {
				inst.finish(env, err)
				return nil // not stored: the entity goes on
			}
			inst.failed = &env
			return failure{err}
		}
	}
	if eff.persist && inst.h.b.OnPersisted != nil {
		inst.h.b.OnPersisted(inst.id, inst.state, eff.events)
	}
	if eff.stop {
		// Leave the host before the side effects and the reply, so that a
		// command sent after the reply reaches a new instance; commands
		// already waiting fail with ErrStopped.
		inst.stop = true
		inst.h.remove(inst, true)
	}
	for _, fn := range eff.after {
		fn(inst.state)
	}
	answered = true // before the end hooks: a hook that panics must not end the command twice
	inst.finish(env, nil)
	if snap {
		inst.snapshot() // after the reply; the next command waits for it
	}
	if eff.unstash {
		inst.unstashed = append(inst.stash, inst.unstashed...)
		inst.stash = nil
	}
	return nil
}

// persist stores events as one atomic write and applies them. It reports
// whether the snapshot policy asks for a snapshot. A serialization failure
// is a rejection. The write runs with the values of the command's context
// cctx (nil: none), never its cancellation.
func (inst *instance[C, E, S]) persist(cctx context.Context, events []E) (bool, error) {
	h, b := inst.h, &inst.h.b
	ctx := context.Background()
	if cctx != nil {
		ctx = context.WithoutCancel(cctx)
	}
	if err := inst.write(ctx, events); err != nil {
		return false, err
	}
	snap := false
	for _, e := range events {
		inst.seq++
		inst.state = b.Event(inst.state, e)
		p := b.Snapshots
		if (p.Every > 0 && inst.seq%p.Every == 0) || (p.When != nil && p.When(inst.state, e, inst.seq)) {
			snap = true
		}
	}
	return snap && h.cfg.Snapshots != nil, nil
}

// write stores events as the entity's next atomic write, under its
// range's fence, reporting it to the persist hooks.
func (inst *instance[C, E, S]) write(ctx context.Context, events []E) (err error) {
	h := inst.h
	from, to := inst.seq+1, inst.seq+int64(len(events))
	if len(h.hooks.persistStart) > 0 || len(h.hooks.persistEnd) > 0 {
		p := Persist{PersistenceID: inst.pid, FromSequenceNr: from, ToSequenceNr: to}
		for _, x := range h.hooks.persistStart {
			ctx = x.OnPersistStart(ctx, p)
		}
		defer func() {
			for _, x := range h.hooks.persistEnd {
				x.OnPersistEnd(ctx, p, err)
			}
		}()
	}
	var fence journal.Fence
	if inst.rng != nil {
		fence = inst.rng.fence
	}
	rejected, err := h.p.write(ctx, inst, events, fence)
	if errors.Is(err, engine.ErrFenced) {
		return fmt.Errorf("entity %s: persist events %d..%d: not stored: %w", inst.pid, from, to, err)
	}
	if err != nil {
		return fmt.Errorf("entity %s: persist events %d..%d: outcome unknown: %w", inst.pid, from, to, err)
	}
	if errors.Is(rejected, journal.ErrFenced) {
		// The store found the range's lease lost: not a rejection the
		// entity can go on after, but the end of its right to write.
		return fmt.Errorf("entity %s: persist events %d..%d: not stored: %w (%v)", inst.pid, from, to, engine.ErrFenced, rejected)
	}
	return rejected
}

// snapshot saves the state and applies retention. Failures are logged; the
// entity goes on.
func (inst *instance[C, E, S]) snapshot() {
	h, p := inst.h, inst.h.b.Snapshots
	ctx := h.ctx
	payload, id, manifest, err := h.cfg.Registry.Serialize(inst.state)
	if err == nil {
		err = h.cfg.Snapshots.Save(ctx, snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: inst.pid, SequenceNr: inst.seq}, Payload: payload, SerializerID: id, Manifest: manifest})
	}
	for _, x := range h.hooks.snapshot {
		x.OnSnapshot(inst.pid, inst.seq, err)
	}
	if err != nil {
		h.cfg.Logger.Warn("snapshot failed", "persistence_id", inst.pid, "seq", inst.seq, "err", err)
		return
	}
	if p.KeepLast == 0 || p.Every == 0 {
		return
	}
	upTo := inst.seq - int64(p.KeepLast)*p.Every
	if upTo <= 0 {
		return
	}
	if err := h.cfg.Snapshots.DeleteMatching(ctx, inst.pid, snapshot.Criteria{MaxSequenceNr: upTo}); err != nil {
		h.cfg.Logger.Warn("deleting old snapshots failed", "persistence_id", inst.pid, "up_to", upTo, "err", err)
	}
	if p.DeleteEvents {
		if err := h.cfg.Journal.DeleteTo(ctx, inst.pid, upTo); err != nil {
			h.cfg.Logger.Warn("deleting old events failed", "persistence_id", inst.pid, "up_to", upTo, "err", err)
		}
	}
}

// writerID returns the writer id of the instance's events since its last
// recovery, made at the first write after it: a recovery that writes
// nothing needs none.
func (inst *instance[C, E, S]) writerID() string {
	if inst.writer == "" {
		inst.writer = newWriterID()
	}
	return inst.writer
}

func newWriterID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
