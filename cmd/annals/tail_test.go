package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/annals-go/annals"
	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/durable"
	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/serialization"
)

// eventOut is the JSON shape of events and tail, loosely.
type eventOut struct {
	PersistenceID string          `json:"persistence_id"`
	SequenceNr    int64           `json:"sequence_nr"`
	Offset        json.RawMessage `json:"offset"`
	Payload       json.RawMessage `json:"payload"`
	Tags          []string        `json:"tags"`
}

// loose decodes the events, one per line, of events or tail --json.
func loose(t *testing.T, r result) []eventOut {
	t.Helper()
	return decodeLines[eventOut](t, r, false)
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
	forEachFixture(t, func(t *testing.T, st testStore) {
		env := st.env()
		offsetKind := query.KindTimestamp
		if st.sqlite() {
			offsetKind = query.KindSequence
		}

		// By type: the offsets are of the store's kind.
		evs := loose(t, cli(t, env, "tail", "--type", "Account", "--current", "--json"))
		got := ids(evs)
		if len(got) != 8 || !slices.Contains(got, "Account|a-1#5") || !slices.Contains(got, "Account|a-2#3") {
			t.Errorf("Account events: %v", got)
		}
		for _, e := range evs {
			var o query.Offset
			if err := json.Unmarshal(e.Offset, &o); err != nil || o.Kind != offsetKind {
				t.Errorf("offset %s: %v, want of kind %v", e.Offset, err, offsetKind)
			}
		}
		// Resume after the third: the offset printed is the offset taken.
		rest := loose(t, cli(t, env, "tail", "--type", "Account", "--current", "--json", "--from-offset", string(evs[2].Offset)))
		if !slices.Equal(ids(rest), got[3:]) {
			t.Errorf("after %s: %v, want %v", evs[2].Offset, ids(rest), got[3:])
		}
		lim := loose(t, cli(t, env, "tail", "--type", "Account", "--current", "--json", "--limit", "4"))
		if !slices.Equal(ids(lim), got[:4]) || (st.sqlite() && lim[3].PersistenceID != "Account|a-1") {
			t.Errorf("by type, limit 4: %v", ids(lim))
		}

		// By tag: odd events, Account|a-1 1,3,5; Order|o-1 1; Cart|c-2 3,5
		// (1 deleted); on SQLite in the order written.
		evs = loose(t, cli(t, env, "tail", "--tag", "odd", "--current", "--json"))
		odd, want := ids(evs), []string{"Account|a-1#1", "Account|a-1#3", "Account|a-1#5", "Order|o-1#1", "Cart|c-2#3", "Cart|c-2#5"}
		if st.sqlite() && !slices.Equal(odd, want) {
			t.Errorf("tagged odd: %v, want %v", odd, want)
		}
		slices.Sort(odd)
		if slices.Sort(want); !slices.Equal(odd, want) {
			t.Errorf("tagged odd: %v", odd)
		}
		rest = loose(t, cli(t, env, "tail", "--tag", "odd", "--current", "--json", "--from-offset", string(evs[2].Offset)))
		if !slices.Equal(ids(rest), ids(evs[3:])) {
			t.Errorf("after %s: %v, want %v", evs[2].Offset, ids(rest), ids(evs[3:]))
		}
		first := evs[slices.IndexFunc(evs, func(e eventOut) bool { return e.PersistenceID == "Account|a-1" && e.SequenceNr == 1 })]
		cli(t, env, "tail", "--tag", "odd", "--current").want(t, 0,
			[]string{string(first.Offset) + `  Account|a-1  1  2026-01-02T03:04:06.123456Z  json  Deposited  bank,odd  {"amount":1}`}, []string{"up to now"})
		if st.sqlite() && string(first.Offset) != `{"seq":1}` {
			t.Errorf("offset of the first event: %s", first.Offset)
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
		for _, args := range [][]string{{"tail"}, {"tail", "--tag", "a", "--type", "b"}, {"tail", "--type", "A", "--slices", "5-1024"}, {"tail", "--tag", "a", "--from-offset", "x"}} {
			cli(t, env, args...).want(t, 2, nil, nil)
		}
	})
}

// writeEvents appends events to pid in the store at url, tagged tag.
func writeEvents(t *testing.T, url, pid string, from, to int64, tag string) {
	t.Helper()
	withStore(t, url, func(s *stores.Store) {
		w := journal.AtomicWrite{PersistenceID: pid}
		for seq := from; seq <= to; seq++ {
			w.Events = append(w.Events, journal.Repr{PersistenceID: pid, SequenceNr: seq, Payload: fmt.Appendf(nil, `{"n":%d}`, seq), SerializerID: serialization.JSONID, Manifest: "N", Tags: []string{tag}})
		}
		if res, err := s.Journal.Write(context.Background(), []journal.AtomicWrite{w}); err != nil || res != nil {
			t.Fatal(res, err)
		}
	})
}

// liveTail starts a tail that follows events (not --current) and waits for
// its banner; next returns the next event it prints.
func liveTail(t *testing.T, env []string, banner string, args ...string) (next func() eventOut, wait func() error) {
	t.Helper()
	return startTail[eventOut](t, env, banner, args...)
}

// startTail starts tail --json with args, waits for its banner, and
// decodes the lines it prints as T.
func startTail[T any](t *testing.T, env []string, banner string, args ...string) (next func() T, wait func() error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), annalsBin, append([]string{"tail", "--json"}, args...)...)
	cmd.Env = append(cleanEnv(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	errLines := bufio.NewReader(stderr)
	if line, err := errLines.ReadString('\n'); err != nil || !strings.Contains(line, banner) || !strings.Contains(line, "Ctrl-C to stop") {
		t.Fatalf("banner %q, %v; want %q", line, err, banner)
	}
	go func() { _, _ = io.Copy(io.Discard, errLines) }()
	lines := bufio.NewScanner(stdout)
	next = func() T {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("tail %q ended early: %v", args, lines.Err())
		}
		var e T
		if err := json.Unmarshal(lines.Bytes(), &e); err != nil {
			t.Fatalf("line %q: %v", lines.Text(), err)
		}
		return e
	}
	wait = func() error {
		if lines.Scan() {
			t.Errorf("tail %q: more than --limit lines: %q", args, lines.Text())
		}
		return cmd.Wait()
	}
	return next, wait
}

