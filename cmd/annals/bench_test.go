package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestBench(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	small := []string{"--single", "20", "--events", "2000", "--ids", "100", "--replay", "3000"}
	type out struct {
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
	var o out
	decode(t, cli(t, nil, append([]string{"bench", "--store", "sqlite:" + filepath.Join(dir, "app.db"), "--json"}, small...)...), &o)
	if o.Store != "sqlite" || filepath.Dir(o.Scratch) != dir || len(o.Results) != 4 || o.CPUs < 1 {
		t.Fatalf("bench: %+v", o)
	}
	wantEvents := []int64{20, 2000, 3000, 2000}
	for i, r := range o.Results {
		if r.Events != wantEvents[i] || r.Annals <= 0 || r.Raw == nil || *r.Raw <= 0 || r.Ratio == nil || *r.Ratio <= 0 {
			t.Errorf("result %d: %+v", i, r)
		}
	}
	// Nothing is left beside the database, which is not created.
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("left in the directory: %v %v", entries, err)
	}

	decode(t, cli(t, nil, append([]string{"bench", "--store", "memory:", "--json"}, small...)...), &o)
	if o.Store != "memory" || len(o.Results) != 4 || o.Results[0].Raw != nil || o.Results[0].Ratio != nil {
		t.Errorf("bench on memory: %+v", o)
	}
	cli(t, nil, append([]string{"bench", "--store", "memory:"}, small...)...).want(t, 0, []string{"WORKLOAD", "write, 100 ids", "query by slices"}, nil)
	cli(t, nil, "bench", "--store", "memory:", "--ids", "0").want(t, 2, nil, []string{"at least 1"})
}
