package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/annals-go/annals/cluster"
	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/entity"
	"github.com/annals-go/annals/examples/bank"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/kafkacluster"
	"github.com/annals-go/annals/store/kafka/kafkatest"
	"github.com/annals-go/annals/store/postgres/pgtest"
	"github.com/annals-go/annals/store/sqlite"
)

// TestClusterStatus: annals cluster status lists the members of a cluster
// on the store, the ranges each holds, and nothing unowned once they
// share them (table and --json); a store without members says so.
func TestClusterStatus(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cluster.db")
	s, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var members []*cluster.Member
	for _, name := range []string{"m1", "m2"} {
		m, err := cluster.Join(t.Context(), cluster.Config{Store: s.Membership(), Cluster: "bank", Name: name, Address: name + ":8080", LeaseTime: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Leave(context.Background()) })
		members = append(members, m)
	}
	// m1 joined first and holds every range until m2 takes its share.
	deadline := time.Now().Add(30 * time.Second)
	for len(members[1].Held()) < cluster.DefaultRanges/2 || len(members[0].Held()) > cluster.DefaultRanges/2 {
		if time.Now().After(deadline) {
			t.Fatalf("members hold %d and %d ranges", len(members[0].Held()), len(members[1].Held()))
		}
		<-members[0].Changed()
	}
	url := "sqlite:" + path
	cli(t, nil, "cluster", "status", "--store", url, "--cluster", "bank").want(t, 0, []string{"MEMBER", "m1", "m2:8080", "true", "0-31 (", "16"}, nil)
	var got cluster.Status
	decode(t, cli(t, nil, "cluster", "status", "--store", url, "--cluster", "bank", "--json"), &got)
	if len(got.Members) != 2 || len(got.Unowned) != 0 {
		t.Fatalf("--json: %+v", got)
	}
	total := 0
	for _, m := range got.Members {
		if !m.Live || m.RenewedUntil.IsZero() {
			t.Errorf("member %+v: want live with a renewal time", m)
		}
		total += len(m.Ranges)
	}
	if total != cluster.DefaultRanges {
		t.Errorf("--json lists %d ranges held, want %d", total, cluster.DefaultRanges)
	}
	cli(t, nil, "cluster", "status", "--store", url, "--cluster", "other").want(t, 0, nil, []string{`no members of cluster "other"`})
	cli(t, nil, "cluster", "members", "--store", url).want(t, 2, nil, []string{"unknown subcommand"})
}

// TestClusterStatusKafka: on a kafka:// store, annals cluster status lists
// the members of the consumer group kafkacluster members joined, with
// their addresses and partitions (table and --json), then the projection
// instances whose leases the read model's database keeps; an unknown
// group has none.
func TestClusterStatusKafka(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Real(t)
	dsn, _ := pgtest.Schema(t)
	readModel, _ := pgtest.Schema(t)
	prefix := kafkatest.Prefix(t, brokers, "clistatus")
	url := "kafka://" + brokers[0] + "/?topic_prefix=" + prefix + "&eventual=" + pgtest.WithParam(dsn, "migrate", "true") + "&readmodel=" + readModel
	cli(t, nil, "init", "--store", url).want(t, 0, nil, nil)
	withStore(t, url, func(s *stores.Store) {
		reg := serialization.NewRegistry()
		if err := bank.Register(reg); err != nil {
			t.Fatal(err)
		}
		host, err := entity.NewHost(bank.Behavior(), entity.HostConfig{Journal: s.Journal, Registry: reg, Assigned: true})
		if err != nil {
			t.Fatal(err)
		}
		m, err := kafkacluster.Join(t.Context(), kafkacluster.Config{Journal: s.Journal.(*kafka.Journal), Group: prefix + "bank", Name: "m1", Address: "m1:8080",
			Shards: []kafkacluster.Shard{host}, SessionTimeout: 6 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = m.Leave(context.Background()) }()
		// The projection's two instances, on leases in the read model's
		// database.
		if s.ReadModelMembership == nil {
			t.Fatal("a kafka:// store with readmodel= has no read model membership")
		}
		d, err := cluster.Join(t.Context(), cluster.Config{Store: s.ReadModelMembership, Cluster: prefix + "bank", Name: "m1", Address: "m1:8080", LeaseTime: 5 * time.Second, DaemonsOnly: true,
			Daemons: []cluster.Daemon{{Name: "balances", Instances: 2, Run: func(ctx context.Context, _ int) error { <-ctx.Done(); return nil }}}})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = d.Leave(context.Background()) }()
		deadline := time.After(30 * time.Second)
		for len(d.Held()) < 2 {
			select {
			case <-d.Changed():
			case <-deadline:
				t.Fatalf("the daemons' member holds %v", d.Held())
			}
		}
		cli(t, nil, "cluster", "status", "--store", url, "--cluster", prefix+"bank").want(t, 0,
			[]string{"MEMBER", "m1", "m1:8080", prefix + "Account [0]", "projection instances (leases in the read model's database)", "balances [0 1]"}, nil)
		var got struct {
			kafkacluster.Status
			Projections *cluster.Status `json:"projections"`
		}
		decode(t, cli(t, nil, "cluster", "status", "--store", url, "--cluster", prefix+"bank", "--json"), &got)
		if len(got.Members) != 1 || got.Members[0].Name != "m1" || len(got.Members[0].Partitions[prefix+"Account"]) != 1 {
			t.Errorf("--json: %+v, want m1 holding the Account topic's partition", got)
		}
		if p := got.Projections; p == nil || len(p.Members) != 1 || len(p.Members[0].Daemons["balances"]) != 2 || len(p.Members[0].Ranges) != 0 {
			t.Errorf("--json projections: %+v, want m1 running both balances instances and no range", p)
		}
		cli(t, nil, "cluster", "status", "--store", url, "--cluster", prefix+"none").want(t, 0, nil, []string{`no members of group`})
	})
}
