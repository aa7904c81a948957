// Command annals is Annals' command-line tool. Its demo runs a bank of
// event-sourced accounts on the embedded SQLite store, restarts it, and
// verifies every balance against an independent model:
//
//	go run ./cmd/annals demo                       # 1,000 accounts, 100,000 operations, ./annals-demo.db
//	go run ./cmd/annals demo --store memory:       # the in-memory store
//	go run ./cmd/annals demo --accounts 50 --ops 2000 --concurrency 8 --seed 42
//
// Run the demo twice: the second run recovers the accounts of the first and
// continues them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `Usage: annals <command> [flags]

Commands:
  demo    run a bank of event-sourced accounts, restart it and verify every balance
  help    print this help ('annals help demo' for the demo's flags)

Run 'annals demo -h' for the demo's flags.
`

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // the command ran and failed
	exitUsage = 2 // unknown command or bad flags
)

func main() {
	// The first interrupt stops issuing operations; the demo then shuts
	// down, recovers and verifies what it did. A second interrupt kills it.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() { <-ctx.Done(); stop() }()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches args (without the program name) to a command and returns
// the process's exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "demo":
		return exitCode(stderr, "annals demo", runDemo(ctx, stdout, stderr, rest))
	case "help", "-h", "-help", "--help":
		if len(rest) > 0 && rest[0] == "demo" {
			fs, _ := demoFlags(stdout)
			fs.Usage()
			return exitOK
		}
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "annals: unknown command %q\n\n%s", cmd, usage)
		return exitUsage
	}
}

// errUsage marks an error in the command line: exit code 2.
var errUsage = errors.New("usage")

// exitCode maps a command's error to the exit code, printing it.
func exitCode(stderr io.Writer, prog string, err error) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errUsage):
		// The flag package has already printed the error and the usage.
		return exitUsage
	default:
		fmt.Fprintf(stderr, "%s: %v\n", prog, err)
		return exitError
	}
}
