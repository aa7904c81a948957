package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/annals-go/annals/journal"
	"github.com/annals-go/annals/offsets"
	"github.com/annals-go/annals/query"
	"github.com/annals-go/annals/serialization"
	"github.com/annals-go/annals/snapshot"
	"github.com/annals-go/annals/store/sqlite"

	_ "github.com/mattn/go-sqlite3" // olderSchema writes with the raw driver
)

// The commands are tested end to end: through the binary, built once by
// TestMain (with the race detector when the tests have it), on SQLite
// files made by the tests.

var annalsBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "annals-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	annalsBin = filepath.Join(dir, "annals")
	args := []string{"build", "-o", annalsBin}
	if raceEnabled {
		args = append(args, "-race")
	}
	if out, err := exec.Command("go", append(args, ".")...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// result is what one run of the binary did.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// cli runs the binary with args, stdin empty and not a terminal, and
// ANNALS_STORE unset unless env sets it.
func cli(t *testing.T, env []string, args ...string) result {
	t.Helper()
	return cliIn(t, env, nil, args...)
}

func cliIn(t *testing.T, env []string, stdin io.Reader, args ...string) result {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), annalsBin, args...)
	cmd.Env = append(cleanEnv(), env...)
	cmd.Stdin = stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("annals %q: %v", args, err)
	}
	return result{stdout.String(), stderr.String(), code}
}

func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ANNALS_") {
			out = append(out, kv)
		}
	}
	return out
}

// want fails the test unless r exited with code and its stdout and stderr
// contain the given substrings.
func (r result) want(t *testing.T, code int, stdout, stderr []string) {
	t.Helper()
	ok := r.code == code
	for _, s := range stdout {
		ok = ok && strings.Contains(r.stdout, s)
	}
	for _, s := range stderr {
		ok = ok && strings.Contains(r.stderr, s)
	}
	if !ok {
		t.Errorf("want exit %d, stdout with %q, stderr with %q; got %s", code, stdout, stderr, r)
	}
}

// decode unmarshals r's stdout into v.
func decode(t *testing.T, r result, v any) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("command failed: %s", r)
	}
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode %T: %v\n%s", v, err, r.stdout)
	}
}

// jsonLines decodes one object per line of r's stdout.
func jsonLines[T any](t *testing.T, r result) []T {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("command failed: %s", r)
	}
	var out []T
	for line := range strings.Lines(r.stdout) {
		var v T
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		out = append(out, v)
	}
	return out
}

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// The fixture's timestamps: event n of an id is written at base + n s.
var base = time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)

// fixture writes a database at dir/annals.db and returns its path:
//   - Account|a-1: events 1..5, JSON {"amount":n}, manifest Deposited,
//     tagged "bank" (odd numbers also "odd"); snapshots at 3 and 5.
//   - Account|a-2: events 1..3, raw bytes (serializer 4), one binary.
//   - Order|o-1: events 1..2, JSON.
//   - Cart|c-1: events 1..4, all deleted (highest 4, no events).
//   - Cart|c-2: events 1..5, deleted up to 2.
//   - projections: balances/0-511 at the offset of the 6th event stored;
//     balances/512-1023 paused, no offset.
func fixture(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "annals.db")
	ctx := context.Background()
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	j := s.Journal()
	write := func(pid string, from, to int64, mk func(seq int64) journal.Repr) {
		w := journal.AtomicWrite{PersistenceID: pid}
		for seq := from; seq <= to; seq++ {
			e := mk(seq)
			e.PersistenceID, e.SequenceNr, e.WriterID = pid, seq, "writer-1"
			e.Timestamp = base.Add(time.Duration(seq) * time.Second)
			w.Events = append(w.Events, e)
		}
		if res, err := j.Write(ctx, []journal.AtomicWrite{w}); err != nil || res != nil {
			t.Fatal(res, err)
		}
	}
	jsonEvent := func(seq int64) journal.Repr {
		e := journal.Repr{Payload: fmt.Appendf(nil, `{"amount": %d}`, seq), SerializerID: serialization.JSONID, Manifest: "Deposited", Tags: []string{"bank"}}
		if seq%2 == 1 {
			e.Tags = append(e.Tags, "odd")
		}
		return e
	}
	write("Account|a-1", 1, 5, jsonEvent)
	write("Account|a-2", 1, 3, func(seq int64) journal.Repr {
		if seq == 2 {
			return journal.Repr{Payload: []byte{0, 1, 2, 0xff}, SerializerID: serialization.BytesID, Metadata: []byte("meta")}
		}
		return journal.Repr{Payload: fmt.Appendf(nil, "text %d", seq), SerializerID: serialization.BytesID}
	})
	write("Order|o-1", 1, 2, jsonEvent)
	write("Cart|c-1", 1, 4, jsonEvent)
	write("Cart|c-2", 1, 5, jsonEvent)
	for _, d := range []struct {
		pid string
		to  int64
	}{{"Cart|c-1", 4}, {"Cart|c-2", 2}} {
		if err := j.DeleteTo(ctx, d.pid, d.to); err != nil {
			t.Fatal(err)
		}
	}
	for _, seq := range []int64{3, 5} {
		snap := snapshot.Snapshot{Metadata: snapshot.Metadata{PersistenceID: "Account|a-1", SequenceNr: seq, Timestamp: base.Add(time.Duration(seq) * time.Second)},
			Payload: fmt.Appendf(nil, `{"balance": %d}`, seq*10), SerializerID: serialization.JSONID, Manifest: "Account"}
		if err := s.Snapshots().Save(ctx, snap); err != nil {
			t.Fatal(err)
		}
	}
	p := s.Projections()
	if err := p.SaveOffset(ctx, offsets.ID{Name: "balances", Key: "0-511"}, query.SequenceOffset(6)); err != nil {
		t.Fatal(err)
	}
	if err := p.SetPaused(ctx, offsets.ID{Name: "balances", Key: "512-1023"}, true); err != nil {
		t.Fatal(err)
	}
	return path
}

// olderSchema writes an Annals database of schema version 2 at path.
func olderSchema(t *testing.T, path string) {
	t.Helper()
	m, err := sqlite.NewMigrator(path)
	if err != nil {
		t.Fatal(err)
	}
	steps, err := m.PendingMigrations(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{steps[0].SQL, steps[1].SQL, `UPDATE annals_schema SET version = 2`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
}

func newReader(s string) *bufio.Reader { return bufio.NewReader(strings.NewReader(s)) }

func asUsage(err error, target **usageError) bool { return errors.As(err, target) }

// jsonEqual reports whether got is the JSON want, whatever the spacing.
func jsonEqual(got json.RawMessage, want string) bool {
	var a, b bytes.Buffer
	return json.Compact(&a, got) == nil && json.Compact(&b, []byte(want)) == nil && a.String() == b.String()
}
