package entity

import (
	"context"
	"time"

	hookset "github.com/annals-go/annals/internal/hooks"
)

// Hooks: a value given in HostConfig.Hooks is called for each event whose
// interface it implements, as franz-go's kgo.Hook values are. A host with
// no hooks of a kind pays nothing for that kind. Hooks run inline on the
// entity's goroutine (or the caller's, for overflows): they must be fast
// and must not call the host.

// Recovered describes one entity's recovery.
type Recovered struct {
	PersistenceID string
	// Duration is the time from getting a recovery slot
	// (MaxConcurrentRecoveries) to the entity being ready.
	Duration time.Duration
	// SnapshotSequenceNr is the sequence number of the snapshot the state
	// started from (0: none); Events the events replayed after it;
	// SequenceNr the entity's sequence number once recovered.
	SnapshotSequenceNr, Events, SequenceNr int64
	// Err is the recovery's failure (the entity then stops or restarts).
	Err error
}

// HookRecovered is called after each recovery, successful or not.
type HookRecovered interface {
	OnRecovered(Recovered)
}

// HookPassivated is called when an entity passivates (idle, or to make
// room under MaxLive).
type HookPassivated interface {
	OnPassivated(persistenceID string)
}

// HookStopped is called when an entity stops for another reason than
// passivation: a Stop effect (cause ErrStopped), a failure without
// Restart, a conflict, the host's shutdown (ErrHostClosed).
type HookStopped interface {
	OnStopped(persistenceID string, cause error)
}

// HookRestartScheduled is called when a failed entity will recover again
// after the delay (HostConfig.Restart).
type HookRestartScheduled interface {
	OnRestartScheduled(persistenceID string, cause error, delay time.Duration)
}

// HookSnapshot is called after each snapshot the host takes: err is nil
// when it was saved.
type HookSnapshot interface {
	OnSnapshot(persistenceID string, sequenceNr int64, err error)
}

// Overflow says what was full.
type Overflow int

const (
	// OverflowMailbox: a command was refused with ErrMailboxFull.
	OverflowMailbox Overflow = iota
	// OverflowStash: a Stash effect found the stash full (ErrStashOverflow).
	OverflowStash
)

func (o Overflow) String() string {
	if o == OverflowStash {
		return "stash"
	}
	return "mailbox"
}

// HookOverflow is called when a command is refused because the entity's
// mailbox or stash is full.
type HookOverflow interface {
	OnOverflow(persistenceID string, what Overflow)
}

// HookCommandStart is called when Tell, Send or Ask hands a command to
// the host, on the sender's goroutine, with the sender's context
// (context.Background() for Tell). The context it returns is the
// command's: the next start hook gets it, HookCommandEnd gets it, and the
// command's persist runs with its values (never its cancellation or
// deadline). A tracer starts the command's span here.
type HookCommandStart interface {
	OnCommandStart(ctx context.Context, persistenceID string) context.Context
}

// HookCommandEnd is called once for every command HookCommandStart saw,
// with the context the start hooks returned: when the command is
// answered (err is what Send returns: nil once its effect completed, its
// events stored and its reply sent), or refused (ErrMailboxFull,
// ErrHostClosed, a *NotOwnedError, a *RestartingError, ...). It runs
// before Send returns; Ask returns as soon as the reply is sent, which
// may be before. A tracer ends the command's span here.
type HookCommandEnd interface {
	OnCommandEnd(ctx context.Context, persistenceID string, err error)
}

// Persist describes one atomic write of a command's events.
type Persist struct {
	PersistenceID string
	// FromSequenceNr and ToSequenceNr are the first and last sequence
	// numbers of the events written.
	FromSequenceNr, ToSequenceNr int64
}

// HookPersistStart is called before a command's events are written, on
// the entity's goroutine, with the command's context (without its
// cancellation); the journal's Write gets the context it returns, and so
// does HookPersistEnd. A tracer starts the persist's span here, a child of
// the command's.
type HookPersistStart interface {
	OnPersistStart(ctx context.Context, p Persist) context.Context
}

// HookPersistEnd is called after the write with its outcome: nil when the
// events are stored, a rejection (journal.ErrRejected), a sequence
// conflict, or an error whose outcome is unknown.
type HookPersistEnd interface {
	OnPersistEnd(ctx context.Context, p Persist, err error)
}

// hooks are the HostConfig.Hooks sorted by the interfaces they implement.
type hooks struct {
	commandStart []HookCommandStart
	commandEnd   []HookCommandEnd
	persistStart []HookPersistStart
	persistEnd   []HookPersistEnd
	recovered    []HookRecovered
	passivated   []HookPassivated
	stopped      []HookStopped
	restart      []HookRestartScheduled
	snapshot     []HookSnapshot
	overflow     []HookOverflow
}

func newHooks(values []any) hooks {
	return hooks{
		commandStart: hookset.Select[HookCommandStart](values),
		commandEnd:   hookset.Select[HookCommandEnd](values),
		persistStart: hookset.Select[HookPersistStart](values),
		persistEnd:   hookset.Select[HookPersistEnd](values),
		recovered:    hookset.Select[HookRecovered](values),
		passivated:   hookset.Select[HookPassivated](values),
		stopped:      hookset.Select[HookStopped](values),
		restart:      hookset.Select[HookRestartScheduled](values),
		snapshot:     hookset.Select[HookSnapshot](values),
		overflow:     hookset.Select[HookOverflow](values),
	}
}

// left calls the passivation or stop hooks.
func (h hooks) left(pid string, passivated bool, cause error) {
	if passivated {
		for _, x := range h.passivated {
			x.OnPassivated(pid)
		}
		return
	}
	for _, x := range h.stopped {
		x.OnStopped(pid, cause)
	}
}

func (h hooks) overflowed(pid string, what Overflow) {
	for _, x := range h.overflow {
		x.OnOverflow(pid, what)
	}
}

// commands reports whether command hooks are registered: then every
// command's start and end are reported.
func (h hooks) commands() bool {
	return len(h.commandStart) > 0 || len(h.commandEnd) > 0
}

// commandStarted calls the start hooks and returns the command's context.
func (h hooks) commandStarted(ctx context.Context, pid string) context.Context {
	for _, x := range h.commandStart {
		ctx = x.OnCommandStart(ctx, pid)
	}
	return ctx
}

// commandEnded calls the end hooks.
func (h hooks) commandEnded(ctx context.Context, pid string, err error) {
	for _, x := range h.commandEnd {
		x.OnCommandEnd(ctx, pid, err)
	}
}

// isHook reports whether v implements at least one hook interface of
// this package.
func isHook(v any) bool {
	switch v.(type) {
	case HookRecovered, HookPassivated, HookStopped, HookRestartScheduled, HookSnapshot, HookOverflow, HookCommandStart, HookCommandEnd, HookPersistStart, HookPersistEnd:
		return true
	}
	return false
}
