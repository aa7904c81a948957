package main

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/annals-go/annals/admin"
	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/store/kafka/kafkatest"
	"github.com/annals-go/annals/store/postgres/pgtest"
)

// The exit-code rules every command keeps, checked over commands():
//   - interrupted (its context ends while it runs: Ctrl-C, SIGTERM), it
//     says "interrupted", exits 130 and never says OK or passed;
//   - a malformed store URL, of any scheme, is a bad command line: exit
//     2, with the pointer to the command's help.

// dispatchIn runs annals in this process with args, on mux, without
// ANNALS_STORE.
func dispatchIn(ctx context.Context, mux *stores.Mux, args ...string) result {
	var stdout, stderr bytes.Buffer
	e := &env{ctx: ctx, stdout: &stdout, stderr: &stderr, stdin: newReader(""), getenv: func(string) string { return "" }, mux: mux}
	code := dispatch(e, args)
	return result{stdout.String(), stderr.String(), code}
}

// interruptingMux is the command's mux whose SQLite, PostgreSQL and Kafka
// schemes call interrupt once a store is open (or a migrator made): the
// command then goes on with its context ended, as after a Ctrl-C.
func interruptingMux(interrupt func()) *stores.Mux {
	mux := stores.New()
	wrap := func(s stores.Scheme) stores.Scheme {
		open, migrator := s.Open, s.Migrator
		s.Open = func(ctx context.Context, url string, mode stores.Mode) (*stores.Store, error) {
			st, err := open(ctx, url, mode)
			interrupt()
			return st, err
		}
		s.Migrator = func(ctx context.Context, url string) (m admin.Migrator, err error) {
			m, err = migrator(ctx, url)
			interrupt()
			return m, err
		}
		return s
	}
	mux.Register(wrap(stores.SQLite()), "sqlite")
	mux.Register(wrap(stores.Postgres()), "postgres", "postgresql")
	mux.Register(wrap(stores.Kafka(stores.Cassandra(), stores.Postgres())), "kafka")
	return mux
}

// saysOK finds a claim of success.
var saysOK = regexp.MustCompile(`\bOK\b|passed`)

