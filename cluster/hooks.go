package cluster

import (
	"time"

	"github.com/annals-go/annals/internal/hooks"
	"github.com/annals-go/annals/membership"
)

// HookHeartbeat is called after each heartbeat: how long the store took,
// how many leases it renewed, and its error (nil on success).
type HookHeartbeat interface {
	OnHeartbeat(took time.Duration, renewed int, err error)
}

// HookLeaseAcquired is called when the member has acquired a lease and
// started serving it.
type HookLeaseAcquired interface {
	OnLeaseAcquired(l membership.Lease)
}

// HookLeaseReleased is called when the member has handed a lease off
// gracefully and released it: how long the hand-off took, and its error
// (a hand-off that timed out or a failed release; the lease was given up
// either way).
type HookLeaseReleased interface {
	OnLeaseReleased(lease string, handOff time.Duration, err error)
}

// HookLeaseLost is called when the member stops serving a lease it did not
// give up: its term ended without a renewal, or another member holds it.
type HookLeaseLost interface {
	OnLeaseLost(lease string, cause error)
}

// HookMembersChanged is called when the member sees the live members
// change (a join, a leave, a member whose term ended), with the members
// now live.
type HookMembersChanged interface {
	OnMembersChanged(live []membership.Member)
}

// memberHooks holds the hooks of a member sorted by interface.
type memberHooks struct {
	heartbeat []HookHeartbeat
	acquired  []HookLeaseAcquired
	released  []HookLeaseReleased
	lost      []HookLeaseLost
	members   []HookMembersChanged
}

func newMemberHooks(values []any) memberHooks {
	return memberHooks{
		heartbeat: hooks.Select[HookHeartbeat](values),
		acquired:  hooks.Select[HookLeaseAcquired](values),
		released:  hooks.Select[HookLeaseReleased](values),
		lost:      hooks.Select[HookLeaseLost](values),
		members:   hooks.Select[HookMembersChanged](values),
	}
}

// isHook reports whether v implements at least one hook interface of
// this package.
func isHook(v any) bool {
	switch v.(type) {
	case HookHeartbeat, HookLeaseAcquired, HookLeaseReleased, HookLeaseLost, HookMembersChanged:
		return true
	}
	return false
}
