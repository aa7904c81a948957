package main

import (
	"slices"
	"testing"

	"github.com/annals-go/annals/store/postgres/pgtest"
)

// TestCheckOnR2DBCLayout: annals check passes on a schema in the r2dbc
// layout, skipping with their reasons the snapshot rules the layout
// cannot keep (one snapshot per id, millisecond snapshot times).
func TestCheckOnR2DBCLayout(t *testing.T) {
	t.Parallel()
	url, _ := pgtest.Schema(t)
	url = pgtest.WithParam(url, "layout", "r2dbc")
	cli(t, nil, "init", "--store", url).want(t, 0, []string{"created"}, nil)
	var out checkOut
	decode(t, cli(t, nil, "check", "--store", url, "--short", "--json"), &out)
	if !out.OK {
		t.Fatalf("check on the r2dbc layout: %+v", out)
	}
	for _, s := range out.Suites {
		if s.Suite == "snapshots" && (!slices.Contains(s.Skipped, "LoadLatest") || !slices.Contains(s.Skipped, "DeleteMatching")) {
			t.Errorf("snapshot suite %+v: want the layout's exceptions skipped", s)
		}
	}
}
