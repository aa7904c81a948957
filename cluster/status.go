package cluster

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/membership"
)

// Status is a cluster as its store records it: the members and what each
// holds. ReadStatus reads it from any process, member or not.
type Status struct {
	Cluster string `json:"cluster"`
	// Members lists the recorded members by name, live or not.
	Members []MemberStatus `json:"members"`
	// Unowned lists the leases no live member holds (free, released, or
	// held by a member whose term has ended): work nobody runs now.
	Unowned []string `json:"unowned"`
}

// MemberStatus is one member and what it holds.
type MemberStatus struct {
	Name        string `json:"name"`
	Incarnation string `json:"incarnation"`
	Address     string `json:"address"`
	// Live reports that the member's term had not ended on the store's
	// clock; RenewedUntil is the end of its term (its last heartbeat plus
	// the lease time).
	Live         bool      `json:"live"`
	Joined       time.Time `json:"joined"`
	RenewedUntil time.Time `json:"renewed_until"`
	// Ranges are the slice ranges it holds, with their epochs.
	Ranges []HeldRange `json:"ranges"`
	// Leaving reports that the member is handing everything off to leave
	// (it holds its LeavingLease): the others no longer count it.
	Leaving bool `json:"leaving,omitempty"`
	// Daemons maps a daemon's name to the instances it runs.
	Daemons map[string][]int `json:"daemons,omitempty"`
}

// HeldRange is a slice range a member holds.
type HeldRange struct {
	// Min and Max are the range's first and last slice.
	Min   int   `json:"min"`
	Max   int   `json:"max"`
	Epoch int64 `json:"epoch"`
}

// Range returns the slice range.
func (h HeldRange) Range() annals.SliceRange { return annals.SliceRange{Min: h.Min, Max: h.Max} }

// ReadStatus reads cluster's members and leases from s.
func ReadStatus(ctx context.Context, s membership.Store, cluster string) (Status, error) {
	if cluster == "" {
		cluster = DefaultCluster
	}
	members, err := s.Members(ctx, cluster)
	if err != nil {
		return Status{}, fmt.Errorf("cluster: status of %s: %w", cluster, err)
	}
	leases, err := s.Leases(ctx, cluster)
	if err != nil {
		return Status{}, fmt.Errorf("cluster: status of %s: %w", cluster, err)
	}
	st := Status{Cluster: cluster, Members: []MemberStatus{}, Unowned: []string{}}
	index := map[membership.Holder]int{}
	for _, m := range members {
		index[m.Holder()] = len(st.Members)
		st.Members = append(st.Members, MemberStatus{Name: m.Name, Incarnation: m.Incarnation, Address: m.Address, Live: m.Live, Joined: m.Joined, RenewedUntil: m.Expires, Ranges: []HeldRange{}})
	}
	for _, l := range leases {
		i, ok := index[l.Owner]
		leavingMark := strings.HasPrefix(l.Name, LeavingLease(""))
		switch {
		case (!l.Live || !ok || !st.Members[i].Live) && leavingMark:
			continue // a member's mark of a leave that ended: no work
		case !l.Live || !ok || !st.Members[i].Live:
			st.Unowned = append(st.Unowned, l.Name)
			continue
		case leavingMark:
			st.Members[i].Leaving = true
			continue
		}
		ms := &st.Members[i]
		if r, ok := parseRangeLease(l.Name); ok {
			ms.Ranges = append(ms.Ranges, HeldRange{Min: r.Min, Max: r.Max, Epoch: l.Epoch})
		} else if d, inst, ok := parseDaemonLease(l.Name); ok {
			if ms.Daemons == nil {
				ms.Daemons = map[string][]int{}
			}
			ms.Daemons[d] = append(ms.Daemons[d], inst)
		}
	}
	for i := range st.Members {
		ms := &st.Members[i]
		slices.SortFunc(ms.Ranges, func(a, b HeldRange) int { return a.Min - b.Min })
		for _, insts := range ms.Daemons {
			slices.Sort(insts)
		}
	}
	return st, nil
}

// parseRangeLease reads a RangeLease name.
func parseRangeLease(name string) (annals.SliceRange, bool) {
	rest, ok := strings.CutPrefix(name, "slices/")
	if !ok {
		return annals.SliceRange{}, false
	}
	lo, hi, ok := strings.Cut(rest, "-")
	min, err1 := strconv.Atoi(lo)
	max, err2 := strconv.Atoi(hi)
	if !ok || err1 != nil || err2 != nil {
		return annals.SliceRange{}, false
	}
	return annals.SliceRange{Min: min, Max: max}, true
}

// parseDaemonLease reads a DaemonLease name.
func parseDaemonLease(name string) (daemon string, instance int, ok bool) {
	rest, ok := strings.CutPrefix(name, "daemon/")
	if !ok {
		return "", 0, false
	}
	i := strings.LastIndex(rest, "/")
	if i < 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(rest[i+1:])
	if err != nil {
		return "", 0, false
	}
	return rest[:i], n, true
}
