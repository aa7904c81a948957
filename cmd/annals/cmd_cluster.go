package main

import (
	"errors"
	"flag"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/annals-go/annals/cluster"
	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/kafkacluster"
)

// errNoMembership reports a store that keeps no cluster membership.
var errNoMembership = errors.New("this store keeps no cluster membership")

func clusterCommand() *command {
	return &command{
		name: "cluster", args: "status", summary: "show a cluster's members, the ranges each holds and what no one runs",
		help: `Shows a cluster of processes sharing one service's work through the
store (package cluster): each member recorded, its address, whether it is
live (LIVE "leaving" while it hands its work off to leave), when its last
heartbeat's term ends (its last heartbeat was one lease
time before), the slice ranges it holds with their epochs, the daemon
instances (projections) it runs; then the leases no live member holds
(work nobody runs now: a range moving, or a failed member's ranges not yet
taken). It reads the store only: any process may run it.

On a kafka:// store the cluster is the consumer group its members joined
(package store/kafka/kafkacluster; --cluster names the group, default
annals-cluster): each member, its address, the coordinator's member id
and the partitions it holds per journal topic, and the group's state.

When the URL names a read model's database apart from the store
(cassandra:// or kafka:// with readmodel=), the projection instances'
leases kept there (a cluster of the same name) follow, in the same
table as a cluster on leases.

--json prints {"cluster", "members": [{"name", "incarnation", "address",
"live", "leaving", "joined", "renewed_until", "ranges": [{"min", "max",
"epoch"}],
"daemons": {NAME: [INSTANCE, ...]}}], "unowned": [LEASE, ...]}; on
kafka:// {"group", "state", "members": [{"name", "address", "member_id",
"host", "partitions": {TOPIC: [PARTITION, ...]}}]}; with a read model's
database apart, "projections" holds its cluster in the first form.`,
		examples: []string{
			"annals cluster status --store postgres://postgres@127.0.0.1/annals_test",
			"annals cluster status --cluster bank --json",
		},
		minArgs: 1, maxArgs: 1,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			store, asJSON := storeFlag(fs), jsonFlag(fs)
			name := fs.String("cluster", cluster.DefaultCluster, "the cluster's name in the store")
			return func(e *env, args []string) error {
				if args[0] != "status" {
					return usagef("annals cluster: unknown subcommand %q (want status)", args[0])
				}
				s, err := e.open(*store, stores.Existing)
				if err != nil {
					return err
				}
				defer s.Close()
				// The projection instances' leases, when they are kept in a
				// read model's database apart from the store.
				var daemons *cluster.Status
				if s.ReadModelMembership != nil {
					if st, err := cluster.ReadStatus(e.ctx, s.ReadModelMembership, *name); err != nil {
						fmt.Fprintf(e.stderr, "annals: the projection instances' leases in the read model's database cannot be read: %v\n", err)
					} else {
						daemons = &st
					}
				}
				if kj, ok := s.Journal.(*kafka.Journal); ok {
					return kafkaGroupStatus(e, kj, *name, daemons, *asJSON)
				}
				if s.Membership == nil {
					return fmt.Errorf("%s: %w", s.Where, errNoMembership)
				}
				st, err := cluster.ReadStatus(e.ctx, s.Membership, *name)
				if err != nil {
					return err
				}
				if *asJSON {
					return writeJSON(e.stdout, struct {
						cluster.Status
						Projections *cluster.Status `json:"projections,omitempty"`
					}{st, daemons})
				}
				if len(st.Members) == 0 {
					fmt.Fprintf(e.stderr, "no members of cluster %q in %s\n", st.Cluster, s.Where)
				}
				if err := printLeaseStatus(e, st); err != nil {
					return err
				}
				return printProjectionLeases(e, daemons)
			}
		},
	}
}

// printLeaseStatus prints a cluster's members on leases as a table, then
// the leases no live member holds.
func printLeaseStatus(e *env, st cluster.Status) error {
	tw := table(e.stdout, "MEMBER", "ADDRESS", "LIVE", "RENEWED UNTIL", "RANGES", "SLICES (EPOCH)", "DAEMONS")
	for _, m := range st.Members {
		var ranges []string
		for _, r := range m.Ranges {
			ranges = append(ranges, fmt.Sprintf("%d-%d (%d)", r.Min, r.Max, r.Epoch))
		}
		var daemons []string
		for d, insts := range m.Daemons {
			daemons = append(daemons, fmt.Sprintf("%s %v", d, insts))
		}
		sort.Strings(daemons)
		live := fmt.Sprint(m.Live)
		if m.Leaving {
			live = "leaving"
		}
		row(tw, m.Name, textOr(m.Address, "-"), live, m.RenewedUntil.UTC().Format(time.RFC3339Nano), len(m.Ranges),
			textOr(strings.Join(ranges, " "), "-"), textOr(strings.Join(daemons, "; "), "-"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(st.Unowned) > 0 {
		fmt.Fprintf(e.stdout, "held by no live member: %s\n", strings.Join(st.Unowned, " "))
	}
	return nil
}

// printProjectionLeases prints the cluster of projection instances kept
// in the read model's database, when there is one.
func printProjectionLeases(e *env, daemons *cluster.Status) error {
	if daemons == nil {
		return nil
	}
	fmt.Fprintf(e.stdout, "\nprojection instances (leases in the read model's database):\n")
	if len(daemons.Members) == 0 {
		fmt.Fprintf(e.stdout, "no members of cluster %q there\n", daemons.Cluster)
		return nil
	}
	return printLeaseStatus(e, *daemons)
}

// kafkaGroupStatus prints the members of a Kafka journal's consumer group
// (package kafkacluster); the lease cluster's default name stands for the
// group's default.
func kafkaGroupStatus(e *env, j *kafka.Journal, group string, daemons *cluster.Status, asJSON bool) error {
	if group == cluster.DefaultCluster {
		group = kafkacluster.DefaultGroup
	}
	st, err := kafkacluster.ReadStatus(e.ctx, j.Brokers(), group, j.ClientOptions()...)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(e.stdout, struct {
			kafkacluster.Status
			Projections *cluster.Status `json:"projections,omitempty"`
		}{st, daemons})
	}
	if len(st.Members) == 0 {
		fmt.Fprintf(e.stderr, "no members of group %q\n", st.Group)
		return printProjectionLeases(e, daemons)
	}
	fmt.Fprintf(e.stdout, "group %s: %s\n", st.Group, st.State)
	tw := table(e.stdout, "MEMBER", "ADDRESS", "MEMBER ID", "PARTITIONS")
	for _, m := range st.Members {
		var parts []string
		for topic, ps := range m.Partitions {
			parts = append(parts, fmt.Sprintf("%s %v", topic, ps))
		}
		sort.Strings(parts)
		row(tw, m.Name, textOr(m.Address, "-"), m.MemberID, textOr(strings.Join(parts, "; "), "-"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return printProjectionLeases(e, daemons)
}
