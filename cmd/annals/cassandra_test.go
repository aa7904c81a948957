package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/durable"
	"github.com/annals-go/annals/store/cassandra/cassandratest"
)

// TestCassandraCommands: the commands that make sense on a Cassandra
// keyspace work on a cassandra:// URL: init (dry run, then for real),
// copy from SQLite and back (verified), stats, ids, events, state, tail by
// tag (current, resumed from a printed offset), and the compliance kit
// (check).
func TestCassandraCommands(t *testing.T) {
	t.Parallel()
	base, _ := cassandratest.URL(t)
	url := base + "?eventual_consistency_delay=0s&first_time_bucket=" + time.Now().UTC().Add(-24*time.Hour).Format("20060102T15:04")
	env := []string{"ANNALS_STORE=" + url}

	cli(t, env, "init", "--dry-run").want(t, 0, []string{"CREATE KEYSPACE", "CREATE TABLE IF NOT EXISTS", "tag_views"}, nil)
	cli(t, env, "stats").want(t, 1, nil, []string{"annals init"})
	cli(t, env, "init").want(t, 0, []string{"created schema version 1"}, nil)
	cli(t, env, "init").want(t, 0, []string{"schema version 1"}, nil)

	// Durable state: state reads it; tail --durable says there are no
	// change queries on Cassandra.
	withStore(t, url, func(s *stores.Store) {
		if err := s.Durable.Upsert(t.Context(), durable.Object{PersistenceID: "Profile|c-1", Revision: 1, Payload: []byte(`{"name":"Ada"}`), SerializerID: 31, Manifest: "profile.Profile", Tag: "profiles"}); err != nil {
			t.Fatal(err)
		}
	})
	cli(t, env, "state", "Profile|c-1").want(t, 0, []string{"REVISION", "1", "profiles", `{"name":"Ada"}`}, nil)
	cli(t, env, "tail", "--durable", "--tag", "profiles", "--current").want(t, 1, nil, []string{"no durable-state changes by tag"})

	src := filepath.Join(t.TempDir(), "src.db")
	bigSource(t, src, 30, 4)
	cli(t, env, "copy", "--from", "sqlite:"+src, "--to", url).want(t, 0, []string{"verified 30 ids"}, nil)
	cli(t, env, "stats").want(t, 0, []string{"Big", "30"}, nil)
	cli(t, env, "events", "Big|0003").want(t, 0, []string{`{"i":3,"seq":4}`}, nil)
	if ids := cli(t, env, "ids", "--type", "Big", "--limit", "0"); ids.code != 0 || strings.Count(ids.stdout, "\nBig|") != 30 {
		t.Errorf("ids: %d listed, want the 30 ids\n%v", strings.Count(ids.stdout, "\nBig|"), ids)
	}

	// Tag t0: ids 3, 6, ... 27 with 4 events, but 21 with its last 2 (the
	// first 2 deleted in the source) and 0 with none (all deleted).
	tail := cli(t, env, "tail", "--tag", "t0", "--current", "--json")
	lines := decodeLines[struct {
		Offset map[string]any `json:"offset"`
	}](t, tail, false)
	if len(lines) != 8*4+2 {
		t.Fatalf("tail --tag t0 --current: %d events, want 34\n%v", len(lines), tail)
	}
	offset := mustJSON(t, lines[9].Offset)
	rest := cli(t, env, "tail", "--tag", "t0", "--current", "--json", "--from-offset", string(offset))
	if n := len(jsonLines[map[string]any](t, rest)); n != 24 {
		t.Errorf("tail from the 10th event's offset: %d events, want 24", n)
	}

	back := "sqlite:" + filepath.Join(t.TempDir(), "back.db")
	cli(t, env, "copy", "--from", url, "--to", back).want(t, 0, []string{"verified 30 ids"}, nil)

	// --short: the replay of 100,000 events is store/cassandra's TestKits'
	// (and a third of the time here).
	cli(t, env, "check", "--short").want(t, 0, []string{"check passed"}, nil)
}
