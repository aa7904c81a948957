package cluster

import (
	"slices"
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

// Hooks calls the values given as a member's hooks on its events, each for
// the hook interfaces of this package it implements. A Member uses it;
// other sources of ownership (package store/kafka/kafkacluster) use it
// too, so that one value observes every kind of member. The zero Hooks
// calls nothing.
type Hooks struct {
	heartbeat []HookHeartbeat
	acquired  []HookLeaseAcquired
	released  []HookLeaseReleased
	lost      []HookLeaseLost
	members   []HookMembersChanged
}

// NewHooks sorts values by the hook interfaces they implement; a value
// that implements none is refused with an error naming field.
func NewHooks(field string, values []any) (Hooks, error) {
	if err := hooks.Refuse(field, values, isHook); err != nil {
		return Hooks{}, err
	}
	return Hooks{
		heartbeat: hooks.Select[HookHeartbeat](values),
		acquired:  hooks.Select[HookLeaseAcquired](values),
		released:  hooks.Select[HookLeaseReleased](values),
		lost:      hooks.Select[HookLeaseLost](values),
		members:   hooks.Select[HookMembersChanged](values),
	}, nil
}

// Heartbeat calls the HookHeartbeat values.
func (h Hooks) Heartbeat(took time.Duration, renewed int, err error) {
	for _, x := range h.heartbeat {
		x.OnHeartbeat(took, renewed, err)
	}
}

// LeaseAcquired calls the HookLeaseAcquired values.
func (h Hooks) LeaseAcquired(l membership.Lease) {
	for _, x := range h.acquired {
		x.OnLeaseAcquired(l)
	}
}

// LeaseReleased calls the HookLeaseReleased values.
func (h Hooks) LeaseReleased(lease string, handOff time.Duration, err error) {
	for _, x := range h.released {
		x.OnLeaseReleased(lease, handOff, err)
	}
}

// LeaseLost calls the HookLeaseLost values.
func (h Hooks) LeaseLost(lease string, cause error) {
	for _, x := range h.lost {
		x.OnLeaseLost(lease, cause)
	}
}

// MembersChanged calls the HookMembersChanged values, each with its own
// copy of live, when live differs from old (by name, incarnation and
// address).
func (h Hooks) MembersChanged(old, live []membership.Member) {
	if len(h.members) == 0 || slices.EqualFunc(old, live, func(a, b membership.Member) bool {
		return a.Name == b.Name && a.Incarnation == b.Incarnation && a.Address == b.Address
	}) {
		return
	}
	for _, x := range h.members {
		x.OnMembersChanged(slices.Clone(live))
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
