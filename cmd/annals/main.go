// Command annals is Annals' command-line tool: it creates and migrates
// stores, reads their journals, snapshots and statistics, deletes events
// and snapshots, copies stores, manages projections, follows live queries,
// benchmarks a store beside its raw driver and runs the compliance kit
// against a live store. Its demo runs a bank of event-sourced accounts (on
// the embedded SQLite store unless told otherwise), restarts it, and
// verifies every balance against an independent model:
//
//	go run ./cmd/annals demo                       # 1,000 accounts, 100,000 operations, ./annals-demo.db
//	go run ./cmd/annals demo --store memory:       # the in-memory store
//	go run ./cmd/annals help                       # every command
//	go run ./cmd/annals stats --store sqlite:./annals-demo.db
//
// Every command names its store with --store URL or the ANNALS_STORE
// environment variable: sqlite:PATH, postgres://…, cassandra://…,
// kafka://… or memory:. The demo alone ignores ANNALS_STORE: it runs on
// its own file, ./annals-demo.db, unless --store names another store.
// Tables are printed for people; --json prints a stable shape for scripts
// (each command's help describes it). Exit codes: 0 ok; 1 failure; 2 bad
// command line, a malformed store URL included; 130 interrupted (Ctrl-C
// or SIGTERM: the command says "interrupted", never OK).
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/annals-go/annals/cmd/annals/internal/stores"
	"github.com/annals-go/annals/journal"
)

// Exit codes.
const (
	exitOK          = 0
	exitError       = 1   // the command ran and failed
	exitUsage       = 2   // unknown command, bad flags or arguments, a malformed store URL
	exitInterrupted = 130 // interrupted (Ctrl-C, SIGTERM): 128 + SIGINT, as shells report it
)

func main() {
	// The first interrupt ends the command's context: the demo stops
	// issuing operations, then recovers and verifies; tail ends; copy stops
	// after its current write, resumable. Whatever the command, it then
	// says "interrupted" and exits 130. A second interrupt kills it.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() { <-ctx.Done(); stop() }()
	e := &env{
		ctx: ctx, stdout: os.Stdout, stderr: os.Stderr,
		stdin: bufio.NewReader(os.Stdin), interactive: isTerminal(os.Stdin),
		getenv: os.Getenv, mux: stores.New(),
	}
	os.Exit(dispatch(e, os.Args[1:]))
}

// run dispatches args (without the program name) to a command and returns
// the process's exit code; standard input is not read.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return dispatch(&env{ctx: ctx, stdout: stdout, stderr: stderr, stdin: bufio.NewReader(strings.NewReader("")), getenv: os.Getenv, mux: stores.New()}, args)
}

func usage(w io.Writer) {
	fmt.Fprint(w, "Usage: annals <command> [flags] [arguments]\n\nCommands:\n")
	for _, c := range commands() {
		if c.summary != "" {
			fmt.Fprintf(w, "  %-17s %s\n", c.name, c.summary)
		}
	}
	fmt.Fprint(w, `  help [COMMAND]    print this help, or a command's flags and examples

Every command takes --store URL (or the ANNALS_STORE environment
variable): sqlite:PATH, postgres://USER@HOST/DB,
cassandra://HOST:PORT/KEYSPACE, kafka://HOST:PORT/?eventual=URL, or
memory: (a new, empty store in this process). demo ignores ANNALS_STORE:
it runs on its own file, sqlite:annals-demo.db, unless --store names
another store. --json prints a stable shape for scripts instead of a
table. Exit codes: 0 ok; 1 failure; 2 bad command line (a malformed store
URL too); 130 interrupted (Ctrl-C): the command says "interrupted".

Examples:
  annals init --store sqlite:./annals.db
  export ANNALS_STORE=sqlite:./annals.db
  annals stats
  annals ids --type Account --limit 20
  annals events 'Account|a-42' --from 10
  annals tail --type Account --slices 0-511
  annals copy --from sqlite:./annals.db --to postgres://annals@localhost/annals

Run 'annals help COMMAND' (or 'annals COMMAND -h') for a command's flags.
`)
}

// dispatch runs the command args name.
func dispatch(e *env, args []string) int {
	if len(args) == 0 {
		usage(e.stderr)
		return exitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(rest) == 0 {
			usage(e.stdout)
			return exitOK
		}
		if c := findCommand(rest[0]); c != nil {
			c.printHelp(e.stdout)
			return exitOK
		}
		fmt.Fprintf(e.stderr, "annals help: unknown command %q\n\n", rest[0])
		usage(e.stderr)
		return exitUsage
	}
	c := findCommand(name)
	if c == nil {
		fmt.Fprintf(e.stderr, "annals: unknown command %q\n\n", name)
		usage(e.stderr)
		return exitUsage
	}
	return c.run(e, rest)
}

// errUsage marks an error in the command line: exit code 2. The flag
// package has already printed the error and the usage.
var errUsage = errors.New("usage")

// usageError is an error in the command line that the command reports: the
// message and a pointer to the help, exit code 2.
type usageError struct{ msg string }

func (u *usageError) Error() string { return u.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// errInterrupted is what a command returns when an interrupt stopped it,
// after saying what it did until then (wrapped with that text, or alone).
var errInterrupted = errors.New("interrupted")

// exitCode maps a command's error to the exit code, printing it.
//
// An interrupt wins over everything else: when the command's context
// ended while it ran (Ctrl-C, SIGTERM) or it returned errInterrupted, it
// prints "interrupted" (and the error, unless it only reports the
// interrupt) and returns 130, whatever the command did meanwhile.
// Errors in what the command line said are exit code 2: usage errors, a
// store URL of no known scheme or a malformed one, an argument a store
// refuses as invalid (an empty or malformed persistence id, a negative
// number).
func exitCode(ctx context.Context, stderr io.Writer, prog string, err error) int {
	var ue *usageError
	switch {
	case ctx.Err() != nil || errors.Is(err, errInterrupted):
		switch {
		case errors.Is(err, errInterrupted):
			fmt.Fprintf(stderr, "%s: %v\n", prog, err)
		case err == nil, errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			fmt.Fprintf(stderr, "%s: interrupted\n", prog)
		default:
			fmt.Fprintf(stderr, "%s: interrupted: %v\n", prog, err)
		}
		return exitInterrupted
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errUsage):
		return exitUsage
	case errors.As(err, &ue), errors.Is(err, stores.ErrUnknownScheme), errors.Is(err, stores.ErrBadURL), errors.Is(err, journal.ErrInvalidArgument):
		fmt.Fprintf(stderr, "%s: %v\nRun 'annals help %s' for usage.\n", prog, err, strings.TrimPrefix(prog, "annals "))
		return exitUsage
	default:
		fmt.Fprintf(stderr, "%s: %v\n", prog, err)
		return exitError
	}
}
