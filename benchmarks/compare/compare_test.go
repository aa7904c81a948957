package main

import (
	"bytes"
	"context"
	"os"
	"testing"
)

// TestSmoke runs every workload of every system at tiny sizes: SQLite, and
// PostgreSQL when ANNALS_TEST_POSTGRES names a server.
func TestSmoke(t *testing.T) {
	cfg := config{
		rounds:    1,
		sizes:     sizes{writers: 10, writerEvents: 2, entities: 10, events: 10, catchUp: 1000, one: 3},
		workloads: workloads,
		stores:    []string{"sqlite"},
		pgURL:     os.Getenv("ANNALS_TEST_POSTGRES"),
	}
	if cfg.pgURL != "" {
		cfg.stores = append(cfg.stores, "postgres")
	}
	var out bytes.Buffer
	if err := run(context.Background(), &out, cfg); err != nil {
		t.Fatal(err)
	}
	t.Log(out.String())
}
