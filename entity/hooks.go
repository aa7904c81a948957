package entity

import (
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

// hooks are the HostConfig.Hooks sorted by the interfaces they implement.
type hooks struct {
	recovered  []HookRecovered
	passivated []HookPassivated
	stopped    []HookStopped
	restart    []HookRestartScheduled
	snapshot   []HookSnapshot
	overflow   []HookOverflow
}

func newHooks(values []any) hooks {
	return hooks{
		recovered:  hookset.Select[HookRecovered](values),
		passivated: hookset.Select[HookPassivated](values),
		stopped:    hookset.Select[HookStopped](values),
		restart:    hookset.Select[HookRestartScheduled](values),
		snapshot:   hookset.Select[HookSnapshot](values),
		overflow:   hookset.Select[HookOverflow](values),
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
