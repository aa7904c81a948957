package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// benchOut is the --json shape of bench.
type benchOut struct {
	Store   string `json:"store"`
	Scratch string `json:"scratch"`
	Go      string `json:"go"`
	CPUs    int    `json:"cpus"`
	Results []struct {
		Workload string   `json:"workload"`
		Events   int64    `json:"events"`
		Annals   float64  `json:"annals_events_per_second"`
		Raw      *float64 `json:"raw_events_per_second"`
		Ratio    *float64 `json:"ratio"`
	} `json:"results"`
}

var (
	benchSmall    = []string{"--single", "20", "--events", "2000", "--ids", "100", "--replay", "3000"}
	scratchTable  = regexp.MustCompile(`store \w+, scratch (.+) \(removed\)`)
	scratchSchema = regexp.MustCompile(`\(schema (annals_scratch_[0-9a-f]+)\)`)
)

// The benchmarks run on a scratch store beside the one named (a file in
// its directory, a schema of its database), removed at the end; the store
// named is not created.
func TestBench(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, k storeKind) {
		st := k.newStore(t)
		scratchGone := func(scratch string) {
			t.Helper()
			if st.sqlite() {
				// Nothing is left beside the database.
				dir := filepath.Dir(st.path)
				if filepath.Dir(scratch) != dir {
					t.Errorf("scratch %s not beside %s", scratch, st.path)
				}
				if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
					t.Errorf("left in the directory: %v %v", entries, err)
				}
				return
			}
			m := scratchSchema.FindStringSubmatch(scratch)
			if m == nil || pgSchemaExists(t, m[1]) {
				t.Errorf("scratch schema of %q left behind (or not named)", scratch)
				return
			}
			if n := pgQuery[int64](t, `SELECT count(*) FROM pg_namespace WHERE nspname = ANY($1)`, []string{m[1], st.schema}); n != 0 {
				t.Errorf("%d schemas left", n)
			}
		}

		var o benchOut
		decode(t, cli(t, nil, append([]string{"bench", "--store", st.url, "--json"}, benchSmall...)...), &o)
		if o.Store != k.name || o.Scratch == "" || o.Go == "" || o.CPUs < 1 || len(o.Results) != 4 {
			t.Fatalf("bench: %+v", o)
		}
		wantEvents := []int64{20, 2000, 3000, 2000}
		for i, r := range o.Results {
			if r.Workload == "" || r.Events != wantEvents[i] || r.Annals <= 0 || r.Raw == nil || *r.Raw <= 0 || r.Ratio == nil || *r.Ratio <= 0 {
				t.Errorf("result %d: %+v", i, r)
			}
		}
		scratchGone(o.Scratch)
		if st.exists(t) {
			t.Errorf("bench created the store %s", st.url)
		}

		r := cli(t, nil, append([]string{"bench", "--store", st.url}, benchSmall...)...)
		r.want(t, 0, []string{"store " + k.name + ", scratch", "(removed)", "WORKLOAD", "write, 1 id", "write, 100 ids", "replay", "query by slices"}, nil)
		if m := scratchTable.FindStringSubmatch(r.stdout); m == nil {
			t.Errorf("the table run names no scratch store:\n%s", r.stdout)
		} else {
			scratchGone(m[1])
		}
		if st.exists(t) {
			t.Errorf("bench created the store %s", st.url)
		}
	})
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		var o benchOut
		decode(t, cli(t, nil, append([]string{"bench", "--store", "memory:", "--json"}, benchSmall...)...), &o)
		if o.Store != "memory" || len(o.Results) != 4 || o.Results[0].Raw != nil || o.Results[0].Ratio != nil {
			t.Errorf("bench on memory: %+v", o)
		}
		cli(t, nil, append([]string{"bench", "--store", "memory:"}, benchSmall...)...).want(t, 0, []string{"WORKLOAD", "write, 100 ids", "query by slices"}, nil)
		cli(t, nil, "bench", "--store", "memory:", "--ids", "0").want(t, 2, nil, []string{"at least 1"})
	})
}
