package main

import (
	"database/sql"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

type checkOut struct {
	Store  string `json:"store"`
	OK     bool   `json:"ok"`
	Suites []struct {
		Suite   string   `json:"suite"`
		Rules   int      `json:"rules"`
		Passed  int      `json:"passed"`
		Failed  []string `json:"failed"`
		Skipped []string `json:"skipped"`
	} `json:"suites"`
	RemovedIDs int `json:"removed_ids"`
}

func TestCheckPassesAndLeavesTheStoreAsItWas(t *testing.T) {
	t.Parallel()
	path := fixture(t, t.TempDir())
	before := contents(t, path)
	var out checkOut
	decode(t, cli(t, nil, "check", "--store", "sqlite:"+path, "--short", "--json"), &out)
	if !out.OK || len(out.Suites) != 3 || out.RemovedIDs < 100 {
		t.Fatalf("check: %+v", out)
	}
	for _, s := range out.Suites {
		if s.Rules == 0 || s.Passed+len(s.Skipped) != s.Rules || len(s.Failed) != 0 || (s.Suite == "journal" && !slices.Equal(s.Skipped, []string{"LargeReplayStreams"})) {
			t.Errorf("suite %+v", s)
		}
	}
	if after := contents(t, path); !reflect.DeepEqual(before, after) {
		t.Errorf("check changed the store's own data or left ids:\nbefore %v\nafter  %v", before.highest, after.highest)
	}
	cli(t, nil, "check", "--store", "memory:", "--short").want(t, 0, []string{"SUITE", "journal", "queries", "check passed"}, nil)
}

// A database with a trigger that silently drops the round-trip rule's
// events: the write reports success, the events are gone.
func TestCheckFailsOnABrokenStore(t *testing.T) {
	t.Parallel()
	path := fixture(t, t.TempDir())
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TRIGGER drop_round BEFORE INSERT ON event_journal WHEN NEW.entity_type = 'KitRound' BEGIN SELECT RAISE(IGNORE); END`); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	r := cli(t, nil, "check", "--store", "sqlite:"+path, "--run", "journal/(FieldsRoundTrip|ReplayAll)$", "--json")
	if r.code != 1 || !strings.Contains(r.stderr, "--- FAIL: Check/journal/FieldsRoundTrip") {
		t.Fatalf("check of a broken store: %s", r)
	}
	r.code = 0
	var out checkOut
	decode(t, r, &out)
	if out.OK || len(out.Suites) != 1 || out.Suites[0].Rules != 2 || out.Suites[0].Passed != 1 || !slices.Equal(out.Suites[0].Failed, []string{"FieldsRoundTrip"}) {
		t.Errorf("check: %+v", out)
	}
	cli(t, nil, "check", "--store", "sqlite:"+path, "--run", "journal/FieldsRoundTrip$").want(t, 1, []string{"failed: journal/FieldsRoundTrip", "check FAILED"}, nil)
	cli(t, nil, "check", "--store", "sqlite:"+filepath.Join(t.TempDir(), "none.db")).want(t, 1, nil, []string{"annals init"})
	cli(t, nil, "check", "--store", "memory:", "--run", "(").want(t, 2, nil, []string{"--run"})
}
