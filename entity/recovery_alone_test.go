package entity_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The environment of the child process BenchmarkRecoveryCPUAlone
// starts for each layer (TestRecoveryLayerChild).
const (
	layerChildEnv  = "ANNALS_RECOVERY_LAYER_CHILD"  // the layer's name
	layerKindEnv   = "ANNALS_RECOVERY_LAYER_KIND"   // the store's kind
	layerWhereEnv  = "ANNALS_RECOVERY_LAYER_WHERE"  // its file or DSN
	layerRoundsEnv = "ANNALS_RECOVERY_LAYER_ROUNDS" // timed rounds
)

// layerChildPrefix starts the line the child reports its figures on.
const layerChildPrefix = "recovery-layer-cpu-ns "

// The entities BenchmarkRecoveryCPUAlone recovers, the events of each, and
// the timed rounds of every layer's process.
const recoveryAloneEntities, recoveryAloneEvents, recoveryAloneRounds = 1000, 10, 10

// BenchmarkRecoveryCPUAlone measures the client CPU per recovery of
// each layer BenchmarkRecoveryLayers runs (raw select, store, front,
// host), each in a process of its own that does nothing else: the test
// binary started again for one layer (TestRecoveryLayerChild), which
// opens the store the benchmark seeded (1,000 entities of 10 events),
// runs one round outside the timing and then 10 rounds of the 1,000
// recoveries, and reports its getrusage CPU over those rounds: what a
// service doing only that work spends. BenchmarkRecoveryLayers, whose
// layers take turns in one process, has measured a higher ratio of the
// host's CPU to the raw select's than this (docs/performance.md).
//
// Each iteration is a round: every layer's process once, in an order that
// turns from round to round. It reports the median over the rounds of
// each layer's CPU per recovery and of the paired ratio of each layer's
// to the raw select's in the same round:
//
//	go test -run '^$' -bench RecoveryCPUAlone -benchtime 5x ./entity/
func BenchmarkRecoveryCPUAlone(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	for _, kind := range []string{"sqlite", "postgres"} {
		b.Run(kind, func(b *testing.B) {
			where := recoveryBenchLocation(b, kind)
			names := seedRecoveryBenchStoreAt(b, kind, where)
			if names[0] != "raw" {
				b.Fatalf("the first recovery layer is %q: want the raw select, the ratios' base", names[0])
			}
			cpu := make([][]float64, len(names))    // per layer, per round
			ratios := make([][]float64, len(names)) // per layer, per round: to raw
			round := 0
			for b.Loop() {
				got := make([]float64, len(names))
				for k := range names {
					layer := (k + round) % len(names)
					us, err := runLayerChild(b.Context(), exe, kind, where, names[layer], recoveryAloneRounds)
					if err != nil {
						b.Fatal(err)
					}
					got[layer] = us
				}
				for k := range names {
					cpu[k] = append(cpu[k], got[k])
					ratios[k] = append(ratios[k], got[k]/got[0])
				}
				round++
			}
			for k, name := range names {
				b.ReportMetric(median(cpu[k]), name+"-cpu-µs/rec")
				if k > 0 {
					b.ReportMetric(median(ratios[k]), name+"/raw")
				}
			}
		})
	}
}

// seedRecoveryBenchStoreAt writes the benchmark's entities to a new store
// of kind at where, closes it, and returns the names of the recovery
// layers over it, in recoveryLayers' order.
func seedRecoveryBenchStoreAt(b *testing.B, kind, where string) []string {
	b.Helper()
	st := openRecoveryBenchStoreAt(b, kind, where)
	defer st.close()
	reg := registry(b)
	seedRecoveries(b, st.front, reg, recoveryAloneEntities, recoveryAloneEvents)
	var names []string
	for _, l := range recoveryLayers(b, st, reg, recoveryAloneEvents) {
		names = append(names, l.name)
	}
	return names
}

// median returns the median of xs (the mean of the middle two when their
// number is even), or 0 when there are none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// layerChildTimeout bounds a layer's process: it fails (the test
// binary's own timeout) rather than hang the benchmark.
const layerChildTimeout = 5 * time.Minute

// runLayerChild runs the test binary exe as TestRecoveryLayerChild for
// layer over the store of kind at where, and returns the CPU per
// recovery it reports, in µs. The process is killed when ctx ends.
func runLayerChild(ctx context.Context, exe, kind, where, layer string, rounds int) (float64, error) {
	cmd := exec.CommandContext(ctx, exe, "-test.run=^TestRecoveryLayerChild$", "-test.count=1", "-test.timeout="+layerChildTimeout.String())
	cmd.WaitDelay = 10 * time.Second // after the kill, for its output
	cmd.Env = append(os.Environ(), layerChildEnv+"="+layer, layerKindEnv+"="+kind, layerWhereEnv+"="+where, layerRoundsEnv+"="+strconv.Itoa(rounds))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("the %s layer's process: %w\n%s", layer, err, out.Bytes())
	}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), layerChildPrefix); ok {
			ns, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				return 0, fmt.Errorf("the %s layer's process reported %q: %w", layer, sc.Text(), err)
			}
			return ns / 1000, nil
		}
	}
	return 0, fmt.Errorf("the %s layer's process reported no figure:\n%s", layer, out.Bytes())
}

// TestRecoveryLayerChild is the child process of
// BenchmarkRecoveryCPUAlone: it recovers the entities through the
// layer layerChildEnv names and prints its CPU per recovery in ns.
func TestRecoveryLayerChild(t *testing.T) {
	name := os.Getenv(layerChildEnv)
	if name == "" {
		t.Skip("run by BenchmarkRecoveryCPUAlone")
	}
	rounds, err := strconv.Atoi(os.Getenv(layerRoundsEnv))
	if err != nil || rounds < 1 {
		t.Fatalf("%s=%q: want a positive number of rounds", layerRoundsEnv, os.Getenv(layerRoundsEnv))
	}
	st := openRecoveryBenchStoreAt(t, os.Getenv(layerKindEnv), os.Getenv(layerWhereEnv))
	layers := recoveryLayers(t, st, registry(t), recoveryAloneEvents)
	i := slices.IndexFunc(layers, func(l recoveryLayer) bool { return l.name == name })
	if i < 0 {
		t.Fatalf("no recovery layer %q", name)
	}
	if _, _, err := layers[i].round(recoveryAloneEntities); err != nil { // outside the timing
		t.Fatal(err)
	}
	var cpu time.Duration
	for range rounds {
		_, c, err := layers[i].round(recoveryAloneEntities)
		if err != nil {
			t.Fatal(err)
		}
		cpu += c
	}
	fmt.Printf("%s%d\n", layerChildPrefix, cpu.Nanoseconds()/int64(rounds*recoveryAloneEntities))
}
