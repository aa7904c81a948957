package main

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals/store/postgres/pgtest"
)

// TestInitLayout: annals init --layout r2dbc creates the tables of Akka's
// and Pekko's R2DBC plugin (and of Annals' own only the membership
// tables); the layout is detected afterwards; asking for the other layout
// is refused naming both; other stores have no layouts.
func TestInitLayout(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.Schema(t)
	cli(t, nil, "init", "--store", url, "--layout", "r2dbc").want(t, 0, []string{"created schema version 1"}, nil)
	cli(t, nil, "init", "--store", url).want(t, 0, []string{"is current; nothing to do"}, nil)
	cli(t, nil, "stats", "--store", url).want(t, 0, []string{"(total)"}, nil)
	cli(t, nil, "init", "--store", url, "--layout", "annals").want(t, 1, nil, []string{"holds the r2dbc layout", "layout annals was asked for"})
	cli(t, nil, "init", "--store", "sqlite:"+t.TempDir()+"/a.db", "--layout", "r2dbc").want(t, 2, nil, []string{"--layout is for postgres:// stores"})

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"cluster_leases", "cluster_members", "durable_state", "event_journal", "projection_management", "projection_offset_store", "projection_timestamp_offset_store", "snapshot"}; !slices.Equal(tables, want) {
		t.Errorf("tables %v, want the plugin's and the membership tables %v", tables, want)
	}
}
