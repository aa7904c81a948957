package main

import (
	"database/sql"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// verifyOut is the --json shape of verify.
type verifyOut struct {
	Store     string `json:"store"`
	Integrity struct {
		Checked  bool     `json:"checked"`
		Problems []string `json:"problems"`
	} `json:"integrity"`
	IDs       int64 `json:"ids"`
	Events    int64 `json:"events"`
	Snapshots int64 `json:"snapshots"`
	Problems  []struct {
		PersistenceID string `json:"persistence_id"`
		Problem       string `json:"problem"`
	} `json:"problems"`
	OK bool `json:"ok"`
}

// TestVerifyHealthy: a sound store reads whole, every id, event and
// snapshot counted, and verify changes nothing.
func TestVerifyHealthy(t *testing.T) {
	t.Parallel()
	forEachFixture(t, func(t *testing.T, st testStore) {
		before := contents(t, st.url)
		var out verifyOut
		decode(t, cli(t, nil, "verify", "--store", st.url, "--json"), &out)
		if !out.OK || out.IDs != 5 || out.Events == 0 || out.Snapshots == 0 || len(out.Problems) != 0 || out.Integrity.Checked != st.sqlite() {
			t.Errorf("verify of a sound store: %+v", out)
		}
		cli(t, nil, "verify", "--store", st.url).want(t, 0, []string{"problems   0"}, nil)
		equalContents(t, "before and after verify", before, contents(t, st.url))
	})
}

// TestVerifyFindsDamage: on SQLite, an event row whose tags do not decode
// is named with its id, and the other ids are still read; copy names the
// id it stopped at; garbage in an index page is found by the integrity
// check. Both exit 1.
func TestVerifyFindsDamage(t *testing.T) {
	t.Parallel()
	t.Run("row", func(t *testing.T) {
		t.Parallel()
		st := fixture(t, sqliteKind)
		rawExec(t, st.path, `UPDATE event_journal SET tags = '{not json' WHERE persistence_id = 'Account|a-2' AND sequence_nr = 2`)
		r := cli(t, nil, "verify", "--store", st.url, "--json")
		var out verifyOut
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != 1 {
			t.Fatalf("verify of a damaged row: %v; %s", err, r)
		}
		if out.OK || out.IDs != 5 || len(out.Problems) != 1 || out.Problems[0].PersistenceID != "Account|a-2" || !strings.Contains(out.Problems[0].Problem, "corrupt tags of event 2") {
			t.Errorf("verify of a damaged row: %+v", out)
		}
		tgt := "sqlite:" + st.path + ".copy"
		cli(t, nil, "copy", "--from", st.url, "--to", tgt).want(t, 1, nil, []string{`copying "Account|a-2"`, "annals verify"})
	})
	t.Run("index page", func(t *testing.T) {
		t.Parallel()
		st := fixture(t, sqliteKind)
		var root, pageSize int64
		db := rawDB(t, st.path)
		if _, err := db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRow(`SELECT rootpage FROM sqlite_master WHERE type = 'index' AND tbl_name = 'event_journal' ORDER BY name LIMIT 1`).Scan(&root); err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRow(`PRAGMA page_size`).Scan(&pageSize); err != nil {
			t.Fatal(err)
		}
		db.Close()
		f, err := os.OpenFile(st.path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte(strings.Repeat("garbage!", int(pageSize)/8)), (root-1)*pageSize); err != nil {
			t.Fatal(err)
		}
		f.Close()
		r := cli(t, nil, "verify", "--store", st.url, "--json")
		var out verifyOut
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != 1 {
			t.Fatalf("verify of a damaged index: %v; %s", err, r)
		}
		if out.OK || !out.Integrity.Checked || len(out.Integrity.Problems) == 0 {
			t.Errorf("verify of a damaged index page: %+v", out)
		}
	})
}

func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func rawExec(t *testing.T, path, stmt string) {
	t.Helper()
	db := rawDB(t, path)
	defer db.Close()
	if _, err := db.Exec(stmt); err != nil {
		t.Fatal(err)
	}
}
