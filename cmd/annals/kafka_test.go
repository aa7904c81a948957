package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/store/kafka"
	"github.com/annals-go/annals/store/kafka/kafkatest"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

// TestKafkaCommands: the commands work on a kafka:// URL (the real broker,
// topics of the test's own, PostgreSQL as the eventual store): init (dry
// run, then for real), copy from SQLite (verified), events before and
// after `annals replicate` has copied them into the eventual store, ids,
// copy back to SQLite (verified), delete-to, skip-record's refusal of a record that is not next, and the
// compliance kit (check).
func TestKafkaCommands(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Real(t)
	dsn, schema := pgtest.Schema(t)
	prefix := kafkatest.Prefix(t, brokers, "cli")
	url := "kafka://" + brokers[0] + "/?topic_prefix=" + prefix + "&eventual=" + dsn
	env := []string{"ANNALS_STORE=" + url}

	cli(t, env, "init", "--dry-run").want(t, 0, []string{"metajournal", "pointer2"}, nil)
	cli(t, env, "events", "Big|0003").want(t, 1, nil, []string{"annals init"})
	cli(t, env, "init").want(t, 0, nil, nil)

	src := filepath.Join(t.TempDir(), "src.db")
	bigSource(t, src, 30, 4)
	cli(t, env, "copy", "--from", "sqlite:"+src, "--to", url).want(t, 0, []string{"verified 30 ids"}, nil)

	// Reads of the journal append a Mark to the id's partition (as
	// docs/cli.md says): events one, ids one per id listed (below); stats
	// reads the eventual store only. Lag counts the Marks of the topic's
	// unreplicated records: all of them until the replicator runs.
	marks := func() int64 {
		var n int64
		withStore(t, url, func(s *stores.Store) {
			lags, err := s.Journal.(*kafka.Journal).Lag(t.Context(), prefix+"Big")
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range lags {
				n += l.Marks
			}
		})
		return n
	}
	before := marks()
	cli(t, env, "stats").want(t, 0, nil, nil)
	cli(t, env, "events", "Big|0003").want(t, 0, []string{`{"i":3,"seq":4}`}, nil)
	if got := marks() - before; got != 1 {
		t.Errorf("stats and events appended %d Marks, want 0 + 1", got)
	}

	// The replicator, until the last id's events are in the eventual
	// store.
	cmd := exec.CommandContext(t.Context(), annalsBin, "replicate", "--verbose")
	cmd.Env = append(cleanEnv(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(t.Context(), pgtest.Server(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	replicated := func() bool {
		var n int
		err := conn.QueryRow(t.Context(), `SELECT count(*) FROM `+schema+`.metajournal WHERE topic = $1 AND seq_nr = 4`, prefix+"Big").Scan(&n)
		return err == nil && n == 30
	}
	lines := bufio.NewScanner(stderr)
	var log []string
	for !replicated() {
		if !lines.Scan() {
			t.Fatalf("annals replicate ended before replicating the 30 ids:\n%s", strings.Join(log, "\n"))
		}
		log = append(log, lines.Text())
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	go func() {
		for lines.Scan() {
		}
	}()
	if err := cmd.Wait(); err == nil {
		t.Errorf("annals replicate after Ctrl-C: exit 0, want 130\n%s", strings.Join(log, "\n"))
	} else if ee, ok := err.(*exec.ExitError); !ok || ee.Sys().(syscall.WaitStatus).ExitStatus() != exitInterrupted {
		t.Errorf("annals replicate after Ctrl-C: %v, want exit 130\n%s", err, strings.Join(log, "\n"))
	}

	cli(t, env, "events", "Big|0003").want(t, 0, []string{`{"i":3,"seq":4}`}, nil)
	cli(t, env, "stats").want(t, 0, []string{"Big", "30"}, nil)
	before = marks()
	if ids := cli(t, env, "ids", "--type", "Big", "--limit", "0"); ids.code != 0 || strings.Count(ids.stdout, "\nBig|") != 30 {
		t.Errorf("ids: %d listed, want the 30 ids\n%v", strings.Count(ids.stdout, "\nBig|"), ids)
	}
	if got := marks() - before; got != 30 {
		t.Errorf("ids of 30 ids appended %d Marks, want 30", got)
	}
	back := "sqlite:" + filepath.Join(t.TempDir(), "back.db")
	cli(t, env, "copy", "--from", url, "--to", back).want(t, 0, []string{"verified 30 ids"}, nil)
	if tail := cli(t, env, "tail", "--id", "Big|0003", "--from-seq", "1", "--current", "--json"); len(jsonLines[map[string]any](t, tail)) != 3 {
		t.Errorf("tail --id --from-seq 1 --current: want events 2..4\n%v", tail)
	}
	cli(t, env, "delete-to", "Big|0003", "2", "--yes", "--allow-uncovered").want(t, 0, nil, nil)
	ev := cli(t, env, "events", "Big|0003", "--json")
	if n := len(jsonLines[map[string]any](t, ev)); n != 2 {
		t.Errorf("events after delete-to 2: %d, want 2\n%v", n, ev)
	}
	cli(t, env, "skip-record", prefix+"Big", "0", "0", "--yes").want(t, 2, nil, []string{"only the next record"})
	cli(t, env, "purge-expired", "--yes").want(t, 0, []string{"0 expired journals purged"}, nil)
	cli(t, env, "check").want(t, 0, []string{"check passed"}, nil)
}