// Events written by another process (this one) after live tails started,
// by type and by tag from the fixture's last odd offset: the tails see only
// the new events, and end after --limit.
func TestTailLive(t *testing.T) {
	t.Parallel()
	forEachFixture(t, func(t *testing.T, st testStore) {
		env := st.env()
		odd := loose(t, cli(t, env, "tail", "--tag", "odd", "--current", "--json"))
		last := string(odd[len(odd)-1].Offset)
		if st.sqlite() && last != `{"seq":19}` {
			t.Errorf("the fixture's last odd offset: %s", last)
		}
		byType, byTypeWait := liveTail(t, env, "following events of Live in slices 0-1023", "--type", "Live", "--limit", "3")
		byTag, byTagWait := liveTail(t, env, `following events tagged "live" after `+last, "--tag", "live", "--from-offset", last, "--limit", "3")
		writeEvents(t, st.url, "Live|x", 1, 2, "live")
		for _, next := range []func() eventOut{byType, byTag} {
			if got := ids([]eventOut{next(), next()}); !slices.Equal(got, []string{"Live|x#1", "Live|x#2"}) {
				t.Errorf("first events: %v", got)
			}
		}
		writeEvents(t, st.url, "Other|y", 1, 1, "other")
		writeEvents(t, st.url, "Live|x", 3, 4, "live")
		for _, next := range []func() eventOut{byType, byTag} {
			if e := next(); e.PersistenceID != "Live|x" || e.SequenceNr != 3 || !jsonEqual(e.Payload, `{"n":3}`) {
				t.Errorf("third event %+v", e)
			}
		}
		for _, wait := range []func() error{byTypeWait, byTagWait} {
			if err := wait(); err != nil {
				t.Errorf("tail --limit 3: %v, want exit 0", err)
			}
		}
	})
}

