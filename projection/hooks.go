package projection

import (
	"time"

	hookset "github.com/annals-go/annals/internal/hooks"
	"github.com/annals-go/annals/query"
)

// Hooks: a value given in Config.Hooks is called for each event whose
// interface it implements, as franz-go's kgo.Hook values are. A projection
// with no hooks of a kind pays nothing for that kind. Hooks run inline on
// the projection's goroutine: they must be fast and must not call the
// projection.

// HookStarted is called when Run starts.
type HookStarted interface {
	OnProjectionStarted(id ID)
}

// HookStopped is called when Run returns, with its error (the context's
// when it was cancelled; nil when the source ended).
type HookStopped interface {
	OnProjectionStopped(id ID, err error)
}

// Decision is what the recovery strategy decided about a handler error.
type Decision int

const (
	// DecisionRetry: the handler is called again after the strategy's delay.
	DecisionRetry Decision = iota
	// DecisionSkip: the envelope (or group) is skipped.
	DecisionSkip
	// DecisionFail: the run fails and restarts from the stored offset
	// after a backoff.
	DecisionFail
)

func (d Decision) String() string {
	switch d {
	case DecisionRetry:
		return "retry"
	case DecisionSkip:
		return "skip"
	}
	return "fail"
}

// HookHandlerError is called for each handler error, with what the
// recovery strategy does about it; what names the envelope or group.
type HookHandlerError interface {
	OnHandlerError(id ID, what string, err error, decision Decision)
}

// HookOffsetSaved is called after an offset is stored (committed with the
// handler's transaction, for the exactly-once modes). Lag is the time
// from the write of the last event it covers to the save.
type HookOffsetSaved interface {
	OnOffsetSaved(id ID, offset query.Offset, lag time.Duration)
}

// HookPaused is called when a run finds the projection paused, and
// HookResumed when it goes on afterwards.
type HookPaused interface {
	OnProjectionPaused(id ID)
}

// HookResumed: see HookPaused.
type HookResumed interface {
	OnProjectionResumed(id ID)
}

// HookRestartScheduled is called when a failed run will start again from
// the stored offset after the delay.
type HookRestartScheduled interface {
	OnProjectionRestartScheduled(id ID, err error, delay time.Duration)
}

// hooks are the Config.Hooks sorted by the interfaces they implement.
type hooks struct {
	started      []HookStarted
	stopped      []HookStopped
	handlerError []HookHandlerError
	offsetSaved  []HookOffsetSaved
	paused       []HookPaused
	resumed      []HookResumed
	restart      []HookRestartScheduled
}

func newHooks(values []any) hooks {
	return hooks{
		started:      hookset.Select[HookStarted](values),
		stopped:      hookset.Select[HookStopped](values),
		handlerError: hookset.Select[HookHandlerError](values),
		offsetSaved:  hookset.Select[HookOffsetSaved](values),
		paused:       hookset.Select[HookPaused](values),
		resumed:      hookset.Select[HookResumed](values),
		restart:      hookset.Select[HookRestartScheduled](values),
	}
}

// saved calls the offset hooks for an offset covering an event written at
// written.
func (p *Projection) saved(o query.Offset, written time.Time) {
	if len(p.hooks.offsetSaved) == 0 {
		return
	}
	lag := time.Since(written)
	for _, x := range p.hooks.offsetSaved {
		x.OnOffsetSaved(p.id, o, lag)
	}
}

// isHook reports whether v implements at least one hook interface of
// this package.
func isHook(v any) bool {
	switch v.(type) {
	case HookStarted, HookStopped, HookHandlerError, HookOffsetSaved, HookPaused, HookResumed, HookRestartScheduled:
		return true
	}
	return false
}
