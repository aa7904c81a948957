package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The commands are tested end to end: through the binary, built once by
// TestMain (with the race detector when the tests have it), on the stores
// of stores_test.go.

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

// cleanEnv is the environment of the binary: this process's, without
// ANNALS_ variables, and with the race detector's sleep at exit cut short.
func cleanEnv() []string {
	var out []string
	gorace := ""
	for _, kv := range os.Environ() {
		switch {
		case strings.HasPrefix(kv, "ANNALS_"):
		case strings.HasPrefix(kv, "GORACE="):
			gorace = strings.TrimPrefix(kv, "GORACE=")
		default:
			out = append(out, kv)
		}
	}
	return append(out, "GORACE="+strings.TrimSpace(gorace+" "+raceExitSleep))
}

// raceExitSleep shortens the second a binary built with -race sleeps when
// it exits, so that goroutines still running can have their races
// reported (GORACE's atexit_sleep_ms, 1000 by default): the tests run the
// binary hundreds of times, and the sleep was most of their time. Races
// found while the command runs are reported as before, and a race makes
// the binary exit with code 66, which no test expects. A GORACE setting
// of the environment comes first and keeps its other options.
const raceExitSleep = "atexit_sleep_ms=50"

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

// jsonLines decodes one object per line of r's stdout, every field known
// to T.
func jsonLines[T any](t *testing.T, r result) []T {
	t.Helper()
	return decodeLines[T](t, r, true)
}

func decodeLines[T any](t *testing.T, r result, strict bool) []T {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("command failed: %s", r)
	}
	var out []T
	for line := range strings.Lines(r.stdout) {
		var v T
		dec := json.NewDecoder(strings.NewReader(line))
		if strict {
			dec.DisallowUnknownFields()
		}
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

func newReader(s string) *bufio.Reader { return bufio.NewReader(strings.NewReader(s)) }

func asUsage(err error, target **usageError) bool { return errors.As(err, target) }

// jsonEqual reports whether got is the JSON want, whatever the spacing.
func jsonEqual(got json.RawMessage, want string) bool {
	var a, b bytes.Buffer
	return json.Compact(&a, got) == nil && json.Compact(&b, []byte(want)) == nil && a.String() == b.String()
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
