package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/store/sqlite"
)

// eventOut is the JSON shape of events and tail, loosely.
type eventOut struct {
	PersistenceID string          `json:"persistence_id"`
	SequenceNr    int64           `json:"sequence_nr"`
	Offset        json.RawMessage `json:"offset"`
	Payload       json.RawMessage `json:"payload"`
	Tags          []string        `json:"tags"`
}

func loose(t *testing.T, r result) []eventOut {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("command failed: %s", r)
	}
	var out []eventOut
	for line := range strings.Lines(r.stdout) {
		var e eventOut
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		out = append(out, e)
	}
	return out
}

func ids(evs []eventOut) []string {
	var out []string
	for _, e := range evs {
		out = append(out, fmt.Sprintf("%s#%d", e.PersistenceID, e.SequenceNr))
	}
	return out
}

func TestTailCurrent(t *testing.T) {
	t.Parallel()
	env := []string{"ANNALS_STORE=sqlite:" + fixture(t, t.TempDir())}
	evs := loose(t, cli(t, env, "tail", "--tag", "odd", "--current", "--json"))
	// Odd events: Account|a-1 1,3,5; Order|o-1 1; Cart|c-2 3,5 (1 deleted).
	if got := ids(evs); !slices.Equal(got, []string{"Account|a-1#1", "Account|a-1#3", "Account|a-1#5", "Order|o-1#1", "Cart|c-2#3", "Cart|c-2#5"}) {
		t.Errorf("tagged odd: %v", got)
	}
	// Resume after the third: the offset printed is the offset taken.
	evs2 := loose(t, cli(t, env, "tail", "--tag", "odd", "--current", "--json", "--from-offset", string(evs[2].Offset)))
	if got := ids(evs2); !slices.Equal(got, ids(evs[3:])) {
		t.Errorf("after %s: %v", evs[2].Offset, got)
	}
	evs = loose(t, cli(t, env, "tail", "--type", "Account", "--current", "--json", "--limit", "4"))
	if len(evs) != 4 || evs[3].PersistenceID != "Account|a-1" {
		t.Errorf("by type, limit 4: %v", ids(evs))
	}
	// A slice range that holds only one of the two accounts.
	s1, s2 := annals.Slice("Account|a-1"), annals.Slice("Account|a-2")
	if s1 != s2 {
		r := fmt.Sprintf("%d-%d", s2, s2)
		evs = loose(t, cli(t, env, "tail", "--type", "Account", "--slices", r, "--current", "--json"))
		if got := ids(evs); !slices.Equal(got, []string{"Account|a-2#1", "Account|a-2#2", "Account|a-2#3"}) {
			t.Errorf("slices %s: %v", r, got)
		}
	}
	r := cli(t, env, "tail", "--tag", "odd", "--current")
	r.want(t, 0, []string{`{"seq":1}  Account|a-1  1  2026-01-02T03:04:06.123456Z  json  Deposited  bank,odd  {"amount":1}`}, []string{"up to now"})
	for _, args := range [][]string{{"tail"}, {"tail", "--tag", "a", "--type", "b"}, {"tail", "--type", "A", "--slices", "5-1024"}, {"tail", "--tag", "a", "--from-offset", "x"}} {
		cli(t, env, args...).want(t, 2, nil, nil)
	}
}

// writeEvents appends events to pid in the database at path, tagged tag.
func writeEvents(t *testing.T, path, pid string, from, to int64, tag string) {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := journal.AtomicWrite{PersistenceID: pid}
	for seq := from; seq <= to; seq++ {
		w.Events = append(w.Events, journal.Repr{PersistenceID: pid, SequenceNr: seq, Payload: fmt.Appendf(nil, `{"n":%d}`, seq), SerializerID: serialization.JSONID, Manifest: "N", Tags: []string{tag}})
	}
	if res, err := s.Journal().Write(context.Background(), []journal.AtomicWrite{w}); err != nil || res != nil {
		t.Fatal(res, err)
	}
}

func TestTailLive(t *testing.T) {
	t.Parallel()
	path := fixture(t, t.TempDir())
	env := []string{"ANNALS_STORE=sqlite:" + path}
	// From the fixture's last offset, a live tail sees only new events,
	// written by another process (this one), and ends after --limit.
	cmd := exec.CommandContext(t.Context(), annalsBin, "tail", "--tag", "live", "--from-offset", `{"seq":19}`, "--limit", "3", "--json")
	cmd.Env = append(cleanEnv(), env...)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	writeEvents(t, path, "Live|x", 1, 2, "live")
	writeEvents(t, path, "Live|y", 1, 1, "other")
	writeEvents(t, path, "Live|x", 3, 4, "live")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("tail: %v\n%s", err, &stdout)
	}
	evs := loose(t, result{stdout: stdout.String()})
	if got := ids(evs); !slices.Equal(got, []string{"Live|x#1", "Live|x#2", "Live|x#3"}) {
		t.Errorf("live tail: %v", got)
	}
}

func TestTailInterrupted(t *testing.T) {
	t.Parallel()
	env := []string{"ANNALS_STORE=sqlite:" + fixture(t, t.TempDir())}
	cmd := exec.CommandContext(t.Context(), annalsBin, "tail", "--type", "Account")
	cmd.Env = append(cleanEnv(), env...)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The banner comes once the signal handler is in place.
	line, err := bufio.NewReader(stderr).ReadString('\n')
	if err != nil || !strings.Contains(line, "Ctrl-C to stop") {
		t.Fatalf("banner %q, %v", line, err)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("tail interrupted: %v, want exit 0", err)
	}
}