// TestEveryCommandInterrupted: each command, its context ended while it
// runs (right after it opened its store), says "interrupted" and exits
// 130, never 0 or 1, and prints nothing that says OK.
func TestEveryCommandInterrupted(t *testing.T) {
	t.Parallel()
	user := fixture(t, sqliteKind)
	dir := t.TempDir()
	kafkaURL := func(t *testing.T) string {
		brokers := kafkatest.Real(t)
		dsn, _ := pgtest.Schema(t)
		u := "kafka://" + brokers[0] + "/?topic_prefix=" + kafkatest.Prefix(t, brokers, "interrupt") + "&eventual=" + dsn
		dispatchIn(t.Context(), stores.New(), "init", "--store", u).want(t, 0, []string{"created"}, nil)
		return u
	}
	onUser := func(*testing.T) string { return user.url }
	cases := map[string]struct {
		args  []string
		store func(t *testing.T) string // the --store URL; nil: none
	}{
		"demo":               {[]string{"--accounts", "5", "--ops", "1000", "--concurrency", "2"}, func(*testing.T) string { return "sqlite:" + filepath.Join(dir, "demo.db") }},
		"init":               {nil, func(*testing.T) string { return "sqlite:" + filepath.Join(dir, "new.db") }},
		"migrate":            {nil, onUser},
		"ids":                {nil, onUser},
		"events":             {[]string{"Account|a-1"}, onUser},
		"snapshots":          {[]string{"Account|a-1"}, onUser},
		"state":              {[]string{"Profile|p-1"}, onUser},
		"stats":              {nil, onUser},
		"tail":               {[]string{"--type", "Account"}, onUser},
		"delete-to":          {[]string{"Account|a-1", "3", "--yes"}, onUser},
		"delete-snapshots":   {[]string{"Account|a-1", "--to", "3", "--yes"}, onUser},
		"copy":               {[]string{"--from", user.url, "--to", "sqlite:" + filepath.Join(dir, "copy.db")}, nil},
		"projections":        {[]string{"status"}, onUser},
		"bench":              {benchSmall, onUser},
		"check":              {[]string{"--short"}, onUser},
		"crash-test":         {[]string{"--cycles", "2", "--entities", "5"}, onUser},
		"verify":             {nil, onUser},
		"replicate":          {nil, kafkaURL},
		"skip-record":        {[]string{"journal-Account", "0", "0", "--yes"}, kafkaURL},
		"purge-expired":      {[]string{"--yes"}, kafkaURL},
		"rewrite-serializer": {[]string{"--yes"}, onUser},
		"cluster":            {[]string{"status"}, onUser},
		"console":            {[]string{"--listen", "127.0.0.1:0"}, onUser},
	}
	for _, c := range commands() {
		name := c.name
		tc, ok := cases[name]
		if !ok {
			t.Errorf("command %q has no case in TestEveryCommandInterrupted: give it the arguments of a run that opens a store", name)
			continue
		}
		t.Run(name, func(t *testing.T) {
			args := append([]string{name}, tc.args...)
			if tc.store != nil {
				args = append(args, "--store", tc.store(t))
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			r := dispatchIn(ctx, interruptingMux(cancel), args...)
			if ctx.Err() == nil {
				t.Fatalf("annals %s opened no store: %s", name, r)
			}
			if r.code != exitInterrupted || !strings.Contains(r.stderr, "annals "+name+": interrupted") || saysOK.MatchString(r.stdout+r.stderr) {
				t.Errorf("annals %s interrupted: want exit 130, \"interrupted\", no OK; got %s", strings.Join(args, " "), r)
			}
		})
	}
}

// TestEveryCommandRefusesAMalformedURL: a malformed store URL of every
// scheme is a bad command line for every command that takes a store.
func TestEveryCommandRefusesAMalformedURL(t *testing.T) {
	t.Parallel()
	// None of them needs a server to be found malformed.
	urls := []string{
		"sqlite:",
		"sqlite:file:x.db",
		"memory:x",
		"postgres://%zz",
		"postgres://127.0.0.1:1/db?ordering=sideways",
		"postgres://127.0.0.1:1/db?schema=not-an-identifier",
		"cassandra://127.0.0.1:1/ks?timeout=soon",
		"cassandra://127.0.0.1:1/9-not-a-keyspace",
		"kafka://127.0.0.1:1",
		"kafka://127.0.0.1:1/?eventual=sqlite:x.db",
		"kafka://127.0.0.1:1/?colour=red&eventual=postgres://127.0.0.1:1/db",
		"kafka://127.0.0.1:1/?eventual=postgres://127.0.0.1:1/db?ordering=sideways",
		"nosuch:x",
	}
	args := map[string][]string{
		"demo":               nil,
		"init":               nil,
		"migrate":            nil,
		"ids":                nil,
		"events":             {"Account|a-1"},
		"snapshots":          {"Account|a-1"},
		"state":              {"Profile|p-1"},
		"stats":              nil,
		"tail":               {"--type", "Account"},
		"delete-to":          {"Account|a-1", "3", "--yes"},
		"delete-snapshots":   {"Account|a-1", "--yes"},
		"copy":               nil, // --from and --to, below
		"projections":        {"status"},
		"bench":              benchSmall,
		"check":              {"--short"},
		"crash-test":         {"--cycles", "1"},
		"verify":             nil,
		"replicate":          nil,
		"skip-record":        {"journal-Account", "0", "0", "--yes"},
		"purge-expired":      {"--yes"},
		"rewrite-serializer": {"--yes"},
		"cluster":            {"status"},
		"console":            {"--listen", "127.0.0.1:0"},
	}
	for _, c := range commands() {
		name := c.name
		rest, ok := args[name]
		if !ok {
			t.Errorf("command %q has no case in TestEveryCommandRefusesAMalformedURL: give it the arguments of a run that opens --store", name)
			continue
		}
		t.Run(name, func(t *testing.T) {
			for _, url := range urls {
				var lines [][]string
				if name == "copy" {
					lines = [][]string{
						{"copy", "--from", url, "--to", "memory:"},
						{"copy", "--from", "memory:", "--to", url},
					}
				} else {
					lines = [][]string{append(append([]string{name}, rest...), "--store", url)}
				}
				for _, line := range lines {
					r := dispatchIn(t.Context(), stores.New(), line...)
					if r.code != exitUsage || !strings.Contains(r.stderr, "Run 'annals help "+name+"' for usage.") {
						t.Errorf("annals %s: want exit 2 and the pointer to the help; got %s", strings.Join(line, " "), r)
					}
				}
			}
		})
	}
}
