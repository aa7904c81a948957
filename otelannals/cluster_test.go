package otelannals_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/annals-go/annals/cluster"
	"github.com/annals-go/annals/otelannals"
	"github.com/annals-go/annals/store/memory"
)

// TestClusterMetrics: a member with the telemetry as its hook reports its
// heartbeats, the leases it acquired, the live members, and the hand-offs
// of its leases when it leaves; a second member that joins makes the
// first hand off its share.
func TestClusterMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	tel, err := otelannals.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Close()
	s := memory.New().Membership()
	cfg := func(name string) cluster.Config {
		return cluster.Config{Store: s, Cluster: "metrics", Name: name, LeaseTime: 2 * time.Second, Heartbeat: 200 * time.Millisecond, Ranges: 4, Hooks: []any{tel}}
	}
	a, err := cluster.Join(t.Context(), cfg("a"))
	if err != nil {
		t.Fatal(err)
	}
	<-a.Changed() // a heartbeat after the first
	b, err := cluster.Join(t.Context(), cfg("b"))
	if err != nil {
		t.Fatal(err)
	}
	for len(b.Held()) < 2 {
		<-b.Changed()
	}
	if err := a.Leave(context.Background()); err != nil {
		t.Fatal(err)
	}
	for len(b.Held()) < 4 { // b takes a's ranges before it leaves in turn
		<-b.Changed()
	}
	if err := b.Leave(context.Background()); err != nil {
		t.Fatal(err)
	}
	sums, counts, gauges := collect(t, reader)
	// a takes all 4 ranges, hands 2 to b, then gives its other 2 up; b
	// takes 2, then those 2, then gives all 4 up: 8 acquisitions, 8
	// hand-offs, no lease lost.
	if sums["annals.cluster.leases.acquired"] != 8 || sums["annals.cluster.leases.lost"] != 0 {
		t.Errorf("leases acquired %d, lost %d; want 8 and 0", sums["annals.cluster.leases.acquired"], sums["annals.cluster.leases.lost"])
	}
	if counts["annals.cluster.handoff.duration"] != 8 {
		t.Errorf("%d hand-offs recorded, want 8", counts["annals.cluster.handoff.duration"])
	}
	if counts["annals.cluster.heartbeat.duration"] < 3 {
		t.Errorf("%d heartbeats recorded, want at least 3", counts["annals.cluster.heartbeat.duration"])
	}
	if _, ok := gauges["annals.cluster.members"]; !ok {
		t.Errorf("no members gauge among %v", gauges)
	}
}