func TestTailInterrupted(t *testing.T) {
	t.Parallel()
	forEachFixture(t, func(t *testing.T, st testStore) {
		cmd := exec.CommandContext(t.Context(), annalsBin, "tail", "--type", "Account")
		cmd.Env = append(cleanEnv(), st.env()...)
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
		if err := cmd.Wait(); cmd.ProcessState.ExitCode() != exitInterrupted {
			t.Errorf("tail interrupted: %v, want exit 130", err)
		}
	})
}

// writeStates upserts revisions from..to of pid's durable state in the
// store at url, tagged tag.
func writeStates(t *testing.T, url, pid string, from, to int64, tag string) {
	t.Helper()
	withStore(t, url, func(s *stores.Store) {
		for rev := from; rev <= to; rev++ {
			o := durable.Object{PersistenceID: pid, Revision: rev, Payload: fmt.Appendf(nil, `{"rev":%d}`, rev), SerializerID: serialization.JSONID, Manifest: "S", Tag: tag}
			if err := s.Durable.Upsert(context.Background(), o); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// changeOut is the JSON shape of tail --durable, loosely.
type changeOut struct {
	PersistenceID string          `json:"persistence_id"`
	Revision      int64           `json:"revision"`
	Offset        json.RawMessage `json:"offset"`
	Payload       json.RawMessage `json:"payload"`
	Tag           string          `json:"tag"`
	EntityType    string          `json:"entity_type"`
	Slice         int             `json:"slice"`
}

// TestTailDurable: tail --durable shows durable-state changes by type and
// by tag, each object at its latest revision, resumes after an offset, and
// follows new changes live; --durable with --id is a usage error.
func TestTailDurable(t *testing.T) {
	t.Parallel()
	forEachFixture(t, func(t *testing.T, st testStore) {
		env := st.env()
		writeStates(t, st.url, "Profile|p-1", 1, 3, "people")
		writeStates(t, st.url, "Profile|p-2", 1, 1, "people")
		writeStates(t, st.url, "Other|o-1", 1, 1, "people")
		revs := func(cs []changeOut) []string {
			var out []string
			for _, c := range cs {
				out = append(out, fmt.Sprintf("%s@%d", c.PersistenceID, c.Revision))
			}
			return out
		}
		byType := decodeLines[changeOut](t, cli(t, env, "tail", "--durable", "--type", "Profile", "--current", "--json"), false)
		if got, want := revs(byType), []string{"Profile|p-1@3", "Profile|p-2@1"}; !slices.Equal(got, want) {
			t.Fatalf("--durable --type Profile: %v, want %v", got, want)
		}
		if c := byType[0]; !jsonEqual(c.Payload, `{"rev":3}`) || c.Tag != "people" || c.EntityType != "Profile" || c.Slice != annals.Slice("Profile|p-1") || len(c.Offset) == 0 {
			t.Errorf("--durable --json line %+v", c)
		}
		byTag := decodeLines[changeOut](t, cli(t, env, "tail", "--durable", "--tag", "people", "--current", "--json", "--from-offset", string(byType[0].Offset)), false)
		if got, want := revs(byTag), []string{"Profile|p-2@1", "Other|o-1@1"}; !slices.Equal(got, want) {
			t.Errorf("--durable --tag people after p-1's offset: %v, want %v", got, want)
		}
		cli(t, env, "tail", "--durable", "--type", "Profile", "--current").want(t, 0, []string{"Profile|p-1  3", `{"rev":3}`}, nil)
		cli(t, env, "tail", "--durable", "--id", "Profile|p-1").want(t, 2, nil, []string{"annals state ID"})

		// Live: a change stored after the tail started.
		next, wait := startTail[changeOut](t, env, "following durable-state changes of Profile", "--durable", "--type", "Profile", "--from-offset", string(byType[1].Offset), "--limit", "1")
		writeStates(t, st.url, "Profile|p-2", 2, 2, "people")
		if c := next(); c.PersistenceID != "Profile|p-2" || c.Revision != 2 {
			t.Errorf("live tail --durable printed %+v, want Profile|p-2 at revision 2", c)
		}
		if err := wait(); err != nil {
			t.Errorf("tail --durable --limit 1: %v, want exit 0", err)
		}
	})
}
